"""zrecord against its peers, side by side in one run on this machine.

    python bench/bench.py [sampler|store|checksums|loader|stream|scale|all] [--quick]

Every table carries a ratio column against the reference (loaderx 0.5.4) or the named
baseline, measured in the same run. Timings are medians of repeats on a warm page cache
(every store is read once before it is timed). Contenders whose package is missing are
skipped with a note. Nothing here asserts a time: this prints tables, it does not test.
"""

import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SKIPPED = []


def optional(name):
    try:
        return __import__(name)
    except Exception as e:  # noqa: BLE001 - any import failure means "skip it"
        SKIPPED.append(f"{name}: {type(e).__name__}: {e}".splitlines()[0])
        return None


def median_time(fn, repeat=5, number=1):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return float(np.median(times))


def disk_usage(path):
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(os.stat(p).st_blocks * 512 for p in files)


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    sys.stdout.flush()


# ---------------------------------------------------------------------------- sampler

def bench_sampler(args):
    import zrecord
    loaderx = optional("loaderx")
    space = 1_000_000
    rows = []
    for batch in (256, 1024, 8192):
        number = 2000 if not args.quick else 200
        contenders = []
        rng = np.random.default_rng(0)
        contenders.append(("numpy randint", lambda: np.random.randint(0, space, batch)))
        contenders.append(("numpy default_rng", lambda: rng.integers(0, space, batch)))
        if loaderx is not None:
            from loaderx._sampler import Sampler as LxSampler
            lx = LxSampler(space, batch, 1, 42)
            contenders.append(("loaderx", lx.next))
        zs = zrecord.Sampler(space, batch, zrecord.Sampler.Mode.IID, 42)
        contenders.append(("zrecord", zs.next))
        res = {name: median_time(fn, repeat=7, number=number) for name, fn in contenders}
        base = res["numpy default_rng"]
        for name, t in res.items():
            ref = res.get("loaderx")
            rows.append([name, batch, f"{t * 1e6:.2f} µs", f"{batch / t / 1e6:.0f} M/s",
                         f"{base / t:.2f}x", f"{ref / t:.2f}x" if ref else "-"])
    table("Sampler: IID indices over a 1M space, through the Python binding",
          ["sampler", "batch", "per batch", "indices", "vs default_rng", "vs loaderx"], rows)


# ------------------------------------------------------------------------------ store

def make_records(n, noise_only=False, seed=0):
    """uint8(3,64,64) samples: a smooth image-like field plus a little noise."""
    rng = np.random.default_rng(seed)
    if noise_only:
        return rng.integers(0, 256, (n, 3, 64, 64), dtype=np.uint8)
    yy, xx = np.mgrid[0:64, 0:64]
    out = np.empty((n, 3, 64, 64), np.uint8)
    for s in range(0, n, 1000):
        k = min(1000, n - s)
        phase = rng.uniform(0, 6.28, (k, 3, 1, 1))
        freq = rng.uniform(0.02, 0.15, (k, 3, 1, 1))
        field = 127 + 100 * np.sin(freq * xx[None, None] + phase) * np.cos(freq * yy[None, None] - phase)
        out[s:s + k] = np.clip(field + rng.normal(0, 4, (k, 3, 64, 64)), 0, 255).astype(np.uint8)
    return out


class Contender:
    name = "?"

    def write(self, data, path): ...
    def open(self, path): ...
    def gather(self, idx): ...
    def close(self): ...


