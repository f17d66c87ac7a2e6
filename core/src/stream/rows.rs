//! Shuffled packed rows: each epoch's documents laid end to end in the epoch's shuffled
//! order and cut into rows of `seq_len` tokens (as [`super::pack::PackMode::Concat`] does),
//! then the rows themselves read in a second keyed shuffle, so one global batch draws its
//! rows from across the whole epoch (Megatron-LM's GPT dataset does the same: a document
//! shuffle, then a sample shuffle).
//!
//! An epoch has `R = floor(T / seq_len)` rows, where `T` is the virtual tokens of all
//! documents (`bos` and `eos` counted), the same every epoch; the `T mod seq_len` tokens
//! at the epoch's end are not read that epoch. No row crosses an epoch, and every row of an
//! epoch is a distinct stretch of that epoch's tokens.
//!
//! - One dataset: an epoch has `floor(R / rows)` global batches; the rows past the last
//!   whole batch are not read.
//! - A mixture: every source has its own epochs of rows, numbered from 0 on (its documents
//!   in [`Permutation::for_source`] order, as sequential mixture packing reads them). Each
//!   global batch takes a fixed number of rows from each source, its token share to within
//!   one row ([`super::shares`]), and the rows of the batch are put in a keyed order of
//!   their own so that every rank's slice mixes the sources too. A source's `j`-th row is
//!   row `j mod R_s` of its epoch `j / R_s` in that epoch's row shuffle. A mixture has no
//!   stream-wide epochs.
//!
//! Row `r` of epoch `e` is tokens `r seq_len ..` of the epoch's concatenation. Finding its
//! documents needs the running token count at each position of the epoch's order: the
//! [`Index`] keeps it at every [`STRIDE`]-th position (8 bytes per 16 documents: 50 MB
//! for 10^8 documents), built once per epoch (per source) from the tables' lengths, and
//! reads at most `STRIDE` lengths more per row (a stride of 64 made planning a third of a
//! batch's cost). Up to [`KEEP_DOCS`] documents, the epoch's order and lengths are kept in
//! memory beside it (8 bytes per document: 32 MiB at most), so placing a row reads no
//! table at all. A batch depends on its step alone, so the resume state holds no cursor,
//! and any world size or worker count reads the same rows.

use alloc::vec::Vec;

use super::pack::{Doc, DocLengths, PackError, PackSpec, Piece, Placed, Plan};
use super::row_index::RowIndexKey;
use super::shares::RowShares;
use super::{DatasetId, Mode, Permutation, Stream};

/// Positions between two running counts the index keeps.
pub const STRIDE: u64 = 16;

/// Lengths read at a time while building an index.
const CHUNK: usize = 4096;

/// Sources of at most this many documents keep their epoch's order and lengths in memory
/// ([`Kept`]): their rows are placed without a table lookup (16 random lookups per row
/// were half the planner's time, and the planner a fifth of a shuffled-rows loader's).
pub const KEEP_DOCS: u64 = 1 << 22;

/// The source number the row permutation of source 0 is keyed with, apart from every
/// document permutation's (a mixture's sources are numbered from 0); source `s` adds `s`.
const ROWS_KEY: u32 = 0x524f_5753; // "ROWS"

/// Strides of a saved index checked against the lengths before it is used.
const CHECKED: u64 = 8;

/// The source number the order of a mixture batch's rows is keyed with.
const BATCH_KEY: u32 = 0x4241_5443; // "BATC"

/// The running token count of one epoch's document order, at every [`STRIDE`]-th position.
#[derive(Clone, Debug)]
struct Index {
    epoch: u64,
    /// Virtual tokens before position `k * STRIDE`, for `k` in `0..=ceil(n / STRIDE)`
    /// (the last is at `n`: every token of the epoch).
    counts: Vec<u64>,
    /// The epoch's whole order and lengths, for a source of at most [`KEEP_DOCS`].
    kept: Option<Kept>,
}

/// One epoch's document at each position of its order, and its length (as
/// [`DocLengths::lengths`] gives it), position by position.
#[derive(Clone, Debug)]
struct Kept {
    indices: Vec<u32>,
    lengths: Vec<u32>,
}

/// One dataset's (or mixture source's) epochs of rows.
#[derive(Clone, Debug)]
struct SourceRows {
    source: u32,
    dataset: DatasetId,
    /// Documents per epoch.
    docs: u64,
    /// Rows per epoch, `R`.
    epoch_rows: u64,
    index: Index,
    /// The document order and the row order of the index's epoch (the row order once `R`
    /// is known).
    order: Option<Permutation>,
    row_order: Option<Permutation>,
}

