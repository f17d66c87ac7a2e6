//! Datasets: named fields (fixed-shape or ragged) over one index space that may span many
//! shards, each field of each shard a store ([`Zrecord`]).
//!
//! The layout and its rules (names, kinds, limits, the manifest) are the core's
//! ([`zrecord_core::dataset`]); this module opens the stores a manifest lists, maps a
//! dataset index to its shard's record and gathers across shards. A directory that holds
//! one store and a loaderx `schema.json` (what loaderx 0.5.4 and `zr convert` write) opens
//! as a dataset of one fixed field, [`LEGACY_FIELD`], so every loaderx dataset is a dataset
//! here too. Writing is [`DatasetWriter`] (`write.rs`).
//!
//! Access: a dataset opened for reading never needs the right to write. The stores of a
//! multi-field dataset are always opened read-only; a single loaderx store is opened
//! writable when the user may write it (so that delete and compact work) and read-only
//! when the system refuses (EACCES, EROFS), unless [`DatasetOptions::read_only`] says which.

mod convert;
mod parts;
mod tokens;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use zrecord_core::dataset::{Field, Layout, Manifest, ShardGroup, MANIFEST_FILE, MAX_MANIFEST_LEN};
use zrecord_core::error::{Error, FormatError, IoError, IoErrorKind};
use zrecord_core::schema::{Schema, SCHEMA_FILE};
use zrecord_core::stream::DatasetId;

pub use convert::{export_npy, import_npy, ExportTo, ImportOptions, Imported, OFFSETS_SUFFIX};
pub use parts::{commit_local, commit_remote, finish_part, part_dir, Part};
pub use tokens::{import_tokens, TokensImported};
pub use write::{Column, DatasetWriter, WriteOptions};

use crate::{FixedSlots, OpenOptions, Pick, Verify, Zrecord};

/// The field name of a single-store (loaderx) dataset.
pub const LEGACY_FIELD: &str = "data";

/// A failure of a dataset operation, naming the store (the shard's field folder, or the
/// dataset directory) and the field it happened in. [`DatasetError::code`] is the inner
/// store error's stable code.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {source}", .path.display(), field_note(.field))]
pub struct DatasetError {
    /// The store directory (or the dataset directory, for errors above the stores).
    pub path: PathBuf,
    /// The field, when the error belongs to one.
    pub field: Option<String>,
    /// What went wrong.
    #[source]
    pub source: Error,
    /// True when the error is in the dataset's metadata file (`dataset.json` or a
    /// `schema.json`: unreadable, not JSON, not a zrecord dataset), not in a store.
    pub metadata: bool,
}

fn field_note(field: &Option<String>) -> String {
    field.as_ref().map(|f| format!(" (field {f:?})")).unwrap_or_default()
}

impl DatasetError {
    /// The stable numeric code of the inner error ([`Error::code`]).
    pub fn code(&self) -> i32 {
        self.source.code()
    }

    /// The record of the store at [`DatasetError::path`] that failed its checksum or its
    /// decode, when that is what happened.
    pub fn record(&self) -> Option<u64> {
        match self.source {
            Error::Checksum { index, .. } | Error::Decode { index, .. } => Some(index),
            _ => None,
        }
    }

    pub(crate) fn at(path: &Path, field: Option<&str>, source: impl Into<Error>) -> Self {
        DatasetError {
            path: path.to_path_buf(),
            field: field.map(str::to_owned),
            source: source.into(),
            metadata: false,
        }
    }

    /// An error in the metadata file at `file`.
    pub(crate) fn in_metadata(file: &Path, source: impl Into<Error>) -> Self {
        DatasetError { metadata: true, ..DatasetError::at(file, None, source) }
    }
}

/// How to open a dataset in an object store ([`Dataset::open_remote_with`]).
#[derive(Clone, Debug, Default)]
pub struct RemoteOptions {
    /// When reads check checksums.
    pub verify: Verify,
    /// Bytes of fetched records kept: in memory (default
    /// [`crate::remote::file::CACHE_BYTES`]), or with `cache_dir` on disk (default
    /// [`crate::remote::file::DISK_CACHE_BYTES`]), in memory then at most the lesser of
    /// this and the memory default.
    pub cache_bytes: Option<u64>,
    /// A local directory keeping fetched records and metadata across runs
    /// ([`crate::remote::disk`]); one process uses it at a time.
    pub cache_dir: Option<PathBuf>,
}

