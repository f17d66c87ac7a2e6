//! `zrecord.Zrecord`: one open store, loaderx 0.5.4's `Zrecord` with the same methods.
//!
//! The handle is shared (`Arc`) between the Python object and any DataLoader pipeline
//! reading it, and every call takes its own clone for the duration of the call, so a
//! `close()` never pulls a store out from under a running gather: the files close when the
//! last user lets go. `delete` and `compact` need the store exclusively (`&mut`); they get
//! it only when no other call, loader or thread holds a clone, and otherwise fail at once
//! with `LockedError` (code -9) rather than wait or race. Calls that arrive while a delete
//! or compact runs wait for it (GIL released), so they see the store before or after it,
//! and a delete attempt that fails never disturbs them.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};
use zrecord::{Codec, CodecPolicy, OpenOptions, Verify};

use crate::buffers::{self, indices};
use crate::error;
use crate::pool::{read_call, store_call};
use crate::progress::Progress;

/// Where the handle is.
enum Slot {
    Open(Arc<zrecord::Zrecord>),
    /// Taken by a running delete or compact.
    Busy,
    Closed,
}

/// The verification mode called `name`.
pub fn verify_named(name: &str) -> PyResult<Verify> {
    Verify::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!("unknown verify mode {name:?}, expected one of ['auto', 'always', 'never']"))
    })
}

pub fn codec_named(name: &str) -> PyResult<Codec> {
    Codec::from_name(name)
        .ok_or_else(|| PyValueError::new_err(format!("unknown codec {name:?}, expected one of {}", Codec::NAMES)))
}

