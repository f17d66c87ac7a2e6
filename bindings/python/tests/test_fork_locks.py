"""Locks across os.fork(): a child never keeps a closed handle's lock, and a child that uses
an inherited handle takes its own (docs/format.md, "Locks")."""

import os

import numpy as np
import pytest

import zrecord

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _filled(path, n=10):
    z = zrecord.Zrecord(str(path))
    z.append(np.arange(n * 8, dtype=np.uint8).reshape(n, 8), n, 8)
    return z


def _rows(z, idxs):
    out = np.empty((len(idxs), 8), np.uint8)
    z.gather(np.asarray(idxs, dtype=np.uint64), out, 8)
    return out


def _fork(child):
    """Runs child() in a forked child; its return value is the exit status."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = child()
        finally:
            os._exit(code)
    return pid


def _status(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_sleeping_child_does_not_keep_a_closed_handles_lock(tmp_path):
    # As found: open, append, fork a child that only sleeps, close in the parent, open a
    # new handle and delete: LockedError until the child exited.
    z = _filled(tmp_path)
    r, w = os.pipe()
    pid = _fork(lambda: (os.read(r, 1), 0)[1])
    try:
        z.close()
        z2 = zrecord.Zrecord(str(tmp_path))
        z2.delete([0])
        z2.compact()
        assert len(z2) == 9
        z2.close()
    finally:
        os.write(w, b"x")
        assert _status(pid) == 0


def test_a_child_appending_through_an_inherited_handle_cannot_corrupt_the_store(tmp_path):
    z = _filled(tmp_path, 4)  # z is the appender now
    r, w = os.pipe()
    r2, w2 = os.pipe()

    def child():
        try:
            z.append(np.full((1, 8), 200, dtype=np.uint8), 1, 8)
        except zrecord.LockedError:
            locked = True
        else:
            locked = False
        os.write(w2, b"1" if locked else b"0")
        os.read(r, 1)  # the parent appended more and closed its handle
        at = z.append(np.full((1, 8), 201, dtype=np.uint8), 1, 8)
        return 0 if at == 6 else 10 + at

    pid = _fork(child)
    try:
        assert os.read(r2, 1) == b"1", "the child appended while the parent held the appender lock"
        z.append(np.full((2, 8), 100, dtype=np.uint8), 2, 8)
        z.close()
    finally:
        os.write(w, b"x")
    assert _status(pid) == 0, "the child's append did not land after the parent's records"
    z = zrecord.Zrecord(str(tmp_path))
    assert len(z) == 7
    got = _rows(z, range(7))
    assert (got[:4] == np.arange(32, dtype=np.uint8).reshape(4, 8)).all()
    assert (got[4:6] == 100).all() and (got[6] == 201).all()


def test_a_child_reading_keeps_its_store_safe_from_the_parents_delete(tmp_path):
    z = _filled(tmp_path)
    r, w = os.pipe()
    r2, w2 = os.pipe()

    def child():
        ok = bool((_rows(z, [3]) == np.arange(24, 32, dtype=np.uint8)).all())
        os.write(w2, b"1" if ok else b"0")
        os.read(r, 1)
        return 0

    pid = _fork(child)
    try:
        assert os.read(r2, 1) == b"1"
        z.close()
        z2 = zrecord.Zrecord(str(tmp_path))
        with pytest.raises(zrecord.LockedError):
            z2.delete([0])
    finally:
        os.write(w, b"x")
    assert _status(pid) == 0
    z2.delete([0])
    z2.close()