/// How to open a dataset.
#[derive(Clone, Copy, Debug, Default)]
pub struct DatasetOptions {
    /// `Some(true)`: refuse every change; `Some(false)`: open a single store writable (an
    /// error when that is not allowed); `None` (default): writable when allowed.
    pub read_only: Option<bool>,
    /// When reads check checksums (default [`Verify::Auto`]).
    pub verify: Verify,
}

/// One shard: where it lives, and one store per field.
struct Shard {
    dir: PathBuf,
    stores: Vec<Arc<Zrecord>>,
}

/// An open dataset: fields, shards, and the index space `0..len()` over them.
pub struct Dataset {
    path: PathBuf,
    fields: Vec<Field>,
    /// Bytes per sample of each fixed field (0 for a ragged one).
    sample_lens: Vec<usize>,
    /// Bytes per element of each field.
    itemsizes: Vec<usize>,
    shards: Vec<Shard>,
    layout: Layout,
    /// `None` for a single store (a loaderx dataset) or stores handed over by the caller.
    manifest: Option<Manifest>,
    read_only: bool,
    /// A dataset read from an object store: the record data it keeps.
    cache: Option<Arc<crate::remote::file::Cache>>,
}

/// Reads a small metadata file, refusing anything but a regular file of at most `cap`
/// bytes (a FIFO, a device or a huge file is an error, not a hang).
pub(crate) fn read_meta_file(path: &Path, cap: u64) -> Result<Vec<u8>, Error> {
    let io = |e: std::io::Error| Error::Io(IoError::from_std(e, format!("read {}", path.display())));
    zrecord_core::io::std_dir::read_capped(path, cap)
        .map_err(io)?
        .ok_or_else(|| io(std::io::Error::from(std::io::ErrorKind::NotFound)))
}

/// Opens the existing store in `path` with `options`, read-only when `read_only` says so,
/// writable when it says `Some(false)`, and when it is `None` writable if the system
/// allows it and read-only if it refuses (EACCES, EROFS: another owner, `chmod -w`, a
/// read-only mount). Returns the store and whether it is read-only.
pub fn open_store(path: &Path, options: OpenOptions, read_only: Option<bool>) -> Result<(Zrecord, bool), Error> {
    let with = |ro: bool| OpenOptions { read_only: ro, create: options.create && !ro, ..options };
    match read_only {
        Some(ro) => Ok((Zrecord::open_with(path, with(ro))?, ro)),
        None => match Zrecord::open_with(path, with(false)) {
            Ok(store) => Ok((store, false)),
            Err(e) if permission_denied(&e) => Ok((Zrecord::open_with(path, with(true))?, true)),
            Err(e) => Err(e),
        },
    }
}

fn permission_denied(e: &Error) -> bool {
    matches!(e, Error::Io(IoError { kind: IoErrorKind::PermissionDenied, .. }))
}

impl Dataset {
    /// Opens the dataset in `path` for reading (see the module docs for what is locked).
    pub fn open(path: impl AsRef<Path>) -> Result<Dataset, DatasetError> {
        Self::open_with(path, DatasetOptions::default())
    }

    /// Opens with explicit options. A URL (`s3://`, `gs://`, `az://`, `https://`) opens a
    /// pushed dataset with the environment's credentials ([`Dataset::open_remote`]).
    pub fn open_with(path: impl AsRef<Path>, opts: DatasetOptions) -> Result<Dataset, DatasetError> {
        let path = path.as_ref().to_path_buf();
        if let Some(url) = path.to_str().filter(|p| crate::remote::is_url(p)) {
            return Self::open_remote(url, &[], opts.verify);
        }
        let manifest_path = path.join(MANIFEST_FILE);
        if manifest_path.exists() {
            let bytes =
                read_meta_file(&manifest_path, MAX_MANIFEST_LEN).map_err(|e| DatasetError::at(&path, None, e))?;
            let manifest = Manifest::from_json(&bytes).map_err(|e| DatasetError::in_metadata(&manifest_path, e))?;
            if opts.read_only == Some(false) {
                return Err(DatasetError::at(
                    &path,
                    None,
                    Error::InvalidArgument(
                        "a multi-field dataset is opened read-only; add samples with DatasetWriter".into(),
                    ),
                ));
            }
            return Self::from_manifest(path, manifest, opts.verify);
        }
        Self::open_single(path, opts)
    }

