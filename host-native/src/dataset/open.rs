//! Opening a dataset: from its manifest, from a single loaderx store, from an object
//! store, or over stores the caller opened; and the options that say how.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use zrecord_core::dataset::{Field, Layout, Manifest, MANIFEST_FILE, MAX_MANIFEST_LEN};
use zrecord_core::error::{Error, FormatError, IoError, IoErrorKind};
use zrecord_core::schema::{Schema, SCHEMA_FILE};

use super::{Dataset, DatasetError, Shard, LEGACY_FIELD};
use crate::{OpenOptions, Verify, Zrecord};

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
    /// ([`crate::remote::disk`]); processes may share it.
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

/// Stores of a remote dataset opened side by side at most (each waits on the network).
const OPEN_AT_ONCE: usize = 32;

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
    /// Opens the dataset in `path` for reading (see the [`dataset`](super) module docs for
    /// what is locked).
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
            if opts.read_only == Some(false) {
                return Err(DatasetError::at(
                    &path,
                    None,
                    Error::InvalidArgument(
                        "a multi-field dataset is opened read-only; add samples with DatasetWriter".into(),
                    ),
                ));
            }
            let read =
                || read_meta_file(&manifest_path, MAX_MANIFEST_LEN).map_err(|e| DatasetError::at(&path, None, e));
            // The manifest alone: each shard's stores open when first read (`shard.rs`).
            let bytes = read()?;
            let manifest = Manifest::from_json(&bytes).map_err(|e| DatasetError::in_metadata(&manifest_path, e))?;
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
        let path = PathBuf::from(url.trim_end_matches('/'));
        let remote =
            crate::remote::Remote::open(url, options).map_err(|e| DatasetError::at(&path, None, Error::Io(e)))?;
        Self::open_remote_in(&remote, opts)
    }

    /// [`Dataset::open_remote_with`] at a location already configured.
    pub(crate) fn open_remote_in(remote: &crate::remote::Remote, opts: RemoteOptions) -> Result<Dataset, DatasetError> {
        use crate::remote::file::{Cache, RemoteDir, CACHE_BYTES, DISK_CACHE_BYTES};
        use crate::remote::objects;
        use crate::remote::push::{read_listing, read_object};
        let verify = opts.verify;
        let path = PathBuf::from(remote.url());
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
        // The listing and a dataset's manifest side by side: one round trip, not two. The
        // manifest, read before the listing that pins it, counts only if its bytes are the
        // ones the listing recorded; otherwise it is read again, pinned.
        let (listing, early) = std::thread::scope(|scope| {
            let early = scope.spawn(|| read_object(remote, MANIFEST_FILE).ok().flatten());
            (read_listing(remote), early.join().ok().flatten())
        });
        let Some((bytes, _, _)) = listing.map_err(at)? else {
            return Err(at(crate::remote::push::missing_listing(remote, "open")));
        };
        let listing = objects::Objects::from_json(&bytes, &remote.shown(objects::LISTING)).map_err(at)?;
        cache.set_data(listing.stored_bytes());
        let root = RemoteDir::cached(remote, &listing, "", cache.clone(), 0);
        let open_store = |dir: &str, codec, field: &str, base: u64| {
            let store_dir = RemoteDir::cached(remote, &listing, dir, cache.clone(), base);
            store_dir.start_metadata();
            let options = OpenOptions { create: false, read_only: true, codec, verify, ..OpenOptions::default() };
            Zrecord::open_remote(store_dir, options).map_err(|e| DatasetError::at(&path.join(dir), Some(field), e))
        };
        if listing.kind == "dataset" {
            let manifest_path = path.join(MANIFEST_FILE);
            let recorded = listing.objects.get(MANIFEST_FILE);
            let bytes = match (listing.manifest_bytes(), early) {
                (Some(inline), _) => inline,
                (None, Some((bytes, _, _))) if recorded.is_some_and(|o| objects::holds(o, &bytes)) => bytes,
                _ => root.read_whole(MANIFEST_FILE).map_err(at)?.ok_or_else(|| {
                    at(IoError::new(IoErrorKind::NotFound, format!("open {}", manifest_path.display()), "not pushed"))
                })?,
            };
            let manifest = Manifest::from_json(&bytes).map_err(|e| DatasetError::in_metadata(&manifest_path, e))?;
            // Each store's opening is a round trip or two (its table header, its checksum
            // header): opened side by side, a dataset of many shards opens in a few round
            // trips instead of two per store.
            let mut wanted = Vec::new();
            let mut base = 0u64;
            for entry in &manifest.shards {
                for field in &manifest.fields {
                    let codec =
                        field.codec().map_err(|e| DatasetError::at(&path, Some(&field.name), Error::from(e)))?;
                    wanted.push((format!("{}/{}", entry.dir, field.name), codec, field.name.as_str(), base));
                }
                base += entry.records;
            }
            let mut opened = Vec::with_capacity(wanted.len());
            for group in wanted.chunks(OPEN_AT_ONCE) {
                opened.extend(std::thread::scope(|scope| {
                    let open_one = &open_store;
                    let handles: Vec<_> = group
                        .iter()
                        .map(|(dir, codec, field, base)| scope.spawn(move || open_one(dir, *codec, field, *base)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                        .collect::<Vec<_>>()
                }));
            }
            let mut opened = opened.into_iter();
            let mut shards = Vec::with_capacity(manifest.shards.len());
            for entry in &manifest.shards {
                let stores = opened
                    .by_ref()
                    .take(manifest.fields.len())
                    .map(|r| r.map(Arc::new))
                    .collect::<Result<Vec<_>, _>>()?;
                let dir = path.join(&entry.dir);
                shards.push(Shard::open_now(dir, entry.records, entry.long.clone(), &manifest.fields, stores)?);
            }
            let layout = manifest.layout();
            let mut ds =
                Self::assemble(path.clone(), manifest.fields.clone(), shards, layout, Some(manifest), true, verify)?;
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
        let records = u64::from(store.len());
        let shard = Shard::open_now(path.clone(), records, Vec::new(), &[], vec![Arc::new(store)])?;
        let mut ds =
            Self::assemble(path.clone(), vec![field], vec![shard], Layout::new([records]), None, true, verify)?;
        ds.cache = Some(cache);
        Ok(ds)
    }

    fn from_manifest(path: PathBuf, manifest: Manifest, verify: Verify) -> Result<Dataset, DatasetError> {
        let shards = manifest
            .shards
            .iter()
            .map(|entry| Shard::listed(path.join(&entry.dir), entry.records, entry.long.clone()))
            .collect();
        let layout = manifest.layout();
        Self::assemble(path, manifest.fields.clone(), shards, layout, Some(manifest), true, verify)
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
        let records = u64::from(store.len());
        let shard = Shard::open_now(path.clone(), records, Vec::new(), &[], vec![Arc::new(store)])?;
        Self::assemble(path, vec![field], vec![shard], Layout::new([records]), None, read_only, opts.verify)
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
        let verify = stores[0].verify_mode();
        let shard = Shard::open_now(path.clone(), u64::from(length), Vec::new(), &[], stores)?;
        Self::assemble(path, defs, vec![shard], Layout::new([u64::from(length)]), None, read_only, verify)
    }

    fn assemble(
        path: PathBuf,
        fields: Vec<Field>,
        shards: Vec<Shard>,
        layout: Layout,
        manifest: Option<Manifest>,
        read_only: bool,
        verify: Verify,
    ) -> Result<Dataset, DatasetError> {
        let mut sample_lens = Vec::with_capacity(fields.len());
        let mut itemsizes = Vec::with_capacity(fields.len());
        for f in &fields {
            let at = |e: FormatError| DatasetError::at(&path, Some(&f.name), e);
            sample_lens.push(f.sample_len().map_err(at)?.unwrap_or(0) as usize);
            itemsizes.push(f.itemsize().map_err(at)? as usize);
        }
        Ok(Dataset {
            path,
            fields,
            sample_lens,
            itemsizes,
            shards,
            layout,
            manifest,
            read_only,
            cache: None,
            view: None,
            verify,
        })
    }
}
