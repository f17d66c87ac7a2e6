//! `zr`: the native command line; everything is in the library ([`zrecord_cli::run`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(zrecord_cli::run(std::env::args_os().skip(1).collect()) as u8)
}
