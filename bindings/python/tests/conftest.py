import http.client

import numpy as np
import pytest

from moto.server import ThreadedMotoServer  # tests/requirements.txt: a missing server fails, never skips

from _support import BUCKET


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 and the storage options that reach it."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    options = {
        "aws_endpoint": f"http://{host}:{port}",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("PUT", f"/{BUCKET}")
    assert conn.getresponse().status == 200
    conn.close()
    yield options
    server.stop()
