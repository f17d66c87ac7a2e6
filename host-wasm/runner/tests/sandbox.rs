//! The wasmtime host against the real `zr.wasm`: typed calls through the WIT bindings,
//! the sandbox (what the guest cannot reach), the limits (what stops it), and the code
//! cache. The component comes from `$ZR_WASM_COMPONENT` or the copy embedded at build
//! time; `make wasm-build` provides both.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zr_wasm::exports::zrecord::store::store::Mode;
use zr_wasm::exports::zrecord::store::types::{Codec, ErrorCode};
use zr_wasm::{Limit, Preopen, Runtime, Sandbox, State, Zr};

mod common;
use common::{component, write_npy};

fn runtime() -> Runtime {
    // A cache of their own keeps the tests fast without touching the user's; entries are
    // only ever replaced by rename, so parallel tests and runs can share it.
    let cache = std::env::temp_dir().join("zr-wasm-test-cache");
    Runtime::new(&component(), Some(&cache)).expect("component loads")
}

fn ro(host: &Path, guest: &str) -> Preopen {
    Preopen { host: host.to_path_buf(), guest: guest.into(), writable: false }
}

fn rw(host: &Path, guest: &str) -> Preopen {
    Preopen { host: host.to_path_buf(), guest: guest.into(), writable: true }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

/// `root/data/a.npy` (64 rows of 512 bytes), `root/data/store` converted from it with the
/// native-equivalent tools, and `root/secret` outside what the tests preopen.
fn fixture(rt: &Runtime) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("data/store")).unwrap();
    std::fs::create_dir_all(root.join("secret/store")).unwrap();
    write_npy(&root.join("data/a.npy"), 64, 512);
    let sb = Sandbox {
        preopens: vec![rw(&root.join("data"), "/data"), rw(&root.join("secret"), "/secret")],
        ..Sandbox::default()
    };
    let (mut store, zr) = rt.instantiate(&sb).unwrap();
    for dir in ["/data/store", "/secret/store"] {
        let n =
            zr.zrecord_store_tools().call_convert_npy(&mut store, "/data/a.npy", dir, Codec::Flate).unwrap().unwrap();
        assert_eq!(n, 64);
    }
    Fixture { _tmp: tmp, root }
}

/// An instance with the fixture's `data` directory writable at `/data`, and nothing else.
fn data_instance(rt: &Runtime, fx: &Fixture) -> (wasmtime::Store<State>, Zr) {
    let sb = Sandbox { preopens: vec![rw(&fx.root.join("data"), "/data")], ..Sandbox::default() };
    rt.instantiate(&sb).unwrap()
}

fn inspect(rt: &Runtime, sb: &Sandbox, path: &str) -> Result<String, (ErrorCode, String)> {
    let (mut store, zr) = rt.instantiate(sb).unwrap();
    zr.zrecord_store_tools().call_inspect(&mut store, path).unwrap().map_err(|e| (e.code, e.message))
}

