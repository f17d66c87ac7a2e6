//! The global sample stream of a training job: shuffled epochs, rank shards, mixtures and
//! an exact, compact resume state.
//!
//! A [`Stream`] is a pure function from a position to a sample index: global batch `g`
//! holds the stream positions `g G .. (g + 1) G`, where `G` is the global batch size
//! (`batch_size * world_size`), and what sits at each position depends only on the seed,
//! the mode and the dataset (or mixture): never on the world size, the number of workers or
//! how far a loader prefetched. Rank `r` of `W` reads the `r`-th contiguous `G / W` slice of
//! every global batch ([`Shard`]), so the ranks' slices put together are the stream a single
//! process would read, and a job can restart with another world size as long as `G` stays.
//!
//! - [`Mode::Shuffle`]: epoch `e` is the [`Permutation`] of `0..N` keyed by `(seed, e)`
//!   (or, [`Stream::with_blocks`], a [`BlockOrder`] of blocks of neighbours), cut into
//!   [`Stream::steps_per_epoch`] = `floor(N / G)` global batches; the last `N mod G`
//!   positions of each epoch's order are dropped, so every rank gets the same number of
//!   batches per epoch.
//! - [`Mode::Sequential`] and [`Mode::Iid`]: the [`crate::Sampler`]'s endless stream cut into
//!   global batches, so world size 1 reproduces it batch for batch. IID position `p` is
//!   reached by a jump of the xoshiro256++ generator (polynomial arithmetic modulo its
//!   characteristic polynomial, constant time), never by replay.
//! - [`Mixture`]: position `p` reads the source [`Mixture::source_at`] names; the `k`-th
//!   pick of source `s` is position `k mod N_s` of that source's epoch `k / N_s`.
//!
//! A loader keeps its place as the number of global batches its caller consumed and saves
//! it as a [`StreamState`]; `docs/stream.md` describes the whole design.
//!
//! ```
//! use zrecord_core::{DatasetId, Mode, Stream, StreamState};
//!
//! // Rank 1 of 4, 32 samples per rank, over a store of 10 000 records at generation 3.
//! let dataset = DatasetId { length: 10_000, generation: 3 };
//! let stream = Stream::new(dataset, Mode::Shuffle, 42, 32 * 4)?;
//! assert_eq!(stream.steps_per_epoch(), Some(78));
//! let mut shard = stream.shard(1, 4)?;
//! let mut indices = vec![0u64; shard.batch_size()];
//! let step = shard.fill(&mut indices); // a producer thread may run ahead...
//! // ...the consumer records the step of the batch it handed out, and saves:
//! let saved = stream.state(step + 1).encode();
//!
//! // Elsewhere, later, with 2 ranks of 64: the same global batch, so the same stream.
//! let stream = Stream::new(dataset, Mode::Shuffle, 42, 64 * 2)?;
//! let next = stream.resume(&StreamState::decode(&saved)?)?;
//! let mut shard = stream.shard(0, 2)?;
//! shard.seek(next)?;
//! let mut resumed = vec![0u64; 64];
//! assert_eq!(shard.fill(&mut resumed), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod blocks;
mod eras;
mod jump;
mod mixture;
mod mode;
pub mod pack;
pub mod pass;
mod permutation;
pub mod row_index;
pub mod rows;
pub mod shares;
mod state;

use alloc::vec::Vec;

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

pub use blocks::{BlockOrder, Blocks, EpochShuffle};
pub use eras::Era;
pub use mixture::Mixture;
pub use mode::Mode;
pub use permutation::Permutation;

pub use state::{PackedState, StateError, StreamState, STATE_VERSION, STATE_VERSION_BLOCKS, STATE_VERSION_ERAS};

/// Stream positions (in samples) must stay below this (2^62), so that mixture pick counts
/// are exact in 128-bit arithmetic. At a billion samples a second that is 146 years.
pub const MAX_POSITION: u64 = 1 << 62;

/// Below this many samples an IID reader steps its generator forward; beyond it, it jumps
/// (a jump costs about as much as a few thousand steps).
const IID_WALK_LIMIT: u64 = 1 << 12;

/// Below this many samples per source a mixture reader walks forward; beyond it, it
/// recounts (two floor sums per source cost about as much as a thousand steps of a walk).
const MIXTURE_WALK_PER_SOURCE: u64 = 1 << 10;

