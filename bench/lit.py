"""LitData, the other peer a team reading from object storage would pick: its chunks written
with its own writer, uploaded to the same S3-compatible server zrecord's dataset lives in,
and read through its StreamingDataset and StreamingDataLoader with its own defaults (whole
chunks downloaded to a local directory, chunks deleted once read past ``max_cache_size``;
its shuffle permutes the chunks and then the samples inside each chunk).

Bytes fetched are counted where its downloads land: every file it publishes into its cache
directory and every byte range it reads without one adds its size to a counter shared with
the loader's worker processes (forked after the wrap), which is where the downloads happen.

Its chunk downloads go through obstore, which refuses a plain-HTTP endpoint unless its
client is told ``allow_http``; LitData builds that client from a fixed option table with
no way in from ``storage_options``, so the table is given the option here (and the
environment, which obstore also reads).
"""

import contextlib
import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path

from measure import optional, streamed


class Lit:
    """LitData chunks of `images` and `labels` at `url` (``s3://bucket/prefix``), about
    `chunks` of them; `None` from :func:`lit` when LitData does not install."""

    def __init__(self, litdata, torch, images, labels, url, chunks, work, endpoint):
        self.litdata, self.torch, self.url, self.work = litdata, torch, url, Path(work)
        self.options = {"endpoint_url": endpoint}
        self.fetched = multiprocessing.Value("q", 0)
        from litdata.streaming.writer import BinaryWriter

        local = self.work / "lit"
        writer = BinaryWriter(str(local), chunk_bytes=-(-images.nbytes // chunks) + (1 << 16))
        for i, (image, label) in enumerate(zip(images, labels)):
            writer.add_item(i, {"image": image, "label": int(label)})
        writer.done()
        writer.merge()
        self.stored = sum(p.stat().st_size for p in local.glob("chunk-*.bin"))
        self._upload(local, endpoint)
        shutil.rmtree(local, ignore_errors=True)
        self._allow_http()
        self._count_downloads()

    def _upload(self, local, endpoint):
        import boto3

        bucket, _, prefix = self.url.removeprefix("s3://").partition("/")
        client = boto3.client("s3", endpoint_url=endpoint)
        for path in sorted(local.iterdir()):
            client.upload_file(str(path), bucket, f"{prefix}/{path.name}")

    @staticmethod
    def _allow_http():
        from litdata.streaming import downloader

        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
        os.environ["AWS_ALLOW_HTTP"] = "true"

    def _count_downloads(self):
        from litdata.streaming import downloader

        fetched = self.fetched

        def add(n):
            with fetched.get_lock():
                fetched.value += n

        def plain(owner, name):
            f = getattr(owner, name)
            return getattr(f, "_plain", f)

        publish, ranged = plain(downloader.Downloader, "_publish_file"), plain(downloader.S3Downloader, "download_bytes")

        def published(self, tmp_path, local_path):
            n = os.path.getsize(tmp_path)  # measured before it moves
            publish(self, tmp_path, local_path)
            add(n)

        def range_read(self, *a):
            out = ranged(self, *a)
            add(len(out))
            return out

        # Whole chunks: every download, sync or async, obstore or boto3, is published here;
        # byte ranges read without a file go through boto3 (its thread fallback included)
        # or obstore's ranged GET.
        published._plain, range_read._plain = publish, ranged
        downloader.Downloader._publish_file = published
        downloader.S3Downloader.download_bytes = range_read
        obstore = optional("obstore")
        if obstore is not None:
            get_range = plain(obstore, "get_range_async")

            async def obstore_range(*a, **k):
                out = await get_range(*a, **k)
                add(len(out))
                return out

            obstore_range._plain = get_range
            obstore.get_range_async = obstore_range

    @contextlib.contextmanager
    def loader(self, batch, workers, max_cache_size, seed=3):
        """Its loader over a fresh local directory (nothing cached), shuffled."""
        local = tempfile.mkdtemp(prefix="zr-lit-", dir=self.work)
        ds = self.litdata.StreamingDataset(self.url, cache_dir=local, shuffle=True, seed=seed,
                                           max_cache_size=max_cache_size, storage_options=self.options)
        dl = self.litdata.StreamingDataLoader(ds, batch_size=batch, num_workers=workers)
        try:
            yield dl
        finally:
            del dl, ds
            shutil.rmtree(local, ignore_errors=True)

    def streamed(self, batch, workers, max_cache_size, budget, cap):
        """One shuffled epoch through a cache of `max_cache_size` bytes, or what of it fits
        `budget` seconds and `cap` times the stored bytes fetched (:func:`measure.streamed`)."""
        return streamed(self.loader(batch, workers, max_cache_size), self.fetched, self.stored, budget, cap)


def lit(images, labels, url, chunks, work, endpoint):
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # it would ask PyPI for news
    litdata, torch = optional("litdata"), optional("torch")
    if litdata is None or torch is None:
        return None
    return Lit(litdata, torch, images, labels, url, chunks, work, endpoint)
