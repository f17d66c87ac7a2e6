//! Shuffled packed rows: each epoch's documents laid end to end in the epoch's shuffled
//! order and cut into rows of `seq_len` tokens (as [`super::pack::PackMode::Concat`] does),
//! then the rows themselves read in a second keyed shuffle, so one global batch draws its
//! rows from across the whole epoch (Megatron-LM's GPT dataset does the same: a document
//! shuffle, then a sample shuffle).
//!
//! An epoch has `R = floor(T / seq_len)` rows, where `T` is the virtual tokens of all
//! documents (`bos` and `eos` counted), the same every epoch; the `T mod seq_len` tokens
//! at the epoch's end are not read that epoch. It has `floor(R / rows)` global batches;
//! the rows past the last whole batch are not read either. No row crosses an epoch, and
//! every row of an epoch's batches is a distinct stretch of that epoch's tokens.
//!
//! Row `r` of epoch `e` is tokens `r seq_len ..` of the epoch's concatenation. Finding its
//! documents needs the running token count at each position of the epoch's order: the
//! [`Index`] keeps it at every [`STRIDE`]-th position (8 bytes per 16 documents: 50 MB
//! for 10^8 documents), built once per epoch from the tables' lengths, and reads at most
//! `STRIDE` lengths more per row (a stride of 64 made planning a third of a batch's cost). A batch depends on its step alone, so the resume state
//! holds no cursor, and any world size or worker count reads the same rows.

use alloc::vec::Vec;

use super::pack::{Doc, DocLengths, PackError, PackSpec, Piece, Placed, Plan};
use super::{Permutation, Stream};
use crate::sampler::Mode;

/// Positions between two running counts the index keeps.
pub const STRIDE: u64 = 16;

/// Lengths read at a time while building an index.
const CHUNK: usize = 4096;

/// The source number the row permutation is keyed with, apart from every document
/// permutation's (a mixture's sources are numbered from 0).
const ROWS_KEY: u32 = 0x524f_5753; // "ROWS"

/// The running token count of one epoch's document order, at every [`STRIDE`]-th position.
#[derive(Clone, Debug)]
struct Index {
    epoch: u64,
    /// Virtual tokens before position `k * STRIDE`, for `k` in `0..=ceil(n / STRIDE)`
    /// (the last is at `n`: every token of the epoch).
    counts: Vec<u64>,
}

/// Plans the global batches of shuffled packed rows over one dataset: see the module
/// documentation.
#[derive(Clone, Debug)]
pub struct ShuffledRows {
    spec: PackSpec,
    rows: u32,
    seed: u64,
    /// Documents per epoch.
    docs: u64,
    /// Rows per epoch, `R`.
    epoch_rows: u64,
    index: Index,
    indices: Vec<u64>,
    lengths: Vec<u64>,
}

