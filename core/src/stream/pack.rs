//! Packing token documents into rows of `seq_len` tokens: which piece of which document
//! lands in which row and column of every global batch.
//!
//! Documents come from a stream of their own, one document per position: the dataset's
//! [`Stream`] with a global batch of one (its epochs are then over documents), or, for a
//! mixture, each source's shuffled epochs with the next document taken from the source
//! furthest behind its share of the **tokens** ([`Packer`]'s mixture rule). A document
//! with `bos` and `eos` ids set is read as `[bos] tokens [eos]`: its *virtual* tokens.
//!
//! - [`PackMode::Concat`]: the virtual tokens of the documents, in stream order, cut every
//!   `seq_len` tokens. No padding; a document may run on into the next row, and the next
//!   global batch.
//! - [`PackMode::BestFit`]: a document longer than `seq_len` is cut into `seq_len`-token
//!   pieces; the pieces wait in a window of at least `window` tokens, and each global batch
//!   places them, oldest first, each into the row with the least room that still holds it
//!   (ties: the lowest row). Pieces that fit nowhere wait for the next batch, ahead of the
//!   new ones, so none waits forever (an empty row holds any piece). Room left is padding.
//!
//! Packing is sequential: a batch's rows depend on where the previous batch stopped. The
//! [`PackCursor`] after each batch is what a resume needs (where each source's documents
//! stand, the tokens taken, the pieces still waiting), and it is small: no token is in it.
//! Rows do not depend on the world size or on the number of workers: every rank plans the
//! whole global batch of `rows` rows (from document lengths alone, which the store's table
//! holds) and takes its own slice, so a job resumes with another split of the same rows.

use alloc::collections::{BTreeSet, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;

use super::row_index::RowIndexKey;
use super::rows::ShuffledRows;
use super::{Mixture, Permutation, Shard, Stream};

/// How documents are laid into rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PackMode {
    /// Back to back, cut every `seq_len` tokens; no padding.
    Concat,
    /// Whole documents (pieces of `seq_len` for longer ones) placed by best fit over a
    /// window; padding where nothing fits.
    BestFit,
}

impl PackMode {
    /// The name used in states and by the bindings: `concat` or `best_fit`.
    pub fn name(self) -> &'static str {
        match self {
            PackMode::Concat => "concat",
            PackMode::BestFit => "best_fit",
        }
    }

    /// The mode called `name` ([`PackMode::name`]).
    pub fn from_name(name: &str) -> Option<PackMode> {
        match name {
            "concat" => Some(PackMode::Concat),
            "best_fit" => Some(PackMode::BestFit),
            _ => None,
        }
    }
}

/// What a packed stream is: row length, mode, the ids added around documents and the
/// best-fit window. A saved state names all of it, and a resume with other values fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PackSpec {
    /// Tokens per row, at least 1.
    pub seq_len: u32,
    /// How documents are laid into rows.
    pub mode: PackMode,
    /// A token put before every document, if any.
    pub bos: Option<u64>,
    /// A token put after every document, if any.
    pub eos: Option<u64>,
    /// The token of padding (best fit only; 0 by default).
    pub pad: u64,
    /// Best fit: tokens the window of waiting pieces holds before a batch is placed, at
    /// least `rows * seq_len` (concat ignores it and saves 0).
    pub window: u64,
    /// Concat over a SHUFFLE stream of one dataset or a mixture: each epoch's rows read in
    /// a shuffled order, no row crossing an epoch ([`super::rows`]). `false`: rows in the order they
    /// are cut, running on across epochs.
    pub shuffle_rows: bool,
}

impl PackSpec {
    /// Tokens a document of `len` tokens takes with its `bos` and `eos`.
    pub fn virtual_len(&self, len: u64) -> u64 {
        len + u64::from(self.bos.is_some()) + u64::from(self.eos.is_some())
    }
}

