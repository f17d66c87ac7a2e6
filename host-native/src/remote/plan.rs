//! The plan a loader gives a remote dataset's caches: when each sample is read next
//! ([`ReadPlan`]), and each kept range's next use remembered between evictions
//! ([`NextUse`]).
//!
//! A stream is a pure function of position, so the next use of a sample is exact. Asking
//! for it costs a permutation's inverse; an eviction that asked it of every sample of
//! every kept range, each time the cache went over budget, spent a third of a loader's CPU
//! at 20 ms a request (a 10% cache: some 2,000 ranges ranked per pass, a pass every few
//! batches). But an answer stays true until the stream passes it: the first position at
//! or after `now` that reads a sample is also the first at or after any later `now` not
//! past it. So each range keeps the answer for each of its samples and asks again for one
//! only once the stream has passed it (or when another plan is installed).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a loader knows of its stream, for eviction.
pub trait Plan: Send + Sync {
    /// The stream position reached: no sample is read before it any more.
    fn now(&self) -> u64;
    /// The first position at or after [`Plan::now`] that reads dataset sample `sample`,
    /// or `None` if no such position is known.
    fn next_use(&self, sample: u64) -> Option<u64>;
    /// How far the reads announced ahead reach: a sample needed before this position is
    /// about to be read (its range is the read-ahead's, not the cache's to drop).
    fn horizon(&self) -> u64 {
        self.now()
    }
    /// For each of `samples`, the first position at or after `from` that reads it, or
    /// `None` if no such position is known (a plan that cannot look past [`Plan::now`]
    /// knows none): one call for the records of a request or of a batch.
    /// `uses` is as long as `samples`.
    fn next_uses_from(&self, from: u64, samples: &[u64], uses: &mut [Option<u64>]) {
        let _ = (from, samples);
        uses.fill(None);
    }
}

/// A [`Plan`] with an identity of its own, so that answers remembered from one plan are
/// never taken for another's.
#[derive(Clone)]
pub struct ReadPlan {
    id: u64,
    plan: Arc<dyn Plan>,
}

impl std::fmt::Debug for ReadPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadPlan").field("id", &self.id).finish_non_exhaustive()
    }
}

impl ReadPlan {
    /// Wraps `plan`.
    pub fn new(plan: impl Plan + 'static) -> ReadPlan {
        // 0 is what a range that never asked holds.
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ReadPlan { id: NEXT.fetch_add(1, Ordering::Relaxed), plan: Arc::new(plan) }
    }

    /// The plan's position now.
    pub fn now(&self) -> u64 {
        self.plan.now()
    }

    /// How far the reads announced ahead reach ([`Plan::horizon`]).
    pub fn horizon(&self) -> u64 {
        self.plan.horizon()
    }

    /// See [`Plan::next_uses_from`].
    pub fn next_uses_from(&self, from: u64, samples: &[u64], uses: &mut [Option<u64>]) {
        self.plan.next_uses_from(from, samples, uses)
    }
}

/// A kept range's soonest next use, as a plan last answered it: the next use of each of its
/// samples, soonest first. When the stream passes the soonest, only that sample is asked
/// again (a range of labels holds hundreds of samples read batch after batch: asking for
/// all of them each time one was read cost more than the reads).
#[derive(Debug)]
pub struct NextUse {
    /// The plan that answered ([`ReadPlan`]'s id; 0 for none yet).
    plan: u64,
    /// `(next use, sample)` of the samples counted.
    uses: BinaryHeap<Reverse<(u64, u64)>>,
    /// How many of the range's samples are counted (a range only ever learns more, at the
    /// end of its list).
    counted: usize,
    /// The soonest of `uses` ([`u64::MAX`] when it is empty), kept beside the heap: an
    /// eviction asks every kept range, and most answers stand, so most asks read this
    /// and not the heap (another allocation, another cache miss).
    soonest: u64,
}

impl Default for NextUse {
    fn default() -> Self {
        NextUse { plan: 0, uses: BinaryHeap::new(), counted: 0, soonest: u64::MAX }
    }
}

