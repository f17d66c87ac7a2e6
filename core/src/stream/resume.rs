//! A stream's side of its resume state: the state it saves after a step, and how it takes
//! one back, following a dataset grown by appends.
//!
//! Taking a state back never trusts it: every path ends in [`StreamState::check`]
//! (`state.rs`) against the stream the state is applied to, so a state saved on other
//! data, another seed or another global batch size is refused before its step is used.
//! Only a single dataset follows growth; a mixture or a packed state must match as saved.

use alloc::vec::Vec;

use super::global::Source;
use super::{
    eras, DatasetId, Era, StateError, Stream, StreamState, STATE_VERSION, STATE_VERSION_BLOCKS, STATE_VERSION_ERAS,
};

impl Stream {
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
}
