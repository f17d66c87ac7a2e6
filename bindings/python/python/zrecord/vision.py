"""Images: fields of encoded JPEG, PNG and WebP images, and the pipelines a DataLoader
runs on them in Rust, in its worker threads (no Python per image).

Write::

    zrecord.Dataset.write(path, {"image": zrecord.vision.Images(files), "label": labels})

Read, decoded, cropped, resized and flipped straight into the batch::

    loader = zrecord.DataLoader(ds, batch_size=256, images={
        "image": zrecord.vision.RandomResizedCrop(224, flip=0.5)})
    batch = next(loader)          # batch["image"]: (256, 3, 224, 224) uint8

Every random choice is a keyed function of the loader's seed, the global batch's step,
the sample and the field (never of a worker), so the same sample of the same global
batch gets the same pixels on any world size and worker count and after a resume. The
work is ``core/src/image/`` (headers, crops; decoding by libjpeg-turbo, png and
image-webp, resizing by fast_image_resize); this module holds no image rule of its own.
"""

from __future__ import annotations

import io
import os
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np

from . import _zrecord

__all__ = ["CenterCrop", "Images", "RandomResizedCrop", "Resize", "convert", "decode", "render"]

#: ImageNet's per-channel mean and standard deviation (0-1 scale), for ``normalize=True``.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _size(size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    if isinstance(size, bool):
        raise TypeError(f"size must be an int or (height, width), not {size!r}")
    if isinstance(size, int):
        h = w = size
    else:
        try:
            h, w = (int(v) for v in size)
        except (TypeError, ValueError):
            raise TypeError(f"size must be an int or (height, width), not {size!r}") from None
    if not (1 <= h <= 32768 and 1 <= w <= 32768):
        raise ValueError(f"size must be 1 to 32768 pixels each way, not {size!r}")
    return h, w


class _Pipeline:
    """What every pipeline shares: output size, flip, dtype, layout, normalisation."""

    _geometry = ""

    def __init__(
        self,
        size: Union[int, Sequence[int]],
        *,
        flip: float = 0.0,
        dtype: str = "uint8",
        layout: str = "CHW",
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        max_pixels: Optional[int] = None,
    ) -> None:
        self.size = _size(size)
        if not 0.0 <= float(flip) <= 1.0:
            raise ValueError(f"flip is a probability from 0 to 1, not {flip!r}")
        self.flip = float(flip)
        dtype = np.dtype(dtype).name
        if dtype not in ("uint8", "float32"):
            raise ValueError(f'dtype must be "uint8" or "float32", not {dtype!r}')
        if layout not in ("HWC", "CHW"):
            raise ValueError(f'layout must be "HWC" or "CHW", not {layout!r}')
        if dtype == "uint8" and (mean is not None or std is not None):
            raise ValueError('mean and std normalise a float32 output: pass dtype="float32"')
        self.dtype, self.layout = dtype, layout
        self.mean = tuple(float(m) for m in (mean if mean is not None else (0.0, 0.0, 0.0)))
        self.std = tuple(float(s) for s in (std if std is not None else (1.0, 1.0, 1.0)))
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError("mean and std hold one value per channel (R, G, B)")
        self.max_pixels = max_pixels

    def _spec(self) -> dict:
        return dict(
            geometry=self._geometry, size=self.size, flip=self.flip, dtype=self.dtype, layout=self.layout,
            mean=self.mean, std=self.std, max_pixels=self.max_pixels, **self._extra(),
        )

    def _extra(self) -> dict:
        return {}

    @property
    def shape(self) -> Tuple[int, int, int]:
        """One output image's shape: ``(3, h, w)`` or ``(h, w, 3)``."""
        h, w = self.size
        return (3, h, w) if self.layout == "CHW" else (h, w, 3)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._extra().items())
        return (f"zrecord.vision.{type(self).__name__}({self.size}{extra}, flip={self.flip}, "
                f"dtype={self.dtype!r}, layout={self.layout!r})")


