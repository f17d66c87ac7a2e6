//! What the `zr` and `zr-wasm` command lines do, written once: inspect, verify, convert a
//! `.npy` into a dataset, and export a dataset back to `.npy`. Hosts open the files and the
//! store and format nothing but what these functions return.
//!
//! The files: `tools.rs` the dataset schema a store keeps beside its records
//! ([`read_schema`], [`schema_for_append`]); `census.rs` what a store's table and its files'
//! sizes say without reading a record ([`ChunkUse`], the damage and placement checks that
//! `inspect`, `verify` and `export` share); `inspect.rs` [`inspect`]; `verify.rs` [`verify`];
//! `convert.rs` [`convert`] and the `.npy` input it reads ([`NpySource`]); `export.rs`
//! [`export`].

use alloc::format;

use zrecord_core::codec::Codec;
use zrecord_core::engine::Store;
use zrecord_core::error::{Error, Result};
use zrecord_core::io::Backend;
use zrecord_core::schema::{Schema, SCHEMA_FILE};

mod census;
mod convert;
mod export;
mod inspect;
mod verify;

pub use census::{ChunkUse, VERIFY_OVERLAP};
pub use convert::{check_npy, convert, read_npy_header, Conversion, NpySource};
pub use export::export;
pub use inspect::{human_bytes, inspect, Inspection};
pub use verify::{verify, BadRecord, Verification};

/// Default bytes of source data per append when converting (as loaderx's `Dataset.write`).
pub const DEFAULT_CHUNK_BYTES: usize = 64 << 20;

/// Reads and parses the store's `schema.json`, if it has one.
pub fn read_schema<B: Backend>(store: &Store<B>) -> Result<Option<Schema>> {
    match store.backend().read_side_file(SCHEMA_FILE)? {
        Some(bytes) => Ok(Some(Schema::from_json(&bytes)?)),
        None => Ok(None),
    }
}

/// The schema samples of `dtype` and `shape` are appended under, as loaderx's
/// `Dataset.write` decides it: the store's own `schema.json` when it has one (it must have
/// the same dtype and shape; its codec wins), or else a new one naming `codec`, written
/// before any record.
pub fn schema_for_append<B: Backend>(store: &Store<B>, dtype: &str, shape: &[u64], codec: Codec) -> Result<Schema> {
    match read_schema(store)? {
        Some(existing) if !existing.accepts(dtype, shape) => Err(Error::InvalidArgument(format!(
            "dataset holds {}{:?} samples, cannot append {dtype}{shape:?}",
            existing.dtype, existing.shape
        ))),
        Some(existing) => Ok(existing),
        None => {
            let s = Schema::new(dtype, shape, codec);
            store.backend().write_side_file(SCHEMA_FILE, s.to_json().as_bytes())?;
            Ok(s)
        }
    }
}
