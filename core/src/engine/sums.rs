//! The checksum side file `checksums.zrc` (bytes: [`crate::format::sums`]; rules:
//! `docs/format.md`, "checksums.zrc").
//!
//! Invariant: a slot is trusted only if it is sealed and holds a copy of exactly the table
//! entry now in its slot, so the side file can fall behind the table (a crash, a foreign
//! writer) but never contradict it: an entry it does not cover is *unchecked*, and a record
//! is reported damaged only when a trusted checksum disagrees with its stored bytes.
//! Writers keep it with the table's discipline: append writes and syncs the new slots
//! before the header that publishes them; delete moves slots with their entries under the
//! delete journal (and its replay); compact rewrites each moved entry's slot with the entry,
//! synced in the same step as the entry. [`Store::seal`] checksums unchecked records again.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::{Store, Verify, Writer};
use crate::codec::decode_into;
use crate::error::{ChecksumFailure, Error, IoError, IoErrorKind, Result};
use crate::format::journal::DeleteJournal;
use crate::format::sums::{
    checksum, decode_covered, decode_header, decode_slot, encode_covered, encode_header, encode_slot, slot_offset,
    slot_sum, SumsHeader, COVER_LEN, COVER_OFFSET, SLOT_LEN, SUMS_FILE, SUMS_ID_LEN, SUMS_LEN, SUMS_MARK,
    SUMS_MARK_FILE,
};
use crate::format::{entry_offset, FileLayout, Header, RecordLoc, ENTRY_LEN, HEADER_LEN};
use crate::io::{Backend, LockMode, StorageFile};

/// What [`Store::seal`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sealing {
    /// Live records that already had a checksum.
    pub already: u32,
    /// Unchecked records that decoded and were checksummed now.
    pub sealed: u32,
    /// Unchecked records that failed to decode, left unchecked.
    pub bad: u32,
}

/// The side file as found at open: usable (`Some`), or absent or unusable (`None`, with
/// `true` if a newer zrecord wrote it, so it must be left alone).
pub(super) fn load_sums<B: Backend>(backend: &B, layout: FileLayout) -> Result<(Option<B::File>, bool)> {
    let Some(f) = backend.open_aux(SUMS_FILE, false)? else { return Ok((None, false)) };
    match classify(&f)? {
        SumsHeader::Usable if sums_len_ok(f.len()?, layout) => Ok((Some(f), false)),
        SumsHeader::Newer => Ok((None, true)),
        // Damaged or cut short: nothing in it is read; a writer initialises it again.
        _ => Ok((None, false)),
    }
}

/// Whether the side file may be `len` bytes long: its full size in a sparse store; in a
/// dense one anything from its header to its full size (a slot past the end is unwritten,
/// read as not sealed).
fn sums_len_ok(len: u64, layout: FileLayout) -> bool {
    match layout {
        FileLayout::Sparse => len == SUMS_LEN,
        FileLayout::Dense => (slot_offset(0)..=SUMS_LEN).contains(&len),
    }
}

fn classify<F: StorageFile>(f: &F) -> Result<SumsHeader> {
    let mut head = [0u8; SUMS_ID_LEN];
    if f.len()? < SUMS_ID_LEN as u64 {
        return Ok(SumsHeader::Damaged);
    }
    f.read_at(0, &mut head)?;
    Ok(decode_header(&head))
}

/// Creates the side file of a new store: sized sparse, header written and synced. The
/// caller syncs the directory.
/// Creates the side file of a new store, its covered header the empty store's and its
/// creation nonce `nonce`.
pub(super) fn create_sums<B: Backend>(backend: &B, layout: FileLayout, nonce: u64) -> Result<()> {
    if let Some(f) = backend.open_aux(SUMS_FILE, true)? {
        init(&f, Some((&Header::default(), nonce)), layout)?;
        mark_sums(backend)?;
    }
    Ok(())
}