class RandomResizedCrop(_Pipeline):
    """A random crop of ``scale`` of the area (low, high) and aspect ratio ``ratio`` (width
    over height, drawn log-uniform), resized to ``size``: torchvision's
    ``RandomResizedCrop`` (ten draws, then the centred crop), for training."""

    _geometry = "random_resized_crop"

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), **kw) -> None:
        super().__init__(size, **kw)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"scale must be (low, high) with 0 < low <= high <= 1, not {scale!r}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must be (low, high) with 0 < low <= high, not {ratio!r}")

    def _extra(self) -> dict:
        return {"scale": self.scale, "ratio": self.ratio}


class CenterCrop(_Pipeline):
    """The centred square of ``ratio`` times the shorter side, resized to ``size`` (FFCV's
    evaluation crop; ``ratio=224/256`` is ``Resize(256)`` + ``CenterCrop(224)`` to within
    a pixel), for evaluation."""

    _geometry = "center_crop"

    def __init__(self, size, ratio: float = 224 / 256, **kw) -> None:
        super().__init__(size, **kw)
        if not 0 < float(ratio) <= 1:
            raise ValueError(f"ratio must be in (0, 1], not {ratio!r}")
        self.ratio = float(ratio)

    def _extra(self) -> dict:
        return {"crop_ratio": self.ratio}


class Resize(_Pipeline):
    """The whole image resized to ``size`` (aspect ratio not kept)."""

    _geometry = "resize"


def convert(source: Union[str, "os.PathLike[str]"], out: Union[str, "os.PathLike[str]"], *,
            shard_records: Optional[int] = None, progress: Any = False):
    """An ImageFolder tree (a folder of images per class) or WebDataset tar shards (a
    ``.tar`` or a directory of them) into the dataset ``out``, in Rust on every core, as
    ``zr convert SOURCE OUT --images`` does: ImageFolder gives ``image``, ``label`` (the
    class's place among the sorted names, which go into the dataset card as ``classes``)
    and ``path`` (the file's path under the tree), images in sub-folders of a class
    included, in torchvision's ``ImageFolder`` order;
    WebDataset members ``.jpg``/``.png``/``.webp`` give ``image``, ``.cls`` ``label``,
    ``.txt`` ``text`` and any other extension a bytes field of its name. Files are kept as
    they are, their headers checked; nothing is visible in ``out`` until every sample is
    written. Returns the dataset."""
    from ._progress import reporter
    from .dataset import Dataset

    with reporter(progress, "images", unit="") as report:
        _zrecord._convert_images(os.fspath(source), os.fspath(out), shard_records, report)
    return Dataset(out)


def decode(data: bytes, max_pixels: Optional[int] = None) -> np.ndarray:
    """The RGB pixels of one encoded image, ``(h, w, 3)`` uint8, decoded as the loader's
    pipelines decode it (grey widened, alpha dropped, as Pillow's ``convert("RGB")``).
    Raises ``DecodeError`` for a value that is not a JPEG, PNG or WebP image, a cut or
    corrupt one, or one whose header claims more than ``max_pixels`` (default 2^28)."""
    return _zrecord._decode_image(bytes(data), max_pixels)


def render(data: bytes, pipeline: _Pipeline, *, seed: int = 42, step: int = 0, index: int = 0, source: int = 0,
           field: str = "image") -> np.ndarray:
    """``pipeline``'s output of one encoded image: the pixels a DataLoader with ``seed``
    gives sample ``index`` (of mixture source ``source``) of field ``field`` in global batch
    ``step``, for looking at one sample or checking a crop by hand."""
    return _zrecord._render_image(bytes(data), pipeline._spec(), seed, step, index, source, field)


