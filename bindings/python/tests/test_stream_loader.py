"""DataLoader on many processes: shuffled epochs, rank sharding, exact resume, generations
and mixtures. The stream's own properties are tested in core/tests/stream.rs;
here, that the loader reads it, counts only what it returned, and refuses stale states."""

import itertools
import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import zrecord
from zrecord import DataLoader, Dataset, Mixture, Sampler, resolve_world

SHUFFLE = Sampler.Mode.SHUFFLE


@pytest.fixture
def store(tmp_path):
    """1003 samples whose data row is (i, 2i) and whose label is i."""
    n = 1003
    d = Dataset.write(tmp_path / "data", np.stack([np.arange(n), 2 * np.arange(n)], axis=1))
    l = Dataset.write(tmp_path / "label", np.arange(n))
    yield d, l
    d.close()
    l.close()


def labels(loader, steps):
    """The labels of the next `steps` batches, checking each batch's data against them."""
    out = []
    for batch in itertools.islice(loader, steps):
        np.testing.assert_array_equal(batch["data"][:, 0], batch["label"])
        out.append(batch["label"])
    assert len(out) == steps
    return out


def test_mode_shuffle_is_2():
    assert Sampler.Mode.SHUFFLE == 2
    with pytest.raises(ValueError, match=r"0 \(SEQUENTIAL\), 1 \(IID\) or 2 \(SHUFFLE\), got 3"):
        Sampler(10, 2, 3)


def test_one_shuffle_epoch_visits_every_index_once(store):
    d, l = store
    with DataLoader(d, l, batch_size=40, mode=SHUFFLE, seed=5, rank=0, world_size=1) as loader:
        assert loader.steps_per_epoch == 25  # 1003 // 40; 3 dropped
        epoch = np.concatenate(labels(loader, 25))
        nxt = np.concatenate(labels(loader, 25))
    assert len(set(epoch.tolist())) == 1000
    assert len(set(nxt.tolist())) == 1000
    assert epoch.tolist() != nxt.tolist(), "each epoch has its own order"


def test_four_ranks_split_the_same_global_stream(store):
    d, l = store
    with DataLoader(d, l, batch_size=40, mode=SHUFFLE, seed=5, world_size=1) as whole:
        reference = labels(whole, 25)
    per_rank = []
    for rank in range(4):
        with DataLoader(d, l, batch_size=10, mode=SHUFFLE, seed=5, rank=rank, world_size=4, num_workers=rank) as ld:
            assert ld.steps_per_epoch == 25, "every rank runs the same number of steps"
            assert (ld.rank, ld.world_size) == (rank, 4)
            per_rank.append(labels(ld, 25))
    union = np.concatenate([np.concatenate(r) for r in per_rank])
    assert len(union) == 1000 and len(set(union.tolist())) == 1000
    for step in range(25):
        np.testing.assert_array_equal(np.concatenate([r[step] for r in per_rank]), reference[step])


@pytest.mark.parametrize("mode", [0, 1])
def test_sharding_in_sequential_and_iid_modes(store, mode):
    d, l = store
    with DataLoader(d, l, batch_size=12, mode=mode, seed=3, world_size=1) as whole:
        assert whole.steps_per_epoch is None
        reference = labels(whole, 5)
    parts = []
    for rank in range(3):
        with DataLoader(d, l, batch_size=4, mode=mode, seed=3, rank=rank, world_size=3) as ld:
            parts.append(labels(ld, 5))
    for step in range(5):
        np.testing.assert_array_equal(np.concatenate([p[step] for p in parts]), reference[step])


def test_world_size_one_is_the_old_stream(store):
    d, l = store
    expected = Sampler(len(d), 16, Sampler.Mode.IID, seed=9)
    with DataLoader(d, l, batch_size=16, seed=9, rank=0, world_size=1, num_workers=2) as loader:
        for batch in itertools.islice(loader, 10):
            np.testing.assert_array_equal(batch["label"], expected.next().astype(np.int64))