/// Records that the store keeps checksums ([`SUMS_MARK_FILE`]), if not yet recorded.
fn mark_sums<B: Backend>(backend: &B) -> Result<()> {
    if backend.read_side_file(SUMS_MARK_FILE)?.as_deref() != Some(&SUMS_MARK[..]) {
        backend.write_side_file(SUMS_MARK_FILE, &SUMS_MARK)?;
    }
    Ok(())
}

/// Whether the store once kept checksums ([`SUMS_MARK_FILE`] is there), so that a missing
/// or unusable side file is a loss.
pub(super) fn had_sums<B: Backend>(backend: &B) -> Result<bool> {
    Ok(backend.read_side_file(SUMS_MARK_FILE)?.is_some_and(|b| !b.is_empty()))
}

/// Sizes the side file for `layout` (its full size when sparse, its header and whatever
/// slots survive when dense) and writes its header; the covered header and nonce only if
/// given (a store whose table zrecord does not know entry by entry starts with none).
fn init<F: StorageFile>(f: &F, covered: Option<(&Header, u64)>, layout: FileLayout) -> Result<()> {
    let len = f.len()?;
    let want = match layout {
        FileLayout::Sparse => SUMS_LEN,
        FileLayout::Dense => len.clamp(slot_offset(0), SUMS_LEN),
    };
    if len != want {
        f.set_len(want)?;
    }
    f.write_at(0, &encode_header())?;
    f.write_at(COVER_OFFSET, &covered.map_or([0u8; COVER_LEN], |(h, nonce)| encode_covered(h, nonce)))?;
    f.sync()?;
    Ok(())
}

/// The covered header the side file holds, and the store's nonce, if its block is intact.
pub(super) fn read_covered<F: StorageFile>(sums: &F) -> Result<Option<(Header, u64)>> {
    let mut b = [0u8; COVER_LEN];
    sums.read_at(COVER_OFFSET, &mut b)?;
    Ok(decode_covered(&b))
}

/// Records `header`, just written to meta.zr, as the covered header, with the store's
/// `nonce` as it was.
pub(super) fn write_covered<F: StorageFile>(sums: &F, header: &Header, nonce: u64) -> Result<()> {
    sums.write_at(COVER_OFFSET, &encode_covered(header, nonce))?;
    Ok(())
}

/// What a record's slot says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// No trusted checksum: no side file, or the slot is not sealed.
    Empty,
    /// Sealed for exactly this entry: the record's checksum.
    Same(u64),
    /// Sealed for another entry, with that entry's checksum: the entry was moved or replaced
    /// (by a foreign writer, or by damage to the table).
    Other(u64),
}

impl Slot {
    /// What a decoded slot (`None`: not sealed) says about the record whose entry is `loc`.
    pub(super) fn of(decoded: Option<(RecordLoc, u64)>, loc: &RecordLoc) -> Slot {
        match decoded {
            Some((e, sum)) if e == *loc => Slot::Same(sum),
            Some((_, sum)) => Slot::Other(sum),
            None => Slot::Empty,
        }
    }
}

/// Moves the checksums of a delete's moved entries to their new slots: each moved entry
/// came from the removed tail `new_length..length`, whose table entries and slots the
/// delete leaves as they were, so a checksum moves only if its tail slot was trusted.
/// Idempotent, like the rest of the journal's replay; synced before it returns.
pub(super) fn move_sums<F: StorageFile>(journal: &DeleteJournal, meta: &F, sums: &F) -> Result<()> {
    if journal.moves.is_empty() {
        return Ok(());
    }
    const BLOCK: u32 = 1 << 14;
    let mut by_entry: BTreeMap<[u8; ENTRY_LEN], u64> = BTreeMap::new();
    let (mut entries, mut slots) = (Vec::new(), Vec::new());
    let mut k = journal.new_length;
    while k < journal.header.length {
        let n = BLOCK.min(journal.header.length - k);
        entries.resize(n as usize * ENTRY_LEN, 0);
        slots.resize(n as usize * SLOT_LEN, 0);
        meta.read_at(entry_offset(k), &mut entries)?;
        sums.read_at(slot_offset(k), &mut slots)?;
        for j in 0..n as usize {
            let e = RecordLoc::decode(&entries[j * ENTRY_LEN..]);
            if let Some(sum) = slot_sum(k + j as u32, &slots[j * SLOT_LEN..], &e) {
                by_entry.insert(e.encode(), sum);
            }
        }
        k += n;
    }
    for (slot, e) in &journal.moves {
        if let Some(&sum) = by_entry.get(&e.encode()) {
            sums.write_at(slot_offset(*slot), &encode_slot(*slot, e, sum))?;
        }
    }
    sums.sync()?;
    Ok(())
}

