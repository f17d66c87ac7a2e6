"""Documents of any length: a ragged sample longer than a record (1 MiB) spans
several records of its store, and every reader sees one sample: indexing, the loader's
ragged batches, packing in both row orders, deletes and appends."""

import numpy as np
import pytest

import zrecord

EOS = 0
LONG = 3_000_000  # tokens of the corpus's long document: 12 MB as uint32, 12 pieces


def docs(n_short=300, seed=0, long=LONG):
    """Short documents with a long one among them (document 7), every token unique
    (document i's tokens count up from its own start), so a read says where it came from."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 500, size=n_short)
    lengths[7] = long
    starts = np.concatenate([[1], 1 + np.cumsum(lengths)[:-1]])
    return [np.arange(s, s + n, dtype=np.uint32) for s, n in zip(starts, lengths)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = docs()
    path = tmp_path_factory.mktemp("long") / "ds"
    ds = zrecord.Dataset.write(path, {"tokens": iter(d), "id": np.arange(len(d))}, shard_records=100)
    return ds, d


def test_a_ten_million_token_document_round_trips(tmp_path):
    d = docs(20, seed=1, long=10_000_000)
    ds = zrecord.Dataset.write(tmp_path / "ds", {"tokens": iter(d)})
    assert len(ds) == len(d)
    np.testing.assert_array_equal(ds[7]["tokens"], d[7])
    got = ds[[8, 7, 6]]["tokens"]
    for k, i in enumerate([8, 7, 6]):
        np.testing.assert_array_equal(got[k], d[i])
    assert '"long"' in (ds.path / "dataset.json").read_text()


def test_the_loader_hands_the_long_document_out_whole(corpus):
    ds, d = corpus
    with zrecord.DataLoader(ds, batch_size=10, mode=zrecord.Sampler.Mode.SEQUENTIAL, num_workers=2) as dl:
        b = next(dl)
    off = b["tokens_offsets"]
    np.testing.assert_array_equal(b["tokens"][off[7]:off[8]], d[7])
    assert off[8] - off[7] == LONG


@pytest.mark.parametrize("row_order", ["shuffled", "sequential"])
def test_packing_reads_it_as_one_document_every_token_once(corpus, row_order):
    ds, d = corpus
    seq_len, rows = 4096, 16
    pack = zrecord.Pack(seq_len=seq_len, eos=EOS, row_order=row_order)
    total = sum(len(x) for x in d)
    with zrecord.DataLoader(ds, batch_size=rows, pack=pack, seed=5, num_workers=2) as dl:
        if row_order == "shuffled":
            batches = list(dl.epoch_iter())
        else:  # sequential rows have no epoch boundary: the epoch's whole batches
            batches = [next(dl) for _ in range((total + len(d)) // (rows * seq_len))]
    flat = np.concatenate([b["tokens"].reshape(-1) for b in batches])
    body = flat[flat != EOS]
    # Every token of the epoch's whole batches at most once, and no more than the last
    # partial batch's tokens missing.
    assert len(np.unique(body)) == len(body)
    assert total - len(body) <= rows * seq_len
    # The long document's tokens come in its own order wherever a row holds a run of them.
    lo, hi = int(d[7][0]), int(d[7][-1])
    mine = body[(body >= lo) & (body <= hi)]
    assert len(mine) >= LONG - rows * seq_len
    if row_order == "sequential":
        assert np.all(np.diff(mine.astype(np.int64)) == 1), "the long document was cut or reordered"


def test_deleting_around_it_and_appending_another(tmp_path):
    d = docs(40, seed=2)
    ds = zrecord.Dataset.write(tmp_path / "ds", {"tokens": iter(d)}, dtype={"tokens": "uint32"})
    ds.delete([3, 20])
    kept = [x for i, x in enumerate(d) if i not in (3, 20)]
    extra = np.arange(2_000_000, dtype=np.uint32)
    ds = zrecord.Dataset.write(tmp_path / "ds", {"tokens": [extra]}, mode="append")
    ds = zrecord.Dataset(tmp_path / "ds")
    assert len(ds) == len(kept) + 1
    for i, x in enumerate(kept + [extra]):
        np.testing.assert_array_equal(ds[i]["tokens"], x)


def test_a_long_string_and_bytes_value(tmp_path):
    text = "ünïcode " * 300_000  # 3 MB of UTF-8, cut mid-character at 1 MiB boundaries
    blob = bytes(range(256)) * 20_000
    ds = zrecord.Dataset.write(tmp_path / "ds", {"text": ["a", text, ""], "blob": [b"", b"x", blob]})
    assert ds[1]["text"] == text and ds[2]["blob"] == blob
    assert ds[:]["text"] == ["a", text, ""]
