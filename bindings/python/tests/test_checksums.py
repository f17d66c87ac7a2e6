"""Per-record checksums (``checksums.zrc``) from Python: damage is a typed error with code
-11 on every read path (read, gather, Dataset, DataLoader) before anything is decoded, the
``verify`` open option turns it up or off, ``stats()``/``inspect`` count unchecked records,
and ``seal()`` / ``zrecord.verify(path, seal=True)`` checksum them again.

Interop with the real loaderx 0.5.4 wheel (the ``loaderx`` fixture fails rather than skips
under ``make test``): loaderx reads and appends to a store that has checksums, and after
loaderx appends, deletes and compacts, zrecord reads every record without a false checksum
error, reports the unchecked records, and ``seal`` brings their count back to zero.
"""

import struct

import numpy as np
import pytest

import zrecord
from zrecord.errors import ChecksumError, ZrecordError

from _support import images

CODECS = ["raw", "flate"]
CHECKSUM_CODE = -11


def entry(path, i):
    """Table entry ``i`` of the store at ``path``: (offset, phys, logic, chunk, codec)."""
    with open(path / "meta.zr", "rb") as f:
        f.seek(16 + 16 * i)
        return struct.unpack("<IIIHBx", f.read(16))


def flip(path, i, at=0):
    """Inverts byte ``at`` of record ``i``'s stored bytes."""
    off, _, _, chunk, _ = entry(path, i)
    with open(path / f"{chunk}.zr", "r+b") as f:
        f.seek(off + at)
        b = f.read(1)
        f.seek(off + at)
        f.write(bytes([b[0] ^ 0xFF]))


def read_all(z, n, item):
    out = np.empty(n * item, np.uint8)
    z.gather(np.arange(n, dtype=np.uint64), out, item)
    return out.reshape(n, item)


def assert_checksum_error(excinfo, index):
    e = excinfo.value
    assert isinstance(e, ChecksumError) and isinstance(e, ZrecordError)
    assert e.code == CHECKSUM_CODE, e
    assert f"record {index} " in str(e), e


@pytest.mark.parametrize("codec", CODECS)
def test_damaged_record_is_a_checksum_error_on_every_read_path(tmp_path, codec):
    data = images(12, 3, shape=(3, 32, 32))
    item = data[0].nbytes
    with zrecord.Zrecord(tmp_path / "s", codec=codec) as z:
        z.append(data, 12, item)
        assert z.checksums and z.verify == "auto"
        assert z.stats()["unchecked"] == 0
    flip(tmp_path / "s", 5, at=7)
    with zrecord.Zrecord(tmp_path / "s", create=False) as z:
        with pytest.raises(ZrecordError) as e:
            read_all(z, 12, item)
        assert_checksum_error(e, 5)
        out = np.empty(item, np.uint8)
        with pytest.raises(ZrecordError) as e:
            z.gather([5], out, item)
        assert_checksum_error(e, 5)
        with pytest.raises(ZrecordError) as e:
            z.gather_var([5], out, [0])
        assert_checksum_error(e, 5)
        # The other records read exactly.
        for i in (0, 4, 6, 11):
            z.gather([i], out, item)
            np.testing.assert_array_equal(out, data[i].ravel())
    report = zrecord.verify(tmp_path / "s")
    assert (report.checked, report.checksummed, report.unchecked, report.bad_count) == (12, 12, 0, 1)
    assert report.bad[0].index == 5 and "checksum" in report.bad[0].error
    assert not report.ok


def test_verify_never_reads_damaged_bytes_and_bad_modes_are_value_errors(tmp_path):
    data = images(4, 1)
    item = data[0].nbytes
    with zrecord.Zrecord(tmp_path / "s", codec="raw") as z:
        z.append(data, 4, item)
    flip(tmp_path / "s", 2)
    with zrecord.Zrecord(tmp_path / "s", verify="never") as z:
        assert z.verify == "never"
        got = read_all(z, 4, item)
        assert (got[2] != data[2].ravel()).sum() == 1
    with pytest.raises(ValueError, match="verify"):
        zrecord.Zrecord(tmp_path / "s", verify="sometimes")


