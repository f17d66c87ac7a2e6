"""Data for test/stream.test.js: loader states saved by the Python package, and the batches
that followed each, for the JS `Stream` to resume and match.

`python stream_fixture.py WORK` writes into WORK
  - `ds`: 100 samples of `idx` (the sample's own index, int64) and a caption, in shards of
    40 (six stores, so the identity folds every store's generation in order);
  - `twin`: the same samples written again (same sizes, same bytes, a store nonce of its
    own each), which a state saved on `ds` must not resume on;
  - `grow`: 60 samples, read 3 steps, then 30 samples appended;
  - `cols`: 50 samples, read 2 steps, then a field added (its identity is then the
    manifest's `rows`, which the column change keeps);
and prints one line, `stream-fixture: ` and JSON: for each loader its state (the
`json.dumps` of `state_dict()`, as a job saves it), the options it ran with and the `idx`
of the batches it returned after saving.
"""

import json
import sys
from pathlib import Path

import numpy as np

import zrecord

SHUFFLE, IID = zrecord.Sampler.Mode.SHUFFLE, zrecord.Sampler.Mode.IID
AFTER = 12  # batches recorded after each save


def write(path: Path, n: int, start: int = 0, mode: str = "create") -> None:
    zrecord.Dataset.write(path, {
        "idx": np.arange(start, start + n, dtype=np.int64),
        "caption": [f"caption {i}" for i in range(start, start + n)],
    }, shard_records=40, mode=mode)


def run(path: Path, mode: int, seed: int, batch: int, steps: int, state=None):
    """A loader read `steps` batches (or resumed from `state`); its state and what follows."""
    loader = zrecord.DataLoader(zrecord.Dataset(path), batch_size=batch, mode=mode, seed=seed, num_workers=0,
                                state=state)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    saved = json.dumps(loader.state_dict())
    after = [next(it)["idx"].tolist() for _ in range(AFTER)]
    loader.close()
    return {"state": saved, "mode": int(mode), "seed": str(seed), "batch": batch, "after": after}


def main() -> None:
    work = Path(sys.argv[1])
    write(work / "ds", 100)
    write(work / "twin", 100)
    out = {
        # 12 steps an epoch: the batches after step 5 cross into epoch 1.
        "shuffle": run(work / "ds", SHUFFLE, 7, 8, 5),
        # A seed past 2^53: the state writes it as a decimal string too.
        "iid": run(work / "ds", IID, 2**60 + 12345, 5, 9),
    }
    write(work / "grow", 60)
    before = run(work / "grow", SHUFFLE, 3, 8, 3)
    write(work / "grow", 30, start=60, mode="append")
    # The saved epoch (7 steps of the 60 samples) finishes, then epochs of all 90 follow.
    resumed = run(work / "grow", SHUFFLE, 3, 8, 0, state=json.loads(before["state"]))
    out["grown"] = {**before, "after": resumed["after"]}
    write(work / "cols", 50)
    before = run(work / "cols", SHUFFLE, 5, 4, 2)
    zrecord.Dataset.add_field(work / "cols", "extra", np.zeros(50, dtype=np.uint8))
    resumed = run(work / "cols", SHUFFLE, 5, 4, 0, state=json.loads(before["state"]))
    out["columns"] = {**before, "after": resumed["after"]}
    print("stream-fixture:", json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
