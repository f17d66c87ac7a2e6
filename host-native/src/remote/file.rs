//! One pushed file read over the network ([`RemoteFile`]), and a pushed store directory as
//! the engine's [`Backend`] ([`RemoteDir`]).
//!
//! Metadata files (`meta.zr`, `checksums.zrc`) are read in aligned blocks of
//! [`META_BLOCK`] bytes and kept: a table lookup or a checksum slot is a few bytes, and one
//! request per record would be absurd. Chunk files are read by exact byte ranges: the
//! engine announces a batch's records ([`StorageFile::will_need`]) before it reads them,
//! and the first read sends them all at once, neighbours merged into one request when the
//! gap between them costs less than a round trip ([`MERGE_GAP`]) and each request capped
//! at [`MAX_SPAN`]. Fetched ranges are kept up to a byte budget, oldest dropped first.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use object_store::{GetOptions, GetRange};
use zrecord_core::error::{Error, IoError, IoErrorKind};
use zrecord_core::io::{Backend, LockMode, StorageFile};

use super::objects::{Object, Objects};
use super::Remote;

/// Bytes per block of a metadata file.
pub const META_BLOCK: u64 = 1 << 20;
/// Largest gap between two wanted ranges that one request spans (reading 256 KiB more
/// costs less than a round trip to an object store: about 30 ms at 10 MB/s, where a request
/// costs 20-100 ms of latency).
pub const MERGE_GAP: u64 = 256 << 10;
/// Largest single request.
pub const MAX_SPAN: u64 = 16 << 20;
/// Bytes of chunk data kept per file before the oldest ranges are dropped.
pub const KEEP_BYTES: u64 = 256 << 20;

type Fetch = Shared<BoxFuture<'static, Result<Bytes, Arc<IoError>>>>;

/// Ranges of a file fetched or on their way, by start offset.
#[derive(Default)]
struct Spans {
    map: BTreeMap<u64, (u64, Fetch)>,
    /// Starts in the order they were fetched, for dropping the oldest.
    order: VecDeque<u64>,
    held: u64,
    /// Ranges announced by `will_need` and not yet requested.
    wanted: Vec<(u64, u64)>,
}