/// Plans the global batches of shuffled packed rows over one dataset or a mixture: see the
/// module documentation.
#[derive(Clone, Debug)]
pub struct ShuffledRows {
    spec: PackSpec,
    rows: u32,
    seed: u64,
    sources: Vec<SourceRows>,
    /// A mixture's rows per source and batch; `None` for one dataset.
    shares: Option<RowShares>,
    indices: Vec<u64>,
    lengths: Vec<u64>,
    /// A mixture batch's rows per source, and the rows each source gave earlier batches.
    in_batch: Vec<u32>,
    before: Vec<u64>,
    /// A mixture batch's (slot, row) pairs, by slot.
    slots: Vec<(u32, u32)>,
}

impl ShuffledRows {
    /// The planner of `rows` rows per global batch over `docs` (a SHUFFLE stream over one
    /// dataset, or a mixture, with a global batch of 1). Reads every document's length
    /// once to count each source's epoch of tokens.
    pub fn new<L: DocLengths>(
        docs: &Stream,
        spec: PackSpec,
        rows: u32,
        lengths: &mut L,
    ) -> Result<ShuffledRows, L::Error>
    where
        L::Error: From<PackError>,
    {
        let refuse = |why: &str| PackError::Spec(alloc::format!("shuffled rows {why}"));
        if docs.mode() != Mode::Shuffle {
            return Err(refuse("need SHUFFLE mode: their epochs are the documents' shuffled epochs").into());
        }
        if docs.eras().len() > 1 {
            return Err(refuse("need a dataset that did not grow under the saved state").into());
        }
        let mixture = docs.mixture_sources();
        let mut planner = ShuffledRows {
            spec,
            rows,
            seed: docs.seed(),
            sources: docs
                .datasets()
                .iter()
                .enumerate()
                .map(|(s, d)| SourceRows {
                    source: s as u32,
                    dataset: *d,
                    docs: d.length,
                    epoch_rows: 0,
                    index: Index { epoch: u64::MAX, counts: Vec::new(), kept: None },
                    order: None,
                    row_order: None,
                })
                .collect(),
            shares: mixture.map(|m| RowShares::new(m, rows, docs.seed())),
            indices: Vec::with_capacity(CHUNK),
            lengths: Vec::with_capacity(CHUNK),
            in_batch: alloc::vec![0; docs.datasets().len()],
            before: alloc::vec![0; docs.datasets().len()],
            slots: Vec::new(),
        };
        for s in 0..planner.sources.len() {
            planner.build(s, 0, lengths)?;
            let source = &mut planner.sources[s];
            let tokens = *source.index.counts.last().unwrap_or(&0);
            source.epoch_rows = tokens / u64::from(spec.seq_len);
            let n = source.docs;
            if mixture.is_some() && source.epoch_rows == 0 {
                return Err(PackError::Spec(alloc::format!(
                    "mixture source {s}: its {n} documents hold {tokens} tokens, less than one row of {} \
                     (use shorter rows or rows=\"sequential\")",
                    spec.seq_len
                ))
                .into());
            }
            if mixture.is_none() && source.epoch_rows < u64::from(rows) {
                return Err(PackError::Spec(alloc::format!(
                    "an epoch of {n} documents holds {tokens} tokens: {} rows of {}, fewer than one global batch of \
                     {rows} rows (use fewer rows, shorter rows or rows=\"sequential\", which runs on across epochs)",
                    source.epoch_rows,
                    spec.seq_len
                ))
                .into());
            }
        }
        Ok(planner)
    }

    /// Global batches per epoch over one dataset; `None` for a mixture, whose sources each
    /// run their own epochs.
    pub fn steps_per_epoch(&self) -> Option<u64> {
        match self.shares {
            None => Some(self.sources[0].epoch_rows / u64::from(self.rows)),
            Some(_) => None,
        }
    }

    /// Rows per epoch (`R`) of source `source` (0 for one dataset): its epoch's tokens over
    /// `seq_len`.
    pub fn epoch_rows(&self, source: usize) -> u64 {
        self.sources[source].epoch_rows
    }

