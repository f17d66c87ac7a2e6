"""Property tests: the store behaves like a Python list of byte strings with swap-last delete."""

import shutil
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zrecord

records = st.binary(min_size=1, max_size=300)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(records, min_size=1, max_size=8), st.sampled_from(["raw", "flate"])),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 40), max_size=5)),
        st.tuples(st.just("compact")),
        st.tuples(st.just("reopen")),
    ),
    max_size=12,
)


def swap_last_delete(model, idxs):
    for i in sorted(set(idxs), reverse=True):
        model[i] = model[-1]
        model.pop()


def check(z, model):
    assert len(z) == len(model)
    if not model:
        return
    idxs = np.arange(len(model))[::-1]
    lens = z.lengths(idxs)
    assert lens.tolist() == [len(model[i]) for i in idxs]
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
    dst = np.zeros(int(lens.sum()), np.uint8)
    z.gather_var(idxs, dst, offs)
    assert dst.tobytes() == b"".join(model[i] for i in idxs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_store_matches_list_model(program):
    root = tempfile.mkdtemp()
    try:
        z = zrecord.Zrecord(root + "/s")
        model = []
        for op in program:
            if op[0] == "append":
                recs = op[1]
                src = np.frombuffer(b"".join(recs), np.uint8)
                lens = np.array([len(r) for r in recs], np.uint32)
                offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
                assert z.append_var(src, offs, lens, codec=op[2]) == len(model)
                model += recs
            elif op[0] == "delete":
                idxs = [i for i in op[1] if i < len(model)]
                z.delete(idxs)
                swap_last_delete(model, idxs)
            elif op[0] == "compact":
                z.compact()
                assert z.stats()["reclaimable"] == 0
            else:
                z.close()
                z = zrecord.Zrecord(root + "/s")
            check(z, model)
        z.close()
    finally:
        shutil.rmtree(root)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), max_size=3),
    dtype=st.sampled_from(["u1", "<i2", ">f4", "<f8", "<c8", "?"]),
    n=st.integers(1, 30),
    pick=st.lists(st.integers(-30, 29), max_size=10),
)
def test_dataset_indexes_like_numpy(shape, dtype, n, pick):
    rng = np.random.default_rng(n)
    arr = (rng.random((n, *shape)) * 100).astype(dtype)
    root = tempfile.mkdtemp()
    try:
        with zrecord.Dataset.write(root + "/d", arr, chunk_bytes=64) as ds:
            np.testing.assert_array_equal(ds[:], arr)
            good = [i for i in pick if 0 <= i < n]
            np.testing.assert_array_equal(ds[good], arr[good])
            for i in pick:
                if -n <= i < n:
                    np.testing.assert_array_equal(ds[i], arr[i])
            mask = rng.random(n) < 0.5
            np.testing.assert_array_equal(ds[mask], arr[mask])
    finally:
        shutil.rmtree(root)
