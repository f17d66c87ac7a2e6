//! Packed loading: the core's [`Packer`] plans each global batch's rows from the stores'
//! tables (document lengths only) on the sampler thread; a worker decodes the documents of
//! its rank's rows and writes the rows straight into the batch buffers.
//!
//! A packed batch has four buffers (five for a mixture), each `(rows, seq_len)` elements:
//! the tokens (the field's dtype), `segment_ids` (int32: the documents of a row numbered
//! from 1, 0 for padding), `positions` (int32: each piece's tokens counted from 0, so a
//! piece that continues a document cut at the previous row's end starts again at 0), and
//! for a mixture `source` (int32, per token).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use zrecord_core::stream::pack::{DocLengths, PackCursor, PackError, PackSpec, Packer, Placed, Plan};
use zrecord_core::stream::row_index::RowIndexKey;
use zrecord_core::stream::{PackedState, Stream, StreamState};

use super::row_index::RowIndexDir;
use super::workers::Job;
use super::{BufferPool, LoaderBatch, LoaderError, Source};
use crate::{DatasetError, Error};

/// How a loader packs a ragged token field into rows ([`crate::Loader::packed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackOptions {
    /// The ragged field of token documents.
    pub field: String,
    /// Tokens per row.
    pub seq_len: u32,
    /// `concat` or `best_fit`.
    pub mode: zrecord_core::stream::pack::PackMode,
    /// A token id put before every document.
    pub bos: Option<u64>,
    /// A token id put after every document.
    pub eos: Option<u64>,
    /// The padding id (best fit), default 0.
    pub pad: u64,
    /// Best fit's window in tokens; `None`: two global batches' worth
    /// (`2 * rows * seq_len`).
    pub window: Option<u64>,
    /// Shuffled rows ([`zrecord_core::stream::rows`]): `Some(true)` asks for them (concat
    /// over a SHUFFLE stream of one dataset or a mixture), `Some(false)` for rows in the order they are
    /// cut; `None` takes them wherever they apply.
    pub shuffle_rows: Option<bool>,
    /// Where shuffled rows keep each epoch's row index for other ranks, processes and runs
    /// ([`RowIndexes`]).
    pub row_indexes: RowIndexes,
    /// Shuffled rows over a source of at most this many documents keep each epoch's order
    /// and lengths in memory (8 bytes per document) and place rows without reading the
    /// table; larger sources use a row index. Default
    /// [`zrecord_core::stream::rows::KEEP_DOCS`] (2^22, 32 MiB); 0: always the index.
    pub keep_order: u64,
}

/// Where shuffled packed rows keep their row indexes ([`super::row_index`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum RowIndexes {
    /// [`RowIndexDir::default_dir`], for sources of at least 2^20 documents.
    #[default]
    Default,
    /// Nowhere: every planner builds its own.
    Off,
    /// In this directory, for every source.
    In(std::path::PathBuf),
}

impl RowIndexes {
    fn dir(&self) -> Option<RowIndexDir> {
        match self {
            RowIndexes::Default => RowIndexDir::default_dir(),
            RowIndexes::Off => None,
            RowIndexes::In(dir) => Some(RowIndexDir::new(dir)),
        }
    }
}

/// What the packed batch of a job adds to it.
#[derive(Debug)]
pub(super) struct PackJob {
    /// This rank's pieces, rows counted from the rank's first row.
    pub placed: Vec<Placed>,
    /// Where packing stands after this global batch.
    pub cursor: PackCursor,
    /// Padding tokens of the global batch.
    pub padding: u64,
    /// The last batch of a finite pass ([`zrecord_core::stream::pack::Plan::last`]).
    pub last: bool,
}

/// What a packed batch tells the loader beside its rows.
#[derive(Debug, Clone)]
pub struct PackInfo {
    /// Where packing stands after this global batch (the state saved after it).
    pub cursor: PackCursor,
    /// Padding tokens in the whole global batch.
    pub padding: u64,
    /// The last batch of a finite pass: the loader ends after it.
    pub last: bool,
}

