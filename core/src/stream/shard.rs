//! One rank's reader of a stream: a [`Shard`] and the cursor it carries from one batch to
//! the next.
//!
//! A shard holds a copy of its stream and decides nothing about which sample sits where:
//! every index it writes is the stream's (`global.rs`, `eras.rs`, `blocks.rs`,
//! `mixture.rs`), so a shard that seeks and one that reads its way to the same step write
//! the same indices. The cursor is only a cache of where the last fill stopped (an IID
//! generator's place, an epoch's order, a mixture's pick counts); a fill that finds it
//! elsewhere rebuilds it, by a jump or a recount, never by replay from the start.

use alloc::vec::Vec;

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::global::Source;
use super::{eras, jump, mixture, EpochShuffle, Mixture, Mode, Permutation, Stream, StreamError};

/// Below this many samples an IID reader steps its generator forward; beyond it, it jumps
/// (a jump costs about as much as a few thousand steps).
const IID_WALK_LIMIT: u64 = 1 << 12;

/// Below this many samples per source a mixture reader walks forward; beyond it, it
/// recounts (two floor sums per source cost about as much as a thousand steps of a walk).
const MIXTURE_WALK_PER_SOURCE: u64 = 1 << 10;

impl Stream {
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
    /// Fails only when the step lies beyond [`MAX_POSITION`](super::MAX_POSITION).
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
    /// If `indices.len() != batch_size()`, or past [`MAX_POSITION`](super::MAX_POSITION).
    pub fn fill(&mut self, indices: &mut [u64]) -> u64 {
        self.fill_inner(indices, None)
    }

    /// [`Shard::fill`], also writing each sample's source number (its place in the mixture;
    /// 0 for a single dataset) into `sources`.
    ///
    /// # Panics
    /// If either slice is not `batch_size()` long, or past [`MAX_POSITION`](super::MAX_POSITION).
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
