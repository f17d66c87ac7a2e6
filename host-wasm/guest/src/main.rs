//! `zr.wasm`: zrecord-core and zrecord-app as a WebAssembly component.
//!
//! One binary, two faces. Run as a command (`wasi:cli/run`, from `main`) it is the `zr`
//! command line of `zrecord_app::cli`, the same code as the native `zr` (see [`cli`] for
//! the guest's side of it); instantiated by an embedder it exports the WIT interfaces in
//! `wit/zrecord.wit` (see [`api`]). Both call the core and the app crate; the only code of its own here is
//! the `std::fs` backend ([`fs`]) and the translation between core types and WIT types.

mod api;
mod cli;
mod dataset;
mod fs;
mod stream;

wit_bindgen::generate!({
    path: "../../wit",
    world: "zr",
});

use api::Component;
export!(Component);

fn main() {
    let args: Result<Vec<String>, _> = std::env::args_os().skip(1).map(|a| a.into_string()).collect();
    let code = match args {
        Ok(args) => cli::run(&args),
        Err(bad) => {
            eprintln!("zr: error: argument {} is not valid UTF-8", std::path::Path::new(&bad).display());
            zrecord_app::cli::EXIT_ERROR
        }
    };
    std::process::exit(code);
}