    /// Plans global batch `step` into `out` (its cursor left as it is: the step alone
    /// places a batch).
    pub fn plan<L: DocLengths>(&mut self, step: u64, lengths: &mut L, out: &mut Plan) -> Result<(), L::Error>
    where
        L::Error: From<PackError>,
    {
        out.step = step;
        out.placed.clear();
        out.padding = 0;
        let rows = u64::from(self.rows);
        let Some(shares) = &self.shares else {
            let per_epoch = self.sources[0].epoch_rows / rows;
            let (epoch, within) = (step / per_epoch, step % per_epoch);
            for row in 0..self.rows {
                self.place(0, row, epoch, within * rows + u64::from(row), lengths, out)?;
            }
            return Ok(());
        };
        shares.in_batch(step, &mut self.in_batch);
        shares.before(step, &mut self.before);
        // Slots 0..rows hold the sources' rows one source after another; the batch's rows
        // take the slots in a keyed order.
        let order = Permutation::for_source(rows, self.seed, BATCH_KEY, step);
        self.slots.clear();
        self.slots.extend((0..self.rows).map(|row| (order.at(u64::from(row)) as u32, row)));
        self.slots.sort_unstable();
        let mut slot = 0usize;
        for s in 0..self.sources.len() {
            for k in 0..u64::from(self.in_batch[s]) {
                let row = self.slots[slot].1;
                slot += 1;
                let j = self.before[s] + k;
                let per_epoch = self.sources[s].epoch_rows;
                self.place(s, row, j / per_epoch, j % per_epoch, lengths, out)?;
            }
        }
        // Pieces were placed source by source: the plan is read by row.
        out.placed.sort_by_key(|p| p.row);
        Ok(())
    }

    /// Places, at row `row` of the batch, the row at position `within` of source `s`'s
    /// epoch `epoch` in its row shuffle.
    fn place<L: DocLengths>(
        &mut self,
        s: usize,
        row: u32,
        epoch: u64,
        within: u64,
        lengths: &mut L,
        out: &mut Plan,
    ) -> Result<(), L::Error> {
        if self.sources[s].index.epoch != epoch {
            self.build(s, epoch, lengths)?;
        }
        let source = &mut self.sources[s];
        let key = ROWS_KEY.wrapping_add(source.source);
        let (rows, seed) = (source.epoch_rows, self.seed);
        let r = source.row_order.get_or_insert_with(|| Permutation::for_source(rows, seed, key, epoch)).at(within);
        self.place_row(s, row, r * u64::from(self.spec.seq_len), epoch, lengths, out)
    }

    /// Places the row of tokens `first .. first + seq_len` of source `s`'s epoch `epoch`
    /// (whose index is built).
    fn place_row<L: DocLengths>(
        &mut self,
        s: usize,
        row: u32,
        first: u64,
        epoch: u64,
        lengths: &mut L,
        out: &mut Plan,
    ) -> Result<(), L::Error> {
        let seq = self.spec.seq_len;
        let source = &self.sources[s];
        let (docs, number) = (source.docs, source.source);
        let order = source.order.as_ref().expect("built with the index");
        // The last kept count at or before the row's first token.
        let counts = &source.index.counts;
        let k = counts.partition_point(|&c| c <= first) - 1;
        let (mut position, mut before) = (k as u64 * STRIDE, counts[k]);
        let mut col = 0u32;
        while col < seq {
            let n = (docs - position).min(STRIDE) as usize;
            if n == 0 {
                // Rows end before the epoch's last token: never here.
                debug_assert!(false, "row at token {first} runs past the epoch");
                break;
            }
            self.indices.clear();
            self.lengths.clear();
            match &source.index.kept {
                Some(kept) => {
                    let at = position as usize..position as usize + n;
                    self.indices.extend(kept.indices[at.clone()].iter().map(|&i| u64::from(i)));
                    self.lengths.extend(kept.lengths[at].iter().map(|&l| u64::from(l)));
                }
                None => {
                    self.indices.resize(n, 0);
                    order.fill(position, &mut self.indices);
                    self.lengths.resize(n, 0);
                    lengths.lengths(s, &self.indices, &mut self.lengths)?;
                }
            }
            for (&index, &len) in self.indices.iter().zip(&self.lengths) {
                let len = self.spec.virtual_len(len);
                let at = first + u64::from(col);
                if before + len > at {
                    let start = at - before;
                    let take = (len - start).min(u64::from(seq - col)) as u32;
                    let doc = Doc { source: number, position: epoch * docs + position, index, len };
                    out.placed.push(Placed { row, col, piece: Piece { doc, start, len: take } });
                    col += take;
                    if col == seq {
                        return Ok(());
                    }
                }
                before += len;
                position += 1;
            }
        }
        Ok(())
    }