class ZrecordStore(Contender):
    def __init__(self, mod, label, codec):
        self.mod, self.name, self.codec = mod, label, codec

    def write(self, data, path):
        self.mod.Dataset.write(path, data, codec=self.codec).close()

    def open(self, path):
        self.ds = self.mod.Dataset(path)

    def gather(self, idx):
        return self.ds.__getitems__(idx)

    def close(self):
        self.ds.close()


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
            kw = dict(compression="gzip", compression_opts=1, chunks=(1, 3, 64, 64)) if self.gzip else {}
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
        env = self.lmdb.open(str(path), map_size=4 << 30, subdir=True, lock=False)
        with env.begin(write=True) as txn:
            for i in range(len(data)):
                txn.put(i.to_bytes(8, "big"), data[i].tobytes())
        env.close()
        self.shape = data.shape[1:]

    def open(self, path):
        self.env = self.lmdb.open(str(path), readonly=True, lock=False, subdir=True)

    def gather(self, idx):
        out = np.empty((len(idx), *self.shape), np.uint8)
        with self.env.begin(buffers=True) as txn:
            for k, i in enumerate(idx):
                out[k] = np.frombuffer(txn.get(int(i).to_bytes(8, "big")), np.uint8).reshape(self.shape)
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
        self.shape = data.shape[1:]

    def open(self, path):
        self.r = self.reader_mod.ArrayRecordDataSource([str(path)])

    def gather(self, idx):
        recs = self.r.__getitems__([int(i) for i in idx])
        return np.stack([np.frombuffer(b, np.uint8).reshape(self.shape) for b in recs])

    def close(self):
        pass


def gather_all(c, idxs):
    """One pass over the batches; each batch is dropped before the next, as a loader does."""
    for ix in idxs:
        c.gather(ix)


def store_contenders():
    import zrecord
    out = [ZrecordStore(zrecord, "zrecord flate", "flate"), ZrecordStore(zrecord, "zrecord raw", "raw")]
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
    try:
        from array_record.python import array_record_data_source, array_record_module
        out.append(ArrayRecord((array_record_module, array_record_data_source)))
    except Exception as e:  # noqa: BLE001
        SKIPPED.append(f"array_record: {type(e).__name__}: {e}".splitlines()[0])
    return out


def bench_store(args):
    n = 20000 if not args.quick else 4000
    batches = 200 if not args.quick else 40
    rng = np.random.default_rng(1)
    idxs = [rng.integers(0, n, 256) for _ in range(batches)]
    for variant, noise in (("structured", False), ("noise", True)):
        data = make_records(n, noise_only=noise)
        mib = data.nbytes / 2**20
        rows = []
        results = {}
        for c in store_contenders():
            if args.only and not any(o in c.name for o in args.only.split(",")):
                continue
            work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
            path = work / "store"
            try:
                t = time.perf_counter()
                c.write(data, path)
                wt = time.perf_counter() - t
                c.open(path)
                # Warm the page cache and check the contents once.
                got = c.gather(idxs[0])
                assert np.array_equal(got, data[idxs[0]]), c.name
                t = time.perf_counter()
                for ix in idxs:
                    c.gather(ix)
                warm = time.perf_counter() - t
                # Slow contenders get one timed pass; fast ones the median of three.
                gt = median_time(lambda: gather_all(c, idxs), repeat=1 if warm > 5 else 3) / batches
                c.close()
                results[c.name] = (wt, gt, disk_usage(path))
            except Exception as e:  # noqa: BLE001
                SKIPPED.append(f"{c.name} ({variant}): {type(e).__name__}: {e}".splitlines()[0])
            finally:
                shutil.rmtree(work, ignore_errors=True)
        batch_mib = 256 * data[0].nbytes / 2**20
        for name, (wt, gt, du) in results.items():
            ref = "loaderx flate" if "flate" in name or "gzip" in name else "loaderx raw"
            rw, rg, _ = results.get(ref, (None, None, None))
            rows.append([name, f"{mib / wt:.0f} MiB/s", f"{batch_mib / gt:.0f} MiB/s", f"{gt * 1e3:.2f} ms",
                         f"{du / 2**20:.0f} MiB", f"{data.nbytes / du:.2f}x",
                         f"{rw / wt:.2f}x" if rw else "-", f"{rg / gt:.2f}x" if rg else "-"])
        table(f"Store: {n} records x 12 KiB uint8(3,64,64), {variant} data, random batch 256 x {batches}",
              ["store", "write", "gather", "per batch", "on disk", "ratio", "write vs loaderx", "gather vs loaderx"],
              rows)