    /// Opens the dataset (or store) pushed to `url` ([`crate::remote`]), read-only, with
    /// `options` (object_store's configuration keys) over the environment's.
    pub fn open_remote(url: &str, options: &[(String, String)], verify: Verify) -> Result<Dataset, DatasetError> {
        Self::open_remote_with(url, options, RemoteOptions { verify, ..RemoteOptions::default() })
    }

    /// [`Dataset::open_remote`] with a cache of `opts.cache_bytes` (in memory, or with
    /// `opts.cache_dir` on local disk there; see [`RemoteOptions`]). Fails also when another
    /// process uses the cache directory.
    pub fn open_remote_with(
        url: &str,
        options: &[(String, String)],
        opts: RemoteOptions,
    ) -> Result<Dataset, DatasetError> {
        use crate::remote::file::{Cache, RemoteDir, CACHE_BYTES, DISK_CACHE_BYTES};
        use crate::remote::{objects, push::read_listing, Remote};
        let verify = opts.verify;
        let path = PathBuf::from(url.trim_end_matches('/'));
        let at = |e: IoError| DatasetError::at(&path, None, Error::Io(e));
        let cache = match &opts.cache_dir {
            Some(dir) => {
                let disk = crate::remote::disk::DiskCache::open(dir, opts.cache_bytes.unwrap_or(DISK_CACHE_BYTES))
                    .map_err(|e| DatasetError::at(dir, None, e))?;
                let cache = Cache::new(opts.cache_bytes.unwrap_or(CACHE_BYTES).min(CACHE_BYTES));
                cache.set_disk(disk);
                cache
            }
            None => Cache::new(opts.cache_bytes.unwrap_or(CACHE_BYTES)),
        };
        let remote = Remote::open(url, options).map_err(at)?;
        let Some((bytes, _, _)) = read_listing(&remote).map_err(at)? else {
            return Err(at(IoError::new(
                IoErrorKind::NotFound,
                format!("open {}", remote.shown(objects::LISTING)),
                "no pushed dataset here (remote.json is missing: never pushed, or a push that did not finish)",
            )));
        };
        let listing = objects::Objects::from_json(&bytes, &remote.shown(objects::LISTING)).map_err(at)?;
        cache.set_data(listing.stored_bytes());
        let root = RemoteDir::cached(&remote, &listing, "", cache.clone(), 0);
        let open_store = |dir: &str, codec, field: &str, base: u64| {
            let store_dir = RemoteDir::cached(&remote, &listing, dir, cache.clone(), base);
            let options = OpenOptions { create: false, read_only: true, codec, verify, ..OpenOptions::default() };
            Zrecord::open_remote(store_dir, options).map_err(|e| DatasetError::at(&path.join(dir), Some(field), e))
        };
        if listing.kind == "dataset" {
            let manifest_path = path.join(MANIFEST_FILE);
            let bytes = root.read_whole(MANIFEST_FILE).map_err(at)?.ok_or_else(|| {
                at(IoError::new(IoErrorKind::NotFound, format!("open {}", manifest_path.display()), "not pushed"))
            })?;
            let manifest = Manifest::from_json(&bytes).map_err(|e| DatasetError::in_metadata(&manifest_path, e))?;
            let mut shards = Vec::with_capacity(manifest.shards.len());
            let mut base = 0u64;
            for entry in &manifest.shards {
                let mut stores = Vec::with_capacity(manifest.fields.len());
                for field in &manifest.fields {
                    let codec =
                        field.codec().map_err(|e| DatasetError::at(&path, Some(&field.name), Error::from(e)))?;
                    let store = open_store(&format!("{}/{}", entry.dir, field.name), codec, &field.name, base)?;
                    stores.push(Arc::new(store));
                }
                base += entry.records;
                shards.push(Shard { dir: path.join(&entry.dir), stores });
            }
            let layout = manifest.layout();
            let mut ds = Self::assemble(path.clone(), manifest.fields.clone(), shards, layout, Some(manifest), true)?;
            ds.cache = Some(cache);
            return Ok(ds);
        }
        let schema_path = path.join(SCHEMA_FILE);
        let bytes = root.read_whole(SCHEMA_FILE).map_err(at)?.ok_or_else(|| {
            at(IoError::new(IoErrorKind::NotFound, format!("open {}", schema_path.display()), "not pushed"))
        })?;
        let schema = Schema::from_json(&bytes).map_err(|e| DatasetError::in_metadata(&schema_path, e))?;
        let codec = zrecord_core::Codec::from_name(&schema.codec).unwrap_or(zrecord_core::Codec::Flate);
        let store = open_store("", codec, LEGACY_FIELD, 0)?;
        let field = Field::fixed(LEGACY_FIELD, &schema.dtype, &schema.shape, codec);
        let layout = Layout::new([u64::from(store.len())]);
        let shard = Shard { dir: path.clone(), stores: vec![Arc::new(store)] };
        let mut ds = Self::assemble(path.clone(), vec![field], vec![shard], layout, None, true)?;
        ds.cache = Some(cache);
        Ok(ds)
    }