impl<B: Backend> Store<B> {
    /// True if the store has a usable checksum side file.
    pub fn has_checksums(&self) -> bool {
        self.sums.get().is_some()
    }

    /// True when the store kept checksums ([`SUMS_MARK_FILE`]) but its `checksums.zrc` was
    /// missing or unusable when this handle opened it: every record then reads unchecked,
    /// which `verify` reports as a finding and hosts warn about.
    pub fn checksums_lost(&self) -> bool {
        self.sums_lost && !self.has_checksums()
    }

    /// The trusted checksum of record `index` whose table entry is `loc`, or `None` if it is
    /// unchecked.
    pub(super) fn expected_sum(&self, index: u32, loc: &RecordLoc) -> Result<Option<u64>> {
        Ok(match self.slot(index, loc)? {
            Slot::Same(sum) => Some(sum),
            _ => None,
        })
    }

    /// What slot `index` says about the record whose table entry is `loc`. A side file cut
    /// short covers nothing past its end; any other failure to read it is an I/O error, as
    /// for any file of the store.
    pub(super) fn slot(&self, index: u32, loc: &RecordLoc) -> Result<Slot> {
        let Some(f) = self.sums.get() else { return Ok(Slot::Empty) };
        let at = slot_offset(index) as usize;
        let mut b = [0u8; SLOT_LEN];
        match f.view().and_then(|v| v.get(at..at + SLOT_LEN)) {
            Some(bytes) => b.copy_from_slice(bytes),
            None => match f.read_at(at as u64, &mut b) {
                Ok(()) => {}
                Err(e) if e.kind == IoErrorKind::UnexpectedEof => return Ok(Slot::Empty),
                Err(e) => return Err(e.into()),
            },
        }
        Ok(Slot::of(decode_slot(index, &b), loc))
    }

    /// True if no other writer has changed the table since zrecord last wrote it: meta.zr's
    /// header on disk still equals the covered header, and this handle has seen no foreign
    /// change. Then an entry that differs from its slot's copy can only be damage.
    pub(super) fn table_unchanged(&self) -> Result<bool> {
        if self.foreign.load(Ordering::Acquire) {
            return Ok(false);
        }
        let Some(f) = self.sums.get() else { return Ok(false) };
        let mut raw = [0u8; HEADER_LEN];
        self.meta.read_at(0, &mut raw)?;
        let disk = Header::decode(&raw)?;
        Ok(read_covered(f)?.map(|(h, _)| h) == Some(disk))
    }

