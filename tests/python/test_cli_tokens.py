"""`zr convert` on-ramps for language-model data: a nanoGPT-style flat token file split at
each end-of-document id, and a .npy of token ids with document offsets. The packed
stream of the result is the file's own stream."""

import subprocess

import numpy as np
import pytest

import zrecord

EOT = 50256


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300)


def documents(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, EOT, size=int(rng.integers(1, 400)), dtype=np.uint16) for _ in range(n)]


def packed_stream(path, seq_len, tokens, eos):
    with zrecord.DataLoader(zrecord.Dataset(path), batch_size=4, mode=zrecord.Sampler.Mode.SEQUENTIAL,
                            num_workers=1, pack=zrecord.Pack(seq_len=seq_len, eos=eos)) as dl:
        out = []
        while sum(map(len, out)) < tokens:
            out.append(next(dl)["tokens"].reshape(-1))
    return np.concatenate(out)[:tokens]


def test_flat_token_file_becomes_documents_and_packs_back_to_itself(zr, tmp_path):
    docs = documents(3000)
    flat = np.concatenate([np.append(d, np.uint16(EOT)) for d in docs])
    (tmp_path / "train.bin").write_bytes(flat.tobytes())  # what nanoGPT's prepare.py writes
    p = run(zr, "convert", str(tmp_path / "train.bin"), str(tmp_path / "ds"), "--tokens", "uint16",
            "--eos", str(EOT), "--shard-records", "1000", "--chunk-mib", "1")
    assert p.returncode == 0, p.stderr
    assert "added 3000 samples" in p.stdout
    ds = zrecord.Dataset(tmp_path / "ds")
    assert len(ds) == 3000 and ds.fields[0].name == "tokens" and ds.fields[0].dtype == np.uint16
    for i in (0, 1, 1234, 2999):
        np.testing.assert_array_equal(ds[i]["tokens"], docs[i])
    np.testing.assert_array_equal(packed_stream(tmp_path / "ds", 256, len(flat), EOT), flat)


def test_edges_of_a_token_file(zr, tmp_path):
    # Two ids in a row (an empty document) and tokens after the last id.
    flat = np.array([5, 6, EOT, EOT, 7, EOT, 8, 9], np.uint16)
    (tmp_path / "t.bin").write_bytes(flat.tobytes())
    # One rule for empty documents in every writer. Refused by default, naming
    # the document and the way out; nothing is written.
    p = run(zr, "convert", str(tmp_path / "t.bin"), str(tmp_path / "ds"), "--tokens", "uint16", "--eos", str(EOT))
    assert p.returncode != 0
    assert "sample 1 is empty" in p.stderr and "--skip-empty" in p.stderr, p.stderr
    assert not (tmp_path / "ds").exists()
    p = run(zr, "convert", str(tmp_path / "t.bin"), str(tmp_path / "ds"), "--tokens", "uint16", "--eos", str(EOT),
            "--skip-empty")
    assert p.returncode == 0, p.stderr
    assert "1 empty documents" in p.stderr and "left out" in p.stderr
    ds = zrecord.Dataset(tmp_path / "ds")
    assert [list(ds[i]["tokens"]) for i in range(len(ds))] == [[5, 6], [7], [8, 9]]


@pytest.mark.parametrize("args, message", [
    (["--tokens", "uint16"], "--tokens needs --eos"),
    (["--eos", "3"], "--eos goes with --tokens"),
    (["--tokens", "float32", "--eos", "3"], "--tokens takes a token dtype (uint8, uint16, int32, uint32, int64)"),
    (["--tokens", "uint16", "--eos", "-1"], "--eos takes a token id"),
    (["--tokens", "uint16", "--eos", "70000"], "--eos 70000 does not fit"),
    (["--tokens", "uint32", "--eos", "3"], "not a whole number of 4-byte tokens"),
])
def test_bad_token_conversions_say_why_and_leave_nothing(zr, tmp_path, args, message):
    (tmp_path / "t.bin").write_bytes(np.arange(7, dtype=np.uint16).tobytes())  # 14 bytes
    p = run(zr, "convert", str(tmp_path / "t.bin"), str(tmp_path / "out"), *args)
    assert p.returncode == 2, p.stdout
    assert message in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_a_document_longer_than_a_record_is_one_sample(zr, tmp_path):
    # A 600,000-token document is one sample, not a failed conversion ("longer than a record").
    long_doc = (np.arange(600_000) % 50_000).astype(np.uint16)
    flat = np.concatenate([np.array([1, 2, EOT], np.uint16), long_doc, np.array([EOT, 9], np.uint16)])
    (tmp_path / "t.bin").write_bytes(flat.tobytes())
    p = run(zr, "convert", str(tmp_path / "t.bin"), str(tmp_path / "out"), "--tokens", "uint16", "--eos", str(EOT))
    assert p.returncode == 0, p.stderr
    ds = zrecord.Dataset(tmp_path / "out")
    assert len(ds) == 3
    np.testing.assert_array_equal(ds[1]["tokens"], long_doc)
    np.testing.assert_array_equal(packed_stream(tmp_path / "out", 1024, len(flat), EOT), flat)
    p = run(zr, "verify", str(tmp_path / "out"))
    assert p.returncode == 0, p.stdout + p.stderr