#[test]
fn typed_store_round_trip() {
    let rt = runtime();
    let fx = fixture(&rt);
    let (mut st, zr) = data_instance(&rt, &fx);
    let api = zr.zrecord_store_store().store();
    let h = api.call_open(&mut st, "/data/store", false, false).unwrap().unwrap();
    assert_eq!(api.call_len(&mut st, h).unwrap(), 64);

    let g = api.call_gather(&mut st, h, &[3, 0, 63]).unwrap().unwrap();
    assert_eq!(g.lengths, vec![512, 512, 512]);
    let row = |r: usize| -> Vec<u8> { (0..512).map(|c| (r as u8) ^ (c as u8 & 0x0f)).collect() };
    assert_eq!(&g.data[..512], &row(3)[..]);
    assert_eq!(&g.data[512..1024], &row(0)[..]);
    assert_eq!(&g.data[1024..], &row(63)[..]);

    let first = api.call_append(&mut st, h, b"hello, world", &[5, 7], Codec::Raw).unwrap().unwrap();
    assert_eq!(first, 64);
    let g = api.call_gather(&mut st, h, &[65, 64]).unwrap().unwrap();
    assert_eq!(g.data, b", worldhello");
    assert_eq!(g.lengths, vec![7, 5]);

    let err = api.call_gather(&mut st, h, &[66]).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::IndexOutOfRange);
    let err = api.call_append(&mut st, h, b"abc", &[4], Codec::Raw).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);

    api.call_delete(&mut st, h, &[0, 1]).unwrap().unwrap();
    api.call_compact(&mut st, h).unwrap().unwrap();
    api.call_sync(&mut st, h).unwrap().unwrap();
    let s = api.call_stats(&mut st, h).unwrap().unwrap();
    assert_eq!(s.records, 64);
    assert_eq!(s.reclaimable, 0);
    h.resource_drop(&mut st).unwrap();

    // A read-only handle refuses to write.
    let h = api.call_open(&mut st, "/data/store", false, true).unwrap().unwrap();
    let err = api.call_append(&mut st, h, b"x", &[1], Codec::Raw).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    h.resource_drop(&mut st).unwrap();
}

/// Two handles of one store in one instance (JavaScript's `Store.open` twice): a delete or
/// compact through one while the other is open would move records under the other, which
/// would then return another record for an index, so both are refused until it closes,
/// whatever spelling of the path it was opened with.
#[test]
fn delete_and_compact_need_the_only_handle_in_an_instance() {
    let rt = runtime();
    let fx = fixture(&rt);
    let (mut st, zr) = data_instance(&rt, &fx);
    let api = zr.zrecord_store_store().store();
    let a = api.call_open(&mut st, "/data/store", false, false).unwrap().unwrap();
    let b = api.call_open(&mut st, "/data/./store/", false, true).unwrap().unwrap();
    let before = api.call_gather(&mut st, b, &[7]).unwrap().unwrap();
    let err = api.call_delete(&mut st, a, &[0, 2, 4]).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Locked, "{}", err.message);
    assert!(err.message.contains("need the only open handle"), "{}", err.message);
    let err = api.call_compact(&mut st, a).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Locked, "{}", err.message);
    // The other handle still reads what it read.
    assert_eq!(api.call_gather(&mut st, b, &[7]).unwrap().unwrap().data, before.data);
    assert_eq!(api.call_len(&mut st, b).unwrap(), 64);
    // One appender at a time.
    let c = api.call_open(&mut st, "/data/store", false, false).unwrap().unwrap();
    api.call_append(&mut st, a, b"x", &[1], Codec::Raw).unwrap().unwrap();
    let err = api.call_append(&mut st, c, b"y", &[1], Codec::Raw).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Locked, "{}", err.message);
    c.resource_drop(&mut st).unwrap();
    b.resource_drop(&mut st).unwrap();
    // Alone again: allowed.
    api.call_delete(&mut st, a, &[0]).unwrap().unwrap();
    api.call_compact(&mut st, a).unwrap().unwrap();
    assert_eq!(api.call_len(&mut st, a).unwrap(), 64);
    a.resource_drop(&mut st).unwrap();
}

#[test]
fn sampler_matches_the_core_stream() {
    let rt = runtime();
    let (mut st, zr) = rt.instantiate(&Sandbox::default()).unwrap();
    let api = zr.zrecord_store_store().sampler();
    let h = api.call_create(&mut st, 1000, 7, Mode::Iid, 42).unwrap().unwrap();
    assert_eq!(api.call_batch_size(&mut st, h).unwrap(), 7);
    let mut core = zrecord_core::Sampler::new(1000, 7, zrecord_core::Mode::Iid, 42).unwrap();
    for _ in 0..5 {
        let mut want = vec![0u64; 7];
        core.fill(&mut want);
        assert_eq!(api.call_next_batch(&mut st, h).unwrap(), want);
    }
    let err = api.call_create(&mut st, 0, 7, Mode::Sequential, 0).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
}