    /// The running counts of source `s`'s epoch `epoch` order: a saved index the host
    /// has if a few strides of it match the lengths, else built from the lengths (and
    /// handed to the host to save).
    fn build<L: DocLengths>(&mut self, s: usize, epoch: u64, lengths: &mut L) -> Result<(), L::Error> {
        let source = &self.sources[s];
        let key = RowIndexKey {
            source: source.source,
            dataset: source.dataset,
            seed: self.seed,
            epoch,
            bos: self.spec.bos.is_some(),
            eos: self.spec.eos.is_some(),
            stride: STRIDE,
        };
        let order = Permutation::for_source(source.docs, self.seed, source.source, epoch);
        // A source small enough to keep its order counts it: the count is what keeps it,
        // and no other planner needs its index.
        let keep = source.docs <= lengths.keep_docs();
        let saved = match keep {
            true => None,
            false => lengths.saved_index(s, &key),
        };
        if let Some(counts) = saved {
            if counts.len() as u64 == key.counts() && self.matches(s, &order, &counts, lengths)? {
                let source = &mut self.sources[s];
                source.index = Index { epoch, counts, kept: None };
                source.order = Some(order);
                source.row_order = None;
                return Ok(());
            }
        }
        self.count(s, epoch, order, lengths)?;
        if !keep {
            lengths.save_index(s, &key, &self.sources[s].index.counts);
        }
        Ok(())
    }

    /// Whether `counts` agree with the lengths at [`CHECKED`] strides spread over the
    /// order: a saved index of other documents (a dataset rewritten in place to the same
    /// identity) fails here rather than cutting rows at the wrong tokens.
    fn matches<L: DocLengths>(
        &mut self,
        s: usize,
        order: &Permutation,
        counts: &[u64],
        lengths: &mut L,
    ) -> Result<bool, L::Error> {
        let docs = self.sources[s].docs;
        let strides = counts.len() as u64 - 1;
        for i in 0..CHECKED.min(strides) {
            let k = i * strides / CHECKED.min(strides);
            let first = k * STRIDE;
            let n = (docs - first).min(STRIDE) as usize;
            self.indices.resize(n, 0);
            order.fill(first, &mut self.indices);
            self.lengths.clear();
            self.lengths.resize(n, 0);
            lengths.lengths(s, &self.indices, &mut self.lengths)?;
            let tokens: u64 = self.lengths.iter().map(|&l| self.spec.virtual_len(l)).sum();
            if counts[k as usize + 1].checked_sub(counts[k as usize]) != Some(tokens) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Builds source `s`'s running counts of epoch `epoch`'s `order` from the lengths.
    fn count<L: DocLengths>(
        &mut self,
        s: usize,
        epoch: u64,
        order: Permutation,
        lengths: &mut L,
    ) -> Result<(), L::Error> {
        let source = &mut self.sources[s];
        let counts = &mut source.index.counts;
        counts.clear();
        counts.reserve((source.docs / STRIDE + 2) as usize);
        let docs = source.docs as usize;
        let mut kept = (source.docs <= lengths.keep_docs())
            .then(|| Kept { indices: Vec::with_capacity(docs), lengths: Vec::with_capacity(docs) });
        let mut total = 0u64;
        let mut position = 0u64;
        while position < source.docs {
            let n = (source.docs - position).min(CHUNK as u64) as usize;
            self.indices.resize(n, 0);
            order.fill(position, &mut self.indices);
            self.lengths.clear();
            self.lengths.resize(n, 0);
            lengths.lengths(s, &self.indices, &mut self.lengths)?;
            for (&index, &len) in self.indices.iter().zip(&self.lengths) {
                if position.is_multiple_of(STRIDE) {
                    counts.push(total);
                }
                total += self.spec.virtual_len(len);
                position += 1;
                if let Some(k) = &mut kept {
                    match (u32::try_from(index), u32::try_from(len)) {
                        (Ok(i), Ok(l)) => {
                            k.indices.push(i);
                            k.lengths.push(l);
                        }
                        // A document of 2^32 tokens or more: looked up instead.
                        _ => kept = None,
                    }
                }
            }
        }
        counts.push(total);
        source.index.kept = kept;
        source.index.epoch = epoch;
        source.order = Some(order);
        source.row_order = None;
        Ok(())
    }
}