/// The identity of a dataset a stream reads: its length and a generation value the store
/// changes whenever the records behind the indices change (delete, compact). A saved state
/// names them, so it is never applied to other data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetId {
    /// Number of samples.
    pub length: u64,
    /// The store's generation.
    pub generation: u64,
}

impl DatasetId {
    /// The identity of a dataset made of several stores (fields, shards): its length, and
    /// the stores' generations folded in order with [`combine_generations`], so that a
    /// change to any store changes it. One store keeps its own generation.
    pub fn of_stores(length: u64, generations: impl IntoIterator<Item = u64>) -> DatasetId {
        let mut generation = 0;
        for (i, g) in generations.into_iter().enumerate() {
            generation = if i == 0 { g } else { combine_generations(generation, g) };
        }
        DatasetId { length, generation }
    }
}

/// Folds another store's generation into a dataset's (SplitMix64's finaliser over both):
/// order-sensitive, so swapping two stores' data changes the identity.
pub fn combine_generations(a: u64, b: u64) -> u64 {
    let z = (a ^ b.rotate_left(29)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Why a stream or shard cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// A dataset (or the single source) has no samples.
    #[error("the dataset is empty: a stream needs at least one sample")]
    EmptyDataset,
    /// Source `source` of a mixture has no samples.
    #[error("mixture source {index} is empty: every source needs at least one sample")]
    EmptySource {
        /// The empty source.
        index: usize,
    },
    /// The global batch size is zero.
    #[error("the global batch size (batch_size * world_size) must be at least 1")]
    ZeroBatch,
    /// In SHUFFLE mode an epoch would hold no global batch.
    #[error(
        "a SHUFFLE epoch of {length} samples holds no global batch of {global_batch} \
         (batch_size * world_size); lower the batch size or the world size"
    )]
    BatchLargerThanEpoch {
        /// The dataset's length.
        length: u64,
        /// The global batch size.
        global_batch: u64,
    },
    /// The world size is zero or does not divide the global batch.
    #[error("world_size {world_size} does not divide the global batch of {global_batch} samples")]
    WorldSize {
        /// The requested world size.
        world_size: u64,
        /// The stream's global batch size.
        global_batch: u64,
    },
    /// The rank is not in `0..world_size`.
    #[error("rank {rank} is not in 0..{world_size}")]
    Rank {
        /// The requested rank.
        rank: u64,
        /// The world size.
        world_size: u64,
    },
    /// A mixture without sources.
    #[error("a mixture needs at least one source")]
    NoSources,
    /// More weights than sources or the reverse.
    #[error("a mixture of {sources} sources needs {sources} weights, got {weights}")]
    WeightCount {
        /// Number of sources.
        sources: usize,
        /// Number of weights.
        weights: usize,
    },
    /// More sources than a u32 numbers.
    #[error("a mixture has at most 2^32 - 1 sources, got {0}")]
    TooManySources(usize),
    /// A weight that is not positive and finite, or too small next to the total for its
    /// source ever to be read.
    #[error(
        "weight {weight} of mixture source {index} is not usable: weights must be positive and \
         finite, with a finite sum, and none so small next to the sum (below about 2^-52 of \
         it) that its source would never be read"
    )]
    BadWeight {
        /// The source.
        index: usize,
        /// Its weight (or the total, when the total overflowed).
        weight: f64,
    },
    /// The step's first sample lies at or past [`MAX_POSITION`].
    #[error("global batch {step} starts beyond the stream's 2^62 samples")]
    PositionOverflow {
        /// The step asked for.
        step: u64,
    },
    /// A finite pass asked of a stream that has none ([`pass::FinitePass`]).
    #[error("{0}")]
    FinitePass(alloc::string::String),
    /// Blocks asked of a stream that is not SHUFFLE over one dataset.
    #[error("a block shuffle reads one dataset in SHUFFLE mode; this stream reads {0}")]
    BlocksNeedShuffle(&'static str),
    /// Blocks of fewer than two samples, or windows of no block.
    #[error(
        "a block shuffle needs blocks of at least 2 neighbouring samples (shuffle_block) and at least 1 \
         block per window (shuffle_window), got {records} and {window}"
    )]
    BadBlocks {
        /// Samples per block asked for.
        records: u64,
        /// Blocks per window asked for.
        window: u64,
    },
}