#[test]
fn stream_matches_the_core_stream() {
    use zr_wasm::exports::zrecord::store::stream::DatasetId;
    use zrecord_core::stream::{DatasetId as CoreId, Stream, StreamState};

    let rt = runtime();
    let (mut st, zr) = rt.instantiate(&Sandbox::default()).unwrap();
    let api = zr.zrecord_store_stream().stream();
    // A generation past 2^53, as every store zrecord creates has.
    let (length, generation) = (1000, (1 << 63) + 12345);
    let id = DatasetId { length, generation };
    let h = api.call_create(&mut st, id, Mode::Shuffle, 42, 24).unwrap().unwrap();
    let core = Stream::new(CoreId { length, generation }, zrecord_core::Mode::Shuffle, 42, 24).unwrap();
    assert_eq!(api.call_steps_per_epoch(&mut st, h).unwrap(), core.steps_per_epoch());
    for step in [0, 1, 40, 41, 42, 1000] {
        for (rank, world) in [(0, 1), (1, 4), (2, 3)] {
            let mut want = vec![0u64; (24 / world) as usize];
            core.batch_at(step, rank, world, &mut want, None).unwrap();
            assert_eq!(api.call_batch(&mut st, h, step, rank, world).unwrap().unwrap(), want, "{step} {rank}/{world}");
        }
    }
    let state = api.call_state(&mut st, h, 41).unwrap();
    assert_eq!(state, core.state(41).encode());
    let (resumed, step) = api.call_resumed(&mut st, h, &state, &[]).unwrap().unwrap();
    assert_eq!(step, 41);
    assert_eq!(api.call_batch(&mut st, resumed, step, 0, 2).unwrap().unwrap(), {
        let mut want = vec![0u64; 12];
        core.batch_at(41, 0, 2, &mut want, None).unwrap();
        want
    });
    // Another seed: the core's refusal, as invalid-argument.
    let other = Stream::new(CoreId { length, generation }, zrecord_core::Mode::Shuffle, 7, 24).unwrap();
    let err = api.call_resumed(&mut st, h, &other.state(3).encode(), &[]).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    let why = core.resume(&StreamState::decode(&other.state(3).encode()).unwrap()).unwrap_err();
    assert_eq!(err.message, format!("cannot resume: {why}"));
    let err = api.call_batch(&mut st, h, 0, 0, 5).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    resumed.resource_drop(&mut st).unwrap();
    h.resource_drop(&mut st).unwrap();
}

