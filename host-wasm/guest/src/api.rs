//! The WIT exports: `types`, `store` (the `store` and `sampler` resources) and `tools`.
//! Each function opens what it needs, calls the core, and turns core errors into the WIT
//! `error` record (stable `error-code` plus the core's message).

use std::cell::RefCell;

use zrecord_app::tools;
use zrecord_core::io::Serial;
use zrecord_core::{Batch, Codec, Error, Mode, Options, Sampler, Store as CoreStore, Verify, Writer};

use crate::exports::zrecord::store::store as wit_store;
use crate::exports::zrecord::store::tools as wit_tools;
use crate::exports::zrecord::store::types as wit_types;
use crate::fs::{FsDir, FsFile};

use wit_types::{Error as WitError, ErrorCode};

/// The type every export trait is implemented on.
pub struct Component;

/// The WIT error for a core error: the same stable code, the core's message.
pub fn to_wit(e: Error) -> WitError {
    let code = match e.code() {
        -1 => ErrorCode::OutOfMemory,
        -2 => ErrorCode::Io,
        -3 => ErrorCode::IndexOutOfRange,
        -4 => ErrorCode::RecordTooLarge,
        -5 => ErrorCode::StoreFull,
        -6 => ErrorCode::BufferTooSmall,
        -7 => ErrorCode::Decode,
        -8 => ErrorCode::BadFormat,
        -9 => ErrorCode::Locked,
        -10 => ErrorCode::InvalidArgument,
        -11 => ErrorCode::Checksum,
        // Every code of `zrecord_core::error::ERROR_KINDS` is listed above, as
        // core/tests/error_table.rs checks; an i32 match still needs this arm.
        _ => ErrorCode::InvalidArgument,
    };
    WitError { code, message: e.to_string(), path: None, record: None, field: None }
}

/// [`to_wit`] for a failure of the store at `path`: a record that fails its checksum or
/// cannot be decoded is named with its store, in the fields and the message, as the native
/// host's errors name them.
pub fn to_wit_at(path: &str, e: Error) -> WitError {
    let record = match &e {
        Error::Checksum { index, .. } | Error::Decode { index, .. } => Some(*index),
        _ => None,
    };
    let mut err = to_wit(e);
    if record.is_some() {
        err.message = format!("{path}: {}", err.message);
        err.path = Some(path.to_owned());
        err.record = record;
    }
    err
}

fn codec(c: wit_types::Codec) -> Codec {
    match c {
        wit_types::Codec::Raw => Codec::Raw,
        wit_types::Codec::Flate => Codec::Flate,
    }
}

/// A buffer of `len` bytes, or [`Error::OutOfMemory`] instead of an abort when the host's
/// memory cap (or the 4 GiB address space) refuses it.
pub fn try_zeroed(len: u64) -> Result<Vec<u8>, Error> {
    let len = usize::try_from(len).map_err(|_| Error::OutOfMemory)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::OutOfMemory)?;
    v.resize(len, 0);
    Ok(v)
}

/// Opens the store at `path` for the tools: read-only unless `create`.
pub fn open_store(path: &str, create: bool) -> Result<(CoreStore<FsDir>, Writer), Error> {
    if create {
        std::fs::create_dir_all(path).map_err(|e| {
            Error::Io(zrecord_core::IoError::new(
                zrecord_core::IoErrorKind::Other,
                format!("create directory {path}"),
                e.to_string(),
            ))
        })?;
        CoreStore::open(FsDir::new(path, true), Options::default())
    } else {
        CoreStore::open(FsDir::new(path, false), Options::read_only())
    }
}

/// The `store` resource: the core store and its single writer. Methods that need the
/// writer, or `&mut` store access, borrow the cell; the component model never re-enters a
/// resource while one of its methods runs, so the borrow cannot conflict.
pub struct StoreRes {
    inner: RefCell<(CoreStore<FsDir>, Writer)>,
    /// The path the store was opened with, for its errors.
    path: String,
}

impl StoreRes {
    /// The WIT error for a failure of this store ([`to_wit_at`]).
    fn err(&self, e: Error) -> WitError {
        to_wit_at(&self.path, e)
    }
}

impl Drop for StoreRes {
    fn drop(&mut self) {
        let (store, w) = self.inner.get_mut();
        let _ = store.sync(w);
        store.release_locks(w);
    }
}

