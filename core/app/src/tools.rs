//! What the `zr` and `zr-wasm` command lines do, written once: inspect, verify, convert a
//! `.npy` into a dataset, and export a dataset back to `.npy`. Hosts open the files and the
//! store and format nothing but what these functions return.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use serde::Serialize;

use zrecord_core::codec::{Codec, CodecPolicy};
use zrecord_core::dtype::itemsize;
use zrecord_core::engine::{Batch, Store, Writer};
use zrecord_core::error::{Error, FormatError, Result};
use zrecord_core::format::{Header, MAX_RECORD_LEN};
use zrecord_core::io::{Backend, Parallel, StorageFile};
use zrecord_core::schema::{Schema, SCHEMA_FILE};

use crate::npy;

/// Default bytes of source data per append when converting (as loaderx's `Dataset.write`).
pub const DEFAULT_CHUNK_BYTES: usize = 64 << 20;

/// Reads and parses the store's `schema.json`, if it has one.
pub fn read_schema<B: Backend>(store: &Store<B>) -> Result<Option<Schema>> {
    match store.backend().read_side_file(SCHEMA_FILE)? {
        Some(bytes) => Ok(Some(Schema::from_json(&bytes)?)),
        None => Ok(None),
    }
}

/// The schema samples of `dtype` and `shape` are appended under, as loaderx's
/// `Dataset.write` decides it: the store's own `schema.json` when it has one (it must have
/// the same dtype and shape; its codec wins), or else a new one naming `codec`, written
/// before any record.
pub fn schema_for_append<B: Backend>(store: &Store<B>, dtype: &str, shape: &[u64], codec: Codec) -> Result<Schema> {
    match read_schema(store)? {
        Some(existing) if !existing.accepts(dtype, shape) => Err(Error::InvalidArgument(format!(
            "dataset holds {}{:?} samples, cannot append {dtype}{shape:?}",
            existing.dtype, existing.shape
        ))),
        Some(existing) => Ok(existing),
        None => {
            let s = Schema::new(dtype, shape, codec);
            store.backend().write_side_file(SCHEMA_FILE, s.to_json().as_bytes())?;
            Ok(s)
        }
    }
}

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
struct Damage {
    problems: Vec<String>,
    /// Per chunk id: the bytes its file holds, when that is fewer than its records reach.
    short: Vec<Option<u64>>,
}