#[test]
fn guest_cannot_leave_its_preopens() {
    let rt = runtime();
    let fx = fixture(&rt);
    let data = fx.root.join("data");
    let sb = Sandbox { preopens: vec![ro(&data, "/data")], ..Sandbox::default() };
    assert!(inspect(&rt, &sb, "/data/store").is_ok());

    // `..` out of a preopen, an absolute host path, and a path under no preopen. Outside
    // the preopens nothing exists as far as the guest can tell: the open fails (io) or
    // finds no meta.zr (bad-format), and the secret store is never read.
    let refused = |path: &str| {
        let (code, msg) = inspect(&rt, &sb, path).expect_err(path);
        assert!(
            code == ErrorCode::Io || (code == ErrorCode::BadFormat && msg.contains("missing")),
            "{path}: {code:?} {msg}"
        );
    };
    for path in [
        "/data/../secret/store",
        "/data/../../secret/store",
        fx.root.join("secret/store").to_str().unwrap(),
        "/secret/store",
        "/",
    ] {
        refused(path);
    }

    // A symlinked file and a symlinked directory inside the preopen, pointing out of it.
    std::fs::create_dir_all(data.join("linked")).unwrap();
    std::os::unix::fs::symlink(fx.root.join("secret/store/meta.zr"), data.join("linked/meta.zr")).unwrap();
    std::os::unix::fs::symlink(fx.root.join("secret/store/0.zr"), data.join("linked/0.zr")).unwrap();
    std::os::unix::fs::symlink(fx.root.join("secret/store"), data.join("dirlink")).unwrap();
    for path in ["/data/linked", "/data/dirlink"] {
        refused(path);
    }
    // A symlink that stays inside the preopen is fine.
    std::os::unix::fs::symlink("store", data.join("inside")).unwrap();
    assert!(inspect(&rt, &sb, "/data/inside").is_ok());

    // Nothing is written through a read-only preopen, nor out of a writable one.
    let out = tempfile::tempdir().unwrap();
    let sb = Sandbox { preopens: vec![ro(&data, "/data"), rw(out.path(), "/out")], ..Sandbox::default() };
    let (mut st, zr) = rt.instantiate(&sb).unwrap();
    let tools = zr.zrecord_store_tools();
    for target in ["/data/new", "/out/../escaped", "/elsewhere"] {
        let err = tools.call_convert_npy(&mut st, "/data/a.npy", target, Codec::Raw).unwrap().unwrap_err();
        assert_eq!(err.code, ErrorCode::Io, "{target}: {}", err.message);
    }
    let err = tools.call_export_npy(&mut st, "/data/store", "/out/../escaped.npy").unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Io, "{}", err.message);
    assert!(!data.join("new").exists());
    assert!(!out.path().parent().unwrap().join("escaped").exists());
    assert!(!out.path().parent().unwrap().join("escaped.npy").exists());
    assert_eq!(tools.call_export_npy(&mut st, "/data/store", "/out/ok.npy").unwrap().unwrap(), 64);
    assert!(out.path().join("ok.npy").is_file());
}

#[test]
fn huge_gather_is_refused_not_fatal() {
    let rt = runtime();
    let fx = fixture(&rt);
    let sb = Sandbox { preopens: vec![ro(&fx.root.join("data"), "/data")], max_memory: 16 << 20, ..Sandbox::default() };
    let (mut st, zr) = rt.instantiate(&sb).unwrap();
    let api = zr.zrecord_store_store().store();
    let h = api.call_open(&mut st, "/data/store", false, true).unwrap().unwrap();
    // 64k copies of a 512-byte record: 32 MiB, twice the cap. The guest's allocation fails,
    // it answers out-of-memory, and the instance stays usable.
    let idx = vec![5u64; 1 << 16];
    let err = rt.call(&mut st, &sb, |st| api.call_gather(st, h, &idx)).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::OutOfMemory, "{}", err.message);
    let g = api.call_gather(&mut st, h, &[5]).unwrap().unwrap();
    assert_eq!(g.lengths, vec![512]);
}

fn big_input(dir: &Path) -> PathBuf {
    // 24 MiB of mildly compressible rows: more than the small cap below, and enough
    // deflate work to outlast a short time limit.
    let p = dir.join("big.npy");
    write_npy(&p, 24 * 1024, 1024);
    p
}

#[test]
fn memory_cap_stops_a_command_with_a_clear_error() {
    let rt = runtime();
    let tmp = tempfile::tempdir().unwrap();
    big_input(tmp.path());
    std::fs::create_dir(tmp.path().join("out")).unwrap();
    let sb = Sandbox {
        preopens: vec![ro(tmp.path(), "/in"), rw(&tmp.path().join("out"), "/out")],
        max_memory: 8 << 20,
        ..Sandbox::default()
    };
    let args: Vec<String> = ["convert", "/in/big.npy", "/out", "--codec", "flate"].map(String::from).to_vec();
    let err = rt.run_command(&args, &sb).expect_err("convert must not fit in 8 MiB");
    let limit = err.downcast_ref::<Limit>().unwrap_or_else(|| panic!("not a limit error: {err:?}"));
    assert!(matches!(limit, Limit::Memory { cap, .. } if *cap == 8 << 20), "{limit}");
    assert!(limit.to_string().contains("--max-memory"), "{limit}");
}

