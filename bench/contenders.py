"""The stores and loaders each section measures zrecord against, behind one small interface
per kind: a store contender writes an array, opens it and gathers random batches; the torch
loader reads the same samples from .npy memmaps through torch's DataLoader.

The packing section's peers (nanoGPT's random windows, Grain's packers) live in packing.py:
they read token documents, not the arrays of the data sets.
"""

import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np

from measure import SKIPPED, optional


class Contender:
    name = "?"

    def write(self, data, path): ...
    def open(self, path): ...
    def gather(self, idx): ...
    def close(self): ...


class ZrecordStore(Contender):
    def __init__(self, mod, label, codec, **write_kw):
        self.mod, self.name, self.codec, self.write_kw = mod, label, codec, write_kw

    def write(self, data, path):
        self.mod.Dataset.write(path, data, codec=self.codec, **self.write_kw).close()

    def open(self, path):
        self.ds = self.mod.Dataset(path)

    def gather(self, idx):
        return self.ds.__getitems__(idx)

    def close(self):
        self.ds.close()


class ZrecordGatherInto(ZrecordStore):
    """`Zrecord.gather` into one buffer reused for every batch: the engine's own speed,
    with no allocation per batch (what `Dataset.__getitems__` is measured against)."""

    def open(self, path):
        super().open(path)
        self.out = None

    def gather(self, idx):
        ds = self.ds
        if self.out is None or len(self.out) != len(idx):
            self.out = np.empty((len(idx), *ds.shape), ds.dtype)
        ds.store.gather(idx, self.out, self.out[0].nbytes)
        return self.out


class NpyMemmap(Contender):
    name = "npy memmap"

    def write(self, data, path):
        with open(path, "wb") as f:  # np.save(path) would add a ".npy" suffix
            np.save(f, data)

    def open(self, path):
        self.arr = np.load(path, mmap_mode="r")

    def gather(self, idx):
        return self.arr[idx]

    def close(self):
        del self.arr


class H5(Contender):
    def __init__(self, h5py, gzip):
        self.h5py, self.gzip = h5py, gzip
        self.name = "h5py-gzip" if gzip else "h5py"

    def write(self, data, path):
        with self.h5py.File(path, "w") as f:
            kw = dict(compression="gzip", compression_opts=1, chunks=(1, *data.shape[1:])) if self.gzip else {}
            f.create_dataset("x", data=data, **kw)

    def open(self, path):
        self.f = self.h5py.File(path, "r")
        self.x = self.f["x"]

    def gather(self, idx):
        # h5py needs increasing indices; sort, read, and put back in the asked order.
        order = np.argsort(idx, kind="stable")
        srt = idx[order]
        uniq, inv = np.unique(srt, return_inverse=True)
        got = self.x[uniq][inv]
        out = np.empty_like(got)
        out[order] = got
        return out

    def close(self):
        self.f.close()


class Lmdb(Contender):
    name = "lmdb"

    def __init__(self, lmdb):
        self.lmdb = lmdb

    def write(self, data, path):
        env = self.lmdb.open(str(path), map_size=max(4 << 30, 2 * data.nbytes), subdir=True, lock=False)
        with env.begin(write=True) as txn:
            for i in range(len(data)):
                txn.put(i.to_bytes(8, "big"), data[i].tobytes())
        env.close()
        self.dtype, self.shape = data.dtype, data.shape[1:]

    def open(self, path):
        self.env = self.lmdb.open(str(path), readonly=True, lock=False, subdir=True)

    def gather(self, idx):
        out = np.empty((len(idx), *self.shape), self.dtype)
        with self.env.begin(buffers=True) as txn:
            for k, i in enumerate(idx):
                out[k] = np.frombuffer(txn.get(int(i).to_bytes(8, "big")), self.dtype).reshape(self.shape)
        return out

    def close(self):
        self.env.close()


class ArrayRecord(Contender):
    name = "array_record"

    def __init__(self, mods):
        self.writer_mod, self.reader_mod = mods

    def write(self, data, path):
        w = self.writer_mod.ArrayRecordWriter(str(path), "group_size:1")
        for i in range(len(data)):
            w.write(data[i].tobytes())
        w.close()
        self.dtype, self.shape = data.dtype, data.shape[1:]

    def open(self, path):
        self.r = self.reader_mod.ArrayRecordDataSource([str(path)])

    def gather(self, idx):
        recs = self.r.__getitems__([int(i) for i in idx])
        return np.stack([np.frombuffer(b, self.dtype).reshape(self.shape) for b in recs])

    def close(self):
        r, self.r = self.r, None
        if hasattr(r, "__exit__"):
            r.__exit__(None, None, None)


def gather_all(c, idxs):
    """One pass over the batches; each batch is dropped before the next, as a loader does."""
    for ix in idxs:
        c.gather(ix)