# -------------------------------------------------------------------------- checksums

def bench_checksums(args):
    """Per-record checksums: gather with verification on vs off, and write with checksums
    kept vs not (``checksums=False`` writes as zrecord did before it kept them), in the
    same run. On and off alternate, so drifting load on a shared machine hits both."""
    import zrecord
    n = 20000 if not args.quick else 4000
    batches = 200 if not args.quick else 40
    rounds = 5 if not args.quick else 2
    rng = np.random.default_rng(2)
    idxs = [rng.integers(0, n, 256) for _ in range(batches)]
    data = make_records(n)
    item = data[0].nbytes
    mib = data.nbytes / 2**20
    step = max(1, (64 << 20) // item)
    rows = []
    for codec in ("flate", "raw"):
        work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
        try:
            writes = {True: [], False: []}
            for r in range(rounds):
                for keep in (True, False) if r % 2 == 0 else (False, True):
                    path = work / f"w{int(keep)}{r}"
                    t = time.perf_counter()
                    with zrecord.Zrecord(path, codec=codec, checksums=keep) as z:
                        for s in range(0, n, step):
                            k = min(step, n - s)
                            z.append(data[s:s + k], k, item)
                        z.sync()
                    writes[keep].append(time.perf_counter() - t)
                    if r < rounds - 1:
                        shutil.rmtree(path)
            path = work / f"w1{rounds - 1}"
            stores = {v: zrecord.Zrecord(path, create=False, verify=v) for v in ("auto", "never")}
            assert stores["auto"].checksums
            out = np.empty((256, item), np.uint8)

            def one_pass(z):
                for ix in idxs:
                    z.gather(ix, out, item)

            for z in stores.values():
                one_pass(z)  # warm the page cache
                z.gather(idxs[0], out, item)
                assert np.array_equal(out, data[idxs[0]].reshape(256, item))
            reads = {"auto": [], "never": []}
            for r in range(rounds * 2):
                for v in ("auto", "never") if r % 2 == 0 else ("never", "auto"):
                    t = time.perf_counter()
                    one_pass(stores[v])
                    reads[v].append((time.perf_counter() - t) / batches)
            for z in stores.values():
                z.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        w_on, w_off = float(np.median(writes[True])), float(np.median(writes[False]))
        g_on, g_off = float(np.median(reads["auto"])), float(np.median(reads["never"]))
        batch_mib = 256 * item / 2**20
        rows.append([f"zrecord {codec}", f"{mib / w_on:.0f} MiB/s", f"{mib / w_off:.0f} MiB/s",
                     f"{(w_on / w_off - 1) * 100:+.1f}%", f"{batch_mib / g_on:.0f} MiB/s",
                     f"{batch_mib / g_off:.0f} MiB/s", f"{(g_on / g_off - 1) * 100:+.1f}%"])
    table(f"Checksums: {n} records x 12 KiB uint8(3,64,64), structured data, random batch 256 x {batches}, "
          f"medians of {rounds} writes and {rounds * 2} gather passes, on and off alternating",
          ["store", "write, checksums kept", "write, not kept", "write cost", "gather, verify on",
           "gather, verify off", "gather cost"], rows)


# ----------------------------------------------------------------------------- loader

def bench_loader(args):
    import zrecord
    loaderx = optional("loaderx")
    torch = optional("torch")
    n = 20000 if not args.quick else 4000
    steps = 300 if not args.quick else 60
    data = make_records(n)
    labels = np.arange(n, dtype=np.int64)
    work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
    rows, res = [], {}
    try:
        def run_loader(name, loader):
            it = iter(loader)
            for _ in range(20):
                next(it)
            t = time.perf_counter()
            for _ in range(steps):
                b = next(it)
            dt = (time.perf_counter() - t) / steps
            res[name] = dt
            return b

        for mod, label in ((zrecord, "zrecord"), (loaderx, "loaderx")):
            if mod is None:
                continue
            for codec in ("flate", "raw"):
                d = mod.Dataset.write(work / f"{label}-{codec}-d", data, codec=codec)
                l = mod.Dataset.write(work / f"{label}-{codec}-l", labels, codec=codec)
                loader = mod.DataLoader(d, l, num_workers=4, batch_size=256)
                b = run_loader(f"{label} {codec}", loader)
                assert b["data"].shape == (256, 3, 64, 64)
                loader.close()
                d.close()
                l.close()
        if torch is not None:
            np.save(work / "d.npy", data)
            np.save(work / "l.npy", labels)
            from torch.utils.data import DataLoader as TorchLoader
            ds = _TorchNpy(str(work / "d.npy"), str(work / "l.npy"))
            sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(ds, replacement=True, num_samples=10**9), 256, False)
            loader = TorchLoader(ds, batch_sampler=sampler, num_workers=4, collate_fn=_identity, prefetch_factor=4, persistent_workers=True)
            run_loader("torch (npy memmap, 4 procs)", loader)
            del loader
    finally:
        shutil.rmtree(work, ignore_errors=True)
    batch_mib = 256 * 12288 / 2**20
    for name, dt in res.items():
        ref = res.get("loaderx flate" if "flate" in name or "torch" in name else "loaderx raw")
        rows.append([name, f"{1 / dt:.1f}", f"{dt * 1e3:.2f} ms", f"{256 / dt:,.0f}", f"{batch_mib / dt:.0f} MiB/s",
                     f"{ref / dt:.2f}x" if ref else "-"])
    table(f"Loader: 256-sample batches with labels, 4 workers, {steps} steps", 
          ["loader", "batches/s", "per batch", "samples/s", "throughput", "vs loaderx (same codec)"], rows)


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