impl wit_store::GuestStore for StoreRes {
    fn open(path: String, create: bool, read_only: bool) -> Result<wit_store::Store, WitError> {
        Self::open_with(path, create, read_only, wit_store::Verify::Auto)
    }

    fn open_with(
        path: String,
        create: bool,
        read_only: bool,
        verify: wit_store::Verify,
    ) -> Result<wit_store::Store, WitError> {
        let verify = match verify {
            wit_store::Verify::Auto => Verify::Auto,
            wit_store::Verify::Always => Verify::Always,
            wit_store::Verify::Never => Verify::Never,
        };
        let opts = Options { create: create && !read_only, read_only, verify, ..Options::default() };
        let pair = CoreStore::open(FsDir::new(path.clone(), !read_only), opts).map_err(|e| to_wit_at(&path, e))?;
        Ok(wit_store::Store::new(StoreRes { inner: RefCell::new(pair), path }))
    }

    fn len(&self) -> u32 {
        self.inner.borrow().0.len()
    }

    fn lengths(&self, indices: Vec<u64>) -> Result<Vec<u32>, WitError> {
        let mut out = vec![0u32; indices.len()];
        self.inner.borrow().0.lengths(&indices, &mut out).map_err(|e| self.err(e))?;
        Ok(out)
    }

    fn gather(&self, indices: Vec<u64>) -> Result<wit_store::Gathered, WitError> {
        let inner = self.inner.borrow();
        let store = &inner.0;
        let mut lengths = vec![0u32; indices.len()];
        store.lengths(&indices, &mut lengths).map_err(|e| self.err(e))?;
        let mut offsets = Vec::with_capacity(indices.len());
        let mut total = 0u64;
        for &l in &lengths {
            offsets.push(total);
            total += u64::from(l);
        }
        let mut data = try_zeroed(total).map_err(|e| self.err(e))?;
        store.gather_var(&indices, &mut data, &offsets, &Serial).map_err(|e| self.err(e))?;
        Ok(wit_store::Gathered { data, lengths })
    }

    fn append(&self, data: Vec<u8>, lengths: Vec<u32>, c: wit_types::Codec) -> Result<u32, WitError> {
        let mut offsets = Vec::with_capacity(lengths.len());
        let mut at = 0u64;
        for &l in &lengths {
            offsets.push(at);
            at += u64::from(l);
        }
        if at != data.len() as u64 {
            return Err(to_wit(Error::InvalidArgument(format!(
                "lengths sum to {at} bytes but {} bytes were given",
                data.len()
            ))));
        }
        let batch = Batch::Ragged { src: &data, offsets: &offsets, lens: &lengths };
        let mut inner = self.inner.borrow_mut();
        let (store, w) = &mut *inner;
        store.append(w, &batch, codec(c), &Serial).map_err(|e| self.err(e))
    }

    fn delete(&self, indices: Vec<u64>) -> Result<(), WitError> {
        let mut inner = self.inner.borrow_mut();
        let (store, w) = &mut *inner;
        store.delete(w, &indices).map_err(|e| self.err(e))
    }

    fn compact(&self) -> Result<(), WitError> {
        let mut inner = self.inner.borrow_mut();
        let (store, w) = &mut *inner;
        store.compact(w, &mut |_, _| {}).map_err(|e| self.err(e))
    }

    fn stats(&self) -> Result<wit_types::Stats, WitError> {
        let s = self.inner.borrow().0.stats().map_err(|e| self.err(e))?;
        Ok(wit_types::Stats {
            records: s.records,
            live_bytes: s.live_bytes,
            chunk_bytes: s.chunk_bytes,
            reclaimable: s.reclaimable,
        })
    }

    fn sync(&self) -> Result<(), WitError> {
        let mut inner = self.inner.borrow_mut();
        let (store, w) = &mut *inner;
        store.sync(w).map_err(|e| self.err(e))
    }
}

/// The `sampler` resource.
pub struct SamplerRes {
    inner: RefCell<Sampler>,
}

