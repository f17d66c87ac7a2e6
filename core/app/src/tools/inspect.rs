//! `inspect`: what a store holds, from its header, table and side files, without reading a
//! record, and how that report reads to people.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::Serialize;

use zrecord_core::engine::Store;
use zrecord_core::error::Result;
use zrecord_core::format::Header;
use zrecord_core::io::Backend;
use zrecord_core::schema::Schema;

use super::census::{census, damage, Census, ChunkUse};
use super::read_schema;

/// Everything `inspect` reports about a store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inspection {
    /// Format version from the header: 1 sparse, 2 dense.
    pub version: u16,
    /// How the store's files are sized: `"sparse"` (loaderx 0.5.4's layout, which it
    /// reads) or `"dense"` (files as long as what they hold; `zr layout` changes it).
    pub layout: String,
    /// Live records.
    pub records: u32,
    /// Header frontier: chunk.
    pub tail_chunk: u16,
    /// Header frontier: offset.
    pub tail_offset: u32,
    /// Records stored raw.
    pub raw_records: u32,
    /// Records stored as DEFLATE.
    pub flate_records: u32,
    /// Records stored as zstd frames, which loaderx 0.5.4 cannot read.
    pub zstd_records: u32,
    /// Entries that fail their checks (unknown codec, out of bounds...).
    pub bad_entries: u32,
    /// True if the store keeps checksums (has a usable `checksums.zrc`).
    pub checksums: bool,
    /// Live records without a checksum (all of them when the store keeps none).
    pub unchecked: u32,
    /// Sum of stored sizes.
    pub live_bytes: u64,
    /// Sum of logical sizes.
    pub logical_bytes: u64,
    /// `tail_chunk * 4 GiB + tail_offset`.
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`.
    pub reclaimable: u64,
    /// Per chunk file, in id order.
    pub chunks: Vec<ChunkUse>,
    /// The dataset schema, if the store has one.
    pub schema: Option<Schema>,
    /// What is wrong with the store as a whole (a truncated or missing chunk file, lost
    /// checksums), one line each; empty for a sound store.
    pub problems: Vec<String>,
}

/// Reads the header and every entry (no record bytes) and summarises them.
pub fn inspect<B: Backend>(store: &Store<B>) -> Result<Inspection> {
    let h: Header = store.header();
    let Census { chunks, raw, flate, zstd, bad, live, logical } = census(store, &h)?;
    let problems = damage(store, &chunks).problems;
    let chunk_bytes = h.chunk_bytes();
    Ok(Inspection {
        version: store.layout().version(),
        layout: store.layout().name().into(),
        records: h.length,
        tail_chunk: h.tail_chunk,
        tail_offset: h.tail_offset,
        raw_records: raw,
        flate_records: flate,
        zstd_records: zstd,
        bad_entries: bad,
        live_bytes: live,
        logical_bytes: logical,
        chunk_bytes,
        reclaimable: chunk_bytes.saturating_sub(live),
        checksums: store.has_checksums(),
        unchecked: store.unchecked()?,
        chunks,
        schema: read_schema(store)?,
        problems,
    })
}

/// Formats a byte count for people: `12.3 MiB (12897484 bytes)`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {} ({n} bytes)", UNITS[u])
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "format        zrecord v{} (meta.zr header ZREC)", self.version)?;
        let layout = match self.layout.as_str() {
            "dense" => "dense: files as long as what they hold (loaderx 0.5.4 needs `zr layout STORE sparse` first)",
            _ => "sparse: meta.zr 256 MiB, chunks 4 GiB, mostly holes (loaderx 0.5.4's layout)",
        };
        writeln!(f, "layout        {layout}")?;
        writeln!(f, "records       {}", self.records)?;
        writeln!(f, "frontier      chunk {} offset {}", self.tail_chunk, self.tail_offset)?;
        writeln!(
            f,
            "codecs        raw {}  flate {}  zstd {}  bad entries {}",
            self.raw_records, self.flate_records, self.zstd_records, self.bad_entries
        )?;
        if self.zstd_records > 0 {
            writeln!(
                f,
                "              loaderx 0.5.4 cannot read this store: it fails on zstd records (code -7) and on \
                 a \"zstd\" schema"
            )?;
        }
        if self.checksums {
            writeln!(f, "checksums     XXH3-64 (checksums.zrc), {} records unchecked", self.unchecked)?;
        } else {
            writeln!(f, "checksums     none (no checksums.zrc: a store only loaderx wrote)")?;
        }
        writeln!(f, "logical size  {}", human_bytes(self.logical_bytes))?;
        writeln!(f, "stored size   {}", human_bytes(self.live_bytes))?;
        if self.live_bytes > 0 {
            writeln!(f, "ratio         {:.3}x", self.logical_bytes as f64 / self.live_bytes as f64)?;
        }
        writeln!(f, "chunk bytes   {}", human_bytes(self.chunk_bytes))?;
        writeln!(f, "reclaimable   {}", human_bytes(self.reclaimable))?;
        writeln!(f, "chunks        {}", self.chunks.len())?;
        for c in &self.chunks {
            writeln!(f, "  {}.zr  {} records, {} live of {} used", c.id, c.records, c.live_bytes, c.used_bytes)?;
        }
        match &self.schema {
            Some(s) => write!(f, "schema        dtype {} shape {:?} codec {}", s.dtype, s.shape, s.codec)?,
            None => write!(f, "schema        none (a plain record store)")?,
        }
        for p in &self.problems {
            write!(f, "\nDAMAGED       {p}")?;
        }
        Ok(())
    }
}
