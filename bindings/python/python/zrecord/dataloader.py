"""The endless DataLoader: batches of ``{"data": ..., "label": ...}`` forever.

For zrecord datasets the whole sample → gather → collate pipeline runs in Rust threads that
never take the GIL: the ``zrecord`` crate's ``Loader`` over the core's stream, wrapped by
``_Pipeline``. Python only wraps each finished batch, and calls ``transform`` when one is
given. Batch ``k`` is always the stream's ``k``-th, whatever the number of workers, so a
seed fixes the stream; with ``rank``/``world_size`` each process reads its slice of every
global batch, and ``state_dict()`` / ``load_state_dict()`` resume it exactly.

Any other dataset object with ``__len__`` and ``__getitems__`` (loaderx's, your own) is
read by the same loader: its worker threads call ``__getitems__`` with each batch's
indices, taking the GIL for that call only; ranks, epochs, state and resume work the same.
"""

from __future__ import annotations

import atexit
import json
import weakref
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._zrecord import _Pipeline, _check_mixture_weights
from ._epochs import Epochs
from .dataset import Dataset
from .pack import Pack
from .sampler import Sampler, check_seed
from ._world import RanksDisagreeError, _gather, _runtime_up, check_ranks_agree, resolve_world

__all__ = ["DataLoader", "Mixture", "resolve_world"]

Transform = Callable[[tuple], tuple]

# Loaders not yet closed, closed at interpreter exit so that no thread outlives it.
_LIVE: "weakref.WeakSet[DataLoader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for loader in list(_LIVE):
        loader.close()


def _describe(obj: Any) -> str:
    """What a transform returned, for an error message."""
    kind = type(obj).__name__
    if isinstance(obj, (tuple, list)):
        return f"a {kind} of {len(obj)} items"
    if isinstance(obj, np.ndarray):
        return f"an ndarray of shape {obj.shape}"
    return "None" if obj is None else f"a {kind}"


class Mixture:
    """A weighted mixture of datasets, passed to :class:`DataLoader` in place of a dataset
    and its labels.

    ``Mixture([(data_a, label_a), (data_b, label_b)], weights=[0.7, 0.3], seed=None)``:
    each pair is a :class:`Dataset` of samples and one of labels, equally long. Which
    source each position of the stream reads is a pure function of ``(seed, position)``,
    and the realised proportions track the weights over every window (within 0.5% over
    100,000 samples); every source is read in its own shuffled epochs (each of its samples
    once per source epoch). Batches carry an extra ``"source"`` array (``int32``): the
    source number of each sample.

    Weights are positive numbers of any scale (``[7, 3]`` is ``[0.7, 0.3]``). ``seed``
    fixes the stream; when None, the DataLoader's ``seed`` does.

    Raises:
        ValueError: no source, a weight count that differs from the source count, a pair
            whose two datasets differ in length, or sources whose samples (or labels) differ
            in dtype or shape.
        TypeError: a source that is not a pair of zrecord Datasets.
    """

    def __init__(self, sources: Sequence[Any], weights: Sequence[float], seed: Any = None) -> None:
        sources = list(sources)
        if not sources:
            raise ValueError("a Mixture needs at least one source: a Dataset, or a (data, label) pair")
        weights = [float(w) for w in weights]
        if len(weights) != len(sources):
            raise ValueError(f"a Mixture of {len(sources)} sources needs {len(sources)} weights, got {len(weights)}")
        _check_mixture_weights(weights)
        self.weights = weights
        self.seed = None if seed is None else check_seed(seed)
        if all(isinstance(d, Dataset) for d in sources):
            # Datasets of named fields (or single stores read as one field "data").
            first = sources[0]
            for i, d in enumerate(sources[1:], 1):
                if _field_layout(d) != _field_layout(first):
                    raise ValueError(
                        f"mixture sources must have the same fields: source 0 has {_field_layout(first)}, "
                        f"source {i} has {_field_layout(d)}"
                    )
            self.datasets: Optional[list] = sources
            self.sources = []
            return
        self.datasets = None
        pairs = [tuple(p) for p in sources]
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(isinstance(d, Dataset) for d in pair):
                raise TypeError(f"source {i} must be a zrecord Dataset or a (data, label) pair of zrecord Datasets")
            if len(pair[0]) != len(pair[1]):
                raise ValueError(f"source {i}: data has {len(pair[0])} samples but label has {len(pair[1])}")
        for side, name in ((0, "data"), (1, "label")):
            first = pairs[0][side]
            for i, pair in enumerate(pairs[1:], 1):
                d = pair[side]
                if (d.dtype, d.shape) != (first.dtype, first.shape):
                    raise ValueError(
                        f"mixture sources must share the per-sample dtype and shape: source 0's {name} is "
                        f"{first.dtype.str}{first.shape}, source {i}'s is {d.dtype.str}{d.shape}"
                    )
        self.sources = pairs

    def __len__(self) -> int:
        raise TypeError("a Mixture has no length: it is read as an endless stream")

    def __repr__(self) -> str:
        n = len(self.datasets) if self.datasets is not None else len(self.sources)
        return f"Mixture({n} sources, weights={self.weights}, seed={self.seed})"