impl NextUse {
    /// The soonest next use of the range's `samples` (each a dataset sample by `sample`)
    /// by `plan`, standing at `now`; [`u64::MAX`] if none is known.
    pub fn get<S: Copy>(&mut self, plan: &ReadPlan, now: u64, samples: &[S], sample: impl Fn(S) -> u64) -> u64 {
        if self.plan == plan.id && self.counted == samples.len() && self.soonest >= now {
            return self.soonest;
        }
        if let [one] = samples {
            // A range of one record (every range of a cache far smaller than the dataset
            // holds one): its answer is the soonest, and no heap is built for it.
            let at = plan.plan.next_use(sample(*one)).filter(|&at| at >= now);
            *self = NextUse { plan: plan.id, uses: BinaryHeap::new(), counted: 1, soonest: at.unwrap_or(u64::MAX) };
            return self.soonest;
        }
        // A range that held one record kept its answer out of the heap: counted afresh.
        let single = self.counted == 1 && self.uses.is_empty();
        if self.plan != plan.id || self.counted > samples.len() || single {
            *self = NextUse { plan: plan.id, ..NextUse::default() };
        }
        for &s in &samples[self.counted..] {
            let s = sample(s);
            self.push(plan, now, s);
        }
        self.counted = samples.len();
        self.soonest = u64::MAX;
        while let Some(&Reverse((at, s))) = self.uses.peek() {
            if at >= now {
                self.soonest = at;
                break;
            }
            self.uses.pop();
            self.push(plan, now, s);
        }
        self.soonest
    }

    fn push(&mut self, plan: &ReadPlan, now: u64, sample: u64) {
        // The plan stands at or past `now` (the stream only moves on), so its answer is
        // not before `now`; one that were would be asked again for ever: left out.
        if let Some(at) = plan.plan.next_use(sample).filter(|&at| at >= now) {
            self.uses.push(Reverse((at, sample)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Sample `i` is read at positions `i`, `i + 10`, `i + 20`, ...; counts the questions.
    struct Cyclic {
        now: AtomicU64,
        asked: AtomicUsize,
    }

    impl Plan for Arc<Cyclic> {
        fn now(&self) -> u64 {
            self.now.load(Ordering::Relaxed)
        }
        fn next_use(&self, sample: u64) -> Option<u64> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            let now = self.now();
            Some(now + (sample + 10 - now % 10) % 10)
        }
    }

    #[test]
    fn a_range_of_one_record_that_learns_another_counts_both() {
        let cyclic = Arc::new(Cyclic { now: AtomicU64::new(0), asked: AtomicUsize::new(0) });
        let plan = ReadPlan::new(cyclic.clone());
        let mut next = NextUse::default();
        let mut samples = vec![7u64];
        assert_eq!(next.get(&plan, 0, &samples, |s| s), 7);
        assert_eq!(next.get(&plan, 7, &samples, |s| s), 7, "asked once until passed");
        assert_eq!(cyclic.asked.load(Ordering::Relaxed), 1);
        cyclic.now.store(8, Ordering::Relaxed);
        assert_eq!(next.get(&plan, 8, &samples, |s| s), 17);
        // It learns record 9: the answer is the sooner of the two, and record 7's is not lost.
        samples.push(9);
        assert_eq!(next.get(&plan, 8, &samples, |s| s), 9);
        cyclic.now.store(10, Ordering::Relaxed);
        assert_eq!(next.get(&plan, 10, &samples, |s| s), 17);
    }

    #[test]
    fn an_answer_is_kept_until_the_stream_passes_it() {
        let cyclic = Arc::new(Cyclic { now: AtomicU64::new(0), asked: AtomicUsize::new(0) });
        let plan = ReadPlan::new(cyclic.clone());
        let mut next = NextUse::default();
        let asked = || cyclic.asked.load(Ordering::Relaxed);
        let mut samples = vec![7u64, 4];
        assert_eq!(next.get(&plan, plan.now(), &samples, |s| s), 4);
        assert_eq!(asked(), 2);
        // Up to position 4 the answer stands, unasked.
        for now in 1..=4 {
            cyclic.now.store(now, Ordering::Relaxed);
            assert_eq!(next.get(&plan, now, &samples, |s| s), 4);
        }
        assert_eq!(asked(), 2);
        // Past it, only the sample passed is asked again (4 -> 14); 7 is next.
        cyclic.now.store(5, Ordering::Relaxed);
        assert_eq!(next.get(&plan, 5, &samples, |s| s), 7);
        assert_eq!(asked(), 3);
        // A sample the range learns of is asked once.
        samples.push(5);
        assert_eq!(next.get(&plan, 5, &samples, |s| s), 5);
        assert_eq!(asked(), 4);
        // Another plan asks everything again.
        let other = ReadPlan::new(cyclic.clone());
        assert_eq!(next.get(&other, 5, &samples, |s| s), 5);
        assert_eq!(asked(), 7);
        // A long way on, each sample passed is asked once more, whatever the distance.
        cyclic.now.store(1_000_006, Ordering::Relaxed);
        assert_eq!(next.get(&other, 1_000_006, &samples, |s| s), 1_000_007);
        assert_eq!(asked(), 10);
    }
}