def test_state_dict_is_small_json_and_independent_of_workers(store):
    d, l = store
    states = []
    for workers, prefetch in [(0, 1), (1, 2), (4, 16)]:
        with DataLoader(d, l, batch_size=8, mode=SHUFFLE, num_workers=workers, prefetch_size=prefetch) as loader:
            labels(loader, 7)
            states.append(loader.state_dict())
    assert states[0] == states[1] == states[2]
    text = json.dumps(states[0])
    assert len(text) < 1024
    assert json.loads(text) == states[0]
    assert states[0]["step"] == 7 and states[0]["global_batch"] == 8
    # The dataset: its length, and the data and label stores' generations combined.
    [dataset] = states[0]["datasets"]
    # 64 bits of hash for stores zrecord created: a decimal string from 2^53 on, so that a
    # JSON parser of doubles keeps it.
    g = dataset["generation"]
    assert dataset["length"] == 1003
    assert (isinstance(g, str) and int(g) >= 2**53) or (isinstance(g, int) and g < 2**53), g


def test_state_is_not_ahead_of_what_was_returned(store):
    d, l = store
    with DataLoader(d, l, batch_size=8, mode=SHUFFLE, num_workers=4, prefetch_size=8) as loader:
        assert loader.state_dict()["step"] == 0
        labels(loader, 3)
        time.sleep(0.2)  # the workers fill every queue meanwhile
        assert loader.state_dict()["step"] == 3
        assert loader.step == 3


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_resume_is_exact_with_other_workers_prefetch_and_world_size(store, mode):
    d, l = store
    with DataLoader(d, l, batch_size=16, mode=mode, seed=11, world_size=1, num_workers=2) as whole:
        reference = np.concatenate(labels(whole, 150))  # crosses epoch boundaries (62 steps each)
    # Two ranks of 8, deep prefetch, stopped after 70 steps.
    ranks = [
        DataLoader(d, l, batch_size=8, mode=mode, seed=11, rank=r, world_size=2, num_workers=3, prefetch_size=8)
        for r in range(2)
    ]
    first = []
    for _ in range(70):
        first.extend(np.concatenate([next(r)["label"] for r in ranks]))
    saved = ranks[0].state_dict()
    assert saved == ranks[1].state_dict()
    for r in ranks:
        r.close()
    # One rank of 16, through JSON, inline gathering.
    state = json.loads(json.dumps(saved))
    with DataLoader(d, l, batch_size=16, mode=mode, seed=11, world_size=1, num_workers=0, state=state) as resumed:
        assert resumed.step == 70
        rest = np.concatenate(labels(resumed, 80))
    np.testing.assert_array_equal(np.concatenate([first, rest]), reference)
    # load_state_dict on a fresh loader does the same.
    with DataLoader(d, l, batch_size=16, mode=mode, seed=11, world_size=1, prefetch_size=1) as loader:
        loader.load_state_dict(saved)
        np.testing.assert_array_equal(np.concatenate(labels(loader, 80)), rest)


