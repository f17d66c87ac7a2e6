//! A dataset that grew under a stream: the stream's eras.
//!
//! A stream over one dataset reads it at one length until a job resumes on the same
//! dataset grown by appends (its manifest lists the identity it had before, so the rows a
//! saved state pointed at are unchanged). The running pass then finishes over the rows it
//! began with, exactly as it would have, and the new length takes over where it ends:
//!
//! - SHUFFLE: at the first epoch boundary at or after the resumed position; epochs keep
//!   their numbers, and an epoch of the new era is the permutation of the new length keyed
//!   by `(seed, epoch)`, as in a stream over the grown dataset from the start.
//! - SEQUENTIAL: at the end of the running pass over `0..N`.
//! - IID: at the resumed position (draws have no passes).
//!
//! Each stretch of one length is an [`Era`]; a stream over a dataset that never grew has one,
//! from position 0. A saved state lists the eras when there are several, so a job resumed
//! again (on any world size) reads the same stream.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::sampler::Mode;

/// A stretch of a stream over one dataset during which the dataset had one length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Era {
    /// The era's first stream position (samples since the stream's start).
    pub position: u64,
    /// SHUFFLE: the number of the era's first epoch; 0 in the other modes.
    pub epoch: u64,
    /// The dataset's length in the era.
    pub length: u64,
}

/// The era holding stream position `p` and its place in `eras` (the last era that starts at
/// or before `p`; `eras` is never empty and its first era starts at 0).
pub(super) fn era_at(eras: &[Era], p: u64) -> (usize, &Era) {
    let k = eras.partition_point(|e| e.position <= p).saturating_sub(1);
    (k, &eras[k])
}

/// `(epoch, global batch within it, global batches in it)` of the SHUFFLE global batch that
/// starts at position `p` (a multiple of `global_batch`).
pub(super) fn shuffle_place(eras: &[Era], global_batch: u64, p: u64) -> (u64, u64, u64) {
    let (_, era) = era_at(eras, p);
    let steps = era.length / global_batch;
    let into = (p - era.position) / global_batch;
    (era.epoch + into / steps, into % steps, steps)
}

/// `eras` with the dataset grown to `length`, for a caller whose next global batch starts
/// at position `p`: the new era starts where the pass running at `p` ends (see the module
/// docs). An era that would start where the last one does replaces it (nobody read it).
pub(super) fn grow(eras: &[Era], mode: Mode, global_batch: u64, p: u64, length: u64) -> Vec<Era> {
    let mut out = eras.to_vec();
    let last = *eras.last().expect("a stream over one dataset has an era");
    let from = p.max(last.position);
    let pass = match mode {
        Mode::Shuffle => (last.length / global_batch) * global_batch,
        Mode::Sequential => last.length,
        Mode::Iid => 1,
    };
    let passes = (from - last.position).div_ceil(pass);
    let epoch = if mode == Mode::Shuffle { last.epoch + passes } else { 0 };
    let era = Era { position: last.position + passes * pass, epoch, length };
    if era.position == last.position {
        out.pop();
    }
    out.push(era);
    out
}

/// Checks eras read from a saved state: the first at 0, each starting where a pass of the
/// one before ends (an epoch boundary, in SHUFFLE), each longer than the one before, and the
/// last of the state's dataset length.
pub(super) fn check(eras: &[Era], mode: Mode, global_batch: u64, length: u64) -> Result<(), String> {
    let Some(first) = eras.first() else { return Err("the state lists no era".into()) };
    if first.position != 0 || first.epoch != 0 {
        return Err("the first era does not start the stream".into());
    }
    for w in eras.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b.length <= a.length || b.position <= a.position {
            return Err(format!("era {b:?} does not follow {a:?}: eras start later and hold more samples"));
        }
        let into = b.position - a.position;
        let fits = match mode {
            Mode::Shuffle => {
                let per = (a.length / global_batch) * global_batch;
                per > 0 && into % per == 0 && b.epoch == a.epoch + into / per
            }
            Mode::Sequential => into % a.length == 0 && b.epoch == 0,
            Mode::Iid => b.epoch == 0,
        };
        if !fits {
            return Err(format!("era {b:?} does not start where a pass of {a:?} ends"));
        }
    }
    if eras.last().map(|e| e.length) != Some(length) {
        return Err(format!("the last era does not hold the state's {length} samples"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_waits_for_the_running_pass_to_end() {
        let one = [Era { position: 0, epoch: 0, length: 100 }];
        // SHUFFLE, 32 per batch: epochs of 96 positions. At position 128 (epoch 1, batch 1)
        // the grown length takes over at epoch 2, position 192.
        assert_eq!(grow(&one, Mode::Shuffle, 32, 128, 150)[1], Era { position: 192, epoch: 2, length: 150 });
        // At an epoch boundary no epoch is running: from there.
        assert_eq!(grow(&one, Mode::Shuffle, 32, 192, 150)[1], Era { position: 192, epoch: 2, length: 150 });
        // At the very start the era replaces the first.
        assert_eq!(grow(&one, Mode::Shuffle, 32, 0, 150), [Era { position: 0, epoch: 0, length: 150 }]);
        // SEQUENTIAL: the pass over 0..100 that position 130 is in ends at 200.
        assert_eq!(grow(&one, Mode::Sequential, 32, 130, 150)[1], Era { position: 200, epoch: 0, length: 150 });
        // IID: at once.
        assert_eq!(grow(&one, Mode::Iid, 32, 130, 150)[1], Era { position: 130, epoch: 0, length: 150 });
        // Grown again before the second era began: the newer length takes its place.
        let two = grow(&one, Mode::Shuffle, 32, 128, 150);
        assert_eq!(grow(&two, Mode::Shuffle, 32, 160, 400)[1], Era { position: 192, epoch: 2, length: 400 });
        assert_eq!(check(&grow(&two, Mode::Shuffle, 32, 160, 400), Mode::Shuffle, 32, 400), Ok(()));
    }

    #[test]
    fn eras_that_could_not_come_from_growth_are_refused() {
        let a = Era { position: 0, epoch: 0, length: 100 };
        assert!(check(&[a], Mode::Shuffle, 32, 100).is_ok());
        assert!(check(&[], Mode::Shuffle, 32, 100).is_err());
        assert!(check(&[a], Mode::Shuffle, 32, 101).is_err());
        let mid_epoch = Era { position: 160, epoch: 1, length: 150 };
        assert!(check(&[a, mid_epoch], Mode::Shuffle, 32, 150).is_err());
        let shrunk = Era { position: 96, epoch: 1, length: 90 };
        assert!(check(&[a, shrunk], Mode::Shuffle, 32, 90).is_err());
        let wrong_epoch = Era { position: 192, epoch: 3, length: 150 };
        assert!(check(&[a, wrong_epoch], Mode::Shuffle, 32, 150).is_err());
        assert!(check(&[a, Era { position: 200, epoch: 0, length: 150 }], Mode::Sequential, 32, 150).is_ok());
        assert!(check(&[a, Era { position: 150, epoch: 0, length: 150 }], Mode::Sequential, 32, 150).is_err());
    }
}
