//! Opening a store, and the steps every mutation ends with: `docs/format.md`, "Ordering
//! rules".
//!
//! - Creation: meta.zr is sized, its header written and synced, chunk 0 created, and the
//!   directory synced before the store is handed out, so a power cut never leaves a meta.zr
//!   without its magic; a meta.zr that never held a record is initialised again.
//! - **Delete**, replay half: a journal left by an interrupted delete is finished (or, if
//!   torn or stale, discarded) under the exclusive lock before anything reads the table.
//! - Publication: a new header is written to meta.zr, then published to readers in this
//!   process, frontier first and length last (`Release`; readers load with `Acquire`).
//! - **Durability**: `sync` makes chunks durable before meta.zr, and any failed write of the
//!   header or failed sync poisons the [`Writer`]: every later write is refused.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use once_cell::race::OnceBox;

use super::{delete, pack_tail, sums, Options, Store, Writer};
use crate::error::{Error, FormatError, IoError, Result};
use crate::format::{FileLayout, Header, CHUNK_FILE_LEN, ENTRY_LEN, HEADER_LEN, MAX_CHUNKS, META_LEN};
use crate::io::{Backend, LockMode, Parallel, Serial, StorageFile};

impl<B: Backend> Store<B> {
    /// Opens the store in `backend`'s directory, creating it if `opts.create` and it holds
    /// none. Takes the host's shared lock for the life of the store.
    pub fn open(backend: B, opts: Options) -> Result<(Self, Writer)> {
        if opts.chunk_capacity == 0 {
            return Err(Error::InvalidArgument("chunk capacity must be positive".into()));
        }
        let create = opts.create && !opts.read_only;
        let meta = backend.open_meta(create)?.ok_or(FormatError::MissingMeta)?;
        let meta_len = meta.len()?;
        let unused = if create { never_used(&meta, meta_len)? } else { None };
        if let Some(written) = unused {
            // The layout its header already names (an empty store someone made), else the
            // one asked for.
            let layout = written.unwrap_or(opts.layout);
            // A new store, or one whose creation was cut short before its header was
            // durable (no record was ever appended to it, so starting over loses nothing).
            // The header is synced and the directory entries made durable before the store
            // is handed out: a power cut can no longer leave a meta.zr without its magic.
            let chunk0 = backend.open_chunk(0, true)?.ok_or(FormatError::MissingChunk { chunk: 0 })?;
            match layout {
                FileLayout::Sparse => {
                    if chunk0.len()? < CHUNK_FILE_LEN {
                        chunk0.set_len(CHUNK_FILE_LEN)?;
                    }
                    meta.set_len(META_LEN)?;
                }
                // Files as long as what they hold: nothing yet.
                FileLayout::Dense => {
                    chunk0.set_len(0)?;
                    meta.set_len(HEADER_LEN as u64)?;
                }
            }
            meta.write_at(0, &Header::default().encode_as(layout))?;
            meta.sync()?;
            // The store's own nonce, so that no other store written to the same sizes
            // shares its generation (docs/format.md, "checksums.zrc"); never 0. An empty
            // store someone made keeps the one it has: every handle agrees on it.
            let kept = match backend.open_aux(crate::format::sums::SUMS_FILE, false)? {
                Some(f) => sums::read_covered(&f).ok().flatten().map_or(0, |(_, nonce)| nonce),
                None => 0,
            };
            let nonce = if kept != 0 { kept } else { backend.fresh_nonce() | 1 };
            sums::create_sums(&backend, layout, nonce)?;
            backend.sync_dir()?;
        }
        // The size allowed depends on the layout and length the header names.
        let meta_len = meta.len()?;
        if meta_len < HEADER_LEN as u64 {
            return Err(FormatError::MetaSize { found: meta_len, expected: META_LEN }.into());
        }
        let mut raw = [0u8; HEADER_LEN];
        meta.read_at(0, &mut raw)?;
        let (mut header, layout) = match Header::decode_with_layout(&raw) {
            Ok(decoded) => decoded,
            // Not a header: a file of a sparse store's size is damaged inside; any other
            // size is named first, as it always was (a truncated or foreign file).
            Err(e) if meta_len == META_LEN => return Err(e.into()),
            Err(_) => return Err(FormatError::MetaSize { found: meta_len, expected: META_LEN }.into()),
        };
        if !layout.meta_len_ok(meta_len, header.length) {
            return Err(meta_size_error(layout, meta_len, header.length).into());
        }
        backend.lock(LockMode::Shared)?;
        let (sums_file, sums_newer, sums_lost) = match sums::load_sums(&backend, layout)
            .and_then(|(f, newer)| Ok((f.is_none() && !newer && sums::had_sums(&backend)?, f, newer)))
        {
            Ok((lost, f, newer)) => (f, newer, lost),
            Err(e) => {
                backend.unlock(LockMode::Shared);
                return Err(e);
            }
        };
        // An interrupted delete is finished before anything reads the table (see the
        // `delete` module): its journal is its commit point.
        if let Some(journal) = delete::load_journal(&backend, &header, !opts.read_only)? {
            if opts.read_only {
                backend.unlock(LockMode::Shared);
                return Err(FormatError::InterruptedDelete.into());
            }
            if let Err(e) = backend.lock(LockMode::Exclusive) {
                backend.unlock(LockMode::Shared);
                return Err(e);
            }
            let replayed = delete::replay_journal(&journal, &backend, &meta, layout, sums_file.as_ref());
            backend.unlock(LockMode::Exclusive);
            match replayed {
                Ok(h) => header = h,
                Err(e) => {
                    backend.unlock(LockMode::Shared);
                    return Err(e);
                }
            }
        }

        let nonce = match sums_file.as_ref().map(sums::read_covered).transpose() {
            Ok(covered) => covered.flatten().map_or(0, |(_, nonce)| nonce),
            Err(e) => {
                backend.unlock(LockMode::Shared);
                return Err(e);
            }
        };
        let chunks = (0..MAX_CHUNKS).map(|_| OnceBox::new()).collect();
        let store = Store {
            backend,
            meta,
            chunks,
            length: AtomicU32::new(header.length),
            tail: AtomicU64::new(pack_tail(&header)),
            capacity: opts.chunk_capacity,
            verify: opts.verify,
            sums: OnceBox::new(),
            sums_newer,
            sums_lost,
            // A handle that keeps no checksums never vouches for the table.
            foreign: AtomicBool::new(!opts.checksums),
            keep_sums: opts.checksums,
            layout,
            nonce,
        };
        if let Some(f) = sums_file {
            let _ = store.sums.set(Box::new(f));
        }
        store.refresh_foreign(&header)?;
        // A directory without its tail chunk is damaged; say so now rather than on a read.
        let tail = store.chunk(header.tail_chunk)?;
        if layout == FileLayout::Sparse && !opts.read_only && tail.len()? < CHUNK_FILE_LEN {
            tail.set_len(CHUNK_FILE_LEN)?;
        }
        let writer = Writer { header, read_only: opts.read_only, poisoned: false, encoders: Vec::new(), staged: None };
        Ok((store, writer))
    }

