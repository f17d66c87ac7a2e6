//! A loader's stream as the plan of a remote cache's eviction. The plan is the object
//! store's interface ([`Plan`]), but what it answers is the stream's schedule and how far
//! the caller has read, which only the loader knows; kept apart from the loader's
//! threads, because the cache asks it from its own, and from the read-ahead
//! (`ahead.rs`), which decides what is fetched, not what is kept.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{lock, Loader};
use crate::remote::plan::{Plan, ReadPlan};

impl Loader {
    /// For a dataset read from an object store, tells its cache when each sample is read
    /// next (from the stream and how far the caller has read), so that it evicts the data
    /// needed furthest ahead ([`crate::remote::file::Cache`]). Streams whose future is not
    /// a schedule (IID, mixtures, packed rows) leave the cache to its oldest-first rule.
    pub(super) fn plan_remote_reads(&self) {
        if self.packing.is_some() || self.stream.mixture_sources().is_some() {
            return;
        }
        let Some(shared) = lock(&self.shared).clone() else { return };
        if shared.sources.first().is_some_and(|s| s.data().is_split()) {
            // The cache knows records of the whole dataset; the schedule, the split's.
            return;
        }
        let Some(cache) = shared.sources.first().and_then(|s| s.data().cache()) else { return };
        cache.set_plan(Some(ReadPlan::new(StreamPlan {
            schedule: Mutex::new(zrecord_core::stream::Schedule::new(self.stream.clone())),
            consumed: Arc::clone(&self.consumed),
            announced: Arc::clone(&shared.announced),
            global: self.stream.global_batch(),
        })));
    }
}

/// A loader's stream as its remote cache's plan ([`Loader::plan_remote_reads`]): the
/// position is what the caller has consumed, and the next use of a sample is where the
/// stream's schedule reads it at or after that.
struct StreamPlan {
    schedule: Mutex<zrecord_core::stream::Schedule>,
    /// Global batches the caller has taken.
    consumed: Arc<AtomicU64>,
    /// Global batches the read-ahead has announced.
    announced: Arc<AtomicU64>,
    global: u64,
}

impl Plan for StreamPlan {
    fn now(&self) -> u64 {
        self.consumed.load(Ordering::Acquire).saturating_mul(self.global)
    }

    fn next_use(&self, sample: u64) -> Option<u64> {
        let now = self.now();
        lock(&self.schedule).next_use(sample, now)
    }

    fn horizon(&self) -> u64 {
        self.announced.load(Ordering::Acquire).saturating_mul(self.global).max(self.now())
    }

    fn next_uses_from(&self, from: u64, samples: &[u64], uses: &mut [Option<u64>]) {
        let mut schedule = lock(&self.schedule);
        for (used, &sample) in uses.iter_mut().zip(samples) {
            *used = schedule.next_use(sample, from);
        }
    }
}
