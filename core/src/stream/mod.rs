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
//! The files: `global.rs` the [`Stream`] itself, `shard.rs` a rank's reader, `state.rs` and
//! `resume.rs` the resume state, `schedule.rs` the next uses a cache evicts by, `mode.rs` the
//! [`Mode`]; the orders in `permutation.rs`, `blocks.rs`, `mixture.rs` and `eras.rs`; packed
//! rows in `pack.rs` and the files it uses. This file holds only what all of them share (the
//! dataset identity, the errors, the position limit, the seed mix) and the re-exports that
//! keep the public paths, and uses none of them, so no file that imports from here is
//! imported back.
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
mod global;
mod jump;
mod mixture;
mod mode;
pub mod pack;
pub mod pass;
mod permutation;
mod resume;
pub mod row_index;
pub mod rows;
mod schedule;
mod shard;
pub mod shares;
mod state;

pub use blocks::{BlockOrder, Blocks, EpochShuffle};
pub use eras::Era;
pub use global::Stream;
pub use mixture::Mixture;
pub use mode::Mode;
pub use permutation::Permutation;
pub use schedule::Schedule;
pub use shard::Shard;

pub use state::{PackedState, StateError, StreamState, STATE_VERSION, STATE_VERSION_BLOCKS, STATE_VERSION_ERAS};

/// Stream positions (in samples) must stay below this (2^62), so that mixture pick counts
/// are exact in 128-bit arithmetic. At a billion samples a second that is 146 years.
pub const MAX_POSITION: u64 = 1 << 62;

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

/// SplitMix64's output function: a bijective 64-bit mix used to derive keys from seeds.
#[inline]
pub(crate) fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