/// One document: where it stands in its source's document stream, which sample it is, and
/// its virtual length (tokens plus `bos` and `eos`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Doc {
    /// The mixture source (0 for one dataset).
    pub source: u32,
    /// Its position in the source's document stream.
    pub position: u64,
    /// The sample index in the source.
    pub index: u64,
    /// Virtual tokens.
    pub len: u64,
}

/// Virtual tokens `start .. start + len` of a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The document.
    pub doc: Doc,
    /// First virtual token.
    pub start: u64,
    /// Number of tokens.
    pub len: u32,
}

/// A piece at a row and column of a global batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The row, in `0..rows` of the global batch.
    pub row: u32,
    /// The column of the piece's first token.
    pub col: u32,
    /// What lands there.
    pub piece: Piece,
}

/// Where packing stands after a global batch: per source, the documents taken and their
/// virtual tokens, and the pieces still waiting, oldest first (source, position, start).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PackCursor {
    /// Documents taken from each source's stream.
    pub taken: Vec<u64>,
    /// Virtual tokens of those documents, per source.
    pub tokens: Vec<u64>,
    /// Pieces waiting: `(source, position, start)`. Concat: at most one, the rest of a
    /// document cut at a row's end. Best fit: the window's unplaced pieces.
    pub waiting: Vec<(u32, u64, u64)>,
}

/// One global batch's plan ([`Packer::plan`]).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The global batch.
    pub step: u64,
    /// Every piece of the batch, by row then column.
    pub placed: Vec<Placed>,
    /// Padding tokens in the batch.
    pub padding: u64,
    /// The cursor after this batch: what a state saved after it holds.
    pub cursor: PackCursor,
    /// A finite pass ([`Packer::finish_after`]): the last batch holding tokens; rows past
    /// the last document are padding.
    pub last: bool,
}

impl Plan {
    /// The pieces of rows `rows`, in order (the plan is sorted by row).
    pub fn rows(&self, rows: core::ops::Range<u32>) -> &[Placed] {
        let lo = self.placed.partition_point(|p| p.row < rows.start);
        let hi = self.placed.partition_point(|p| p.row < rows.end);
        &self.placed[lo..hi]
    }
}

/// The lengths, in tokens (no `bos` or `eos`), of documents: the host reads them from the
/// stores' tables.
pub trait DocLengths {
    /// What a failed read is.
    type Error;
    /// The tokens of samples `indices` of source `source`, into `out`.
    fn lengths(&mut self, source: usize, indices: &[u64], out: &mut [u64]) -> Result<(), Self::Error>;

    /// A row index of source `source` saved earlier under `key` ([`super::row_index`]), if
    /// the host keeps them: the counts [`super::row_index::decode`] gives for its file.
    /// Shuffled rows check a few strides of it against the lengths before they use it.
    fn saved_index(&mut self, _source: usize, _key: &RowIndexKey) -> Option<Vec<u64>> {
        None
    }

    /// Keeps a row index shuffled rows built, for [`DocLengths::saved_index`] to find (best
    /// effort: a host that cannot keep it drops it).
    fn save_index(&mut self, _source: usize, _key: &RowIndexKey, _counts: &[u64]) {}

    /// Sources of at most this many documents have shuffled rows keep each epoch's order
    /// and lengths in memory (8 bytes per document) instead of a row index they look
    /// lengths up through, and neither load nor save an index ([`super::rows::KEEP_DOCS`]
    /// unless the host is told otherwise).
    fn keep_docs(&self) -> u64 {
        super::rows::KEEP_DOCS
    }
}

/// Documents whose lengths are read at a time.
const LOOKAHEAD: usize = 64;

/// The sample at each position of one source's document stream.
#[derive(Clone, Debug)]
enum Order {
    /// One dataset: its stream with a global batch of one; `at` is the shard's place.
    Single { shard: Shard, at: u64 },
    /// A mixture source's shuffled epochs (the permutation of the epoch last used).
    Source { len: u64, seed: u64, source: u32, perm: Permutation, epoch: u64 },
}

impl Order {
    /// Documents per epoch.
    fn len(&self) -> u64 {
        match self {
            Order::Single { shard, .. } => shard.stream().datasets()[0].length,
            Order::Source { len, .. } => *len,
        }
    }

