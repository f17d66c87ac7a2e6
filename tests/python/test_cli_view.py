"""`zr view`'s server, without a browser (bindings/js/test/view.test.js drives the page in
Chromium): what it refuses and says, the byte ranges it answers, the paths it will not
serve, and Ctrl-C (SIGINT) and SIGTERM ending it with status 0."""

import http.client
import signal
import subprocess
import time

import numpy as np
import pytest

import zrecord


@pytest.fixture
def site(tmp_path):
    """A stand-in for the built page (the server only needs its files to exist)."""
    d = tmp_path / "site"
    d.mkdir()
    (d / "index.html").write_text("<!doctype html><title>zrecord view</title>")
    (d / "worker.js").write_text("// worker")
    return d


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "ds"
    zrecord.Dataset.write(path, {"label": np.arange(100, dtype=np.int64), "caption": [f"c{i}" for i in range(100)]})
    return path


def start(zr, *args):
    p = subprocess.Popen([zr, "view", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("zr view: http://127.0.0.1:"), (line, p.stderr.read() if p.poll() is not None else "")
    port = int(line.split("127.0.0.1:")[1].split("/")[0])
    return p, port, line


def request(port, method, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


def test_it_refuses_what_it_cannot_show_and_says_why(zr, tmp_path, site, dataset):
    def fails(*args, env=None):
        p = subprocess.run([zr, "view", *map(str, args)], capture_output=True, text=True, timeout=30, env=env)
        assert p.returncode == 2, p
        return p.stderr

    assert "not a dataset directory (no dataset.json)" in fails(tmp_path, "--site", site)
    assert "give the bucket's https:// URL" in fails("s3://bucket/ds", "--site", site)
    assert "build it with `make view`" in fails(dataset, "--site", tmp_path)
    assert "--port takes a number from 0 to 65535" in fails(dataset, "--port", "70000")
    assert "no such tokenizer file" in fails(dataset, "--site", site, "--tokenizer", tmp_path / "none.json")
    assert "takes DATASET|URL" in fails()


def test_it_serves_the_page_and_the_dataset_in_byte_ranges(zr, site, dataset):
    p, port, line = start(zr, dataset, "--site", site, "--index", 42)
    try:
        assert "?dataset=/dataset/&index=42 shows" in line
        status, headers, body = request(port, "GET", "/")
        assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8") and b"zrecord view" in body
        manifest = (dataset / "dataset.json").read_bytes()
        status, headers, body = request(port, "GET", "/dataset/dataset.json")
        assert (status, body) == (200, manifest)
        # HEAD: the length, no body; a large file too (never chunked: the page sizes files so).
        chunk = dataset / "shard-000000" / "caption" / "meta.zr"
        status, headers, body = request(port, "HEAD", "/dataset/shard-000000/caption/meta.zr")
        assert (status, int(headers["Content-Length"]), body) == (200, chunk.stat().st_size, b"")
        assert "Transfer-Encoding" not in headers
        data = chunk.read_bytes()
        for spec, want in [("bytes=0-15", data[:16]), ("bytes=100-", data[100:]), ("bytes=-7", data[-7:])]:
            status, headers, body = request(port, "GET", "/dataset/shard-000000/caption/meta.zr", {"Range": spec})
            assert (status, body) == (206, want), spec
            assert headers["Content-Range"].endswith(f"/{len(data)}")
        status, headers, _ = request(port, "GET", "/dataset/dataset.json", {"Range": f"bytes={len(manifest)}-"})
        assert (status, headers["Content-Range"]) == (416, f"bytes */{len(manifest)}")
        # Nothing outside the page's folder and the dataset; only GET and HEAD.
        for path in ["/dataset/../ds/dataset.json", "/%2e%2e/ds/dataset.json", "/dataset/shard-000000",
                     "/dataset/nope.json", "/tokenizer.json"]:
            assert request(port, "GET", path)[0] == 404, path
        assert request(port, "POST", "/dataset/dataset.json")[0] == 405
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=10) == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_it_at_once_with_status_0(zr, site, dataset, sig):
    p, port, _ = start(zr, dataset, "--site", site)
    assert request(port, "GET", "/dataset/dataset.json")[0] == 200
    t = time.monotonic()
    p.send_signal(sig)
    assert p.wait(timeout=10) == 0
    assert time.monotonic() - t < 2, "stopped by the server, not by the 2 s fallback exit"
    with pytest.raises(ConnectionRefusedError):
        request(port, "GET", "/")


def test_a_url_is_handed_to_the_page(zr, site):
    p, port, line = start(zr, "https://bucket.example/data/ds/", "--site", site)
    try:
        assert "?dataset=https://bucket.example/data/ds/ shows" in line
        assert request(port, "GET", "/dataset/dataset.json")[0] == 404
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0


def test_the_wheels_zr_serves_the_page_the_wheel_carries(tmp_path, dataset):
    """`zr view` from `pip install zrecord`: the page is in the package (``zrecord/_viewer``),
    found without --site, $ZR_VIEW_SITE or a source tree (before, the wheel's zr looked
    only in the tree it was built from: "no viewer page in .../target/view")."""
    import os
    import sys
    from pathlib import Path

    import zrecord._cli

    site = zrecord._cli.viewer_site()
    assert site is not None, "the installed package carries no viewer page"
    assert Path(site).parent == Path(zrecord.__file__).parent
    for name in ("index.html", "worker.js"):
        assert (Path(site) / name).is_file()
    script = Path(sys.executable).parent / "zr"  # the wheel's console script
    env = {k: v for k, v in os.environ.items() if k != "ZR_VIEW_SITE"}
    p = subprocess.Popen([str(script), "view", str(dataset)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path, env=env)
    try:
        line = p.stdout.readline()
        assert line.startswith("zr view: http://127.0.0.1:"), (line, p.stderr.read() if p.poll() is not None else "")
        port = int(line.split("127.0.0.1:")[1].split("/")[0])
        status, _, body = request(port, "GET", "/index.html")
        assert status == 200 and body == (Path(site) / "index.html").read_bytes()
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