    pub(super) fn write_header(&self, w: &mut Writer, header: Header) -> Result<()> {
        if let Err(e) = self.meta.write_at(0, &header.encode_as(self.layout)) {
            // The header may now be half-written; no further write may build on it.
            w.poisoned = true;
            return Err(e.into());
        }
        if let Err(e) = self.cover(&header) {
            w.poisoned = true;
            return Err(e);
        }
        w.header = header;
        Ok(())
    }

    /// Makes the new header visible to readers: frontier first, then length.
    pub(super) fn publish(&self, header: &Header) {
        self.tail.store(pack_tail(header), Ordering::Release);
        self.length.store(header.length, Ordering::Release);
    }

    /// Re-reads the header and adopts it if it only extends what this handle knows (other
    /// handles appended). Called under the appender or exclusive lock, and by hosts when a
    /// handle inherited through `fork()` takes its locks again in the child. A header that
    /// does not extend ours means records were deleted or moved while this handle held no
    /// lock (a handle used across fork while another process deleted or compacted, or a
    /// writer that takes no locks, such as loaderx): the handle's view is stale, and using
    /// it could write over live records, so it is refused.
    pub fn reload(&self, w: &mut Writer) -> Result<()> {
        // Staged records belong to the handle that held the appender lock when it staged
        // them; a handle that has to look at the disk again (after fork) forgets them.
        w.staged = None;
        let mut raw = [0u8; HEADER_LEN];
        self.meta.read_at(0, &mut raw)?;
        let disk = Header::decode(&raw)?;
        if disk == w.header {
            return Ok(());
        }
        let ours = &w.header;
        let extends =
            disk.length >= ours.length && (disk.tail_chunk, disk.tail_offset) >= (ours.tail_chunk, ours.tail_offset);
        if !extends {
            return Err(Error::Locked(
                "the store was changed by another process while this handle held no lock on it \
                 (used across fork(), or changed by a writer that takes no locks); reopen it"
                    .into(),
            ));
        }
        w.header = disk;
        self.publish(&disk);
        self.refresh_foreign(&disk)
    }