/// A pushed file: ranged GETs with `If-Match`, zeros past the stored bytes.
pub struct RemoteFile {
    remote: Remote,
    name: String,
    object: Object,
    metadata: bool,
    spans: Mutex<Spans>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RemoteFile {
    /// The file `name` of `remote` as `object` lists it; `metadata` files are read in
    /// whole blocks.
    pub fn new(remote: Remote, name: &str, object: Object, metadata: bool) -> RemoteFile {
        RemoteFile { remote, name: name.to_owned(), object, metadata, spans: Mutex::new(Spans::default()) }
    }

    fn shown(&self) -> String {
        self.remote.shown(&self.name)
    }

    /// Starts fetching `start..end` (within the stored bytes) and records it.
    fn spawn(&self, spans: &mut Spans, start: u64, end: u64) -> Fetch {
        let remote = self.remote.clone();
        let path = remote.path(&self.name);
        let etag = self.object.etag.clone();
        let what = format!("read {} bytes {start}..{end}", self.shown());
        let task = super::runtime().spawn(async move {
            let fetched = remote
                .retrying(&what, || {
                    let options = GetOptions {
                        range: Some(GetRange::Bounded(start..end)),
                        if_match: etag.clone(),
                        ..GetOptions::default()
                    };
                    let client = remote.client().clone();
                    let path = path.clone();
                    async move {
                        let got = client.get_opts(&path, options).await?;
                        let tag = got.meta.e_tag.clone();
                        Ok((got.bytes().await?, tag))
                    }
                })
                .await?;
            let (bytes, tag) = fetched;
            // A store that ignores If-Match still says which version it sent.
            if let (Some(want), Some(got)) = (&etag, &tag) {
                if want != got {
                    return Err(IoError::new(
                        IoErrorKind::Other,
                        what,
                        "the object changed since the dataset was pushed (its ETag differs): a running or resumed \
                         job never mixes versions; open the dataset again",
                    ));
                }
            }
            if bytes.len() as u64 != end - start {
                return Err(IoError::new(
                    IoErrorKind::UnexpectedEof,
                    what,
                    format!("{} bytes came back: the object is shorter than its listing says", bytes.len()),
                ));
            }
            remote.stats().bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok(bytes)
        });
        let fetch: Fetch = async move {
            match task.await {
                Ok(r) => r.map_err(Arc::new),
                Err(e) => Err(Arc::new(IoError::new(IoErrorKind::Other, "remote read", e.to_string()))),
            }
        }
        .boxed()
        .shared();
        spans.map.insert(start, (end, fetch.clone()));
        spans.order.push_back(start);
        spans.held += end - start;
        if !self.metadata {
            while spans.held > KEEP_BYTES && spans.order.len() > 1 {
                let old = spans.order.pop_front().expect("not empty");
                if let Some((e, _)) = spans.map.remove(&old) {
                    spans.held -= e - old;
                }
            }
        }
        fetch
    }

    /// Sends the announced ranges, merged.
    fn flush_wanted(&self, spans: &mut Spans) {
        let mut wanted = std::mem::take(&mut spans.wanted);
        wanted.sort_unstable();
        let mut run: Option<(u64, u64)> = None;
        for (s, e) in wanted {
            if covering(spans, s, e).is_some() {
                continue;
            }
            run = match run {
                Some((rs, re)) if s <= re + MERGE_GAP && e.max(re) - rs <= MAX_SPAN => Some((rs, e.max(re))),
                Some((rs, re)) => {
                    drop(self.spawn(spans, rs, re)); // the task runs on its own; a read waits for it
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some((rs, re)) = run {
            drop(self.spawn(spans, rs, re));
        }
    }

    /// Copies `start..start + buf.len()` (within the stored bytes) into `buf`.
    fn read_stored(&self, start: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let end = start + buf.len() as u64;
        let mut at = start;
        while at < end {
            let (span_start, fetch) = {
                let mut spans = lock(&self.spans);
                if !spans.wanted.is_empty() {
                    self.flush_wanted(&mut spans);
                }
                match covering(&spans, at, at + 1) {
                    Some((s, _, f)) => {
                        self.remote.stats().hits.fetch_add(1, Ordering::Relaxed);
                        (s, f)
                    }
                    None => {
                        let (s, e) = if self.metadata {
                            let s = at / META_BLOCK * META_BLOCK;
                            (s, (s + META_BLOCK).min(self.object.stored))
                        } else {
                            (at, end)
                        };
                        (s, self.spawn(&mut spans, s, e))
                    }
                }
            };
            let bytes = self.remote.block(fetch).map_err(|e| (*e).clone())?;
            let from = (at - span_start) as usize;
            let n = (bytes.len() - from).min((end - at) as usize);
            let out = (at - start) as usize;
            buf[out..out + n].copy_from_slice(&bytes[from..from + n]);
            at += n as u64;
        }
        Ok(())
    }
}

/// The fetched or pending range holding `start..end`, if one does.
fn covering(spans: &Spans, start: u64, end: u64) -> Option<(u64, u64, Fetch)> {
    let (&s, (e, f)) = spans.map.range(..=start).next_back()?;
    (*e >= end).then(|| (s, *e, f.clone()))
}

impl StorageFile for RemoteFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.object.size).ok_or_else(|| {
            IoError::new(
                IoErrorKind::UnexpectedEof,
                format!("read {} at {offset}", self.shown()),
                format!("past the end of the file ({} bytes)", self.object.size),
            )
        })?;
        let stored = self.object.stored;
        let split = (stored.clamp(offset, end) - offset) as usize;
        buf[split..].fill(0); // past the stored bytes: the file's hole
        if split > 0 {
            self.read_stored(offset, &mut buf[..split])?;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, _buf: &[u8]) -> Result<(), IoError> {
        Err(read_only(&format!("write {} at {offset}", self.shown())))
    }

    fn len(&self) -> Result<u64, IoError> {
        Ok(self.object.size)
    }

    fn set_len(&self, _len: u64) -> Result<(), IoError> {
        Err(read_only(&format!("resize {}", self.shown())))
    }

    fn sync(&self) -> Result<(), IoError> {
        Ok(())
    }

    fn resident(&self, offset: u64) -> bool {
        offset >= self.object.stored || covering(&lock(&self.spans), offset, offset + 1).is_some()
    }

    fn will_need(&self, offset: u64, len: u64) {
        let end = offset.saturating_add(len).min(self.object.stored);
        if offset < end {
            lock(&self.spans).wanted.push((offset, end));
        }
    }
}

fn read_only(what: &str) -> IoError {
    IoError::new(IoErrorKind::PermissionDenied, what, "a remote dataset is read-only (push a new one to change it)")
}

/// A pushed store directory: its files as the listing names them.
pub struct RemoteDir {
    remote: Remote,
    /// The directory's files, by name.
    files: HashMap<String, Object>,
}

impl RemoteDir {
    /// The store directory `dir` (`""` for the root) of the pushed `listing` at `remote`.
    pub fn new(remote: &Remote, listing: &Objects, dir: &str) -> RemoteDir {
        let files = listing.under(dir).into_iter().collect();
        let remote = if dir.is_empty() { remote.clone() } else { remote.child(dir) };
        RemoteDir { remote, files }
    }

    /// The directory's location.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Whether the directory holds file `name`.
    pub fn has(&self, name: &str) -> bool {
        self.files.contains_key(name)
    }

    /// File `name` of the directory, read in whole blocks (a side file, a manifest).
    pub fn file(&self, name: &str) -> Option<RemoteFile> {
        self.open(name, true)
    }

    fn open(&self, name: &str, metadata: bool) -> Option<RemoteFile> {
        self.files.get(name).map(|o| RemoteFile::new(self.remote.clone(), name, o.clone(), metadata))
    }

    /// Reads file `name` whole, if the directory holds it.
    pub fn read_whole(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        let Some(file) = self.open(name, true) else { return Ok(None) };
        let mut bytes = vec![0u8; file.object.size as usize];
        file.read_at(0, &mut bytes)?;
        Ok(Some(bytes))
    }
}

impl Backend for RemoteDir {
    type File = RemoteFile;

    fn open_meta(&self, create: bool) -> Result<Option<RemoteFile>, IoError> {
        if create && !self.has(zrecord_core::format::META_FILE) {
            return Err(read_only(&format!("create {}", self.remote.shown(zrecord_core::format::META_FILE))));
        }
        Ok(self.open(zrecord_core::format::META_FILE, true))
    }

    fn open_chunk(&self, id: u16, create: bool) -> Result<Option<RemoteFile>, IoError> {
        let name = format!("{id}.zr");
        if create && !self.has(&name) {
            return Err(read_only(&format!("create {}", self.remote.shown(&name))));
        }
        Ok(self.open(&name, false))
    }

    fn open_aux(&self, name: &str, create: bool) -> Result<Option<RemoteFile>, IoError> {
        if create && !self.has(name) {
            return Err(read_only(&format!("create {}", self.remote.shown(name))));
        }
        Ok(self.open(name, true))
    }

    fn remove_chunk(&self, id: u16) -> Result<(), IoError> {
        Err(read_only(&format!("remove {}", self.remote.shown(&format!("{id}.zr")))))
    }

    fn sync_dir(&self) -> Result<(), IoError> {
        Ok(())
    }

    fn read_side_file(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        self.read_whole(name)
    }

    fn write_side_file(&self, name: &str, _bytes: &[u8]) -> Result<(), IoError> {
        Err(read_only(&format!("write {}", self.remote.shown(name))))
    }

    fn remove_side_file(&self, name: &str) -> Result<(), IoError> {
        Err(read_only(&format!("remove {}", self.remote.shown(name))))
    }

    fn lock(&self, mode: LockMode) -> Result<(), Error> {
        match mode {
            LockMode::Shared => Ok(()),
            _ => Err(Error::Io(read_only(&format!("change {}", self.remote.url())))),
        }
    }
}