def _field_layout(ds: Dataset) -> list:
    return [(f.name, f.kind, f.dtype.str, f.shape) for f in ds.fields]


State = Union[Mapping[str, Any], str]


def _pad_bytes(dataset: Dataset, pad: Mapping[str, Any]) -> dict:
    """``pad={"field": value}`` as one element's bytes per field, in the field's dtype."""
    out = {}
    for name, value in pad.items():
        fields = {f.name: f for f in dataset.fields}
        if name not in fields:
            raise ValueError(f"pad names field {name!r}, which the dataset does not have; it has {sorted(fields)}")
        out[name] = np.asarray(value, dtype=fields[name].dtype).tobytes()
    return out


def _transform_step(transform: Callable[[Any], Any], named: bool) -> Callable[[dict], dict]:
    """``transform`` as the native workers call it on each batch dict: for datasets of
    named fields on the dict itself, for loaderx's pair on ``(data, label)``; what it
    returned is checked there, and a wrong result is the ``TypeError`` ``next()`` raises."""

    def step(batch: dict) -> dict:
        if named:
            out = transform(batch)
            if not isinstance(out, Mapping):
                raise TypeError(f"transform must return a dict of arrays, but returned {_describe(out)}")
            return dict(out)
        out = transform((batch["data"], batch["label"]))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"transform must return a (data, label) pair, but returned {_describe(out)}")
        done = {"data": out[0], "label": out[1]}
        if "source" in batch:
            done["source"] = batch["source"]
        return done

    return step


def _state_text(state: State) -> str:
    """A saved state as the JSON text the native loader reads."""
    if isinstance(state, str):
        return state
    if isinstance(state, Mapping):
        return json.dumps(dict(state))
    raise TypeError(f"a DataLoader state is the dict state_dict() returned, not {type(state).__name__}")