impl wit_store::GuestSampler for SamplerRes {
    fn create(length: u64, batch_size: u32, mode: wit_store::Mode, seed: u64) -> Result<wit_store::Sampler, WitError> {
        let m = match mode {
            wit_store::Mode::Sequential => Mode::Sequential,
            wit_store::Mode::Iid => Mode::Iid,
            wit_store::Mode::Shuffle => Mode::Shuffle,
        };
        let sampler = Sampler::new(length, batch_size as usize, m, seed).map_err(to_wit)?;
        Ok(wit_store::Sampler::new(SamplerRes { inner: RefCell::new(sampler) }))
    }

    fn length(&self) -> u64 {
        self.inner.borrow().length()
    }

    fn batch_size(&self) -> u32 {
        self.inner.borrow().batch_size() as u32
    }

    fn mode(&self) -> wit_store::Mode {
        match self.inner.borrow().mode() {
            Mode::Sequential => wit_store::Mode::Sequential,
            Mode::Iid => wit_store::Mode::Iid,
            Mode::Shuffle => wit_store::Mode::Shuffle,
        }
    }

    fn next_batch(&self) -> Vec<u64> {
        let mut s = self.inner.borrow_mut();
        let mut out = vec![0u64; s.batch_size()];
        s.fill(&mut out);
        out
    }
}

impl wit_store::Guest for Component {
    type Store = StoreRes;
    type Sampler = SamplerRes;
}

/// `verify` as JSON.
pub fn verify_json(path: &str) -> Result<(tools::Verification, String), Error> {
    let (store, _w) = open_store(path, false)?;
    let v = tools::verify(&store, &Serial, &mut |_, _| {})?;
    let json = serde_json::to_string_pretty(&v).expect("a report always serialises");
    Ok((v, json))
}

/// `convert` as the `tools` export runs it (the CLI's is `zrecord_app::cli`'s).
/// Returns the conversion and the store's length after it. The input is checked before
/// anything is created, and a failed conversion into a path that did not exist removes
/// what it created; appending to an existing store keeps what earlier batches appended.
pub fn convert(input: &str, output: &str, c: Codec, chunk_bytes: usize) -> Result<(tools::Conversion, u32), Error> {
    let src = FsFile::open(input.into(), false, false)?.ok_or_else(|| {
        Error::Io(zrecord_core::IoError::new(
            zrecord_core::IoErrorKind::NotFound,
            format!("open {}", crate::cli::shown(input)),
            "no such file",
        ))
    })?;
    tools::check_npy(&src)?;
    let created = crate::cli::create_dirs(std::path::Path::new(output))?;
    let result = (|| {
        let (store, mut w) = open_store(output, true)?;
        let out = tools::convert(&src, &store, &mut w, c, chunk_bytes, &Serial, &mut |_, _| {});
        store.release_locks(&mut w);
        Ok((out?, store.len()))
    })();
    if result.is_err() {
        crate::cli::remove_dirs(&created);
    }
    result
}

/// `export` as the `tools` export runs it.
pub fn export(input: &str, output: &str) -> Result<u64, Error> {
    let (store, _w) = open_store(input, false)?;
    let dst = FsFile::create(output.into())?;
    tools::export(&store, &dst, tools::DEFAULT_CHUNK_BYTES, &Serial, &mut |_, _| {})
}

impl wit_tools::Guest for Component {
    fn inspect(path: String) -> Result<String, WitError> {
        let (store, _w) = open_store(&path, false).map_err(to_wit)?;
        let report = tools::inspect(&store).map_err(to_wit)?;
        Ok(serde_json::to_string_pretty(&report).expect("a report always serialises"))
    }

    fn inspect_text(path: String) -> Result<String, WitError> {
        let (store, _w) = open_store(&path, false).map_err(to_wit)?;
        Ok(tools::inspect(&store).map_err(to_wit)?.to_string())
    }

    fn verify(path: String) -> Result<String, WitError> {
        verify_json(&path).map(|(_, json)| json).map_err(to_wit)
    }

    fn convert_npy(input: String, output: String, c: wit_types::Codec) -> Result<u64, WitError> {
        convert(&input, &output, codec(c), tools::DEFAULT_CHUNK_BYTES).map(|(c, _)| c.appended).map_err(to_wit)
    }

    fn export_npy(input: String, output: String) -> Result<u64, WitError> {
        export(&input, &output).map_err(|e| to_wit_at(&input, e))
    }
}
