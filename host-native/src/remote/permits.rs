//! How many ranged reads the process keeps in flight, and the open files they need.
//!
//! Requests in flight are what hides a far store's latency (Little's law): at 20 ms a round
//! trip, 2048 of them carry about 100,000 records a second. Each is a connection, so a
//! socket, so an open file; a process's default soft limit is often 1024, and a loader past
//! it failed every request with "error sending request" (a cache of half a dataset in a
//! local S3 server, 256 or 1024 open files: `test_remote.py`). So the permits are one pool
//! for the whole process (two datasets of a mixture share it), and sized by the limit: the
//! soft limit is raised toward the hard one as far as [`MAX_READS_IN_FLIGHT`] needs (a
//! raise the hard limit allows needs no privilege), and the permits are half of what it
//! then is, the other half left to the files and sockets the rest of the process opens.

use tokio::sync::{Semaphore, SemaphorePermit};

use super::PerProcess;

/// Ranged GETs the process has in flight at most. A read-ahead of many batches announces
/// thousands of ranges; sent all at once they would open as many connections (a store
/// answers that with throttling, a small server with a queue that makes every request
/// late). The rest wait for a permit, in the order they were announced. Measured with
/// `memory://...?latency_ms=20` (12 KiB records, half of them cached, so about one record a
/// request; five runs of each against the same loader at 0 ms): 1024 held epochs after the
/// first to 0.77x and a first epoch from opening to 0.56x, 2048 made them 0.86x and 0.78x,
/// and 4096 did no better (0.80x, 0.79x) on two cores; 256 had held the loader to a fifth.
pub const MAX_READS_IN_FLIGHT: usize = 2048;

/// Waits for one of the process's permits for a ranged read (see the module docs); the
/// read holds it until its bytes are in. The first call sizes the permits and raises the
/// open-file limit if it must.
pub(crate) async fn read_permit() -> SemaphorePermit<'static> {
    // Per process: a forked child does not inherit the parent's requests, only the count.
    static PERMITS: PerProcess<Semaphore> = PerProcess::new();
    let permits = PERMITS.get(|| Semaphore::new(reads_in_flight()));
    // The semaphore is never closed, so acquiring cannot fail.
    permits.acquire().await.unwrap_or_else(|_| unreachable!("the read semaphore is never closed"))
}

/// What the open-file limit `(soft, hard)` allows: the soft limit to set, if it must rise,
/// and the reads in flight.
fn plan(soft: u64, hard: u64) -> (Option<u64>, usize) {
    let wanted = 2 * MAX_READS_IN_FLIGHT as u64;
    let raised = (soft < wanted && hard > soft).then(|| hard.min(wanted));
    let usable = raised.unwrap_or(soft);
    let permits = (usable / 2).clamp(1, MAX_READS_IN_FLIGHT as u64) as usize;
    (raised, permits)
}

/// Raises the soft open-file limit as [`plan`] says, and returns the permits it allows.
#[cfg(unix)]
fn reads_in_flight() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit for the call to fill; nothing else
    // holds a reference to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return MAX_READS_IN_FLIGHT; // no limit to read: assume none binds
    }
    let (raised, permits) = plan(limit.rlim_cur, limit.rlim_max);
    let Some(soft) = raised else { return permits };
    let wanted = libc::rlimit { rlim_cur: soft, rlim_max: limit.rlim_max };
    // SAFETY: `wanted` is a valid rlimit that outlives the call, and its soft limit is
    // at most the hard one, which an unprivileged process may always set.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } == 0 {
        permits
    } else {
        plan(limit.rlim_cur, limit.rlim_cur).1 // refused: live within the limit as it is
    }
}

#[cfg(not(unix))]
fn reads_in_flight() -> usize {
    MAX_READS_IN_FLIGHT
}

#[cfg(test)]
mod tests {
    use super::{plan, MAX_READS_IN_FLIGHT};

    #[test]
    fn the_open_file_limit_sizes_the_reads_in_flight() {
        let max = MAX_READS_IN_FLIGHT as u64;
        // A soft limit of 1024 under a generous hard one is raised as far as needed.
        assert_eq!(plan(1024, 524_288), (Some(2 * max), MAX_READS_IN_FLIGHT));
        assert_eq!(plan(1024, u64::MAX), (Some(2 * max), MAX_READS_IN_FLIGHT));
        // Under a hard limit that allows less, as far as it allows; half goes to reads.
        assert_eq!(plan(256, 1500), (Some(1500), 750));
        // A limit that cannot rise is shared the same way.
        assert_eq!(plan(256, 256), (None, 128));
        assert_eq!(plan(1, 1), (None, 1));
        // One already high enough is left alone.
        assert_eq!(plan(20_000, 20_000), (None, MAX_READS_IN_FLIGHT));
        assert_eq!(plan(2 * max, 2 * max), (None, MAX_READS_IN_FLIGHT));
    }
}