    /// Looks again at whether a foreign writer changed the store (at open, and after a
    /// reload found a new header): if the covered header is not the header on disk, this
    /// handle stops recording covered headers until [`Store::seal`].
    pub(super) fn refresh_foreign(&self, disk: &Header) -> Result<()> {
        if let Some(f) = self.sums.get() {
            if read_covered(f)?.map(|(h, _)| h) != Some(*disk) {
                self.foreign.store(true, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Records `header` (just written to meta.zr) as the covered header, unless a foreign
    /// writer changed the store since zrecord last vouched for its table.
    pub(super) fn cover(&self, header: &Header) -> Result<()> {
        match self.sums.get() {
            Some(f) if !self.foreign.load(Ordering::Acquire) => write_covered(f, header, self.nonce),
            _ => Ok(()),
        }
    }

    /// Checks `stored`, the stored bytes of record `index`, against what `mode` asks for.
    /// Returns whether a checksum was checked.
    /// `known` is the record's slot when the caller read it already (with its neighbours').
    pub(super) fn check_stored(
        &self,
        mode: Verify,
        index: u32,
        loc: &RecordLoc,
        stored: &[u8],
        known: Option<Slot>,
    ) -> Result<bool> {
        if mode == Verify::Never {
            return Ok(false);
        }
        let fail =
            |failure| Error::Checksum { index: u64::from(index), chunk: loc.chunk_id, offset: loc.offset, failure };
        let slot = match known {
            Some(slot) => slot,
            None => self.slot(index, loc)?,
        };
        match slot {
            Slot::Same(expected) => {
                let found = checksum(stored);
                if found != expected {
                    return Err(fail(ChecksumFailure::Mismatch { expected, found }));
                }
                return Ok(true);
            }
            Slot::Other(expected) => {
                let found = checksum(stored);
                // The same bytes moved (a foreign compact): still checked.
                if found == expected {
                    return Ok(true);
                }
                // Another entry with other bytes: a foreign writer's, unless nobody else
                // has written the table since zrecord did, in which case it is damage.
                if self.table_unchanged()? {
                    return Err(fail(ChecksumFailure::EntryChanged { expected, found }));
                }
            }
            Slot::Empty => {}
        }
        if mode == Verify::Always {
            return Err(fail(ChecksumFailure::Unchecked));
        }
        Ok(false)
    }

    /// The side file, created (or its damaged header initialised again) if the store has
    /// none yet; `None` if the host keeps no side files or a newer zrecord wrote it. Called
    /// under the appender or exclusive lock.
    pub(super) fn ensure_sums(&self) -> Result<Option<&B::File>> {
        if !self.keep_sums {
            return Ok(None);
        }
        if let Some(f) = self.sums.get() {
            return Ok(Some(f));
        }
        if self.sums_newer || !self.keep_sums {
            return Ok(None);
        }
        let Some(f) = self.backend.open_aux(SUMS_FILE, true)? else { return Ok(None) };
        let fresh = f.len()? == 0;
        match classify(&f)? {
            SumsHeader::Newer => return Ok(None),
            SumsHeader::Usable if sums_len_ok(f.len()?, self.layout) => {}
            _ => {
                // Slots that survive keep their own seals; the table is vouched for only
                // once every record is sealed again.
                self.foreign.store(true, Ordering::Release);
                init(&f, None, self.layout)?
            }
        }
        drop(f);
        mark_sums(&self.backend)?;
        if fresh {
            self.backend.sync_dir()?;
        }
        // Opened again so that the host maps it at its full size.
        let f = self.backend.open_aux(SUMS_FILE, false)?.ok_or_else(|| {
            Error::Io(IoError::new(
                IoErrorKind::NotFound,
                "open checksums.zrc",
                "the file vanished after it was created",
            ))
        })?;
        let _ = self.sums.set(Box::new(f));
        Ok(self.sums.get())
    }

    /// The side file, if this handle keeps checksums on write and the store has one.
    pub(super) fn kept_sums(&self) -> Option<&B::File> {
        self.sums.get().filter(|_| self.keep_sums)
    }

    /// Writes slots `first..first + entries.len()` for `entries` and their checksums.
    pub(super) fn write_sums(&self, sums: &B::File, first: u32, entries: &[RecordLoc], checks: &[u64]) -> Result<()> {
        let mut bytes = Vec::with_capacity(entries.len() * SLOT_LEN);
        for (k, (e, &sum)) in entries.iter().zip(checks).enumerate() {
            bytes.extend_from_slice(&encode_slot(first + k as u32, e, sum));
        }
        sums.write_at(slot_offset(first), &bytes)?;
        Ok(())
    }

    /// Number of live records without a trusted checksum.
    pub fn unchecked(&self) -> Result<u32> {
        let h = self.header();
        if self.sums.get().is_none() {
            return Ok(h.length);
        }
        let (mut n, mut locs, mut slots) = (0, Vec::new(), Vec::new());
        let mut first = 0;
        while first < h.length {
            let run = (h.length - first).min(super::table::RUN_ENTRIES);
            self.entries_into(first, run, &mut locs)?;
            self.slots_into(first, &locs, &mut slots)?;
            n += slots.iter().filter(|s| !matches!(s, Slot::Same(_))).count() as u32;
            first += run;
        }
        Ok(n)
    }

    /// Checksums every live record that is unchecked and decodes, creating the side file if
    /// the store has none; records that fail to decode stay unchecked and are counted as
    /// bad. Durable when it returns. Takes the appender lock: nothing else may write the
    /// table meanwhile. `progress(done, total)` is called as records are visited.
    pub fn seal(&self, w: &mut Writer, progress: &mut dyn FnMut(u64, u64)) -> Result<Sealing> {
        w.check_writable()?;
        w.check_nothing_staged()?;
        self.backend.lock(LockMode::Appender)?;
        self.reload(w)?;
        let Some(sums) = self.ensure_sums()? else {
            return Err(Error::InvalidArgument(if self.sums_newer {
                "checksums.zrc was written by a newer zrecord; this build leaves it alone".into()
            } else if !self.keep_sums {
                "the store was opened with checksums off".into()
            } else {
                "this host keeps no checksum side file".into()
            }));
        };
        let h = w.header;
        let unchanged = self.table_unchanged()?;
        let mut out = Sealing::default();
        let (mut stored, mut decoded, mut locs, mut slots) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..h.length {
            if i % 4096 == 0 {
                progress(u64::from(i), u64::from(h.length));
            }
            let k = (i % super::table::RUN_ENTRIES) as usize;
            if k == 0 {
                let run = (h.length - i).min(super::table::RUN_ENTRIES);
                self.entries_into(i, run, &mut locs)?;
                self.slots_into(i, &locs, &mut slots)?;
            }
            let (loc, slot) = (locs[k], slots[k]);
            if let Slot::Same(_) = slot {
                out.already += 1;
                continue;
            }
            // A record that does not decode is damaged (or was never written): it is not
            // given a checksum that would bless its bytes.
            let Ok(codec) = loc.check(&h) else {
                out.bad += 1;
                continue;
            };
            stored.resize(loc.phys_length as usize, 0);
            match self.chunk(loc.chunk_id).and_then(|c| Ok(c.read_at(u64::from(loc.offset), &mut stored)?)) {
                Ok(()) => {}
                Err(Error::Io(e)) if e.kind != IoErrorKind::UnexpectedEof => return Err(Error::Io(e)),
                Err(_) => {
                    out.bad += 1;
                    continue;
                }
            }
            decoded.resize(loc.logic_length as usize, 0);
            let sum = checksum(&stored);
            // An entry that changed under an untouched table is damage: never sealed.
            let damaged = matches!(slot, Slot::Other(expected) if expected != sum) && unchanged;
            if damaged || decode_into(codec, &stored, &mut decoded).is_err() {
                out.bad += 1;
                continue;
            }
            sums.write_at(slot_offset(i), &encode_slot(i, &loc, sum))?;
            out.sealed += 1;
        }
        // Every live record now has its checksum: zrecord vouches for the table again.
        if out.bad == 0 {
            self.foreign.store(false, Ordering::Release);
            write_covered(sums, &h, self.nonce)?;
        }
        Self::poison_on_err(w, sums.sync())?;
        progress(u64::from(h.length), u64::from(h.length));
        Ok(out)
    }
}
