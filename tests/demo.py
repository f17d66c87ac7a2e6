"""`make demo`: write a sample dataset, read random batches, inspect it.

Uses the `zr` CLI for conversion and inspection and, when the Python package is installed,
the `zrecord` package for reading batches (falling back to the CLI's export otherwise).
"""

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zr", required=True, help="path to the zr binary")
    ap.add_argument("--records", type=int, default=20000)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="zrecord-demo-"))
    rng = np.random.default_rng(0)
    base = np.linspace(0, 255, 3 * 64 * 64).reshape(3, 64, 64)
    data = (base[None] + rng.integers(0, 8, (args.records, 3, 64, 64))).astype(np.uint8)
    labels = rng.integers(0, 1000, args.records).astype(np.int64)
    np.save(work / "data.npy", data)
    np.save(work / "label.npy", labels)
    print(f"wrote {args.records} samples of uint8(3,64,64) to {work}/data.npy")

    t = time.perf_counter()
    subprocess.run([args.zr, "convert", work / "data.npy", work / "train_data.zr"], check=True)
    subprocess.run([args.zr, "convert", work / "label.npy", work / "train_label.zr"], check=True)
    print(f"converted in {time.perf_counter() - t:.2f}s")

    try:
        import zrecord
    except ImportError:
        zrecord = None
    if zrecord is not None:
        ds = zrecord.Dataset(work / "train_data.zr")
        ls = zrecord.Dataset(work / "train_label.zr")
        idx = rng.integers(0, len(ds), 256)
        t = time.perf_counter()
        for _ in range(100):
            batch = ds[idx]
        dt = (time.perf_counter() - t) / 100
        assert np.array_equal(batch, data[idx]) and np.array_equal(ls[idx], labels[idx])
        print(f"random batch of 256: {dt * 1e3:.2f} ms ({batch.nbytes / dt / 2**20:.0f} MiB/s), contents verified")
        with zrecord.DataLoader(ds, ls, batch_size=256) as loader:
            for i, b in enumerate(loader):  # noqa: B007 (the last batch is printed below)
                if i == 50:
                    break
        print(f"DataLoader: batch data {b['data'].shape} {b['data'].dtype}, label {b['label'].shape}")
    else:
        subprocess.run([args.zr, "export", work / "train_data.zr", work / "back.npy"], check=True)
        assert np.array_equal(np.load(work / "back.npy"), data)
        print("exported back to .npy: identical (install the Python package for batch reads)")

    subprocess.run([args.zr, "inspect", work / "train_data.zr"], check=True)
    print(f"demo files are in {work}")


if __name__ == "__main__":
    main()
