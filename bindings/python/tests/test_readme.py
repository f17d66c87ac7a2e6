"""The README's Python quick start runs as printed, in an empty directory: it needs no file
it does not write itself. docs/python.md's blocks continue it and run after it."""

import re
import subprocess
import sys

import numpy as np
import pytest

from _support import REPO


def quick_start() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Python", 1)
    assert len(section) == 2, "README has no Python section"
    # Up to the next section: "Training on many processes" has scripts of its own
    # (test_readme_training.py runs them).
    blocks = re.findall(r"```python\n(.*?)```", section[1].split("\n## ", 1)[0], re.S)
    assert blocks, "README's Python section has no python block"
    # The blocks continue one another (the second uses the stores the first wrote).
    return "\n".join(blocks)


def python_guide() -> str:
    """docs/python.md's python blocks, in order: the fields example, the bytes and strings
    example, the many-writers example (a process pool), then the tools example, which reads
    the stores the quick start wrote."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "python.md").read_text(), re.S)
    assert len(blocks) == 4, "docs/python.md: expected the fields, typed fields, many writers and tools examples"
    return "\n".join(blocks)


def test_readme_quick_start(tmp_path):
    code = quick_start()
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(256, 3, 16, 16) (256,)" in out.stdout


def test_readme_object_storage_block_runs_as_printed(tmp_path):
    """The README's object-storage block after the quick start, as printed: it starts the
    S3-compatible server it reads from and names its credentials (it used to assume a server
    on port 9000 and credentials in the environment: "no credentials were found")."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Datasets in object storage", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("AWS_")}
    code = quick_start() + "\n" + blocks[0]
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert "'requests':" in out.stdout and "'retries': 0" in out.stdout, out.stdout


def test_python_guide_after_the_quick_start(tmp_path):
    code = quick_start() + "\n" + python_guide()
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Field(name='tokens', kind='ragged'" in out.stdout and " 1000 3" in out.stdout, out.stdout
    assert "1000 1000" in out.stdout
    assert "[('jpeg', 'bytes'), ('caption', 'string'), ('ids', 'ragged'), ('label', 'fixed')]" in out.stdout
    assert "a red kite b''" in out.stdout, out.stdout
    assert "4000 samples, caption 3999" in out.stdout, out.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "back.npy"), np.load(tmp_path / "data.npy"))


def test_package_readme_examples(tmp_path):
    """bindings/python/README.md's python blocks after the first (which needs .npy files):
    the epochs, ranks, resume and mixtures example runs as printed."""
    readme = (REPO / "bindings" / "python" / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    code = "\n".join(b for b in blocks if "Mixture" in b)
    if not code:
        pytest.skip("bindings/python/README.md has no DataLoader stream example")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "15"
    assert "['data', 'label', 'source']" in out.stdout
