"""What a numpy user tries first, checked against numpy's own answer on the same array.

A Dataset of shape (n, *shape) indexes like an ndarray of that shape, or raises
IndexError where it cannot do so cheaply: never a third thing.
"""

import re
from pathlib import Path

import numpy as np
import pytest

import zrecord
from zrecord import DataLoader, Dataset

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    data = np.arange(12 * 4 * 3, dtype=np.int32).reshape(12, 4, 3)
    ds = Dataset.write(tmp_path_factory.mktemp("np") / "d", data)
    yield ds, data
    ds.close()


MASK = np.arange(12) % 3 == 1

# Each of these must give numpy's result exactly (values, dtype and shape).
SAME_AS_NUMPY = [
    0, -1, -12, np.int64(5), np.uint8(3), np.array(3), np.array(-2),
    [-1], [0, -1, -12], [[-1, 0], [2, 3]], np.array([[1], [2]]), np.array([], int), [],
    slice(2, None, 3), slice(None, None, -1), slice(20, 30), MASK,
    (0, 1), (0, 1, 2), (-1, -1, -1), (0, slice(1, 3)), (slice(0, 5), 1),
    ([1, 2], 0), ([1, 2], [0, 1]), (0, [1, 2]), (np.array([[0], [1]]), [0, 2]),
    (0, slice(None), [0, 2]), ([0, 1], slice(None), [0, 2]), (slice(None), [0, 2], 1),
    (MASK, 0), (slice(2, 4), Ellipsis), (3, Ellipsis, 1), (0, None), (), (np.array(2), 1),
]

# numpy answers these; a Dataset may raise IndexError instead (reading everything to
# emulate them is not cheap), but must never return anything else.
NUMPY_OR_INDEXERROR = [Ellipsis, (Ellipsis, 0), (None, 0), None, True, np.True_]

# numpy raises IndexError for these, and so must a Dataset.
INDEX_ERRORS = [12, -13, [0, 12], [-13], (0, 4), (0, 0, 0, 0), [1.0], 1.5, "a", np.ones(5, bool), (0, [4])]


def ids(cases):
    return [repr(c)[:40] for c in cases]


@pytest.mark.parametrize("idx", SAME_AS_NUMPY, ids=ids(SAME_AS_NUMPY))
def test_same_as_numpy(pair, idx):
    ds, data = pair
    want = data[idx]
    got = ds[idx]
    assert type(got) is type(want)  # numpy gives a scalar for a full index, and so do we
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("idx", NUMPY_OR_INDEXERROR, ids=ids(NUMPY_OR_INDEXERROR))
def test_numpy_or_index_error(pair, idx):
    ds, data = pair
    want = data[idx]
    try:
        got = ds[idx]
    except IndexError:
        return
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("idx", INDEX_ERRORS, ids=ids(INDEX_ERRORS))
def test_index_errors(pair, idx):
    ds, data = pair
    with pytest.raises(IndexError):
        data[idx]
    with pytest.raises(IndexError):
        ds[idx]


def test_out_of_range_names_the_index_given(tmp_path):
    with Dataset.write(tmp_path / "d", np.arange(5000, dtype=np.int16)) as ds:
        for idx, named in ((-5001, "-5001"), (5000, "5000"), ([3, -5001], "-5001"), (np.array([-7000]), "-7000")):
            with pytest.raises(zrecord.IndexOutOfRangeError) as e:
                ds[idx]
            assert re.search(rf"index {named}\b", str(e.value)), str(e.value)
            assert e.value.code == -3
        assert ds[-5000] == 0 and ds.__getitems__([-1, 0]).tolist() == [4999, 0]


def test_delete_checks_a_mask_as_indexing_does(tmp_path):
    data = np.arange(10, dtype=np.int64)
    with Dataset.write(tmp_path / "d", data) as ds:
        for bad in (np.ones(9, bool), np.ones(11, bool), np.ones((2, 5), bool)):
            with pytest.raises(IndexError):
                ds[bad]
            with pytest.raises(IndexError):
                ds.delete(bad)
        assert len(ds) == 10
        mask = data % 4 == 0  # 0, 4, 8
        ds.delete(mask)
        assert len(ds) == 7 and sorted(ds[:].tolist()) == [1, 2, 3, 5, 6, 7, 9]


def test_zero_byte_samples_refused_before_anything_is_written(tmp_path):
    for arr in (np.zeros((5, 0), np.float32), np.zeros((0, 3, 0), np.uint8)):
        with pytest.raises(ValueError, match="0 bytes"):
            Dataset.write(tmp_path / "d", arr)
        assert not (tmp_path / "d").exists()
    (tmp_path / "e").mkdir()
    with pytest.raises(ValueError):
        Dataset.write(tmp_path / "e", np.zeros((5, 0)))
    assert list((tmp_path / "e").iterdir()) == []


# -- opening never creates by surprise --------------------------------------------------------