/// What a stream reads.
#[derive(Clone, Debug, PartialEq)]
enum Source {
    Single { dataset: DatasetId, mode: Mode },
    Mixture(Mixture),
}

/// The global stream of a job: global batches of `global_batch` samples, a pure function
/// of `(seed, mode, dataset)` (or of `(seed, mixture)`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    seed: u64,
    global_batch: u64,
    source: Source,
    /// A single dataset's lengths, from where each took over (`eras.rs`): one era from 0
    /// unless the dataset grew under a resumed job. Empty for a mixture.
    eras: Vec<Era>,
    /// SHUFFLE in blocks of neighbouring records (`blocks.rs`); `None` for the full
    /// permutation.
    blocks: Option<Blocks>,
}

impl Stream {
    /// The stream over one dataset in `mode`, cut into global batches of `global_batch`
    /// (= per-rank batch size * world size) samples.
    ///
    /// Fails when the dataset is empty, `global_batch` is zero, or (SHUFFLE) larger than
    /// the dataset.
    pub fn new(dataset: DatasetId, mode: Mode, seed: u64, global_batch: u64) -> Result<Self, StreamError> {
        if dataset.length == 0 {
            return Err(StreamError::EmptyDataset);
        }
        if global_batch == 0 {
            return Err(StreamError::ZeroBatch);
        }
        if mode == Mode::Shuffle && dataset.length < global_batch {
            return Err(StreamError::BatchLargerThanEpoch { length: dataset.length, global_batch });
        }
        let eras = alloc::vec![Era { position: 0, epoch: 0, length: dataset.length }];
        Ok(Stream { seed, global_batch, source: Source::Single { dataset, mode }, eras, blocks: None })
    }

    /// The endless stream over a mixture, cut into global batches of `global_batch` samples.
    /// Every source is read in its own shuffled epochs; there are no stream-wide epochs.
    pub fn mixture(mixture: Mixture, seed: u64, global_batch: u64) -> Result<Self, StreamError> {
        if global_batch == 0 {
            return Err(StreamError::ZeroBatch);
        }
        Ok(Stream { seed, global_batch, source: Source::Mixture(mixture), eras: Vec::new(), blocks: None })
    }

    /// This stream reading each SHUFFLE epoch in `blocks` of neighbouring records instead of
    /// the full permutation (`blocks.rs`): what a reader of object storage with a cache far
    /// smaller than the dataset fetches in runs. Fails unless the stream is SHUFFLE over one
    /// dataset.
    pub fn with_blocks(mut self, blocks: Blocks) -> Result<Self, StreamError> {
        // (`Blocks::new` checked them: its fields are private.)
        match &self.source {
            Source::Single { mode: Mode::Shuffle, .. } => {}
            Source::Single { mode: Mode::Sequential, .. } => return Err(StreamError::BlocksNeedShuffle("SEQUENTIAL")),
            Source::Single { mode: Mode::Iid, .. } => return Err(StreamError::BlocksNeedShuffle("IID")),
            Source::Mixture(_) => return Err(StreamError::BlocksNeedShuffle("a mixture")),
        }
        self.blocks = Some(blocks);
        Ok(self)
    }

    /// The blocks a SHUFFLE epoch is read in; `None` for the full permutation.
    pub fn blocks(&self) -> Option<Blocks> {
        self.blocks
    }

