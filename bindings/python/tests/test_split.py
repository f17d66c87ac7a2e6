"""zrecord.split: disjoint, reproducible train/validation splits by reference,
read by indexing, the DataLoader (samples, packed, finite passes) and resumed only on
themselves."""

import pickle

import numpy as np
import pytest

import zrecord


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "ds"
    docs = [np.arange(1 + i % 13, dtype=np.uint16) + i for i in range(1000)]
    return zrecord.Dataset.write(path, {"tokens": iter(docs), "id": np.arange(1000)}, shard_records=300)


def test_splits_are_disjoint_covering_and_reproducible(ds):
    parts = zrecord.split(ds, {"train": 0.9, "val": 0.07, "test": 0.03}, seed=4)
    assert [len(parts[k]) for k in ("train", "val", "test")] == [900, 70, 30]
    ids = {k: parts[k][:]["id"] for k in parts}
    assert all((np.diff(v) > 0).all() for v in ids.values()), "a split lists its samples in order"
    assert sorted(np.concatenate(list(ids.values())).tolist()) == list(range(1000))
    again = zrecord.split(ds, {"train": 0.9, "val": 0.07, "test": 0.03}, seed=4)
    np.testing.assert_array_equal(again["val"][:]["id"], ids["val"])
    other = zrecord.split(ds, {"train": 0.9, "val": 0.07, "test": 0.03}, seed=5)
    assert not np.array_equal(other["val"][:]["id"], ids["val"])
    # Nothing was copied: the samples are the dataset's.
    k = int(ids["val"][3])
    np.testing.assert_array_equal(parts["val"][3]["tokens"], ds[k]["tokens"])
    assert "split 'val'" in repr(parts["val"])
    with pytest.raises(IndexError):
        parts["val"][70]


def test_loaders_read_a_split_and_its_state_is_its_own(ds):
    parts = zrecord.split(ds, {"train": 0.95, "val": 0.05}, seed=1)
    val_ids = set(parts["val"][:]["id"].tolist())
    with zrecord.DataLoader(parts["val"], batch_size=8, passes=1, num_workers=2) as dl:
        seen = [i for b in dl for i in b["id"][b["valid"]].tolist()]
    assert sorted(seen) == sorted(val_ids)
    with zrecord.DataLoader(parts["train"], batch_size=10, mode=zrecord.Sampler.Mode.SHUFFLE, num_workers=2) as dl:
        assert dl.steps_per_epoch == 95
        epoch = [i for b in dl.epoch_iter() for i in b["id"].tolist()]
        state = dl.state_dict()
    assert len(epoch) == 950 and not set(epoch) & val_ids
    with pytest.raises(ValueError):
        zrecord.DataLoader(parts["val"], batch_size=10, mode=zrecord.Sampler.Mode.SHUFFLE, state=state)
    pack = zrecord.Pack(seq_len=32, eos=0)
    with zrecord.DataLoader(parts["val"], batch_size=2, pack=pack, passes=1, num_workers=1) as dl:
        tokens = np.concatenate([b["tokens"][b["segment_ids"] != 0] for b in dl])
    expect = np.concatenate([np.append(ds[i]["tokens"], np.uint16(0)) for i in sorted(val_ids)])
    np.testing.assert_array_equal(tokens, expect)


def test_a_split_pickles_as_itself_and_refuses_changes(ds):
    val = zrecord.split(ds, {"train": 0.9, "val": 0.1}, seed=2)["val"]
    back = pickle.loads(pickle.dumps(val))
    np.testing.assert_array_equal(back[:]["id"], val[:]["id"])
    with pytest.raises(TypeError, match="whole dataset"):
        val.delete([0])
    with pytest.raises(ValueError, match="split already"):
        zrecord.split(val, {"a": 0.5}, seed=0)
    with pytest.raises(ValueError, match="over 1"):
        zrecord.split(ds, {"a": 0.7, "b": 0.7})
