//! The store engine: every rule of how records are placed, found, removed and repacked.
//!
//! Hosts give it a [`Backend`] (files) and a [`Parallel`](crate::io::Parallel) (threads); it
//! gives them a [`Store`]. Invariants it keeps:
//! - Entries `0..length` of the table are live and every one of them points inside the
//!   written part of its chunk. There is no liveness flag; delete swaps the tail entry into
//!   the hole.
//! - Append writes record bytes, then table entries, then the header, and only then
//!   publishes the new length to readers, so a crash at any point leaves a prefix of the
//!   appends visible and never an entry pointing at unwritten bytes.
//! - Reads ([`Store::gather`], [`Store::lengths`]) take `&self`, need no lock, and run
//!   beside one appender ([`Store::append`] with the store's single [`Writer`]). Delete and
//!   compact take `&mut self`, and the host's inter-process lock on top.
//!
//! Each submodule adds one `impl Store` block and implements one part of `docs/format.md`,
//! "Ordering rules":
//! - `open`: creating a store durably, finishing an interrupted delete before anything
//!   reads the table (the replay half of **Delete**), publishing a header to readers, and
//!   **Durability** (`sync`, and the poisoned writer after a failed sync).
//! - `lookup`: table lookups (`entry`, `locate`), `lengths`, and **Stats**: what the table
//!   says, without a record's bytes.
//! - `record`: one record decoded and checked (`read_record`, which every read ends in),
//!   and the one-record reads `read`, `read_into`, `read_piece`, `read_verified`.
//! - `read`: the gathers (`gather`, `gather_var`, `gather_stores`): many records into one
//!   destination in one parallel pass.
//! - `read_ahead`: what the host is told before a read (`will_read`, `is_cold`, a cold
//!   gather's announcements).
//! - `append`: **Append**: compress, place, write payloads, entries, sync, header, publish.
//! - `delete`: **Delete**: the swap plan, and its commit through the journal whose bytes
//!   [`crate::format::journal`] encodes.
//! - `compact`: **Compact**: the physical-order repack in synced batches through a park area.
//! - `layout`: changing how a store's files are sized ([`FileLayout`]: sparse for loaderx,
//!   dense for copying), with the version write as the commit point.
//! - `warm`: reading a store's used bytes once in file order ([`Store::warm`]), and when a
//!   loader should ([`worth_warming`]).
//! - `table`: reading the entries, checksum slots and stored bytes of many records with one
//!   I/O call per range, for hosts that read through calls rather than a map.
//! - `sums`: the checksum side file `checksums.zrc` (bytes: [`crate::format::sums`]): opening
//!   or creating it, looking up a record's checksum, and sealing unchecked records.
//!
//! This module holds what they share: the handle types, [`Options`], [`Stats`], [`Batch`]
//! and the table of open chunk files.

mod append;
mod compact;
mod delete;
mod layout;
mod lookup;
mod open;
mod read;
mod read_ahead;
mod record;
mod sums;
mod table;
mod warm;

use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use once_cell::race::OnceBox;

use crate::codec::Encoder;
use crate::error::{Error, FormatError, IoError, IoErrorKind, Result};
use crate::format::{
    decode_generation, encode_generation, FileLayout, Header, DEFAULT_CHUNK_CAPACITY, GENERATION_FILE, MAX_RECORD_LEN,
};
use crate::io::{Backend, LockMode};

/// Name of the side file holding a delete's redo journal while the delete runs (its bytes:
/// [`crate::format::journal`]).
pub use crate::format::journal::DELETE_JOURNAL;
pub use read::{gather_stores, FixedSlots, Pick};
pub use sums::Sealing;
pub use table::{RUN_ENTRIES, SPAN_MAX};
pub use warm::{worth_warming, WARM_PIECE, WARM_SHARE_OF_MEMORY};

/// Below this many bytes of records per worker, splitting a batch costs more in thread
/// hand-off than it saves.
const MIN_SHARD_BYTES: usize = 256 * 1024;