    /// Epoch `epoch`'s order over `len` samples.
    fn epoch_order(&self, len: u64, epoch: u64) -> EpochShuffle {
        EpochShuffle::new(len, self.blocks, self.seed, epoch)
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Samples per global batch.
    pub fn global_batch(&self) -> u64 {
        self.global_batch
    }

    /// How indices are drawn; a mixture reads its sources in [`Mode::Shuffle`].
    pub fn mode(&self) -> Mode {
        match &self.source {
            Source::Single { mode, .. } => *mode,
            Source::Mixture(_) => Mode::Shuffle,
        }
    }

    /// The mixture, if the stream reads one.
    pub fn mixture_sources(&self) -> Option<&Mixture> {
        match &self.source {
            Source::Mixture(m) => Some(m),
            Source::Single { .. } => None,
        }
    }

    /// The datasets read: one, or the mixture's sources in order.
    pub fn datasets(&self) -> &[DatasetId] {
        match &self.source {
            Source::Single { dataset, .. } => core::slice::from_ref(dataset),
            Source::Mixture(m) => m.datasets(),
        }
    }

    /// Global batches per epoch: `Some(floor(N / global_batch))` in SHUFFLE mode over one
    /// dataset, `None` for the endless SEQUENTIAL, IID and mixture streams. For a dataset
    /// that grew under the stream, `N` is its length now; [`Stream::steps_in_epoch_of`] gives
    /// an earlier epoch's.
    pub fn steps_per_epoch(&self) -> Option<u64> {
        self.shuffled().map(|_| self.eras.last().map_or(0, |e| e.length / self.global_batch))
    }

    /// The epoch global batch `step` belongs to and its place in it (SHUFFLE only).
    pub fn epoch_of(&self, step: u64) -> Option<(u64, u64)> {
        self.shuffle_place(step).map(|(epoch, within, _)| (epoch, within))
    }

    /// Global batches in the epoch global batch `step` belongs to (SHUFFLE only): the
    /// dataset's length then over the global batch.
    pub fn steps_in_epoch_of(&self, step: u64) -> Option<u64> {
        self.shuffle_place(step).map(|(_, _, steps)| steps)
    }

    /// The stretches of one dataset length this stream reads (one unless the dataset grew
    /// under a resumed job; none for a mixture).
    pub fn eras(&self) -> &[Era] {
        &self.eras
    }

    /// Whether a reader that keeps running should look for rows appended to its dataset
    /// before global batch `step`: a pass of the samples it reads ends within that batch
    /// (`eras.rs`), so [`Stream::resumed`] on a grown dataset at this step starts the new
    /// rows' era within it, just where a job restarted from any state saved since the last
    /// such batch would start it. Looking here and only here, an uninterrupted run and a
    /// restarted one read the same samples. Never for a mixture (its states do not follow
    /// appends).
    pub fn takes_growth_at(&self, step: u64) -> bool {
        let Source::Single { mode, .. } = self.source else { return false };
        match step.checked_mul(self.global_batch) {
            Some(p) => eras::passes_end_within(&self.eras, mode, self.global_batch, p),
            None => false,
        }
    }

    fn shuffled(&self) -> Option<DatasetId> {
        match &self.source {
            Source::Single { dataset, mode: Mode::Shuffle } => Some(*dataset),
            _ => None,
        }
    }

    fn shuffle_place(&self, step: u64) -> Option<(u64, u64, u64)> {
        self.shuffled()?;
        let p = step.checked_mul(self.global_batch)?;
        Some(eras::shuffle_place(&self.eras, self.global_batch, p))
    }

    /// Rank `rank`'s reader of a job of `world_size` processes, positioned at global batch 0.
    ///
    /// Fails when `world_size` is zero or does not divide the global batch, or
    /// `rank >= world_size`.
    pub fn shard(&self, rank: u64, world_size: u64) -> Result<Shard, StreamError> {
        if world_size == 0 || !self.global_batch.is_multiple_of(world_size) {
            return Err(StreamError::WorldSize { world_size, global_batch: self.global_batch });
        }
        if rank >= world_size {
            return Err(StreamError::Rank { rank, world_size });
        }
        let cursor = match &self.source {
            Source::Single { mode: Mode::Sequential, .. } => Cursor::Sequential,
            Source::Single { mode: Mode::Iid, .. } => {
                Cursor::Iid { rng: Xoshiro256PlusPlus::seed_from_u64(self.seed), at: 0 }
            }
            Source::Single { mode: Mode::Shuffle, .. } => {
                Cursor::Shuffle { perm: self.epoch_order(self.eras[0].length, 0), epoch: 0 }
            }
            Source::Mixture(m) => Cursor::Mixture {
                offset: mixture::offset(self.seed),
                at: 0,
                picks: m
                    .datasets()
                    .iter()
                    .enumerate()
                    .map(|(s, d)| SourcePicks {
                        epoch: 0,
                        within: 0,
                        perm: Permutation::for_source(d.length, self.seed, s as u32, 0),
                        perm_epoch: 0,
                    })
                    .collect(),
                counts: alloc::vec![0; m.len()],
            },
        };
        Ok(Shard { stream: self.clone(), rank, batch_size: self.global_batch / world_size, step: 0, cursor })
    }

    /// Writes rank `rank`'s slice of global batch `step` (of a job of `world_size` ranks)
    /// into `indices`, and when given, each sample's source number into `sources` (always 0
    /// for a single dataset). `rank = 0, world_size = 1` gives the whole global batch.
    ///
    /// Random access, for checks and one-off reads: it builds a reader each call (an IID
    /// stream jumps its generator, a mixture recounts its picks). A loader reads through a
    /// [`Shard`], which carries its place from one batch to the next.
    ///
    /// # Panics
    /// If a slice is not `global_batch / world_size` long.
    pub fn batch_at(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        indices: &mut [u64],
        sources: Option<&mut [u32]>,
    ) -> Result<(), StreamError> {
        let mut shard = self.shard(rank, world_size)?;
        shard.seek(step)?;
        shard.fill_inner(indices, sources);
        Ok(())
    }

    /// The resume state of a reader whose caller has consumed global batches `0..step`.
    pub fn state(&self, step: u64) -> StreamState {
        let grown = self.eras.len() > 1;
        StreamState {
            version: if self.blocks.is_some() {
                STATE_VERSION_BLOCKS
            } else if grown {
                STATE_VERSION_ERAS
            } else {
                STATE_VERSION
            },
            seed: self.seed,
            mode: self.mode() as u8,
            global_batch: self.global_batch,
            step,
            datasets: self.datasets().to_vec(),
            weights: self.mixture_sources().map(|m| m.weights().to_vec()),
            pack: None,
            eras: if grown { self.eras.clone() } else { Vec::new() },
            blocks: self.blocks,
        }
    }

    /// Checks that `state` was saved from this very stream (same datasets and generations,
    /// seed, mode, weights and global batch size) and returns the global batch to read next.
    /// Per-rank batch size and world size may differ from the saving job's. A state saved
    /// on a dataset that has grown since needs [`Stream::resumed`].
    pub fn resume(&self, state: &StreamState) -> Result<u64, StateError> {
        state.check(self)?;
        Ok(state.step)
    }

    /// [`Stream::resume`] that also follows a dataset grown by appends: when this stream's
    /// single dataset is longer than the state's and `grown_from` (the identities the
    /// dataset had before its appends, oldest first, from its manifest) names the state's,
    /// the stream to read is the saved one with the new length taking over where its running
    /// pass ends (`eras.rs`). Returns the stream to read and the global batch to read next.
    pub fn resumed(&self, state: &StreamState, grown_from: &[DatasetId]) -> Result<(Stream, u64), StateError> {
        let Source::Single { dataset, mode } = self.source else {
            state.check(self)?;
            return Ok((self.clone(), state.step));
        };
        let mut saved = self.clone();
        let grew = match state.datasets.as_slice() {
            [before] if state.weights.is_none() && state.pack.is_none() => {
                *before != dataset && before.length < dataset.length && grown_from.contains(before)
            }
            _ => false,
        };
        if grew {
            saved.source = Source::Single { dataset: state.datasets[0], mode };
            saved.eras = alloc::vec![Era { position: 0, epoch: 0, length: state.datasets[0].length }];
        }
        if !state.eras.is_empty() {
            saved.eras = state.eras.clone();
        }
        state.check(&saved)?;
        if grew {
            let p = state.step.saturating_mul(self.global_batch);
            saved.eras = eras::grow(&saved.eras, mode, self.global_batch, p, dataset.length);
            saved.source = self.source.clone();
        }
        Ok((saved, state.step))
    }

    fn position(&self, step: u64) -> Result<u64, StreamError> {
        step.checked_mul(self.global_batch)
            .filter(|&p| p.saturating_add(self.global_batch) <= MAX_POSITION)
            .ok_or(StreamError::PositionOverflow { step })
    }
}

/// When each sample is read next: what a cache that knows the future evicts by (the
/// sample needed furthest ahead goes first, Belady's optimal policy).
#[derive(Clone, Debug)]
pub struct Schedule {
    stream: Stream,
    /// The orders of the epochs last asked about.
    epochs: Vec<EpochOrder>,
}

/// One epoch's order as a [`Schedule`] asks it: where each sample is read.
///
/// A cache far smaller than the dataset asks about every sample it reads, each epoch: a
/// permutation's inverse walk per ask (two per sample, this epoch's and the next) was a
/// third of its evictions' time. Once an epoch was asked about a sixteenth of its samples,
/// its positions are laid out in a table (the order filled in vectorised runs and
/// inverted, a few nanoseconds a sample) and every later ask is a lookup; a dataset of
/// more than [`EpochOrder::TABLE_MAX`] samples keeps walking.
#[derive(Clone, Debug)]
struct EpochOrder {
    epoch: u64,
    perm: EpochShuffle,
    /// `positions[i]`: where sample `i` is read in the epoch, once laid out.
    positions: Option<Vec<u32>>,
    /// Asks answered by walking the permutation.
    walked: u64,
}

impl EpochOrder {
    /// The largest epoch laid out in a table: 16 MiB of positions. A schedule keeps at
    /// most [`EpochOrder::KEPT`] epochs, but only the one being read and the next are asked
    /// about often enough to be laid out (a later one only for samples in an epoch's
    /// dropped tail).
    const TABLE_MAX: u64 = 1 << 22;
    /// Epochs a schedule keeps (the one being read, the next, and two more).
    const KEPT: usize = 4;