/// `codec` under `min_savings`, as a `ValueError` when it is not a fraction in 0..=1.
pub fn policy(codec: Codec, min_savings: f64) -> PyResult<CodecPolicy> {
    CodecPolicy::new(codec, min_savings).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A zrecord store: a persistent, dense collection of independently compressed byte
/// records, addressed `0..len(store)`.
///
/// `Zrecord(path, codec="flate")` opens the store in directory `path`, creating it if
/// needed, as loaderx does. `codec` ("flate", "raw", or "zstd", which loaderx 0.5.4
/// cannot read) is the default compression for `append`; a record that compression does not shrink by at least `min_savings` (a
/// fraction, default `zrecord.DEFAULT_MIN_SAVINGS`, 0.125) is stored raw regardless, which
/// loaderx reads as any raw record. Use it as a context manager, or call `close()`.
///
/// `create=False` opens only a store that exists (a missing directory is `StoreIOError`,
/// a directory without a store `FormatError`), so a mistyped path fails instead of
/// becoming a new empty store. `read_only=True` (or `Zrecord.open_read_only(path)`) also
/// never creates, takes no write lock, and refuses `append`, `delete` and `compact` with
/// `ValueError`.
///
/// Every record's stored bytes are checksummed on write (`checksums.zrc`, a side file
/// loaderx ignores) and checked on read; a record that fails is never handed out. `verify` sets when: "auto" (the
/// default: every record that has a checksum), "always" (a record without one is a
/// `ChecksumError` too) or "never". A mismatch is a `ChecksumError` (code -11) naming the
/// record and its chunk. `checksums=False` writes without keeping them, as loaderx does.
///
/// `gather`, `lengths`, `append` and `stats` may run from many threads at once and release
/// the GIL. `delete` and `compact` need exclusive access: they raise `LockedError` (code -9)
/// while another thread, a DataLoader or another open handle is using the store.
#[pyclass(module = "zrecord", name = "Zrecord", frozen, subclass)]
pub struct Zrecord {
    slot: Mutex<Slot>,
    /// Signalled when the slot leaves `Busy`.
    freed: Condvar,
    codec: Codec,
    /// Default policy of `append` (the store's codec and min_savings).
    policy: CodecPolicy,
    path: PathBuf,
    read_only: bool,
    /// Where `_gather_batch`'s arrays give their memory back ([`crate::batch`]).
    buffers: Arc<zrecord::BufferPool>,
}

impl Zrecord {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // The slot is only ever swapped whole, so a panic elsewhere cannot leave it torn.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A clone of the open handle, for one call or for a loader pipeline. While a delete or
    /// compact runs, waits for it (with the GIL released: a compact's progress reports need
    /// the GIL) instead of failing, so readers see the store before or after, never during.
    pub fn handle(&self, py: Python<'_>) -> PyResult<Arc<zrecord::Zrecord>> {
        let found = {
            let slot = self.slot();
            match &*slot {
                Slot::Open(store) => Some(Arc::clone(store)),
                Slot::Closed => None,
                Slot::Busy => {
                    drop(slot);
                    py.detach(|| {
                        let mut slot = self.slot();
                        loop {
                            match &*slot {
                                Slot::Open(store) => break Some(Arc::clone(store)),
                                Slot::Closed => break None,
                                Slot::Busy => slot = self.freed.wait(slot).unwrap_or_else(|p| p.into_inner()),
                            }
                        }
                    })
                }
            }
        };
        found.ok_or_else(|| error::closed(py))
    }

    /// A Python handle over a store opened elsewhere (a dataset's), with its policy.
    pub fn from_handle(store: Arc<zrecord::Zrecord>, read_only: bool) -> Self {
        Zrecord {
            codec: store.codec(),
            policy: store.policy(),
            path: store.path().to_path_buf(),
            slot: Mutex::new(Slot::Open(store)),
            freed: Condvar::new(),
            read_only,
            buffers: Arc::default(),
        }
    }

    /// The store's append policy with the codec and min_savings a call names, if any.
    fn policy_for(&self, codec: Option<&str>, min_savings: Option<f64>) -> PyResult<CodecPolicy> {
        let codec = codec.map(codec_named).transpose()?.unwrap_or(self.codec);
        policy(codec, min_savings.unwrap_or(self.policy.min_savings()))
    }

    /// `append` and `stage`: `n` records of `item_len` bytes from `src`, under the policy the
    /// call names, appended or (`staged`) staged.
    #[allow(clippy::too_many_arguments)]
    fn write_fixed(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        n: i64,
        item_len: i64,
        codec: Option<&str>,
        min_savings: Option<f64>,
        staged: bool,
    ) -> PyResult<u32> {
        let n = buffers::size(n, "n")?;
        let item_len = buffers::size(item_len, "item_len")?;
        let policy = self.policy_for(codec, min_savings)?;
        let region = buffers::readable(src, "src")?;
        let store = self.handle(py)?;
        let src = region.bytes();
        store_call(py, move || {
            if staged {
                store.stage_with(src, n, item_len, policy)
            } else {
                store.append_with(src, n, item_len, policy)
            }
        })
    }

    /// Runs `f` with the store exclusively (for delete and compact).
    fn exclusive(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut zrecord::Zrecord) -> Result<(), zrecord::Error> + Send,
    ) -> PyResult<()> {
        let mut store = {
            let mut slot = self.slot();
            match std::mem::replace(&mut *slot, Slot::Busy) {
                // New clones are only made under this mutex, so a count of one stays one
                // while the slot says Busy: the store is ours alone for the call.
                Slot::Open(store) if Arc::strong_count(&store) == 1 => store,
                other => {
                    let why = match &other {
                        Slot::Open(_) => {
                            "store is locked: delete and compact need exclusive access, but another \
                                          thread or a DataLoader is using this store"
                        }
                        Slot::Busy => "store is locked: a delete or compact is already running on it",
                        Slot::Closed => "",
                    };
                    let closed = matches!(other, Slot::Closed);
                    *slot = other;
                    drop(slot);
                    return Err(if closed {
                        error::closed(py)
                    } else {
                        error::zrecord_error(py, error::LOCKED, why.into())
                    });
                }
            }
        };
        let result = match Arc::get_mut(&mut store) {
            Some(exclusive) => store_call(py, move || f(exclusive)),
            None => Err(error::zrecord_error(
                py,
                error::INTERNAL,
                "internal error: a store handle was cloned while busy".into(),
            )),
        };
        let mut slot = self.slot();
        // A close() that came in meanwhile wins: the store drops (and closes) here.
        if matches!(*slot, Slot::Busy) {
            *slot = Slot::Open(store);
        }
        drop(slot);
        self.freed.notify_all();
        result
    }
}

