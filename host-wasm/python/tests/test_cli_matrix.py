"""One matrix of command lines, good and bad, through the native `zr` and through
`zr-wasm`: the same stdout, the same stderr and the same exit code, byte for byte, and the
same files left behind. Both run in a copy of the same directory with the same relative
paths, so a message that names a path names what the user typed on both.

The native `zr` is required here (ZR_NATIVE, as `make wasm-test` passes it, or
target/release/zr): this test fails rather than skips without it.
"""

import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
HEADER = 16
ENTRY = 16


@pytest.fixture(scope="module")
def native() -> Path:
    p = Path(os.environ.get("ZR_NATIVE", REPO / "target/release/zr"))
    if not p.is_file():
        pytest.fail(f"the native zr is missing at {p}: run `make build` (the matrix needs both CLIs)")
    return p


@pytest.fixture(scope="module")
def base(tmp_path_factory, native) -> Path:
    """The directory every case starts from."""
    d = tmp_path_factory.mktemp("base")
    arr = np.tile(np.arange(200, dtype=np.uint8), (20, 1)) ^ np.arange(20, dtype=np.uint8)[:, None]
    np.save(d / "a.npy", arr)
    np.save(d / "wide.npy", np.zeros((3, 7), np.float32))
    (d / "fake.npy").write_bytes(b"this is text pretending to be an array")
    whole = (d / "a.npy").read_bytes()
    (d / "trunc.npy").write_bytes(whole[: len(whole) - 150])
    (d / "npydir").mkdir()
    (d / "note.txt").write_text("a file, not a store\n")
    (d / "garbage.zr").mkdir()
    (d / "garbage.zr" / "meta.zr").write_bytes(b"XXXX" + bytes(12))
    (d / "empty.zr").mkdir()
    for name in ("good.zr", "damaged.zr"):
        subprocess.run([native, "convert", "a.npy", name, "--codec", "flate"], cwd=d, check=True, capture_output=True)
    # Damage the table where it is always detectable: an unknown codec tag in entry 2, and
    # entry 5's stored length run past the frontier.
    with open(d / "damaged.zr" / "meta.zr", "r+b") as f:
        f.seek(HEADER + 2 * ENTRY + 14)
        f.write(b"\x07")
        f.seek(HEADER + 5 * ENTRY + 4)
        f.write(struct.pack("<I", 1 << 20))
    return d


