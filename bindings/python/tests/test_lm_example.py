"""docs/training.md's "Language-model pretraining" example runs as printed: its `zr convert` line
turns a nanoGPT-style train.bin (written here: GPT-2 ids, 50256 after each document) into
a token dataset, and its torchrun lines train 10 packed steps on four ranks, then 10 more
resumed on two. The state they leave is the one a single process reaches after 20 steps."""

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

from _ml import child_env, need, run
from _support import REPO

need("torch")

import zrecord  # noqa: E402

TITLE = "## Language-model pretraining"
EOT = 50256


def blocks(lang):
    section = (REPO / "docs" / "training.md").read_text().split(TITLE + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def test_language_model_example(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, EOT, int(n), dtype=np.uint16) for n in rng.integers(5, 600, 400)]
    np.concatenate([np.append(d, np.uint16(EOT)) for d in docs]).tofile(tmp_path / "train.bin")
    [script] = blocks("python")
    assert script.startswith("# train_lm.py\n")
    (tmp_path / "train_lm.py").write_text(script)
    zr = os.environ.get("ZR") or str(REPO / "target" / "release" / "zr")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "zr").symlink_to(zr)
    env = child_env(PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]))
    convert, train = blocks("sh")
    p = run(["bash", "-c", convert], 120, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout
    assert len(zrecord.Dataset(tmp_path / "train_tokens")) == 400
    p = run(["bash", "-c", train], 600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout
    assert "at step 10: 10320 tokens in 10 steps on 4 ranks" in p.stdout, p.stdout
    assert "at step 20: 10320 tokens in 10 steps on 2 ranks" in p.stdout, p.stdout
    saved = json.loads((tmp_path / "lm_state.json").read_text())
    with zrecord.DataLoader(zrecord.Dataset(tmp_path / "train_tokens"), batch_size=8, num_workers=0,
                            mode=zrecord.Sampler.Mode.SHUFFLE, seed=0, rank=0, world_size=1,
                            pack=zrecord.Pack(seq_len=129, mode="concat", eos=EOT)) as dl:
        for _ in range(20):
            next(dl)
        assert saved == dl.state_dict()
