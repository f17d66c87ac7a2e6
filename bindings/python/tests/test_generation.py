"""The generation names the records behind the indices: what changes no record keeps it, so
saved loader states stay valid."""

import os
import subprocess

import numpy as np
import pytest

from zrecord import DataLoader, Dataset

ZR = os.environ.get("ZR")


def test_a_compact_with_nothing_to_reclaim_keeps_saved_states_valid(tmp_path):
    data = Dataset.write(tmp_path / "d", np.arange(4000, dtype=np.int64).reshape(-1, 4))
    labels = Dataset.write(tmp_path / "l", np.arange(1000, dtype=np.int64))
    with DataLoader(data, labels, batch_size=50, mode=2, seed=3, num_workers=1) as loader:
        for _ in range(7):
            next(loader)
        state = loader.state_dict()
        want = [next(loader)["label"] for _ in range(3)]
    before = data.generation
    data.compact()  # the store is dense: nothing moves
    assert data.generation == before
    if ZR:
        data.close()
        out = subprocess.run([ZR, "compact", str(tmp_path / "d")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        data = Dataset(tmp_path / "d")
    with DataLoader(data, labels, batch_size=50, mode=2, seed=3, num_workers=1, state=state) as loader:
        got = [next(loader)["label"] for _ in range(3)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # A delete does change the records behind the indices: the state no longer applies.
    data.delete([3])
    labels.delete([3])
    with pytest.raises(ValueError, match="changed|deleted|compacted|generation|length"):
        DataLoader(data, labels, batch_size=50, mode=2, seed=3, num_workers=1, state=state)