    fn index_at(&mut self, position: u64) -> u64 {
        match self {
            Order::Single { shard, at } => {
                if *at != position {
                    // Positions here are below the documents taken, far below 2^62.
                    shard.seek(position).unwrap_or_else(|e| panic!("{e}"));
                }
                let mut one = [0u64];
                shard.fill(&mut one);
                *at = position + 1;
                one[0]
            }
            Order::Source { len, seed, source, perm, epoch } => {
                let e = position / *len;
                if e != *epoch {
                    *perm = Permutation::for_source(*len, *seed, *source, e);
                    *epoch = e;
                }
                perm.at(position % *len)
            }
        }
    }
}

/// One source's documents: the stream order and the documents read ahead.
#[derive(Clone, Debug)]
struct Documents {
    order: Order,
    /// Documents taken (the next one's position).
    taken: u64,
    /// Virtual tokens taken.
    tokens: u64,
    /// Documents read ahead, from position `taken` on.
    ahead: VecDeque<Doc>,
}

/// Plans global batches of `rows` rows, one after another: see the module documentation.
#[derive(Clone, Debug)]
pub struct Packer {
    spec: PackSpec,
    rows: u32,
    sources: Vec<Documents>,
    /// A mixture's weights (token shares); `None` for one dataset.
    weights: Option<Vec<f64>>,
    waiting: VecDeque<Piece>,
    waiting_tokens: u64,
    step: u64,
    indices: Vec<u64>,
    lengths: Vec<u64>,
    /// Shuffled rows ([`PackSpec::shuffle_rows`]): they plan every batch instead.
    shuffled: Option<ShuffledRows>,
    /// A finite pass: documents taken in all, after which rows are padding.
    limit: Option<u64>,
}

/// Why a packer cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// A spec value out of range.
    #[error("{0}")]
    Spec(String),
    /// Every document is empty, and no `bos` or `eos` is added: nothing to pack.
    #[error("every document of the packed field is empty, and no bos or eos is set: there are no tokens to pack")]
    Empty,
}

impl Packer {
    /// A packer of `rows` rows per global batch over `docs`, the document stream (its
    /// global batch must be 1), starting at global batch `step` from `cursor` (`None`:
    /// the start). Waiting pieces of the cursor are looked up again through `lengths`.
    pub fn new<L: DocLengths>(
        docs: &Stream,
        spec: PackSpec,
        rows: u32,
        step: u64,
        cursor: Option<&PackCursor>,
        lengths: &mut L,
    ) -> Result<Packer, L::Error>
    where
        L::Error: From<PackError>,
    {
        check_spec(&spec, rows)?;
        if docs.global_batch() != 1 {
            return Err(PackError::Spec(alloc::format!(
                "a packer reads documents one at a time: its stream's global batch must be 1, not {}",
                docs.global_batch()
            ))
            .into());
        }
        let shuffled = match spec.shuffle_rows {
            true => Some(ShuffledRows::new(docs, spec, rows, lengths)?),
            false => None,
        };
        let seed = docs.seed();
        let (orders, weights): (Vec<Order>, _) = match docs.mixture_sources() {
            None => {
                let shard = docs.shard(0, 1).map_err(|e| PackError::Spec(alloc::format!("{e}")))?;
                (alloc::vec![Order::Single { shard, at: 0 }], None)
            }
            Some(m) => (source_orders(m, seed), Some(m.weights().to_vec())),
        };
        let n = orders.len();
        let mut packer = Packer {
            spec,
            rows,
            sources: orders
                .into_iter()
                .map(|order| Documents { order, taken: 0, tokens: 0, ahead: VecDeque::new() })
                .collect(),
            weights,
            waiting: VecDeque::new(),
            waiting_tokens: 0,
            step,
            indices: Vec::with_capacity(LOOKAHEAD),
            lengths: Vec::with_capacity(LOOKAHEAD),
            shuffled,
            limit: None,
        };
        if let Some(c) = cursor.filter(|_| packer.shuffled.is_none()) {
            if c.taken.len() != n || c.tokens.len() != n {
                return Err(PackError::Spec(alloc::format!(
                    "the saved packing state has {} sources, this loader reads {n}",
                    c.taken.len()
                ))
                .into());
            }
            for (s, src) in packer.sources.iter_mut().enumerate() {
                src.taken = c.taken[s];
                src.tokens = c.tokens[s];
            }
            for &(source, position, start) in &c.waiting {
                let s = source as usize;
                if s >= n || position >= packer.sources[s].taken {
                    return Err(PackError::Spec(alloc::format!(
                        "the saved packing state's waiting piece (source {source}, position {position}) was never taken"
                    ))
                    .into());
                }
                let index = packer.sources[s].order.index_at(position);
                let mut len = [0u64];
                lengths.lengths(s, &[index], &mut len)?;
                let doc = Doc { source, position, index, len: spec.virtual_len(len[0]) };
                if start >= doc.len {
                    return Err(PackError::Spec(alloc::format!(
                        "the saved packing state's waiting piece starts at token {start} of a document of {}: \
                         the documents changed",
                        doc.len
                    ))
                    .into());
                }
                let piece = match spec.mode {
                    PackMode::Concat => Piece { doc, start, len: (doc.len - start).min(u64::from(u32::MAX)) as u32 },
                    PackMode::BestFit => {
                        Piece { doc, start, len: (doc.len - start).min(u64::from(spec.seq_len)) as u32 }
                    }
                };
                packer.waiting_tokens += u64::from(piece.len);
                packer.waiting.push_back(piece);
            }
        }
        Ok(packer)
    }

