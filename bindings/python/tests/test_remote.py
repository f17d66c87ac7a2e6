"""Datasets in an S3-compatible object store: a real server (moto's, started here on
127.0.0.1 with a free port and stopped at the end), pushed to with zrecord.push and read
with zrecord.Dataset(url, storage_options=...).

Pushed datasets read sample for sample and batch for batch as the local ones, in every
loader mode, packed, in mixtures with local sources and across a resume; a push cut short
by a kill completes on the next push; an object rewritten under a reader is an error
naming it; and a server that fails one request in ten changes no batch (the retries are
counted).
"""

import http.client
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import zrecord

from _support import BUCKET, bucket_objects, s3_client


def docs(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 30000, int(k), dtype=np.uint16) for k in rng.integers(1, 60, n)]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A dataset of three fields over four shards."""
    path = tmp_path_factory.mktemp("remote") / "ds"
    n = 1000
    rng = np.random.default_rng(1)
    zrecord.Dataset.write(
        path,
        {"image": rng.integers(0, 255, (n, 3, 8, 8), dtype=np.uint8), "label": np.arange(n), "tokens": docs(n)},
        shard_records=300,
    )
    return zrecord.Dataset(path)


@pytest.fixture(scope="module")
def pushed(s3, local):
    url = f"s3://{BUCKET}/datasets/train"
    done = zrecord.push(local.path, url, storage_options=s3)
    assert done["kind"] == "dataset" and done["uploaded"] == done["files"]
    assert done["stored"] == done["apparent"] < 2 << 20, done  # a dataset's stores are dense: their bytes
    return url


def test_a_pushed_dataset_reads_as_the_local_one(s3, local, pushed):
    far = zrecord.Dataset(pushed, storage_options=s3)
    assert far.is_remote and not local.is_remote
    assert len(far) == len(local) and far.shards == local.shards == 4
    assert [f.name for f in far.fields] == ["image", "label", "tokens"]
    for i in (0, 299, 300, 999, -1):
        a, b = far[i], local[i]
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    stats = far.remote_stats()
    assert stats["requests"] > 0 and stats["bytes"] > 0 and stats["retries"] == 0, stats
    assert local.remote_stats() is None
    assert pushed in repr(far)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_loaders_read_the_same_batches(s3, local, pushed, mode):
    far = zrecord.Dataset(pushed, storage_options=s3)

    def read(ds, **kw):
        with zrecord.DataLoader(ds, batch_size=64, mode=mode, seed=5, num_workers=2, **kw) as dl:
            return [next(dl) for _ in range(12)]

    for a, b in zip(read(far), read(local)):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    pack = zrecord.Pack(seq_len=128, mode="best_fit", eos=1)
    a = np.stack([b["tokens"] for b in read(far, pack=pack)])
    b = np.stack([b["tokens"] for b in read(local, pack=pack)])
    np.testing.assert_array_equal(a, b)


def test_a_state_saved_locally_resumes_remotely_and_mixtures_span_both(s3, local, pushed):
    far = zrecord.Dataset(pushed, storage_options=s3)
    with zrecord.DataLoader(local, batch_size=50, mode=2, seed=9, num_workers=1) as dl:
        whole = [next(dl)["label"] for _ in range(30)]
    with zrecord.DataLoader(local, batch_size=50, mode=2, seed=9, num_workers=3) as dl:
        for _ in range(11):
            next(dl)
        state = dl.state_dict()
    with zrecord.DataLoader(far, batch_size=25, mode=2, seed=9, rank=1, world_size=2, state=state) as dl:
        rest = [next(dl)["label"] for _ in range(19)]
    np.testing.assert_array_equal(np.stack(rest), np.stack([w[25:] for w in whole[11:]]))
    mix = zrecord.Mixture([far, local], weights=[0.5, 0.5], seed=2)
    with zrecord.DataLoader(mix, batch_size=32, num_workers=2) as dl:
        batch = next(dl)
        assert set(np.unique(batch["source"])) <= {0, 1}


def test_a_push_cut_short_completes_on_the_next_push(s3, local, tmp_path):
    url = f"s3://{BUCKET}/datasets/interrupted"
    # A child process pushes and dies (os._exit) once part of the bytes went up.
    code = (
        "import os, sys, zrecord\n"
        "def progress(done, total):\n"
        "    if done > total // 3:\n"
        "        os._exit(9)\n"
        f"zrecord.push({str(local.path)!r}, {url!r}, storage_options={s3!r}, progress=progress)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 9, p.stderr
    with pytest.raises(FileNotFoundError, match="no remote.json lists them: a push or write that did not finish"):
        zrecord.Dataset(url, storage_options=s3)
    done = zrecord.push(local.path, url, storage_options=s3)
    assert 0 < done["uploaded"] < done["files"], done
    far = zrecord.Dataset(url, storage_options=s3)
    np.testing.assert_array_equal(far[700]["tokens"], local[700]["tokens"])
    again = zrecord.push(local.path, url, storage_options=s3)
    assert again["uploaded"] == 0 and again["bytes"] == 0, again


def test_an_object_rewritten_under_a_reader_is_an_error_naming_it(s3, local):
    url = f"s3://{BUCKET}/datasets/rewritten"
    zrecord.push(local.path, url, storage_options=s3)
    far = zrecord.Dataset(url, storage_options=s3)
    far[0]
    # Another writer replaces one chunk object (a new version, same key).
    s3_client(s3).put_object(Bucket=BUCKET, Key="datasets/rewritten/shard-000003/tokens/0.zr", Body=b"\x00" * 4096)
    with pytest.raises(zrecord.StoreIOError, match="changed after the listing recorded it") as e:
        far[950]
    assert "shard-000003/tokens/0.zr" in str(e.value)


def assert_same_batches(far, local, seed, steps=10):
    """The first `steps` SHUFFLE batches of `far` are those of `local`, field for field."""
    with zrecord.DataLoader(far, batch_size=64, mode=2, seed=seed, num_workers=2) as a, \
            zrecord.DataLoader(local, batch_size=64, mode=2, seed=seed, num_workers=2) as b:
        for _ in range(steps):
            x, y = next(a), next(b)
            for k in y:
                np.testing.assert_array_equal(x[k], y[k])


def _relay(handler, body):
    """Sends the request `handler` holds to the S3 server (`_Flaky.target`) and its answer back."""
    conn = http.client.HTTPConnection(*_Flaky.target, timeout=30)
    headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
    headers["Host"] = f"{_Flaky.target[0]}:{_Flaky.target[1]}"
    conn.request(handler.command, handler.path, body=body or None, headers=headers)
    r = conn.getresponse()
    data = r.read()
    handler.send_response(r.status)
    for k, v in r.getheaders():
        if k.lower() not in ("transfer-encoding", "connection", "content-length"):
            handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
    conn.close()


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server, but answers one in ten with a 503."""

    target = None
    count = 0
    lock = threading.Lock()

    def _forward(self):
        with _Flaky.lock:
            _Flaky.count += 1
            fail = _Flaky.count % 10 == 0
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if fail:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        _relay(self, body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

    def log_message(self, *args):
        pass


def test_one_failed_request_in_ten_changes_no_batch(s3, local, pushed):
    host, port = s3["aws_endpoint"].split("//")[1].split(":")
    _Flaky.target = (host, int(port))
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        flaky = {**s3, "aws_endpoint": f"http://127.0.0.1:{proxy.server_address[1]}"}
        far = zrecord.Dataset(pushed, storage_options=flaky)
        assert_same_batches(far, local, seed=4)
        stats = far.remote_stats()
        assert stats["retries"] >= 1 and _Flaky.count >= 10, stats
    finally:
        proxy.shutdown()


class _SlowDown(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server, but answers the next ``left`` ones with
    S3's 503 SlowDown and ``Retry-After: wait``, as a throttled bucket does."""

    left = 0
    wait = 2
    lock = threading.Lock()

    def _forward(self):
        with _SlowDown.lock:
            throttled = _SlowDown.left > 0
            _SlowDown.left -= int(throttled)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if throttled:
            text = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self.send_response(503)
            self.send_header("Retry-After", str(_SlowDown.wait))
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        _relay(self, body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

    def log_message(self, *args):
        pass


def test_a_slowdown_burst_waits_as_long_as_the_server_asks(s3, local, pushed):
    # A 503 SlowDown's Retry-After must be honoured (object_store drops the header), or
    # retries come back after 50 ms and are throttled again. Through a real S3 client
    # stack (the S3 builder, its signing, reqwest) to the S3 server behind a proxy.
    host, port = s3["aws_endpoint"].split("//")[1].split(":")
    _Flaky.target = (host, int(port))  # where _relay forwards to
    _SlowDown.left = 0
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowDown)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        throttled = {**s3, "aws_endpoint": f"http://127.0.0.1:{proxy.server_address[1]}"}
        far = zrecord.Dataset(pushed, storage_options=throttled)
        before = far.remote_stats()["retries"]
        _SlowDown.left = 3  # a burst: three answers in a row ask for 2 s each
        began = time.monotonic()
        first = far[7]
        took = time.monotonic() - began
        # Requests in flight together wait out the same request: at least one full wait.
        assert took >= 1.9, f"retried after {took:.2f} s; the server asked for 2 s"
        assert far.remote_stats()["retries"] - before >= 3
        np.testing.assert_array_equal(first["image"], local[7]["image"])
        assert_same_batches(far, local, seed=5)  # and the epoch after it is the undisturbed one
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
class _Outage(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server, except while ``down_until`` (a
    time.monotonic() value) is ahead: then it drops each connection unanswered, as an
    endpoint that is down or failing over does."""

    down_until = 0.0

    def _forward(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if time.monotonic() < _Outage.down_until:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        _relay(self, body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

    def log_message(self, *args):
        pass


@pytest.fixture
def outage(s3):
    """A proxy to the S3 server that can be taken down: (storage options through it, the
    handler class whose down_until sets the outage)."""
    host, port = s3["aws_endpoint"].split("//")[1].split(":")
    _Flaky.target = (host, int(port))
    _Outage.down_until = 0.0
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Outage)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    yield {**s3, "aws_endpoint": f"http://127.0.0.1:{proxy.server_address[1]}"}, _Outage
    _Outage.down_until = 0.0
    proxy.shutdown()
    proxy.server_close()


def test_an_outage_longer_than_the_old_retries_is_ridden_out(s3, local, pushed, outage):
    """An endpoint down for seconds mid-epoch must not end the epoch ("StoreIOError ...
    error sending request" when six attempts gave up after about 1.5 s). Requests are retried
    for up to two minutes (the retry_deadline storage option), and every batch is the one
    an undisturbed run reads."""
    options, handler = outage
    far = zrecord.Dataset(pushed, storage_options=options)
    handler.down_until = time.monotonic() + 10.0  # ten seconds down; nothing of the samples is cached yet
    assert_same_batches(far, local, seed=9)
    assert time.monotonic() >= handler.down_until, "the batches came through the outage"
    assert far.remote_stats()["retries"] >= 1


def test_an_outage_past_the_retry_deadline_fails_naming_the_object_and_the_deadline(s3, pushed, outage):
    options, handler = outage
    far = zrecord.Dataset(pushed, storage_options={**options, "retry_deadline": "1"})
    handler.down_until = time.monotonic() + 3600
    with pytest.raises(zrecord.ZrecordError) as e:
        far[0]
    text = str(e.value)
    assert pushed in text and "gave up after" in text, text
    assert "retry deadline is 1 s" in text and "retry_deadline" in text, text


def test_a_remote_dataset_reads_in_a_forked_child(s3, local, pushed):
    """torch's DataLoader workers fork by default on Linux. A remote dataset read in the
    parent, then in a forked child, waited forever: the child had the parent's runtime and
    requests in flight without their threads."""
    far = zrecord.Dataset(pushed, storage_options=s3)
    np.testing.assert_array_equal(far[0]["image"], local[0]["image"])  # the parent's runtime is up
    with zrecord.DataLoader(local, batch_size=32, mode=2, seed=1, num_workers=2) as dl:
        want = next(dl)["label"]
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if it read the right samples; a hang is killed
        code = 1
        try:
            import signal

            signal.alarm(60)
            same = all(np.array_equal(far[i]["tokens"], local[i]["tokens"]) for i in (1, 500, 999))
            with zrecord.DataLoader(far, batch_size=32, mode=2, seed=1, num_workers=2) as dl:
                code = 0 if same and np.array_equal(next(dl)["label"], want) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child failed or hung (-14: killed after 60 s)"
    np.testing.assert_array_equal(far[999]["tokens"], local[999]["tokens"])  # and the parent reads on


@pytest.mark.parametrize("hard", ["kept", "lowered"])
def test_a_low_open_file_limit_does_not_fail_far_reads(s3, tmp_path, hard):
    """Every request in flight holds a socket. With a soft limit of 256 open files (1024 is
    a common default), a cache of half the dataset put hundreds of reads in flight and the
    loader failed: "error sending request". Now the soft limit is raised as the hard one
    allows, and under a hard limit that does not, reads in flight stay within half of it."""
    n = 4000
    url = f"s3://{BUCKET}/datasets/open-files-{hard}"
    rng = np.random.default_rng(2)
    # Small records: moto's server copies a whole object for every ranged GET.
    zrecord.Dataset.write(tmp_path / "ds", {"image": rng.integers(0, 255, (n, 3, 16, 16), dtype=np.uint8)},
                          codec="raw", shard_records=n // 8)
    stored = zrecord.push(tmp_path / "ds", url, storage_options=s3)["stored"]
    code = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard if {hard == 'kept'} else 256))\n"
        "import zrecord\n"
        f"far = zrecord.Dataset({url!r}, storage_options={s3!r}, cache_bytes={stored // 2})\n"
        "with zrecord.DataLoader(far, batch_size=64, mode=2, seed=3, num_workers=2) as dl:\n"
        "    samples = sum(len(next(dl)['image']) for _ in range(dl.steps_per_epoch))\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], far.remote_stats()['most_in_flight'], samples)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    soft, most, samples = map(int, p.stdout.split())
    assert samples == n // 64 * 64
    if hard == "kept":
        import resource

        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limit = 1 << 62 if limit == resource.RLIM_INFINITY else limit
        # Raised as far as 2048 reads in flight need (MAX_READS_IN_FLIGHT, permits.rs).
        assert soft == min(limit, 2 * 2048), (soft, limit)
    else:
        assert soft == 256 and most <= 128, (soft, most)


def test_zr_pushes_pulls_and_reads_urls(s3, local, tmp_path):
    """`zr push`, `zr inspect|verify|export URL` and `zr pull`, with the endpoint and
    credentials in AWS_* variables; the pulled copy is the dataset, and a pushed loaderx
    store pulls into a store loaderx 0.5.4 reads."""

    zr = os.environ.get("ZR") or str(Path(__file__).resolve().parents[3] / "target" / "release" / "zr")
    env = {**os.environ, "AWS_ENDPOINT": s3["aws_endpoint"], "AWS_ALLOW_HTTP": "true",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}

    def run(*args):
        return subprocess.run([zr, *args], capture_output=True, text=True, timeout=300, env=env)

    url = f"s3://{BUCKET}/cli/ds"
    p = run("push", str(local.path), url)
    assert p.returncode == 0, p.stderr
    assert "pushed the dataset" in p.stdout and "uploaded now" in p.stdout, p.stdout
    p = run("inspect", url, "--json")
    assert p.returncode == 0, p.stderr
    p = run("verify", url)
    assert p.returncode == 0, p.stderr + p.stdout
    p = run("pull", url, str(tmp_path / "copy"))
    assert p.returncode == 0, p.stderr
    copy = zrecord.Dataset(tmp_path / "copy")
    for i in (0, 640, 999):
        for k, v in local[i].items():
            np.testing.assert_array_equal(copy[i][k], v)
    # Pulled sparse: the copy takes what the records take, not the files' sizes.
    used = sum(f.stat().st_blocks * 512 for f in (tmp_path / "copy").rglob("*") if f.is_file())
    assert used < 64 << 20, used
    p = run("pull", url, str(tmp_path / "copy"))
    assert p.returncode == 2 and "exists" in p.stderr
    p = run("pull", f"s3://{BUCKET}/cli/nothing", str(tmp_path / "none"))
    assert p.returncode == 2 and "nothing is stored under this prefix" in p.stderr, p.stderr
    assert not (tmp_path / "none").exists()

    # A loaderx store: pushed, pulled, and read by the reference wheel.
    loaderx = pytest.importorskip("loaderx") if os.environ.get("ZRECORD_REQUIRE_INTEROP") != "1" else __import__("loaderx")
    data = np.arange(200 * 12, dtype=np.uint8).reshape(200, 12)
    zrecord.Dataset.write(tmp_path / "store.zr", data)
    assert run("push", str(tmp_path / "store.zr"), f"s3://{BUCKET}/cli/store").returncode == 0
    assert run("pull", f"s3://{BUCKET}/cli/store", str(tmp_path / "back.zr")).returncode == 0
    np.testing.assert_array_equal(loaderx.Dataset(str(tmp_path / "back.zr"))[np.arange(200)], data)


def test_a_cache_directory_serves_the_next_run(s3, local, pushed, tmp_path):
    cache = tmp_path / "cache"

    def run():
        far = zrecord.Dataset(pushed, storage_options=s3, cache_dir=cache)
        with zrecord.DataLoader(far, batch_size=100, mode=2, seed=3, num_workers=2) as dl:
            got = [next(dl) for _ in range(len(far) // 100)]
        stats = far.remote_stats()
        far.close()
        return got, stats

    first, cold = run()
    assert cold["bytes"] > 0, cold
    second, warm = run()
    assert warm["bytes"] == 0 and warm["disk_hits"] > 0, warm
    for a, b in zip(first, second):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    with pytest.raises(ValueError, match="apply to a dataset read from an object store"):
        zrecord.Dataset(local.path, cache_dir=cache)


_WORKER = {}


def _take(far):
    """A pool worker's initializer: the dataset, forked (the same object) or pickled."""
    _WORKER["far"] = far


def _gather(idxs):
    batch = _WORKER["far"][np.asarray(idxs)]
    return {k: batch[k] for k in ("image", "label")}


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_worker_processes_share_one_cache_directory(s3, local, pushed, tmp_path, start):
    """torch's DataLoader hands its dataset to worker processes (forked, or pickled into
    spawned ones), and each opens it again. With ``cache_dir=``, every worker but one failed:
    "another process is using it; give each process (each rank) a cache directory of its
    own". Now they share the directory: each reads right bytes, and what they fetched is
    there for the next run."""
    import multiprocessing

    cache = tmp_path / "cache"
    far = zrecord.Dataset(pushed, storage_options=s3, cache_dir=cache)
    np.testing.assert_array_equal(far[0]["image"], local[0]["image"])  # the parent uses it too
    order = np.random.default_rng(5).permutation(len(local))
    chunks = [order[i:i + 50].tolist() for i in range(0, len(order), 50)]
    with multiprocessing.get_context(start).Pool(2, initializer=_take, initargs=(far,)) as pool:
        got = pool.map_async(_gather, chunks).get(timeout=300)
    for idxs, batch in zip(chunks, got):
        want = local[np.asarray(idxs)]
        for k in batch:
            np.testing.assert_array_equal(batch[k], want[k])
    # The parent's counts hold none of the workers' requests; the directory's sum holds
    # all three processes': every record once, and the tables each process fetched before
    # another had put them on disk.
    mine, total = far.remote_stats(), zrecord.remote_stats(cache)
    assert total["processes"] == 3 and total["requests"] > mine["requests"] > 0, (mine, total)
    stored = sum(f.stat().st_size for f in Path(local.path).rglob("*") if f.is_file())
    assert stored * 0.75 <= total["bytes"] <= stored * 2, (stored, total)
    far.close()
    # Everything the workers fetched is on disk for the next run: nothing over the network.
    again = zrecord.Dataset(pushed, storage_options=s3, cache_dir=cache)
    for idxs in chunks:
        again[np.asarray(idxs)]
    stats = again.remote_stats()
    assert stats["bytes"] == 0 and stats["disk_hits"] > 0, stats
    after = zrecord.remote_stats(cache)
    assert after["processes"] == 4 and after["bytes"] == total["bytes"], (total, after)
    assert after["disk_hits"] - total["disk_hits"] == stats["disk_hits"], (total, after, stats)
    again.close()


def test_worker_processes_that_evict_from_one_cache_directory_read_right_bytes(s3, local, pushed, tmp_path):
    """Three processes over one directory with a budget far under the dataset: each adds,
    drops and reads ranges while the others do; every batch is still the local one's."""
    import multiprocessing

    far = zrecord.Dataset(pushed, storage_options=s3, cache_dir=tmp_path / "cache", cache_bytes=16_000)
    rng = np.random.default_rng(6)
    chunks = [rng.choice(len(local), 40, replace=False).tolist() for _ in range(60)]
    with multiprocessing.get_context("fork").Pool(3, initializer=_take, initargs=(far,)) as pool:
        got = pool.map_async(_gather, chunks, chunksize=1).get(timeout=300)
    for idxs, batch in zip(chunks, got):
        want = local[np.asarray(idxs)]
        for k in batch:
            np.testing.assert_array_equal(batch[k], want[k])
    # Replay the logs (docs/format.md): entries whole, and the record data they list within
    # the budget, give or take what one process had not yet seen of the others' (a
    # directory nobody evicted from would list the whole dataset, some 300 KB).
    listed = 0
    for log in (tmp_path / "cache").glob("*.log"):
        text = log.read_bytes()
        assert len(text) % 25 == 0, f"{log.name}: {len(text)} bytes, not whole entries"
        ranges = {}
        for at in range(0, len(text), 25):
            op, start, end = text[at], int.from_bytes(text[at + 1:at + 9], "little"), int.from_bytes(text[at + 9:at + 17], "little")
            if op in (1, 2):
                ranges[start] = (end, op)
            else:
                ranges.pop(start, None)
        listed += sum(end - start for start, (end, op) in ranges.items() if op == 1)
    assert 0 < listed <= 2 * 16_000, listed
    far.close()


def test_samples_deleted_in_an_object_store_leave_every_object(s3, tmp_path):
    n = 600
    captions = [f"caption {i:05d} of a private photo" for i in range(n)]
    path = tmp_path / "ds"
    zrecord.Dataset.write(path, {"caption": captions, "label": np.arange(n)}, shard_records=200)
    url = f"s3://{BUCKET}/edits/delete"
    zrecord.push(path, url, storage_options=s3)
    far = zrecord.Dataset(url, storage_options=s3)
    with zrecord.DataLoader(far, batch_size=10, mode=2, seed=1) as loader:
        next(loader)
        state = loader.state_dict()

    gone = {3, 250, 251, 599}
    far.delete(sorted(gone, reverse=True))
    kept = [i for i in range(n) if i not in gone]
    assert len(far) == n - len(gone)
    assert [far[i]["caption"] for i in (0, 3, 248)] == [captions[kept[i]] for i in (0, 3, 248)]
    again = zrecord.Dataset(url, storage_options=s3)
    assert list(again[np.arange(len(again))]["label"]) == kept
    # No object in the bucket holds a deleted caption's bytes; the scan finds the others.
    objects = bucket_objects(s3, "edits/delete/")
    for i in gone:
        holders = [k for k, body in objects.items() if captions[i].encode() in body]
        assert not holders, f"deleted sample {i} is still in {holders}"
    assert any(captions[kept[0]].encode() in body for body in objects.values())
    # A state saved before the delete is refused (the rows changed).
    with pytest.raises(ValueError, match="shrank from 600 to 596 samples"):
        zrecord.DataLoader(again, batch_size=10, mode=2, seed=1, state=state)
    with pytest.raises(zrecord.IndexOutOfRangeError, match="index 596 is out of range"):
        again.delete([596])

    # A field dropped in place: the stream's identity stays, so the state of now resumes.
    with zrecord.DataLoader(again, batch_size=10, mode=2, seed=1) as loader:
        next(loader)
        state = loader.state_dict()
        expect = next(loader)["label"]
    narrow = zrecord.Dataset.drop_field(url, "caption", storage_options=s3)
    assert [f.name for f in narrow.fields] == ["label"]
    assert list(narrow[np.arange(len(narrow))]["label"]) == kept
    with zrecord.DataLoader(narrow, batch_size=10, mode=2, seed=1, state=state) as loader:
        np.testing.assert_array_equal(next(loader)["label"], expect)
    assert not [k for k in bucket_objects(s3, "edits/delete/") if "/caption/" in k]

    # A field added in place, from strings: no object there before is written again.
    before = {k: body for k, body in bucket_objects(s3, "edits/delete/").items() if not k.endswith("remote.json")}
    wide = zrecord.Dataset.add_field(url, "caption", (captions[i].upper() for i in kept), storage_options=s3)
    assert [f.name for f in wide.fields] == ["label", "caption"]
    assert wide[5]["caption"] == captions[kept[5]].upper()
    after = bucket_objects(s3, "edits/delete/")
    assert all(after[k] == body for k, body in before.items())
    with zrecord.DataLoader(wide, batch_size=10, mode=2, seed=1, state=state) as loader:
        batch = next(loader)
    np.testing.assert_array_equal(batch["label"], expect)
    assert batch["caption"] == [captions[i].upper() for i in expect]
    with pytest.raises(ValueError, match="already has a field"):
        zrecord.Dataset.add_field(url, "label", np.zeros(len(kept)), storage_options=s3)


def test_messages_say_what_is_wrong_and_what_to_do(s3, local, pushed, monkeypatch):
    """Each of these says what is wrong and what to do, not what a layer below saw (a missing
    bucket is not "remote.json is missing"; no aws_allow_http not "builder error"; no
    credentials not "resolve_deny: denied destination"; a rewritten object does not say to
    open the dataset again, which fails; a push into a missing bucket is not the server's XML)."""
    with pytest.raises(FileNotFoundError, match='the bucket "no-such-bucket" does not exist'):
        zrecord.Dataset("s3://no-such-bucket/datasets/train", storage_options=s3)
    with pytest.raises(zrecord.StoreIOError, match='the bucket "no-such-bucket" does not exist .*: create it'):
        zrecord.push(local.path, "s3://no-such-bucket/datasets/train", storage_options=s3)
    with pytest.raises(FileNotFoundError, match=r"nothing is stored under this prefix.*check the URL"):
        zrecord.Dataset(f"s3://{BUCKET}/datasets/trian", storage_options=s3)
    plain = {k: v for k, v in s3.items() if k != "aws_allow_http"}
    with pytest.raises(zrecord.StoreIOError, match='set the storage option aws_allow_http to "true"'):
        zrecord.Dataset(pushed, storage_options=plain)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    # The instance metadata service the client then asks is a closed port here (the test
    # reaches no address but 127.0.0.1).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    anonymous = {k: v for k, v in s3.items() if k not in ("aws_access_key_id", "aws_secret_access_key")}
    anonymous["aws_metadata_endpoint"] = f"http://127.0.0.1:{port}"
    with pytest.raises(zrecord.StoreIOError, match="no credentials were found.*set aws_access_key_id"):
        zrecord.Dataset(pushed, storage_options=anonymous)


def test_the_python_tools_take_urls(s3, local, pushed, tmp_path):
    """inspect, verify, stats and export read a pushed dataset by URL as they read the
    local one, and list finds the datasets under a prefix (before: "no such directory",
    and no storage_options)."""
    far, near = zrecord.inspect(pushed, storage_options=s3), zrecord.inspect(local.path)
    assert far.path == pushed and (far.samples, far.shards, far.fields) == (near.samples, near.shards, near.fields)
    assert far.stores == near.stores and len(far.stores) == 12
    assert zrecord.stats(pushed, storage_options=s3) == zrecord.stats(local.path)
    v = zrecord.verify(pushed, storage_options=s3)
    assert v.ok and v.checked == 3 * len(local)
    zrecord.export(pushed, tmp_path / "far.npz", storage_options=s3)
    zrecord.export(local.path, tmp_path / "near.npz")
    assert (tmp_path / "far.npz").read_bytes() == (tmp_path / "near.npz").read_bytes()

    # A pushed single store is inspected as one; a push that did not finish (objects, no
    # remote.json) is not a dataset.
    zrecord.Dataset.write(tmp_path / "store", np.arange(50, dtype=np.int32))
    root = f"s3://{BUCKET}/tools"
    zrecord.push(tmp_path / "store", f"{root}/nested/store", storage_options=s3)
    zrecord.push(local.path, f"{root}/train", storage_options=s3)
    s3_client(s3).put_object(Bucket=BUCKET, Key="tools/unfinished/shard-000000/label/meta.zr", Body=b"x")
    assert zrecord.inspect(f"{root}/nested/store", storage_options=s3) == zrecord.inspect(tmp_path / "store")
    assert zrecord.list(root, storage_options=s3) == [f"{root}/nested/store", f"{root}/train"]
    assert zrecord.list(f"{root}/train/", storage_options=s3) == [f"{root}/train"]
    assert zrecord.list(f"{root}/unfinished", storage_options=s3) == []
    with pytest.raises(zrecord.StoreIOError, match='bucket "no-such-bucket" does not exist'):
        zrecord.list("s3://no-such-bucket/x", storage_options=s3)
    with pytest.raises(zrecord.StoreIOError, match="nothing is stored under this prefix"):
        zrecord.inspect(f"{root}/missing", storage_options=s3)


def test_datasets_in_an_object_store_concatenate(s3, local, pushed, tmp_path):
    """zrecord.concat of two pushed datasets into a new prefix of the bucket: the server
    copies each object (before: local folders only), the new dataset reads as the two in
    order, and it stands alone once the sources are gone."""
    more = tmp_path / "more"
    rng = np.random.default_rng(9)
    zrecord.Dataset.write(more, {"image": rng.integers(0, 255, (100, 3, 8, 8), dtype=np.uint8),
                                 "label": np.arange(1000, 1100), "tokens": docs(100, 3)})
    zrecord.push(more, f"s3://{BUCKET}/concat/more", storage_options=s3)
    out = f"s3://{BUCKET}/concat/both"
    done = zrecord.concat([pushed, f"s3://{BUCKET}/concat/more"], out, storage_options=s3)
    assert done["samples"] == len(local) + 100 and done["shards"] == local.shards + 1 and done["linked"] == 0
    both = zrecord.Dataset(out, storage_options=s3, verify="always")
    labels = both[np.arange(len(both))]["label"]
    np.testing.assert_array_equal(labels, np.concatenate([np.arange(len(local)), np.arange(1000, 1100)]))
    np.testing.assert_array_equal(both[len(local) + 5]["image"], zrecord.Dataset(more)[5]["image"])
    client = s3_client(s3)
    for key in bucket_objects(s3, "concat/more/"):
        client.delete_object(Bucket=BUCKET, Key=key)
    again = zrecord.Dataset(out, storage_options=s3)
    np.testing.assert_array_equal(again[len(local) + 99]["tokens"], zrecord.Dataset(more)[99]["tokens"])
    with pytest.raises(ValueError, match="already at"):
        zrecord.concat([pushed], out, storage_options=s3)
    with pytest.raises(ValueError, match="local datasets into a local folder"):
        zrecord.concat([pushed, local.path], out, storage_options=s3)
