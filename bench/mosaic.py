"""MosaicML Streaming, the peer a team reading from object storage would pick: its MDS
shards written to the same S3-compatible server zrecord's dataset lives in, read through
its StreamingDataset and torch's DataLoader, with its own defaults (whole shards downloaded
to a local directory, least recently used shards evicted past ``cache_limit``).

Bytes fetched are counted where its downloads land: its S3 downloader is wrapped so each
downloaded shard adds its size to a counter shared with the DataLoader's worker processes
(forked after the wrap), which is where the downloads happen.
"""

import contextlib
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path

from measure import optional, streamed


@contextlib.contextmanager
def s3_environment(endpoint):
    """Streaming reads its S3 endpoint and keys from the environment only."""
    keys = {"S3_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Mosaic:
    """MDS shards of `images` and `labels` at `url` (``s3://bucket/prefix``), about
    `shards` of them; `None` from :func:`mosaic` when Streaming does not install."""

    def __init__(self, streaming, torch, images, labels, url, shards, work):
        self.streaming, self.torch, self.url, self.work = streaming, torch, url, Path(work)
        self.fetched = multiprocessing.Value("q", 0)
        shape = ",".join(str(d) for d in images.shape[1:])
        columns = {"image": f"ndarray:{images.dtype}:{shape}", "label": "int64"}
        local = self.work / "mds"
        with streaming.MDSWriter(out=(str(local), url), columns=columns, keep_local=True,
                                 size_limit=-(-images.nbytes // shards) + (1 << 16)) as writer:
            for image, label in zip(images, labels):
                writer.write({"image": image, "label": int(label)})
        self.stored = sum(p.stat().st_size for p in local.glob("shard.*.mds"))
        shutil.rmtree(local, ignore_errors=True)
        self._count_downloads()

    def _count_downloads(self):
        from streaming.base.storage import download

        fetched, plain = self.fetched, download.S3Downloader._download_file_impl
        if getattr(plain, "_counted", False):
            plain = plain._plain

        def counted(downloader, remote, local, timeout):
            plain(downloader, remote, local, timeout)
            with fetched.get_lock():
                fetched.value += os.path.getsize(local)

        counted._counted, counted._plain = True, plain
        download.S3Downloader._download_file_impl = counted

    @contextlib.contextmanager
    def loader(self, batch, workers, cache_limit=None, seed=3):
        """Its DataLoader over a fresh local directory (nothing cached), shuffled."""
        local = tempfile.mkdtemp(prefix="zr-mds-", dir=self.work)
        self.streaming.base.util.clean_stale_shared_memory()
        ds = self.streaming.StreamingDataset(remote=self.url, local=local, shuffle=True, shuffle_seed=seed,
                                             batch_size=batch, cache_limit=cache_limit)
        dl = self.torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                              persistent_workers=workers > 0)
        try:
            yield dl
        finally:
            del dl, ds
            shutil.rmtree(local, ignore_errors=True)

    def epochs(self, batch, workers, cache_limit, epochs, cap):
        """Bytes fetched in each of `epochs` epochs, as a fraction of the shards' size, as
        text. An epoch that fetches more than `cap` times the shards is stopped there (a
        cache that thrashes would download for hours), and no epoch runs after it."""
        per = []
        with self.loader(batch, workers, cache_limit) as dl:
            for _ in range(epochs):
                before, steps = self.fetched.value, 0
                for _ in dl:
                    steps += 1
                    if self.fetched.value - before > cap * self.stored:
                        per.append(f"> {cap:.0f}x (stopped after {steps} of {len(dl)} batches)")
                        return per + ["-"] * (epochs - len(per))
                per.append(f"{(self.fetched.value - before) / self.stored:.2f}x")
        return per

    def streamed(self, batch, workers, cache_limit, budget, cap):
        """One shuffled epoch through a cache of `cache_limit` bytes, or what of it fits
        `budget` seconds and `cap` times the stored bytes fetched (:func:`measure.streamed`)."""
        return streamed(self.loader(batch, workers, cache_limit), self.fetched, self.stored, budget, cap)

    def first_epoch(self, batch, workers):
        """Samples per second of a first epoch, timed from constructing the dataset."""
        began = time.perf_counter()
        samples = 0
        with self.loader(batch, workers) as dl:
            for b in dl:
                samples += len(b["label"])
            return samples / (time.perf_counter() - began)


def mosaic(images, labels, url, shards, work):
    streaming, torch = optional("streaming"), optional("torch")
    if streaming is None or torch is None:
        return None
    return Mosaic(streaming, torch, images, labels, url, shards, work)
