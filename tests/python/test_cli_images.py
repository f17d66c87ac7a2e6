"""`zr convert DIR OUT --images`: an ImageFolder tree becomes an image field, a label
field and each file's path, every image and label in place, in torchvision's order (class
sub-folders included), the class names in the dataset card; a file that is not an image
fails the conversion naming the file, leaving nothing."""

import io
import subprocess

import numpy as np
import pytest

import zrecord

Image = pytest.importorskip("PIL.Image")


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300)


def tree(root, classes=("cat", "dog", "fish"), per_class=7):
    rng = np.random.default_rng(0)
    expect = []
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 255, (20 + i, 30 + c, 3), dtype=np.uint8)
            out = io.BytesIO()
            fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][(i + c) % 3]
            Image.fromarray(pixels).save(out, format=fmt)
            path = root / name / f"{i:02d}.{ext.upper() if i == 3 else ext}"
            path.write_bytes(out.getvalue())
            expect.append((path.read_bytes(), c))
    (root / "cat" / "notes.txt").write_text("not an image, and not read")
    (root / "README").write_text("a file beside the class folders is not a class")
    return expect


def test_zr_convert_images_takes_an_image_folder(zr, tmp_path):
    expect = tree(tmp_path / "tree")
    p = run(zr, "convert", str(tmp_path / "tree"), str(tmp_path / "out"), "--images", "--shard-records", "8")
    assert p.returncode == 0, p.stderr
    ds = zrecord.Dataset(tmp_path / "out")
    assert [(f.name, f.kind) for f in ds.fields] == [("image", "image"), ("label", "fixed"), ("path", "string")]
    assert ds.metadata == {"classes": ["cat", "dog", "fish"]}
    assert len(ds) == len(expect) == 21
    for i, (data, label) in enumerate(expect):
        s = ds[i]
        assert s["image"] == data and int(s["label"]) == label, i
    with zrecord.DataLoader(ds, batch_size=7, num_workers=2, images={"image": zrecord.vision.Resize(16)}) as dl:
        assert next(dl)["image"].shape == (7, 3, 16, 16)
    # A file named as an image that is not one: named, and nothing written.
    (tmp_path / "tree" / "dog" / "05.jpg").write_bytes(b"this is not a jpeg at all")
    p = run(zr, "convert", str(tmp_path / "tree"), str(tmp_path / "bad"), "--images")
    assert p.returncode != 0 and "05.jpg" in p.stderr and "is not a JPEG, PNG or WebP image" in p.stderr, p.stderr
    assert not (tmp_path / "bad").exists()
    (tmp_path / "empty").mkdir()
    p = run(zr, "convert", str(tmp_path / "empty"), str(tmp_path / "bad"), "--images")
    assert p.returncode != 0 and "ImageFolder" in p.stderr, p.stderr
    p = run(zr, "convert", str(tmp_path / "tree"), str(tmp_path / "bad"), "--images", "--megatron")
    assert p.returncode == 2 and "--images reads an ImageFolder tree" in p.stderr, p.stderr


def torchvision_order(root, extensions=(".jpg", ".jpeg", ".png", ".webp")):
    """torchvision.datasets.ImageFolder's samples (its make_dataset): classes in name order,
    then sorted(os.walk(class folder, followlinks=True)), each folder's files sorted."""
    import os

    out = []
    for label, cls in enumerate(sorted(e.name for e in os.scandir(root) if e.is_dir())):
        for folder, _, names in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for name in sorted(names):
                if name.lower().endswith(extensions):
                    out.append((os.path.relpath(os.path.join(folder, name), root), label))
    return out


def test_images_in_a_class_folders_sub_folders_are_taken_in_torchvisions_order(zr, tmp_path):
    """Images below a class folder were left out without a word (torchvision's ImageFolder
    walks them: 3 images against 2). Now each is a sample, in the order torchvision gives,
    which compares folder paths as strings ("cat/x-y" before "cat/x/z"), with its path."""
    rng = np.random.default_rng(3)
    root = tmp_path / "tree"
    names = ["cat/01.jpg", "cat/x/00.jpg", "cat/x/z/00.png", "cat/x-y/00.png", "cat/x-y/10.JPG", "dog/a.webp",
             "dog/deep/er/b.jpg"]
    for k, name in enumerate(names):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        fmt = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[name.rsplit(".", 1)[1].lower()]
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (8 + k, 9, 3), dtype=np.uint8)).save(out, format=fmt)
        (root / name).write_bytes(out.getvalue())
    (root / "cat" / "x" / "notes.txt").write_text("not an image")
    want = torchvision_order(root)
    assert len(want) == len(names)
    p = run(zr, "convert", str(root), str(tmp_path / "out"), "--images")
    assert p.returncode == 0, p.stderr
    ds = zrecord.Dataset(tmp_path / "out")
    got = [(ds[i]["path"], int(ds[i]["label"])) for i in range(len(ds))]
    assert got == want
    for i, (path, _) in enumerate(want):
        assert ds[i]["image"] == (root / path).read_bytes(), path
    # The same from Python.
    again = zrecord.vision.convert(root, tmp_path / "py")
    assert [again[i]["path"] for i in range(len(again))] == [p for p, _ in want]


def test_zr_convert_images_takes_webdataset_shards(zr, tmp_path):
    import tarfile

    rng = np.random.default_rng(1)
    expect = []
    (tmp_path / "shards").mkdir()
    for shard in range(3):
        with tarfile.open(tmp_path / "shards" / f"train-{shard:04d}.tar", "w") as tar:
            for i in range(5):
                key = f"s{shard}/{i:05d}"
                out = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (16, 12, 3), dtype=np.uint8)).save(out, format="PNG")
                members = {"png": out.getvalue(), "cls": f"{(shard * 5 + i) % 4}\n".encode(),
                           "txt": f"a picture, number {shard * 5 + i}".encode(), "json": b'{"k": 1}'}
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                expect.append(members)
    p = run(zr, "convert", str(tmp_path / "shards"), str(tmp_path / "out"), "--images")
    assert p.returncode == 0, p.stderr
    ds = zrecord.Dataset(tmp_path / "out")
    assert [(f.name, f.kind) for f in ds.fields] == [
        ("image", "image"), ("json", "bytes"), ("label", "fixed"), ("text", "string")]
    assert len(ds) == 15
    for i, m in enumerate(expect):
        s = ds[i]
        assert s["image"] == m["png"] and s["json"] == m["json"], i
        assert int(s["label"]) == int(m["cls"]) and s["text"] == m["txt"].decode(), i
    # One tar alone works too; a sample missing a member is named.
    p = run(zr, "convert", str(tmp_path / "shards" / "train-0001.tar"), str(tmp_path / "one"), "--images")
    assert p.returncode == 0, p.stderr
    assert len(zrecord.Dataset(tmp_path / "one")) == 5
    with tarfile.open(tmp_path / "shards" / "train-0003.tar", "w") as tar:
        info = tarfile.TarInfo("late/00001.png")
        info.size = len(expect[0]["png"])
        tar.addfile(info, io.BytesIO(expect[0]["png"]))
    p = run(zr, "convert", str(tmp_path / "shards"), str(tmp_path / "bad"), "--images")
    assert p.returncode != 0 and "train-0003.tar" in p.stderr and "late/00001" in p.stderr, p.stderr
    assert not (tmp_path / "bad").exists()
