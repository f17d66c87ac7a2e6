//! # zrecord-app
//!
//! The command-line application over [`zrecord_core`]: what `zr` and `zr-wasm` do, written
//! once, so that both print the same bytes. The core knows the format, the codecs, the
//! engine and the stream; this crate knows the commands, the files they read and write,
//! and how an output is built without leaving half of it behind.
//!
//! `no_std` + `alloc` like the core, unless the default `std` feature is on; CI builds it for
//! `wasm32-unknown-unknown` without `std`, the command line included.
//!
//! Module map:
//! - [`tools`]: inspect, verify, convert and export, shared by the command line, the
//!   `zrecord` library (and so Python) and the wasm guest's `tools` export.
//! - [`npy`]: the `.npy` container those tools read and write.
//! - [`partial`]: the name an output has while a command builds it (`.NAME.zr-partial-PID`),
//!   and, with `std`, staging it and removing what a dead process left.
//! - `cli` (feature `cli`): the `zr` command line itself (parsing, output, messages, exit
//!   codes), which the native `zr` and the wasm guest run through a small `cli::Host` of
//!   their own. A feature so that the `zrecord` library can use the tools without it.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

#[cfg(feature = "cli")]
pub mod cli;
pub mod npy;
pub mod partial;
pub mod tools;
