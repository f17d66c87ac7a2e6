//! Warming a loader's stores into the page cache on a thread of its own ([`Warm`]): how
//! much memory the page cache has (`/proc/meminfo`, and the room under a cgroup memory
//! limit), whether the stores are worth it, the thread that reads them, and how far it has
//! come ([`Loader::warm_progress`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::workers::Shared;
use super::{lock, Loader, Warm};
use crate::Zrecord;

/// Bytes of memory the page cache can use without pushing anything out: the kernel's
/// `MemAvailable`, or less when this process's memory cgroup has a limit with less room
/// left under it. `None` where `MemAvailable` cannot be read (not Linux).
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    let mut avail = kib.saturating_mul(1024);
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).ok().and_then(|v| v.trim().parse::<u64>().ok());
    for line in cgroups.lines() {
        // "0::/path" is the cgroup v2 hierarchy; "N:memory:/path" (or "N:...,memory,...:")
        // the v1 memory controller. "max", or v1's huge "no limit", leaves `avail` as is.
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let path = path.trim().trim_start_matches('/');
        let (limit, usage) = if controllers.is_empty() {
            let dir = std::path::Path::new("/sys/fs/cgroup").join(path);
            (read(dir.join("memory.max")), read(dir.join("memory.current")))
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = std::path::Path::new("/sys/fs/cgroup/memory").join(path);
            (read(dir.join("memory.limit_in_bytes")), read(dir.join("memory.usage_in_bytes")))
        } else {
            continue;
        };
        if let (Some(limit), Some(usage)) = (limit, usage) {
            avail = avail.min(limit.saturating_sub(usage));
        }
    }
    Some(avail)
}

/// Progress of a loader's warming ([`Loader::warm_progress`](super::Loader::warm_progress)):
/// bytes read (set to `total` when done) and bytes to read.
#[derive(Debug, Default)]
pub(super) struct WarmProgress {
    pub(super) done: AtomicU64,
    pub(super) total: AtomicU64,
}

/// Starts the warming thread if [`Warm`] says the stores should be warmed: each store
/// once, in source and field order, stopping between pieces when `stop` is raised (the
/// loader closes). Returns the thread's progress and handle, or `None` when nothing is
/// warmed.
pub(super) fn start_warming(
    shared: &Shared,
    warm: Warm,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<Option<(Arc<WarmProgress>, JoinHandle<()>)>> {
    if shared.fetch.is_some() {
        return Ok(None); // no stores of ours to warm
    }
    let mut stores: Vec<Arc<Zrecord>> = Vec::new();
    for source in &shared.sources {
        for store in source.data().stores().map_err(std::io::Error::other)? {
            if !stores.iter().any(|s| s.path() == store.path()) {
                stores.push(Arc::clone(store));
            }
        }
    }
    let total: u64 = stores.iter().map(|s| s.footprint()).sum();
    let wanted = match warm {
        Warm::Never => false,
        Warm::Always => total > 0,
        Warm::Auto => zrecord_core::engine::worth_warming(total, available_memory()),
    };
    if !wanted {
        return Ok(None);
    }
    let progress = Arc::new(WarmProgress::default());
    progress.total.store(total, Ordering::Release);
    let stop = Arc::clone(stop);
    let shown = Arc::clone(&progress);
    let handle = std::thread::Builder::new().name("zrecord-warm".into()).spawn(move || {
        let mut before = 0u64;
        for store in stores {
            let mut keep_going = |done: u64, _total: u64| {
                shown.done.store(before + done, Ordering::Release);
                !stop.load(Ordering::Acquire)
            };
            // A store that cannot be read is reported by the batches that read it.
            let covered = store.warm(&mut keep_going).unwrap_or(0);
            before += covered;
            if stop.load(Ordering::Acquire) {
                return;
            }
        }
        shown.done.store(total, Ordering::Release);
    })?;
    Ok(Some((progress, handle)))
}

impl Loader {
    /// How far the background warming of the stores has come ([`Warm`]): `(bytes read,
    /// bytes to read)`, equal once it is done; `None` when the loader does not warm (not
    /// started yet, no workers, [`Warm::Never`], or stores too large for [`Warm::Auto`]).
    pub fn warm_progress(&self) -> Option<(u64, u64)> {
        let progress = lock(&self.warming).clone()?;
        let total = progress.total.load(Ordering::Acquire);
        Some((progress.done.load(Ordering::Acquire).min(total), total))
    }
}