class Images:
    """A field of encoded images for :meth:`zrecord.Dataset.write`: each item is the bytes
    of a JPEG, PNG or WebP file (stored as given), a path to one (read), a PIL image, or a
    uint8 array of ``(h, w)``, ``(h, w, 3)`` or ``(h, w, 4)`` (encoded with Pillow as
    ``format`` at ``quality``). ``max_side``: images whose longer side is over it are
    resized down to it first (FFCV's ``max_resolution``; Pillow, Lanczos), encoded items
    too. Items are read and encoded on a thread per core, in order. The field is stored
    raw (encoded images do not compress) unless ``Dataset.write``'s ``codec`` dict names
    it. Every value is checked
    to be an image with a size in its header; one that is not fails the write, naming the
    field and sample."""

    def __init__(
        self,
        items: Iterable[Any],
        *,
        format: str = "jpeg",
        quality: int = 90,
        max_side: Optional[int] = None,
    ) -> None:
        if format not in ("jpeg", "png", "webp"):
            raise ValueError(f'format must be "jpeg", "png" or "webp", not {format!r}')
        if max_side is not None and (isinstance(max_side, bool) or not isinstance(max_side, int) or max_side < 1):
            raise ValueError(f"max_side must be a whole number of pixels, not {max_side!r}")
        self.items = items
        self.format, self.quality, self.max_side = format, int(quality), max_side
        self.length = len(items) if hasattr(items, "__len__") else None

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("an iterator has no length")
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        # Pillow releases the GIL while it decodes, resizes and encodes: blocks of items
        # are encoded on a thread per core, in order, a block in memory at a time.
        from concurrent.futures import ThreadPoolExecutor

        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        block: list = []
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for k, item in enumerate(self.items):
                block.append((k, item))
                if len(block) >= 8 * workers:
                    yield from pool.map(lambda ki: self._encoded(*ki), block)
                    block = []
            yield from pool.map(lambda ki: self._encoded(*ki), block)

    def _encoded(self, k: int, item: Any) -> bytes:
        if isinstance(item, (str, os.PathLike)):
            with open(item, "rb") as f:
                item = f.read()
        if isinstance(item, (bytes, bytearray, memoryview)):
            if self.max_side is None:
                return bytes(item)
            image = _pil().open(io.BytesIO(item))
            if max(image.size) <= self.max_side:
                return bytes(item)
            return self._encode(image)
        if isinstance(item, np.ndarray):
            if item.dtype != np.uint8 or item.ndim not in (2, 3) or (item.ndim == 3 and item.shape[2] not in (3, 4)):
                raise TypeError(f"image {k}: an array must be uint8 of (h, w), (h, w, 3) or (h, w, 4), "
                                f"not {item.dtype} of {item.shape}")
            return self._encode(_pil().fromarray(item))
        if hasattr(item, "save") and hasattr(item, "size"):  # a PIL image
            return self._encode(item)
        raise TypeError(f"image {k} is {type(item).__name__}: give bytes, a path, a PIL image or a uint8 array")

    def _encode(self, image: Any) -> bytes:
        pil = _pil()
        if self.max_side is not None and max(image.size) > self.max_side:
            w, h = image.size
            s = self.max_side / max(w, h)
            image = image.resize((max(1, round(w * s)), max(1, round(h * s))), pil.Resampling.LANCZOS)
        if self.format == "jpeg" and image.mode not in ("RGB", "L"):
            image = image.convert("RGB")
        out = io.BytesIO()
        options = {"quality": self.quality} if self.format in ("jpeg", "webp") else {}
        image.save(out, format=self.format.upper(), **options)
        return out.getvalue()

    def _zrecord_column(self, name: str):
        from ._columns import _Items

        column = _Items(name, iter(self), None)
        if column.kind != "bytes":  # pragma: no cover - _encoded always gives bytes
            raise TypeError(f"field {name!r}: images encode to bytes")
        column.kind = "image"
        column.length = self.length
        return column


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("encoding images needs Pillow (pip install pillow); encoded bytes are stored as given") \
            from None
    return Image
