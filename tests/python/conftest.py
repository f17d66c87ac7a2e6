import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def zr():
    """The `zr` CLI under test (built by `make build`; override with $ZR)."""
    path = os.environ.get("ZR") or str(ROOT / "target" / "release" / "zr")
    if not Path(path).exists():
        found = shutil.which("zr")
        if not found:
            pytest.fail(f"zr binary not found at {path}; run `make build`")
        path = found
    return path