#[pymethods]
impl Zrecord {
    #[new]
    #[pyo3(signature = (path, codec = "flate", *, create = None, read_only = false, verify = "auto", checksums = true, min_savings = zrecord::DEFAULT_MIN_SAVINGS))]
    // One argument per keyword of the Python constructor, which pyo3 maps one to one.
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        codec: &str,
        create: Option<bool>,
        read_only: bool,
        verify: &str,
        checksums: bool,
        min_savings: f64,
    ) -> PyResult<Self> {
        let codec = codec_named(codec)?;
        let verify = verify_named(verify)?;
        let policy = policy(codec, min_savings)?;
        if read_only && create == Some(true) {
            return Err(PyValueError::new_err("a read-only open cannot create a store: pass create=False or omit it"));
        }
        let opts = OpenOptions {
            codec,
            min_savings: policy.min_savings(),
            create: create.unwrap_or(!read_only),
            read_only,
            verify,
            checksums,
            ..OpenOptions::default()
        };
        let at = path.clone();
        let store = store_call(py, move || zrecord::Zrecord::open_with(at, opts))?;
        if store.checksums_lost() {
            crate::error::warn_checksums_lost(py, &path, 1)?;
        }
        Ok(Zrecord {
            slot: Mutex::new(Slot::Open(Arc::new(store))),
            freed: Condvar::new(),
            codec,
            policy,
            path,
            read_only,
            buffers: Arc::default(),
        })
    }

    /// Opens an existing store without the right to change it (never creates anything).
    #[classmethod]
    #[pyo3(signature = (path, codec = "flate"))]
    fn open_read_only<'py>(
        cls: &Bound<'py, PyType>,
        path: &Bound<'py, PyAny>,
        codec: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(cls.py());
        kwargs.set_item("read_only", true)?;
        cls.call((path, codec), Some(&kwargs))
    }

    /// True if opened with `read_only=True`.
    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }

    /// Default compression for `append`: "flate", "raw" or "zstd".
    #[getter]
    fn codec(&self) -> &'static str {
        self.codec.name()
    }

    /// When reads check each record's checksum: "auto" (whenever the
    /// record has one, the default), "always" (a record without one is a `ChecksumError`
    /// too) or "never".
    #[getter]
    fn verify(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.handle(py)?.verify_mode().name())
    }

    /// True if the store keeps per-record checksums (`checksums.zrc`): every store zrecord
    /// created, not one only loaderx wrote (until a zrecord append or `seal()`).
    #[getter]
    fn checksums(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.has_checksums())
    }

    /// True if the store kept checksums but its `checksums.zrc` is missing or unusable.
    #[getter]
    fn checksums_lost(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.checksums_lost())
    }

    /// Checksum every *unchecked* record (one a foreign writer such as loaderx added or
    /// moved, or every record of a store only loaderx wrote) that decodes, creating the
    /// checksum file if needed. Returns a dict of `already` (records that had a checksum),
    /// `sealed` and `bad` (records that failed to decode, left unchecked). Durable when it
    /// returns. Needs a writable store; takes the appender lock.
    #[pyo3(signature = (progress = None))]
    fn seal<'py>(&self, py: Python<'py>, progress: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.handle(py)?;
        let mut reporter = Progress::new(progress);
        let bar = &mut reporter;
        let s = store_call(py, move || store.seal(&mut |done, total| bar.report(done, total)))?;
        reporter.finish()?;
        let d = PyDict::new(py);
        d.set_item("already", s.already)?;
        d.set_item("sealed", s.sealed)?;
        d.set_item("bad", s.bad)?;
        Ok(d)
    }

    /// Least fraction of a record that compression must save for `append` to keep the
    /// compressed form (set when opening; `append(..., min_savings=)` overrides it).
    #[getter]
    fn min_savings(&self) -> f64 {
        self.policy.min_savings()
    }

    /// The store directory, as given.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// True once `close()` has been called.
    #[getter]
    fn closed(&self) -> bool {
        matches!(*self.slot(), Slot::Closed)
    }

    /// Number of records.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.handle(py)?.len() as usize)
    }

    fn __repr__(&self) -> String {
        let state = match &*self.slot() {
            Slot::Open(s) => format!("{} records", s.len()),
            Slot::Busy => "busy".into(),
            Slot::Closed => "closed".into(),
        };
        format!("Zrecord({:?}, codec={:?}, {state})", self.path.display().to_string(), self.codec.name())
    }

    /// The store's generation: changes whenever zrecord deletes or compacts (a counter in
    /// the side file `generation.zrg`) and whenever the append frontier moves (appends,
    /// and compacts by writers that do not know the file, such as loaderx). With `len()`
    /// it names the records behind the indices; a DataLoader's saved state records both.
    /// Compare for equality only.
    #[getter]
    fn generation(&self, py: Python<'_>) -> PyResult<u64> {
        let store = self.handle(py)?;
        store_call(py, move || store.generation())
    }

    /// Flush chunk data, then the record table and header, to disk.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.handle(py)?;
        store_call(py, move || store.sync())
    }

    /// The logical (uncompressed) size of each record in `idxs`, as a uint32 array.
    fn lengths<'py>(&self, py: Python<'py>, idxs: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let idxs = indices(idxs)?;
        let store = self.handle(py)?;
        let mut out = buffers::zeroed::<u32>(idxs.len()).map_err(|e| error::to_py(py, e))?;
        let slots = &mut out[..];
        store_call(py, move || store.lengths(&idxs, slots))?;
        Ok(PyArray1::from_vec(py, out))
    }

    /// Decode records `idxs` straight into `dst`, record `i` at byte `i * stride`.
    ///
    /// `dst` is any C-contiguous, writable numpy array (or writable buffer); it is filled in
    /// place, with no staging copy. A record longer than `stride`, or a `dst` too small for
    /// `len(idxs)` slots, is `BufferTooSmallError` (-6), raised before anything is written.
    fn gather(&self, py: Python<'_>, idxs: &Bound<'_, PyAny>, dst: &Bound<'_, PyAny>, stride: i64) -> PyResult<()> {
        let stride = buffers::size(stride, "stride")?;
        let idxs = indices(idxs)?;
        let mut region = buffers::writable(dst, "dst")?;
        let store = self.handle(py)?;
        let dst = region.bytes_mut();
        read_call(py, store.path().to_path_buf(), move || store.gather(&idxs, dst, stride))
    }

    /// Records `idxs` (flattened, non-negative) decoded into a new array of `dtype` shaped
    /// `(len(idxs), *shape)`, `stride` bytes per record: `Dataset.__getitems__`. A batch of
    /// 256 KiB or more starts on a page and comes from this handle's batch pool, going back
    /// to it when the array and every view of it are gone, so a later batch reuses the
    /// memory and a batch someone holds is never overwritten; a smaller one is a plain
    /// numpy array.
    fn _gather_batch<'py>(
        &self,
        py: Python<'py>,
        idxs: &Bound<'py, PyAny>,
        stride: i64,
        dtype: &Bound<'py, PyAny>,
        shape: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let stride = buffers::size(stride, "stride")?;
        let idxs = indices(idxs)?;
        let n = idxs.len();
        let len = n.checked_mul(stride).ok_or_else(|| error::to_py(py, zrecord::Error::OutOfMemory))?;
        let store = self.handle(py)?;
        let mut dims = vec![n];
        for d in shape.try_iter()? {
            dims.push(d?.extract::<usize>()?);
        }
        let full = PyTuple::new(py, dims)?;
        if len < crate::batch::POOL_MIN_BYTES {
            // A plain array of its own, as loaderx returns.
            let out = py.import("numpy")?.call_method1("empty", (full, dtype))?;
            let mut region = buffers::writable(&out, "out")?;
            let dst = region.bytes_mut();
            read_call(py, store.path().to_path_buf(), move || store.gather(&idxs, dst, stride))?;
            drop(region);
            return Ok(out);
        }
        let (mut buf, start) = crate::batch::take_aligned(&self.buffers, len).map_err(|e| error::to_py(py, e))?;
        let dst = &mut buf[start..start + len];
        read_call(py, store.path().to_path_buf(), move || store.gather(&idxs, dst, stride))?;
        crate::batch::aligned_array(py, (buf, start), len, &self.buffers, dtype, full.as_any())
    }

    /// Buffers waiting in the batch pool of `_gather_batch` (for tests).
    #[getter]
    fn _pooled_buffers(&self) -> usize {
        self.buffers.len()
    }

    /// Decode ragged records `idxs` into `dst`, record `i` at byte `offsets[i]`.
    ///
    /// Regions must lie inside `dst` (else `BufferTooSmallError`, -6) and must not overlap
    /// (else `ValueError`).
    fn gather_var(
        &self,
        py: Python<'_>,
        idxs: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let idxs = indices(idxs)?;
        let offsets = buffers::offsets(offsets, "offsets")?;
        let mut region = buffers::writable(dst, "dst")?;
        let store = self.handle(py)?;
        let dst = region.bytes_mut();
        read_call(py, store.path().to_path_buf(), move || store.gather_var(&idxs, dst, &offsets))
    }

    /// Append `n` records of `item_len` bytes each, taken from the start of `src`.
    ///
    /// `src` is a C-contiguous numpy array (any dtype) or buffer of at least
    /// `n * item_len` bytes. `codec` and `min_savings` override the store's defaults. Returns
    /// the index of the first new record.
    #[pyo3(signature = (src, n, item_len, codec = None, *, min_savings = None))]
    fn append(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        n: i64,
        item_len: i64,
        codec: Option<&str>,
        min_savings: Option<f64>,
    ) -> PyResult<u32> {
        self.write_fixed(py, src, n, item_len, codec, min_savings, false)
    }

    /// Write `n` records as :meth:`append` does, after those already staged, but leave them
    /// neither durable nor visible until :meth:`commit` (or :meth:`sync`, or an append).
    ///
    /// A bulk write that stages its blocks and commits once pays one sync instead of one
    /// per block and adds all of its records or none: what is staged when the handle
    /// closes, or after :meth:`discard`, is lost, and nothing else is. ``delete``,
    /// ``compact`` and ``seal`` refuse to run while records are staged. Returns the index
    /// the first record will have.
    #[pyo3(signature = (src, n, item_len, codec = None, *, min_savings = None))]
    fn stage(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        n: i64,
        item_len: i64,
        codec: Option<&str>,
        min_savings: Option<f64>,
    ) -> PyResult<u32> {
        self.write_fixed(py, src, n, item_len, codec, min_savings, true)
    }

    /// Make the staged records durable, then visible (see :meth:`stage`).
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.handle(py)?;
        store_call(py, move || store.commit())
    }

    /// Forget the staged records: the store stays as last committed.
    fn discard(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.handle(py)?;
        py.detach(move || store.discard());
        Ok(())
    }

    /// Append ragged records: record `i` is `src[offsets[i]:][:lens[i]]` (bytes).
    ///
    /// Returns the index of the first new record.
    #[pyo3(signature = (src, offsets, lens, codec = None, *, min_savings = None))]
    fn append_var(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        lens: &Bound<'_, PyAny>,
        codec: Option<&str>,
        min_savings: Option<f64>,
    ) -> PyResult<u32> {
        let policy = self.policy_for(codec, min_savings)?;
        let offsets = buffers::offsets(offsets, "offsets")?;
        let lens = buffers::lengths(lens, "lens")?;
        let region = buffers::readable(src, "src")?;
        let store = self.handle(py)?;
        let src = region.bytes();
        store_call(py, move || store.append_var_with(src, &offsets, &lens, policy))
    }

    /// Remove records, keeping the index space dense.
    ///
    /// The tail of the table moves into each hole, so afterwards the live records are
    /// exactly `0..len(self)` and a surviving record may have a new index. Duplicates and
    /// any order are fine; an index out of range fails the whole call before anything
    /// changes. The bytes stay on disk until `compact()`. Needs exclusive access.
    fn delete(&self, py: Python<'_>, idxs: &Bound<'_, PyAny>) -> PyResult<()> {
        let idxs = indices(idxs)?;
        self.exclusive(py, move |store| store.delete(&idxs))
    }

    /// Reclaim the space left by `delete`, in place. Safe to interrupt and re-run. Needs
    /// exclusive access.
    ///
    /// `progress` is an optional callable `progress(done, total)`, called with the GIL
    /// now and then (not per record) as records are visited; `zrecord.Dataset.compact` and
    /// the `progress=True` forms build it from tqdm.
    #[pyo3(signature = (progress = None))]
    fn compact(&self, py: Python<'_>, progress: Option<Py<PyAny>>) -> PyResult<()> {
        let mut reporter = Progress::new(progress);
        let bar = &mut reporter;
        self.exclusive(py, move |store| store.compact_with_progress(&mut |done, total| bar.report(done, total)))?;
        reporter.finish()
    }

    /// The codec samples of `dtype` (numpy's `dtype.str`) and `shape` are appended in:
    /// the store's `schema.json`'s, which must name the same dtype and shape (a
    /// `ValueError` otherwise), or `codec`, written into a new `schema.json` first.
    /// Internal: `zrecord.Dataset.write` calls it before staging (the rule is the core's
    /// `tools::schema_for_append`, shared with `zr convert`).
    fn _schema_for_append(&self, py: Python<'_>, dtype: String, shape: Vec<u64>, codec: &str) -> PyResult<String> {
        let codec = codec_named(codec)?;
        let store = self.handle(py)?;
        let path = store.path().join(zrecord_core::schema::SCHEMA_FILE);
        match py.detach(move || store.schema_for_append(&dtype, &shape, codec)) {
            Ok(schema) => Ok(schema.codec),
            Err(zrecord::Error::Format(e)) => Err(crate::error::metadata_error(py, format!("{}: {e}", path.display()))),
            Err(e) => Err(crate::error::to_py(py, e)),
        }
    }

    /// Storage usage: a dict of `records`, `live_bytes` (what live records occupy),
    /// `chunk_bytes` (how far the chunk files have grown) and `reclaimable` (an upper bound
    /// on what `compact()` would free), as loaderx reports them; and, when the store keeps
    /// checksums, `unchecked`: live records without one (see `seal()`). A store only
    /// loaderx wrote gives exactly loaderx's four keys.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.handle(py)?;
        let sums = store.has_checksums();
        let s = store_call(py, move || store.stats())?;
        let d = PyDict::new(py);
        stats_into(&d, &s, sums)?;
        Ok(d)
    }

    /// Close the store. Idempotent; later calls raise `StoreClosedError`. Calls already
    /// running (and DataLoaders reading the store) finish first: the files close when the
    /// last of them lets go.
    fn close(&self, py: Python<'_>) {
        let old = std::mem::replace(&mut *self.slot(), Slot::Closed);
        self.freed.notify_all();
        // Dropping the last handle syncs nothing but releases locks and unmaps: no GIL needed.
        py.detach(move || drop(old));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) {
        self.close(py);
    }
}

/// A store's `stats()` keys into `d`: loaderx's four, and `unchecked` when the store keeps
/// checksums (`sums`), as `zr stats` prints them.
pub(crate) fn stats_into(d: &Bound<'_, PyDict>, s: &zrecord::Stats, sums: bool) -> PyResult<()> {
    d.set_item("records", s.records)?;
    d.set_item("live_bytes", s.live_bytes)?;
    d.set_item("chunk_bytes", s.chunk_bytes)?;
    d.set_item("reclaimable", s.reclaimable)?;
    if sums {
        d.set_item("unchecked", s.unchecked)?;
    }
    Ok(())
}