@functools.cache
def has_zstd():
    """Whether this zrecord build writes the opt-in zstd codec (record tag 2)."""
    import zrecord
    work = Path(tempfile.mkdtemp(prefix="zrbench-"))
    try:
        zrecord.Dataset.write(work / "z", np.zeros((2, 64), np.uint8), codec="zstd").close()
        return True
    except (ValueError, TypeError) as e:
        SKIPPED.append(f"zrecord zstd: {e}".splitlines()[0])
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)


def store_contenders():
    import zrecord
    out = [
        ZrecordStore(zrecord, "zrecord flate", "flate"),
        ZrecordStore(zrecord, "zrecord raw", "raw"),
        ZrecordGatherInto(zrecord, "zrecord raw, gather into one buffer", "raw"),
    ]
    if "min_savings" in getattr(zrecord.Dataset.write, "__doc__", ""):
        out.insert(1, ZrecordStore(zrecord, "zrecord flate, min_savings=0", "flate", min_savings=0.0))
    if has_zstd():
        out.insert(2, ZrecordStore(zrecord, "zrecord zstd (opt-in)", "zstd"))
    loaderx = optional("loaderx")
    if loaderx is not None:
        out += [ZrecordStore(loaderx, "loaderx flate", "flate"), ZrecordStore(loaderx, "loaderx raw", "raw")]
    out.append(NpyMemmap())
    h5py = optional("h5py")
    if h5py is not None:
        out += [H5(h5py, False), H5(h5py, True)]
    lmdb = optional("lmdb")
    if lmdb is not None:
        out.append(Lmdb(lmdb))
    writer = array_record_writer()
    if writer is not None:
        from array_record.python import array_record_data_source
        out.append(ArrayRecord((writer, array_record_data_source)))
    return out


@functools.cache
def array_record_writer():
    """ArrayRecord's writer module, or None (noted once in the skipped list)."""
    try:
        from array_record.python import array_record_module
        return array_record_module
    except Exception as e:  # noqa: BLE001
        SKIPPED.append(f"array_record: {type(e).__name__}: {e}".splitlines()[0])
        return None


def reference(name):
    """The loaderx store a contender's ratios are taken against: the compressed one for a
    compressed contender, the raw one otherwise."""
    if "gzip" in name or "flate" in name or "zstd" in name:
        return "loaderx flate"
    return "loaderx raw"


def _identity(x):
    return x


class _TorchNpy:
    """Map-style torch dataset over .npy memmaps, batched through __getitems__."""

    def __init__(self, data, labels):
        self.data_path, self.label_path = data, labels
        self.data = self.labels = None
        self.n = len(np.load(data, mmap_mode="r"))

    def __len__(self):
        return self.n

    def _open(self):
        if self.data is None:
            self.data = np.load(self.data_path, mmap_mode="r")
            self.labels = np.load(self.label_path, mmap_mode="r")

    def __getitem__(self, i):
        self._open()
        return self.data[i], self.labels[i]

    def __getitems__(self, idxs):
        import torch
        self._open()
        idx = np.asarray(idxs)
        return {"data": torch.from_numpy(self.data[idx]), "label": torch.from_numpy(self.labels[idx])}


def torch_npy_loader(torch, data_path, label_path, batch):
    """torch's DataLoader over .npy memmaps of the data and labels: random batches of
    `batch` through `__getitems__`, 4 worker processes, 4 batches prefetched each."""
    from torch.utils.data import DataLoader as TorchLoader

    ds = _TorchNpy(str(data_path), str(label_path))
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.RandomSampler(ds, replacement=True, num_samples=10**9), batch, False)
    return TorchLoader(ds, batch_sampler=sampler, num_workers=4, collate_fn=_identity,
                       prefetch_factor=4, persistent_workers=True)


#: The name of Grain's loader over ArrayRecord in the loader tables.
GRAIN = "Grain over ArrayRecord"


def array_record_loader(grain, path, batch, dtype, shape):
    """An iterator of Grain's dataset API over an ArrayRecord file of the samples (written
    as the store contender writes it): a shuffled MapDataset of the decoded samples,
    batched, read ahead by Grain's own threads (its default ReadOptions). Batching the
    MapDataset rather than the iterator is the faster of the two here (15 against 6
    batches/s of tokens, warm). Samples only: the label rows the other loaders carry are 8
    bytes a sample."""
    src = grain.sources.ArrayRecordDataSource([str(path)])
    ds = grain.MapDataset.source(src).shuffle(seed=0).repeat()
    ds = ds.map(lambda b: np.frombuffer(b, dtype).reshape(shape)).batch(batch)
    # The iterator itself (its iter() is itself), so that the caller can close it: its
    # read threads otherwise keep prefetching beside whatever runs next.
    return iter(ds.to_iter_dataset(grain.ReadOptions()))