class DataLoader(Epochs):
    """An endless iterator of ``{"data": batch, "label": batch}`` dicts.

    Args:
        dataset: samples; a :class:`Dataset` (fast path), a :class:`Mixture` (then no
            ``labelset``), or any object with ``__len__`` and ``__getitems__(idxs)``.
        labelset: labels, of the same length as ``dataset``; None only for a Mixture.
        num_workers: gathering threads (0 gathers inside ``next()``). For zrecord datasets
            they start with the first ``next()``.
        batch_size: samples per batch, per rank.
        prefetch_size: batches prepared ahead of the consumer (never counted as consumed).
        mode: ``Sampler.Mode.IID`` (1, the default for samples), ``Sampler.Mode.SEQUENTIAL``
            (0) or ``Sampler.Mode.SHUFFLE`` (2: epochs that visit every index once, in an
            order fixed by ``(seed, epoch)``; the default with ``pack``, whose documents are
            then each read once per epoch; IID packing, documents drawn with replacement,
            only when asked). A Mixture reads every source in shuffled epochs (IID and
            SHUFFLE both mean that; SEQUENTIAL is refused).
        seed: seed of the stream, an integer in ``0 .. 2**64 - 1``.
        transform: called on each batch before ``next()`` returns it: for a Dataset of named
            fields as ``transform(batch_dict)``, returning a dict; for loaderx's
            ``(dataset, labelset)`` as ``transform((data, label))``, returning a
            ``(data, label)`` pair (a tuple or list of two). Anything else is a
            ``TypeError`` naming what it returned. It runs on the loader's worker threads,
            inside the prefetch, each call holding the GIL: it is off the training
            thread, and several batches transform at once where it releases the GIL
            (numpy, torch and most decoders do for large arrays). With ``num_workers=0``
            it runs inside ``next()``. An exception it raises is raised by ``next()`` for
            that batch, which counts as consumed.
        rank, world_size: this process's place in a job of ``world_size`` processes
            (keyword-only). When not given they come from an initialised
            ``torch.distributed`` process group, else ``RANK``/``WORLD_SIZE`` (torchrun),
            else ``jax.process_index()``/``process_count()`` once ``jax.distributed`` is
            initialised, else 0 and 1 (see :func:`resolve_world`). All ranks read one
            global stream of global batches of ``batch_size * world_size`` samples, which
            depends on ``(seed, mode, dataset)`` only; rank ``r`` gets the ``r``-th
            contiguous ``batch_size`` slice of each.
        state: a dict saved by :meth:`state_dict` (keyword-only): start right after the
            batch it was saved at (see :meth:`load_state_dict`).
        warm: read the zrecord stores into the page cache in the background when the
            workers start (keyword-only): their used bytes once, front to back, so that a
            first epoch from a cold cache does not fetch each record from disk by a small
            random read of its own. ``None`` (default) warms when the stores together fit
            in a quarter of the memory available (``MemAvailable``, or less under a cgroup
            memory limit); ``True`` always; ``False`` never. Warming stops when the loader
            closes; :attr:`warm_progress` tells how far it got. Loaders with
            ``num_workers=0``, or over other dataset objects, do not warm.
        images: ``{"field": pipeline}`` (keyword-only): decode an image field (or a bytes
            field of encoded images) in the loader's Rust workers through a
            :mod:`zrecord.vision` pipeline (``RandomResizedCrop``, ``CenterCrop``,
            ``Resize``): the batch holds one ``(B, 3, h, w)`` (or ``(B, h, w, 3)``) uint8
            or float32 array for the field. Crops and flips are keyed by the seed, step,
            sample and field, so they are the same on any world size, worker count and
            resume. A value that is not an image fails its batch as a ``DecodeError``
            naming the field and record (``on_error="skip"`` replaces it).
        pad: ``{"field": value}`` (keyword-only): a ragged field's batch as a padded
            ``(B, max_len)`` array plus ``field + "_lengths"``, instead of the flat values
            and ``field + "_offsets"``.
        on_error: ``"raise"`` (default): a sample that fails its checksum or decode fails
            its batch, and every later ``next()`` raises the same error (naming the store,
            field and record: ``e.path``, ``e.field``, ``e.record``). ``"skip"``: the
            sample is replaced by the first of the samples after it that reads cleanly, the
            same on every run, resume and world size, so the stream stays exact; each is
            reported once on stderr and listed in :attr:`stats` (keyword-only; zrecord
            datasets only).
        check_ranks: with ``world_size > 1`` and torch.distributed or JAX's multi-process
            runtime up, the first ``next()`` (and the first after ``load_state_dict``)
            gathers every process's state (one all-gather of under 1 KiB each, so every
            process must call it) and raises :class:`RanksDisagreeError` on every rank,
            naming the seed, mode, global batch, step, dataset or world size that differs;
            ``False`` skips that (keyword-only).
        passes: a finite pass, for evaluation (keyword-only): ``passes=1`` reads every
            sample (or, with ``pack``, every document) once in order (mode SEQUENTIAL, the
            default then; other modes are refused), pads the last batch and stops:
            ``next()`` raises ``StopIteration``, so ``for batch in loader`` ends. Each
            rank gets its slice of the same global batches, so ``len(loader)`` (samples
            only) is the same everywhere. Samples: the last batch's slots past the pass
            repeat the first samples, and every batch carries ``"valid"``, a boolean array
            of the slots holding the pass's samples (also :attr:`valid`, their count).
            Packed: rows past the last document are padding (``segment_ids`` 0, the pad id),
            with rows in the order they are cut. ``passes=k`` reads the dataset ``k``
            times. ``None`` (default): the loader is endless.
        pack: a :class:`Pack` (keyword-only): batches of ``batch_size`` rows of packed
            token documents from a ragged field, instead of samples (see :class:`Pack`).
            ``mode`` then orders the documents (SHUFFLE, the default: epochs over documents,
            and with concat packing over one dataset epochs of shuffled rows), a Mixture's
            weights count tokens, and the state resumes to the token.
        shuffle_block, shuffle_window: read each SHUFFLE epoch in blocks of
            ``shuffle_block`` neighbouring samples (at least 2) instead of one permutation
            of every sample (keyword-only; mode SHUFFLE, the default then, over one
            dataset). Blocks start at other samples each epoch and come in a random order;
            the samples of ``shuffle_window`` blocks (default 8) are mixed together, so a
            batch draws from that many blocks (twice as many across a window's edge). For
            a dataset in object storage read through a cache far smaller than it: with a
            cache of about twice a window's bytes (the read-ahead holds three quarters of
            it, a window and the batches before it), each block comes in one or two
            requests instead of one request per sample (as LitData and MosaicML Streaming
            shuffle their chunks). It saves requests for a process reading the global
            batch; one rank of several reads a share of every block. The order is a pure
            function of ``(seed, epoch)``, the same on any world size, and the state
            records the blocks (resuming with others is refused).

    There are no epochs in the iterator (but with ``passes``), so ``len()`` raises
    ``TypeError``; in SHUFFLE
    mode :attr:`steps_per_epoch` batches make an epoch, the same on every rank (the last
    ``N mod (batch_size * world_size)`` samples of each epoch's order are dropped).
    ``close()`` (or leaving a ``with`` block) stops and joins every thread promptly, even
    when the consumer stopped mid-stream; loaders still open at interpreter exit are closed
    then. A loader is bound to the process that made it: after ``fork()``, make a new one
    in the child.

    Each batch's arrays own their memory, which no later batch touches while any array,
    view, memoryview or ``torch.from_numpy`` tensor of it is alive; once the last one is
    freed, the memory goes back to the loader and a later batch is gathered into it
    (no fresh allocation, page faults and zeroing per batch).

    Raises:
        ValueError: ``dataset`` and ``labelset`` differ in length, a size is invalid,
            ``seed`` is outside ``0 .. 2**64 - 1`` (loaderx 0.5.4 raised ``OverflowError``
            from its C binding there), ``world_size`` does not fit, a SHUFFLE epoch holds
            no global batch, or ``state`` belongs to another stream or dataset.
        TypeError: ``seed`` is not an integer.

    Other dataset objects (anything with ``__len__`` and ``__getitems__``) are read by the
    same native loader, whose worker threads call ``__getitems__`` (taking the GIL for the
    call only); they support ranks, SHUFFLE and resume too, but their state names the
    dataset by its length only (generation 0): zrecord cannot tell when their records
    change. An exception from ``__getitems__`` is raised by ``next()`` for that batch.
    """

    def __init__(
        self,
        dataset: Any,
        labelset: Any = None,
        num_workers: int = 4,
        batch_size: int = 256,
        prefetch_size: int = 4,
        mode: Optional[int] = None,
        seed: int = 42,
        transform: Optional[Transform] = None,
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        state: Optional[State] = None,
        warm: Optional[bool] = None,
        pad: Optional[Mapping[str, Any]] = None,
        check_ranks: bool = True,
        on_error: str = "raise",
        pack: Optional[Pack] = None,
        passes: Optional[int] = None,
        images: Optional[Mapping[str, Any]] = None,
        shuffle_block: Optional[int] = None,
        shuffle_window: Optional[int] = None,
    ) -> None:
        if passes is not None and (isinstance(passes, bool) or not isinstance(passes, int) or passes < 1):
            raise ValueError(f"passes must be a whole number of passes, at least 1, not {passes!r}")
        if warm is not None and not isinstance(warm, bool):
            raise TypeError(f"warm must be None, True or False, not {warm!r}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f'on_error must be "raise" or "skip", not {on_error!r}')
        self.on_error = on_error
        self.dataset = dataset
        self.labelset = labelset
        mixture = isinstance(dataset, Mixture)
        # Named fields: one Dataset (or a Mixture of Datasets) and no labelset; batches are
        # dicts of field -> array. The loaderx form (dataset, labelset) stays as it was.
        named = (labelset is None and isinstance(dataset, Dataset)) or (mixture and dataset.datasets is not None)
        if pad and not named:
            raise ValueError("pad applies to the ragged fields of a Dataset read without a labelset")
        if images and (not named or pack is not None):
            raise ValueError("images applies to the image fields of a Dataset (or Mixture) read without a "
                             "labelset or pack")
        for field, pipeline in (images or {}).items():
            if not hasattr(pipeline, "_spec") or not hasattr(pipeline, "shape"):
                raise TypeError(f"images[{field!r}] must be a zrecord.vision pipeline (RandomResizedCrop, "
                                f"CenterCrop, Resize), not {pipeline!r}")
        self.images = dict(images or {})
        if pack is not None and not isinstance(pack, Pack):
            raise TypeError(f"pack must be a zrecord.Pack, not {pack!r}")
        if pack is not None and not named:
            raise ValueError("pack reads the ragged token field of a zrecord Dataset (or a Mixture of them), alone")
        self.pack = pack
        if mixture:
            if labelset is not None:
                raise ValueError("a Mixture carries its own labels: pass no labelset")
        elif named:
            pass
        elif labelset is None:
            raise TypeError(
                "DataLoader needs a labelset for a dataset that is not a zrecord Dataset "
                "(a zrecord Dataset is read alone, as a dict of its fields)"
            )
        elif len(dataset) != len(labelset):
            raise ValueError("dataset and labelset must have the same length")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        seed = check_seed(seed)
        if shuffle_block is None and shuffle_window is not None:
            raise ValueError("shuffle_window mixes the blocks of a block shuffle: give shuffle_block too")
        if shuffle_block is not None and passes is not None:
            raise ValueError("passes= reads the dataset in order; shuffle_block shuffles epochs")
        if shuffle_block is not None and shuffle_window is None:
            shuffle_window = 8
        if mode is None:
            if shuffle_block is not None:
                mode = Sampler.Mode.SHUFFLE
            elif passes is not None:
                mode = Sampler.Mode.SEQUENTIAL
            else:
                mode = Sampler.Mode.IID if pack is None else Sampler.Mode.SHUFFLE
        if passes is not None and int(mode) != Sampler.Mode.SEQUENTIAL:
            raise ValueError("passes= reads the dataset in order: mode SEQUENTIAL (the default with passes)")
        if mixture and dataset.seed is not None:
            seed = dataset.seed
        if mixture and int(mode) == Sampler.Mode.SEQUENTIAL:
            raise ValueError("a Mixture reads its sources in shuffled epochs; mode SEQUENTIAL does not apply")
        self.transform = transform
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.prefetch_size = prefetch_size
        self.seed = seed
        self.mode = Sampler.Mode.SHUFFLE if mixture else int(mode)
        self.shuffle_block, self.shuffle_window = shuffle_block, shuffle_window
        self.rank, self.world_size = resolve_world(rank, world_size)
        self._returned = False
        self.check_ranks = bool(check_ranks)
        # None until the first next() checked that the ranks agree; then the outcome, an
        # error raised again by every later next() (the collective is not repeated).
        self._agreement: Optional[Tuple[Optional[Exception]]] = None
        self._mixture = mixture
        self._named = named
        # (dataset, pipeline spec) of a loader that takes rows appended while it runs.
        self._follow: Optional[Tuple[Dataset, dict]] = None
        common = dict(
            batch_size=batch_size,
            mode=self.mode,
            seed=seed,
            rank=self.rank,
            world_size=self.world_size,
            num_workers=num_workers,
            prefetch_size=prefetch_size,
            warm=warm,
            on_error=on_error,
            transform=None if transform is None else _transform_step(transform, named),
            passes=passes,
            blocks=None if shuffle_block is None else (shuffle_block, shuffle_window),
        )
        if named:
            datasets = dataset.datasets if mixture else [dataset]
            pads = _pad_bytes(datasets[0], pad or {})
            natives = [d._loader_native() for d in datasets]
            spec = dict(
                sources=[], itemsizes=[], dtypes=[], shapes=[],
                weights=dataset.weights if mixture else None,
                datasets=natives,
                pads=pads,
                images={k: v._spec() for k, v in self.images.items()} or None,
                pack=None if pack is None else pack._spec(),
                **common,
            )
            self._make: Callable[[Optional[str]], Any] = lambda text: _Pipeline(**spec, state=text)
            # One whole dataset of named fields, read in epochs or passes that never end:
            # rows appended under the run join where a restarted run would take them.
            if (not mixture and pack is None and passes is None and dataset.is_multi_field
                    and getattr(dataset, "_split", None) is None):
                self._follow = (dataset, spec)
        else:
            if mixture:
                sources = [[d.store, l.store] for d, l in dataset.sources]
                first_data, first_label = dataset.sources[0]
                weights: Optional[list] = dataset.weights
            elif isinstance(dataset, Dataset) and isinstance(labelset, Dataset):
                sources = [[dataset.store, labelset.store]]
                first_data, first_label = dataset, labelset
                weights = None
            else:
                sources = None
            if sources is not None:
                spec = dict(
                    sources=sources,
                    itemsizes=[first_data._itemsize, first_label._itemsize],
                    dtypes=[first_data.dtype, first_label.dtype],
                    shapes=[list(first_data.shape), list(first_label.shape)],
                    weights=weights,
                    **common,
                )
                self._make = lambda text: _Pipeline(**spec, state=text)
            else:
                # Not zrecord's: the same native loader, whose workers call __getitems__
                # (taking the GIL for the call only). A batch whose call raised is raised
                # by next() and counts as passed.
                def fetch(idxs, data=dataset, labels=labelset):
                    return {"data": data.__getitems__(idxs), "label": labels.__getitems__(idxs)}

                spec = dict(sources=[], itemsizes=[], dtypes=[], shapes=[], fetch=fetch, length=len(dataset), **common)
                self._make = lambda text: _Pipeline(**spec, state=text)
        self._pipeline: Any = self._make(None if state is None else _state_text(state))
        _LIVE.add(self)

    def __len__(self) -> int:
        steps = self._pipeline.pass_steps
        if steps is None:
            raise TypeError("Eternal loader has no length.")
        return int(steps)

    @property
    def valid(self) -> int:
        """Slots at the front of the last batch returned that hold samples: the batch size,
        but in the last batch of a finite pass (``passes=``), whose other slots are padding
        (they repeat the first samples). Batches of a finite pass also carry the boolean
        key ``"valid"`` when they are dicts: these slots, but False also where
        ``on_error="skip"`` replaced a damaged sample (the replacement is read at its own
        slot of the pass too). Mask with ``batch["valid"]`` to count each sample once."""
        return int(self._pipeline.valid)

    def __iter__(self) -> "DataLoader":
        return self

    def __next__(self) -> dict:
        if self._agreement is None:
            self._agreement = (self._check_ranks(),)
        if self._agreement[0] is not None:
            raise self._agreement[0]
        # Not before this loader's first batch: it was just given the dataset as its caller
        # opened it, which is what a run started now reads (and a second open of a bucket
        # would cost every manifest and store header again).
        if self._returned and self._follow is not None and self._pipeline.takes_growth_at(self._pipeline.step):
            self._take_appends()
        batch = self._pipeline.next()  # the transform, if any, already ran on a worker
        self._returned = True
        return batch

    def _take_appends(self) -> None:
        """Before a batch in which a pass ends: when rows were appended to the dataset since
        this loader opened it, go on over the grown dataset from here, as a loader resumed
        here from ``state_dict()`` would (the core's ``Stream::resumed`` decides what is
        read: the pass in flight finishes, the new rows join after it). Any other change
        (a delete, an overwrite) is not followed: this loader reads on over the rows it
        opened, and a restart is refused. Every rank looks at the same step; with several
        ranks they go on over the grown dataset only when all saw the same one (through
        torch.distributed or JAX), else all look again at the next pass's end."""
        if self.world_size > 1 and not _runtime_up():
            return  # the ranks could not agree on what they saw: not worth a manifest read
        dataset, spec = self._follow  # type: ignore[misc]
        before = spec["datasets"][0].id
        try:
            fresh = dataset._open_native()
            seen = fresh.id
        except Exception:  # opened mid-change, or the bucket is away: look again next time
            fresh, seen = None, before
        if self.world_size > 1:
            texts = _gather(json.dumps(list(seen)))
            if texts is None or len(set(texts)) > 1:
                return
        if seen == before or fresh is None:
            return
        grown = dict(spec, datasets=[fresh])
        try:
            pipeline = _Pipeline(**grown, state=self._pipeline.state())
        except ValueError:
            return  # not grown by appends: the state would be refused, so read on
        old, self._pipeline = self._pipeline, pipeline
        self._follow = (dataset, grown)
        self._make = lambda text: _Pipeline(**grown, state=text)
        old.close()

    def _check_ranks(self) -> Optional[Exception]:
        if not self.check_ranks or self.world_size < 2:
            return None
        try:
            check_ranks_agree(self._pipeline.state(), self.world_size)
        except RanksDisagreeError as e:
            return e
        return None

    # -- epochs and resume -----------------------------------------------------------------

    @property
    def steps_per_epoch(self) -> Optional[int]:
        """Batches per epoch on every rank in SHUFFLE mode: ``N // (batch_size *
        world_size)``, or for shuffled packed rows ``rows // (batch_size * world_size)``;
        None for the endless SEQUENTIAL, IID and mixture streams and sequential rows."""
        return self._pipeline.steps_per_epoch

    @property
    def step(self) -> int:
        """Global batches consumed so far (resumed ones included): the step of the next."""
        return self._pipeline.step

    def _epoch_of(self, step: int) -> Optional[Tuple[int, int]]:
        return self._pipeline.epoch_of(step)

    def state_dict(self) -> dict:
        """Where this loader stands, as a small JSON-serialisable dict.

        It describes the position after the last batch ``next()`` returned (never the
        batches workers prepared ahead) and the stream: seed, mode, global batch size and
        the dataset's length and generation (each mixture source's, and the weights). It is
        the same on every rank and does not depend on ``num_workers`` or ``prefetch_size``
        (about 120 bytes; under 1 KiB for up to 8 mixture sources). Pass it to
        :meth:`load_state_dict`, or as ``DataLoader(..., state=...)``, to go on from there.
        """
        return json.loads(self._pipeline.state())

    def load_state_dict(self, state: State) -> None:
        """Resume from a :meth:`state_dict`: the next batch is the one that followed the
        last batch returned when it was saved, exactly as the uninterrupted run would have
        read it; ``num_workers``, ``prefetch_size`` and the process may differ, and so may
        ``world_size`` and ``batch_size`` as long as their product (the global batch) is
        the same. No batch is replayed to get there.

        Call it before the first ``next()``. Raises ``ValueError`` saying what differs
        when the state belongs to another stream (seed, mode, global batch, mixture
        weights) or the dataset changed since (its length, or its generation: records were
        deleted or compacted), and ``RuntimeError`` once a batch was returned.
        """
        if self._returned:
            raise RuntimeError(
                "load_state_dict() must be called before the first next(): this loader already returned "
                "batches; make a new DataLoader(..., state=state) instead"
            )
        if self.closed:
            raise RuntimeError("load_state_dict() on a closed DataLoader")
        fresh = self._make(_state_text(state))  # checks the state before anything changes
        old, self._pipeline = self._pipeline, fresh
        self._agreement = None  # the ranks agree again at the next batch
        old.close()

    @property
    def stats(self) -> dict:
        """``{"step": global batches consumed, "skipped": samples replaced under
        on_error="skip", "skipped_samples": [one dict per sample: source, index,
        replacement, path, field, record, chunk, message]}``."""
        samples = list(getattr(self._pipeline, "skipped", []))
        out = {"step": self.step, "skipped": len(samples), "skipped_samples": samples}
        if self.pack is not None:
            out["padding_fraction"] = self._pipeline.padding_fraction
        return out

    def __repr__(self) -> str:
        what = repr(self.dataset) if self.labelset is None else f"{self.dataset!r}, {self.labelset!r}"
        mode = {0: "SEQUENTIAL", 1: "IID", 2: "SHUFFLE"}.get(self.mode, str(self.mode))
        epoch = self.epoch
        packing = "" if self.pack is None else f", pack={self.pack!r}"
        if self.shuffle_block is not None:
            packing += f", shuffle_block={self.shuffle_block}, shuffle_window={self.shuffle_window}"
        at = f"step {self.step}" + ("" if epoch is None else f" (epoch {epoch}, {self.steps_left_in_epoch} left in it)")
        return (
            f"zrecord.DataLoader({what}, batch_size={self.batch_size}, mode={mode}, seed={self.seed}, "
            f"rank={self.rank}, world_size={self.world_size}, num_workers={self.num_workers}, "
            f"prefetch_size={self.prefetch_size}, on_error={self.on_error!r}"
            f"{packing}; at {at}"
            f"{'; closed' if self.closed else ''})"
        )

    # -- lifetime --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._pipeline.closed

    @property
    def warm_progress(self) -> Optional[Tuple[int, int]]:
        """``(bytes read, bytes to read)`` of the background warming of the stores (equal
        once done), or None when this loader does not warm (see ``warm``; it starts with
        the first ``next()``)."""
        return getattr(self._pipeline, "warm_progress", None)

    def close(self) -> None:
        """Stop and join every worker thread. Idempotent; iteration then stops."""
        pipeline = getattr(self, "_pipeline", None)
        if pipeline is not None:
            pipeline.close()
        _LIVE.discard(self)

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - late in interpreter shutdown, module globals may be gone
            pass
