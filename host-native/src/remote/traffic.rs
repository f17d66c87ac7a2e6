//! What every process reading through one cache directory fetched, summed
//! (`zrecord.remote_stats(cache_dir)`).
//!
//! The worker processes of a torch DataLoader each open a remote dataset again, so each
//! counts its own requests; the parent's `Dataset.remote_stats()` sees none of theirs. A
//! process using a cache directory therefore keeps its counts in a slot of the directory's
//! `traffic.bin`, rewritten after each request it completes and each range it reads from
//! disk, and [`total`] adds the slots up. The counts are since the directory was made: take
//! the difference of two totals for one run or epoch.
//!
//! `traffic.bin` is a run of 64-byte slots, one per process that opened a dataset with the
//! directory, never reused (64 bytes a process): `pid` (u32 LE), `version` (u32 LE, 1), then
//! seven u64 LE counts: requests, bytes, retries, memory hits, disk hits, disk bytes,
//! stalls. A slot is claimed by appending it under an exclusive `flock` on the file (a
//! slot cut short by a crash is skipped by the next claim, which starts at the next
//! multiple of 64). Each count only grows; a slot read while its process rewrites it gives
//! a count between the old and the new. Slots of another version are not counted.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use zrecord_core::error::IoError;

use super::{io, RemoteCounts};

/// The file of slots inside a cache directory.
pub const TRAFFIC_FILE: &str = "traffic.bin";
/// Bytes per slot.
const SLOT: u64 = 64;
/// The slots' layout version.
const VERSION: u32 = 1;

/// This process's slot in a cache directory's [`TRAFFIC_FILE`].
pub struct Traffic {
    file: File,
    at: u64,
}

fn encode(counts: &RemoteCounts) -> [u8; SLOT as usize] {
    let mut slot = [0u8; SLOT as usize];
    slot[..4].copy_from_slice(&std::process::id().to_le_bytes());
    slot[4..8].copy_from_slice(&VERSION.to_le_bytes());
    let values = [
        counts.requests,
        counts.bytes,
        counts.retries,
        counts.hits,
        counts.disk_hits,
        counts.disk_bytes,
        counts.stalls,
    ];
    for (k, v) in values.iter().enumerate() {
        slot[8 + 8 * k..16 + 8 * k].copy_from_slice(&v.to_le_bytes());
    }
    slot
}

impl Traffic {
    /// Claims a new slot in `dir`'s traffic file (created if missing).
    pub fn claim(dir: &Path) -> Result<Traffic, IoError> {
        let path = dir.join(TRAFFIC_FILE);
        let file = File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(&path, "open"))?;
        file.lock().map_err(io(&path, "lock"))?;
        let claimed = file.metadata().and_then(|m| {
            let at = m.len().div_ceil(SLOT) * SLOT;
            file.write_all_at(&encode(&RemoteCounts::default()), at).map(|()| at)
        });
        let _ = file.unlock();
        let at = claimed.map_err(io(&path, "write"))?;
        Ok(Traffic { file, at })
    }

    /// Rewrites this process's slot with `counts`. A failure only leaves the slot behind.
    pub fn publish(&self, counts: &RemoteCounts) {
        let _ = self.file.write_all_at(&encode(counts), self.at);
    }
}

/// Every slot of `dir`'s traffic file added up, and how many processes they came from
/// (`most_in_flight` is not kept: it is 0). A directory no process read through yet gives
/// zeros.
pub fn total(dir: &Path) -> Result<(RemoteCounts, u64), IoError> {
    let path = dir.join(TRAFFIC_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !dir.is_dir() {
                return Err(io(dir, "read cache directory")(e));
            }
            Vec::new()
        }
        Err(e) => return Err(io(&path, "read")(e)),
    };
    let mut sum = RemoteCounts::default();
    let mut processes = 0;
    for slot in bytes.chunks_exact(SLOT as usize) {
        if u32::from_le_bytes(slot[4..8].try_into().expect("4 bytes")) != VERSION {
            continue;
        }
        let v = |k: usize| u64::from_le_bytes(slot[8 + 8 * k..16 + 8 * k].try_into().expect("8 bytes"));
        sum.requests += v(0);
        sum.bytes += v(1);
        sum.retries += v(2);
        sum.hits += v(3);
        sum.disk_hits += v(4);
        sum.disk_bytes += v(5);
        sum.stalls += v(6);
        processes += 1;
    }
    Ok((sum, processes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_add_up_and_a_torn_slot_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(total(dir.path()).unwrap(), (RemoteCounts::default(), 0));
        let a = Traffic::claim(dir.path()).unwrap();
        a.publish(&RemoteCounts { requests: 3, bytes: 300, disk_hits: 1, ..RemoteCounts::default() });
        // A claim cut short by a crash: 10 bytes of a slot.
        let path = dir.path().join(TRAFFIC_FILE);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all_at(&[7u8; 10], 64).unwrap();
        let b = Traffic::claim(dir.path()).unwrap();
        assert_eq!(b.at, 128);
        b.publish(&RemoteCounts { requests: 2, bytes: 50, stalls: 4, ..RemoteCounts::default() });
        a.publish(&RemoteCounts { requests: 5, bytes: 500, disk_hits: 1, ..RemoteCounts::default() });
        let (sum, processes) = total(dir.path()).unwrap();
        assert_eq!(processes, 2);
        assert_eq!((sum.requests, sum.bytes, sum.disk_hits, sum.stalls), (7, 550, 1, 4));
        assert!(total(&dir.path().join("missing")).is_err());
    }
}