# ----------------------------------------------------------------------------- stream

def bench_stream(args):
    """Issue 9's budgets, as ratios measured in this run: SHUFFLE against IID sampling at
    N = 2^24, state_dict(), a resumed loader's first batch at step 10^6 against a fresh
    one's, and a rank's throughput against an unsharded loader of the same batch."""
    import zrecord
    shuffle, iid = zrecord.Sampler.Mode.SHUFFLE, zrecord.Sampler.Mode.IID
    space = 1 << 24
    rows = []
    for batch in (256, 1024, 8192):
        number = 2000 if not args.quick else 200
        times = {}
        for name, mode in (("IID", iid), ("SHUFFLE", shuffle)):
            s = zrecord.Sampler(space, batch, mode, 42)
            times[name] = median_time(s.next, repeat=7, number=number)
        rows.append([f"{batch:,}", f"{times['IID'] * 1e6:.1f} µs", f"{times['SHUFFLE'] * 1e6:.1f} µs",
                     f"{times['SHUFFLE'] / times['IID']:.2f}x", f"{times['SHUFFLE'] / batch * 1e9:.1f} ns"])
    table("Stream: Sampler.next() at N = 2^24, SHUFFLE against IID (budget: within 2x)",
          ["batch", "IID per batch", "SHUFFLE per batch", "SHUFFLE / IID", "SHUFFLE per index"], rows)

    work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
    try:
        # A store of N tiny records: what is timed is the stream and the threads, not I/O.
        n = space if not args.quick else 1 << 18
        with zrecord.Zrecord(work / "tiny", codec="raw") as z:
            step = 1 << 20
            for start in range(0, n, step):
                k = min(step, n - start)
                z.append(np.arange(start, start + k, dtype=np.uint32), k, 4)
            z.sync()
        tiny = zrecord.Dataset.__new__(zrecord.Dataset)  # a Dataset view of the raw store
        tiny.path, tiny.dtype, tiny.shape, tiny.codec = work / "tiny", np.dtype(np.uint32), (), "raw"
        tiny._itemsize, tiny._store = 4, zrecord.Zrecord(work / "tiny", codec="raw", create=False)
        tiny_a = zrecord.Dataset.write(work / "mix-a", np.arange(100_000, dtype=np.uint32))
        tiny_b = zrecord.Dataset.write(work / "mix-b", np.arange(30_000, dtype=np.uint32))
        repeat = 7 if not args.quick else 3

        rows = []
        for name, make in (
            ("SHUFFLE", lambda **kw: zrecord.DataLoader(tiny, tiny, batch_size=256, mode=shuffle, num_workers=2, **kw)),
            ("IID", lambda **kw: zrecord.DataLoader(tiny, tiny, batch_size=256, mode=iid, num_workers=2, **kw)),
            ("mixture of 2", lambda **kw: zrecord.DataLoader(
                zrecord.Mixture([(tiny_a, tiny_a), (tiny_b, tiny_b)], [0.7, 0.3]), batch_size=256, num_workers=2, **kw)),
        ):
            with make() as loader:
                next(loader)
                state = loader.state_dict()
                per_call = median_time(loader.state_dict, repeat=repeat, number=2000)
            far = dict(state, step=10**6)

            def first_batch(**kw):
                t = time.perf_counter()
                loader = make(**kw)
                next(loader)
                dt = time.perf_counter() - t
                loader.close()
                return dt

            def loaded_first_batch():
                t = time.perf_counter()
                loader = make()
                loader.load_state_dict(far)
                next(loader)
                dt = time.perf_counter() - t
                loader.close()
                return dt

            fresh = float(np.median([first_batch() for _ in range(repeat)]))
            resumed = float(np.median([first_batch(state=far) for _ in range(repeat)]))
            loaded = float(np.median([loaded_first_batch() for _ in range(repeat)]))
            rows.append([name, f"{per_call * 1e6:.1f} µs", f"{len(json.dumps(state))} B", f"{fresh * 1e3:.2f} ms",
                         f"{resumed * 1e3:.2f} ms", f"{resumed / fresh:.2f}x", f"{loaded * 1e3:.2f} ms",
                         f"{loaded / fresh:.2f}x"])
        table(f"Stream: state_dict() and the first batch of a loader resumed at step 10^6 (N = {n:,}, "
              "batch 256, 2 workers; budgets: state_dict under 20 µs, resumed within 2x of fresh)",
              ["stream", "state_dict()", "state size", "fresh: first batch", "state=: first batch",
               "vs fresh", "load_state_dict + first batch", "vs fresh"], rows)

        # Sharded against unsharded, same per-rank batch, image-like records.
        m = 20000 if not args.quick else 4000
        steps = 300 if not args.quick else 60
        d = zrecord.Dataset.write(work / "img-d", make_records(m))
        l = zrecord.Dataset.write(work / "img-l", np.arange(m, dtype=np.int64))
        res = {}
        # Rounds alternate the loaders, and each keeps its best round: on a shared machine
        # that compares the loaders rather than the moments they happened to run in.
        for _ in range(3):
            for name, kw in (("unsharded (world 1)", dict(world_size=1)),
                             ("rank 1 of 4", dict(rank=1, world_size=4)),
                             ("rank 3 of 8", dict(rank=3, world_size=8))):
                with zrecord.DataLoader(d, l, batch_size=256, mode=shuffle, num_workers=4, **kw) as loader:
                    for _ in range(10):
                        next(loader)
                    t = time.perf_counter()
                    for _ in range(steps):
                        next(loader)
                    dt = (time.perf_counter() - t) / steps
                res[name] = min(res.get(name, dt), dt)
        base = res["unsharded (world 1)"]
        rows = [[name, f"{256 / dt:,.0f}", f"{dt * 1e3:.2f} ms", f"{base / dt:.2f}x"] for name, dt in res.items()]
        table(f"Stream: per-rank throughput, SHUFFLE, 256 images of 12 KiB per rank, 4 workers, best of 3 "
              f"rounds of {steps} steps (budget: within 10% of unsharded)", ["loader", "samples/s", "per batch", "vs unsharded"], rows)
        d.close()
        l.close()
        tiny.close()
        tiny_a.close()
        tiny_b.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------ scale