    fn new(perm: EpochShuffle, epoch: u64) -> EpochOrder {
        EpochOrder { epoch, perm, positions: None, walked: 0 }
    }

    /// Where sample `index` (below the permutation's length) is read in the epoch.
    fn position_of(&mut self, index: u64) -> u64 {
        if let Some(positions) = &self.positions {
            return u64::from(positions[index as usize]);
        }
        let n = self.perm.len();
        self.walked += 1;
        if n > Self::TABLE_MAX || self.walked < n / 16 {
            return self.perm.position_of(index);
        }
        let positions = self.lay_out();
        let at = u64::from(positions[index as usize]);
        self.positions = Some(positions);
        at
    }

    /// Each sample's position, from the epoch's order filled a run at a time.
    fn lay_out(&self) -> Vec<u32> {
        const RUN: usize = 1024;
        let n = self.perm.len();
        let mut positions = alloc::vec![0u32; n as usize];
        let mut run = [0u64; RUN];
        let mut first = 0u64;
        while first < n {
            let len = (n - first).min(RUN as u64) as usize;
            self.perm.fill(first, &mut run[..len]);
            for (k, &sample) in run[..len].iter().enumerate() {
                // n <= TABLE_MAX: every position fits in 32 bits.
                positions[sample as usize] = (first + k as u64) as u32;
            }
            first += len as u64;
        }
        positions
    }
}

impl Schedule {
    /// The schedule of `stream`.
    pub fn new(stream: Stream) -> Schedule {
        Schedule { stream, epochs: Vec::new() }
    }