#[test]
fn timeout_stops_a_runaway_command() {
    let rt = runtime();
    let tmp = tempfile::tempdir().unwrap();
    big_input(tmp.path());
    std::fs::create_dir(tmp.path().join("out")).unwrap();
    let sb = Sandbox {
        preopens: vec![ro(tmp.path(), "/in"), rw(&tmp.path().join("out"), "/out")],
        timeout: Some(Duration::from_millis(30)),
        ..Sandbox::default()
    };
    let args: Vec<String> =
        ["convert", "/in/big.npy", "/out", "--codec", "flate", "--chunk-mib", "1"].map(String::from).to_vec();
    let started = Instant::now();
    let err = rt.run_command(&args, &sb).expect_err("convert must not finish in 30 ms");
    assert!(started.elapsed() < Duration::from_secs(5), "stopped late: {:?}", started.elapsed());
    let limit = err.downcast_ref::<Limit>().unwrap_or_else(|| panic!("not a limit error: {err:?}"));
    assert_eq!(*limit, Limit::Timeout(Duration::from_millis(30)));
}

#[test]
fn compiled_code_is_cached() {
    let cache = tempfile::tempdir().unwrap();
    let bytes = component();
    let first = Runtime::new(&bytes, Some(cache.path())).unwrap();
    assert!(!first.cache_hit);
    let second = Runtime::new(&bytes, Some(cache.path())).unwrap();
    assert!(second.cache_hit);
    // A damaged entry is recompiled, not trusted.
    // Replaced by rename, as any writer must: the runtimes above still map the old file.
    drop((first, second));
    for e in std::fs::read_dir(cache.path()).unwrap() {
        let path = e.unwrap().path();
        std::fs::write(path.with_extension("bad"), b"not a compiled component").unwrap();
        std::fs::rename(path.with_extension("bad"), &path).unwrap();
    }
    let third = Runtime::new(&bytes, Some(cache.path())).unwrap();
    assert!(!third.cache_hit);
    let (mut st, zr): (wasmtime::Store<State>, Zr) = third.instantiate(&Sandbox::default()).unwrap();
    assert!(zr.zrecord_store_tools().call_inspect(&mut st, "/nowhere").unwrap().is_err());
}

/// A record that fails its checksum names its store and index, in the error's fields and
/// its message, as the native host's errors do (before, only "record 10 (chunk 0, offset
/// 5120) fails its checksum ...", with no store named).
#[test]
fn a_damaged_record_is_named_with_its_store() {
    let rt = runtime();
    let fx = fixture(&rt);
    let (mut st, zr) = data_instance(&rt, &fx);
    zr.zrecord_store_tools().call_convert_npy(&mut st, "/data/a.npy", "/data/raw", Codec::Raw).unwrap().unwrap();
    // Raw records of 512 bytes, back to back in chunk 0: flip a byte of record 10, in
    // place (the chunk is a sparse file of 4 GiB: never read or write it whole).
    use std::os::unix::fs::FileExt;
    let chunk = std::fs::OpenOptions::new().read(true).write(true).open(fx.root.join("data/raw/0.zr")).unwrap();
    let mut byte = [0u8];
    chunk.read_exact_at(&mut byte, 10 * 512 + 3).unwrap();
    chunk.write_all_at(&[byte[0] ^ 0xff], 10 * 512 + 3).unwrap();
    drop(chunk);
    let api = zr.zrecord_store_store().store();
    let h = api.call_open(&mut st, "/data/raw", false, true).unwrap().unwrap();
    api.call_gather(&mut st, h, &[9]).unwrap().unwrap();
    let err = api.call_gather(&mut st, h, &[9, 10]).unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Checksum, "{}", err.message);
    assert_eq!((err.path.as_deref(), err.record), (Some("/data/raw"), Some(10)));
    assert!(err.message.starts_with("/data/raw: record 10 "), "{}", err.message);
    // Other failures name no record.
    let err = api.call_gather(&mut st, h, &[64]).unwrap().unwrap_err();
    assert_eq!((err.code, err.path, err.record), (ErrorCode::IndexOutOfRange, None, None));
}
