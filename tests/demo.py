"""`make demo`: what zrecord is for, on data it makes itself.

Writes a dataset of four fields (JPEG images, captions, token documents, labels), trains a
few steps on it with the loader (images decoded, cropped and flipped in Rust), saves the
loader's state, resumes from it and checks the resumed batches are the ones the first run
would have read, prints the throughput and `zr inspect`, and says how to look at the dataset
in a browser; with `--view` it serves the viewer (`zr view`, its URL printed) until Ctrl-C.
`--samples`, `--steps` to size it; the dataset stays in `--out` (default a new temporary
folder).
"""

import argparse
import io
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np


def make(work: Path, n: int):
    """`n` samples: a JPEG of a coloured blob, its caption, a token document, its label."""
    from PIL import Image

    import zrecord

    rng = np.random.default_rng(0)
    colours = ["red", "green", "blue", "yellow"]
    labels = rng.integers(0, len(colours), n)
    images, captions, tokens = [], [], []
    y, x = np.mgrid[0:96, 0:128]
    for k in range(n):
        c = int(labels[k])
        cy, cx = rng.integers(20, 76), rng.integers(20, 108)
        blob = ((y - cy) ** 2 + (x - cx) ** 2 < 20 ** 2)[..., None]
        rgb = np.array([[255, 40, 40], [40, 200, 40], [40, 40, 255], [230, 220, 40]][c], np.uint8)
        pixels = np.where(blob, rgb, rng.integers(0, 60, (96, 128, 3))).astype(np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="JPEG", quality=90)
        images.append(out.getvalue())
        captions.append(f"a {colours[c]} blob at ({cx}, {cy})")
        tokens.append(rng.integers(1, 32000, rng.integers(8, 200), dtype=np.uint16))
    t = time.perf_counter()
    zrecord.Dataset.write(work / "demo", {"image": zrecord.vision.Images(images), "caption": captions,
                                          "tokens": tokens, "label": labels}, metadata={"classes": colours})
    print(f"wrote {n} samples (image, caption, tokens, label) to {work / 'demo'} in {time.perf_counter() - t:.2f}s")
    return zrecord.Dataset(work / "demo")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zr", required=True, help="path to the zr binary")
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", type=Path, help="the folder to write the dataset in (default: a new temporary one)")
    ap.add_argument("--view", action="store_true", help="serve the dataset viewer at the end, until Ctrl-C")
    args = ap.parse_args()

    import zrecord
    from zrecord.vision import RandomResizedCrop

    work = args.out or Path(tempfile.mkdtemp(prefix="zrecord-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    ds = make(work, args.samples)
    print(ds)
    print("sample 0:", {k: (v if isinstance(v, str) else getattr(v, "shape", v)) for k, v in ds[0].items()
                        if k != "image"}, "image:", len(ds[0]["image"]), "JPEG bytes")

    try:
        import torch
    except ImportError:
        torch = None
    model = opt = None
    if torch is not None:
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loader(state=None):
        return zrecord.DataLoader(ds, batch_size=64, num_workers=2, seed=7, state=state,
                                  images={"image": RandomResizedCrop(64, scale=(0.5, 1.0), flip=0.5)})

    half = args.steps // 2
    seen, loss = [], None
    t = time.perf_counter()
    with loader() as dl:
        for step in range(args.steps):
            batch = next(dl)
            seen.append(batch)
            if model is not None:
                x = torch.from_numpy(batch["image"]).float() / 255
                loss = torch.nn.functional.cross_entropy(model(x), torch.from_numpy(batch["label"]))
                opt.zero_grad()
                loss.backward()
                opt.step()
            if step == half - 1:
                state = dl.state_dict()
    dt = time.perf_counter() - t
    what = f", loss {loss.item():.3f}" if loss is not None else " (torch not installed: read only)"
    print(f"trained {args.steps} steps of 64: {args.steps * 64 / dt:,.0f} samples/s{what}")

    # A job stopped at step `half` resumes from its state and reads the same batches.
    with loader(state) as dl:
        for step in range(half, args.steps):
            batch = next(dl)
            for key in ("image", "label", "tokens", "tokens_offsets"):
                assert np.array_equal(batch[key], seen[step][key]), (step, key)
            assert batch["caption"] == seen[step]["caption"]
    print(f"resumed at step {half}: steps {half}..{args.steps - 1} equal the uninterrupted run, pixel for pixel")

    subprocess.run([args.zr, "inspect", str(work / "demo")], check=True)
    if args.view:
        # zr view prints the page's URL and serves until Ctrl-C.
        try:
            subprocess.run([args.zr, "view", str(work / "demo")], check=True)
        except KeyboardInterrupt:
            pass
    else:
        print(f"look at it in a browser: {args.zr} view {work / 'demo'} (prints the page's URL), "
              "or `make demo VIEW=1`; remove it with rm -r", work)


if __name__ == "__main__":
    main()
