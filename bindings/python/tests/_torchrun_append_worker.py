"""One rank of test_appends_under_a_run.py's torchrun job: `torchrun ... _torchrun_append_worker.py JSON`,
JSON the options (path, out, batch, stop, steps).

Every rank joins a gloo process group and reads a SHUFFLE DataLoader of the dataset at
`path` (rank and world size from torch.distributed), taking part in an all_reduce every
step as a training step would. At step `stop` the ranks meet, rank 0 appends 500 rows, and
they read on. What each rank read goes to OUT/rank{r}.npy.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from zrecord import DataLoader, Dataset


def main() -> None:
    a = json.loads(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    labels = []
    with DataLoader(Dataset(a["path"]), batch_size=a["batch"], mode=2, seed=3, num_workers=2) as loader:
        for step in range(a["steps"]):
            if step == a["stop"]:
                dist.barrier()
                if rank == 0:
                    Dataset.write(a["path"], {"label": np.arange(1000, 1500)}, mode="append").close()
                dist.barrier()
            labels.append(next(loader)["label"])
            dist.all_reduce(torch.ones(1))
    np.save(Path(a["out"]) / f"rank{rank}.npy", np.array(labels, dtype=np.int64))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