    /// Makes the packing finite: the first `documents` positions of the document stream
    /// (`passes x` the dataset's documents for whole passes in SEQUENTIAL order) are packed
    /// and nothing after them; the batch that places the last token says so
    /// ([`Plan::last`]), its rows past that token padding. One dataset, rows in the order
    /// they are cut (shuffled rows and mixtures have no end to stop at).
    pub fn finish_after(&mut self, documents: u64) -> Result<(), PackError> {
        if self.shuffled.is_some() || self.weights.is_some() {
            return Err(PackError::Spec(
                "a finite pass packs one dataset's documents in rows in the order they are cut: \
                 not shuffled rows or a mixture"
                    .into(),
            ));
        }
        self.limit = Some(documents);
        Ok(())
    }

    /// True once a finite pass placed its last token: every later batch is padding.
    pub fn finished(&self) -> bool {
        self.limit.is_some_and(|l| self.sources[0].taken >= l) && self.waiting.is_empty()
    }

    /// The global batch the next [`Packer::plan`] places.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Global batches per epoch of shuffled rows; `None` for sequential rows, which run
    /// on across the documents' epochs.
    pub fn steps_per_epoch(&self) -> Option<u64> {
        self.shuffled.as_ref().and_then(ShuffledRows::steps_per_epoch)
    }

    /// Rows per global batch.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// The spec.
    pub fn spec(&self) -> &PackSpec {
        &self.spec
    }

    /// Where packing stands now (after the last batch planned). Shuffled rows keep no
    /// cursor (zero counts, nothing waiting): the step alone places a batch.
    pub fn cursor(&self) -> PackCursor {
        if self.shuffled.is_some() {
            let n = self.sources.len();
            return PackCursor { taken: alloc::vec![0; n], tokens: alloc::vec![0; n], waiting: Vec::new() };
        }
        PackCursor {
            taken: self.sources.iter().map(|s| s.taken).collect(),
            tokens: self.sources.iter().map(|s| s.tokens).collect(),
            waiting: self.waiting.iter().map(|p| (p.doc.source, p.doc.position, p.start)).collect(),
        }
    }