    /// The record data a dataset read from an object store keeps (`None` when local).
    pub fn cache(&self) -> Option<&Arc<crate::remote::file::Cache>> {
        self.cache.as_ref()
    }

    /// What reading this dataset from an object store cost so far (`None` when local).
    pub fn remote_stats(&self) -> Option<crate::remote::RemoteCounts> {
        let mut counts = self.shards.first()?.stores.first()?.remote_stats()?;
        if let Some(disk) = self.cache.as_ref().and_then(|c| c.disk()) {
            counts.disk_hits = disk.hits.load(std::sync::atomic::Ordering::Relaxed);
            counts.disk_bytes = disk.hit_bytes.load(std::sync::atomic::Ordering::Relaxed);
        }
        Some(counts)
    }

    fn from_manifest(path: PathBuf, manifest: Manifest, verify: Verify) -> Result<Dataset, DatasetError> {
        let mut shards = Vec::with_capacity(manifest.shards.len());
        for entry in &manifest.shards {
            let dir = path.join(&entry.dir);
            let mut stores = Vec::with_capacity(manifest.fields.len());
            for field in &manifest.fields {
                let store_dir = dir.join(&field.name);
                let at = |e: Error| DatasetError::at(&store_dir, Some(&field.name), e);
                let options = OpenOptions {
                    create: false,
                    read_only: true,
                    codec: field.codec().map_err(|e| at(e.into()))?,
                    verify,
                    ..OpenOptions::default()
                };
                let store = Zrecord::open_with(&store_dir, options).map_err(at)?;
                if u64::from(store.len()) < entry.records {
                    return Err(at(FormatError::Container(format!(
                        "holds {} records but {MANIFEST_FILE} lists {} for shard {:?}",
                        store.len(),
                        entry.records,
                        entry.dir
                    ))
                    .into()));
                }
                stores.push(Arc::new(store));
            }
            shards.push(Shard { dir, stores });
        }
        let layout = manifest.layout();
        Self::assemble(path, manifest.fields.clone(), shards, layout, Some(manifest), true)
    }

    fn open_single(path: PathBuf, opts: DatasetOptions) -> Result<Dataset, DatasetError> {
        let schema_path = path.join(SCHEMA_FILE);
        let at = |e: Error| DatasetError::at(&path, Some(LEGACY_FIELD), e);
        if !schema_path.exists() {
            let what = if path.is_dir() {
                format!("holds neither {MANIFEST_FILE} nor {SCHEMA_FILE}: not a dataset")
            } else {
                "no such dataset directory".into()
            };
            return Err(at(Error::Io(IoError::new(IoErrorKind::NotFound, format!("open {}", path.display()), what))));
        }
        let bytes =
            read_meta_file(&schema_path, MAX_MANIFEST_LEN).map_err(|e| DatasetError::in_metadata(&schema_path, e))?;
        let schema = Schema::from_json(&bytes).map_err(|e| DatasetError::in_metadata(&schema_path, e))?;
        let codec = zrecord_core::Codec::from_name(&schema.codec).unwrap_or(zrecord_core::Codec::Flate);
        let options = OpenOptions { create: false, codec, verify: opts.verify, ..OpenOptions::default() };
        let (store, read_only) = open_store(&path, options, opts.read_only).map_err(at)?;
        let field = Field::fixed(LEGACY_FIELD, &schema.dtype, &schema.shape, codec);
        let layout = Layout::new([u64::from(store.len())]);
        let shard = Shard { dir: path.clone(), stores: vec![Arc::new(store)] };
        Self::assemble(path, vec![field], vec![shard], layout, None, read_only)
    }

