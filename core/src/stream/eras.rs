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
//! - IID: at the end of the running stretch of `N` draws (draws have no passes, so the
//!   stream counts them in stretches of the length it reads, as SEQUENTIAL does).
//!
//! So the new rows join at a place that depends only on the positions, never on when a job
//! was restarted: a running reader that looks for appended rows before each global batch in
//! which a pass ends ([`passes_end_within`]) and resumes there reads the same stream as one
//! restarted from any state saved on the way.
//!
//! Each stretch of one length is an [`Era`]; a stream over a dataset that never grew has one,
//! from position 0. A saved state lists the eras when there are several, so a job resumed
//! again (on any world size) reads the same stream.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::Mode;

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
    let pass = pass_of(&last, mode, global_batch);
    let passes = (from - last.position).div_ceil(pass);
    let epoch = if mode == Mode::Shuffle { last.epoch + passes } else { 0 };
    let era = Era { position: last.position + passes * pass, epoch, length };
    if era.position == last.position {
        out.pop();
    }
    out.push(era);
    out
}

/// The positions a pass of `era` takes: an epoch's whole global batches in SHUFFLE, the
/// length in the other modes (0 when a SHUFFLE epoch holds no global batch).
fn pass_of(era: &Era, mode: Mode, global_batch: u64) -> u64 {
    match mode {
        Mode::Shuffle => (era.length / global_batch) * global_batch,
        Mode::Sequential | Mode::Iid => era.length,
    }
}

/// Whether a pass of the last era ends (or the last era begins, the stream's start
/// included) within the global batch at positions `p..p + global_batch`: where [`grow`]
/// would start an era for a caller at `p`, and at no position before it. A running reader that resumes on
/// a grown dataset at exactly these batches reads what a restarted one reads.
pub(super) fn passes_end_within(eras: &[Era], mode: Mode, global_batch: u64, p: u64) -> bool {
    let last = *eras.last().expect("a stream over one dataset has an era");
    let pass = pass_of(&last, mode, global_batch);
    let end = p.saturating_add(global_batch);
    if last.position >= p {
        return last.position < end;
    }
    if pass == 0 {
        return false;
    }
    // The first boundary at or after p.
    let next = last.position + (p - last.position).div_ceil(pass).saturating_mul(pass);
    next < end
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
        // IID: where the running stretch of 100 draws ends.
        assert_eq!(grow(&one, Mode::Iid, 32, 130, 150)[1], Era { position: 200, epoch: 0, length: 150 });
        // Grown again before the second era began: the newer length takes its place.
        let two = grow(&one, Mode::Shuffle, 32, 128, 150);
        assert_eq!(grow(&two, Mode::Shuffle, 32, 160, 400)[1], Era { position: 192, epoch: 2, length: 400 });
        assert_eq!(check(&grow(&two, Mode::Shuffle, 32, 160, 400), Mode::Shuffle, 32, 400), Ok(()));
    }

    #[test]
    fn a_reader_looks_for_growth_exactly_where_an_era_could_start() {
        let one = [Era { position: 0, epoch: 0, length: 100 }];
        for mode in [Mode::Shuffle, Mode::Sequential, Mode::Iid] {
            for g in [1u64, 7, 32, 100, 130] {
                if mode == Mode::Shuffle && g > 100 {
                    continue; // a stream refuses a SHUFFLE epoch of no global batch
                }
                for step in 0..40u64 {
                    let p = step * g;
                    let looks = passes_end_within(&one, mode, g, p);
                    // An era grown at p starts within this batch exactly when the reader looks.
                    let era = grow(&one, mode, g, p, 150);
                    let new = era.last().unwrap();
                    let starts_here = new.length == 150 && new.position >= p && new.position < p + g;
                    assert_eq!(looks, starts_here, "{mode:?} g={g} step={step}");
                    // A state saved at any earlier step since the last look grows the
                    // stream exactly as resuming here does.
                    if looks {
                        for before in (0..step).rev() {
                            if passes_end_within(&one, mode, g, before * g) {
                                break;
                            }
                            assert_eq!(grow(&one, mode, g, before * g, 150), era, "{mode:?} g={g} saved {before}");
                        }
                    }
                }
            }
        }
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
