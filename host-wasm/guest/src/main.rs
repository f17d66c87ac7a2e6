//! `zr.wasm`: zrecord-core as a WebAssembly component.
//!
//! One binary, two faces. Run as a command (`wasi:cli/run`, from `main`) it is the `zr`
//! command line (see [`cli`]); instantiated by an embedder it exports the WIT interfaces in
//! `wit/zrecord.wit` (see [`api`]). Both call `zrecord_core::tools` and the engine; the
//! only code of its own here is the `std::fs` backend ([`fs`]) and the translation between
//! core types and WIT types.

mod api;
mod cli;
mod fs;

wit_bindgen::generate!({
    path: "../../wit",
    world: "zr",
});

use api::Component;
export!(Component);

fn main() {
    std::process::exit(cli::run(std::env::args().skip(1).collect()));
}
