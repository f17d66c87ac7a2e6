"""Images: finished (B, 3, 224, 224) uint8 batches of RandomResizedCrop per second, from
natural photographs stored as JPEG, against what a vision team runs instead, in one run.

The photographs are scikit-image's (astronaut, coffee, chelsea, rocket, the
immunohistochemistry slide, the cat and the Hubble deep field), each cut at many offsets
and scales into about 500 x 375 (and 375 x 500) images, mirrored, and saved as JPEG at
quality 90 with Pillow: `--quick` 400 images, else 2,000.

- zrecord: an image field, `DataLoader(images={"image": RandomResizedCrop(224,
  flip=0.5)})`, SHUFFLE, decoding in Rust on every core (the loader's workers and their
  rayon pool).
- The machine's limit: one core's rate of decode-and-crop with the chosen decoder alone
  (`zrecord.vision.render` over the same images in one thread), times the cores
  (target: zrecord within 20% of it).
- torch's DataLoader with torchvision's transforms v2 (`RandomResizedCrop(224,
  antialias=True)`, `RandomHorizontalFlip`) over the same JPEG bytes held in memory, a
  worker per core, where torch and torchvision install, two ways: decoded by
  torchvision's `decode_jpeg` (libjpeg-turbo) as tensors, and decoded by PIL as
  `ImageFolder` loads them (target: zrecord >= 2x).
- FFCV's Loader (`RandomResizedCropRGBImageDecoder`, its JIT-compiled pipeline) over the
  same images written by FFCV's own writer (JPEG at quality 90), where it installs (it
  builds against libjpeg-turbo and OpenCV from Debian's packages; target: zrecord >= 1x).
- DALI where its wheel runs without a GPU: listed as not run otherwise, with the reason.
"""

import io
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from measure import RESULTS, SKIPPED, optional, table

BATCH = 64
SIZE = 224


def photographs(n):
    """`n` JPEG images of about 500 x 375 from scikit-image's photographs."""
    from PIL import Image
    from skimage import data

    sources = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.immunohistochemistry(),
               data.cat(), data.hubble_deep_field()]
    rng = np.random.default_rng(0)
    out = []
    for k in range(n):
        src = sources[k % len(sources)]
        h, w = src.shape[:2]
        scale = rng.uniform(0.6, 1.0)
        ch, cw = int(h * scale), int(w * scale)
        y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        crop = Image.fromarray(src[y:y + ch, x:x + cw])
        size = (500, 375) if k % 3 else (375, 500)
        img = crop.resize(size, Image.Resampling.BILINEAR)
        if k % 2:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def _rate(next_batch, seconds, warm=2):
    for _ in range(warm):
        next_batch()
    t = time.perf_counter()
    n = 0
    while time.perf_counter() - t < seconds:
        next_batch()
        n += 1
    return n * BATCH / (time.perf_counter() - t)


def bench_vision(args):
    """RandomResizedCrop batches: zrecord against the machine's limit and the peers."""
    try:
        _bench(args)
    except ImportError as e:
        SKIPPED.append(f"vision: {type(e).__name__}: {e} (pip install -r bench/requirements.txt)")


def _bench(args):
    import zrecord
    from zrecord.vision import Images, RandomResizedCrop

    cores = len(os.sched_getaffinity(0))
    n = 400 if args.quick else 2000
    seconds = 3.0 if args.quick else 8.0
    images = photographs(n)
    work = Path(tempfile.mkdtemp(prefix="zr-vision-", dir=args.workdir))
    rows, out, missing = [], {}, []
    try:
        zrecord.Dataset.write(work / "ds", {"image": Images(images), "label": np.arange(n) % 10})
        ds = zrecord.Dataset(work / "ds")
        pipeline = RandomResizedCrop(SIZE, flip=0.5)

        def one_core():
            # One thread, the decoder and crop alone, over every 7th image.
            t = time.perf_counter()
            done = 0
            while time.perf_counter() - t < seconds / 2:
                for k in range(0, n, 7):
                    zrecord.vision.render(images[k], pipeline, step=done, index=k)
                    done += 1
            return done / (time.perf_counter() - t)

        def zr():
            dl = zrecord.DataLoader(ds, batch_size=BATCH, num_workers=cores, seed=1, images={"image": pipeline})
            with dl:
                batch = next(dl)
                assert batch["image"].shape == (BATCH, 3, SIZE, SIZE) and batch["image"].dtype == np.uint8
                return _rate(lambda: next(dl), seconds)

        contenders = {"zrecord": zr, "one core": one_core}
        for decoder in ("tensor", "pil"):
            contenders[decoder] = lambda decoder=decoder: _torchvision(images, cores, seconds, decoder)
        beton = _ffcv_file(images, work)
        if isinstance(beton, str):
            missing.append(f"FFCV: {beton}")
        else:
            contenders["ffcv"] = lambda: _ffcv(beton, cores, seconds)
        rounds = {name: [] for name in contenders}
        for _ in range(3):  # interleaved rounds: the machine's noise falls on every contender
            for name, run in contenders.items():
                rounds[name].append(run())
        med = {name: (v[0] if isinstance(v[0], str) else float(np.median(v))) for name, v in rounds.items()}
        spread = {name: ", ".join(f"{x:,.0f}" for x in v) if not isinstance(v[0], str) else "" for name, v in
                  rounds.items()}
        ours, limit = med["zrecord"], med["one core"] * cores
        rows.append(["zrecord DataLoader, images=RandomResizedCrop (Rust, all cores)", f"{ours:,.0f}",
                     spread["zrecord"], "1.00x"])
        rows.append([f"machine limit: one core's decode-and-crop ({med['one core']:,.0f}/s) x {cores} cores",
                     f"{limit:,.0f}", spread["one core"], f"{limit / ours:.2f}x"])
        out["vs_limit"] = ours / limit
        for decoder, label in (("tensor", "decode_jpeg (libjpeg-turbo) + transforms v2 on tensors"),
                               ("pil", "PIL decode + transforms v2 on PIL images (ImageFolder's way)")):
            rate = med[decoder]
            if isinstance(rate, str):
                missing.append(f"torch DataLoader + torchvision {label}: {rate}")
                continue
            rows.append([f"torch DataLoader ({cores} workers), torchvision {label}", f"{rate:,.0f}",
                         spread[decoder], f"{rate / ours:.2f}x"])
            out[f"vs_torchvision_{decoder}"] = ours / rate
        if "ffcv" in med:
            rate = med["ffcv"]
            rows.append([f"FFCV Loader ({cores} workers), RandomResizedCropRGBImageDecoder, the images re-encoded by "
                         "FFCV at quality 90", f"{rate:,.0f}", spread["ffcv"], f"{rate / ours:.2f}x"])
            out["vs_ffcv"] = ours / rate
        for name, module, why in (("DALI", "nvidia.dali", "its wheels are built for CUDA"),):
            if optional(module) is None:
                missing.append(f"{name}: not installed ({why})")
        table(f"Vision: ({BATCH}, 3, {SIZE}, {SIZE}) uint8 RandomResizedCrop batches per second, {n:,} JPEG "
              f"photographs of about 500x375 (quality 90), SHUFFLE, {cores} cores",
              ["contender", "images/s (median of 3)", "rounds", "vs zrecord"], rows)
        for m in missing:
            print(f"- not run: {m}")
            SKIPPED.append(f"vision: {m}")
        ds.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS[("vision",)] = out