    /// Makes everything written so far durable: chunk data first, then the table and header.
    /// A failed sync poisons the writer; later writes are refused.
    pub fn sync(&self, w: &mut Writer) -> Result<()> {
        if w.poisoned {
            w.check_writable()?;
        }
        if w.staged.is_some() {
            return self.commit(w, &crate::io::Serial);
        }
        self.sync_files(w, 0..=w.header.tail_chunk)
    }

    /// Syncs the chunks in `chunks` that are open, then the checksum side file, then meta.zr
    /// (the header is written after this returns, so everything it will publish, checksums
    /// included, is durable first). A failure poisons the
    /// writer: after a failed fsync the kernel may have dropped the dirty pages, so nothing
    /// may be built on the assumption that they landed.
    pub(super) fn sync_files(&self, w: &mut Writer, chunks: core::ops::RangeInclusive<u16>) -> Result<()> {
        self.sync_files_with(w, chunks, &Serial)
    }

    /// [`Store::sync_files`] with the syncs run through `par`, all at once: nothing is
    /// ordered among them (the header that depends on them is written after they all
    /// return), and concurrent fsyncs share the file system's journal commits, so the
    /// checksum file costs an append little more than the chunks and meta.zr already do.
    pub(super) fn sync_files_with<P: Parallel>(
        &self,
        w: &mut Writer,
        chunks: core::ops::RangeInclusive<u16>,
        par: &P,
    ) -> Result<()> {
        let mut files: Vec<&B::File> = chunks.filter_map(|id| self.chunks[usize::from(id)].get()).collect();
        files.extend(self.sums.get());
        files.push(&self.meta);
        let result = if files.len() == 1 || par.workers() <= 1 {
            files.iter().try_for_each(|f| f.sync().map_err(Error::Io))
        } else {
            par.for_each(&mut files, |f| f.sync().map_err(Error::Io))
        };
        if let Err(e) = result {
            w.poisoned = true;
            return Err(e);
        }
        Ok(())
    }

    /// Syncs the checksum side file, then meta.zr: the end of every step of delete and
    /// compact that rewrote entries (and their slots). A failure poisons the writer.
    pub(super) fn sync_table(&self, w: &mut Writer) -> Result<()> {
        if let Some(f) = self.sums.get() {
            Self::poison_on_err(w, f.sync())?;
        }
        Self::poison_on_err(w, self.meta.sync())
    }

    /// Fails like `r`, poisoning the writer if it is an error: used for every sync.
    pub(super) fn poison_on_err(w: &mut Writer, r: Result<(), IoError>) -> Result<()> {
        r.map_err(|e| {
            w.poisoned = true;
            Error::Io(e)
        })
    }
}

/// Whether meta.zr holds no store yet, or one whose creation was interrupted before a
/// record was ever appended: empty, or nothing but zeros and at most the initial header in
/// the header and first entry. `Some(Some(layout))` when that initial header is there (it
/// names the layout), `Some(None)` when there is no header, `None` when the store was used.
fn never_used<F: StorageFile>(meta: &F, len: u64) -> Result<Option<Option<FileLayout>>> {
    if len == 0 {
        return Ok(Some(None));
    }
    if len > META_LEN {
        return Ok(None);
    }
    let mut head = [0u8; HEADER_LEN + ENTRY_LEN];
    let n = head.len().min(len as usize);
    meta.read_at(0, &mut head[..n])?;
    let (h, e) = head.split_at(HEADER_LEN);
    if e.iter().any(|&b| b != 0) {
        return Ok(None);
    }
    if h.iter().all(|&b| b == 0) {
        return Ok(Some(None));
    }
    Ok(FileLayout::ALL.into_iter().find(|&l| *h == Header::default().encode_as(l)).map(Some))
}

/// The error for a meta.zr whose size does not fit `layout` and `length` records.
fn meta_size_error(layout: FileLayout, found: u64, length: u32) -> FormatError {
    match layout {
        FileLayout::Sparse => FormatError::MetaSize { found, expected: META_LEN },
        FileLayout::Dense => FormatError::DenseMetaSize { found, length, needed: crate::format::entry_offset(length) },
    }
}
