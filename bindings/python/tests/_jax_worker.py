"""One process of the multi-process JAX job of test_jax_feed.py:

    python _jax_worker.py COORDINATOR NUM_PROCESSES PROCESS_ID STORE OUT BATCH STEPS SAVE_AT SEED

Joins the job through jax.distributed.initialize, makes a DataLoader without rank or world
size (they come from JAX), feeds global arrays through zrecord.jax.loader with prefetch,
and gathers every global batch back to the host (OUT/proc{id}.npz), with the wrapper's and
the loader's own state after SAVE_AT batches (OUT/proc{id}.json). SEED may be a comma list,
one seed per process: then the processes disagree, and what the first two batches raised goes
to OUT/proc{id}.json.
"""

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import zrecord
import zrecord.jax


def main() -> None:
    coordinator, nproc, pid, store, out, batch, steps, save_at, seed = sys.argv[1:]
    seed = seed.split(",")[int(pid)] if "," in seed else seed
    nproc, pid, batch, steps, save_at, seed = map(int, (nproc, pid, batch, steps, save_at, seed))
    store, out = Path(store), Path(out)
    jax.distributed.initialize(coordinator, num_processes=nproc, process_id=pid)
    assert jax.process_count() == nproc and jax.process_index() == pid

    loader = zrecord.DataLoader(
        zrecord.Dataset(store / "data.zr"), zrecord.Dataset(store / "label.zr"),
        batch_size=batch, mode=zrecord.Sampler.Mode.SHUFFLE, seed=seed, num_workers=1,
    )
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), P("batch"))
    batches = zrecord.jax.loader(loader, sharding, prefetch=2)
    total = jax.jit(jnp.sum)
    data, labels, seen = [], [], {"process": pid, "loader_rank": getattr(loader, "rank", None),
                                  "loader_world": getattr(loader, "world_size", None)}
    raised = []
    for i in range(steps):
        try:
            b = next(batches)
        except zrecord.RanksDisagreeError as e:
            raised.append({"message": str(e), "differences": e.differences})
            if len(raised) == 2:
                break
            continue
        assert b["data"].shape == (batch * nproc, 3) and b["data"].sharding == sharding, b["data"]
        assert not b["label"].is_fully_addressable  # a global array: half of it is elsewhere
        gathered = multihost_utils.process_allgather(b["label"], tiled=True)
        # A collective over the global array: every process must agree on its sum.
        assert int(total(b["label"])) == int(gathered.sum())
        labels.append(gathered)
        data.append(multihost_utils.process_allgather(b["data"], tiled=True))
        if i + 1 == save_at:
            seen["state"] = batches.state_dict()
            seen["loader_state"] = loader.state_dict()
    seen["raised"] = raised
    if labels:
        np.savez(out / f"proc{pid}.npz", data=np.stack(data), labels=np.stack(labels))
    (out / f"proc{pid}.json").write_text(json.dumps(seen))
    batches.close()
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