fn damage<B: Backend>(store: &Store<B>, chunks: &[ChunkUse]) -> Damage {
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
fn check_placement(chunks: &[ChunkUse], factor: u64) -> Result<()> {
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

/// Everything `inspect` reports about a store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inspection {
    /// Format version from the header.
    pub version: u16,
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

/// Every entry of the table counted (no record bytes read), with each chunk file's size.
struct Census {
    chunks: Vec<ChunkUse>,
    raw: u32,
    flate: u32,
    zstd: u32,
    bad: u32,
    live: u64,
    logical: u64,
}

fn census<B: Backend>(store: &Store<B>, h: &Header) -> Result<Census> {
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

/// Reads the header and every entry (no record bytes) and summarises them.
pub fn inspect<B: Backend>(store: &Store<B>) -> Result<Inspection> {
    let h: Header = store.header();
    let Census { chunks, raw, flate, zstd, bad, live, logical } = census(store, &h)?;
    let problems = damage(store, &chunks).problems;
    let chunk_bytes = h.chunk_bytes();
    Ok(Inspection {
        version: zrecord_core::format::VERSION,
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

/// One record that failed to decode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BadRecord {
    /// Its index.
    pub index: u32,
    /// Why.
    pub error: String,
}

/// The outcome of [`verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Records decoded.
    pub checked: u32,
    /// Of those, how many had a checksum that was checked (and held, unless they are bad).
    pub checksummed: u32,
    /// Of those, how many had no checksum to check (see [`Store::seal`]).
    pub unchecked: u32,
    /// How many failed: a checksum that does not hold, or a record that does not decode.
    pub bad_count: u32,
    /// The first [`Verification::LISTED`] failures, but for those a problem covers.
    pub bad: Vec<BadRecord>,
    /// What is wrong with the store as a whole ([`Inspection::problems`]); the records a
    /// truncated chunk cut off are counted in `bad_count` and `cut_off`, not listed.
    pub problems: Vec<String>,
    /// Records whose bytes lie past the end of a truncated chunk file.
    pub cut_off: u32,
}

impl Verification {
    /// True when no record failed and the store as a whole has no problem.
    pub fn ok(&self) -> bool {
        self.bad_count == 0 && self.problems.is_empty()
    }

    /// Failures neither listed in `bad` nor covered by a problem.
    pub fn unlisted(&self) -> u32 {
        self.bad_count - self.cut_off - self.bad.len() as u32
    }
}

impl Verification {
    /// Failures listed individually; the rest are only counted.
    pub const LISTED: usize = 1000;
}

struct VerifyShard {
    range: core::ops::Range<u32>,
    bad: Vec<BadRecord>,
    bad_count: u32,
    checksummed: u32,
    unchecked: u32,
    cut_off: u32,
}

/// Checks every record's checksum (where it has one) and decodes every record, in
/// parallel, and reports those that fail. A record whose checksum fails is not decoded.
pub fn verify<B: Backend, P: Parallel>(
    store: &Store<B>,
    par: &P,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Verification> {
    let n = store.len();
    let mut out = Verification::default();
    // The table's census only: not inspect's checksum-slot scan or schema.
    let chunks = census(store, &store.header())?.chunks;
    check_placement(&chunks, VERIFY_OVERLAP)?;
    let found = damage(store, &chunks);
    out.problems = found.problems;
    let short = &found.short;
    const BLOCK: u32 = 1 << 14;
    let mut start = 0u32;
    while start < n {
        let end = n.min(start.saturating_add(BLOCK));
        let workers = par.workers().max(1) as u32;
        let per = (end - start).div_ceil(workers).max(1);
        let mut shards: Vec<VerifyShard> = (start..end)
            .step_by(per as usize)
            .map(|s| VerifyShard {
                range: s..(s + per).min(end),
                bad: Vec::new(),
                bad_count: 0,
                checksummed: 0,
                unchecked: 0,
                cut_off: 0,
            })
            .collect();
        par.for_each(&mut shards, |shard| {
            let cut_off = |e: &zrecord_core::format::RecordLoc| {
                let cut = short.get(usize::from(e.chunk_id)).copied().flatten();
                cut.is_some_and(|len| u64::from(e.offset) + u64::from(e.phys_length) > len)
            };
            store.read_verified_range(shard.range.clone(), cut_off, |i, _, result| {
                let Some(result) = result else {
                    shard.bad_count += 1; // reported once, as the chunk's truncation
                    shard.cut_off += 1;
                    return Ok(());
                };
                match result {
                    Ok(true) => shard.checksummed += 1,
                    Ok(false) => shard.unchecked += 1,
                    Err(Error::Checksum { failure, .. }) => {
                        shard.checksummed += 1;
                        shard.bad_count += 1;
                        if shard.bad.len() < Verification::LISTED {
                            shard.bad.push(BadRecord { index: i, error: failure.to_string() });
                        }
                    }
                    Err(Error::Decode { source, .. }) => {
                        shard.bad_count += 1;
                        if shard.bad.len() < Verification::LISTED {
                            shard.bad.push(BadRecord { index: i, error: source.to_string() });
                        }
                    }
                    Err(Error::Format(e)) => {
                        shard.bad_count += 1;
                        if shard.bad.len() < Verification::LISTED {
                            shard.bad.push(BadRecord { index: i, error: e.to_string() });
                        }
                    }
                    Err(e) => return Err(e),
                }
                Ok(())
            })
        })?;
        for s in shards {
            out.bad_count += s.bad_count;
            out.checksummed += s.checksummed;
            out.unchecked += s.unchecked;
            out.cut_off += s.cut_off;
            let room = Verification::LISTED - out.bad.len().min(Verification::LISTED);
            out.bad.extend(s.bad.into_iter().take(room));
        }
        out.checked = end;
        progress(u64::from(end), u64::from(n));
        start = end;
    }
    Ok(out)
}

/// The outcome of [`convert`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conversion {
    /// Records appended.
    pub appended: u64,
    /// Index of the first appended record.
    pub first_index: u32,
    /// The dataset's schema (the existing one when appending).
    pub schema: Schema,
}

/// Reads and checks the header of the `.npy` in `input`.
pub fn read_npy_header<F: StorageFile>(input: &F) -> Result<npy::NpyHeader> {
    let file_len = input.len()?;
    if file_len < npy::PREFIX_LEN as u64 {
        return Err(FormatError::Container("not a .npy file (too short)".into()).into());
    }
    let mut prefix = [0u8; npy::PREFIX_LEN];
    input.read_at(0, &mut prefix)?;
    let total = npy::header_len(&prefix)?;
    if total > file_len || total > 1 << 24 {
        return Err(FormatError::Container(".npy header is truncated".into()).into());
    }
    let mut bytes = vec![0u8; total as usize];
    input.read_at(0, &mut bytes)?;
    Ok(npy::parse_header(&bytes)?)
}

/// A `.npy` input checked for conversion: its header, and the sizes [`convert`] streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpySource {
    /// The parsed header.
    pub header: npy::NpyHeader,
    /// Rows along axis 0: the records a conversion appends.
    pub rows: u64,
    /// Bytes per row: one record.
    pub sample_len: u64,
}

impl NpySource {
    /// The shape of one sample (the array's shape without axis 0).
    pub fn sample_shape(&self) -> &[u64] {
        &self.header.shape[1..]
    }
}

impl NpySource {
    /// The rows and sample size `h` describes, after checking that each row can be one
    /// record: a sample axis and samples of 1 byte ..= [`MAX_RECORD_LEN`], in C or Fortran
    /// order ([`NpySource::read_rows`] reads either as C-order rows).
    pub fn from_header(h: npy::NpyHeader) -> Result<NpySource> {
        let Some((&rows, sample_shape)) = h.shape.split_first() else {
            return Err(Error::InvalidArgument("array must have a sample axis (it is 0-dimensional)".into()));
        };
        let sample_len = sample_shape
            .iter()
            .try_fold(itemsize(&h.descr)?, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| Error::InvalidArgument("sample size overflows".into()))?;
        if sample_len > u64::from(MAX_RECORD_LEN) || sample_len == 0 {
            return Err(Error::RecordTooLarge { length: sample_len });
        }
        rows.checked_mul(sample_len).ok_or_else(|| Error::InvalidArgument("array size overflows".into()))?;
        Ok(NpySource { header: h, rows, sample_len })
    }

    /// Bytes of array data after the header.
    pub fn data_len(&self) -> u64 {
        self.rows * self.sample_len
    }

    /// True when a row's elements are not contiguous in the file: a Fortran-ordered array
    /// with more than one element per sample (axis 0 varies fastest).
    pub fn transposed(&self) -> bool {
        self.header.fortran_order && self.sample_shape().iter().product::<u64>() > 1
    }

    /// Reads rows `first..first + n` into `buf` (`n * sample_len` bytes) as C-order rows,
    /// whichever order the file holds. A Fortran-ordered file is read one sample element at
    /// a time across the `n` rows (`n` elements back to back in the file), so memory stays
    /// one block and the file is still read once.
    pub fn read_rows<F: StorageFile>(&self, input: &F, first: u64, n: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.header.data_offset;
        if !self.transposed() {
            return Ok(input.read_at(at + first * self.sample_len, buf)?);
        }
        let item = itemsize(&self.header.descr)? as usize;
        let shape = self.sample_shape();
        let elems = shape.iter().product::<u64>() as usize;
        let mut column = vec![0u8; n as usize * item];
        // Walk the sample's elements in C order, keeping each one's Fortran index.
        let mut index = vec![0u64; shape.len()];
        let strides: Vec<u64> = (0..shape.len()).map(|k| shape[..k].iter().product()).collect();
        for c in 0..elems {
            let f: u64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
            input.read_at(at + (f * self.rows + first) * item as u64, &mut column)?;
            for (k, value) in column.chunks_exact(item).enumerate() {
                let to = (k * elems + c) * item;
                buf[to..to + item].copy_from_slice(value);
            }
            for k in (0..shape.len()).rev() {
                index[k] += 1;
                if index[k] < shape[k] {
                    break;
                }
                index[k] = 0;
            }
        }
        Ok(())
    }
}

/// Checks that `input` is a `.npy` that [`convert`] can append in full: a header
/// [`NpySource::from_header`] accepts and all the data the header promises. Reads nothing
/// but the header and the file's length, so a caller can check an input before creating
/// anything.
pub fn check_npy<F: StorageFile>(input: &F) -> Result<NpySource> {
    let src = NpySource::from_header(read_npy_header(input)?)?;
    if input.len()? < src.header.data_offset + src.data_len() {
        return Err(FormatError::Container(format!(
            ".npy data is truncated: {} rows of {} bytes expected",
            src.rows, src.sample_len
        ))
        .into());
    }
    Ok(src)
}

/// Appends every slice along axis 0 of the `.npy` in `input` as one record, streaming
/// `chunk_bytes` of source at a time, and writes or checks `schema.json` exactly as
/// loaderx's `Dataset.write` does (an existing schema must have the same dtype and shape,
/// and its codec wins, under `policy`'s `min_savings`). Syncs the store at the end. The
/// input is checked with [`check_npy`] before the store is touched.
#[allow(clippy::too_many_arguments)]
pub fn convert<B: Backend, P: Parallel, F: StorageFile>(
    input: &F,
    store: &Store<B>,
    w: &mut Writer,
    policy: impl Into<CodecPolicy>,
    chunk_bytes: usize,
    par: &P,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Conversion> {
    let policy = policy.into();
    let codec = policy.codec;
    // Before anything is written: a build that cannot write zstd leaves no schema behind.
    codec.check_writable()?;
    let src = check_npy(input)?;
    let (h, rows, sample_len) = (&src.header, src.rows, src.sample_len);
    let sample_shape = src.sample_shape();

    let schema = schema_for_append(store, &h.descr, sample_shape, codec)?;
    let policy = policy.with_codec(Codec::from_name(&schema.codec).unwrap_or(codec));

    // Every block is staged and the whole conversion committed once: one sync, and a
    // conversion that fails half-way adds nothing to the store.
    let step = (chunk_bytes as u64 / sample_len).max(1);
    let mut buf = Vec::new();
    let mut first_index = store.len();
    let mut done = 0u64;
    progress(0, rows);
    let staged = (|| {
        while done < rows {
            let n = step.min(rows - done);
            let bytes = (n * sample_len) as usize;
            buf.resize(bytes, 0);
            src.read_rows(input, done, n, &mut buf)?;
            let batch = Batch::Fixed { src: &buf, count: n as usize, item_len: sample_len as usize };
            let at = store.stage(w, &batch, policy, par)?;
            if done == 0 {
                first_index = at;
            }
            done += n;
            progress(done, rows);
        }
        store.commit(w, par)
    })();
    if let Err(e) = staged {
        store.discard(w);
        return Err(e);
    }
    store.sync(w)?;
    Ok(Conversion { appended: rows, first_index, schema })
}

/// Writes the dataset in `store` to `output` as a `.npy` of shape `(len, *schema.shape)`,
/// replacing whatever `output` held. Returns the number of records written.
pub fn export<B: Backend, P: Parallel, F: StorageFile>(
    store: &Store<B>,
    output: &F,
    chunk_bytes: usize,
    par: &P,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64> {
    let schema = read_schema(store)?.ok_or_else(|| {
        Error::InvalidArgument("the store has no schema.json: it is a plain record store, not a dataset".into())
    })?;
    let sample_len = schema.sample_len()?;
    if sample_len == 0 || sample_len > u64::from(MAX_RECORD_LEN) {
        return Err(Error::RecordTooLarge { length: sample_len });
    }
    check_placement(&census(store, &store.header())?.chunks, 1)?;
    let rows = u64::from(store.len());
    let mut shape = vec![rows];
    shape.extend_from_slice(&schema.shape);
    let header = npy::write_header(&schema.dtype, &shape);
    output.set_len(0)?;
    output.write_at(0, &header)?;
    let step = (chunk_bytes as u64 / sample_len).max(1);
    let (mut buf, mut idxs, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    let mut done = 0u64;
    progress(0, rows);
    while done < rows {
        let n = step.min(rows - done);
        idxs.clear();
        idxs.extend(done..done + n);
        lens.resize(n as usize, 0u32);
        store.lengths(&idxs, &mut lens)?;
        if let Some((k, &len)) = lens.iter().enumerate().find(|(_, &l)| u64::from(l) != sample_len) {
            return Err(FormatError::Container(format!(
                "record {} holds {len} bytes but schema.json says samples are {sample_len}",
                done + k as u64
            ))
            .into());
        }
        buf.resize((n * sample_len) as usize, 0);
        store.gather(&idxs, &mut buf, sample_len as usize, par)?;
        output.write_at(header.len() as u64 + done * sample_len, &buf)?;
        done += n;
        progress(done, rows);
    }
    output.sync()?;
    Ok(rows)
}