    /// A dataset over stores the caller opened: one shard, one store per field. Fixed
    /// fields read records zero-padded to their sample size (as loaderx does for records
    /// shorter than the schema says), and fail on longer ones.
    pub fn from_stores(fields: Vec<(Field, Arc<Zrecord>)>) -> Result<Dataset, DatasetError> {
        let Some((_, first)) = fields.first() else {
            return Err(DatasetError::at(
                Path::new("."),
                None,
                Error::InvalidArgument("a dataset needs a field".into()),
            ));
        };
        let length = first.len();
        let path = first.path().to_path_buf();
        for (field, store) in &fields {
            if store.len() != length {
                return Err(DatasetError::at(
                    store.path(),
                    Some(&field.name),
                    Error::InvalidArgument(format!(
                        "the fields of a dataset must have the same length: {} has {} records, {} has {length}",
                        store.path().display(),
                        store.len(),
                        first.path().display()
                    )),
                ));
            }
        }
        let (defs, stores): (Vec<Field>, Vec<Arc<Zrecord>>) = fields.into_iter().unzip();
        let read_only = true;
        let shard = Shard { dir: path.clone(), stores };
        Self::assemble(path, defs, vec![shard], Layout::new([u64::from(length)]), None, read_only)
    }

    fn assemble(
        path: PathBuf,
        fields: Vec<Field>,
        shards: Vec<Shard>,
        layout: Layout,
        manifest: Option<Manifest>,
        read_only: bool,
    ) -> Result<Dataset, DatasetError> {
        let mut sample_lens = Vec::with_capacity(fields.len());
        let mut itemsizes = Vec::with_capacity(fields.len());
        for f in &fields {
            let at = |e: FormatError| DatasetError::at(&path, Some(&f.name), e);
            sample_lens.push(f.sample_len().map_err(at)?.unwrap_or(0) as usize);
            itemsizes.push(f.itemsize().map_err(at)? as usize);
        }
        Ok(Dataset { path, fields, sample_lens, itemsizes, shards, layout, manifest, read_only, cache: None })
    }

    /// The dataset directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fields, in batch order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The position of the field called `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Bytes of one sample of fixed field `f` (0 for a ragged field).
    pub fn sample_len(&self, f: usize) -> usize {
        self.sample_lens[f]
    }

    /// Bytes of one element of field `f`.
    pub fn itemsize(&self, f: usize) -> usize {
        self.itemsizes[f]
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.layout.len()
    }

    /// True when the dataset holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The manifest, for a multi-field (or sharded) dataset.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// True when this handle may not change the dataset.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The folder of shard `s` (the dataset directory itself for a single store).
    pub fn shard_dir(&self, s: usize) -> &Path {
        &self.shards[s].dir
    }

    /// The first dataset index of shard `s`.
    pub fn shard_start(&self, s: usize) -> u64 {
        self.layout.start(s)
    }

    /// The store of field `f` in shard `s`.
    pub fn store(&self, s: usize, f: usize) -> &Arc<Zrecord> {
        &self.shards[s].stores[f]
    }

    /// Every store, shard by shard, field by field.
    pub fn stores(&self) -> impl Iterator<Item = &Arc<Zrecord>> {
        self.shards.iter().flat_map(|s| s.stores.iter())
    }

    /// The dataset as a stream's input: its length and every store's generation combined
    /// ([`DatasetId::of_stores`]), so that a change to any store invalidates saved states.
    pub fn id(&self) -> Result<DatasetId, DatasetError> {
        let mut generations = Vec::new();
        for (shard, store, field) in self.each_store() {
            generations.push(store.generation().map_err(|e| self.error(shard, field, e))?);
        }
        Ok(DatasetId::of_stores(self.len(), generations))
    }

