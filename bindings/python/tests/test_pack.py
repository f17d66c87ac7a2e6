"""Packed token batches: DataLoader(ds, batch_size=B, pack=zrecord.Pack(...)).

Every token says which document and offset it is (document i holds i * 1000 + k), so the
tests read back from the rows exactly which pieces of which documents they hold.
"""

import json

import numpy as np
import pytest

import zrecord

EOS, BOS = 7, 5


def doc(i, salt=0):
    return np.arange(1 + (i * 37) % 90, dtype=np.uint32) + np.uint32(salt * 10_000_000 + i * 1000 + 100)


def write(path, n, salt=0, shard_records=None):
    kw = {} if shard_records is None else {"shard_records": shard_records}
    zrecord.Dataset.write(path, {"tokens": (doc(i, salt) for i in range(n)), "id": np.arange(n)}, **kw)
    return zrecord.Dataset(path)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write(tmp_path_factory.mktemp("pack") / "docs", 400, shard_records=150)


def loader(ds, rows, pack, **kw):
    kw = {"mode": zrecord.Sampler.Mode.SHUFFLE, "seed": 3, "num_workers": 2, **kw}
    return zrecord.DataLoader(ds, batch_size=rows, pack=pack, **kw)


def virtual(i, salt=0, bos=False, eos=True):
    parts = ([np.array([BOS], np.uint32)] if bos else []) + [doc(i, salt)] + ([np.array([EOS], np.uint32)] if eos else [])
    return np.concatenate(parts)


def doc_of(token, salt=0):
    return (int(token) - salt * 10_000_000) // 1000


def test_concat_batches_are_rows_of_the_documents_in_order(ds):
    pack = zrecord.Pack(field="tokens", seq_len=64, mode="concat", eos=EOS)
    with loader(ds, 4, pack, mode=zrecord.Sampler.Mode.SEQUENTIAL) as dl:
        batches = [next(dl) for _ in range(30)]
        assert dl.stats["padding_fraction"] == 0.0
        assert dl.steps_per_epoch is None and dl.epoch is None
    b = batches[0]
    assert set(b) == {"tokens", "segment_ids", "positions"}
    assert b["tokens"].dtype == np.uint32 and b["tokens"].shape == (4, 64)
    assert b["segment_ids"].dtype == b["positions"].dtype == np.int32
    flat = np.concatenate([x["tokens"].reshape(-1) for x in batches])
    expect = np.concatenate([virtual(i) for i in range(400)])
    np.testing.assert_array_equal(flat, expect[: len(flat)])
    for x in batches:
        for tokens, seg, pos in zip(x["tokens"], x["segment_ids"], x["positions"]):
            assert seg[0] == 1 and pos[0] == 0
            # A new segment starts after each eos, and positions restart there.
            starts = np.flatnonzero(np.r_[False, tokens[:-1] == EOS])
            assert np.all(pos[starts] == 0) and np.all(np.diff(seg) == np.isin(np.arange(1, 64), starts))


