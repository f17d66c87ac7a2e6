"""`pip install` of the wheel gives `zr`: a console script over the Rust command
line linked into the extension, answering exactly as the Rust binary does."""

import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np

import zrecord


def wheel_zr() -> str:
    script = Path(sysconfig.get_path("scripts")) / "zr"
    assert script.exists(), f"the installed zrecord wheel put no zr in {script.parent}"
    return str(script)


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300)


def test_the_wheel_installs_zr_and_it_matches_the_binary(zr, tmp_path):
    ds = tmp_path / "ds"
    zrecord.Dataset.write(ds, {"tokens": [np.arange(5, dtype=np.uint16)] * 10, "label": np.arange(10)})
    mine, theirs = run(wheel_zr(), "inspect", str(ds)), run(zr, "inspect", str(ds))
    assert mine.returncode == theirs.returncode == 0, mine.stderr
    assert mine.stdout == theirs.stdout
    # A command that writes: the flat token file conversion, then verify.
    flat = np.array([1, 2, 0, 3, 0, 4, 5], np.uint16)
    (tmp_path / "t.bin").write_bytes(flat.tobytes())
    p = run(wheel_zr(), "convert", str(tmp_path / "t.bin"), str(tmp_path / "out"), "--tokens", "uint16", "--eos", "0")
    assert p.returncode == 0, p.stderr
    assert [list(x["tokens"]) for x in zrecord.Dataset(tmp_path / "out")] == [[1, 2], [3], [4, 5]]
    # Errors and exit codes are the binary's.
    bad, ref = run(wheel_zr(), "inspect", str(tmp_path / "missing")), run(zr, "inspect", str(tmp_path / "missing"))
    assert bad.returncode == ref.returncode != 0 and bad.stderr == ref.stderr
    # `python -m zrecord._cli` is the same entry point.
    p = run(sys.executable, "-m", "zrecord._cli", "verify", str(ds))
    assert p.returncode == 0, p.stderr