/// How to open a store.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Create the store if the directory holds none.
    pub create: bool,
    /// Refuse every mutation; take only a shared lock.
    pub read_only: bool,
    /// Bytes a chunk may hold before appends roll over to the next one. The format fixes
    /// this at [`DEFAULT_CHUNK_CAPACITY`]; tests lower it to exercise rollover without
    /// writing gigabytes. Only placement depends on it, so any value reads any store.
    pub chunk_capacity: u64,
    /// When reads check a record's stored bytes against its checksum.
    pub verify: Verify,
    /// Keep checksums on write (the default). A handle opened with `false` writes as loaderx
    /// does: no checksum is computed or written, the records it appends or moves are
    /// unchecked (its compact's moves keep theirs through the content check), and it never
    /// records a covered header. For whoever measures a reason to; `seal` still works.
    pub checksums: bool,
    /// How a store created by this open sizes its files ([`FileLayout`]); an existing store
    /// keeps the layout its meta.zr names, whatever this says. Sparse by default, the
    /// layout loaderx 0.5.4 reads.
    pub layout: FileLayout,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create: true,
            read_only: false,
            chunk_capacity: DEFAULT_CHUNK_CAPACITY,
            verify: Verify::Auto,
            checksums: true,
            layout: FileLayout::Sparse,
        }
    }
}

/// When reads (`gather`, `gather_var`, `read`) check each record's stored bytes against the
/// checksum in `checksums.zrc`. A record that fails is never handed out: the read returns
/// [`crate::Error::Checksum`] instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Verify {
    /// Check every record that has a checksum; read unchecked records (a store without the
    /// side file, or records a foreign writer added or moved) as they are.
    #[default]
    Auto,
    /// Check every record, and fail with [`Error::Checksum`] on one that has no checksum:
    /// for callers who must never read an unverified byte (seal the store first).
    Always,
    /// Check nothing.
    Never,
}

impl Verify {
    /// Every mode, in the order of their names' documentation.
    pub const ALL: [Verify; 3] = [Verify::Auto, Verify::Always, Verify::Never];

    /// The mode's name, the same in Rust, Python, the CLI and WIT: `auto`, `always`, `never`.
    pub fn name(self) -> &'static str {
        match self {
            Verify::Auto => "auto",
            Verify::Always => "always",
            Verify::Never => "never",
        }
    }

    /// The mode called `name`.
    pub fn from_name(name: &str) -> Option<Verify> {
        Verify::ALL.into_iter().find(|v| v.name() == name)
    }
}

impl Options {
    /// Options for reading an existing store without changing it.
    pub fn read_only() -> Self {
        Options { create: false, read_only: true, ..Options::default() }
    }
}