/// The packing a loader does: the field, its element size and the resolved spec.
#[derive(Debug, Clone)]
pub(super) struct Packing {
    pub field: usize,
    pub item: usize,
    pub spec: PackSpec,
    /// Rows of a global batch.
    pub rows: u32,
    /// Bytes of the bos, eos and pad ids in the field's dtype.
    pub bos: Option<Vec<u8>>,
    pub eos: Option<Vec<u8>>,
    pub pad: Vec<u8>,
    /// A mixture: batches carry each token's source.
    pub mixture: bool,
    /// Where row indexes are kept, if anywhere.
    pub row_indexes: Option<RowIndexDir>,
    /// [`PackOptions::keep_order`].
    pub keep_order: u64,
    /// Documents a batch cut at its end, decoded: the next batch starts with the rest of
    /// them, and takes them from here instead of decoding them again (a 100k-token
    /// document spans several batches).
    pub recent: Arc<Mutex<VecDeque<Decoded>>>,
}

/// Documents [`Packing::recent`] keeps.
const RECENT: usize = 8;

/// A decoded document: `(source, index)` and its bytes.
type Decoded = ((u32, u64), Arc<[u8]>);

/// Where a batch's document is: kept from an earlier batch, or in this batch's buffer
/// `.0` of gathered documents at bytes `.1`.
enum Body {
    Kept(Arc<[u8]>),
    In(usize, std::ops::Range<usize>),
}

impl Packing {
    /// Checks the options against the sources and resolves them.
    pub fn new(options: &PackOptions, sources: &[Source], rows: u64, docs: &Stream) -> Result<Packing, LoaderError> {
        if docs.blocks().is_some() {
            // Packing orders documents, and shuffled rows, by permutations of its own.
            return Err(LoaderError::Sources(
                "a packed loader reads documents in its own order: a block shuffle (shuffle_block) does not apply"
                    .into(),
            ));
        }
        let mixture = docs.mixture_sources().is_some();
        let data = sources[0].data();
        let Some(field) = data.field_index(&options.field) else {
            let names: Vec<&str> = data.fields().iter().map(|f| f.name.as_str()).collect();
            return Err(LoaderError::Sources(format!(
                "pack names field {:?}, which the dataset does not have (its fields: {})",
                options.field,
                names.join(", ")
            )));
        };
        let f = &data.fields()[field];
        if !f.is_ragged() {
            return Err(LoaderError::Sources(format!(
                "pack needs a ragged field of token documents; {:?} is a fixed field of shape {:?}",
                f.name, f.shape
            )));
        }
        if f.has_stop_byte() {
            return Err(LoaderError::Sources(format!(
                "pack needs a ragged field of token documents; {:?} is a {} field (tokenize it first)",
                f.name,
                f.kind.name()
            )));
        }
        let (signed, item) = integer_dtype(&f.dtype).ok_or_else(|| {
            LoaderError::Sources(format!("pack needs integer tokens; field {:?} holds {}", f.name, f.dtype))
        })?;
        if sources.iter().any(|s| s.pads[field].is_some()) {
            return Err(LoaderError::Sources(format!("field {:?} is packed: it takes no pad= of its own", f.name)));
        }
        let rows32 = u32::try_from(rows).map_err(|_| {
            LoaderError::Sources(format!("a packed global batch holds at most 2^32 - 1 rows, not {rows}"))
        })?;
        let id_bytes = |what: &str, v: u64| {
            token_bytes(v, item, signed).ok_or_else(|| {
                LoaderError::Sources(format!("{what} id {v} does not fit field {:?}'s dtype {}", f.name, f.dtype))
            })
        };
        let concat = options.mode == zrecord_core::stream::pack::PackMode::Concat;
        let applies = concat && docs.mode() == zrecord_core::sampler::Mode::Shuffle;
        let spec = PackSpec {
            shuffle_rows: options.shuffle_rows.unwrap_or(applies),
            seq_len: options.seq_len,
            mode: options.mode,
            bos: options.bos,
            eos: options.eos,
            pad: options.pad,
            window: match options.mode {
                zrecord_core::stream::pack::PackMode::Concat => 0,
                zrecord_core::stream::pack::PackMode::BestFit => {
                    options.window.unwrap_or(2 * rows * u64::from(options.seq_len))
                }
            },
        };
        Ok(Packing {
            field,
            item,
            spec,
            rows: rows32,
            bos: options.bos.map(|v| id_bytes("bos", v)).transpose()?,
            eos: options.eos.map(|v| id_bytes("eos", v)).transpose()?,
            pad: id_bytes("pad", options.pad)?,
            mixture,
            row_indexes: options.row_indexes.dir(),
            keep_order: options.keep_order,
            recent: Arc::default(),
        })
    }

