"""Text in, tokens out: `zr convert --tokenizer` and zrecord.tokenize encode a
corpus with a tokenizer.json the test trains itself (no download) and equal the Python
`tokenizers` package's ids token for token, from JSON Lines, text files, Parquet and
iterables; bad input names the file and line."""

import json
import subprocess

import numpy as np
import pytest

import zrecord

tokenizers = pytest.importorskip("tokenizers")

EOS = 0


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("tok")
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "épsilon", "ñandú", "日本語", "code()", "x = 1;", "\n", "  ", "🎉", "the"]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(1, 200)))) for _ in range(1500)]
    docs[3] = " ".join(words * 5000)  # one long document (about 240 KB)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    tok.save(str(d / "tokenizer.json"))
    with open(d / "corpus.jsonl", "w") as f:
        for k, text in enumerate(docs):
            f.write(json.dumps({"id": k, "text": text}) + "\n")
    expect = [e.ids for e in tok.encode_batch(docs)]
    return d, docs, expect


def tokens_of(path):
    ds = zrecord.Dataset(path)
    return [ds[i]["tokens"].tolist() for i in range(len(ds))]


def test_zr_convert_tokenizes_jsonl_as_python_tokenizers_does(zr, corpus, tmp_path):
    d, _, expect = corpus
    p = run(zr, "convert", str(d / "corpus.jsonl"), str(tmp_path / "out"), "--tokenizer", str(d / "tokenizer.json"),
            "--eos", str(EOS))
    assert p.returncode == 0, p.stderr
    assert "tokens from" in p.stderr and "MB/s" in p.stderr
    ds = zrecord.Dataset(tmp_path / "out")
    assert ds.fields[0].dtype == np.uint16
    assert tokens_of(tmp_path / "out") == [e + [EOS] for e in expect]


def test_tokenize_from_python_files_parquet_and_iterables(corpus, tmp_path):
    d, docs, expect = corpus
    ds = zrecord.tokenize(d / "corpus.jsonl", tmp_path / "a", tokenizer=d / "tokenizer.json")
    assert tokens_of(ds.path) == expect
    # Text files, a directory of them: one document each, in name order.
    (tmp_path / "txt").mkdir()
    for k in range(3):
        (tmp_path / "txt" / f"{k:02d}.txt").write_text(docs[k])
    assert tokens_of(zrecord.tokenize(tmp_path / "txt", tmp_path / "b", tokenizer=d / "tokenizer.json").path) == expect[:3]
    # An iterable of strings (a generator), in blocks.
    ds = zrecord.tokenize((t for t in docs), tmp_path / "c", tokenizer=d / "tokenizer.json", eos=EOS, batch_size=100)
    assert tokens_of(ds.path) == [e + [EOS] for e in expect]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"body": docs[:500]}), tmp_path / "c.parquet", row_group_size=128)
    ds = zrecord.tokenize(tmp_path / "c.parquet", tmp_path / "d", tokenizer=d / "tokenizer.json", text_field="body")
    assert tokens_of(ds.path) == expect[:500]


def test_bad_input_names_the_file_and_line_and_leaves_nothing(zr, corpus, tmp_path):
    d, _, _ = corpus
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"txt": "typo"}\n')
    p = run(zr, "convert", str(bad), str(tmp_path / "out"), "--tokenizer", str(d / "tokenizer.json"))
    assert p.returncode != 0
    assert str(bad) in p.stderr and "line 2" in p.stderr and "--text-field" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()
    bad.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2: not JSON"):
        zrecord.tokenize(bad, tmp_path / "out", tokenizer=d / "tokenizer.json")
    assert not (tmp_path / "out").exists()
    p = run(zr, "convert", str(bad), str(tmp_path / "out"), "--tokenizer", str(tmp_path / "nope.json"))
    assert p.returncode != 0 and "nope.json" in p.stderr
    p = run(zr, "convert", str(bad), str(tmp_path / "out"), "--tokenizer", "t.json", "--tokens", "uint16")
    assert p.returncode == 2 and "give one of them" in p.stderr
    # An empty document encodes to nothing: refused, or left out and counted.
    (tmp_path / "e.jsonl").write_text('{"text": "a"}\n{"text": ""}\n')
    with pytest.raises(ValueError, match="empty"):
        zrecord.tokenize(tmp_path / "e.jsonl", tmp_path / "e", tokenizer=d / "tokenizer.json")
    ds = zrecord.tokenize(tmp_path / "e.jsonl", tmp_path / "e", tokenizer=d / "tokenizer.json", skip_empty=True)
    assert len(ds) == 1