    /// Plans the next global batch into `out` and moves on.
    pub fn plan<L: DocLengths>(&mut self, lengths: &mut L, out: &mut Plan) -> Result<(), L::Error>
    where
        L::Error: From<PackError>,
    {
        if let Some(rows) = &mut self.shuffled {
            rows.plan(self.step, lengths, out)?;
            self.step += 1;
            out.cursor = self.cursor();
            return Ok(());
        }
        out.step = self.step;
        out.placed.clear();
        out.padding = 0;
        let was_finished = self.finished();
        match self.spec.mode {
            PackMode::Concat => self.concat(lengths, out)?,
            PackMode::BestFit => self.best_fit(lengths, out)?,
        }
        self.step += 1;
        out.cursor = self.cursor();
        out.last = !was_finished && self.finished();
        Ok(())
    }

    fn concat<L: DocLengths>(&mut self, lengths: &mut L, out: &mut Plan) -> Result<(), L::Error>
    where
        L::Error: From<PackError>,
    {
        let seq = self.spec.seq_len;
        for row in 0..self.rows {
            let mut col = 0u32;
            while col < seq {
                if self.waiting.is_empty() {
                    let Some(doc) = self.next_doc(lengths)? else {
                        // A finite pass ended: the rest of the batch is padding.
                        out.padding += u64::from(seq - col) + u64::from(self.rows - row - 1) * u64::from(seq);
                        return Ok(());
                    };
                    self.waiting.push_back(Piece { doc, start: 0, len: doc.len.min(u64::from(u32::MAX)) as u32 });
                }
                let front = self.waiting.front_mut().expect("a piece waits");
                let n = front.len.min(seq - col);
                out.placed.push(Placed { row, col, piece: Piece { doc: front.doc, start: front.start, len: n } });
                col += n;
                if n == front.len {
                    let done = self.waiting.pop_front().expect("a piece waits");
                    // A document longer than u32::MAX tokens cannot exist (records are at
                    // most 1 MiB), but the rest of one would continue here.
                    let rest = done.doc.len - done.start - u64::from(n);
                    if rest > 0 {
                        let start = done.start + u64::from(n);
                        self.waiting.push_front(Piece {
                            doc: done.doc,
                            start,
                            len: rest.min(u64::from(u32::MAX)) as u32,
                        });
                    }
                } else {
                    front.start += u64::from(n);
                    front.len -= n;
                }
            }
        }
        Ok(())
    }

    fn best_fit<L: DocLengths>(&mut self, lengths: &mut L, out: &mut Plan) -> Result<(), L::Error>
    where
        L::Error: From<PackError>,
    {
        let seq = self.spec.seq_len;
        while self.waiting_tokens < self.spec.window {
            let Some(doc) = self.next_doc(lengths)? else { break };
            let mut start = 0;
            while start < doc.len {
                let len = (doc.len - start).min(u64::from(seq)) as u32;
                self.waiting.push_back(Piece { doc, start, len });
                self.waiting_tokens += u64::from(len);
                start += u64::from(len);
            }
        }
        // Rows by room left, then row number: the first entry at or above a piece's length
        // is its best fit.
        let mut room: BTreeSet<(u32, u32)> = (0..self.rows).map(|r| (seq, r)).collect();
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for piece in self.waiting.drain(..) {
            let fit = room.range((piece.len, 0)..).next().copied();
            match fit {
                Some((left, row)) => {
                    room.remove(&(left, row));
                    out.placed.push(Placed { row, col: seq - left, piece });
                    self.waiting_tokens -= u64::from(piece.len);
                    if left > piece.len {
                        room.insert((left - piece.len, row));
                    }
                }
                None => kept.push_back(piece),
            }
        }
        self.waiting = kept;
        out.padding = room.iter().map(|&(left, _)| u64::from(left)).sum();
        out.placed.sort_unstable_by_key(|p| (p.row, p.col));
        Ok(())
    }