def test_concat_shuffle_epoch_holds_every_token_once(ds):
    pack = zrecord.Pack(seq_len=50, mode="concat", eos=EOS, bos=BOS, row_order="sequential")
    total = sum(len(virtual(i, bos=True)) for i in range(400))
    steps = -(-total // (3 * 50))
    with loader(ds, 3, pack) as dl:
        flat = np.concatenate([next(dl)["tokens"].reshape(-1) for _ in range(steps)])[:total]
    body = flat[(flat != EOS) & (flat != BOS)]
    expect = np.concatenate([doc(i) for i in range(400)])
    assert len(body) == len(expect)
    np.testing.assert_array_equal(np.sort(body), np.sort(expect))  # every token exactly once
    assert not np.array_equal(body, expect), "SHUFFLE read the documents in order"
    assert (flat == BOS).sum() == (flat == EOS).sum() == 400


def test_shuffled_rows_have_epochs_of_distinct_rows_from_across_the_epoch(ds):
    # Packed SHUFFLE has epochs (epoch_iter works), no row crosses into the next epoch, and
    # a batch draws from across the epoch, not a handful of consecutive documents. Without
    # mode= a packed loader reads documents without replacement, not IID.
    pack = zrecord.Pack(seq_len=50, eos=EOS, bos=BOS)
    total = sum(len(virtual(i, bos=True)) for i in range(400))
    with zrecord.DataLoader(ds, batch_size=4, pack=pack, seed=3, num_workers=2) as dl:
        assert dl.mode == zrecord.Sampler.Mode.SHUFFLE
        assert dl.steps_per_epoch == total // 50 // 4
        epochs = []
        for e in range(2):
            assert dl.epoch == e and dl.steps_left_in_epoch == dl.steps_per_epoch
            epochs.append([b["tokens"] for b in dl.epoch_iter()])
        assert dl.epoch == 2
    expect = np.sort(np.concatenate([doc(i) for i in range(400)]))
    for batches in epochs:
        assert len(batches) == total // 50 // 4
        flat = np.concatenate([b.reshape(-1) for b in batches])
        body = flat[(flat != EOS) & (flat != BOS)]
        assert len(np.unique(body)) == len(body), "a token twice in one epoch"
        assert np.isin(body, expect).all()
        assert len(expect) - len(body) <= 5 * 50  # only the tail past the last whole batch
        # Rows of one batch come from across the epoch, not from a few neighbours.
        spread = [len({doc_of(t) for t in b[(b != EOS) & (b != BOS)]}) for b in batches]
        assert np.median(spread) >= 6, spread
    assert not np.array_equal(epochs[0][0], epochs[1][0])
    with pytest.raises(ValueError, match="row_order"):
        zrecord.Pack(row_order="random")


def test_best_fit_keeps_documents_whole_and_reports_padding(ds):
    pack = zrecord.Pack(seq_len=128, mode="best_fit", eos=EOS, pad=0)
    with loader(ds, 8, pack) as dl:
        batches = [next(dl) for _ in range(12)]
        fraction = dl.stats["padding_fraction"]
    pads = 0
    for x in batches:
        for tokens, seg, pos in zip(x["tokens"], x["segment_ids"], x["positions"]):
            pads += int((seg == 0).sum())
            assert np.all(tokens[seg == 0] == 0)
            for s in np.unique(seg[seg > 0]):
                piece = tokens[seg == s]
                np.testing.assert_array_equal(piece, virtual(doc_of(piece[0])))  # whole: all are < 128
                np.testing.assert_array_equal(pos[seg == s], np.arange(len(piece)))
    assert fraction == pytest.approx(pads / (12 * 8 * 128))
    assert 0 < fraction < 0.2


@pytest.mark.parametrize("mode", ["concat", "best_fit"])
def test_resume_with_other_world_sizes_and_workers_is_exact(ds, mode):
    pack = zrecord.Pack(seq_len=40, mode=mode, eos=EOS)

    def run(world, rows, workers, steps, state=None):
        outs, states = [], []
        for rank in range(world):
            with loader(ds, rows, pack, rank=rank, world_size=world, num_workers=workers, state=state) as dl:
                outs.append([next(dl)["tokens"] for _ in range(steps)])
                states.append(dl.state_dict())
        assert all(s == states[0] for s in states)
        # Global batch by global batch, the ranks' rows in rank order.
        return [np.concatenate([o[k] for o in outs]) for k in range(steps)], states[0]

    whole, _ = run(1, 8, 3, 21)
    a, state = run(4, 2, 2, 6)
    assert len(json.dumps(state)) < 4096
    b, state = run(1, 8, 0, 8, state)
    c, _ = run(2, 4, 1, 7, state)
    np.testing.assert_array_equal(np.stack(a + b + c), np.stack(whole))


def test_mixture_weights_count_tokens(tmp_path):
    short = write(tmp_path / "short", 3000, salt=1)
    long_docs = [np.full(300 + i % 200, 50_000_000 + i, np.uint32) for i in range(500)]
    zrecord.Dataset.write(tmp_path / "long", {"tokens": long_docs, "id": np.arange(500)})
    mix = zrecord.Mixture([short, zrecord.Dataset(tmp_path / "long")], weights=[0.25, 0.75], seed=1)
    pack = zrecord.Pack(seq_len=1024, mode="concat")
    counts = np.zeros(2)
    with zrecord.DataLoader(mix, batch_size=16, pack=pack, num_workers=2) as dl:
        while counts.sum() < 1_000_000:
            x = next(dl)
            assert x["source"].shape == x["tokens"].shape and x["source"].dtype == np.int32
            is_long = x["tokens"] >= 50_000_000
            np.testing.assert_array_equal(x["source"], is_long.astype(np.int32))
            counts += [(~is_long).sum(), is_long.sum()]
    share = counts / counts.sum()
    assert abs(share[1] - 0.75) < 0.005, share


def test_every_batch_of_a_mixture_holds_its_share(tmp_path):
    # Every 32-row batch of a 0.7/0.3 mixture holds 22 or 23 rows of the first source; rows
    # cut in order would give anywhere from 0 to 32.
    a = write(tmp_path / "a", 600, salt=1)
    b = write(tmp_path / "b", 600, salt=2)
    mix = zrecord.Mixture([a, b], weights=[0.7, 0.3], seed=4)
    first = []
    with zrecord.DataLoader(mix, batch_size=32, pack=zrecord.Pack(seq_len=64), num_workers=2) as dl:
        assert dl.steps_per_epoch is None
        for _ in range(60):
            x = next(dl)
            source = x["source"]
            assert (source == source[:, :1]).all(), "a row of two sources"
            np.testing.assert_array_equal(source[:, 0], (x["tokens"][:, 0] >= 20_000_000).astype(np.int32))
            first.append(int((source[:, 0] == 0).sum()))
    assert set(first) <= {22, 23}, first


def test_row_indexes_are_kept_in_a_directory(ds, tmp_path):
    # Each epoch's row index of shuffled rows is kept where the next loader (a
    # rank, a worker process, a later run) reads it instead of every document's length.
    rows = tmp_path / "rows"

    def batches(index_dir, keep_order=0):
        # keep_order=0: the index, not the order a dataset this small keeps in memory.
        with loader(ds, 4, zrecord.Pack(seq_len=64, index_dir=index_dir, keep_order=keep_order)) as dl:
            return [next(dl)["tokens"] for _ in range(5)]

    first = batches(rows)
    [saved] = list(rows.iterdir())
    assert saved.name.endswith("-0.zrri")
    np.testing.assert_array_equal(np.stack(batches(str(rows))), np.stack(first))
    saved.write_bytes(b"not an index")
    np.testing.assert_array_equal(np.stack(batches(rows)), np.stack(first))
    assert saved.read_bytes()[:4] == b"ZRRI", "rebuilt and saved again"
    np.testing.assert_array_equal(np.stack(batches(False)), np.stack(first))
    saved.unlink()
    np.testing.assert_array_equal(np.stack(batches(rows, keep_order=None)), np.stack(first))
    assert not saved.exists(), "an order kept in memory needs no index"
    with pytest.raises(ValueError, match="index_dir"):
        zrecord.Pack(index_dir=True)


def test_bad_packs_are_refused_with_the_reason(ds, tmp_path):
    with pytest.raises(ValueError, match="concat.*best_fit"):
        zrecord.Pack(mode="first_fit")
    with pytest.raises(ValueError, match="seq_len"):
        zrecord.Pack(seq_len=0)
    with pytest.raises(TypeError, match="eos"):
        zrecord.Pack(eos=1.5)
    with pytest.raises(ValueError, match="window"):
        zrecord.Pack(window=10)
    with pytest.raises(ValueError, match=r'"id".*ragged|ragged.*"id"'):
        loader(ds, 2, zrecord.Pack(field="id", seq_len=8))
    with pytest.raises(ValueError, match=r'"text"'):
        loader(ds, 2, zrecord.Pack(field="text", seq_len=8))
    with pytest.raises(ValueError, match="eos id 4294967296"):
        loader(ds, 2, zrecord.Pack(seq_len=8, eos=2**32))
    with pytest.raises(ValueError, match="on_error=skip"):
        loader(ds, 2, zrecord.Pack(seq_len=8), on_error="skip")
    with pytest.raises(TypeError, match="zrecord.Pack"):
        loader(ds, 2, {"seq_len": 8})
    zrecord.Dataset.write(tmp_path / "floats", {"tokens": [np.ones(3, np.float32)]})
    with pytest.raises(ValueError, match="integer tokens"):
        loader(zrecord.Dataset(tmp_path / "floats"), 1, zrecord.Pack(seq_len=8))
    # A packed state does not resume a loader of samples, nor another packing.
    with loader(ds, 2, zrecord.Pack(seq_len=8)) as dl:
        next(dl)
        state = dl.state_dict()
    with pytest.raises(ValueError, match="packed rows"):
        zrecord.DataLoader(ds, batch_size=2, mode=zrecord.Sampler.Mode.SHUFFLE, seed=3, state=state)
    with pytest.raises(ValueError, match="16 tokens"):
        loader(ds, 2, zrecord.Pack(seq_len=16), state=state)


def test_transform_and_repr(ds):
    pack = zrecord.Pack(seq_len=16, mode="best_fit", eos=EOS)
    assert repr(pack) == "zrecord.Pack(field='tokens', seq_len=16, mode='best_fit', eos=7, pad=0)"
    with loader(ds, 2, pack, transform=lambda b: {**b, "n": int((b["segment_ids"] > 0).sum())}) as dl:
        x = next(dl)
        assert x["n"] == int((x["segment_ids"] > 0).sum())
        assert "pack=zrecord.Pack(field='tokens', seq_len=16" in repr(dl)
