//! `on_error = skip`: a sample that fails its checksum or its decode is replaced, so that one
//! damaged record does not stop a week-long run.
//!
//! The replacement of sample `i` of a source of `n` samples is the first of `i + 1, i + 2,
//! ...` (modulo `n`) that reads cleanly: a function of the index and the stores alone, so a
//! resumed run, another number of workers or another world size replaces it the same way
//! and the stream stays exact. Each damaged sample is reported once per loader (on stderr,
//! with its dataset, index, field, store record and chunk) and counted in
//! [`Loader::skipped`](super::Loader::skipped).

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::workers::Job;
use super::{gather, lock, BufferPool, Place, Source};
use crate::{DatasetError, Error};

/// What a loader does when a sample fails its checksum or decode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnError {
    /// The batch fails with the error, and so does every later `next()` (the default).
    #[default]
    Raise,
    /// The sample is replaced by the next one that reads cleanly (see the module docs).
    Skip,
}

/// A sample a loader replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The source (mixture member) it belongs to; 0 outside a mixture.
    pub source: u32,
    /// The sample's index in its source.
    pub index: u64,
    /// The sample read in its place.
    pub replacement: u64,
    /// Its store, field and store record.
    pub place: Place,
    /// The chunk file holding the record, when the error was a checksum's.
    pub chunk: Option<u16>,
    /// What was wrong.
    pub message: String,
}

/// Replaced samples, by `(source, index)`.
#[derive(Debug, Default)]
pub(super) struct Skips {
    seen: Mutex<BTreeMap<(u32, u64), Skipped>>,
}

/// Probes past a damaged sample before giving up on finding a clean one.
const PROBES: u64 = 1024;

/// Whether the error is about one record (which skipping can step over) rather than the
/// store or the machine.
fn is_record_error(e: &DatasetError) -> bool {
    e.record().is_some()
}

impl Skips {
    pub(super) fn all(&self) -> Vec<Skipped> {
        lock(&self.seen).values().cloned().collect()
    }

    /// The replacement of `(source, index)` if it is known to be damaged.
    fn known(&self, source: u32, index: u64) -> Option<u64> {
        lock(&self.seen).get(&(source, index)).map(|s| s.replacement)
    }

    fn note(&self, skipped: Skipped) {
        let mut seen = lock(&self.seen);
        let key = (skipped.source, skipped.index);
        if seen.contains_key(&key) {
            return; // another worker met it first and said so
        }
        eprintln!(
            "zrecord: skipping sample {} of {} (field {}, store record {}{}): {}; sample {} is read in its place",
            skipped.index,
            skipped.place.path.display(),
            skipped.place.field.as_deref().unwrap_or("?"),
            skipped.place.record.map_or_else(|| "?".into(), |r| r.to_string()),
            skipped.chunk.map_or_else(String::new, |c| format!(", chunk {c}")),
            skipped.message,
            skipped.replacement,
        );
        seen.insert(key, skipped);
    }
}

/// Whether sample `index` of `source` reads cleanly: `Ok(None)`, or the record error.
fn check(source: &Source, buffers: &BufferPool, index: u64) -> Result<Option<DatasetError>, DatasetError> {
    let one = Job { step: 0, indices: vec![index], sources: vec![0], pack: None };
    match gather::gather(std::slice::from_ref(source), buffers, one) {
        Ok(_) => Ok(None),
        Err(e) if is_record_error(&e) => Ok(Some(e)),
        Err(e) => Err(e),
    }
}

/// Gathers `job`, replacing every damaged sample first when a gather fails on one.
pub(super) fn gather_skipping(
    sources: &[Source],
    buffers: &BufferPool,
    skips: &Skips,
    mut job: Job,
) -> Result<super::LoaderBatch, DatasetError> {
    // Samples already known to be damaged are replaced before the first try.
    let mut replaced = Vec::new();
    for (slot, (index, &source)) in job.indices.iter_mut().zip(&job.sources).enumerate() {
        if let Some(r) = skips.known(source, *index) {
            *index = r;
            replaced.push(slot);
        }
    }
    let retry = Job { step: job.step, indices: job.indices.clone(), sources: job.sources.clone(), pack: None };
    let first = match gather::gather(sources, buffers, job) {
        Err(e) if is_record_error(&e) => e,
        done => return done.map(|b| super::LoaderBatch { replaced, ..b }),
    };
    let mut job = retry;
    for slot in 0..job.indices.len() {
        let (s, index) = (job.sources[slot], job.indices[slot]);
        let source = &sources[s as usize];
        let Some(error) = check(source, buffers, index)? else { continue };
        let n = source.data().len();
        let mut replacement = None;
        for k in 1..=PROBES.min(n.saturating_sub(1)) {
            let candidate = (index + k) % n;
            if skips.known(s, candidate).is_none() && check(source, buffers, candidate)?.is_none() {
                replacement = Some(candidate);
                break;
            }
        }
        let Some(replacement) = replacement else {
            return Err(DatasetError {
                source: Error::InvalidArgument(format!(
                    "on_error=skip found no readable sample among the {} after damaged sample {index}: {error}",
                    PROBES.min(n.saturating_sub(1))
                )),
                ..error
            });
        };
        let chunk = match &error.source {
            Error::Checksum { chunk, .. } => Some(*chunk),
            _ => None,
        };
        let place = Place { path: error.path.clone(), field: error.field.clone(), record: error.record() };
        skips.note(Skipped { source: s, index, replacement, place, chunk, message: error.source.to_string() });
        job.indices[slot] = replacement;
        replaced.push(slot);
    }
    replaced.sort_unstable();
    // Every damaged sample is replaced: a failure now is not one skipping can help with.
    match gather::gather(sources, buffers, job) {
        Err(e) if is_record_error(&e) => Err(first),
        done => done.map(|b| super::LoaderBatch { replaced, ..b }),
    }
}
