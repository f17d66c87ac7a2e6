"""`make demo`, the README's first command, runs (smaller): it writes images, captions,
tokens and labels, trains with the loader, resumes and checks the resumed batches."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PIL")

DEMO = Path(__file__).resolve().parents[1] / "demo.py"


def test_the_demo_runs(zr, tmp_path):
    p = subprocess.run([sys.executable, str(DEMO), "--zr", zr, "--samples", "300", "--steps", "8", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "wrote 300 samples (image, caption, tokens, label)" in p.stdout, p.stdout
    assert "resumed at step 4: steps 4..7 equal the uninterrupted run" in p.stdout, p.stdout
    assert "zrecord-dataset v6" in p.stdout, p.stdout
    assert f"view {tmp_path / 'demo'}" in p.stdout, p.stdout