def bench_scale(args):
    import zrecord
    rows = []
    sizes = (20_000, 200_000, 2_000_000) if not args.quick else (20_000, 200_000)
    rng = np.random.default_rng(2)
    work = Path(tempfile.mkdtemp(prefix="zrbench-", dir=args.workdir))
    try:
        for n in sizes:
            d = work / f"s{n}"
            rec = 256
            with zrecord.Zrecord(d) as z:
                step = 100_000
                for s in range(0, n, step):
                    k = min(step, n - s)
                    block = (np.arange(k * rec, dtype=np.uint32) // 97 + s).astype(np.uint8)
                    z.append(block, k, rec)
                z.sync()
            t = median_time(lambda: zrecord.Zrecord(d).close(), repeat=5)
            with zrecord.Zrecord(d) as z:
                out = np.empty((256, rec), np.uint8)
                idx = [rng.integers(0, n, 256).astype(np.uint64) for _ in range(200)]
                for ix in idx:
                    z.gather(ix, out, rec)
                g = median_time(lambda: [z.gather(ix, out, rec) for ix in idx], repeat=3) / len(idx)
            rows.append([f"{n:,}", f"{g * 1e6:.1f} µs", f"{t * 1e3:.2f} ms"])
            shutil.rmtree(d, ignore_errors=True)
        table("Scale: random gather of 256 x 256-byte flate records, and open() time",
              ["records", "gather per batch", "open()"], rows)
        if not args.quick:
            rss_rows = []
            big = work / "big.npy"
            n = (4 << 30) // 12288
            arr = np.lib.format.open_memmap(big, mode="w+", dtype=np.uint8, shape=(n, 3, 64, 64))
            block = make_records(4096)
            for s in range(0, n, 4096):
                e = min(n, s + 4096)
                arr[s:e] = block[: e - s]
            arr.flush()
            del arr
            for mod in ("zrecord", "loaderx"):
                code = (f"import numpy as np, {mod} as m;"
                        f"m.Dataset.write({str(work / ('w-' + mod))!r}, np.load({str(big)!r}, mmap_mode='r')).close()")
                t = time.perf_counter()
                p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-c", code], capture_output=True, text=True)
                dt = time.perf_counter() - t
                if p.returncode != 0:
                    SKIPPED.append(f"{mod} 4 GiB write: {p.stderr.strip().splitlines()[-1]}")
                    continue
                peak = int(p.stderr.strip().splitlines()[-1])
                rss_rows.append([mod, f"{peak / 1024:.0f} MiB", f"{4096 / dt:.0f} MiB/s"])
                shutil.rmtree(work / ("w-" + mod), ignore_errors=True)
            table("Dataset.write of a 4 GiB np.load(mmap_mode='r') array", ["package", "peak RSS", "write"], rss_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=["sampler", "store", "checksums", "loader", "stream", "scale", "all"])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    ap.add_argument("--only", default=None, help="comma-separated name fragments of the store contenders to run")
    ap.add_argument("--workdir", default=None, help="where stores are written (default: the temp dir)")
    args = ap.parse_args()
    import zrecord
    print(f"# zrecord {zrecord.__version__} benchmarks, {time.strftime('%Y-%m-%d')}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}; warm page cache")
    for part in ("sampler", "store", "checksums", "loader", "stream", "scale"):
        if args.what in (part, "all"):
            gc.collect()
            globals()[f"bench_{part}"](args)
    if SKIPPED:
        print("\nskipped:")
        for s in dict.fromkeys(SKIPPED):
            print(f"- {s}")


if __name__ == "__main__":
    main()