def test_dataset_and_dataloader_check_samples(tmp_path):
    data = images(16, 2)
    zrecord.Dataset.write(tmp_path / "d", data, codec="raw").close()
    labels = np.arange(16, dtype=np.int64)
    zrecord.Dataset.write(tmp_path / "l", labels).close()
    flip(tmp_path / "d", 9)
    ds = zrecord.Dataset(tmp_path / "d")
    np.testing.assert_array_equal(ds[3], data[3])
    with pytest.raises(ZrecordError) as e:
        ds[9]
    assert_checksum_error(e, 9)
    # Direct indexing names the place as the loader does (path, field, record, none of them
    # None), and so does a store's own gather.
    for read in (lambda: ds[9], lambda: ds[[3, 9]], lambda: ds[8:10]):
        with pytest.raises(ChecksumError) as e:
            read()
        assert (e.value.path, e.value.field, e.value.record) == (str(tmp_path / "d"), "data", 9)
        assert str(tmp_path / "d") in str(e.value)
    with pytest.raises(ChecksumError) as e:
        ds.store.gather(np.array([9]), np.empty(data[0].nbytes, np.uint8), data[0].nbytes)
    assert (e.value.path, e.value.field, e.value.record) == (str(tmp_path / "d"), None, 9)
    with zrecord.DataLoader(ds, zrecord.Dataset(tmp_path / "l"), num_workers=1, batch_size=16, mode=0) as dl:
        # The error names the store, the field (loaderx's "data") and the record, as
        # attributes too; so does the same error raised again by every later next().
        for _ in range(2):
            with pytest.raises(ChecksumError) as e:
                next(dl)
            assert (e.value.path, e.value.field, e.value.record) == (str(tmp_path / "d"), "data", 9)
            assert str(tmp_path / "d") in str(e.value) and "record 9" in str(e.value)
    ds.close()
    with zrecord.Dataset(tmp_path / "d", verify="never") as ds:
        assert ds[9].shape == data[9].shape


def test_seal_needs_a_writable_store_and_counts(tmp_path):
    data = images(5, 4)
    item = data[0].nbytes
    with zrecord.Zrecord(tmp_path / "s") as z:
        z.append(data, 5, item)
        assert z.seal() == {"already": 5, "sealed": 0, "bad": 0}
    with zrecord.Zrecord.open_read_only(tmp_path / "s") as z:
        with pytest.raises(ValueError):
            z.seal()


# -- interop with loaderx 0.5.4 ------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_loaderx_reads_and_appends_to_a_store_with_checksums(loaderx, tmp_path, codec):
    data = images(30, 5)
    item = data[0].nbytes
    with zrecord.Zrecord(tmp_path / "s", codec=codec) as z:
        z.append(data[:20], 20, item)
    assert (tmp_path / "s" / "checksums.zrc").exists()
    with loaderx.Zrecord(tmp_path / "s", codec=codec) as z:
        np.testing.assert_array_equal(read_all(z, 20, item), data[:20].reshape(20, item))
        z.append(data[20:], 10, item)
        z.sync()
    assert (tmp_path / "s" / "checksums.zrc").exists(), "loaderx removed the side file"
    with zrecord.Zrecord(tmp_path / "s", codec=codec, create=False) as z:
        np.testing.assert_array_equal(read_all(z, 30, item), data.reshape(30, item))
        assert z.stats()["unchecked"] == 10
    report = zrecord.verify(tmp_path / "s")
    assert (report.checksummed, report.unchecked, report.bad_count) == (20, 10, 0)