# Each case: the command lines run in order in a fresh copy of `base`, and what the last
# one must give: its exit code and a piece of its stdout (exit 0/1) or stderr (exit 2).
CASES = {
    "help": ([["--help"]], 0, "usage:"),
    "help-word": ([["help"]], 0, "usage:"),
    "help-after-command": ([["inspect", "--help"]], 0, "usage:"),
    "version": ([["--version"]], 0, "zr 0.1.0"),
    "no-arguments": ([[]], 2, "zr: error: no command given"),
    "unknown-command": ([["frobnicate", "good.zr"]], 2, 'unknown command "frobnicate"'),
    "unknown-option": ([["stats", "good.zr", "--json"]], 2, "stats has no option --json"),
    "missing-argument": ([["inspect"]], 2, "inspect takes STORE, got 0 argument(s)"),
    "extra-argument": ([["verify", "good.zr", "a.npy"]], 2, "verify takes STORE, got 2"),
    "bad-codec": ([["convert", "a.npy", "new.zr", "--codec", "lz4"]], 2, 'unknown codec "lz4" (raw, flate or zstd)'),
    "bad-index": ([["delete", "good.zr", "x"]], 2, 'delete: "x" is not a record index'),
    "inspect": ([["inspect", "good.zr"]], 0, "store         good.zr"),
    "inspect-json": ([["inspect", "--json", "good.zr"]], 0, '"records": 20'),
    "verify": ([["verify", "good.zr"]], 0, "20 records checked, 0 bad"),
    "verify-json": ([["verify", "good.zr", "--json"]], 0, '"bad_count": 0'),
    "stats": ([["stats", "good.zr"]], 0, '{"records": 20,'),
    "missing-store": ([["inspect", "missing.zr"]], 2, "zr: error: missing.zr: no such store directory"),
    "missing-store-deep": ([["stats", "no/such/place.zr"]], 2, "no/such/place.zr: no such store directory"),
    "file-as-store": ([["inspect", "a.npy"]], 2, "zr: error: a.npy: is a file, not a store directory"),
    "garbage-store": ([["verify", "garbage.zr"]], 2, "zr: error: garbage.zr: not a zrecord store: meta.zr is 16 bytes"),
    "no-store-in-dir": ([["inspect", "empty.zr"]], 2, "zr: error: empty.zr: not a zrecord store: meta.zr is missing"),
    "damaged-record": ([["verify", "damaged.zr"]], 1, "bad record 2: unknown codec tag 7"),
    "damaged-record-json": ([["verify", "--json", "damaged.zr"]], 1, '"bad_count": 2'),
    "convert-new": ([["convert", "a.npy", "new.zr"]], 0, "appended 20 records of |u1[200] (flate) at index 0"),
    "convert-raw-deep": (
        [["convert", "a.npy", "out/deep/new.zr", "--codec=raw", "--chunk-mib", "1"], ["verify", "out/deep/new.zr"]],
        0,
        "20 records checked, 0 bad",
    ),
    "convert-append": ([["convert", "a.npy", "good.zr"]], 0, "at index 20; store holds 40"),
    "convert-into-empty-dir": ([["convert", "a.npy", "empty.zr"]], 0, "store holds 20"),
    "convert-incompatible": ([["convert", "wide.npy", "good.zr"]], 2, "zr: error: good.zr: invalid argument: dataset holds"),
    "convert-fake-npy": ([["convert", "fake.npy", "new.zr"]], 2, "zr: error: fake.npy: not a .npy file (bad magic)"),
    "convert-truncated-npy": ([["convert", "trunc.npy", "out/new.zr"]], 2, "zr: error: trunc.npy: .npy data is truncated"),
    "convert-missing-npy": ([["convert", "missing.npy", "new.zr"]], 2, "zr: error: missing.npy: no such file"),
    "convert-into-file": ([["convert", "a.npy", "note.txt"]], 2, "zr: error: note.txt: is a file, not a store directory"),
    "export": ([["export", "good.zr", "out.npy"], ["convert", "out.npy", "again.zr"]], 0, "appended 20 records"),
    "export-replaces": ([["export", "good.zr", "note.txt"]], 0, "exported 20 records to note.txt"),
    "export-missing-dir": ([["export", "good.zr", "no/such/out.npy"]], 2, "no/such/out.npy: its directory does not exist"),
    "export-to-dir": ([["export", "good.zr", "npydir"]], 2, "zr: error: npydir: is a directory, not a .npy file"),
    "export-garbage-store": ([["export", "garbage.zr", "out.npy"]], 2, "zr: error: garbage.zr: not a zrecord store"),
    "export-missing-store": ([["export", "missing.zr", "out.npy"]], 2, "zr: error: missing.zr: no such store directory"),
    "delete": ([["delete", "good.zr", "3", "7", "3"], ["stats", "good.zr"]], 0, '{"records": 18,'),
    "delete-out-of-range": ([["delete", "good.zr", "20"]], 2, "zr: error: good.zr: index 20 out of range"),
    "delete-missing-store": ([["delete", "missing.zr", "1"]], 2, "missing.zr: no such store directory"),
    "compact": ([["delete", "good.zr", "0", "1", "2"], ["compact", "good.zr"]], 0, "compacted 17 records: chunk bytes"),
    "compact-garbage": ([["compact", "garbage.zr"]], 2, "zr: error: garbage.zr: not a zrecord store"),
    "layout-dense": ([["layout", "good.zr", "dense"], ["inspect", "good.zr"]], 0, "layout        dense"),
    "layout-round-trip": (
        [["layout", "good.zr", "dense"], ["layout", "good.zr", "sparse"], ["verify", "good.zr"]],
        0,
        "20 records checked, 0 bad",
    ),
    "layout-unknown": ([["layout", "good.zr", "thin"]], 2, "zr: error: layout takes dense or sparse, not \"thin\""),
    "layout-garbage": ([["layout", "garbage.zr", "dense"]], 2, "zr: error: garbage.zr: not a zrecord store"),
}


def copy_sparse(src, dst):
    """Copies keeping holes: a store's meta.zr is a 256 MiB file of which a few KiB are
    written, and a plain copy of every case would fill the disk."""
    subprocess.run(["cp", "--sparse=always", "--preserve=mode", src, dst], check=True)


