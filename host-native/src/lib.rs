//! # zrecord
//!
//! A persistent store of independently compressed byte records with a dense index space
//! `0..N`, built for single-machine ML training: batch [`Zrecord::append`],
//! [`Zrecord::gather`] straight into the caller's buffer across all cores, swap-last
//! [`Zrecord::delete`], in-place restartable [`Zrecord::compact`]. The on-disk format is
//! byte-compatible with loaderx 0.5.4 in both directions (see `docs/format.md`).
//!
//! This crate is the native host: all store logic lives in [`zrecord_core`]; here are the
//! files (positional writes, memory-mapped reads), the threads (rayon) and the inter-process
//! locks.
//!
//! ```no_run
//! use zrecord::{Codec, Zrecord};
//!
//! # fn main() -> Result<(), zrecord::Error> {
//! let store = Zrecord::open("train.zr")?;
//! let images = vec![7u8; 4 * 12288];
//! let first = store.append(&images, 4, 12288, None)?;          // 4 records of 12 KiB
//! let mut batch = vec![0u8; 2 * 12288];
//! store.gather(&[u64::from(first) + 3, u64::from(first)], &mut batch, 12288)?;
//! assert_eq!(batch, vec![7u8; 2 * 12288]);
//! # Ok(()) }
//! ```
//!
//! Training: [`Loader`] reads the core's sample [`Stream`] (shuffled epochs, rank shards,
//! mixtures) from stores with worker threads and a bounded prefetch, and saves an exact,
//! compact [`StreamState`] for resuming (see the [`loader`] module).
//!
//! Concurrency: `gather`, `lengths`, `append`, `stats` and `sync` take `&self` and may be
//! called from many threads at once (appends serialise among themselves; reads never wait
//! for them). `delete` and `compact` take `&mut self`, and also an exclusive advisory lock
//! on the store, so they fail with [`Error::Locked`] while any other handle (in this process
//! or another) has the store open. Only one handle at a time may append.

#![warn(missing_docs)]

pub mod dataset;
mod fs;
pub mod loader;
mod lock;
pub mod remote;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rayon::prelude::*;

pub use dataset::{
    drop_field, Column, Dataset, DatasetError, DatasetOptions, DatasetWriter, FieldAdder, WriteMode, WriteOptions,
};
pub use fs::{DirBackend, NativeFile};
pub use loader::{
    global_pool, BufferPool, Fetch, Loader, LoaderBatch, LoaderError, LoaderOptions, OnError, PackInfo, PackOptions,
    Place, RaggedBatch, RaggedField, RowIndexDir, RowIndexes, Skipped, Source, Transform, Warm,
};
pub use zrecord_app::tools::{Conversion, Inspection, Verification};
pub use zrecord_core::dataset::{Field, FieldKind, Manifest};
use zrecord_core::engine::{Batch, Options, Store, Writer};
pub use zrecord_core::engine::{FixedSlots, Pick, Sealing, Stats, Verify};
pub use zrecord_core::error::{ChecksumFailure, DecodeError, Error, FormatError, IoError, IoErrorKind};
pub use zrecord_core::format::{FileLayout, MAX_RECORDS, MAX_RECORD_LEN};
/// Encoded images: their headers, the loader's image pipelines, decoding.
pub use zrecord_core::image;
use zrecord_core::io::Parallel;
pub use zrecord_core::sampler::{Mode, Sampler};
pub use zrecord_core::stream::pack::PackMode;
pub use zrecord_core::stream::{
    Blocks, DatasetId, Mixture, Permutation, Shard, StateError, Stream, StreamError, StreamState, STATE_VERSION,
};
pub use zrecord_core::{schema::Schema, Codec, CodecPolicy, DEFAULT_MIN_SAVINGS};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs core work on rayon's global pool, one contiguous shard per task.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rayon;

impl Parallel for Rayon {
    fn workers(&self) -> usize {
        rayon::current_num_threads()
    }