@pytest.mark.parametrize("codec", CODECS)
def test_after_loaderx_appends_deletes_and_compacts_nothing_is_a_false_error_and_seal_covers_it(
    loaderx, tmp_path, codec
):
    data = images(60, 6)
    item = data[0].nbytes
    with zrecord.Zrecord(tmp_path / "s", codec=codec) as z:
        z.append(data[:40], 40, item)
    model = [data[i].ravel() for i in range(40)]
    with loaderx.Zrecord(tmp_path / "s", codec=codec) as z:
        z.append(data[40:50], 10, item)
        model += [data[i].ravel() for i in range(40, 50)]
        for i in sorted({3, 45, 20}, reverse=True):
            model[i] = model[-1]
            model.pop()
        z.delete(np.array([3, 45, 20], np.uint64))
        z.compact()
        z.append(data[50:55], 5, item)
        model += [data[i].ravel() for i in range(50, 55)]
        z.sync()
    path = tmp_path / "s"
    # Read every way, with verification on (the default), then always refused-unchecked.
    with zrecord.Zrecord(path, codec=codec, create=False) as z:
        n = len(z)
        assert n == len(model) == 52
        np.testing.assert_array_equal(read_all(z, n, item), np.stack(model))
        unchecked = z.stats()["unchecked"]
        assert unchecked > 0
    with zrecord.Zrecord(path, create=False, verify="always") as z:
        with pytest.raises(ZrecordError) as e:
            read_all(z, n, item)
        assert isinstance(e.value, ChecksumError) and "no checksum" in str(e.value)
    report = zrecord.verify(path)
    assert report.bad_count == 0, report.bad
    assert report.checked == n and report.unchecked > 0
    info = zrecord.inspect(path)
    assert info.checksums and info.unchecked == unchecked
    # --seal brings the count back to zero, and everything then checks.
    sealed = zrecord.verify(path, seal=True)
    assert sealed.sealed == unchecked and sealed.unchecked == 0 and sealed.bad_count == 0
    with zrecord.Zrecord(path, create=False, verify="always") as z:
        assert z.stats()["unchecked"] == 0
        np.testing.assert_array_equal(read_all(z, n, item), np.stack(model))
    # ...and loaderx still reads the sealed store.
    with loaderx.Zrecord(path, codec=codec) as z:
        np.testing.assert_array_equal(read_all(z, n, item), np.stack(model))


def test_a_store_loaderx_alone_wrote_behaves_as_before(loaderx, tmp_path):
    data = images(10, 7)
    item = data[0].nbytes
    with loaderx.Zrecord(tmp_path / "s") as z:
        z.append(data, 10, item)
        z.sync()
        theirs = z.stats()
    with zrecord.Zrecord(tmp_path / "s", create=False) as z:
        assert not z.checksums
        assert z.stats() == theirs, "exactly loaderx's keys and values"
        np.testing.assert_array_equal(read_all(z, 10, item), data.reshape(10, item))
    assert not (tmp_path / "s" / "checksums.zrc").exists(), "reading created the side file"
    report = zrecord.verify(tmp_path / "s")
    assert (report.checksummed, report.unchecked, report.bad_count) == (0, 10, 0)
    # seal gives it checksums; loaderx still reads it.
    assert zrecord.verify(tmp_path / "s", seal=True).sealed == 10
    with zrecord.Zrecord(tmp_path / "s", create=False, verify="always") as z:
        np.testing.assert_array_equal(read_all(z, 10, item), data.reshape(10, item))
    with loaderx.Zrecord(tmp_path / "s") as z:
        np.testing.assert_array_equal(read_all(z, 10, item), data.reshape(10, item))