def snapshot(d: Path) -> dict:
    """Every file under `d`: its size and its first 4 MiB. Stores are sparse (meta.zr is
    256 MiB, a chunk file 4 GiB, almost all holes); the stores here use a few KiB. A
    checksum file's creation nonce and the seal over it (bytes 48..64) are blanked: every
    store draws its own, on either host."""
    out = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        if p.is_dir():
            out[rel] = "dir"
        else:
            with open(p, "rb") as f:
                head = f.read(4 << 20)
            if p.name == "checksums.zrc" and len(head) >= 64:
                head = head[:48] + bytes(16) + head[64:]
            out[rel] = (p.stat().st_size, head)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_native_and_wasm_agree(case, base, native, zr_wasm, tmp_path):
    lines, code, want = CASES[case]
    env = dict(os.environ, ZR_WASM_CACHE=str(tmp_path.parent / "zr-wasm-cache"))
    results, trees = {}, {}
    for name, exe in (("native", native), ("wasm", zr_wasm)):
        d = tmp_path / name
        shutil.copytree(base, d, copy_function=copy_sparse)
        before = snapshot(d)
        steps = [subprocess.run([str(exe), *args], cwd=d, capture_output=True, text=True, env=env) for args in lines]
        results[name] = [(p.returncode, p.stdout, p.stderr) for p in steps]
        trees[name] = snapshot(d)
        last = steps[-1]
        assert last.returncode == code, f"{name} {lines[-1]}: exit {last.returncode}\n{last.stdout}\n{last.stderr}"
        assert want in (last.stderr if code == 2 else last.stdout), f"{name} {lines[-1]}: {last.stdout!r} {last.stderr!r}"
        if code == 2:
            # An error is one line, and a command that failed changed nothing.
            assert last.stdout == "" and len(last.stderr.splitlines()) == 1, f"{name}: {last.stderr!r}"
            if len(lines) == 1:
                assert trees[name] == before, f"{name} {lines[-1]} left files behind or changed them"
        assert "Traceback" not in last.stderr and "panicked" not in last.stderr
    native_steps, wasm_steps = results["native"], results["wasm"]
    if lines[-1] and lines[-1][0] in ("--help", "help") or "--help" in lines[-1]:
        # zr-wasm prints the same help, then its own options.
        (nc, nout, nerr), (wc, wout, werr) = native_steps[-1], wasm_steps[-1]
        assert (nc, nerr) == (wc, werr)
        assert wout.startswith(nout) and "--max-memory" in wout[len(nout) :]
    else:
        assert wasm_steps == native_steps
    assert trees["wasm"] == trees["native"]


def test_fields_convert_and_export_are_native_only(base, native, zr_wasm, tmp_path):
    """zr-wasm has no dataset writer: converting a directory of .npy files (a dataset of
    named fields) or exporting such a dataset is refused in one line that says so, before
    anything is created; the native zr converts the same directory, and zr-wasm then reads
    the dataset exactly as zr does."""
    env = dict(os.environ, ZR_WASM_CACHE=str(tmp_path.parent / "zr-wasm-cache"))
    d = tmp_path / "w"
    shutil.copytree(base, d, copy_function=copy_sparse)
    shutil.copy(d / "a.npy", d / "npydir" / "a.npy")
    def go(exe, *a):
        return subprocess.run([str(exe), *a], cwd=d, capture_output=True, text=True, env=env)

    needs = "needs the native zr"
    before = snapshot(d)
    for args in (["convert", "npydir", "new"], ["convert", "npydir", "good.zr"]):
        p = go(zr_wasm, *args)
        assert p.returncode == 2 and p.stdout == "", p.stderr
        assert p.stderr.startswith("zr: error: npydir: converting") and needs in p.stderr, p.stderr
        assert len(p.stderr.splitlines()) == 1
        assert snapshot(d) == before
    p = go(native, "convert", "npydir", "ds")
    assert p.returncode == 0, p.stderr
    for args in (["inspect", "ds"], ["stats", "ds"], ["verify", "ds"]):
        assert go(zr_wasm, *args).stdout == go(native, *args).stdout != ""
    before = snapshot(d)
    for out in ("back", "back.npz"):
        p = go(zr_wasm, "export", "ds", out)
        assert p.returncode == 2 and p.stderr.startswith("zr: error: ds: converting") and needs in p.stderr, p.stderr
        assert snapshot(d) == before