def test_other_json_fields_are_kept_beside_the_tokens(zr, corpus, tmp_path):
    # A corpus's other fields (source, url, score, language) must survive a text import:
    # its strings, numbers and booleans become fields beside the tokens.
    d, docs, expect = corpus
    src = tmp_path / "meta.jsonl"
    rows = [{"text": docs[k], "url": f"https://example.invalid/{k}", "score": k / 4, "n": k - 3,
             "ok": k % 2 == 0, "meta": {"a": 1}} for k in range(40)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = run(zr, "convert", str(src), str(tmp_path / "out"), "--tokenizer", str(d / "tokenizer.json"))
    assert p.returncode == 0, p.stderr
    assert "kept the fields" in p.stderr and "left out the fields meta" in p.stderr, p.stderr
    ds = zrecord.Dataset(tmp_path / "out")
    assert sorted(f.name for f in ds.fields) == ["n", "ok", "score", "tokens", "url"]
    for k in (0, 7, 39):
        s = ds[k]
        assert s["tokens"].tolist() == expect[k]
        assert s["url"] == rows[k]["url"] and s["score"] == rows[k]["score"]
        assert s["n"] == rows[k]["n"] and bool(s["ok"]) == rows[k]["ok"]
    assert {f.name: f.dtype for f in ds.fields}["n"] == np.int64
    # The same from Python, and the tokens alone when asked.
    ds = zrecord.tokenize(src, tmp_path / "py", tokenizer=d / "tokenizer.json")
    assert ds[5]["url"] == rows[5]["url"]
    ds = zrecord.tokenize(src, tmp_path / "only", tokenizer=d / "tokenizer.json", keep_fields=False)
    assert [f.name for f in ds.fields] == ["tokens"]
    p = run(zr, "convert", str(src), str(tmp_path / "only2"), "--tokenizer", str(d / "tokenizer.json"),
            "--tokens-only")
    assert p.returncode == 0, p.stderr
    assert [f.name for f in zrecord.Dataset(tmp_path / "only2").fields] == ["tokens"]
    # A later line without a kept field, or with another kind: named, and nothing written.
    src.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1]) + "\n" + json.dumps({"text": "x", "n": 1}) + "\n")
    p = run(zr, "convert", str(src), str(tmp_path / "bad"), "--tokenizer", str(d / "tokenizer.json"))
    assert p.returncode != 0
    assert str(src) in p.stderr and "line 3" in p.stderr and "--tokens-only" in p.stderr, p.stderr
    assert not (tmp_path / "bad").exists()
    src.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "n": "seven"}) + "\n")
    with pytest.raises(ValueError, match='line 2: field "n" is a string here, an integer on the first line'):
        zrecord.tokenize(src, tmp_path / "bad", tokenizer=d / "tokenizer.json")
    assert not (tmp_path / "bad").exists()


def test_parquet_columns_are_kept_beside_the_tokens(corpus, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    d, docs, expect = corpus
    table = pa.table({"body": docs[:300], "lang": [f"l{k % 3}" for k in range(300)], "year": list(range(300)),
                      "w": [k / 8 for k in range(300)], "ok": [k % 5 == 0 for k in range(300)],
                      "tags": [[1, 2]] * 300})
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=64)
    ds = zrecord.tokenize(tmp_path / "c.parquet", tmp_path / "out", tokenizer=d / "tokenizer.json",
                          text_field="body", batch_size=50)
    assert [f.name for f in ds.fields] == ["tokens", "lang", "year", "w", "ok"]
    for k in (0, 49, 50, 299):
        s = ds[k]
        assert s["tokens"].tolist() == expect[k]
        assert (s["lang"], int(s["year"]), float(s["w"]), bool(s["ok"])) == (f"l{k % 3}", k, k / 8, k % 5 == 0)
    ds = zrecord.tokenize(tmp_path / "c.parquet", tmp_path / "only", tokenizer=d / "tokenizer.json",
                          text_field="body", keep_fields=False)
    assert [f.name for f in ds.fields] == ["tokens"]
    pq.write_table(pa.table({"body": ["a b", "c"], "lang": ["x", None]}), tmp_path / "n.parquet")
    with pytest.raises(ValueError, match='n.parquet: .*row 1: column "lang" holds a null'):
        zrecord.tokenize(tmp_path / "n.parquet", tmp_path / "bad", tokenizer=d / "tokenizer.json", text_field="body")
    assert not (tmp_path / "bad").exists()