    fn each_store(&self) -> impl Iterator<Item = (usize, &Arc<Zrecord>, usize)> {
        self.shards
            .iter()
            .enumerate()
            .flat_map(|(s, shard)| shard.stores.iter().enumerate().map(move |(f, st)| (s, st, f)))
    }

    /// An error of field `f`'s store in shard `s`.
    pub(crate) fn error(&self, s: usize, f: usize, e: Error) -> DatasetError {
        DatasetError::at(self.shards[s].stores[f].path(), Some(&self.fields[f].name), e)
    }

    fn out_of_range(&self, index: u64) -> DatasetError {
        // Store errors carry a u32 length; a dataset's may be larger, so say it in words.
        DatasetError::at(
            &self.path,
            None,
            Error::InvalidArgument(format!("index {index} is out of range for a dataset of {} samples", self.len())),
        )
        .with_code_of_index_error(index, self.len())
    }

    fn group(&self, indices: &[u64]) -> Result<Vec<ShardGroup>, DatasetError> {
        self.layout.group(indices).map_err(|k| self.out_of_range(indices[k]))
    }

    /// Decodes fixed field `f` of sample `indices[k]` into `dst[slot(k) * sample_len..]`,
    /// where `slot(k)` is `slots[k]`, or `k` when `slots` is `None`.
    ///
    /// Records shorter than the sample (stores written by others) are zero-padded when
    /// `dirty` says `dst` may hold old bytes; a fresh zeroed buffer needs no padding.
    pub fn gather_fixed(
        &self,
        f: usize,
        indices: &[u64],
        dst: &mut [u8],
        slots: Option<&[usize]>,
        dirty: bool,
    ) -> Result<(), DatasetError> {
        let size = self.sample_lens[f];
        if self.fields[f].is_ragged() {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.fields[f].name),
                Error::InvalidArgument("a ragged field has no fixed sample size: gather it with gather_ragged".into()),
            ));
        }
        let slots_len = slots.map_or(indices.len(), |s| s.iter().max().map_or(0, |&m| m + 1));
        if dst.len() < slots_len * size {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.fields[f].name),
                Error::BufferTooSmall(format!("{} samples of {size} bytes into {} bytes", slots_len, dst.len())),
            ));
        }
        if self.shards.len() == 1 && slots.is_none() {
            // One store, every slot in order: its strided gather (which checks that each
            // record fits its slot), then the slack of short records cleared.
            let store = self.store(0, f);
            if let Some(k) = indices.iter().position(|&i| i >= self.len()) {
                return Err(self.out_of_range(indices[k]));
            }
            store.gather(indices, dst, size).map_err(|e| self.error(0, f, e))?;
            if dirty {
                let mut lengths = vec![0u32; indices.len()];
                store.lengths(indices, &mut lengths).map_err(|e| self.error(0, f, e))?;
                for (k, &len) in lengths.iter().enumerate() {
                    dst[k * size + len as usize..(k + 1) * size].fill(0);
                }
            }
            return Ok(());
        }
        let place = |k: usize| slots.map_or(k, |sl| sl[k]);
        let picks = self.picks(indices, |k| (place(k) * size) as u64)?;
        self.gather_picks(f, &picks, dst, Some(FixedSlots { size, clear: dirty }))
    }

    /// About one round trip to the object store the dataset is read from, in seconds
    /// (`None` for a local dataset, or before the first request).
    pub fn round_trip(&self) -> Option<f64> {
        self.shards.first()?.stores.first()?.round_trip()
    }

    /// A read-ahead: every field's records of samples `indices` start on their way (an
    /// object store sends the requests now; a local dataset does nothing). Reads nothing,
    /// reports nothing: the reads that follow report what is wrong.
    pub fn will_read(&self, indices: &[u64]) {
        if self.cache.is_none() {
            return;
        }
        let mut per_shard: Vec<Vec<u64>> = vec![Vec::new(); self.shards.len()];
        for &i in indices {
            if let Some((s, index)) = self.layout.locate(i) {
                per_shard[s].push(index);
            }
        }
        for (shard, local) in self.shards.iter().zip(&per_shard) {
            if local.is_empty() {
                continue;
            }
            for store in &shard.stores {
                let _ = store.will_read(local);
            }
        }
    }

    /// Where each of `indices` lives: its shard and record there, and the destination
    /// offset `offset(k)` of sample `k`.
    fn picks(&self, indices: &[u64], offset: impl Fn(usize) -> u64) -> Result<Vec<Pick>, DatasetError> {
        let mut picks = Vec::with_capacity(indices.len());
        for (k, &i) in indices.iter().enumerate() {
            let (store, index) = self.layout.locate(i).ok_or_else(|| self.out_of_range(i))?;
            picks.push(Pick { store, index, offset: offset(k) });
        }
        Ok(picks)
    }

    /// Field `f` of every pick (its `store` a shard number) into `dst`, one parallel pass
    /// over all shards.
    fn gather_picks(
        &self,
        f: usize,
        picks: &[Pick],
        dst: &mut [u8],
        fixed: Option<FixedSlots>,
    ) -> Result<(), DatasetError> {
        let stores: Vec<&Zrecord> = self.shards.iter().map(|shard| &*shard.stores[f]).collect();
        Zrecord::gather_stores(&stores, picks, dst, fixed).map_err(|(s, e)| self.error(s, f, e))
    }

    /// The byte length of field `f` of each sample in `indices`, into `out`.
    pub fn byte_lengths(&self, f: usize, indices: &[u64], out: &mut [u64]) -> Result<(), DatasetError> {
        let groups = self.group(indices)?;
        let mut lengths: Vec<u32> = Vec::new();
        for (s, local, slots) in groups {
            lengths.clear();
            lengths.resize(local.len(), 0);
            self.store(s, f).lengths(&local, &mut lengths).map_err(|e| self.error(s, f, e))?;
            for (&slot, &len) in slots.iter().zip(&lengths) {
                out[slot] = u64::from(len);
            }
        }
        Ok(())
    }

    /// Decodes field `f` of sample `indices[k]` into `dst` at byte `offsets[k]` (each must
    /// have room for the sample's [`Dataset::byte_lengths`]): the ragged gather.
    pub fn gather_at(&self, f: usize, indices: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<(), DatasetError> {
        if offsets.len() != indices.len() {
            return Err(DatasetError::at(
                &self.path,
                Some(&self.fields[f].name),
                Error::InvalidArgument(format!("{} offsets for {} indices", offsets.len(), indices.len())),
            ));
        }
        let picks = self.picks(indices, |k| offsets[k])?;
        self.gather_picks(f, &picks, dst, None)
    }

    /// Field `f` of the samples `indices`, ragged or fixed, as the flat bytes of all of
    /// them and the byte offset of each (`indices.len() + 1` offsets, starting at 0).
    pub fn gather_ragged(&self, f: usize, indices: &[u64]) -> Result<(Vec<u8>, Vec<u64>), DatasetError> {
        let mut lengths = vec![0u64; indices.len()];
        self.byte_lengths(f, indices, &mut lengths)?;
        let mut offsets = Vec::with_capacity(indices.len() + 1);
        let mut total = 0u64;
        offsets.push(0);
        for &len in &lengths {
            total += len;
            offsets.push(total);
        }
        let mut values = vec![0u8; total as usize];
        self.gather_at(f, indices, &mut values, &offsets[..indices.len()])?;
        Ok((values, offsets))
    }

    /// Footprint of every store in bytes ([`Zrecord::footprint`]).
    pub fn footprint(&self) -> u64 {
        self.stores().map(|s| s.footprint()).sum()
    }
}

impl DatasetError {
    /// An index past the end is `IndexOutOfRange` (code -3, loaderx's) when the numbers
    /// fit the store error; otherwise the invalid-argument error as built.
    fn with_code_of_index_error(mut self, index: u64, length: u64) -> Self {
        if let Ok(length) = u32::try_from(length) {
            self.source = Error::IndexOutOfRange { index, length };
        }
        self
    }
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("path", &self.path)
            .field("fields", &self.fields.iter().map(|f| &f.name).collect::<Vec<_>>())
            .field("len", &self.len())
            .field("shards", &self.shards.len())
            .field("read_only", &self.read_only)
            .finish()
    }
}
