//! The global stream of a job: the [`Stream`] type, its construction and where its global
//! batches fall in epochs and eras.
//!
//! Everything a reader needs to place a position is here and nothing that reads: a
//! [`super::Shard`] reads it (`shard.rs`), a [`super::Schedule`] looks ahead in it
//! (`schedule.rs`), a saved state is taken and checked against it (`resume.rs`,
//! `state.rs`). Those files use this one, never the reverse, so the type can be read, and
//! changed, without them.
//!
//! A stream is a pure value: two streams that compare equal read the same samples at every
//! position. Its fields are visible to the whole stream module (`pub(super)`), as they were
//! when the type sat in `mod.rs`, and to nothing outside it; they are set only here and by
//! a resume, which checks a state against the stream before it takes the state's eras.

use alloc::vec::Vec;

use super::{eras, Blocks, DatasetId, EpochShuffle, Era, Mixture, Mode, StreamError, MAX_POSITION};

/// What a stream reads.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Source {
    Single { dataset: DatasetId, mode: Mode },
    Mixture(Mixture),
}

/// The global stream of a job: global batches of `global_batch` samples, a pure function
/// of `(seed, mode, dataset)` (or of `(seed, mixture)`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    pub(super) seed: u64,
    pub(super) global_batch: u64,
    pub(super) source: Source,
    /// A single dataset's lengths, from where each took over (`eras.rs`): one era from 0
    /// unless the dataset grew under a resumed job. Empty for a mixture.
    pub(super) eras: Vec<Era>,
    /// SHUFFLE in blocks of neighbouring records (`blocks.rs`); `None` for the full
    /// permutation.
    pub(super) blocks: Option<Blocks>,
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
    pub(super) fn epoch_order(&self, len: u64, epoch: u64) -> EpochShuffle {
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

    pub(super) fn position(&self, step: u64) -> Result<u64, StreamError> {
        step.checked_mul(self.global_batch)
            .filter(|&p| p.saturating_add(self.global_batch) <= MAX_POSITION)
            .ok_or(StreamError::PositionOverflow { step })
    }
}
