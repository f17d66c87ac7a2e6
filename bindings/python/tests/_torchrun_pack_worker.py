"""One rank of the packed torchrun job of test_torchrun_pack.py:
`torchrun ... _torchrun_pack_worker.py MODE JSON`, JSON the options (data, out, rows,
seq_len, seed, workers, prefetch, save_at, steps, state, linger).

Every rank joins a gloo process group, makes a packed DataLoader without rank or world
size (torch.distributed gives them), reads token rows through zrecord.torch.loader and
takes part in an all_reduce every step, as a training step would. Its rows go to
OUT/rank{r}.npy, shaped (steps, rows, seq_len).

- `kill`: after `save_at` steps, saves its rows and the state, then reads on (reporting its
  step in OUT/rank{r}.progress) until it is killed; it exits by itself after `linger` s.
- `resume`: starts from `state` and reads `steps` steps.
"""

import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import zrecord
import zrecord.torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ml import write_json  # noqa: E402

EOS = 1



def main() -> None:
    mode, opts = sys.argv[1], json.loads(sys.argv[2])
    assert mode in ("kill", "resume"), mode
    a = types.SimpleNamespace(**{"seed": 0, "workers": 2, "prefetch": 2, "save_at": 0, "steps": 0, "state": None,
                              "linger": 120.0, **opts})
    out = Path(a.out)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    state = json.loads(Path(a.state).read_text()) if a.state else None
    loader = zrecord.DataLoader(
        zrecord.Dataset(a.data), batch_size=a.rows, mode=zrecord.Sampler.Mode.SHUFFLE, seed=a.seed,
        num_workers=a.workers, prefetch_size=a.prefetch, state=state,
        pack=zrecord.Pack(field="tokens", seq_len=a.seq_len, mode="concat", eos=EOS),
    )
    batches = zrecord.torch.loader(loader)
    rows = []
    one = torch.ones(1, dtype=torch.int64)

    def step() -> None:
        batch = next(batches)
        tokens = batch["tokens"]
        assert tuple(tokens.shape) == (a.rows, a.seq_len), tokens.shape
        assert tuple(batch["segment_ids"].shape) == tuple(batch["positions"].shape) == (a.rows, a.seq_len)
        rows.append(tokens.numpy().copy())
        n = one.clone()
        dist.all_reduce(n)
        assert n.item() == world

    if mode == "kill":
        for _ in range(a.save_at):
            step()
        np.save(out / f"rank{rank}.npy", np.stack(rows))
        write_json(out / f"rank{rank}.json", {"pid": os.getpid(), "state": batches.state_dict()})
        end = time.monotonic() + a.linger
        while time.monotonic() < end:
            step()
            write_json(out / f"rank{rank}.progress", {"step": len(rows)})
            time.sleep(0.01)
        sys.exit(f"rank {rank} was not killed within {a.linger} s")
    for _ in range(a.steps):
        step()
    np.save(out / f"rank{rank}.npy", np.stack(rows))
    write_json(out / f"rank{rank}.json", {"state": batches.state_dict()})
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
