"""zrecord.inspect / verify / convert / export, and progress reporting."""

import dataclasses
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import zrecord
from zrecord import Dataset

from _support import images


def corrupt(store, offset=100, n=64):
    with open(store / "0.zr", "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * n)


# -- inspect ------------------------------------------------------------------------------


def test_inspect_reports_a_dataset(tmp_path):
    data = images(50)
    Dataset.write(tmp_path / "d", data, codec="raw").close()
    i = zrecord.inspect(tmp_path / "d")
    assert isinstance(i, zrecord.Inspection)
    assert (i.records, i.raw_records, i.flate_records, i.bad_entries) == (50, 50, 0, 0)
    assert i.logical_bytes == data.nbytes == i.live_bytes
    assert i.chunks == (zrecord.ChunkUse(id=0, records=50, live_bytes=data.nbytes, used_bytes=data.nbytes,
                                         file_bytes=4 << 30),)
    assert i.problems == ()
    assert i.schema == zrecord.Schema("loaderx-zrecord", 1, "|u1", (3, 8, 8), "raw")
    # Plain data all the way down, so it serialises as `zr inspect --json` does.
    assert dataclasses.asdict(i)["schema"]["shape"] == (3, 8, 8)


def test_inspect_plain_store_has_no_schema(tmp_path):
    with zrecord.Zrecord(tmp_path / "s") as z:
        z.append(np.zeros(40, np.uint8), 4, 10)
    i = zrecord.inspect(tmp_path / "s")
    assert i.schema is None and i.records == 4 and i.logical_bytes == 40


def test_inspect_creates_nothing(tmp_path):
    with pytest.raises(zrecord.StoreIOError):
        zrecord.inspect(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(zrecord.FormatError):
        zrecord.inspect(tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []


# -- verify -------------------------------------------------------------------------------


def test_verify_clean_and_damaged(tmp_path):
    # min_savings=0: every record compressed, so a damaged byte fails its inflate.
    Dataset.write(tmp_path / "d", images(200, shape=(3, 32, 32)), min_savings=0.0).close()
    v = zrecord.verify(tmp_path / "d")
    assert v == zrecord.Verification(checked=200, bad_count=0, bad=(), checksummed=200, unchecked=0) and v.ok
    corrupt(tmp_path / "d")
    v = zrecord.verify(tmp_path / "d")
    assert v.checked == 200 and v.bad_count >= 1 and not v.ok
    assert len(v.bad) == v.bad_count and all(isinstance(b, zrecord.BadRecord) for b in v.bad)
    # The damaged bytes sit at the start of chunk 0: record 0 is among the failures.
    assert v.bad[0].index == 0 and v.bad[0].error


def test_verify_progress_callable_sees_the_end(tmp_path):
    Dataset.write(tmp_path / "d", images(300)).close()
    seen = []
    zrecord.verify(tmp_path / "d", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (300, 300)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


# -- convert ------------------------------------------------------------------------------


def test_convert_matches_dataset_write(tmp_path):
    data = images(123, 3)
    np.save(tmp_path / "a.npy", data)
    c = zrecord.convert(tmp_path / "a.npy", tmp_path / "c", codec="raw")
    assert c == zrecord.Conversion(123, 0, zrecord.Schema("loaderx-zrecord", 1, "|u1", (3, 8, 8), "raw"))
    Dataset.write(tmp_path / "w", data, codec="raw").close()
    assert (tmp_path / "c" / "schema.json").read_bytes() == (tmp_path / "w" / "schema.json").read_bytes()
    with Dataset(tmp_path / "c") as d:
        np.testing.assert_array_equal(d[:], data)
    # Appending: the existing schema (and codec) wins, indices continue.
    c2 = zrecord.convert(tmp_path / "a.npy", tmp_path / "c", codec="flate")
    assert (c2.appended, c2.first_index, c2.schema.codec) == (123, 123, "raw")


def test_convert_refuses_an_incompatible_dataset_and_keeps_it(tmp_path):
    Dataset.write(tmp_path / "d", images(5)).close()
    np.save(tmp_path / "f.npy", np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="cannot append"):
        zrecord.convert(tmp_path / "f.npy", tmp_path / "d")
    with Dataset(tmp_path / "d") as d:
        assert len(d) == 5 and d.dtype == np.uint8


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda p: None, zrecord.StoreIOError),  # missing input
        (lambda p: p.write_bytes(b"not a numpy file at all, just text"), zrecord.FormatError),
        (lambda p: p.write_bytes(np.lib.format.magic(1, 0) + b"\x10\x00{'descr'"), zrecord.FormatError),
        (lambda p: p.mkdir(), zrecord.StoreIOError),  # a directory as input
    ],
    ids=["missing", "bad-magic", "truncated-header", "directory"],
)
def test_failed_convert_into_a_new_path_leaves_nothing(tmp_path, make, error):
    src = tmp_path / "in.npy"
    make(src)
    with pytest.raises(error):
        zrecord.convert(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(error):
        zrecord.convert(src, tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []


def test_failed_convert_of_truncated_data_leaves_nothing(tmp_path):
    np.save(tmp_path / "in.npy", images(20))
    raw = (tmp_path / "in.npy").read_bytes()
    (tmp_path / "in.npy").write_bytes(raw[: len(raw) - 100])
    with pytest.raises(zrecord.FormatError, match="truncated"):
        zrecord.convert(tmp_path / "in.npy", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_convert_of_zero_byte_samples_leaves_nothing(tmp_path):
    np.save(tmp_path / "z.npy", np.zeros((5, 0), np.float32))
    with pytest.raises(zrecord.RecordTooLargeError):
        zrecord.convert(tmp_path / "z.npy", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_convert_progress_is_throttled_and_releases_the_gil(tmp_path):
    """One record per append means 1,000 core reports; Python sees a few, the last one
    included, and another Python thread keeps running meanwhile."""
    rows = 1000
    np.save(tmp_path / "l.npy", np.arange(rows, dtype=np.int64))
    seen = []
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    started = time.monotonic()
    try:
        zrecord.convert(tmp_path / "l.npy", tmp_path / "out", chunk_bytes=8,
                        progress=lambda d, n: seen.append((d, n)))
    finally:
        stop.set()
        t.join()
    elapsed = time.monotonic() - started
    assert seen[-1] == (rows, rows)
    assert len(seen) <= elapsed / 0.1 + 3, (len(seen), elapsed)
    assert ticks[0] > 0
    with Dataset(tmp_path / "out") as d:
        np.testing.assert_array_equal(d[:], np.arange(rows))


def test_a_raising_progress_callable_is_reported_after_the_work(tmp_path):
    np.save(tmp_path / "a.npy", images(10))

    def boom(done, total):
        raise KeyError("progress broke")

    with pytest.raises(KeyError, match="progress broke"):
        zrecord.convert(tmp_path / "a.npy", tmp_path / "out", progress=boom)
    with pytest.raises(TypeError, match="progress must be"):
        zrecord.verify(tmp_path / "out", progress="yes")


# -- export -------------------------------------------------------------------------------


def test_export_round_trip(tmp_path):
    data = np.random.default_rng(0).random((40, 3, 5)).astype(np.float32)
    Dataset.write(tmp_path / "d", data).close()
    assert zrecord.export(tmp_path / "d", tmp_path / "out.npy") == 40
    got = np.load(tmp_path / "out.npy")
    assert got.dtype == data.dtype and got.shape == data.shape
    np.testing.assert_array_equal(got, data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "out.npy"]


def test_failed_export_keeps_the_old_file(tmp_path):
    with zrecord.Zrecord(tmp_path / "plain") as z:
        z.append(np.zeros(8, np.uint8), 2, 4)
    (tmp_path / "out.npy").write_bytes(b"precious")
    with pytest.raises(ValueError, match="schema.json"):
        zrecord.export(tmp_path / "plain", tmp_path / "out.npy")
    assert (tmp_path / "out.npy").read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy", "plain"]


# -- progress=True: tqdm when installed, otherwise nothing ------------------------------------


def every_progress_call(tmp_path, progress):
    data = images(64)
    ds = Dataset.write(tmp_path / "d", data, progress=progress, chunk_bytes=data[0].nbytes * 8)
    ds.delete([0, 5])
    ds.compact(progress=progress)
    ds.close()
    assert zrecord.verify(tmp_path / "d", progress=progress).ok
    zrecord.export(tmp_path / "d", tmp_path / "o.npy", progress=progress)
    zrecord.convert(tmp_path / "o.npy", tmp_path / "c", progress=progress)


def test_progress_true_without_tqdm_is_silent(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` now raises ImportError
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    every_progress_call(tmp_path, True)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_progress_true_with_tqdm_draws_bars(tmp_path, capsys):
    pytest.importorskip("tqdm", reason="tqdm not installed (pip install tqdm; tests/requirements.txt has it)")
    every_progress_call(tmp_path, True)
    err = capsys.readouterr().err
    for what in ("write", "compact", "verify", "export", "convert"):
        assert what in err, err
    assert "100%" in err


def test_compact_progress_does_not_deadlock_with_waiting_readers(tmp_path):
    """A reader that arrives during a compact waits for it with the GIL released, so the
    compact's progress reports (which need the GIL) still get it. Run in a child so a
    deadlock fails by timeout instead of hanging the suite."""
    code = textwrap.dedent(
        f"""
        import threading, time
        import numpy as np
        import zrecord
        z = zrecord.Zrecord({str(tmp_path / "s")!r}, codec="raw")
        z.append(np.arange(4000 * 4096, dtype=np.uint32).view(np.uint8), 4000, 4 * 4096)
        z.delete(np.arange(0, 4000, 2))
        started, done = threading.Event(), []
        def reader():
            started.wait()
            out = np.empty(4 * 4096, np.uint8)
            z.gather([0], out, 4 * 4096)   # waits for the compact, GIL released
            done.append(True)
        t = threading.Thread(target=reader)
        t.start()
        calls = []
        def report(d, n):
            calls.append((d, n))
            if not started.is_set():
                started.set()
                time.sleep(0.3)   # the reader now blocks inside gather
        z.compact(progress=report)
        t.join()
        assert done and calls[-1][0] == calls[-1][1], calls
        print("ok", len(calls))
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr


def test_a_bad_npy_input_is_blamed_not_the_store(tmp_path):
    # As found: `zr convert fake.npy out` said "not a zrecord store: not a .npy file"; the
    # core's message now names the input's problem on every front end.
    fake = tmp_path / "fake.npy"
    fake.write_bytes(b"this is not numpy at all, just some bytes")
    with pytest.raises(zrecord.FormatError) as e:
        zrecord.convert(str(fake), str(tmp_path / "out.zr"))
    assert "not a zrecord store" not in str(e.value)
    assert ".npy" in str(e.value)
    assert not (tmp_path / "out.zr").exists()


def test_export_verify_and_convert_min_savings_as_the_cli_has_them(tmp_path):
    from test_checksums import flip

    # Smooth rows: DEFLATE saves about a third of each.
    data = (np.arange(30 * 192).reshape(30, 3, 8, 8) // 3 % 256).astype(np.uint8)
    np.save(tmp_path / "a.npy", data)
    # min_savings=0: DEFLATE is kept whenever it saves anything; 1.0 (saving everything)
    # can never be met, so every record is stored raw.
    packed = zrecord.convert(tmp_path / "a.npy", tmp_path / "packed", min_savings=0.0)
    raw = zrecord.convert(tmp_path / "a.npy", tmp_path / "raw", min_savings=1.0)
    assert packed.appended == raw.appended == 30
    assert zrecord.inspect(tmp_path / "packed").flate_records > 0
    assert zrecord.inspect(tmp_path / "raw").raw_records == 30
    with pytest.raises(ValueError):
        zrecord.convert(tmp_path / "a.npy", tmp_path / "bad", min_savings=2.0)
    flip(tmp_path / "raw", 4)
    with pytest.raises(zrecord.ChecksumError):
        zrecord.export(tmp_path / "raw", tmp_path / "out.npy")
    assert not (tmp_path / "out.npy").exists()
    assert zrecord.export(tmp_path / "raw", tmp_path / "out.npy", verify="never") == 30
    assert np.load(tmp_path / "out.npy").shape == data.shape
    with pytest.raises(ValueError, match="verify"):
        zrecord.export(tmp_path / "raw", tmp_path / "out.npy", verify="sometimes")
