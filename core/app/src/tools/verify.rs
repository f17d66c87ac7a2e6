//! `verify`: every record checked against its checksum and decoded, in parallel, with the
//! store-level damage, and the report of what failed.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde::Serialize;

use zrecord_core::engine::Store;
use zrecord_core::error::{Error, Result};
use zrecord_core::io::{Backend, Parallel};

use super::census::{census, check_placement, damage, VERIFY_OVERLAP};

/// One record that failed to decode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BadRecord {
    /// Its index.
    pub index: u32,
    /// Why.
    pub error: String,
}

/// The outcome of [`verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Records decoded.
    pub checked: u32,
    /// Of those, how many had a checksum that was checked (and held, unless they are bad).
    pub checksummed: u32,
    /// Of those, how many had no checksum to check (see [`Store::seal`]).
    pub unchecked: u32,
    /// How many failed: a checksum that does not hold, or a record that does not decode.
    pub bad_count: u32,
    /// The first [`Verification::LISTED`] failures, but for those a problem covers.
    pub bad: Vec<BadRecord>,
    /// What is wrong with the store as a whole
    /// ([`Inspection::problems`](super::Inspection::problems)); the records a truncated chunk
    /// cut off are counted in `bad_count` and `cut_off`, not listed.
    pub problems: Vec<String>,
    /// Records whose bytes lie past the end of a truncated chunk file.
    pub cut_off: u32,
}

impl Verification {
    /// True when no record failed and the store as a whole has no problem.
    pub fn ok(&self) -> bool {
        self.bad_count == 0 && self.problems.is_empty()
    }

    /// Failures neither listed in `bad` nor covered by a problem.
    pub fn unlisted(&self) -> u32 {
        self.bad_count - self.cut_off - self.bad.len() as u32
    }
}

impl Verification {
    /// Failures listed individually; the rest are only counted.
    pub const LISTED: usize = 1000;
}

struct VerifyShard {
    range: core::ops::Range<u32>,
    bad: Vec<BadRecord>,
    bad_count: u32,
    checksummed: u32,
    unchecked: u32,
    cut_off: u32,
}

/// Checks every record's checksum (where it has one) and decodes every record, in
/// parallel, and reports those that fail. A record whose checksum fails is not decoded.
pub fn verify<B: Backend, P: Parallel>(
    store: &Store<B>,
    par: &P,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Verification> {
    let n = store.len();
    let mut out = Verification::default();
    // The table's census only: not inspect's checksum-slot scan or schema.
    let chunks = census(store, &store.header())?.chunks;
    check_placement(&chunks, VERIFY_OVERLAP)?;
    let found = damage(store, &chunks);
    out.problems = found.problems;
    let short = &found.short;
    const BLOCK: u32 = 1 << 14;
    let mut start = 0u32;
    while start < n {
        let end = n.min(start.saturating_add(BLOCK));
        let workers = par.workers().max(1) as u32;
        let per = (end - start).div_ceil(workers).max(1);
        let mut shards: Vec<VerifyShard> = (start..end)
            .step_by(per as usize)
            .map(|s| VerifyShard {
                range: s..(s + per).min(end),
                bad: Vec::new(),
                bad_count: 0,
                checksummed: 0,
                unchecked: 0,
                cut_off: 0,
            })
            .collect();
        par.for_each(&mut shards, |shard| {
            let cut_off = |e: &zrecord_core::format::RecordLoc| {
                let cut = short.get(usize::from(e.chunk_id)).copied().flatten();
                cut.is_some_and(|len| u64::from(e.offset) + u64::from(e.phys_length) > len)
            };
            store.read_verified_range(shard.range.clone(), cut_off, |i, _, result| {
                let Some(result) = result else {
                    shard.bad_count += 1; // reported once, as the chunk's truncation
                    shard.cut_off += 1;
                    return Ok(());
                };
                match result {
                    Ok(true) => shard.checksummed += 1,
                    Ok(false) => shard.unchecked += 1,
                    Err(Error::Checksum { failure, .. }) => {
                        shard.checksummed += 1;
                        shard.bad_count += 1;
                        if shard.bad.len() < Verification::LISTED {
                            shard.bad.push(BadRecord { index: i, error: failure.to_string() });
                        }
                    }
                    Err(Error::Decode { source, .. }) => {
                        shard.bad_count += 1;
                        if shard.bad.len() < Verification::LISTED {
                            shard.bad.push(BadRecord { index: i, error: source.to_string() });
                        }
                    }
                    Err(Error::Format(e)) => {
                        shard.bad_count += 1;
                        if shard.bad.len() < Verification::LISTED {
                            shard.bad.push(BadRecord { index: i, error: e.to_string() });
                        }
                    }
                    Err(e) => return Err(e),
                }
                Ok(())
            })
        })?;
        for s in shards {
            out.bad_count += s.bad_count;
            out.checksummed += s.checksummed;
            out.unchecked += s.unchecked;
            out.cut_off += s.cut_off;
            let room = Verification::LISTED - out.bad.len().min(Verification::LISTED);
            out.bad.extend(s.bad.into_iter().take(room));
        }
        out.checked = end;
        progress(u64::from(end), u64::from(n));
        start = end;
    }
    Ok(out)
}
