"""zrecord.torch.loader: tensors that share the numpy batch's memory, pinning only where
torch has an accelerator (a warning otherwise), moves with non_blocking, and the wrapped
loader's exact state; and `import zrecord` imports neither torch nor JAX."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

from _ml import child_env, need, reference_labels, sample_data, write_store

torch = need("torch")

import zrecord  # noqa: E402
import zrecord.torch  # noqa: E402

N = 400
SEED = 3


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
        batch_size=batch, mode=zrecord.Sampler.Mode.SHUFFLE, seed=SEED, **kw,
    )


class Recorder:
    """Passes a real loader's batches through and keeps the last one, so that a test can
    compare the tensors' memory with the numpy arrays they were made from."""

    def __init__(self, loader):
        self.loader, self.last = loader, None

    def __iter__(self):
        return self

    def __next__(self):
        self.last = next(self.loader)
        return self.last

    def state_dict(self):
        return self.loader.state_dict()


def test_tensors_share_the_batch_memory(store):
    ref = reference_labels(store, N, 32, 5, SEED)
    with make_loader(store, 32, num_workers=2) as loader:
        spy = Recorder(loader)
        for i, batch in zip(range(5), zrecord.torch.loader(spy)):
            assert set(batch) == {"data", "label"}
            for key, t in batch.items():
                array = spy.last[key]
                assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
                assert t.data_ptr() == array.ctypes.data and t.shape == array.shape
                assert np.shares_memory(t.numpy(), array)
            assert batch["data"].dtype == torch.int64 and batch["label"].dtype == torch.int64
            np.testing.assert_array_equal(batch["label"].numpy(), ref[i])
            np.testing.assert_array_equal(batch["data"].numpy(), sample_data(N)[ref[i]])
            batch["label"][0] = -1  # one memory: the write shows in the array
            assert spy.last["label"][0] == -1


def test_pin_memory_pins_only_with_an_accelerator(store):
    """Pinning needs an accelerator (CPU-only torch raises "Found no NVIDIA driver"). With
    one, tensors are pinned; without, the wrapper warns once and shares memory as usual."""
    accel = zrecord.torch.accelerator_available()
    with make_loader(store, 16) as loader:
        spy = Recorder(loader)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches = zrecord.torch.loader(spy, pin_memory=True)
            assert batches.pinned == accel
            batch = next(batches)
        said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        if accel:
            assert said == [] and batch["data"].is_pinned()
        else:
            assert len(said) == 1 and "no accelerator" in said[0] and "not pinned" in said[0], said
            assert not batch["data"].is_pinned()
            assert batch["data"].data_ptr() == spy.last["data"].ctypes.data
        np.testing.assert_array_equal(batch["data"].numpy(), spy.last["data"])


def test_device_moves_are_made(store):
    with make_loader(store, 16) as loader:
        spy = Recorder(loader)
        on_cpu = next(zrecord.torch.loader(spy, device="cpu"))
        assert on_cpu["data"].data_ptr() == spy.last["data"].ctypes.data  # already there: no copy
        meta = next(zrecord.torch.loader(spy, device="meta"))  # a real move, to a device of shapes only
        assert meta["data"].device.type == "meta" and meta["data"].shape == (16, 3)
        assert meta["label"].dtype == torch.int64


def test_state_stays_exact_through_the_wrapper(store):
    k, batch = 6, 24
    ref = reference_labels(store, N, batch, k + 3, SEED)
    with make_loader(store, batch, num_workers=3, prefetch_size=5) as loader:
        batches = zrecord.torch.loader(loader)
        assert batches.steps_per_epoch == N // batch
        for _ in range(k):
            next(batches)
        state = batches.state_dict()
        assert state == loader.state_dict()
    with make_loader(store, batch, num_workers=0) as loader:
        batches = zrecord.torch.loader(loader)
        batches.load_state_dict(state)
        for i in range(k, k + 3):
            np.testing.assert_array_equal(next(batches)["label"].numpy(), ref[i])


def test_read_only_arrays_are_copied_and_bad_dtypes_named():
    ro = np.arange(6, dtype=np.float32)
    ro.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it shares a read-only array
        t = next(zrecord.torch.loader(iter([{"x": ro, "nested": [ro, {"y": ro}], "n": 3}])))
    assert not np.shares_memory(t["x"].numpy(), ro) and torch.equal(t["x"], torch.arange(6.0))
    assert isinstance(t["nested"], list) and isinstance(t["nested"][1]["y"], torch.Tensor)
    assert t["n"] == 3
    for bad in (np.zeros(3, ">i4"), np.array(["a", "b"])):
        with pytest.raises(TypeError, match=r"batch\['label'\].*cannot become a torch tensor"):
            next(zrecord.torch.loader(iter([{"label": bad}])))


def test_importing_zrecord_imports_neither_torch_nor_jax():
    code = (
        "import sys, zrecord\n"
        "zrecord.DataLoader, zrecord.Sampler, zrecord.Dataset\n"
        "print(sorted(m for m in ('torch', 'jax', 'jaxlib') if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_mixture_batches_carry_their_source_and_resume_exactly(store, tmp_path):
    other = write_store(tmp_path, 150)
    sources = lambda: zrecord.Mixture(  # noqa: E731
        [(zrecord.Dataset(store / "data.zr"), zrecord.Dataset(store / "label.zr")),
         (zrecord.Dataset(other[0]), zrecord.Dataset(other[1]))],
        weights=[0.7, 0.3], seed=SEED,
    )
    make = lambda **kw: zrecord.DataLoader(sources(), batch_size=32, rank=0, world_size=1, **kw)  # noqa: E731
    with make(num_workers=2) as loader:
        spy = Recorder(loader)
        batches = zrecord.torch.loader(spy)
        for _ in range(4):
            batch = next(batches)
        assert set(batch) == {"data", "label", "source"}
        assert batch["source"].data_ptr() == spy.last["source"].ctypes.data
        assert set(batch["source"].tolist()) <= {0, 1}
        state = batches.state_dict()
        following = [next(batches) for _ in range(3)]
    with make(num_workers=0, state=state) as loader:
        for want in following:
            got = next(zrecord.torch.loader(loader))
            for key in ("data", "label", "source"):
                assert torch.equal(got[key], want[key]), key


def test_epochs_through_the_wrapper(store):
    batch = 25
    with make_loader(store, batch, num_workers=2) as loader:
        batches = zrecord.torch.loader(loader)
        spe = batches.steps_per_epoch
        next(batches)
        assert (batches.step, batches.epoch, batches.steps_left_in_epoch) == (1, 0, spe - 1)
        assert len(list(batches.epoch_iter())) == spe - 1
        assert (batches.step, batches.epoch) == (spe, 1) and batches.step == batches.state_dict()["step"]