    /// A caller from outside the pool (Python's thread in `ds[idx]`, the CLI) takes the first
    /// item itself while the pool's threads take the rest, rather than handing everything
    /// over and sleeping until it is done: on a batch of a few MiB the hand-off and the
    /// caller's idle core were about an eighth of a raw gather (docs/decisions/raw-gather.md).
    fn for_each<T: Send, F>(&self, items: &mut [T], f: F) -> Result<(), Error>
    where
        F: Fn(&mut T) -> Result<(), Error> + Sync + Send,
    {
        if items.len() < 2 || rayon::current_thread_index().is_some() {
            return items.par_iter_mut().try_for_each(f);
        }
        let (first, rest) = items.split_first_mut().expect("two items or more");
        let mut theirs = Ok(());
        let mine = rayon::in_place_scope(|scope| {
            scope.spawn(|_| theirs = rest.par_iter_mut().try_for_each(&f));
            f(first)
        });
        mine.and(theirs)
    }
}

/// How to open a store; see [`Zrecord::open_with`].
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Create the store if the directory holds none (default true).
    pub create: bool,
    /// Open without the right to change anything (default false).
    pub read_only: bool,
    /// Codec for appends that do not name one (default flate).
    pub codec: Codec,
    /// Least fraction of a record compression must save for the compressed form to be
    /// kept, for appends that do not name a policy (default
    /// [`DEFAULT_MIN_SAVINGS`](zrecord_core::DEFAULT_MIN_SAVINGS); see [`CodecPolicy`]).
    pub min_savings: f64,
    /// Chunk placement capacity; only tests change it (see `zrecord_core::Options`).
    pub chunk_capacity: u64,
    /// When reads check each record's checksum (default [`Verify::Auto`]: whenever the
    /// record has one).
    pub verify: Verify,
    /// Keep checksums on write (default true; see `zrecord_core::Options::checksums`).
    pub checksums: bool,
    /// How a store this open creates sizes its files (default sparse, loaderx's layout; see
    /// [`FileLayout`]). An existing store keeps its own.
    pub layout: FileLayout,
}

impl Default for OpenOptions {
    fn default() -> Self {
        let core = Options::default();
        OpenOptions {
            create: core.create,
            read_only: core.read_only,
            codec: Codec::Flate,
            min_savings: zrecord_core::DEFAULT_MIN_SAVINGS,
            chunk_capacity: core.chunk_capacity,
            verify: core.verify,
            checksums: core.checksums,
            layout: core.layout,
        }
    }
}

/// An open zrecord store.
pub struct Zrecord {
    store: Store<DirBackend>,
    writer: Mutex<Writer>,
    path: PathBuf,
    /// The default policy of appends that name none (the open options' codec and
    /// min_savings).
    policy: CodecPolicy,
}