def test_token_ids_with_document_offsets(zr, tmp_path):
    docs = documents(500, seed=1)
    src = tmp_path / "src"
    src.mkdir()
    np.save(src / "tokens.npy", np.concatenate(docs))
    np.save(src / "tokens_offsets.npy", np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64))
    p = run(zr, "convert", str(src), str(tmp_path / "ds"))
    assert p.returncode == 0, p.stderr
    flat = np.concatenate([np.append(d, np.uint16(EOT)) for d in docs])
    np.testing.assert_array_equal(packed_stream(tmp_path / "ds", 100, len(flat), EOT), flat)


def write_megatron(prefix, seqs, dtype=np.uint16, code=8, docs=None):
    """Megatron-LM's MMIDIDX index and data files, written from the format's description."""
    import struct

    data = b"".join(np.asarray(s, dtype).tobytes() for s in seqs)
    (prefix.parent / (prefix.name + ".bin")).write_bytes(data)
    lengths = np.array([len(s) for s in seqs], np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize)])
    doc_idx = np.arange(len(seqs) + 1, dtype=np.int64) if docs is None else np.asarray(docs, np.int64)
    header = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code)
    header += struct.pack("<Q", len(seqs)) + struct.pack("<Q", len(doc_idx))
    body = lengths.tobytes() + pointers.astype(np.int64).tobytes() + doc_idx.tobytes()
    (prefix.parent / (prefix.name + ".idx")).write_bytes(header + body)


def test_a_megatron_indexed_dataset_converts_sequence_by_sequence(zr, tmp_path):
    # Megatron-LM's .bin/.idx (what preprocess_data.py writes) converts too.
    seqs = documents(400, seed=3) + [(np.arange(700_000) % 50_000).astype(np.uint16)]
    write_megatron(tmp_path / "corpus_text_document", seqs)
    p = run(zr, "convert", str(tmp_path / "corpus_text_document.bin"), str(tmp_path / "ds"), "--megatron",
            "--shard-records", "150")
    assert p.returncode == 0, p.stderr
    ds = zrecord.Dataset(tmp_path / "ds")
    assert len(ds) == len(seqs) and ds.fields[0].dtype == np.uint16
    for i in (0, 7, 399, 400):
        np.testing.assert_array_equal(ds[i]["tokens"], seqs[i])
    flat = np.concatenate([np.append(s, np.uint16(EOT)) for s in seqs])
    np.testing.assert_array_equal(packed_stream(tmp_path / "ds", 512, 20_000, EOT), flat[:20_000])
    # int32 tokens keep their dtype; a damaged index is named.
    write_megatron(tmp_path / "wide", [np.array([70_000, 1], np.int32)], dtype=np.int32, code=4)
    p = run(zr, "convert", str(tmp_path / "wide.bin"), str(tmp_path / "w"), "--megatron")
    assert p.returncode == 0, p.stderr
    assert zrecord.Dataset(tmp_path / "w")[0]["tokens"].tolist() == [70_000, 1]
    (tmp_path / "wide.bin").write_bytes(b"\0" * 4)
    p = run(zr, "convert", str(tmp_path / "wide.bin"), str(tmp_path / "w2"), "--megatron")
    assert p.returncode != 0 and "sequence 0" in p.stderr and "wide.bin" in p.stderr, p.stderr
    assert not (tmp_path / "w2").exists()
    (tmp_path / "wide.idx").write_bytes(b"not an index at all, not at all")
    p = run(zr, "convert", str(tmp_path / "wide.bin"), str(tmp_path / "w2"), "--megatron")
    assert p.returncode != 0 and "MMIDIDX" in p.stderr, p.stderr