    /// The first stream position at or after `from` that reads sample `index`, for one
    /// dataset in SEQUENTIAL or SHUFFLE mode. `None` for IID and mixtures (no position is
    /// known), or for an index past the dataset.
    pub fn next_use(&mut self, index: u64, from: u64) -> Option<u64> {
        let Source::Single { mode, .. } = &self.stream.source else { return None };
        // Positions in the last era (the dataset's length now) are planned; before it, a
        // grown dataset's, none are.
        let era = *self.stream.eras.last()?;
        let (n, base) = (era.length, era.position);
        if index >= n || from < base {
            return None;
        }
        let from = from - base;
        match mode {
            Mode::Sequential => Some(base + from + (index + n - from % n) % n),
            Mode::Iid => None,
            Mode::Shuffle => {
                let per_epoch = (n / self.stream.global_batch) * self.stream.global_batch;
                let first = era.epoch + from / per_epoch;
                // An index in the dropped tail of an epoch's order waits for a later epoch;
                // three tries cover all but a vanishing share of them.
                for e in first..first + 3 {
                    let order = match self.epochs.iter().position(|o| o.epoch == e) {
                        Some(k) => &mut self.epochs[k],
                        None => {
                            if self.epochs.len() >= EpochOrder::KEPT {
                                self.epochs.remove(0);
                            }
                            self.epochs.push(EpochOrder::new(self.stream.epoch_order(n, e), e));
                            self.epochs.last_mut().expect("just pushed")
                        }
                    };
                    let at = order.position_of(index);
                    let within_era = (e - era.epoch) * per_epoch + at;
                    if at < per_epoch && within_era >= from {
                        return Some(base + within_era);
                    }
                }
                None
            }
        }
    }
}

/// Where a reader stands in its source.
#[derive(Clone, Debug)]
enum Cursor {
    Sequential,
    /// The generator stands at stream position `at`.
    Iid {
        rng: Xoshiro256PlusPlus,
        at: u64,
    },
    /// The order of `epoch`.
    Shuffle {
        perm: EpochShuffle,
        epoch: u64,
    },
    /// `picks` count the sources' picks before stream position `at`; `counts` is scratch
    /// for recounting.
    Mixture {
        offset: u64,
        at: u64,
        picks: Vec<SourcePicks>,
        counts: Vec<u64>,
    },
}

/// A mixture source's place: `within` picks into source epoch `epoch`.
#[derive(Clone, Debug)]
struct SourcePicks {
    epoch: u64,
    within: u64,
    /// The permutation of source epoch `perm_epoch`; rebuilt when a pick finds `epoch`
    /// elsewhere.
    perm: Permutation,
    perm_epoch: u64,
}

/// One rank's reader: its `batch_size` slice of each global batch, in order.
///
/// It allocates nothing per batch (a mixture reader holds one small entry per source), and
/// [`Shard::seek`] moves it to any global batch in `O(1)` (`O(S log p)` for a mixture).
#[derive(Clone, Debug)]
pub struct Shard {
    stream: Stream,
    rank: u64,
    batch_size: u64,
    /// The global batch the next fill reads.
    step: u64,
    cursor: Cursor,
}

impl Shard {
    /// The stream this shard reads.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// This reader's rank.
    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// Samples per batch of this rank: `global_batch / world_size`.
    pub fn batch_size(&self) -> usize {
        self.batch_size as usize
    }