def test_zr_convert_tokenizes_parquet_in_rust(zr, corpus, tmp_path):
    # `zr convert corpus.parquet --tokenizer` reads Parquet in Rust, not only through pyarrow
    # in zrecord.tokenize: every codec pyarrow writes but brotli, a directory of files, kept
    # columns and the errors that name the file, column and row.
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    d, docs, expect = corpus
    tok = str(d / "tokenizer.json")
    (tmp_path / "dir").mkdir()
    n = 0
    for k, codec in enumerate(["snappy", "zstd", "gzip", "lz4", "none"]):
        rows = range(n, n + 60 + 17 * k)
        table = pa.table({"body": [docs[i] for i in rows], "year": pa.array(list(rows), pa.int32()),
                          "w": pa.array([i / 8 for i in rows], pa.float32()), "src": [f"s{i % 3}" for i in rows],
                          "when": pa.array(list(rows), pa.date32()), "tags": [[1, 2]] * len(rows)})
        pq.write_table(table, tmp_path / "dir" / f"{k:02d}.parquet", compression=codec, row_group_size=25)
        n = rows.stop
    p = run(zr, "convert", str(tmp_path / "dir"), str(tmp_path / "out"), "--tokenizer", tok, "--text-field", "body",
            "--eos", str(EOS))
    assert p.returncode == 0, p.stderr
    assert "kept the fields" in p.stderr and "when" in p.stderr and "tags" in p.stderr, p.stderr
    ds = zrecord.Dataset(tmp_path / "out")
    assert [f.name for f in ds.fields] == ["tokens", "year", "w", "src"]
    assert tokens_of(tmp_path / "out") == [e + [EOS] for e in expect[:n]]
    assert [int(ds[i]["year"]) for i in range(n)] == list(range(n))
    assert ds[n - 1]["src"] == f"s{(n - 1) % 3}" and float(ds[9]["w"]) == 9 / 8
    # A later file without a kept column: named, and nothing written.
    pq.write_table(pa.table({"body": ["a b"], "year": ["not a number"]}), tmp_path / "dir" / "99.parquet")
    p = run(zr, "convert", str(tmp_path / "dir"), str(tmp_path / "bad"), "--tokenizer", tok, "--text-field", "body")
    assert p.returncode != 0 and "99.parquet" in p.stderr and 'no integer column "year"' in p.stderr, p.stderr
    assert not (tmp_path / "bad").exists()
    # A text column that is not strings, a missing text column, a null text, brotli.
    pq.write_table(pa.table({"body": [b"bytes"]}), tmp_path / "b.parquet")
    p = run(zr, "convert", str(tmp_path / "b.parquet"), str(tmp_path / "bad"), "--tokenizer", tok, "--text-field", "body")
    assert p.returncode != 0 and "b.parquet" in p.stderr and "not strings" in p.stderr, p.stderr
    p = run(zr, "convert", str(tmp_path / "b.parquet"), str(tmp_path / "bad"), "--tokenizer", tok)
    assert p.returncode != 0 and 'no column "text"' in p.stderr and "--text-field" in p.stderr, p.stderr
    pq.write_table(pa.table({"text": ["a", "b", None]}), tmp_path / "n.parquet", row_group_size=2)
    p = run(zr, "convert", str(tmp_path / "n.parquet"), str(tmp_path / "bad"), "--tokenizer", tok)
    assert p.returncode != 0 and "row 2" in p.stderr and "null" in p.stderr, p.stderr
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "br.parquet", compression="brotli")
    p = run(zr, "convert", str(tmp_path / "br.parquet"), str(tmp_path / "bad"), "--tokenizer", tok)
    assert p.returncode != 0 and "br.parquet" in p.stderr and "brotli" in p.stderr.lower(), p.stderr
    (tmp_path / "x.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match="x.parquet.*not a Parquet file"):
        zrecord.tokenize(tmp_path / "x.parquet", tmp_path / "bad", tokenizer=tok)
    assert not (tmp_path / "bad").exists()