impl ShuffledRows {
    /// The planner of `rows` rows per global batch over `docs` (a SHUFFLE stream over one
    /// dataset with a global batch of 1). Reads every document's length once to count the
    /// epoch's tokens.
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
        if docs.mixture_sources().is_some() {
            return Err(refuse("read one dataset, not a mixture (a mixture's rows are sequential)").into());
        }
        if docs.mode() != Mode::Shuffle {
            return Err(refuse("need SHUFFLE mode: their epochs are the documents' shuffled epochs").into());
        }
        if docs.eras().len() > 1 {
            return Err(refuse("need a dataset that did not grow under the saved state").into());
        }
        let n = docs.datasets()[0].length;
        let mut planner = ShuffledRows {
            spec,
            rows,
            seed: docs.seed(),
            docs: n,
            epoch_rows: 0,
            index: Index { epoch: u64::MAX, counts: Vec::new() },
            indices: Vec::with_capacity(CHUNK),
            lengths: Vec::with_capacity(CHUNK),
        };
        planner.build(0, lengths)?;
        let tokens = *planner.index.counts.last().unwrap_or(&0);
        planner.epoch_rows = tokens / u64::from(spec.seq_len);
        if planner.epoch_rows < u64::from(rows) {
            return Err(PackError::Spec(alloc::format!(
                "an epoch of {n} documents holds {tokens} tokens: {} rows of {}, fewer than one global batch of {rows} \
                 rows (use fewer rows, shorter rows or rows=\"sequential\", which runs on across epochs)",
                planner.epoch_rows,
                spec.seq_len
            ))
            .into());
        }
        Ok(planner)
    }

    /// Global batches per epoch.
    pub fn steps_per_epoch(&self) -> u64 {
        self.epoch_rows / u64::from(self.rows)
    }

    /// Rows per epoch (`R`): the epoch's tokens over `seq_len`.
    pub fn epoch_rows(&self) -> u64 {
        self.epoch_rows
    }

    /// Plans global batch `step` into `out` (its cursor left as it is: the step alone
    /// places a batch).
    pub fn plan<L: DocLengths>(&mut self, step: u64, lengths: &mut L, out: &mut Plan) -> Result<(), L::Error>
    where
        L::Error: From<PackError>,
    {
        let per_epoch = self.steps_per_epoch();
        let (epoch, within) = (step / per_epoch, step % per_epoch);
        if self.index.epoch != epoch {
            self.build(epoch, lengths)?;
        }
        let order = Permutation::new(self.docs, self.seed, epoch);
        let shuffle = Permutation::for_source(self.epoch_rows, self.seed, ROWS_KEY, epoch);
        out.step = step;
        out.placed.clear();
        out.padding = 0;
        let seq = u64::from(self.spec.seq_len);
        for row in 0..self.rows {
            let r = shuffle.at(within * u64::from(self.rows) + u64::from(row));
            self.place_row(row, r * seq, &order, epoch, lengths, out)?;
        }
        Ok(())
    }

    /// Places the row of tokens `first .. first + seq_len` of the epoch's concatenation.
    fn place_row<L: DocLengths>(
        &mut self,
        row: u32,
        first: u64,
        order: &Permutation,
        epoch: u64,
        lengths: &mut L,
        out: &mut Plan,
    ) -> Result<(), L::Error> {
        let seq = self.spec.seq_len;
        // The last kept count at or before the row's first token.
        let k = self.index.counts.partition_point(|&c| c <= first) - 1;
        let (mut position, mut before) = (k as u64 * STRIDE, self.index.counts[k]);
        let mut col = 0u32;
        while col < seq {
            let n = (self.docs - position).min(STRIDE) as usize;
            if n == 0 {
                // Rows end before the epoch's last token: never here.
                debug_assert!(false, "row at token {first} runs past the epoch");
                break;
            }
            self.indices.resize(n, 0);
            order.fill(position, &mut self.indices);
            self.lengths.clear();
            self.lengths.resize(n, 0);
            lengths.lengths(0, &self.indices, &mut self.lengths)?;
            for (&index, &len) in self.indices.iter().zip(&self.lengths) {
                let len = self.spec.virtual_len(len);
                let at = first + u64::from(col);
                if before + len > at {
                    let start = at - before;
                    let take = (len - start).min(u64::from(seq - col)) as u32;
                    let doc = Doc { source: 0, position: epoch * self.docs + position, index, len };
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

    /// The running counts of epoch `epoch`'s order.
    fn build<L: DocLengths>(&mut self, epoch: u64, lengths: &mut L) -> Result<(), L::Error> {
        let order = Permutation::new(self.docs, self.seed, epoch);
        let counts = &mut self.index.counts;
        counts.clear();
        counts.reserve((self.docs / STRIDE + 2) as usize);
        let mut total = 0u64;
        let mut position = 0u64;
        while position < self.docs {
            let n = (self.docs - position).min(CHUNK as u64) as usize;
            self.indices.resize(n, 0);
            order.fill(position, &mut self.indices);
            self.lengths.clear();
            self.lengths.resize(n, 0);
            lengths.lengths(0, &self.indices, &mut self.lengths)?;
            for &len in &self.lengths {
                if position.is_multiple_of(STRIDE) {
                    counts.push(total);
                }
                total += self.spec.virtual_len(len);
                position += 1;
            }
        }
        counts.push(total);
        self.index.epoch = epoch;
        Ok(())
    }
}