    /// The global batch the next fill reads. This is where the producer stands, ahead of
    /// the consumer by whatever is prefetched: a loader saves `stream.state(s + 1)` for the
    /// step `s` of the last batch it *returned*, never this.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Moves to global batch `step` (for instance the one [`Stream::resume`] returned).
    /// Fails only when the step lies beyond [`MAX_POSITION`].
    pub fn seek(&mut self, step: u64) -> Result<(), StreamError> {
        self.stream.position(step)?;
        self.step = step;
        Ok(())
    }

    /// Writes this rank's slice of the current global batch into `indices` and moves to the
    /// next global batch. Returns the global batch it read: the loader hands that number
    /// along with the batch, and the state after the caller consumed it is
    /// `stream.state(step + 1)`.
    ///
    /// # Panics
    /// If `indices.len() != batch_size()`, or past [`MAX_POSITION`].
    pub fn fill(&mut self, indices: &mut [u64]) -> u64 {
        self.fill_inner(indices, None)
    }

    /// [`Shard::fill`], also writing each sample's source number (its place in the mixture;
    /// 0 for a single dataset) into `sources`.
    ///
    /// # Panics
    /// If either slice is not `batch_size()` long, or past [`MAX_POSITION`].
    pub fn fill_with_sources(&mut self, indices: &mut [u64], sources: &mut [u32]) -> u64 {
        self.fill_inner(indices, Some(sources))
    }

