"""zrecord.jax.loader: global jax.Arrays from each process's rows, prefetched to the
devices, with the state of the last batch handed out; and a real two-process JAX job on
the CPU (jax.distributed with a local coordinator) whose global arrays are the
single-process global batches."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from _ml import HERE, child_env, free_port, kill_session, need, reference_labels, sample_data, write_store

jax = need("jax")

import zrecord  # noqa: E402
import zrecord.jax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

N = 500
SEED = 11
SHUFFLE = zrecord.Sampler.Mode.SHUFFLE


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    write_store(root, N)
    return root


def make_loader(store, batch, **kw):
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return zrecord.DataLoader(
        zrecord.Dataset(store / "data.zr"), zrecord.Dataset(store / "label.zr"),
        batch_size=batch, mode=SHUFFLE, seed=SEED, **kw,
    )


def batch_sharding():
    return NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), P("batch"))


def test_global_arrays_hold_the_loaders_batches(store):
    ref = reference_labels(store, N, 20, 12, SEED)
    with make_loader(store, 20, num_workers=2) as loader:
        batches = zrecord.jax.loader(loader, batch_sharding(), prefetch=2)
        for i in range(12):
            b = next(batches)
            assert isinstance(b["data"], jax.Array) and b["data"].shape == (20, 3)
            assert b["label"].sharding == batch_sharding()
            np.testing.assert_array_equal(np.asarray(b["label"]), ref[i])
            np.testing.assert_array_equal(np.asarray(b["data"]), sample_data(N)[ref[i]])


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_state_is_the_last_batch_handed_out_not_the_prefetched(store, prefetch):
    k, batch = 7, 16
    ref = reference_labels(store, N, batch, k + 4, SEED)
    with make_loader(store, batch, num_workers=2, prefetch_size=3) as loader:
        batches = zrecord.jax.loader(loader, batch_sharding(), prefetch=prefetch)
        before = batches.state_dict()
        for _ in range(k):
            next(batches)
        state, ahead = batches.state_dict(), loader.state_dict()
        following = np.asarray(next(batches)["label"])
    np.testing.assert_array_equal(following, ref[k])
    assert json.loads(json.dumps(state)) == state
    # Resuming from the wrapper's state gives the batch after the last one handed out ...
    with make_loader(store, batch, state=state, num_workers=1) as resumed:
        np.testing.assert_array_equal(next(resumed)["label"], ref[k])
    # ... while the loader itself has been read `prefetch` batches further.
    with make_loader(store, batch, state=ahead, num_workers=1) as resumed:
        np.testing.assert_array_equal(next(resumed)["label"], ref[k + prefetch])
    with make_loader(store, batch, state=before, num_workers=1) as resumed:
        np.testing.assert_array_equal(next(resumed)["label"], ref[0])


def test_load_state_dict_through_the_wrapper_only_before_the_first_batch(store):
    ref = reference_labels(store, N, 16, 6, SEED)
    with make_loader(store, 16) as loader:
        for _ in range(4):
            next(loader)
        state = loader.state_dict()
    with make_loader(store, 16) as loader:
        batches = zrecord.jax.loader(loader, batch_sharding())
        batches.load_state_dict(state)
        assert batches.state_dict() == state
        np.testing.assert_array_equal(np.asarray(next(batches)["label"]), ref[4])
        with pytest.raises(RuntimeError, match="before the first batch"):
            batches.load_state_dict(state)
        assert batches.steps_per_epoch == N // 16


def test_loader_of_another_rank_than_the_sharding_gives_is_refused(store):
    # One JAX process owns every row, but this loader reads only rank 1's half.
    with make_loader(store, 8, rank=1, world_size=2) as loader:
        assert (loader.rank, loader.world_size) == (1, 2)
        batches = zrecord.jax.loader(loader, batch_sharding())
        for _ in range(2):  # not a one-off: every next() refuses
            with pytest.raises(ValueError, match=r"rank 1 of 2.*row block 0 of 1"):
                next(batches)


def test_a_sharding_dict_must_name_every_key():
    batches = zrecord.jax.loader(iter([{"data": np.zeros((4, 2)), "label": np.zeros(4)}]), {"data": batch_sharding()})
    with pytest.raises(ValueError, match=r"the batch has 'label' but the sharding dict has only \['data'\]"):
        next(batches)


def test_an_error_while_reading_ahead_comes_after_the_batches_before_it():
    def stream():
        for i in range(2):
            yield {"label": np.full(4, i)}
        raise RuntimeError("batch 2 is bad")

    batches = zrecord.jax.loader(stream(), batch_sharding(), prefetch=3)
    assert [int(next(batches)["label"][0]) for _ in range(2)] == [0, 1]
    with pytest.raises(RuntimeError, match="batch 2 is bad"):
        next(batches)


def test_bad_prefetch(store):
    with make_loader(store, 8) as loader:
        for bad in (-1, 1.5, True):
            with pytest.raises(ValueError, match="prefetch"):
                zrecord.jax.loader(loader, batch_sharding(), prefetch=bad)


def run_script(code, timeout=180, **env):
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=timeout, env=child_env(**env), cwd=HERE)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_rows_land_on_their_devices_with_a_sharding_per_key(store):
    """Four CPU devices in one process (set before JAX starts, so in a child): each device
    holds its rows of the batch, and a dict gives each key its own sharding."""
    out = run_script(f"""
        import numpy as np, jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        import zrecord, zrecord.jax
        assert len(jax.devices()) == 4
        grid = Mesh(np.array(jax.devices()).reshape(2, 2), ("batch", "model"))
        line = Mesh(np.array(jax.devices()), ("batch",))
        shardings = {{"data": NamedSharding(grid, P("batch")), "label": NamedSharding(line, P("batch"))}}
        ds = lambda name: zrecord.Dataset({str(store)!r} + "/" + name)
        make = lambda: zrecord.DataLoader(ds("data.zr"), ds("label.zr"), batch_size=12, mode=2,
                                          seed={SEED}, rank=0, world_size=1)
        plain, fed = make(), zrecord.jax.loader(make(), shardings)
        for _ in range(5):
            want, got = next(plain), next(fed)
            for key in ("data", "label"):
                assert got[key].sharding == shardings[key]
                assert len(got[key].addressable_shards) == 4
                for shard in got[key].addressable_shards:
                    np.testing.assert_array_equal(np.asarray(shard.data), want[key][shard.index])
            assert got["data"].addressable_shards[0].data.shape == (6, 3)  # halves, twice each
            assert got["label"].addressable_shards[0].data.shape == (3,)  # quarters
        print("ok")
    """, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert out.strip() == "ok"


def run_jax_job(store, tmp_path, nproc, batch, steps, save_at, seed):
    """Runs _jax_worker.py in `nproc` processes of one JAX job; fails the test unless all exit 0."""
    coordinator = f"127.0.0.1:{free_port()}"
    logs = [tmp_path / f"proc{pid}.log" for pid in range(nproc)]  # files: no pipe fills up unread
    procs = []
    for pid, log in enumerate(logs):
        with open(log, "w") as out:
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "_jax_worker.py"), coordinator, str(nproc), str(pid), str(store),
                 str(tmp_path), str(batch), str(steps), str(save_at), str(seed)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=child_env(), cwd=tmp_path,
            ))
    try:
        for p in procs:
            p.wait(timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("the JAX job did not finish in 240 s:\n" + "\n".join(log.read_text() for log in logs))
    finally:
        for p in procs:
            kill_session(p)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log.read_text()


def test_two_jax_processes_build_the_single_process_global_batches(store, tmp_path):
    batch, steps, save_at, nproc = 16, 20, 9, 2  # 15 steps per epoch: epoch 1 is read too
    run_jax_job(store, tmp_path, nproc, batch, steps, save_at, SEED)

    g = batch * nproc
    ref = reference_labels(store, N, g, steps, SEED)
    seen = [json.loads((tmp_path / f"proc{pid}.json").read_text()) for pid in range(nproc)]
    for pid in range(nproc):
        got = np.load(tmp_path / f"proc{pid}.npz")
        np.testing.assert_array_equal(got["labels"], ref)
        np.testing.assert_array_equal(got["data"], sample_data(N)[ref])
        # Not given to the DataLoader: taken from jax.process_index() / process_count().
        assert (seen[pid]["loader_rank"], seen[pid]["loader_world"]) == (pid, nproc)
    assert seen[0]["state"] == seen[1]["state"]
    # The wrapper's state resumes after the last batch handed out, in one process with the
    # whole global batch; the loaders themselves had been read two batches further.
    with make_loader(store, g, state=seen[0]["state"]) as resumed:
        np.testing.assert_array_equal(next(resumed)["label"], ref[save_at])
    with make_loader(store, g, state=seen[0]["loader_state"]) as resumed:
        np.testing.assert_array_equal(next(resumed)["label"], ref[save_at + 2])


def test_jax_processes_with_other_seeds_stop_on_every_process(store, tmp_path):
    run_jax_job(store, tmp_path, 2, 16, 3, 0, f"{SEED},{SEED + 1}")
    for pid in range(2):
        seen = json.loads((tmp_path / f"proc{pid}.json").read_text())
        assert not (tmp_path / f"proc{pid}.npz").exists(), "a process read a batch of its own stream"
        assert len(seen["raised"]) == 2, seen
        assert seen["raised"][0]["differences"] == [["seed", {"0": SEED, "1": SEED + 1}]], seen
        assert f"seed: rank 0 has {SEED}; rank 1 has {SEED + 1}" in seen["raised"][0]["message"]


def test_mixture_global_arrays_and_state(store, tmp_path):
    other = write_store(tmp_path, 120)
    sources = lambda: zrecord.Mixture(  # noqa: E731
        [(zrecord.Dataset(store / "data.zr"), zrecord.Dataset(store / "label.zr")),
         (zrecord.Dataset(other[0]), zrecord.Dataset(other[1]))],
        weights=[1, 3], seed=SEED,
    )
    make = lambda **kw: zrecord.DataLoader(sources(), batch_size=10, rank=0, world_size=1, **kw)  # noqa: E731
    with make() as plain:
        want = [next(plain) for _ in range(8)]
    with make() as loader:
        batches = zrecord.jax.loader(loader, batch_sharding(), prefetch=3)
        for i in range(5):
            got = next(batches)
            assert set(got) == {"data", "label", "source"}
            for key in got:
                np.testing.assert_array_equal(np.asarray(got[key]), want[i][key])
        state = batches.state_dict()
    with make(state=state) as resumed:
        np.testing.assert_array_equal(next(resumed)["source"], want[5]["source"])
        np.testing.assert_array_equal(next(resumed)["label"], want[6]["label"])


def test_step_and_epochs_follow_the_batches_handed_out(store):
    """The wrapper's step is its state's (the loader's runs ahead by the prefetch), and
    epoch_iter() ends at the epoch's end counted from what was handed out."""
    batch = 50  # 10 steps per epoch
    with make_loader(store, batch, num_workers=2) as loader:
        batches = zrecord.jax.loader(loader, batch_sharding(), prefetch=3)
        assert (batches.step, batches.epoch, batches.steps_left_in_epoch) == (0, 0, 10)
        for _ in range(4):
            next(batches)
        assert loader.step > 4  # read ahead
        assert batches.step == batches.state_dict()["step"] == 4
        assert (batches.epoch, batches.steps_left_in_epoch) == (0, 6)
        assert len(list(batches.epoch_iter())) == 6
        assert (batches.step, batches.epoch, batches.steps_left_in_epoch) == (10, 1, 10)
