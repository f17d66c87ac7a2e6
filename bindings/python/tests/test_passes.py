"""Finite passes for evaluation: DataLoader(..., passes=1) reads every sample, or
every packed document, once in order, pads the last batch and stops, on every rank."""

import numpy as np
import pytest

import zrecord

EOS = 9


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("passes") / "ds"
    docs = [np.arange(1 + (i * 7) % 40, dtype=np.uint32) + 100 + 1000 * i for i in range(23)]
    return zrecord.Dataset.write(path, {"tokens": iter(docs), "id": np.arange(23)}, shard_records=10), docs


def test_a_pass_of_samples_reads_each_once_pads_and_ends(ds):
    ds, _ = ds
    seen = []
    for rank in range(2):
        dl = zrecord.DataLoader(ds, batch_size=4, passes=1, rank=rank, world_size=2, num_workers=2,
                                check_ranks=False)
        assert dl.mode == zrecord.Sampler.Mode.SEQUENTIAL and len(dl) == 3
        batches = list(dl)  # ends by itself
        assert len(batches) == 3
        for b in batches:
            assert b["valid"].dtype == bool and b["valid"].shape == (4,)
            seen.extend(b["id"][b["valid"]].tolist())
        assert [int(b["valid"].sum()) for b in batches] == [4, 4, [4, 3][rank]]
        assert dl.valid == [4, 3][rank]
        with pytest.raises(StopIteration):
            next(dl)
        dl.close()
    assert sorted(seen) == list(range(23))


def test_a_packed_pass_holds_every_document_once_then_padding(ds):
    ds, docs = ds
    pack = zrecord.Pack(seq_len=16, eos=EOS)
    with zrecord.DataLoader(ds, batch_size=4, pack=pack, passes=1, num_workers=2) as dl:
        batches = list(dl)
    tokens = np.concatenate([b["tokens"].reshape(-1) for b in batches])
    segments = np.concatenate([b["segment_ids"].reshape(-1) for b in batches])
    expect = np.concatenate([np.append(d, np.uint32(EOS)) for d in docs])
    np.testing.assert_array_equal(tokens[segments != 0], expect)
    assert (segments[len(expect):] == 0).all() and len(tokens) - len(expect) < 4 * 16


def test_a_pass_resumes_to_its_end_and_refuses_other_orders(ds):
    ds, _ = ds
    dl = zrecord.DataLoader(ds, batch_size=5, passes=2, num_workers=0)
    first = [next(dl)["id"].tolist() for _ in range(3)]
    state = dl.state_dict()
    rest = zrecord.DataLoader(ds, batch_size=5, passes=2, num_workers=1, state=state)
    tail = [b["id"][b["valid"]].tolist() for b in rest]
    flat = sum(first, []) + sum(tail, [])
    assert flat == list(range(23)) * 2
    with pytest.raises(ValueError, match="SEQUENTIAL"):
        zrecord.DataLoader(ds, batch_size=4, passes=1, mode=zrecord.Sampler.Mode.SHUFFLE)
    with pytest.raises(ValueError, match="passes"):
        zrecord.DataLoader(ds, batch_size=4, passes=0)