/// Storage usage, as loaderx's `stats()` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Live records.
    pub records: u32,
    /// Sum of the live records' stored sizes.
    pub live_bytes: u64,
    /// How far the chunk files have grown (earlier chunks counted as 4 GiB each).
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`: an upper bound on what [`Store::compact`] frees, since up
    /// to a record's worth of slack at the end of each full chunk cannot be reclaimed.
    pub reclaimable: u64,
    /// Live records without a checksum to check them against: all of them in a store that
    /// has no `checksums.zrc` (one only loaderx wrote), else those a foreign writer added or
    /// moved, or whose checksum a crash lost. [`Store::seal`] checksums them.
    pub unchecked: u32,
}

/// A batch of records to append.
#[derive(Clone, Copy, Debug)]
pub enum Batch<'a> {
    /// `count` records of `item_len` bytes each, back to back at the start of `src`.
    Fixed {
        /// Source bytes.
        src: &'a [u8],
        /// Number of records.
        count: usize,
        /// Bytes per record.
        item_len: usize,
    },
    /// Record `i` is `src[offsets[i]..][..lens[i]]`.
    Ragged {
        /// Source bytes.
        src: &'a [u8],
        /// Start of each record in `src`.
        offsets: &'a [u64],
        /// Length of each record.
        lens: &'a [u32],
    },
}

impl<'a> Batch<'a> {
    /// Number of records in the batch.
    pub fn len(&self) -> usize {
        match *self {
            Batch::Fixed { count, .. } => count,
            Batch::Ragged { lens, .. } => lens.len(),
        }
    }

    /// True if the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where record `i` lies in the source. Only valid after [`Batch::validate`].
    fn range(&self, i: usize) -> Range<usize> {
        match *self {
            Batch::Fixed { item_len, .. } => i * item_len..(i + 1) * item_len,
            Batch::Ragged { offsets, lens, .. } => {
                let start = offsets[i] as usize;
                start..start + lens[i] as usize
            }
        }
    }

    fn src(&self) -> &'a [u8] {
        match *self {
            Batch::Fixed { src, .. } | Batch::Ragged { src, .. } => src,
        }
    }

    /// Checks every record against the record limit and the source's bounds.
    fn validate(&self) -> Result<()> {
        let check_len = |len: u64| {
            if len == 0 || len > u64::from(MAX_RECORD_LEN) {
                Err(Error::RecordTooLarge { length: len })
            } else {
                Ok(())
            }
        };
        match *self {
            Batch::Fixed { src, count, item_len } => {
                if count == 0 {
                    return Ok(());
                }
                check_len(item_len as u64)?;
                let need = (count as u128) * (item_len as u128);
                if need > src.len() as u128 {
                    return Err(Error::BufferTooSmall(format!(
                        "{count} records of {item_len} bytes need {need} source bytes, got {}",
                        src.len()
                    )));
                }
            }
            Batch::Ragged { src, offsets, lens } => {
                if offsets.len() != lens.len() {
                    return Err(Error::InvalidArgument(format!(
                        "{} offsets for {} lengths",
                        offsets.len(),
                        lens.len()
                    )));
                }
                for (&off, &len) in offsets.iter().zip(lens) {
                    check_len(u64::from(len))?;
                    if u128::from(off) + u128::from(len) > src.len() as u128 {
                        return Err(Error::BufferTooSmall(format!(
                            "record at {off}+{len} is past the {}-byte source",
                            src.len()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The right to append, delete and compact: exactly one per open [`Store`], returned by
/// [`Store::open`]. Hosts keep it behind a mutex so appends serialise while reads do not.
pub struct Writer {
    header: Header,
    read_only: bool,
    poisoned: bool,
    /// Compressors kept between appends, any codec (a compressor is costly to build).
    encoders: Vec<Encoder>,
    /// The header the staged records ([`Store::stage`]) would publish; `None` when nothing
    /// is staged.
    staged: Option<Header>,
}

impl Writer {
    /// Where the next staged record goes: after the staged ones, else after the store.
    fn frontier(&self) -> Header {
        self.staged.unwrap_or(self.header)
    }

    /// Records are staged and not committed ([`Store::stage`]).
    pub fn has_staged(&self) -> bool {
        self.staged.is_some()
    }

    /// Delete, compact and seal work on committed records only.
    fn check_nothing_staged(&self) -> Result<()> {
        if self.staged.is_some() {
            return Err(Error::InvalidArgument(
                "records are staged and not committed: commit or discard them first".into(),
            ));
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::InvalidArgument("store was opened read-only".into()));
        }
        if self.poisoned {
            return Err(Error::Io(IoError::new(
                IoErrorKind::Poisoned,
                "write refused",
                "an earlier write or sync failed; reopen the store",
            )));
        }
        Ok(())
    }
}

/// An open zrecord store over a host's [`Backend`].
pub struct Store<B: Backend> {
    backend: B,
    meta: B::File,
    chunks: Vec<OnceBox<B::File>>,
    /// Published record count; readers load it with `Acquire`.
    length: AtomicU32,
    /// Published frontier as `tail_chunk << 32 | tail_offset`; stored before `length`.
    tail: AtomicU64,
    capacity: u64,
    verify: Verify,
    /// The checksum side file, once it exists and is usable (see the `sums` module).
    sums: OnceBox<B::File>,
    /// The side file was written by a newer zrecord: never read it, never write it.
    sums_newer: bool,
    /// The store kept checksums but had no usable side file at open.
    sums_lost: bool,
    /// A writer that keeps no checksums (loaderx) changed the store since zrecord last
    /// recorded its covered header (or a crash came between the two): entries that differ
    /// from their slots are unchecked, not damaged, and no covered header is recorded until
    /// [`Store::seal`] vouches for every record again.
    foreign: core::sync::atomic::AtomicBool,
    /// From [`Options::checksums`].
    keep_sums: bool,
    /// How the store's files are sized, as meta.zr's version says.
    layout: FileLayout,
    /// The creation nonce `checksums.zrc` keeps beside the covered header (0: none), read
    /// at open; folded into [`Store::generation`].
    nonce: u64,
}

fn pack_tail(h: &Header) -> u64 {
    (u64::from(h.tail_chunk) << 32) | u64::from(h.tail_offset)
}

fn shard_count(workers: usize, items: usize, bytes: usize) -> usize {
    let by_bytes = bytes / MIN_SHARD_BYTES;
    workers.min(by_bytes).min(items).max(1)
}

impl<B: Backend> Store<B> {
    /// The host backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Number of live records, as last published.
    pub fn len(&self) -> u32 {
        self.length.load(Ordering::Acquire)
    }

    /// True if the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When reads check checksums (from [`Options::verify`]).
    pub fn verify_mode(&self) -> Verify {
        self.verify
    }

    /// Changes when reads check checksums.
    pub fn set_verify_mode(&mut self, verify: Verify) {
        self.verify = verify;
    }

    /// The published header.
    pub fn header(&self) -> Header {
        let length = self.length.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        Header { tail_chunk: (tail >> 32) as u16, tail_offset: tail as u32, length }
    }

    /// How the store's files are sized: [`FileLayout::Sparse`] (loaderx's) or
    /// [`FileLayout::Dense`].
    pub fn layout(&self) -> FileLayout {
        self.layout
    }

    /// The size of chunk file `id` in bytes, or `None` if it does not exist.
    pub fn chunk_file_len(&self, id: u16) -> Result<Option<u64>> {
        match self.chunk(id) {
            Ok(f) => Ok(Some(crate::io::StorageFile::len(f)?)),
            Err(Error::Format(FormatError::MissingChunk { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn chunk(&self, id: u16) -> Result<&B::File> {
        let slot = self.chunks.get(usize::from(id)).ok_or(FormatError::MissingChunk { chunk: id })?;
        slot.get_or_try_init(|| match self.backend.open_chunk(id, false) {
            Ok(Some(f)) => Ok(Box::new(f)),
            Ok(None) => Err(Error::Format(FormatError::MissingChunk { chunk: id })),
            Err(e) => Err(Error::Io(e)),
        })
    }

    /// The store's generation ([`crate::format::generation`]): a value that changes
    /// whenever zrecord deletes or compacts (its counter in the side file
    /// [`GENERATION_FILE`](crate::format::GENERATION_FILE)) or anyone moves the append
    /// frontier (appends, and compacts by writers that do not know the file). Together with
    /// [`Store::len`] it names the records behind the indices: a saved loader state records
    /// both and is refused when either differs. Reads the side file each call, so it sees
    /// what other processes did; the frontier is this handle's published header.
    pub fn generation(&self) -> Result<u64> {
        let header = self.header();
        let value = crate::format::generation(self.generation_counter()?, &header);
        // Two stores that reached the same length and frontier by different writes (the
        // same sizes written again in another order) differ in their nonces.
        Ok(match self.nonce {
            0 => value,
            nonce => crate::stream::combine_generations(nonce, value),
        })
    }

    /// The creation nonce zrecord drew for this store (`checksums.zrc`, "nonce"), or 0 for
    /// a store without one (created by loaderx or before nonces, or kept without
    /// checksums).
    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    fn generation_counter(&self) -> Result<u64> {
        let bytes = self.backend.read_side_file(GENERATION_FILE)?.unwrap_or_default();
        decode_generation(&bytes).ok_or_else(|| {
            Error::Format(FormatError::Container(format!(
                "{GENERATION_FILE} is damaged ({} bytes, not a generation file); remove it to go on \
                 (loader states saved from this store will then no longer load)",
                bytes.len()
            )))
        })
    }

    /// Raises the generation counter, durably, under the exclusive lock: a delete that
    /// moves entries calls it before it changes anything, compact after it finished (see
    /// `docs/format.md`, "generation.zrg"). A failure changes nothing (the side file is
    /// replaced whole or not at all), so it does not poison the writer.
    pub(super) fn bump_generation(&self) -> Result<()> {
        let next = self.generation_counter()?.wrapping_add(1);
        Ok(self.backend.write_side_file(GENERATION_FILE, &encode_generation(next))?)
    }

    /// Releases the host locks this store holds. Hosts call it when the handle closes.
    pub fn release_locks(&self, w: &mut Writer) {
        let _ = w;
        self.backend.unlock(LockMode::Appender);
        self.backend.unlock(LockMode::Shared);
    }
}