    /// The state of a packed loader over `docs` after `step` global batches.
    pub fn state(&self, docs: &Stream, step: u64, cursor: PackCursor) -> StreamState {
        let mut state = docs.state(step);
        state.global_batch = u64::from(self.rows);
        state.pack = Some(PackedState { spec: self.spec, cursor });
        state
    }
}

/// `(signed, bytes)` of a numpy integer dtype string such as `<u2` or `|i1`.
fn integer_dtype(dtype: &str) -> Option<(bool, usize)> {
    let b = dtype.as_bytes();
    if b.len() != 3 || !matches!(b[0], b'<' | b'|' | b'=') {
        return None;
    }
    let item = (b[2] as char).to_digit(10)? as usize;
    if !matches!(item, 1 | 2 | 4 | 8) || (item > 1 && b[0] == b'|') {
        return None;
    }
    match b[1] {
        b'u' => Some((false, item)),
        b'i' => Some((true, item)),
        _ => None,
    }
}

/// Token `v` as `item` little-endian bytes, if it fits (a signed dtype holds `0..2^(8 item - 1)`).
fn token_bytes(v: u64, item: usize, signed: bool) -> Option<Vec<u8>> {
    let bits = 8 * item as u32 - u32::from(signed);
    if bits < 64 && v >> bits != 0 {
        return None;
    }
    Some(v.to_le_bytes()[..item].to_vec())
}

/// Document lengths in tokens, read from the sources' tables; row indexes from a directory.
pub(super) struct TableLengths<'a> {
    pub sources: &'a [Source],
    pub packing: &'a Packing,
}

impl DocLengths for TableLengths<'_> {
    type Error = LoaderError;
    fn lengths(&mut self, source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), LoaderError> {
        self.sources[source].data().byte_lengths(self.packing.field, indices, out)?;
        for len in out.iter_mut() {
            *len /= self.packing.item as u64;
        }
        Ok(())
    }

    fn saved_index(&mut self, source: usize, key: &RowIndexKey) -> Option<Vec<u64>> {
        self.packing.row_indexes.as_ref()?.load(&self.sources[source], self.packing.field, key)
    }

    fn save_index(&mut self, source: usize, key: &RowIndexKey, counts: &[u64]) {
        if let Some(dir) = &self.packing.row_indexes {
            dir.save(&self.sources[source], self.packing.field, key, counts);
        }
    }

    fn keep_docs(&self) -> u64 {
        self.packing.keep_order
    }
}

impl From<PackError> for LoaderError {
    fn from(e: PackError) -> Self {
        LoaderError::Sources(e.to_string())
    }
}

/// The sampler's side of a packed loader: plans global batches and cuts out this rank's rows.
pub(super) struct RankPlanner {
    pub packer: Packer,
    pub sources: Vec<Source>,
    pub packing: Packing,
    /// This rank's rows of each global batch.
    pub first_row: u32,
    pub rows: u32,
    plan: Plan,
}

impl RankPlanner {
    /// The planner of rank `rank`'s `per_rank` rows, from `cursor` at `step` (or the start).
    pub fn new(
        docs: &Stream,
        sources: Vec<Source>,
        packing: Packing,
        rank: u64,
        per_rank: usize,
        step: u64,
        cursor: Option<&PackCursor>,
    ) -> Result<RankPlanner, LoaderError> {
        let mut lengths = TableLengths { sources: &sources, packing: &packing };
        let packer = Packer::new(docs, packing.spec, packing.rows, step, cursor, &mut lengths)?;
        let per_rank = per_rank as u32;
        Ok(RankPlanner {
            packer,
            packing,
            first_row: rank as u32 * per_rank,
            rows: per_rank,
            sources,
            plan: Plan::default(),
        })
    }

    /// The next global batch's job: this rank's pieces.
    pub fn next_job(&mut self) -> Result<Job, LoaderError> {
        let mut lengths = TableLengths { sources: &self.sources, packing: &self.packing };
        self.packer.plan(&mut lengths, &mut self.plan)?;
        let first = self.first_row;
        let placed: Vec<Placed> =
            self.plan.rows(first..first + self.rows).iter().map(|p| Placed { row: p.row - first, ..*p }).collect();
        let mut docs: Vec<(u32, u64)> = placed.iter().map(|p| (p.piece.doc.source, p.piece.doc.index)).collect();
        docs.dedup();
        Ok(Job {
            step: self.plan.step,
            indices: docs.iter().map(|d| d.1).collect(),
            sources: docs.iter().map(|d| d.0).collect(),
            pack: Some(PackJob {
                placed,
                cursor: self.plan.cursor.clone(),
                padding: self.plan.padding,
                last: self.plan.last,
            }),
        })
    }
}