    fn fill_inner(&mut self, indices: &mut [u64], sources: Option<&mut [u32]>) -> u64 {
        assert_eq!(indices.len() as u64, self.batch_size, "indices slice must hold one batch");
        if let Some(out) = &sources {
            assert_eq!(out.len(), indices.len(), "sources slice must hold one batch");
        }
        let step = self.step;
        let global = self.stream.position(step).unwrap_or_else(|e| panic!("{e}"));
        let start = global + self.rank * self.batch_size;
        let seed = self.stream.seed;
        match (&mut self.cursor, &self.stream.source) {
            (Cursor::Sequential, Source::Single { .. }) => {
                let eras = &self.stream.eras;
                let (mut k, era) = eras::era_at(eras, start);
                let (mut n, mut next) = (era.length, (start - era.position) % era.length);
                for (i, slot) in indices.iter_mut().enumerate() {
                    if eras.get(k + 1).is_some_and(|e| e.position == start + i as u64) {
                        k += 1;
                        (n, next) = (eras[k].length, 0);
                    }
                    *slot = next;
                    next += 1;
                    if next == n {
                        next = 0;
                    }
                }
            }
            (Cursor::Iid { rng, at }, Source::Single { .. }) => {
                if start < *at {
                    *rng = Xoshiro256PlusPlus::seed_from_u64(seed);
                    *at = 0;
                }
                let gap = start - *at;
                if gap > IID_WALK_LIMIT {
                    jump::advance(rng, gap);
                } else {
                    for _ in 0..gap {
                        rng.next_u64();
                    }
                }
                // The Sampler's mapping, so that world size 1 reproduces it draw for draw.
                let eras = &self.stream.eras;
                let (mut k, era) = eras::era_at(eras, start);
                let mut n = u128::from(era.length);
                for (i, slot) in indices.iter_mut().enumerate() {
                    if eras.get(k + 1).is_some_and(|e| e.position == start + i as u64) {
                        k += 1;
                        n = u128::from(eras[k].length);
                    }
                    *slot = ((u128::from(rng.next_u64()) * n) >> 64) as u64;
                }
                *at = start + self.batch_size;
            }
            (Cursor::Shuffle { perm, epoch }, Source::Single { .. }) => {
                let eras = &self.stream.eras;
                let (e, within, _) = eras::shuffle_place(eras, self.stream.global_batch, global);
                if *epoch != e || perm.len() != eras::era_at(eras, global).1.length {
                    *perm = self.stream.epoch_order(eras::era_at(eras, global).1.length, e);
                    *epoch = e;
                }
                let first = within * self.stream.global_batch + self.rank * self.batch_size;
                perm.fill(first, indices);
            }
            (Cursor::Mixture { offset, at, picks, counts }, Source::Mixture(m)) => {
                let offset = *offset;
                if start < *at || start - *at > MIXTURE_WALK_PER_SOURCE * m.len() as u64 {
                    recount(m, seed, start, picks, counts);
                } else {
                    for p in *at..start {
                        let s = m.source_of(mixture::weyl(offset, p)) as usize;
                        bump(&mut picks[s], m.datasets()[s].length);
                    }
                }
                let mut sources = sources;
                for (i, slot) in indices.iter_mut().enumerate() {
                    let s = m.source_of(mixture::weyl(offset, start + i as u64)) as usize;
                    let n = m.datasets()[s].length;
                    let pick = &mut picks[s];
                    if pick.perm_epoch != pick.epoch {
                        pick.perm = Permutation::for_source(n, seed, s as u32, pick.epoch);
                        pick.perm_epoch = pick.epoch;
                    }
                    *slot = pick.perm.at(pick.within);
                    bump(pick, n);
                    if let Some(out) = sources.as_deref_mut() {
                        out[i] = s as u32;
                    }
                }
                *at = start + self.batch_size;
                self.step += 1;
                return step;
            }
            _ => unreachable!("a shard's cursor is built from its own stream's source"),
        }
        if let Some(out) = sources {
            out.fill(0);
        }
        self.step += 1;
        step
    }
}

/// One more pick of a source of `n` samples.
#[inline]
fn bump(pick: &mut SourcePicks, n: u64) {
    pick.within += 1;
    if pick.within == n {
        pick.within = 0;
        pick.epoch += 1;
    }
}

/// Sets every source's place from its pick count before `position` (`counts` is scratch).
fn recount(m: &Mixture, seed: u64, position: u64, picks: &mut [SourcePicks], counts: &mut [u64]) {
    m.picks_before(seed, position, counts);
    for ((pick, &k), d) in picks.iter_mut().zip(counts.iter()).zip(m.datasets()) {
        pick.epoch = k / d.length;
        pick.within = k % d.length;
    }
}

/// SplitMix64's output function: a bijective 64-bit mix used to derive keys from seeds.
#[inline]
pub(crate) fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An epoch's table holds the same positions as the permutation's inverse walk, at
    /// every size around a run's length, and an order answers the same before and after
    /// it lays the table out.
    #[test]
    fn an_epochs_table_agrees_with_the_permutations_inverse() {
        for n in [1u64, 2, 3, 17, 1023, 1024, 1025, 2049, 20_000] {
            let perm = Permutation::new(n, 11, 3);
            let mut order = EpochOrder::new(EpochShuffle::Full(perm.clone()), 3);
            let table = order.lay_out();
            for i in 0..n {
                assert_eq!(u64::from(table[i as usize]), perm.position_of(i), "n {n} sample {i}");
                assert_eq!(perm.at(u64::from(table[i as usize])), i, "n {n} sample {i}");
            }
            // Asked in a scattered order, the answers stand whichever way they came.
            for k in 0..2 * n {
                let i = (k * 7919) % n;
                assert_eq!(order.position_of(i), perm.position_of(i), "n {n} ask {k}");
            }
            assert!(order.positions.is_some(), "n {n}: laid out once asked about often enough");
        }
    }
}
