//! Embeds `zr.wasm` into `zr-wasm` when it has been built.
//!
//! The guest is a wasm32-wasip2 build that a plain `cargo build` of the workspace does not
//! (and should not) run, so this script never builds it. It looks for the component at
//! `$ZR_WASM_COMPONENT`, else at `<workspace>/target/wasm/zr.wasm` (where
//! `make wasm-build` puts it). If found, the binary carries it; if not, `zr-wasm` looks for
//! `zr.wasm` beside itself or at `--component PATH` at run time.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(zr_embedded)");
    println!("cargo::rerun-if-env-changed=ZR_WASM_COMPONENT");
    let path = match std::env::var_os("ZR_WASM_COMPONENT") {
        Some(p) => PathBuf::from(p),
        None => {
            let manifest =
                PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
            manifest.join("../../target/wasm/zr.wasm")
        }
    };
    // Watching a missing file makes cargo rerun this script on every build, which is what we
    // want: the binary picks the component up as soon as it appears.
    println!("cargo::rerun-if-changed={}", path.display());
    if path.is_file() {
        let path = path.canonicalize().expect("an existing file has a canonical path");
        println!("cargo::rustc-cfg=zr_embedded");
        println!("cargo::rustc-env=ZR_WASM_EMBEDDED={}", path.display());
    } else {
        println!("cargo::warning=zr.wasm not found at {}; zr-wasm will look for it at run time (run `make wasm-build` to embed it)", path.display());
    }
}
