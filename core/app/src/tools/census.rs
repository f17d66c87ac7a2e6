//! What a store's table and its files' sizes say without reading a record: each chunk
//! file's records and bytes, the store-level damage (a missing or truncated chunk file, lost
//! checksums) and the placement check that keeps overlapping entries from being read.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use serde::Serialize;

use zrecord_core::codec::Codec;
use zrecord_core::engine::Store;
use zrecord_core::error::{FormatError, Result};
use zrecord_core::format::Header;
use zrecord_core::io::Backend;

/// Records and bytes of one chunk file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChunkUse {
    /// Chunk id (file `{id}.zr`).
    pub id: u16,
    /// Live records stored in it.
    pub records: u32,
    /// Their stored bytes.
    pub live_bytes: u64,
    /// How far the chunk has been written (its frontier, or the frontier it had when the
    /// next chunk was started, which is at least its live bytes).
    pub used_bytes: u64,
    /// The size of its file (`None` when the file is missing): a file shorter than the
    /// bytes its records reach is truncated.
    pub file_bytes: Option<u64>,
}

/// What is wrong with a store as a whole, found from its files' sizes and side files
/// without reading a record: one finding per problem, with the byte counts, rather than one
/// per record it breaks. `inspect` lists them; `verify` lists them and fails.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Damage {
    pub(super) problems: Vec<String>,
    /// Per chunk id: the bytes its file holds, when that is fewer than its records reach.
    pub(super) short: Vec<Option<u64>>,
}

pub(super) fn damage<B: Backend>(store: &Store<B>, chunks: &[ChunkUse]) -> Damage {
    let mut out = Damage { problems: Vec::new(), short: vec![None; chunks.len()] };
    for c in chunks {
        // Records whose bytes lie past the file's end.
        let reach = c.used_bytes.max(c.live_bytes);
        match c.file_bytes {
            None if c.records > 0 => out.problems.push(format!(
                "{}.zr is missing: {} records ({} bytes) were stored in it",
                c.id, c.records, c.live_bytes
            )),
            Some(len) if len < reach && c.records > 0 => {
                out.short[usize::from(c.id)] = Some(len);
                out.problems.push(format!(
                    "{}.zr is truncated: the file has {len} bytes, but its records reach byte {reach} \
                     (a copy or download cut short?)",
                    c.id
                ));
            }
            _ => {}
        }
    }
    if let Err(e) = check_placement(chunks, 1) {
        out.problems.push(e.to_string());
    }
    if store.checksums_lost() {
        out.problems.push(
            "checksums.zrc is missing or unusable, but this store kept checksums (checksums.zrk says so): \
             its records cannot be checked; restore the file, or run `zr verify --seal` to checksum the \
             records as they are now"
                .into(),
        );
    }
    out
}

/// Refuses a table whose live records claim more than `factor` times the stored bytes
/// written to a chunk: their entries overlap, and reading them all would decode the same
/// bytes again and again (2^24 entries over one 4 KiB DEFLATE payload decode to 16 TiB).
/// `export` allows no overlap (factor 1) and `verify` a few damaged entries
/// ([`VERIFY_OVERLAP`]), each of which can claim at most what was written, so that it still
/// reports them record by record; both check before they read a record. `inspect` lists
/// any overlap as a problem.
pub(super) fn check_placement(chunks: &[ChunkUse], factor: u64) -> Result<()> {
    match chunks.iter().find(|c| c.live_bytes > c.used_bytes.saturating_mul(factor)) {
        Some(c) => {
            Err(FormatError::ImpossibleTable { chunk: c.id, claimed: c.live_bytes, written: c.used_bytes }.into())
        }
        None => Ok(()),
    }
}

/// How many times the bytes written to a chunk its live records may claim before `verify`
/// refuses to read them (see [`check_placement`]): a damaged entry lies inside what was
/// written, so three damaged entries per chunk still verify one by one, and the work stays
/// within four reads of the store.
pub const VERIFY_OVERLAP: u64 = 4;

/// Every entry of the table counted (no record bytes read), with each chunk file's size.
pub(super) struct Census {
    pub(super) chunks: Vec<ChunkUse>,
    pub(super) raw: u32,
    pub(super) flate: u32,
    pub(super) zstd: u32,
    pub(super) bad: u32,
    pub(super) live: u64,
    pub(super) logical: u64,
}

pub(super) fn census<B: Backend>(store: &Store<B>, h: &Header) -> Result<Census> {
    let mut chunks: Vec<ChunkUse> = (0..=h.tail_chunk).map(|id| ChunkUse { id, ..ChunkUse::default() }).collect();
    let (mut raw, mut flate, mut zstd, mut bad, mut live, mut logical) = (0u32, 0u32, 0u32, 0u32, 0u64, 0u64);
    let mut entries = Vec::new();
    for i in 0..h.length {
        let k = (i % zrecord_core::engine::RUN_ENTRIES) as usize;
        if k == 0 {
            store.entries_into(i, (h.length - i).min(zrecord_core::engine::RUN_ENTRIES), &mut entries)?;
        }
        let e = entries[k];
        match e.check(h) {
            Ok(Codec::Raw) => raw += 1,
            Ok(Codec::Flate) => flate += 1,
            Ok(Codec::Zstd) => zstd += 1,
            Err(_) => {
                bad += 1;
                continue;
            }
        }
        live += u64::from(e.phys_length);
        logical += u64::from(e.logic_length);
        let c = &mut chunks[usize::from(e.chunk_id)];
        c.records += 1;
        c.live_bytes += u64::from(e.phys_length);
        c.used_bytes = c.used_bytes.max(u64::from(e.offset) + u64::from(e.phys_length));
    }
    if let Some(last) = chunks.last_mut() {
        last.used_bytes = u64::from(h.tail_offset);
    }
    for c in &mut chunks {
        c.file_bytes = store.chunk_file_len(c.id)?;
    }
    Ok(Census { chunks, raw, flate, zstd, bad, live, logical })
}
