//! Delete: the **Delete** rule of `docs/format.md`, "Ordering rules".
//!
//! Indices are sorted descending and deduplicated; each hole takes the entry of the current
//! last record and the length shrinks by one. The plan is made before anything is written.
//! A delete of tail records only writes (and syncs) the header. Otherwise it commits through
//! the redo journal `delete.zrj` (bytes: [`crate::format::journal`]): meta.zr synced, the
//! journal written durably beside it (the commit point), the slots and header written and
//! synced, the checksums of the moved entries moved to their new slots and synced (see the
//! `sums` module), the journal removed. The next writable open finishes a delete whose journal it
//! finds ([`replay_journal`], called from `open`).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::{sums, Store, Writer};
use crate::error::{Error, Result};
use crate::format::journal::{DeleteJournal, DELETE_JOURNAL};
use crate::format::{entry_offset, FileLayout, Header, RecordLoc};
use crate::io::{Backend, LockMode, StorageFile};

impl<B: Backend> Store<B> {
    /// Removes the records at `idxs` (any order, duplicates allowed) by swapping the last
    /// live entry into each hole, in descending index order. An index at or past the length
    /// fails the whole call before anything changes. Record bytes stay until compact.
    pub fn delete(&mut self, w: &mut Writer, idxs: &[u64]) -> Result<()> {
        w.check_writable()?;
        w.check_nothing_staged()?;
        let length = w.header.length;
        let mut sorted: Vec<u64> = idxs.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        if let Some(&max) = sorted.first() {
            if max >= u64::from(length) {
                return Err(Error::IndexOutOfRange { index: max, length });
            }
        } else {
            return Ok(());
        }
        self.backend.lock(LockMode::Exclusive)?;
        let result = self.reload(w).and_then(|()| self.delete_locked(w, &sorted));
        self.backend.unlock(LockMode::Exclusive);
        result
    }

    fn delete_locked(&mut self, w: &mut Writer, sorted: &[u64]) -> Result<()> {
        let old = w.header;
        // Plan the swaps first: a slot filled by an earlier swap can be the source of a
        // later one, so the plan reads through its own overlay.
        let mut overlay: BTreeMap<u32, RecordLoc> = BTreeMap::new();
        let mut len = old.length;
        for &i in sorted {
            let (i, last) = (i as u32, len - 1);
            if i != last {
                let moved = match overlay.get(&last) {
                    Some(&e) => e,
                    None => self.entry(last)?,
                };
                overlay.insert(i, moved);
            }
            len = last;
        }
        overlay.retain(|&slot, _| slot < len);
        if overlay.is_empty() {
            // Only tail records go: the 16-byte header write is the whole change. It is
            // synced before returning: the next append writes entries into the slots it
            // freed, which a header still durable on disk would count as live.
            let h = Header { length: len, ..old };
            self.write_header(w, h)?;
            self.publish(&h);
            return Self::poison_on_err(w, self.meta.sync());
        }
        // Records change index: raise the generation first. (A tail-only delete above needs
        // not: it only lowers the length, and the frontier, which only compact lowers,
        // tells it from any earlier state of the same length.)
        self.bump_generation()?;
        let journal = DeleteJournal { header: old, new_length: len, moves: overlay.into_iter().collect() };
        // The journal is the commit point: once it is durable the delete will complete,
        // here or on the next writable open; before it, nothing was touched. It names the
        // current header, which must itself be durable first (an append's header is not
        // synced), or a power cut could keep the journal and lose the header it matches.
        Self::poison_on_err(w, self.meta.sync())?;
        self.backend.write_side_file(DELETE_JOURNAL, &journal.encode())?;
        let applied = apply_journal(&journal, &self.meta, self.layout).and_then(|h| {
            if let Some(f) = self.kept_sums() {
                sums::move_sums(&journal, &self.meta, f)?;
                self.cover(&h)?;
            }
            Ok(h)
        });
        match applied {
            Ok(h) => {
                w.header = h;
                self.publish(&h);
            }
            Err(e) => {
                // The table is half rewritten under this handle; only a reopen (which
                // replays the journal) may touch it again.
                w.poisoned = true;
                return Err(e);
            }
        }
        if let Err(e) = self.backend.remove_side_file(DELETE_JOURNAL) {
            // Harmless to leave (a later open replays it idempotently or finds it stale),
            // but a store that cannot remove files should not be written to.
            w.poisoned = true;
            return Err(e.into());
        }
        Ok(())
    }
}

/// The journal left in `backend` by an interrupted delete, if one applies to a store whose
/// header is `current`. Torn or stale journals are removed when `writable`.
pub(super) fn load_journal<B: Backend>(backend: &B, current: &Header, writable: bool) -> Result<Option<DeleteJournal>> {
    let Some(bytes) = backend.read_side_file(DELETE_JOURNAL)? else { return Ok(None) };
    if bytes.is_empty() {
        return Ok(None);
    }
    let journal = DeleteJournal::decode(&bytes).filter(|j| j.applies_to(current));
    if journal.is_none() && writable {
        backend.remove_side_file(DELETE_JOURNAL)?;
    }
    Ok(journal)
}

/// Writes the journal's moves and new header, and makes them durable. Idempotent.
fn apply_journal<F: StorageFile>(journal: &DeleteJournal, meta: &F, layout: FileLayout) -> Result<Header> {
    for (slot, e) in &journal.moves {
        meta.write_at(entry_offset(*slot), &e.encode())?;
    }
    let h = journal.new_header();
    meta.write_at(0, &h.encode_as(layout))?;
    meta.sync()?;
    Ok(h)
}

/// Finishes an interrupted delete found at open (its checksums move with its entries),
/// then drops the journal.
pub(super) fn replay_journal<B: Backend>(
    journal: &DeleteJournal,
    backend: &B,
    meta: &B::File,
    layout: FileLayout,
    sums: Option<&B::File>,
) -> Result<Header> {
    let h = apply_journal(journal, meta, layout)?;
    if let Some(f) = sums {
        sums::move_sums(journal, meta, f)?;
        // The delete was zrecord's: if zrecord covered the table before it, it does after.
        if let Some((covered, nonce)) = sums::read_covered(f)? {
            if covered == journal.header || covered == h {
                sums::write_covered(f, &h, nonce)?;
                f.sync()?;
            }
        }
    }
    backend.remove_side_file(DELETE_JOURNAL)?;
    Ok(h)
}