def test_on_error_skip_replaces_damaged_samples_and_the_stream_stays_exact(tmp_path, capfd):
    """Three flipped records in a sharded dataset: with on_error="skip" two SHUFFLE epochs
    finish, each damaged sample is replaced by the next clean one (the last one wraps to
    sample 0) the same way on every run, 3 are reported once, and a resume on two ranks
    with other worker counts reads exactly the rest of the uninterrupted run."""
    n, b = 300, 32
    data = images(n, 5, shape=(4, 4))
    fields = {"image": data, "label": np.arange(n)}
    zrecord.Dataset.write(tmp_path / "d", fields, shard_records=100).close()
    bad = {5: (0, 5), 150: (1, 50), 299: (2, 99)}  # sample: (shard, record)
    for shard, record in bad.values():
        flip(tmp_path / "d" / f"shard-{shard:06d}" / "image", record)
    replaced = {5: 6, 150: 151, 299: 0}

    with zrecord.Dataset(tmp_path / "d") as ds:
        with zrecord.DataLoader(ds, batch_size=b, mode=2, seed=3, num_workers=0) as plain:
            clean_order = []
            with pytest.raises(ChecksumError):  # without skip, the first damaged sample stops it
                for _ in range(2 * (n // b)):
                    clean_order.append(next(plain)["label"])
        capfd.readouterr()
        with zrecord.DataLoader(ds, batch_size=b, mode=2, seed=3, num_workers=2, on_error="skip") as dl:
            got, state = [], None
            for _ in range(2):
                for batch in dl.epoch_iter():
                    np.testing.assert_array_equal(batch["image"], data[batch["label"]])
                    got.append(batch["label"])
                    if len(got) == 5:
                        state = dl.state_dict()
            stats = dl.stats
    assert len(got) == 2 * (n // b) and stats["step"] == len(got)
    assert stats["skipped"] == 3, stats
    by_index = {s["index"]: s for s in stats["skipped_samples"]}
    assert {i: s["replacement"] for i, s in by_index.items()} == replaced
    for i, (shard, record) in bad.items():
        s = by_index[i]
        assert s["path"] == str(tmp_path / "d" / f"shard-{shard:06d}" / "image"), s
        assert (s["field"], s["record"], s["chunk"]) == ("image", record, 0), s
        assert "checksum" in s["message"]
    err = capfd.readouterr().err
    assert err.count("zrecord: skipping sample") == 3, err

    # The stream is the clean stream with each damaged sample swapped for its replacement.
    with zrecord.DataLoader(zrecord.Dataset(tmp_path / "d", verify="never"), batch_size=b, mode=2, seed=3,
                            num_workers=0) as order:
        want = [next(order)["label"] for _ in range(len(got))]
    swap = np.vectorize(lambda i: replaced.get(int(i), int(i)))
    np.testing.assert_array_equal(np.stack(got), swap(np.stack(want)))
    assert any(np.isin(np.stack(want), list(bad)).ravel()), "the epochs met no damaged sample"

    # Resumed at step 5 on two ranks of 16 with other worker counts: the same samples.
    halves = []
    for rank, workers in ((0, 0), (1, 3)):
        with zrecord.DataLoader(zrecord.Dataset(tmp_path / "d"), batch_size=b // 2, mode=2, seed=3, rank=rank,
                                world_size=2, num_workers=workers, on_error="skip", state=state) as dl:
            halves.append(np.stack([next(dl)["label"] for _ in range(len(got) - 5)]))
    np.testing.assert_array_equal(np.concatenate(halves, axis=1), np.stack(got[5:]))


def test_on_error_is_checked(tmp_path):
    zrecord.Dataset.write(tmp_path / "d", {"x": np.arange(10)}).close()
    with zrecord.Dataset(tmp_path / "d") as ds:
        with pytest.raises(ValueError, match='on_error must be "raise" or "skip"'):
            zrecord.DataLoader(ds, on_error="ignore")

    class Plain:
        def __len__(self):
            return 10

        def __getitems__(self, idxs):
            return np.asarray(idxs)

    with pytest.raises(ValueError, match="zrecord datasets"):
        zrecord.DataLoader(Plain(), Plain(), on_error="skip")


def test_a_finite_pass_with_skip_counts_a_damaged_sample_out_not_its_replacement_twice(tmp_path, capfd):
    """An evaluation pass (passes=1) over 150 samples with one damaged record and
    on_error="skip": the damaged sample's slot held its replacement (the next sample) and
    was marked valid, so the pass counted 150 valid slots over 149 distinct samples. The
    slot is now invalid: every valid slot is a distinct sample, each sample but the
    damaged one exactly once, on one rank and on two."""
    n = 150
    data = images(n, 7, shape=(4, 4))
    zrecord.Dataset.write(tmp_path / "d", {"image": data, "label": np.arange(n)}, shard_records=60).close()
    flip(tmp_path / "d" / "shard-000001" / "image", 2)  # sample 62
    with zrecord.Dataset(tmp_path / "d") as ds:
        for world in (1, 2):
            seen = []
            for rank in range(world):
                with zrecord.DataLoader(ds, batch_size=16 // world, passes=1, rank=rank, world_size=world,
                                        num_workers=2, on_error="skip", check_ranks=False) as dl:
                    for batch in dl:
                        np.testing.assert_array_equal(batch["image"], data[batch["label"]])
                        seen.extend(batch["label"][batch["valid"]].tolist())
            assert len(seen) == len(set(seen)) == n - 1, (world, len(seen), len(set(seen)))
            assert sorted(seen) == [i for i in range(n) if i != 62]
    capfd.readouterr()
