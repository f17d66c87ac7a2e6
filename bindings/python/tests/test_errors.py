"""zrecord.errors against the core's error table, and the exceptions' built-in bases.

``zrecord._zrecord.ERROR_KINDS`` is the Rust core's table (``core/src/error.rs``) as the
compiled extension carries it, so these tests compare the installed package with the core
it was built from; ``core/tests/error_table.rs`` compares the source files.
"""

import builtins
import errno
import pickle

import pytest

import zrecord
from zrecord import ZrecordError, _zrecord, errors


def all_kinds():
    return _zrecord.ERROR_KINDS + _zrecord.BOUNDARY_ERROR_KINDS


def test_core_codes_run_from_minus_one():
    codes = [k[0] for k in _zrecord.ERROR_KINDS]
    assert codes == list(range(-1, -len(codes) - 1, -1))
    every = [k[0] for k in all_kinds()]
    assert len(set(every)) == len(every)


@pytest.mark.parametrize("code,name,python,message", all_kinds())
def test_each_kind_has_its_exception(code, name, python, message):
    assert errors._MESSAGES[code] == message
    assert str(ZrecordError(code)) == message
    if hasattr(errors, python):
        cls = getattr(errors, python)
        assert issubclass(cls, ZrecordError) and cls.CODE == code
        assert getattr(zrecord, python) is cls
        assert python in errors.__all__ and python in zrecord.__all__
        e = errors.error_for(code)
        assert type(e) is cls and e.code == code and str(e) == message
        assert type(errors.error_for(code, "why")) is cls
        assert str(cls("why")) == "why" and cls("why").code == code
    else:
        # A kind Python raises as its own exception (code -10: ValueError).
        assert isinstance(getattr(builtins, python), type) and issubclass(getattr(builtins, python), Exception)


def test_no_exception_without_a_kind():
    by_class = {python: code for code, _, python, _ in all_kinds()}
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type) and "CODE" in vars(obj):
            assert by_class.get(name) == obj.CODE, f"{name} (code {obj.CODE}) is not in the core's table"
    for code in errors._MESSAGES:
        assert code in {k[0] for k in all_kinds()}


def test_invalid_argument_is_value_error():
    # Code -10 from the core comes out as ValueError, not as a ZrecordError.
    with pytest.raises(ValueError) as e:
        zrecord.Sampler(0, 4, zrecord.Sampler.Mode.SEQUENTIAL)
    assert not isinstance(e.value, ZrecordError)


def test_store_io_error_is_an_os_error():
    e = zrecord.StoreIOError("file I/O failed: open x: denied")
    assert isinstance(e, OSError) and isinstance(e, RuntimeError) and isinstance(e, ZrecordError)
    assert e.code == -2
    assert str(e) == "file I/O failed: open x: denied"
    assert e.errno is None
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is zrecord.StoreIOError and back.code == -2 and str(back) == str(e)
    assert isinstance(errors.error_for(-2, "x"), OSError)
    with pytest.raises(OSError):
        raise errors.error_for(-2)


def test_store_io_error_from_the_store_is_caught_as_os_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError) as e:
        zrecord.Zrecord(blocker / "sub")
    assert type(e.value) is zrecord.StoreIOError and e.value.code == -2
    assert "file I/O failed" in str(e.value)


def test_store_io_error_carries_errno(tmp_path):
    # Opening (without creating) a store whose directory does not exist: the OS says ENOENT.
    with pytest.raises(zrecord.StoreIOError) as e:
        zrecord.Zrecord(tmp_path / "missing", create=False)
    assert e.value.errno == errno.ENOENT
    assert isinstance(e.value, OSError)
    assert not str(e.value).startswith("[Errno")
