//! The host survives every limit (the escapes and limits themselves are
//! in `sandbox.rs`): after a guest is stopped by the epoch timeout or refused memory past
//! its cap, the same `Runtime` instantiates a fresh guest that does real work correctly.

use std::time::Duration;

use zr_wasm::exports::zrecord::store::types::Codec;
use zr_wasm::{Limit, Preopen, Runtime, Sandbox};

mod common;
use common::{component, write_npy};

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
        let err = rt
            .run_command(&args(&["convert", "/in/big.npy", "/out/t", "--codec", "flate", "--chunk-mib", "1"]), &slow)
            .unwrap_err();
        assert!(matches!(err.downcast_ref::<Limit>(), Some(Limit::Timeout(_))), "round {round}: {err:?}");

        let tight = Sandbox { preopens: pre.clone(), max_memory: 8 << 20, ..Sandbox::default() };
        let err = rt.run_command(&args(&["convert", "/in/big.npy", "/out/m", "--codec", "flate"]), &tight).unwrap_err();
        assert!(matches!(err.downcast_ref::<Limit>(), Some(Limit::Memory { .. })), "round {round}: {err:?}");

        // Same runtime, fresh guest: real work, correct result.
        let dir = format!("/out/ok{round}");
        let (mut st, zr) = rt.instantiate(&normal).unwrap();
        let n =
            zr.zrecord_store_tools().call_convert_npy(&mut st, "/in/small.npy", &dir, Codec::Flate).unwrap().unwrap();
        assert_eq!(n, 32, "round {round}");
        let api = zr.zrecord_store_store().store();
        let h = api.call_open(&mut st, &dir, false, true).unwrap().unwrap();
        let g = api.call_gather(&mut st, h, &[5]).unwrap().unwrap();
        assert_eq!(g.data, (0..256).map(|c| 5u8 ^ (c as u8 & 0x0f)).collect::<Vec<_>>(), "round {round}");
    }
}
