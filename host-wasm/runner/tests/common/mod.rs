//! Helpers shared by the runner's integration tests.

use std::path::{Path, PathBuf};

/// The component under test: `$ZR_WASM_COMPONENT`, or the copy embedded at build time.
pub fn component() -> Vec<u8> {
    if let Some(p) = std::env::var_os("ZR_WASM_COMPONENT") {
        return std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", PathBuf::from(p).display()));
    }
    zr_wasm::embedded()
        .expect("zr.wasm is neither embedded nor named by ZR_WASM_COMPONENT: run `make wasm-build` first")
        .to_vec()
}

/// A `.npy` of `rows` rows of `cols` bytes each (`|u1`), every byte a function of its place.
pub fn write_npy(path: &Path, rows: usize, cols: usize) {
    let mut out = zrecord_app::npy::write_header("|u1", &[rows as u64, cols as u64]);
    out.extend((0..rows * cols).map(|i| ((i / cols) as u8) ^ ((i % cols) as u8 & 0x0f)));
    std::fs::write(path, out).unwrap();
}