def _torchvision(images, workers, seconds, decoder):
    """torch's DataLoader over the JPEG bytes with torchvision's v2 transforms, decoding
    with torchvision's libjpeg-turbo (`decoder="tensor"`) or PIL (`"pil"`, as ImageFolder
    loads): images/s, or why it did not run."""
    try:
        import torch
        from PIL import Image
        from torchvision.io import decode_jpeg
        from torchvision.transforms import v2
    except ImportError as e:
        return f"not installed ({e})"
    crop = [v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip()]
    transform = v2.Compose(crop if decoder == "tensor" else [*crop, v2.PILToTensor()])

    class Jpegs(torch.utils.data.Dataset):
        def __len__(self):
            return len(images)

        def __getitem__(self, i):
            if decoder == "tensor":
                return transform(decode_jpeg(torch.frombuffer(bytearray(images[i]), dtype=torch.uint8)))
            return transform(Image.open(io.BytesIO(images[i])).convert("RGB"))

    loader = torch.utils.data.DataLoader(Jpegs(), batch_size=BATCH, shuffle=True, num_workers=workers,
                                         persistent_workers=True, drop_last=True)

    def batches():
        while True:
            yield from loader

    it = batches()
    first = next(it)
    assert tuple(first.shape) == (BATCH, 3, SIZE, SIZE)
    return _rate(lambda: next(it), seconds)


def _ffcv_file(images, work):
    """The images in an FFCV .beton file (FFCV decodes and encodes them itself, JPEG at
    quality 90), or why FFCV did not run."""
    try:
        from ffcv.fields import IntField, RGBImageField
        from ffcv.writer import DatasetWriter
        from PIL import Image
    except ImportError as e:
        return f"not installed ({e}; it builds against libjpeg-turbo and OpenCV from Debian's packages)"

    class Decoded:
        def __len__(self):
            return len(images)

        def __getitem__(self, i):
            return np.asarray(Image.open(io.BytesIO(images[i])).convert("RGB")), i % 10

    path = work / "images.beton"
    fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()}
    DatasetWriter(str(path), fields, num_workers=len(os.sched_getaffinity(0))).from_indexed_dataset(Decoded())
    return path


def _ffcv(path, workers, seconds):
    """FFCV's Loader of RandomResizedCrop batches, uint8 CHW: images/s."""
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

    pipelines = {"image": [RandomResizedCropRGBImageDecoder((SIZE, SIZE)), RandomHorizontalFlip(), ToTensor(),
                           ToTorchImage()],
                 "label": [IntDecoder(), ToTensor()]}
    loader = Loader(str(path), batch_size=BATCH, num_workers=workers, order=OrderOption.RANDOM, pipelines=pipelines,
                    drop_last=True)

    def batches():
        while True:
            yield from loader

    it = batches()
    images, _ = next(it)
    assert tuple(images.shape) == (BATCH, 3, SIZE, SIZE)
    return _rate(lambda: next(it), seconds)


def summary_rows(row):
    """The vision section's targets, for the targets table."""
    v = RESULTS.get(("vision",))
    if not v:
        return
    r = v["vs_limit"]
    row("vision: RandomResizedCrop batches vs the machine's limit (cores x one core's decode-and-crop)",
        f"{r:.2f}x", ">= 0.8x", r >= 0.8)
    if "vs_ffcv" in v:
        r = v["vs_ffcv"]
        row("vision: RandomResizedCrop batches vs FFCV's Loader", f"{r:.2f}x", ">= 1x", r >= 1)
    for decoder, what in (("tensor", "decode_jpeg"), ("pil", "PIL")):
        if f"vs_torchvision_{decoder}" in v:
            r = v[f"vs_torchvision_{decoder}"]
            row(f"vision: RandomResizedCrop batches vs torch DataLoader + torchvision v2 ({what})", f"{r:.2f}x",
                ">= 2x", r >= 2)