impl Zrecord {
    /// Opens the store in directory `path`, creating it (and the directory) if needed.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens an existing store without the right to change it.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions { create: false, read_only: true, ..OpenOptions::default() })
    }

    /// Opens with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if !opts.create && !path.join(zrecord_core::format::META_FILE).exists() {
            if !path.is_dir() {
                return Err(Error::Io(IoError::new(
                    IoErrorKind::NotFound,
                    format!("open {}", path.display()),
                    "no such directory",
                )));
            }
            return Err(FormatError::MissingMeta.into());
        }
        let backend = DirBackend::new(&path, !opts.read_only)?;
        let policy = CodecPolicy::new(opts.codec, opts.min_savings)?;
        let core = Options {
            create: opts.create,
            read_only: opts.read_only,
            chunk_capacity: opts.chunk_capacity,
            verify: opts.verify,
            checksums: opts.checksums,
            layout: opts.layout,
        };
        let (store, writer) = Store::open(backend, core)?;
        Ok(Zrecord { store, writer: Mutex::new(writer), path, policy })
    }

    /// Opens a pushed store read from an object store ([`remote`]): read-only, whatever
    /// `opts.read_only` says.
    pub fn open_remote(dir: remote::file::RemoteDir, opts: OpenOptions) -> Result<Self> {
        let path = PathBuf::from(dir.remote().url());
        let backend = DirBackend::remote(dir);
        let policy = CodecPolicy::new(opts.codec, opts.min_savings)?;
        let core = Options {
            create: false,
            read_only: true,
            chunk_capacity: opts.chunk_capacity,
            verify: opts.verify,
            checksums: opts.checksums,
            layout: opts.layout,
        };
        let (store, writer) = Store::open(backend, core)?;
        Ok(Zrecord { store, writer: Mutex::new(writer), path, policy })
    }

    /// What reading this store from an object store cost so far (`None` for a local store).
    pub fn remote_stats(&self) -> Option<remote::RemoteCounts> {
        self.store.backend().remote_dir().map(|d| d.remote().stats().counts())
    }

    /// About one round trip to the object store this store is read from, in seconds
    /// (`None` for a local store, or before the first request).
    pub fn round_trip(&self) -> Option<f64> {
        self.store.backend().remote_dir().and_then(|d| d.remote().round_trip())
    }

    /// In a process forked after this handle was opened, takes the handle's locks again in
    /// this process and re-checks the header (the store may have changed while nothing
    /// protected it); a no-op, one atomic load, everywhere else.
    fn current(&self) -> Result<()> {
        if self.store.backend().revive()? {
            self.store.reload(&mut self.writer())?;
        }
        Ok(())
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        // A panic while appending leaves nothing half-published (length is stored last), so
        // the writer state is still sound after poisoning.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The default codec for appends.
    pub fn codec(&self) -> Codec {
        self.policy.codec
    }

    /// The default codec policy for appends (the open options' codec and min_savings).
    pub fn policy(&self) -> CodecPolicy {
        self.policy
    }

    /// Number of records.
    pub fn len(&self) -> u32 {
        self.store.len()
    }

    /// True if the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// The store's generation: a value that changes whenever zrecord deletes or compacts
    /// (a counter in the side file `generation.zrg`) and whenever the append frontier moves
    /// (appends, and compacts by writers that do not know the file, such as loaderx), and
    /// that two stores zrecord created never share (each has its own nonce, kept in
    /// `checksums.zrc`). Together with [`Zrecord::len`] it names the records behind the
    /// indices, which is what a saved [`StreamState`] records (see `docs/format.md`,
    /// "generation.zrg"). Compare generations for equality only.
    pub fn generation(&self) -> Result<u64> {
        self.current()?;
        self.store.generation()
    }

    /// The creation nonce zrecord drew for this store, or 0 (a store loaderx created, or
    /// one from before nonces): see [`Zrecord::generation`].
    pub fn nonce(&self) -> u64 {
        self.store.nonce()
    }

    /// This store as a stream's dataset: its length and [`Zrecord::generation`].
    pub fn dataset_id(&self) -> Result<DatasetId> {
        let generation = self.generation()?;
        Ok(DatasetId { length: u64::from(self.len()), generation })
    }

    /// Logical (uncompressed) size of each record in `idxs`, into `out`.
    pub fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        self.current()?;
        self.store.lengths(idxs, out)
    }

    /// Logical bytes `from .. from + out.len()` of record `index`, its checksum checked
    /// whole ([`zrecord_core::engine::Store::read_piece`]).
    pub fn read_piece(&self, index: u64, from: u64, out: &mut [u8], scratch: &mut Vec<u8>) -> Result<()> {
        self.current()?;
        self.store.read_piece(index, from, out, scratch)
    }

    /// Whether reading record `index` would wait for a local disk
    /// ([`zrecord_core::engine::Store::is_cold`]).
    pub fn is_cold(&self, index: u64) -> bool {
        self.current().is_ok() && self.store.is_cold(index)
    }

    /// Whether looking up record `index` would wait for its table entry
    /// ([`zrecord_core::engine::Store::table_cold`]).
    pub fn table_cold(&self, index: u64) -> bool {
        self.current().is_ok() && self.store.table_cold(index)
    }

    /// A read-ahead of records `idxs` (an object store starts fetching them now, a local
    /// store asks the kernel for those not in memory); reads nothing
    /// ([`zrecord_core::engine::Store::will_read`]).
    pub fn will_read(&self, idxs: &[u64]) -> Result<()> {
        self.current()?;
        self.store.will_read(idxs)
    }

    /// Decodes record `idxs[i]` into `dst[i * stride..]` for every `i`, across all cores.
    pub fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        self.current()?;
        self.store.gather(idxs, dst, stride, &Rayon)
    }

    /// Decodes record `idxs[i]` into `dst[offsets[i]..]` for every `i`, across all cores.
    pub fn gather_var(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
        self.current()?;
        self.store.gather_var(idxs, dst, offsets, &Rayon)
    }

    /// Decodes each pick's record (record `index` of `stores[store]`) into
    /// `dst[offset..]`, the records of all the stores in one parallel pass across all
    /// cores; see [`zrecord_core::engine::gather_stores`]. A failure comes with the number
    /// of the store it belongs to.
    pub fn gather_stores(
        stores: &[&Zrecord],
        picks: &[Pick],
        dst: &mut [u8],
        fixed: Option<FixedSlots>,
    ) -> std::result::Result<(), (usize, Error)> {
        for (s, store) in stores.iter().enumerate() {
            store.current().map_err(|e| (s, e))?;
        }
        let cores: Vec<&Store<DirBackend>> = stores.iter().map(|z| &z.store).collect();
        zrecord_core::engine::gather_stores(&cores, picks, dst, fixed, &Rayon)
    }

    /// Decodes one record into a new vector.
    pub fn read(&self, index: u64) -> Result<Vec<u8>> {
        self.current()?;
        self.store.read(index)
    }

    /// Appends `n` records of `item_len` bytes from the start of `src`, compressing with
    /// `codec` (or the store's default) under the store's `min_savings`; returns the index
    /// of the first.
    pub fn append(&self, src: &[u8], n: usize, item_len: usize, codec: Option<Codec>) -> Result<u32> {
        self.append_with(src, n, item_len, self.policy_for(codec))
    }

    /// [`Zrecord::append`] under an explicit codec policy (codec and `min_savings`).
    pub fn append_with(&self, src: &[u8], n: usize, item_len: usize, policy: CodecPolicy) -> Result<u32> {
        self.current()?;
        let batch = Batch::Fixed { src, count: n, item_len };
        self.store.append(&mut self.writer(), &batch, policy, &Rayon)
    }

    /// Writes `n` records of `item_len` bytes after what is already staged, like
    /// [`Zrecord::append_with`], but leaves them neither durable nor visible until
    /// [`Zrecord::commit`] (or [`Zrecord::sync`], or an append); returns the index the first
    /// will have. A bulk write that stages its blocks and commits once pays one sync instead
    /// of one per block, keeps the disk writing while later blocks compress, and leaves the
    /// store as it was if it stops half-way: what is not committed when the handle closes
    /// ([`Zrecord::discard`]) is lost, and nothing else is. Delete, compact and seal refuse
    /// to run while records are staged.
    pub fn stage_with(&self, src: &[u8], n: usize, item_len: usize, policy: CodecPolicy) -> Result<u32> {
        self.current()?;
        let batch = Batch::Fixed { src, count: n, item_len };
        self.store.stage(&mut self.writer(), &batch, policy, &Rayon)
    }

    /// Stages ragged records (record `i` is `src[offsets[i]..][..lens[i]]`), like
    /// [`Zrecord::stage_with`] does fixed ones.
    pub fn stage_var_with(&self, src: &[u8], offsets: &[u64], lens: &[u32], policy: CodecPolicy) -> Result<u32> {
        self.current()?;
        let batch = Batch::Ragged { src, offsets, lens };
        self.store.stage(&mut self.writer(), &batch, policy, &Rayon)
    }

    /// Makes the staged records durable, then visible to readers (see
    /// [`Zrecord::stage_with`]); nothing staged: nothing to do.
    pub fn commit(&self) -> Result<()> {
        self.current()?;
        self.store.commit(&mut self.writer(), &Rayon)
    }

    /// Forgets the staged records: the store stays as last committed.
    pub fn discard(&self) {
        self.store.discard(&mut self.writer());
    }

    /// Appends ragged records: record `i` is `src[offsets[i]..][..lens[i]]`.
    pub fn append_var(&self, src: &[u8], offsets: &[u64], lens: &[u32], codec: Option<Codec>) -> Result<u32> {
        self.append_var_with(src, offsets, lens, self.policy_for(codec))
    }

    /// [`Zrecord::append_var`] under an explicit codec policy.
    pub fn append_var_with(&self, src: &[u8], offsets: &[u64], lens: &[u32], policy: CodecPolicy) -> Result<u32> {
        self.current()?;
        let batch = Batch::Ragged { src, offsets, lens };
        self.store.append(&mut self.writer(), &batch, policy, &Rayon)
    }

    /// The store's policy with `codec` in place of its default codec, if given.
    fn policy_for(&self, codec: Option<Codec>) -> CodecPolicy {
        self.policy.with_codec(codec.unwrap_or(self.policy.codec))
    }

    /// Removes records, keeping the index space dense (the tail moves into each hole, so
    /// surviving records may change index).
    pub fn delete(&mut self, idxs: &[u64]) -> Result<()> {
        self.current()?;
        let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
        self.store.delete(w, idxs)
    }

    /// How the store's files are sized: sparse (loaderx 0.5.4's layout) or dense.
    pub fn layout(&self) -> FileLayout {
        self.store.layout()
    }

    /// Changes how the store's files are sized (`docs/format.md`, "Two layouts"); needs the
    /// only open handle, as compact does. Atomic: killed anywhere, the store is in one
    /// layout or the other, and running it again finishes the change.
    pub fn set_layout(&mut self, layout: FileLayout) -> Result<()> {
        self.current()?;
        let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
        self.store.set_layout(w, layout)?;
        self.store.sync(w)
    }

    /// Reclaims the space left by deletes, in place; safe to interrupt and re-run.
    pub fn compact(&mut self) -> Result<()> {
        self.compact_with_progress(&mut |_, _| {})
    }

    /// [`Zrecord::compact`], calling `progress(done, total)` as records are visited.
    pub fn compact_with_progress(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        self.current()?;
        let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
        self.store.compact(w, progress)
    }

    /// Storage usage.
    pub fn stats(&self) -> Result<Stats> {
        self.current()?;
        self.store.stats()
    }

    /// Bytes [`Zrecord::warm`] reads: the used part of the store's files (see
    /// [`Store::footprint`](zrecord_core::Store::footprint)).
    pub fn footprint(&self) -> u64 {
        self.store.footprint()
    }

    /// Reads the store's used bytes into the page cache, file by file from the start, in
    /// pieces of a few MiB that are skipped when already resident, so that random reads
    /// later find them in memory (see [`Store::warm`](zrecord_core::Store::warm)).
    /// `keep_going(done, total)` is asked before each piece; returning false stops. Returns
    /// the bytes covered. The [`Loader`] does this in the background for stores that fit
    /// in memory ([`Warm`]).
    pub fn warm(&self, keep_going: &mut dyn FnMut(u64, u64) -> bool) -> Result<u64> {
        self.current()?;
        self.store.warm(keep_going)
    }

    /// Makes all appended data durable (chunk data, then the table and header).
    pub fn sync(&self) -> Result<()> {
        self.current()?;
        self.store.sync(&mut self.writer())
    }

    /// Header, codec mix, chunk use and schema (see `zr inspect`).
    pub fn inspect(&self) -> Result<Inspection> {
        self.current()?;
        zrecord_app::tools::inspect(&self.store)
    }

    /// When reads check checksums.
    pub fn verify_mode(&self) -> Verify {
        self.store.verify_mode()
    }

    /// True if the store keeps checksums (has a usable `checksums.zrc`).
    pub fn has_checksums(&self) -> bool {
        self.store.has_checksums()
    }

    /// True if the store kept checksums but its `checksums.zrc` is missing or unusable:
    /// every record reads unchecked, and `verify` fails until the file is restored or the
    /// store sealed again. Hosts warn about it when they open the store.
    pub fn checksums_lost(&self) -> bool {
        self.store.checksums_lost()
    }

    /// Checksums every unchecked record that decodes (see `zr verify --seal`), creating the
    /// checksum file if the store has none. Takes the appender lock.
    pub fn seal(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<Sealing> {
        self.current()?;
        self.store.seal(&mut self.writer(), progress)
    }

    /// Checks every checksum and decodes every record, listing those that fail (see `zr
    /// verify`).
    pub fn verify(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<Verification> {
        self.current()?;
        zrecord_app::tools::verify(&self.store, &Rayon, progress)
    }

    /// The dataset schema, if the store has a `schema.json`.
    pub fn schema(&self) -> Result<Option<Schema>> {
        self.current()?;
        zrecord_app::tools::read_schema(&self.store)
    }

    /// The schema samples of `dtype` (NumPy's `dtype.str`) and `shape` are appended under:
    /// this store's `schema.json`, which must accept them, or a new one naming `codec`
    /// (see [`zrecord_app::tools::schema_for_append`]). `Dataset.write` in Python calls
    /// this before staging its blocks with the schema's codec.
    pub fn schema_for_append(&self, dtype: &str, shape: &[u64], codec: Codec) -> Result<Schema> {
        self.current()?;
        zrecord_app::tools::schema_for_append(&self.store, dtype, shape, codec)
    }

    /// Appends every axis-0 slice of the `.npy` file at `input` as a record, writing or
    /// checking `schema.json` as loaderx's `Dataset.write` does (see `zr convert`).
    pub fn convert_npy(
        &self,
        input: &Path,
        codec: Codec,
        chunk_bytes: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Conversion> {
        self.convert_npy_with(input, self.policy_for(Some(codec)), chunk_bytes, progress)
    }

    /// [`Zrecord::convert_npy`] under an explicit codec policy (`zr convert --min-savings`).
    pub fn convert_npy_with(
        &self,
        input: &Path,
        policy: CodecPolicy,
        chunk_bytes: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Conversion> {
        self.current()?;
        let file = NativeFile::open(input, false, false, false)?.ok_or_else(|| {
            Error::Io(IoError::new(IoErrorKind::NotFound, format!("open {}", input.display()), "no such file"))
        })?;
        zrecord_app::tools::convert(&file, &self.store, &mut self.writer(), policy, chunk_bytes, &Rayon, progress)
    }

    /// Writes the dataset to a `.npy` file at `output` (see `zr export`).
    pub fn export_npy(&self, output: &Path, chunk_bytes: usize, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
        self.current()?;
        let file = NativeFile::create(output)?;
        zrecord_app::tools::export(&self.store, &file, chunk_bytes, &Rayon, progress)
    }

    /// Closes the store, releasing its locks (dropping it does the same).
    pub fn close(self) {}
}

impl Drop for Zrecord {
    fn drop(&mut self) {
        let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
        self.store.release_locks(w);
    }
}
