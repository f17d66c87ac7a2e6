"""One rank of the torchrun jobs of test_torchrun.py: `torchrun ... _torchrun_worker.py MODE JSON`,
JSON the options (store, out, n, batch, seed, workers, prefetch, save_at, steps, state, linger).

Every rank joins a gloo process group, makes a DataLoader without rank or world size (they
come from torch.distributed), reads through zrecord.torch.loader, checks each batch's data
against its labels, and takes part in an all_reduce every step, as a training step would.
What it read goes to OUT/rank{r}.npy, what it saw to OUT/rank{r}.json.

- `epoch`: one SHUFFLE epoch (`steps_per_epoch` steps), then an all_reduce of the step count.
- `kill`: after `save_at` steps, saves the state and the labels so far, then keeps reading
  (and reporting its step in OUT/rank{r}.progress) until it is killed; it exits by itself
  after `linger` seconds so that a lost test leaves nothing running.
- `resume`: starts from `state` and reads `steps` steps.
- `disagree`: rank 0 starts from `state`, the others fresh (the mistake of a multi-host job
  whose state file is on rank 0's disk only); what the first two `next()` raised goes to
  OUT/rank{r}.json.
"""

import types
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import zrecord
import zrecord.torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ml import sample_data, write_json  # noqa: E402



def main() -> None:
    # One JSON argument, not options: torchrun's own parser would take any option that is
    # a prefix of one of its own (--n, --node...) as its own.
    mode, opts = sys.argv[1], json.loads(sys.argv[2])
    assert mode in ("epoch", "kill", "resume", "disagree"), mode
    a = types.SimpleNamespace(**{"seed": 0, "workers": 2, "prefetch": 2, "save_at": 0, "steps": 0, "state": None,
                              "linger": 120.0, **opts})
    a.store, a.out = Path(a.store), Path(a.out)
    a.state = Path(a.state) if a.state else None

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    state = json.loads(a.state.read_text()) if a.state else None
    if mode == "disagree" and rank != 0:
        state = None
    loader = zrecord.DataLoader(
        zrecord.Dataset(a.store / "data.zr"), zrecord.Dataset(a.store / "label.zr"),
        batch_size=a.batch, mode=zrecord.Sampler.Mode.SHUFFLE, seed=a.seed,
        num_workers=a.workers, prefetch_size=a.prefetch, state=state,
    )
    batches = zrecord.torch.loader(loader)
    samples = torch.from_numpy(sample_data(a.n))
    labels = []
    one = torch.ones(1, dtype=torch.int64)

    def step() -> None:
        batch = next(batches)
        x, y = batch["data"], batch["label"]
        assert x.shape == (a.batch, 3) and y.shape == (a.batch,), (x.shape, y.shape)
        assert torch.equal(x, samples[y]), "data and label of a batch disagree"
        labels.append(y.numpy().copy())
        n = one.clone()
        dist.all_reduce(n)  # a collective every step: a rank that ran out would hang here
        assert n.item() == world

    seen = {"rank": rank, "world": world, "steps_per_epoch": batches.steps_per_epoch,
            "loader_rank": getattr(loader, "rank", None), "loader_world": getattr(loader, "world_size", None)}
    if mode == "disagree":
        raised = []
        for _ in range(2):
            try:
                step()
            except zrecord.RanksDisagreeError as e:
                raised.append({"type": type(e).__name__, "message": str(e), "differences": e.differences})
        seen.update(raised=raised, steps=len(labels))
    if mode == "epoch":
        for _ in range(batches.steps_per_epoch):
            step()
        total = torch.tensor([len(labels)], dtype=torch.int64)
        dist.all_reduce(total)
        seen.update(steps=len(labels), all_reduced_steps=total.item())
    elif mode == "kill":
        for _ in range(a.save_at):
            step()
        np.save(a.out / f"rank{rank}.npy", np.stack(labels))
        write_json(a.out / f"rank{rank}.json", {**seen, "pid": os.getpid(), "state": batches.state_dict()})
        end = time.monotonic() + a.linger
        while time.monotonic() < end:
            step()
            write_json(a.out / f"rank{rank}.progress", {"step": len(labels)})
            time.sleep(0.01)
        sys.exit(f"rank {rank} was not killed within {a.linger} s")
    elif mode == "resume":
        for _ in range(a.steps):
            step()
        seen.update(steps=len(labels), state=batches.state_dict())
    if mode != "kill":
        if labels:
            np.save(a.out / f"rank{rank}.npy", np.stack(labels))
        write_json(a.out / f"rank{rank}.json", seen)
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
