//! Finite passes, for evaluation: every sample of one dataset read `passes` times in
//! SEQUENTIAL order, then the stream ends.
//!
//! A SEQUENTIAL stream runs on forever (position `p` reads sample `p mod N`). A pass of
//! `passes x N` positions fills `ceil(passes x N / G)` global batches of `G`; the last one's
//! slots past the pass are padding, and every rank is told how many of its slots at the
//! front hold the pass's samples ([`FinitePass::valid`]): rank `r`'s slice of a global
//! batch is slots `r B .. (r + 1) B`, so its valid slots are always a prefix. Packed
//! passes stop at the same documents ([`super::pack::Packer::finish_after`]).

use alloc::string::ToString;

use super::{Mode, Stream, StreamError};

/// One finite pass over a stream ([`FinitePass::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinitePass {
    /// Positions the pass reads: `passes x N`.
    samples: u64,
    /// The stream's global batch.
    global: u64,
}

impl FinitePass {
    /// `passes` whole passes over `stream`'s dataset: a SEQUENTIAL stream of one dataset.
    pub fn new(stream: &Stream, passes: u64) -> Result<FinitePass, StreamError> {
        if stream.mixture_sources().is_some() {
            return Err(StreamError::FinitePass(
                "a finite pass reads one dataset in order; a mixture has no end".to_string(),
            ));
        }
        if stream.mode() != Mode::Sequential {
            return Err(StreamError::FinitePass(alloc::format!(
                "a finite pass (passes=) reads the dataset in order: mode SEQUENTIAL, not {:?}",
                stream.mode()
            )));
        }
        if passes == 0 {
            return Err(StreamError::FinitePass("passes must be at least 1".to_string()));
        }
        let samples = stream.datasets()[0]
            .length
            .checked_mul(passes)
            .filter(|&s| s <= super::MAX_POSITION)
            .ok_or_else(|| StreamError::FinitePass(alloc::format!("{passes} passes run past 2^62 samples")))?;
        Ok(FinitePass { samples, global: stream.global_batch() })
    }

    /// Positions the pass reads (`passes x N`): documents, for a packed pass.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Global batches of the pass (the last one padded).
    pub fn steps(&self) -> u64 {
        self.samples.div_ceil(self.global)
    }

    /// Of the `batch` slots from slot `first` (a rank's slice: `rank x batch`) of global
    /// batch `step`, how many at the front hold samples of the pass.
    pub fn valid(&self, step: u64, first: u64, batch: u64) -> u64 {
        let start = step.saturating_mul(self.global).saturating_add(first);
        self.samples.saturating_sub(start).min(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DatasetId;

    #[test]
    fn the_last_batch_is_padded_rank_by_rank() {
        let stream = Stream::new(DatasetId { length: 10, generation: 1 }, Mode::Sequential, 0, 4).unwrap();
        let pass = FinitePass::new(&stream, 1).unwrap();
        assert_eq!(pass.steps(), 3);
        // Two ranks of 2: the third batch holds samples 8 and 9, both rank 0's.
        assert_eq!((pass.valid(2, 0, 2), pass.valid(2, 2, 2)), (2, 0));
        assert_eq!(pass.valid(1, 2, 2), 2);
        let two = FinitePass::new(&stream, 2).unwrap();
        assert_eq!((two.steps(), two.valid(4, 0, 4)), (5, 4));
        let shuffled = Stream::new(DatasetId { length: 10, generation: 1 }, Mode::Shuffle, 0, 4).unwrap();
        assert!(FinitePass::new(&shuffled, 1).is_err());
        assert!(FinitePass::new(&stream, 0).is_err());
    }
}
