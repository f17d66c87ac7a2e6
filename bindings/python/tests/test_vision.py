"""Image fields and the loader's image pipelines: decoded pixels equal Pillow's
(PNG, WebP and JPEG exactly), crops and flips are the same on any
world size, worker count and resume, and a bad image is a typed error naming the field
and record, or is skipped."""

import io
import struct
import zlib

import numpy as np
import pytest

import zrecord
from zrecord.errors import DecodeError
from zrecord.vision import CenterCrop, Images, RandomResizedCrop, Resize

Image = pytest.importorskip("PIL.Image")


def picture(h, w, seed):
    """A smooth picture with some texture: what JPEG is made for."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x / w * 255, y / h * 255, (x + y) / (w + h) * 255], axis=-1)
    noise = rng.normal(0, 12, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encoded(array, fmt, **kw):
    out = io.BytesIO()
    Image.fromarray(array).save(out, format=fmt, **kw)
    return out.getvalue()


@pytest.fixture(scope="module")
def images():
    """Forty images of assorted sizes: JPEG, PNG (RGB, grey, RGBA) and WebP."""
    out = []
    for k in range(40):
        h, w = 48 + (k * 7) % 60, 40 + (k * 13) % 90
        a = picture(h, w, k)
        kind = k % 5
        if kind == 0:
            out.append(encoded(a, "JPEG", quality=90))
        elif kind == 1:
            out.append(encoded(a, "PNG"))
        elif kind == 2:
            out.append(encoded(a[:, :, 0], "PNG"))
        elif kind == 3:
            rgba = np.concatenate([a, np.full((h, w, 1), 200, np.uint8)], axis=-1)
            out.append(encoded(rgba, "PNG"))
        else:
            out.append(encoded(a, "WEBP", quality=90))
    return out


@pytest.fixture
def ds(tmp_path, images):
    zrecord.Dataset.write(tmp_path / "ds", {"image": Images(images), "label": np.arange(len(images))})
    return zrecord.Dataset(tmp_path / "ds")


def test_decoded_pixels_equal_pillows(images):
    for k, data in enumerate(images):
        ours = zrecord.vision.decode(data)
        theirs = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert ours.shape == theirs.shape and ours.dtype == np.uint8
        diff = np.abs(ours.astype(int) - theirs.astype(int))
        # Every format exactly: JPEG too, since both decode it with libjpeg-turbo's default
        # IDCT and upsampling (zune-jpeg, before, was off by up to 8 in 1% of pixels).
        assert diff.max() == 0, (k, diff.mean(), diff.max())


def test_an_image_field_round_trips_and_refuses_what_is_not_an_image(ds, images, tmp_path):
    assert [f.kind for f in ds.fields] == ["image", "fixed"]
    assert [f.codec for f in ds.fields] == ["raw", "flate"], "images are not compressed again"
    assert ds[3]["image"] == images[3] and ds[[5, 6]]["image"] == images[5:7]
    # Paths, PIL images and arrays are encoded; max_side shrinks the larger ones.
    (tmp_path / "a.png").write_bytes(images[1])
    big = picture(300, 200, 1)
    items = [str(tmp_path / "a.png"), Image.fromarray(big), big, images[0]]
    zrecord.Dataset.write(tmp_path / "mixed", {"image": Images(items, format="png", max_side=100)})
    mixed = zrecord.Dataset(tmp_path / "mixed")
    shapes = [zrecord.vision.decode(mixed[i]["image"]).shape for i in range(4)]
    assert shapes[0] == zrecord.vision.decode(images[1]).shape
    assert shapes[1] == shapes[2] == (100, 67, 3)
    assert mixed[3]["image"] == images[0], "an image within max_side is stored as given"
    with pytest.raises(ValueError, match=r"field 'image'|image.*sample 1: is not a JPEG, PNG or WebP image"):
        zrecord.Dataset.write(tmp_path / "bad", {"image": Images([images[0], b"GIF89a not ours"])})
    assert not (tmp_path / "bad").exists()


def test_pipelines_give_the_pixels_they_promise(ds, images):
    # A Resize to an image's own size copies its pixels; flip=1 mirrors them.
    first = zrecord.vision.decode(images[1])
    h, w, _ = first.shape
    for layout, flip in (("HWC", 0.0), ("CHW", 1.0)):
        with zrecord.DataLoader(ds, batch_size=40, num_workers=1, mode=zrecord.Sampler.Mode.SEQUENTIAL,
                                images={"image": Resize((h, w), flip=flip, layout=layout)}) as dl:
            batch = next(dl)
        got = batch["image"][1]
        if layout == "CHW":
            got = got.transpose(1, 2, 0)
        want = first[:, ::-1] if flip else first
        np.testing.assert_array_equal(got, want)
        assert batch["image"].shape == (40, h, w, 3) if layout == "HWC" else (40, 3, h, w)
    # float32, normalised: (v / 255 - mean) / std.
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    with zrecord.DataLoader(ds, batch_size=40, num_workers=0, mode=zrecord.Sampler.Mode.SEQUENTIAL,
                            images={"image": Resize((h, w), dtype="float32", mean=mean, std=std)}) as dl:
        batch = next(dl)
    want = (first / 255.0 - np.array(mean)) / np.array(std)
    np.testing.assert_allclose(batch["image"][1].transpose(1, 2, 0), want, atol=1e-5)
    assert batch["image"].dtype == np.float32
    # A centre crop and a random crop: the right shapes, every image.
    with zrecord.DataLoader(ds, batch_size=8, num_workers=2,
                            images={"image": CenterCrop(32, ratio=0.9)}) as dl:
        assert next(dl)["image"].shape == (8, 3, 32, 32)


def batches(ds, rank, world, workers, steps, state=None):
    dl = zrecord.DataLoader(ds, batch_size=8 // world, num_workers=workers, seed=5, rank=rank, world_size=world,
                            state=state, check_ranks=False,
                            images={"image": RandomResizedCrop(24, flip=0.5)})
    with dl:
        out = [next(dl) for _ in range(steps)]
        return out, dl.state_dict()


def test_crops_are_the_same_on_any_world_size_worker_count_and_resume(ds):
    # Augmentation seeded per worker changes with the worker count and world size (as in
    # every peer); here it is keyed by (seed, step, sample, field), so it does not.
    whole, _ = batches(ds, 0, 1, 4, 12)
    per_rank = [batches(ds, r, 4, 2, 12)[0] for r in range(4)]
    for step in range(12):
        joined = np.concatenate([per_rank[r][step]["image"] for r in range(4)])
        np.testing.assert_array_equal(joined, whole[step]["image"])
        np.testing.assert_array_equal(np.concatenate([per_rank[r][step]["label"] for r in range(4)]),
                                      whole[step]["label"])
    first, state = batches(ds, 0, 1, 1, 5)
    rest, _ = batches(ds, 0, 1, 3, 7, state=state)
    for step, b in enumerate(first + rest):
        np.testing.assert_array_equal(b["image"], whole[step]["image"])
    # zrecord.vision.render gives one slot's pixels from its key alone.
    pipeline = RandomResizedCrop(24, flip=0.5)
    for slot in (0, 5):
        index = int(whole[3]["label"][slot])
        one = zrecord.vision.render(ds[index]["image"], pipeline, seed=5, step=3, index=index)
        np.testing.assert_array_equal(one, whole[3]["image"][slot])
    # Crops differ between epochs' draws of the same sample and between seeds.
    by_label = {}
    for b in whole:
        for img, label in zip(b["image"], b["label"]):
            by_label.setdefault(int(label), []).append(img)
    twice = [v for v in by_label.values() if len(v) > 1]
    assert twice and any(not np.array_equal(v[0], v[1]) for v in twice)


def cut_png(data):
    """A PNG cut inside its image data: the header is whole, the pixels are not."""
    return data[: len(data) // 2]


def png_header(w, h):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IEND", b"")


def test_bad_images_are_decode_errors_naming_field_and_record(tmp_path, images):
    bad = list(images[:10])
    bad[2] = images[0][:200]  # a JPEG cut after its header
    bad[4] = cut_png(images[1])  # a PNG cut in its data
    bad[7] = images[4][:40]  # a WebP cut after its header
    bad[9] = png_header(1 << 16, 1 << 16)  # a bomb: 2^32 pixels claimed
    for k in (2, 4, 7, 9):
        one = list(images[:10])
        one[k] = bad[k]
        zrecord.Dataset.write(tmp_path / f"bad{k}", {"image": Images(one), "label": np.arange(10)})
        with zrecord.DataLoader(zrecord.Dataset(tmp_path / f"bad{k}"), batch_size=10, num_workers=1,
                                mode=zrecord.Sampler.Mode.SEQUENTIAL, images={"image": Resize(16)}) as dl:
            with pytest.raises(DecodeError) as e:
                next(dl)
        assert e.value.field == "image" and e.value.record == k, (k, e.value)
        message = str(e.value)
        assert ("does not decode" in message) or ("over the limit" in message and "max_pixels" in message), message
    with pytest.raises(DecodeError, match="65536 x 65536"):
        zrecord.vision.decode(bad[9])
    # Skipped: each replaced by the next sample that decodes, and counted.
    zrecord.Dataset.write(tmp_path / "bad", {"image": Images(bad), "label": np.arange(10)})
    with zrecord.DataLoader(zrecord.Dataset(tmp_path / "bad"), batch_size=10, num_workers=2, mode=zrecord.Sampler.Mode.SEQUENTIAL,
                            on_error="skip", images={"image": Resize(16)}) as dl:
        batch = next(dl)
        assert sorted(set(batch["label"].tolist())) == [0, 1, 3, 5, 6, 8], batch["label"]
        assert dl.stats["skipped"] == 4


def test_convert_takes_an_image_folder_from_python(tmp_path, images):
    # The same Rust converter as `zr convert DIR OUT --images`, from Python.
    for c, name in enumerate(["b", "a"]):
        (tmp_path / "tree" / name).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "tree" / name / f"{i}.{'png' if (i + c) % 5 in (1, 2, 3) else 'jpg'}").write_bytes(
                images[c * 3 + i])
    ds = zrecord.vision.convert(tmp_path / "tree", tmp_path / "out")
    assert ds.metadata == {"classes": ["a", "b"]} and len(ds) == 6
    assert [int(ds[i]["label"]) for i in range(6)] == [0, 0, 0, 1, 1, 1]
    assert ds[0]["image"] == images[3] and ds[3]["image"] == images[0]
    (tmp_path / "tree" / "a" / "9.jpg").write_bytes(b"nope")
    with pytest.raises(ValueError, match=r"9\.jpg.*is not a JPEG, PNG or WebP image"):
        zrecord.vision.convert(tmp_path / "tree", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