@pytest.mark.parametrize("args", [["verify", "good.zr"], ["inspect", "--json", "good.zr"], ["inspect", "good.zr"]])
def test_closed_stdout_ends_quietly(args, base, native, zr_wasm, tmp_path):
    """`zr verify s | head -1` with the reader gone before the first write: no panic (101),
    no message, the command's own exit code."""
    env = dict(os.environ, ZR_WASM_CACHE=str(tmp_path.parent / "zr-wasm-cache"))
    for exe in (native, zr_wasm):
        p = subprocess.Popen([str(exe), *args], cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        p.stdout.close()
        err = p.stderr.read()
        assert p.wait() == 0, f"{exe.name} {args}: exit {p.returncode}: {err!r}"
        assert err == b"", f"{exe.name} {args}: {err!r}"


def test_wasm_help_version_and_limits(zr_wasm, run, tmp_path):
    """zr-wasm's own surface: help and version answer with exit 0; a memory cap too small
    to even start the guest is the documented exit 3."""
    p = run(zr_wasm, "--help")
    assert p.returncode == 0 and "usage:" in p.stdout and "--max-memory" in p.stdout
    assert run(zr_wasm, "--version").stdout.startswith("zr ")
    p = run(zr_wasm, "--max-memory", "1", "inspect", tmp_path, check=False)
    assert p.returncode == 3, p.stderr
    assert "over the cap of 1 MiB" in p.stderr
    p = run(zr_wasm, "--max-memory", "lots", "inspect", tmp_path, check=False)
    assert p.returncode == 2 and p.stderr.startswith("zr-wasm: error: --max-memory takes a number of MiB")


def _fifo(p: Path):
    p.unlink(missing_ok=True)
    os.mkfifo(p)


def _link_out(d: Path):
    (d / "elsewhere").mkdir()
    # Moved, not copied: the chunk file is 4 GiB of holes and a plain copy writes them all.
    (d / "good.zr" / "0.zr").rename(d / "elsewhere" / "0.zr")
    (d / "good.zr" / "0.zr").symlink_to("../elsewhere/0.zr")


def _loop(d: Path):
    (d / "good.zr" / "0.zr").unlink()
    (d / "good.zr" / "0.zr").symlink_to("0.zr")


def _huge_schema(d: Path):
    with open(d / "good.zr" / "schema.json", "r+b") as f:
        f.truncate(2 << 30)  # sparse: 2 GB that cost nothing


# Hostile paths: what is set up in a copy of `base`, the command, and what both CLIs must
# say (exit 2, one line). A FIFO hung both forever; the rest printed different messages
# (os error 40 against 32, "Operation not permitted (os error 63)" for a link the sandbox
# refused that the native zr followed) or read a 2 GB schema.json whole.
HOSTILE = {
    "fifo-meta": (lambda d: _fifo(d / "good.zr" / "meta.zr"), ["inspect", "good.zr"], "not a regular file"),
    "fifo-chunk": (lambda d: _fifo(d / "good.zr" / "0.zr"), ["verify", "good.zr"], "not a regular file"),
    "fifo-npy": (lambda d: _fifo(d / "in.npy"), ["convert", "in.npy", "new.zr"], "not a regular file"),
    "symlink-loop": (_loop, ["verify", "good.zr"], "too many levels of symbolic links"),
    "symlink-out": (_link_out, ["export", "good.zr", "out.npy"], "a symbolic link leading out of the store"),
    "huge-schema": (_huge_schema, ["inspect", "good.zr"], "over the 1048576-byte limit"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_paths_are_refused_alike(case, base, native, zr_wasm, tmp_path):
    setup, args, want = HOSTILE[case]
    env = dict(os.environ, ZR_WASM_CACHE=str(tmp_path.parent / "zr-wasm-cache"))
    got = {}
    for name, exe in (("native", native), ("wasm", zr_wasm)):
        d = tmp_path / name
        shutil.copytree(base, d, copy_function=copy_sparse)
        setup(d)
        try:
            p = subprocess.run([str(exe), *args], cwd=d, capture_output=True, text=True, env=env, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} {args} hung on {case}")
        got[name] = (p.returncode, p.stdout, p.stderr)
        assert p.returncode == 2 and want in p.stderr and len(p.stderr.splitlines()) == 1, f"{name}: {got[name]}"
        assert not (d / "new.zr").exists() and not (d / "out.npy").exists()
    assert got["wasm"] == got["native"]


def test_follow_symlinks_lets_zr_read_a_link_out_of_the_store(base, native, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(base, d, copy_function=copy_sparse)
    _link_out(d)
    p = subprocess.run([str(native), "verify", "good.zr", "--follow-symlinks"], cwd=d, capture_output=True, text=True)
    assert p.returncode == 0 and "20 records checked, 0 bad" in p.stdout, p.stderr


def test_a_store_another_process_holds_is_locked_for_both(base, native, zr_wasm, tmp_path):
    """A process holding the store (the presence lock a zr or Python handle takes, here
    taken by this test) makes delete and compact fail alike; reads go on. zr-wasm took no
    lock and rewrote the store under the holder."""
    import fcntl

    env = dict(os.environ, ZR_WASM_CACHE=str(tmp_path.parent / "zr-wasm-cache"))
    got = {}
    for name, exe in (("native", native), ("wasm", zr_wasm)):
        d = tmp_path / name
        shutil.copytree(base, d, copy_function=copy_sparse)
        before = snapshot(d)
        with open(d / "good.zr" / "meta.zr", "rb") as held:
            fcntl.lockf(held, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
            for args in (["delete", "good.zr", "1"], ["compact", "good.zr"]):
                p = subprocess.run([str(exe), *args], cwd=d, capture_output=True, text=True, env=env)
                got[name, args[0]] = (p.returncode, p.stdout, p.stderr)
                assert p.returncode == 2 and "store is locked" in p.stderr, f"{name} {args}: {p.stderr}"
            p = subprocess.run([str(exe), "stats", "good.zr"], cwd=d, capture_output=True, text=True, env=env)
            assert p.returncode == 0 and '"records": 20' in p.stdout, p.stderr
        assert snapshot(d) == before, f"{name} changed a store another process held"
    assert [v for k, v in got.items() if k[0] == "wasm"] == [v for k, v in got.items() if k[0] == "native"]


def test_the_time_limit_stops_a_guest_stuck_in_a_host_call(base, native, zr_wasm, tmp_path):
    """Epoch interruption cannot stop a guest blocked in a host call (here a write to a
    pipe nobody reads); --timeout must still end it, with the documented line and exit 3."""
    import fcntl

    d = tmp_path / "d"
    shutil.copytree(base, d, copy_function=copy_sparse)
    arr = np.zeros((300, 10), np.uint8)
    np.save(d / "many.npy", arr)
    subprocess.run([native, "convert", "many.npy", "many.zr", "--codec", "raw"], cwd=d, check=True, capture_output=True)
    with open(d / "many.zr" / "meta.zr", "r+b") as f:
        for i in range(300):
            f.seek(HEADER + i * ENTRY + 14)
            f.write(b"\x07")  # 300 "bad record" lines: more than the pipe holds
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    env = dict(os.environ, ZR_WASM_CACHE=str(tmp_path.parent / "zr-wasm-cache"))
    p = subprocess.Popen([str(zr_wasm), "--timeout", "1", "verify", "many.zr"], cwd=d, stdout=w, stderr=subprocess.PIPE, env=env)
    os.close(w)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("zr-wasm --timeout 1 ran 30 s while blocked in a host call")
    finally:
        os.close(r)
    assert p.returncode == 3, err
    assert err.decode().endswith("zr-wasm: stopped: the call ran past its time limit of 1.000 s (raise it with --timeout)\n")


def test_a_huge_timeout_is_a_usage_error(zr_wasm, run, tmp_path):
    p = run(zr_wasm, "--timeout", "99999999999999999999", "inspect", tmp_path, check=False)
    assert p.returncode == 2 and p.stderr.startswith("zr-wasm: error: --timeout takes at most"), p.stderr
    assert "panicked" not in p.stderr


def test_permission_denied_reads_the_same(base, native, zr_wasm, tmp_path):
    """EACCES is errno 13 on Linux and 2 under WASI: both CLIs must print the table's words
    ("permission denied"), not "(os error N)". Root is never denied: as root, the commands
    run as nobody (setpriv) in a directory nobody may enter."""
    import tempfile

    as_user = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: EACCES cannot be produced")
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    root = Path(tempfile.mkdtemp(prefix="zr-perm-"))
    try:
        root.chmod(0o777)
        env = dict(os.environ, ZR_WASM_CACHE=str(root / "cache"), HOME=str(root))
        got = {}
        for name, exe in (("native", native), ("wasm", zr_wasm)):
            d = root / name
            shutil.copytree(base, d, copy_function=copy_sparse)
            subprocess.run(["chmod", "-R", "a+rwX", d], check=True)
            (d / "good.zr" / "0.zr").chmod(0)
            p = subprocess.run([*as_user, str(exe), "verify", "good.zr"], cwd=d, capture_output=True, text=True, env=env)
            got[name] = (p.returncode, p.stdout, p.stderr)
            assert p.returncode == 2 and "permission denied" in p.stderr and "os error" not in p.stderr, got[name]
        assert got["wasm"] == got["native"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
