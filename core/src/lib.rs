//! # zrecord-core
//!
//! The platform-free heart of zrecord: the on-disk format, the record codecs, the index
//! sampler and the store engine. It knows bytes, not files: every piece of I/O goes through
//! the [`io::Backend`] / [`io::StorageFile`] traits that a host implements (memmap2 + pread on
//! the native host, `std::fs` inside the wasm guest), and every piece of parallelism goes
//! through [`io::Parallel`] (rayon natively, a serial loop in the guest).
//!
//! The crate is `no_std` + `alloc` unless the default `std` feature is on; CI builds it for
//! `wasm32-unknown-unknown` without `std` to keep it that way.
//!
//! Module map:
//! - [`mod@format`]: meta.zr header and record-table entries, limits, validation; its
//!   [`format::journal`] is the byte layout of the delete journal `delete.zrj`.
//! - [`codec`]: raw and raw-DEFLATE record codecs, inflating straight into the destination.
//! - [`sampler`]: the endless index generator (sequential window, seeded IID, shuffled epochs).
//! - [`stream`]: the global stream of a training job: keyed permutations, rank shards,
//!   weighted mixtures and the resume state.
//! - [`engine`]: the store itself, one submodule per ordering rule of `docs/format.md`:
//!   open (creation, recovery, publication, durability), read (gather, stats), append,
//!   delete, compact.
//! - [`schema`] and [`dtype`]: a store's `schema.json` and the element types it and
//!   `dataset.json` name (NumPy dtype strings).
//! - [`dataset`]: the dataset manifest `dataset.json` (named fixed and ragged fields over
//!   shards of stores) and the layout of its one index space.
//!
//! The command-line application built on it (the `zr` command line, inspect, verify,
//! convert and export, the `.npy` container, partial outputs) is the `zrecord-app` crate in
//! `core/app/`.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

pub mod codec;
pub mod dataset;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod format;
pub mod image;
pub mod io;
pub mod sampler;
pub mod schema;
pub mod stream;

pub use codec::{Codec, CodecPolicy, DEFAULT_MIN_SAVINGS};
pub use engine::{Batch, Options, Sealing, Stats, Store, Verify, Writer};
pub use error::{ChecksumFailure, DecodeError, Error, FormatError, IoError, IoErrorKind, Result};
pub use format::{Header, RecordLoc, MAX_RECORDS, MAX_RECORD_LEN};
pub use sampler::Sampler;
pub use stream::{
    DatasetId, Mixture, Mode, Permutation, Schedule, Shard, StateError, Stream, StreamError, StreamState,
};
