//! The host survives every limit (issue 6, item 10; the escapes and limits themselves are
//! in `sandbox.rs`): after a guest is stopped by the epoch timeout or refused memory past
//! its cap, the same `Runtime` instantiates a fresh guest that does real work correctly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use zr_wasm::exports::zrecord::store::types::Codec;
use zr_wasm::{Limit, Preopen, Runtime, Sandbox};

fn component() -> Vec<u8> {
    if let Some(p) = std::env::var_os("ZR_WASM_COMPONENT") {
        return std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", PathBuf::from(p).display()));
    }
    zr_wasm::embedded().expect("run `make wasm-build` first").to_vec()
}

fn write_npy(path: &Path, rows: usize, cols: usize) {
    let dict = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let mut header = dict.into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend((0..rows * cols).map(|i| ((i / cols) as u8) ^ ((i % cols) as u8 & 0x0f)));
    std::fs::write(path, out).unwrap();
}

#[test]
fn the_host_runs_on_after_each_limit() {
    let rt = Runtime::new(&component(), Some(&std::env::temp_dir().join("zr-wasm-test-cache"))).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    write_npy(&tmp.path().join("big.npy"), 24 * 1024, 1024);
    write_npy(&tmp.path().join("small.npy"), 32, 256);
    std::fs::create_dir(tmp.path().join("out")).unwrap();
    let pre = vec![
        Preopen { host: tmp.path().to_path_buf(), guest: "/in".into(), writable: false },
        Preopen { host: tmp.path().join("out"), guest: "/out".into(), writable: true },
    ];
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let normal = Sandbox { preopens: pre.clone(), ..Sandbox::default() };

    for round in 0..3 {
        let slow = Sandbox { preopens: pre.clone(), timeout: Some(Duration::from_millis(20)), ..Sandbox::default() };
        let err = rt.run_command(&args(&["convert", "/in/big.npy", "/out/t", "--codec", "flate", "--chunk-mib", "1"]), &slow).unwrap_err();
        assert!(matches!(err.downcast_ref::<Limit>(), Some(Limit::Timeout(_))), "round {round}: {err:?}");

        let tight = Sandbox { preopens: pre.clone(), max_memory: 8 << 20, ..Sandbox::default() };
        let err = rt.run_command(&args(&["convert", "/in/big.npy", "/out/m", "--codec", "flate"]), &tight).unwrap_err();
        assert!(matches!(err.downcast_ref::<Limit>(), Some(Limit::Memory { .. })), "round {round}: {err:?}");

        // Same runtime, fresh guest: real work, correct result.
        let dir = format!("/out/ok{round}");
        let (mut st, zr) = rt.instantiate(&normal).unwrap();
        let n = zr.zrecord_store_tools().call_convert_npy(&mut st, "/in/small.npy", &dir, Codec::Flate).unwrap().unwrap();
        assert_eq!(n, 32, "round {round}");
        let api = zr.zrecord_store_store().store();
        let h = api.call_open(&mut st, &dir, false, true).unwrap().unwrap();
        let g = api.call_gather(&mut st, h, &[5]).unwrap().unwrap();
        assert_eq!(g.data, (0..256).map(|c| 5u8 ^ (c as u8 & 0x0f)).collect::<Vec<_>>(), "round {round}");
    }
}
