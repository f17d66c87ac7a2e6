//! Span bookkeeping: which byte ranges of a remote file are fetched or on their way
//! ([`Spans`], by start offset), and which of the store's records each holds ([`Records`]).
//!
//! A [`super::file::RemoteFile`] adds ranges here as it requests them and reads from
//! them; the dataset's [`super::cache::Cache`] looks through every file's ranges
//! ([`FileSpans`]) to drop the ones the plan needs furthest ahead. This module uses
//! neither: it holds the data both share and the two lookups on it ([`covering`],
//! [`bridgeable`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use super::pending::Pending;
use super::plan::NextUse;
use super::MAX_GAP;

/// A range's bytes, on their way or come.
pub(super) type Fetch = Arc<Pending>;

/// The store's record indices in a range, inline up to four (a small cache's range holds
/// one record, its labels' a few; an allocation per request showed in its profile).
pub(super) type Indices = SmallVec<[u32; 4]>;

/// One fetched (or pending) range and the records it holds.
pub(super) struct Span {
    pub(super) end: u64,
    pub(super) fetch: Fetch,
    /// The store's record indices inside, when the reads announced them.
    pub(super) records: Records,
    /// The soonest next use of those records, as the plan last said.
    pub(super) next: NextUse,
    pub(super) seq: u64,
    /// A look saw a read take the range (which it never untakes): later looks do not
    /// reach into its slot again, a cache miss per kept range per look.
    pub(super) taken: bool,
    /// Dropped once a read took it
    /// ([`Cache::mark_fleeting`](super::cache::Cache::mark_fleeting)).
    pub(super) fleeting: bool,
}

/// A range to request: `start..end`, the store's record indices inside, and whether it
/// goes once a read took it ([`Cache::mark_fleeting`](super::cache::Cache::mark_fleeting)).
pub(super) type Range = (u64, u64, Indices, bool);

/// The store's record indices a range holds, as reads announced them: in the order learnt
/// (a [`NextUse`] counts them in that order), and, past a few, sorted beside it. Every
/// announcement of a held record asks whether its range knows it: a range of labels holds
/// thousands, and a search through them all for each announced label cost more than the
/// rest of the announcement.
pub(super) struct Records {
    learnt: Indices,
    /// `learnt` sorted, once it is longer than [`Records::FEW`] (empty until then).
    sorted: Vec<u32>,
}

impl Records {
    /// Up to this many, a search through `learnt` is quicker than keeping `sorted`.
    const FEW: usize = 16;

    /// The records of a request, in the order of their offsets.
    pub(super) fn new(indices: Indices) -> Records {
        let mut records = Records { learnt: Indices::new(), sorted: Vec::new() };
        for i in indices {
            records.learn(i);
        }
        records
    }

    /// The indices, in the order learnt.
    pub(super) fn learnt(&self) -> &[u32] {
        &self.learnt
    }

    /// Adds `index` if it is not known yet, and says whether it was not.
    pub(super) fn learn(&mut self, index: u32) -> bool {
        if self.learnt.len() <= Self::FEW {
            if self.learnt.contains(&index) {
                return false;
            }
            self.learnt.push(index);
            if self.learnt.len() > Self::FEW {
                self.sorted = self.learnt.to_vec();
                self.sorted.sort_unstable();
            }
            return true;
        }
        match self.sorted.binary_search(&index) {
            Ok(_) => false,
            Err(at) => {
                self.sorted.insert(at, index);
                self.learnt.push(index);
                true
            }
        }
    }
}

/// Ranges of a file fetched or on their way, by start offset.
#[derive(Default)]
pub(super) struct Spans {
    pub(super) map: BTreeMap<u64, Span>,
    /// Ranges announced by `will_need_record` and not yet requested, with their record.
    pub(super) wanted: Vec<(u64, u64, Option<u32>)>,
    /// The longest range ever kept: how far before an offset a range holding it can start.
    pub(super) longest: u64,
    /// Whether the file was considered for a whole fetch
    /// ([`Cache::take_whole`](super::cache::Cache::take_whole)) already: once, whatever the
    /// answer (a file dropped later comes back record by record).
    pub(super) whole_asked: bool,
}

/// A file's ranges, registered with its dataset's [`Cache`](super::cache::Cache).
#[derive(Default)]
pub struct FileSpans {
    pub(super) spans: Mutex<Spans>,
    /// The dataset index of the store's record 0 (its shard's first sample).
    pub(super) base: u64,
}

/// Whether a roomy cache's request may take in `from..to` besides what was asked: no more
/// than [`MAX_GAP`], and no kept range starts inside it (held bytes are not fetched again).
pub(super) fn bridgeable(spans: &Spans, from: u64, to: u64) -> bool {
    to.saturating_sub(from) <= MAX_GAP && spans.map.range(from..to).next().is_none()
}

/// The fetched or pending range holding `start..end`, if one does. Ranges may overlap (a
/// read asks for all it misses, whatever lies inside), so a range that starts earlier may
/// hold what the nearest one does not: every range that could reach `start` is looked at.
pub(super) fn covering(spans: &Spans, start: u64, end: u64) -> Option<(u64, u64, Fetch, bool)> {
    let reach = start.saturating_sub(spans.longest);
    spans
        .map
        .range(reach..=start)
        .rev()
        // A forked child does not wait for its parent's requests: it sends its own.
        .find(|(_, span)| span.end >= end && !span.fetch.orphaned())
        .map(|(&s, span)| (s, span.end, span.fetch.clone(), span.fleeting))
}