/// A worker's packed batch: decodes the documents of the rank's pieces and writes its rows.
pub(super) fn gather_rows(
    sources: &[Source],
    buffers: &BufferPool,
    packing: &Packing,
    per_rank: usize,
    job: Job,
) -> Result<LoaderBatch, DatasetError> {
    let pack = job.pack.expect("a packed job");
    let seq = packing.spec.seq_len as usize;
    let item = packing.item;
    let cells = per_rank * seq;
    let first = sources[0].data();
    let oom = |e: Error| DatasetError::at(first.path(), None, e);
    // Each document of the batch, decoded once: from the recent ones a batch before cut
    // short, or decoded now, source by source, into one buffer per source that the
    // documents are read from in place (a copy per document cost a fifth of a batch).
    // Shuffled rows over local stores read each piece alone instead (`read_piece`): a
    // random row lands in long documents more often than short ones, and decoding them
    // whole cost about 4.6x the row's tokens.
    let direct = packing.spec.shuffle_rows && sources.iter().all(|s| s.data().remote_stats().is_none());
    let mut docs: Vec<((u32, u64), Body)> = Vec::new();
    let mut gathered: Vec<Vec<u8>> = Vec::new();
    let recent: Vec<Decoded> = match direct {
        true => Vec::new(),
        false => packing.recent.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect(),
    };
    for (s, source) in sources.iter().enumerate().filter(|_| !direct) {
        let mut wanted: Vec<u64> =
            pack.placed.iter().filter(|p| p.piece.doc.source as usize == s).map(|p| p.piece.doc.index).collect();
        wanted.sort_unstable();
        wanted.dedup();
        wanted.retain(|&i| match recent.iter().find(|(k, _)| *k == (s as u32, i)) {
            Some((key, bytes)) => {
                docs.push((*key, Body::Kept(bytes.clone())));
                false
            }
            None => true,
        });
        if wanted.is_empty() {
            continue;
        }
        let (values, offsets) = source.data().gather_ragged(packing.field, &wanted)?;
        for (k, &i) in wanted.iter().enumerate() {
            let span = offsets[k] as usize..offsets[k + 1] as usize;
            docs.push(((s as u32, i), Body::In(gathered.len(), span)));
        }
        gathered.push(values);
    }
    docs.sort_unstable_by_key(|(k, _)| *k);
    let body_of = |b: &Body| -> Arc<[u8]> {
        match b {
            Body::Kept(bytes) => bytes.clone(),
            Body::In(buffer, span) => Arc::from(&gathered[*buffer][span.clone()]),
        }
    };
    // The documents this batch cuts at its end go to the recent ones.
    if let Some(last) = pack.placed.last().filter(|_| !direct) {
        let p = &last.piece;
        if p.start + u64::from(p.len) < p.doc.len {
            let key = (p.doc.source, p.doc.index);
            if let Ok(k) = docs.binary_search_by_key(&key, |(k, _)| *k) {
                let mut recent = packing.recent.lock().unwrap_or_else(|p| p.into_inner());
                if !recent.iter().any(|(k, _)| *k == key) {
                    if recent.len() >= RECENT {
                        recent.pop_front();
                    }
                    recent.push_back((key, body_of(&docs[k].1)));
                }
            }
        }
    }
    let (mut tokens, _) = buffers.take(cells * item).map_err(oom)?;
    let (mut segments, _) = buffers.take(cells * 4).map_err(oom)?;
    let (mut positions, _) = buffers.take(cells * 4).map_err(oom)?;
    let mut source_ids = if packing.mixture { Some(buffers.take(cells * 4).map_err(oom)?.0) } else { None };
    // Every cell is written: padding first, then the pieces over it. Pieces never overlap,
    // so when they add up to every cell (concat, always) the padding pass is skipped.
    let covered = pack.placed.iter().map(|p| p.piece.len as usize).sum::<usize>() == cells;
    if !covered {
        fill_cells(&mut tokens, &packing.pad);
        segments.fill(0);
        positions.fill(0);
        if let Some(ids) = &mut source_ids {
            ids.fill(0);
        }
    }
    let bos = usize::from(packing.bos.is_some());
    let eos = usize::from(packing.eos.is_some());
    let mut scratch = Vec::new();
    let mut row = u32::MAX;
    let mut segment = 0i32;
    for p in &pack.placed {
        if p.row != row {
            row = p.row;
            segment = 0;
        }
        segment += 1;
        let doc = &p.piece.doc;
        let body: &[u8] = match direct {
            true => &[],
            false => {
                let k = docs
                    .binary_search_by_key(&(doc.source, doc.index), |(k, _)| *k)
                    .expect("every placed document is here");
                match &docs[k].1 {
                    Body::Kept(bytes) => bytes,
                    Body::In(buffer, span) => &gathered[*buffer][span.clone()],
                }
            }
        };
        let at = p.row as usize * seq + p.col as usize;
        let len = p.piece.len as usize;
        let start = p.piece.start as usize;
        let body_tokens = match direct {
            true => doc.len as usize - bos - eos,
            false => body.len() / item,
        };
        let mut j = 0;
        while j < len {
            let (v, dst) = (start + j, at + j);
            if bos == 1 && v == 0 {
                tokens[dst * item..(dst + 1) * item].copy_from_slice(packing.bos.as_deref().expect("bos set"));
                j += 1;
                continue;
            }
            let from = v - bos;
            if from >= body_tokens {
                // Only the eos lies past the document's tokens.
                tokens[dst * item..(dst + 1) * item].copy_from_slice(packing.eos.as_deref().expect("eos set"));
                j += 1;
                continue;
            }
            let run = (body_tokens - from).min(len - j);
            let cells = &mut tokens[dst * item..(dst + run) * item];
            if direct {
                let data = sources[doc.source as usize].data();
                data.read_piece(packing.field, doc.index, (from * item) as u64, cells, &mut scratch)?;
            } else {
                cells.copy_from_slice(&body[from * item..(from + run) * item]);
            }
            j += run;
        }
        let cells = at * 4..(at + len) * 4;
        fill_cells(&mut segments[cells.clone()], &segment.to_le_bytes());
        for (j, cell) in positions[cells.clone()].chunks_exact_mut(4).enumerate() {
            cell.copy_from_slice(&(j as i32).to_le_bytes());
        }
        if let Some(ids) = &mut source_ids {
            fill_cells(&mut ids[cells], &(doc.source as i32).to_le_bytes());
        }
    }
    let mut fields = vec![tokens, segments, positions];
    fields.extend(source_ids);
    let ragged = vec![None; fields.len()];
    Ok(LoaderBatch {
        step: job.step,
        indices: job.indices,
        sources: job.sources,
        fields,
        ragged,
        fetched: None,
        pack: Some(PackInfo { cursor: pack.cursor, padding: pack.padding, last: pack.last }),
        valid: 0, // set by Loader::next
        replaced: Vec::new(),
    })
}

/// Writes `value` (the bytes of one cell) into every cell of `buf`. Cell by cell, a copy of
/// a size known only at run time is a call to `memmove` each: with a 2-byte token that was
/// a third of a packed batch's time.
fn fill_cells(buf: &mut [u8], value: &[u8]) {
    if value.iter().all(|&b| b == value[0]) {
        buf.fill(value[0]);
        return;
    }
    let Some(first) = buf.get_mut(..value.len()) else { return };
    first.copy_from_slice(value);
    // Doubling: each copy repeats everything written so far.
    let mut done = value.len();
    while done < buf.len() {
        let n = done.min(buf.len() - done);
        buf.copy_within(..n, done);
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::fill_cells;

    #[test]
    fn fill_cells_repeats_the_value_in_every_cell() {
        for value in [&[7u8][..], &[1, 2], &[0, 0, 0, 0], &[1, 0, 0, 0], &[9, 8, 7, 6, 5, 4, 3, 2]] {
            for cells in [0usize, 1, 2, 3, 5, 64, 1000] {
                let mut buf = vec![0xAAu8; cells * value.len()];
                fill_cells(&mut buf, value);
                assert!(buf.chunks_exact(value.len()).all(|c| c == value), "{value:?} x {cells}");
            }
        }
    }
}