    /// The next document: of the one dataset, or of the mixture source furthest behind
    /// its token share (`tokens / weight` smallest; ties to the lowest source); `None`
    /// once a finite pass took its last.
    fn next_doc<L: DocLengths>(&mut self, lengths: &mut L) -> Result<Option<Doc>, L::Error>
    where
        L::Error: From<PackError>,
    {
        let total: u64 = self.sources.iter().map(|s| s.order.len()).sum();
        let mut empty = 0u64;
        loop {
            if self.limit.is_some_and(|l| self.sources[0].taken >= l) {
                return Ok(None);
            }
            let s = match &self.weights {
                None => 0,
                Some(w) => {
                    let mut best = 0;
                    for s in 1..w.len() {
                        if (self.sources[s].tokens as f64) / w[s] < (self.sources[best].tokens as f64) / w[best] {
                            best = s;
                        }
                    }
                    best
                }
            };
            if self.sources[s].ahead.is_empty() {
                self.read_ahead(s, lengths)?;
            }
            let src = &mut self.sources[s];
            let doc = src.ahead.pop_front().expect("documents were read ahead");
            src.taken += 1;
            src.tokens += doc.len;
            if doc.len > 0 {
                return Ok(Some(doc));
            }
            // An empty document without bos or eos adds nothing: take the next one, unless
            // a whole round of every source was empty.
            empty += 1;
            if empty > total {
                return Err(PackError::Empty.into());
            }
            if self.weights.is_some() {
                // An empty source could never catch up on its share: count the document as
                // one token so the choice moves on.
                self.sources[s].tokens += 1;
            }
        }
    }

    fn read_ahead<L: DocLengths>(&mut self, s: usize, lengths: &mut L) -> Result<(), L::Error> {
        let spec = self.spec;
        let src = &mut self.sources[s];
        let first = src.taken + src.ahead.len() as u64;
        self.indices.clear();
        for k in 0..LOOKAHEAD as u64 {
            self.indices.push(src.order.index_at(first + k));
        }
        self.lengths.clear();
        self.lengths.resize(LOOKAHEAD, 0);
        lengths.lengths(s, &self.indices, &mut self.lengths)?;
        for (k, (&index, &len)) in self.indices.iter().zip(&self.lengths).enumerate() {
            src.ahead.push_back(Doc {
                source: s as u32,
                position: first + k as u64,
                index,
                len: spec.virtual_len(len),
            });
        }
        Ok(())
    }
}

/// Each mixture source's document order: its own shuffled epochs, as the sample stream's
/// mixture reads them.
fn source_orders(m: &Mixture, seed: u64) -> Vec<Order> {
    m.datasets()
        .iter()
        .enumerate()
        .map(|(s, d)| Order::Source {
            len: d.length,
            seed,
            source: s as u32,
            perm: Permutation::for_source(d.length, seed, s as u32, 0),
            epoch: 0,
        })
        .collect()
}

fn check_spec(spec: &PackSpec, rows: u32) -> Result<(), PackError> {
    if spec.seq_len == 0 {
        return Err(PackError::Spec("seq_len must be at least 1".into()));
    }
    if rows == 0 {
        return Err(PackError::Spec("a packed batch needs at least one row".into()));
    }
    if spec.shuffle_rows && spec.mode != PackMode::Concat {
        return Err(PackError::Spec("shuffled rows are cut by concat packing; best_fit places rows in order".into()));
    }
    if spec.mode == PackMode::BestFit && spec.window < u64::from(rows) * u64::from(spec.seq_len) {
        return Err(PackError::Spec(alloc::format!(
            "the best-fit window ({} tokens) must hold at least one global batch ({rows} rows of {} tokens)",
            spec.window,
            spec.seq_len
        )));
    }
    Ok(())
}

/// A spec in words, for errors.
pub fn describe(spec: &PackSpec) -> String {
    let id = |v: Option<u64>| v.map_or_else(|| String::from("none"), |v| alloc::format!("{v}"));
    alloc::format!(
        "{} packing of {} tokens per row, {} rows (bos {}, eos {}, pad {}, window {})",
        spec.mode.name(),
        spec.seq_len,
        if spec.shuffle_rows { "shuffled" } else { "sequential" },
        id(spec.bos),
        id(spec.eos),
        spec.pad,
        spec.window
    )
}