def test_resume_in_a_new_process(store, tmp_path):
    d, l = store
    with DataLoader(d, l, batch_size=32, mode=SHUFFLE, seed=4, world_size=1) as loader:
        labels(loader, 40)
        saved = loader.state_dict()
        expected = np.concatenate(labels(loader, 5))
    (tmp_path / "state.json").write_text(json.dumps(saved))
    script = textwrap.dedent(
        f"""
        import json, numpy as np, zrecord
        d, l = zrecord.Dataset({str(d.path)!r}), zrecord.Dataset({str(l.path)!r})
        state = json.load(open({str(tmp_path / "state.json")!r}))
        with zrecord.DataLoader(d, l, batch_size=16, mode=2, seed=4, rank=1, world_size=2,
                                num_workers=1, state=state) as loader:
            print(json.dumps([next(loader)["label"].tolist() for _ in range(5)]))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    np.testing.assert_array_equal(np.concatenate(got), expected.reshape(5, 32)[:, 16:].reshape(-1))


def test_load_state_dict_after_next_is_refused(store):
    d, l = store
    with DataLoader(d, l, batch_size=8, mode=SHUFFLE) as loader:
        state = loader.state_dict()
        next(loader)
        with pytest.raises(RuntimeError, match="before the first next"):
            loader.load_state_dict(state)


@pytest.mark.parametrize(
    "change, why",
    [
        (dict(seed=43), "seed"),
        (dict(mode=1), "mode"),
        (dict(batch_size=16), "global batch"),
        (dict(batch_size=8, world_size=2, rank=0), "global batch"),
    ],
)
def test_a_state_of_another_stream_is_refused(store, change, why):
    d, l = store
    args = dict(batch_size=8, mode=SHUFFLE, seed=42, world_size=1)
    with DataLoader(d, l, **args) as loader:
        next(loader)
        state = loader.state_dict()
    with pytest.raises(ValueError, match=why):
        DataLoader(d, l, **{**args, **change}, state=state)
    with DataLoader(d, l, **{**args, **change}) as loader:
        with pytest.raises(ValueError, match=why):
            loader.load_state_dict(state)
        assert loader.step == 0  # a refused state changes nothing
        next(loader)


def test_malformed_states_are_value_errors(store):
    d, l = store
    with pytest.raises(ValueError, match="not a zrecord stream state"):
        DataLoader(d, l, state={"step": 3})
    with pytest.raises(ValueError, match="version"):
        DataLoader(d, l, state={"version": 99})
    with pytest.raises(TypeError):
        DataLoader(d, l, state=[1, 2])


def _saved(tmp_path, n=200):
    d = Dataset.write(tmp_path / "data", np.arange(n * 2).reshape(n, 2))
    l = Dataset.write(tmp_path / "label", np.arange(n))
    with DataLoader(d, l, batch_size=10, mode=SHUFFLE) as loader:
        next(loader)
        state = loader.state_dict()
    return d, l, state


def _reopen(tmp_path):
    return Dataset(tmp_path / "data"), Dataset(tmp_path / "label")


@pytest.mark.parametrize("change", ["append", "delete", "delete_append", "compact"])
def test_a_changed_dataset_refuses_the_state(tmp_path, change):
    d, l, state = _saved(tmp_path)
    before = (d.generation, l.generation)
    d.close()
    l.close()
    d, l = _reopen(tmp_path)
    if change == "append":
        Dataset.write(tmp_path / "data", np.zeros((1, 2), np.int64))
        Dataset.write(tmp_path / "label", np.zeros(1, np.int64))
        why = "grew from 200 to 201 samples"
    elif change == "delete":
        d.delete([5])
        l.delete([5])
        why = "shrank from 200 to 199 samples: rows were deleted"
    elif change == "delete_append":
        d.delete([5])
        l.delete([5])
        Dataset.write(tmp_path / "data", np.zeros((1, 2), np.int64))
        Dataset.write(tmp_path / "label", np.zeros(1, np.int64))
        why = "not the dataset the state read"
    else:
        # A compact that moves records changes the generation (one with nothing to do
        # keeps it, and the state: test_generation.py).
        d.delete([5])
        l.delete([5])
        Dataset.write(tmp_path / "data", np.zeros((1, 2), np.int64))
        Dataset.write(tmp_path / "label", np.zeros(1, np.int64))
        d.compact()
        why = "not the dataset the state read"
    d.close()
    l.close()
    d, l = _reopen(tmp_path)
    assert (d.generation, l.generation) != before
    with pytest.raises(ValueError, match=why):
        DataLoader(d, l, batch_size=10, mode=SHUFFLE, state=state)


@pytest.mark.parametrize("change", ["append", "delete_append", "compact"])
def test_a_dataset_changed_by_loaderx_refuses_the_state(tmp_path, loaderx, change):
    """loaderx knows nothing of generation.zrg: its appends and compacts move the frontier,
    its deletes change the length; either changes what the state recorded."""
    d, l, state = _saved(tmp_path)
    if change == "compact":
        # Deleted by zrecord (generation bumped), state saved after; then loaderx compacts.
        d.delete([3])
        l.delete([3])
        with DataLoader(d, l, batch_size=10, mode=SHUFFLE) as loader:
            next(loader)
            state = loader.state_dict()
    d.close()
    l.close()
    for name in ("data", "label"):
        z = loaderx.Zrecord(str(tmp_path / name))
        try:
            if change == "append":
                z.append(np.zeros(1, np.int64), 1, 8)
            elif change == "delete_append":
                z.delete(np.array([3], np.uint64))
                z.append(np.zeros(1, np.int64), 1, 8)
            else:
                z.compact()
        finally:
            z.close()
    d, l = _reopen(tmp_path)
    why = {"append": "201 samples", "delete_append": "not the dataset the state read",
           "compact": "not the dataset the state read"}[change]
    with pytest.raises(ValueError, match=why):
        DataLoader(d, l, batch_size=10, mode=SHUFFLE, state=state)


def test_generation_is_stable_across_handles_and_reads(tmp_path):
    d, l, state = _saved(tmp_path)
    d, l = _reopen(tmp_path)
    d[np.arange(10)]
    with DataLoader(d, l, batch_size=10, mode=SHUFFLE, state=state, num_workers=0) as loader:
        assert loader.step == 1
    assert (tmp_path / "data" / "generation.zrg").exists() is False  # only delete/compact write it


def test_mixture_sources_proportions_and_resume(tmp_path):
    a = Dataset.write(tmp_path / "a", np.stack([np.arange(700), np.zeros(700, np.int64)], axis=1))
    la = Dataset.write(tmp_path / "la", np.arange(700))
    b = Dataset.write(tmp_path / "b", np.stack([np.arange(90), np.ones(90, np.int64)], axis=1))
    lb = Dataset.write(tmp_path / "lb", np.arange(90))
    mix = Mixture([(a, la), (b, lb)], weights=[0.7, 0.3], seed=8)
    counts = np.zeros(2, int)
    with DataLoader(mix, batch_size=100, num_workers=2) as loader:
        assert loader.steps_per_epoch is None
        batches = []
        for batch in itertools.islice(loader, 30):
            assert set(batch) == {"data", "label", "source"}
            src = batch["source"]
            assert src.dtype == np.int32 and src.shape == (100,)
            np.testing.assert_array_equal(batch["data"][:, 1], src)  # each slot from its source
            np.testing.assert_array_equal(batch["data"][:, 0], batch["label"])
            counts += np.bincount(src, minlength=2)
            batches.append(batch)
        state_at_30 = loader.state_dict()
    assert abs(counts[1] / counts.sum() - 0.3) < 0.01, counts
    assert state_at_30["weights"] == ["0.7", "0.3"] and len(json.dumps(state_at_30)) < 1024
    b_picks = np.concatenate([x["label"][x["source"] == 1] for x in batches])
    for epoch in range(len(b_picks) // 90):
        assert len(set(b_picks[epoch * 90 : (epoch + 1) * 90].tolist())) == 90, "source b in whole epochs"

    # Resume at step 10 on 4 ranks of 25: the same samples and sources.
    with DataLoader(mix, batch_size=100, num_workers=1) as loader:
        labels_ = [next(loader) for _ in range(10)]
        state = loader.state_dict()
    assert [x["label"].tolist() for x in labels_] == [x["label"].tolist() for x in batches[:10]]
    for rank in range(4):
        with DataLoader(mix, batch_size=25, rank=rank, world_size=4, num_workers=rank, state=state) as ld:
            for step in range(10, 13):
                got = next(ld)
                sl = slice(rank * 25, (rank + 1) * 25)
                np.testing.assert_array_equal(got["label"], batches[step]["label"][sl])
                np.testing.assert_array_equal(got["source"], batches[step]["source"][sl])
    # Other weights, another seed: refused.
    with pytest.raises(ValueError, match="weights"):
        DataLoader(Mixture([(a, la), (b, lb)], weights=[0.5, 0.5], seed=8), batch_size=100, state=state)
    with pytest.raises(ValueError, match="seed"):
        DataLoader(Mixture([(a, la), (b, lb)], weights=[7, 3], seed=9), batch_size=100, state=state)
    # The same weights at another scale resume it.
    with DataLoader(Mixture([(a, la), (b, lb)], weights=[7, 3], seed=8), batch_size=100, state=state) as ld:
        np.testing.assert_array_equal(next(ld)["label"], batches[10]["label"])


def test_mixture_arguments_are_checked(tmp_path):
    a = Dataset.write(tmp_path / "a", np.zeros((10, 2), np.int64))
    la = Dataset.write(tmp_path / "la", np.arange(10))
    wide = Dataset.write(tmp_path / "w", np.zeros((10, 3), np.int64))
    other = Dataset.write(tmp_path / "o", np.zeros((10, 2), np.float64))
    f_labels = Dataset.write(tmp_path / "lf", np.arange(10, dtype=np.float32))
    short = Dataset.write(tmp_path / "s", np.arange(9))
    with pytest.raises(ValueError, match="share the per-sample dtype and shape.*source 1's is <i8\\(3,\\)"):
        Mixture([(a, la), (wide, la)], weights=[1, 1])
    with pytest.raises(ValueError, match="dtype and shape"):
        Mixture([(a, la), (other, la)], weights=[1, 1])
    with pytest.raises(ValueError, match="label"):
        Mixture([(a, la), (a, f_labels)], weights=[1, 1])
    with pytest.raises(ValueError, match="9"):
        Mixture([(a, short)], weights=[1])
    with pytest.raises(ValueError, match="2 weights"):
        Mixture([(a, la), (a, la)], weights=[1])
    with pytest.raises(ValueError):
        Mixture([], weights=[])
    with pytest.raises(TypeError):
        Mixture([(a.store, la.store)], weights=[1])
    # Bad weights are refused when the Mixture is made, not later by the DataLoader.
    with pytest.raises(ValueError, match="weight"):
        Mixture([(a, la), (a, la)], weights=[1, 0])
    mix = Mixture([(a, la)], weights=[1])
    with pytest.raises(ValueError, match="labelset"):
        DataLoader(mix, la, batch_size=4)
    with pytest.raises(ValueError, match="SEQUENTIAL"):
        DataLoader(mix, batch_size=4, mode=0)


def test_resolve_world_order(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_world() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_world() == (2, 4)
    assert resolve_world(1, 2) == (1, 2), "explicit arguments win"
    assert resolve_world(world_size=1) == (0, 1)
    assert resolve_world(rank=3) == (3, 4)
    assert resolve_world(world_size=8) == (2, 8)
    with pytest.raises(ValueError, match="rank must be in 0..1"):
        resolve_world(rank=2, world_size=2)
    with pytest.raises(ValueError):
        resolve_world(world_size=0)
    with pytest.raises(TypeError):
        resolve_world(rank="1", world_size=2)
    assert resolve_world(np.int64(1), np.int32(2)) == (1, 2)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK"):
        resolve_world()


def test_loader_takes_rank_and_world_from_the_environment(store, monkeypatch):
    d, l = store
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with DataLoader(d, l, batch_size=8, mode=SHUFFLE, seed=1) as ld:
        assert (ld.rank, ld.world_size) == (1, 2)
        assert ld.state_dict()["global_batch"] == 16
        got = next(ld)["label"]
    with DataLoader(d, l, batch_size=16, mode=SHUFFLE, seed=1, world_size=1) as whole:
        np.testing.assert_array_equal(got, next(whole)["label"][8:])


def test_importing_zrecord_imports_neither_torch_nor_jax():
    script = "import sys, zrecord, zrecord.dataloader; print(sorted(m for m in ('torch', 'jax') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_other_dataset_objects_read_the_same_stream(store, loaderx):
    """Objects with __len__/__getitems__ (loaderx's Dataset here) are served by Python
    threads from the same core stream: same ranks, epochs and resume, in order."""
    d, l = store
    with DataLoader(d, l, batch_size=8, mode=SHUFFLE, seed=2, world_size=1) as native:
        reference = labels(native, 30)
    ref_d, ref_l = loaderx.Dataset(d.path), loaderx.Dataset(l.path)
    try:
        halves = []
        for rank in range(2):
            with DataLoader(ref_d, ref_l, batch_size=4, mode=SHUFFLE, seed=2, rank=rank, world_size=2,
                            num_workers=3) as ld:
                assert ld.steps_per_epoch == 125
                halves.append(labels(ld, 20))
                state = ld.state_dict()
        for step in range(20):
            np.testing.assert_array_equal(np.concatenate([halves[0][step], halves[1][step]]), reference[step])
        assert state["step"] == 20 and state["datasets"] == [{"length": 1003, "generation": 0}]
        with DataLoader(ref_d, ref_l, batch_size=8, mode=SHUFFLE, seed=2, world_size=1, state=state) as ld:
            np.testing.assert_array_equal(np.concatenate(labels(ld, 10)), np.concatenate(reference[20:30]))
        with DataLoader(ref_d, ref_l, batch_size=8, mode=SHUFFLE, seed=2, world_size=1) as ld:
            ld.load_state_dict(state)
            np.testing.assert_array_equal(next(ld)["label"], reference[20])
        # A zrecord state (with its generation) does not load into the length-only dataset.
        with DataLoader(d, l, batch_size=8, mode=SHUFFLE, seed=2, world_size=1) as native:
            zstate = native.state_dict()
        with pytest.raises(ValueError, match="generation"):
            DataLoader(ref_d, ref_l, batch_size=8, mode=SHUFFLE, seed=2, world_size=1, state=zstate)
    finally:
        ref_d.close()
        ref_l.close()


def test_an_impossible_shuffle_batch_is_a_value_error(store):
    d, l = store
    with pytest.raises(ValueError, match="SHUFFLE epoch of 1003 samples holds no global batch of 2048"):
        DataLoader(d, l, batch_size=512, mode=SHUFFLE, rank=0, world_size=4)


def test_epochs_are_counted_and_epoch_iter_stops_at_the_boundary(tmp_path):
    """After a mid-epoch resume, epoch_iter() yields the rest of that epoch only (the
    README's loop used to run a whole epoch past it); epoch and steps_left_in_epoch follow
    the stream, and the two halves of the epoch are one epoch."""
    Dataset.write(tmp_path / "d", np.arange(1000, dtype=np.int64).reshape(1000, 1))
    Dataset.write(tmp_path / "l", np.arange(1000, dtype=np.int64))
    d, l = Dataset(tmp_path / "d"), Dataset(tmp_path / "l")
    with DataLoader(d, l, batch_size=96, mode=2, seed=3, num_workers=2) as loader:
        assert (loader.steps_per_epoch, loader.epoch, loader.steps_left_in_epoch) == (10, 0, 10)
        first = [next(loader)["label"] for _ in range(3)]
        assert (loader.step, loader.epoch, loader.steps_left_in_epoch) == (3, 0, 7)
        state = loader.state_dict()
    with DataLoader(d, l, batch_size=48, mode=2, seed=3, rank=1, world_size=2, state=state) as half:
        assert (half.epoch, half.steps_left_in_epoch) == (0, 7)
    with DataLoader(d, l, batch_size=96, mode=2, seed=3, state=state) as loader:
        rest = [b["label"] for b in loader.epoch_iter()]
        assert len(rest) == 7 and (loader.step, loader.epoch, loader.steps_left_in_epoch) == (10, 1, 10)
        epoch = np.concatenate(first + rest)
        assert len(set(epoch.tolist())) == 960  # every sample once; 40 dropped
        assert len(list(loader.epoch_iter())) == 10 and loader.epoch == 2
    with DataLoader(d, l, batch_size=10, mode=1) as iid:
        assert iid.epoch is None and iid.steps_left_in_epoch is None
        with pytest.raises(TypeError, match="no epochs"):
            next(iid.epoch_iter())


def test_ranks_must_agree_at_the_first_batch(store, monkeypatch):
    """The check as the DataLoader runs it, with the job's all-gather replaced by one that
    hands back this rank's state beside those of three other ranks (the real collectives
    run in test_torchrun.py and test_jax_feed.py)."""
    import zrecord._world as world

    d, l = store
    calls = []

    def job_of_four(differ):
        def gather(mine):
            calls.append(mine)
            others = [json.loads(mine) for _ in range(3)]
            for other in others:
                other.update(differ)
            return [mine] + [json.dumps(o) for o in others]
        return gather

    monkeypatch.setattr(world, "_gather_torch", job_of_four({"step": 0}))
    with DataLoader(d, l, batch_size=4, mode=SHUFFLE, num_workers=0, rank=0, world_size=4) as dl:
        for _ in range(3):
            next(dl)
        state = dl.state_dict()
    assert calls and len(calls) == 1, "one gather at the first batch, none after"
    calls.clear()
    with DataLoader(d, l, batch_size=4, mode=SHUFFLE, num_workers=0, rank=0, world_size=4, state=state) as dl:
        for _ in range(2):
            with pytest.raises(zrecord.RanksDisagreeError, match=r"step: rank 0 has 3; ranks 1,2,3 have 0") as e:
                next(dl)
        assert e.value.differences == [("step", {0: 3, 1: 0, 2: 0, 3: 0})]
        assert isinstance(e.value, ValueError)
    assert len(calls) == 1, "the second next() raises again without another collective"

    # After load_state_dict the ranks agree again at the next batch.
    calls.clear()
    monkeypatch.setattr(world, "_gather_torch", job_of_four({}))
    with DataLoader(d, l, batch_size=4, mode=SHUFFLE, num_workers=0, rank=0, world_size=4) as dl:
        dl.load_state_dict(state)
        next(dl)
    assert len(calls) == 1

    # A world size of its own (another split of the same global batch) is named too, and
    # check_ranks=False or a loader of one rank gathers nothing.
    calls.clear()
    monkeypatch.setattr(world, "_gather_torch", job_of_four({"world_size": 2}))
    with DataLoader(d, l, batch_size=4, mode=SHUFFLE, num_workers=0, rank=0, world_size=4) as dl:
        with pytest.raises(zrecord.RanksDisagreeError, match="world_size: rank 0 has 4; ranks 1,2,3 have 2"):
            next(dl)
    with DataLoader(d, l, batch_size=4, mode=SHUFFLE, num_workers=0, rank=0, world_size=4, check_ranks=False) as dl:
        next(dl)
    with DataLoader(d, l, batch_size=4, mode=SHUFFLE, num_workers=0, world_size=1) as dl:
        next(dl)
    assert len(calls) == 1


def test_save_state_and_load_state(store, tmp_path, monkeypatch):
    d, l = store
    path = tmp_path / "state.json"
    assert zrecord.load_state(path) is None, "no file yet: start fresh"
    with DataLoader(d, l, batch_size=8, mode=SHUFFLE, num_workers=0) as dl:
        next(dl)
        zrecord.save_state(path, dl.state_dict())
        assert zrecord.load_state(path) == dl.state_dict()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("state")] == ["state.json"]
    # Another rank saves nothing (torchrun's variables name it).
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    zrecord.save_state(tmp_path / "other.json", {"step": 1})
    assert not (tmp_path / "other.json").exists()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    path.write_text('{"step": ')  # half a file
    with pytest.raises(ValueError, match=r"state\.json: not a saved loader state"):
        zrecord.load_state(path)


def test_a_state_of_another_dataset_of_the_same_length_says_so(tmp_path):
    a = Dataset.write(tmp_path / "a", np.arange(100))
    # Another 100 samples of the same dtype: its own stores, generation and frontier.
    b = Dataset.write(tmp_path / "b", np.arange(100) * 7)
    assert len(a) == len(b) == 100
    with DataLoader(a, num_workers=0, batch_size=10, mode=SHUFFLE) as dl:
        next(dl)
        state = dl.state_dict()
    with pytest.raises(ValueError, match="has the same 100 samples but is not the dataset the state read"):
        DataLoader(b, num_workers=0, batch_size=10, mode=SHUFFLE, state=state)
    a.close()
    b.close()


def test_a_block_shuffle_reads_epochs_in_runs_on_any_world_size_and_resumes(store):
    """shuffle_block: each epoch visits every index once (but the dropped tail), a window's
    samples are whole blocks of neighbours, four ranks split the one-rank stream, and the
    state names the blocks: it resumes exactly, and a loader of other blocks refuses it."""
    d, l = store
    args = dict(batch_size=40, seed=5, shuffle_block=20, shuffle_window=3)
    with DataLoader(d, l, **args) as loader:
        assert loader.mode == SHUFFLE, "blocks make SHUFFLE the default"
        assert "shuffle_block=20, shuffle_window=3" in repr(loader)
        reference = labels(loader, 50)
    epoch = np.concatenate(reference[:25])
    assert len(set(epoch.tolist())) == 1000
    assert epoch.tolist() != np.concatenate(reference[25:]).tolist()
    # The first window: 3 blocks of 20 neighbours (one may wrap around the dataset's end).
    window = np.sort(epoch[:60])
    assert np.count_nonzero(np.diff(window) == 1) >= 60 - 3 - 1
    with DataLoader(d, l, batch_size=40, mode=SHUFFLE, seed=5) as full:
        assert np.count_nonzero(np.diff(np.sort(np.concatenate(labels(full, 2))[:60])) == 1) < 20
    for rank in range(4):
        with DataLoader(d, l, **{**args, "batch_size": 10}, rank=rank, world_size=4, num_workers=rank) as ld:
            got = labels(ld, 50)
        for step in (0, 7, 49):
            np.testing.assert_array_equal(got[step], reference[step][rank * 10:(rank + 1) * 10])

    with DataLoader(d, l, **args) as loader:
        labels(loader, 7)
        state = loader.state_dict()
    assert state["version"] == 3 and state["blocks"] == [20, 3]
    with DataLoader(d, l, **{**args, "batch_size": 20}, world_size=2, rank=1, state=state) as resumed:
        got = labels(resumed, 30)
    for k, step in enumerate(range(7, 37)):
        np.testing.assert_array_equal(got[k], reference[step][20:])
    for other, why in [(dict(shuffle_window=2), "3 blocks mixed together"), (dict(shuffle_block=None, shuffle_window=None, mode=SHUFFLE),
                                                                            "one permutation of every sample")]:
        with pytest.raises(ValueError, match=why):
            DataLoader(d, l, **{**args, **other}, state=state)


@pytest.mark.parametrize(
    "args, why",
    [
        (dict(shuffle_block=1), r"at least 2 neighbouring samples \(shuffle_block\)"),
        (dict(shuffle_block=8, shuffle_window=0), r"at least 1 block per window"),
        (dict(shuffle_block=8, mode=0), "SHUFFLE mode; this stream reads SEQUENTIAL"),
        (dict(shuffle_block=8, mode=1), "this stream reads IID"),
    ],
)
def test_a_block_shuffle_that_cannot_be_is_a_value_error(store, args, why):
    d, l = store
    with pytest.raises(ValueError, match=why):
        DataLoader(d, l, batch_size=8, **args)


@pytest.mark.parametrize(
    "args, why",
    [
        (dict(shuffle_block=-3), "must be positive, got -3"),
        (dict(shuffle_window=4), "give shuffle_block too"),
        (dict(shuffle_block=8, passes=1), "passes= reads the dataset in order"),
    ],
)
def test_block_shuffle_arguments_are_checked(store, args, why):
    d, l = store
    with pytest.raises(ValueError, match=why):
        DataLoader(d, l, batch_size=8, **args)
    with pytest.raises(ValueError, match="this stream reads a mixture"):
        DataLoader(Mixture([(d, l), (d, l)], weights=[1, 1]), batch_size=8, shuffle_block=8)