def test_zrecord_must_exist_and_read_only_opens(tmp_path):
    with pytest.raises(zrecord.StoreIOError):
        zrecord.Zrecord(tmp_path / "typo", create=False)
    assert not (tmp_path / "typo").exists()
    with pytest.raises(zrecord.StoreIOError):
        zrecord.Zrecord.open_read_only(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(zrecord.FormatError):
        zrecord.Zrecord(tmp_path / "empty", read_only=True)
    assert list((tmp_path / "empty").iterdir()) == []
    with pytest.raises(ValueError):
        zrecord.Zrecord(tmp_path / "x", read_only=True, create=True)
    # The default stays loaderx's: open or create.
    with zrecord.Zrecord(tmp_path / "s") as z:
        assert not z.read_only
        z.append(np.arange(8, dtype=np.uint8), 2, 4)
    with zrecord.Zrecord.open_read_only(tmp_path / "s") as z:
        assert z.read_only and len(z) == 2
        out = np.empty(8, np.uint8)
        z.gather([0, 1], out, 4)
        assert out.tolist() == list(range(8))
        for change in (lambda: z.append(out, 2, 4), lambda: z.delete([0]), z.compact):
            with pytest.raises(ValueError, match="read-only"):
                change()
    with zrecord.Zrecord(tmp_path / "s", create=False) as z:
        assert len(z) == 2 and not z.read_only


def test_dataset_open_creates_nothing(tmp_path):
    Dataset.write(tmp_path / "d", np.zeros((3, 2))).close()
    (tmp_path / "schema_only").mkdir()
    (tmp_path / "schema_only" / "schema.json").write_bytes((tmp_path / "d" / "schema.json").read_bytes())
    with pytest.raises(zrecord.FormatError):
        Dataset(tmp_path / "schema_only")
    assert [p.name for p in (tmp_path / "schema_only").iterdir()] == ["schema.json"]
    with pytest.raises(FileNotFoundError):
        Dataset(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


# -- DataLoader arguments ----------------------------------------------------------------


@pytest.fixture
def sets(tmp_path):
    d = Dataset.write(tmp_path / "d", np.arange(40, dtype=np.float32).reshape(20, 2))
    l = Dataset.write(tmp_path / "l", np.arange(20))
    yield d, l
    d.close()
    l.close()


@pytest.mark.parametrize("seed", [-1, 1 << 64, -(1 << 70)])
def test_seed_out_of_range_is_a_value_error(sets, seed):
    with pytest.raises(ValueError, match="seed"):
        DataLoader(*sets, seed=seed)


@pytest.mark.parametrize("seed", [1.5, "1", None, True])
def test_seed_not_an_integer_is_a_type_error(sets, seed):
    with pytest.raises(TypeError, match="seed"):
        DataLoader(*sets, seed=seed)


def test_seed_edges_and_numpy_integers_work(sets):
    for seed in (0, (1 << 64) - 1, np.uint64((1 << 64) - 1), np.int32(7)):
        with DataLoader(*sets, batch_size=4, num_workers=1, seed=seed) as loader:
            assert next(loader)["data"].shape == (4, 2)


@pytest.mark.parametrize(
    "result, named",
    [(None, "None"), (42, "a int"), ((1, 2, 3), "a tuple of 3 items"), ({"data": 1}, "a dict"), (np.zeros(2), "ndarray")],
)
def test_transform_must_return_a_pair(sets, result, named):
    with DataLoader(*sets, batch_size=4, num_workers=1, transform=lambda batch: result) as loader:
        with pytest.raises(TypeError, match=r"\(data, label\) pair") as e:
            next(loader)
        assert named in str(e.value)


def test_transform_pairs_as_tuple_or_list(sets):
    for wrap in (tuple, list):
        with DataLoader(*sets, batch_size=4, num_workers=1, transform=lambda b: wrap((b[0] * 2, b[1]))) as loader:
            batch = next(loader)
            np.testing.assert_array_equal(batch["data"][:, 0], batch["label"] * 4)


# -- packaging ---------------------------------------------------------------------------


def test_requires_python_matches_the_readme():
    pyproject = (REPO / "bindings" / "python" / "pyproject.toml").read_text()
    readme = (REPO / "README.md").read_text()
    required = re.search(r'requires-python\s*=\s*">=(\d+\.\d+)"', pyproject).group(1)
    said = re.search(r"Python (\d+\.\d+)\+", readme).group(1)
    assert required == said


def test_sampler_seed_is_checked_as_the_loader_checks_it():
    with pytest.raises(ValueError, match="seed"):
        zrecord.Sampler(10, 2, zrecord.Sampler.Mode.IID, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        zrecord.Sampler(10, 2, zrecord.Sampler.Mode.IID, seed=0.5)
    a = zrecord.Sampler(10, 4, 1, seed=(1 << 64) - 1)
    b = zrecord.Sampler(10, 4, 1, (1 << 64) - 1)
    np.testing.assert_array_equal(a.next(), b.next())
