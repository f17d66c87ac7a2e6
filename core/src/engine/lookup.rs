//! What the table says about records, without reading their bytes: one entry, checked
//! against the length and the format's limits ([`Store::locate`], which every read of a
//! record goes through), the lengths of many, and the **Stats** rule of `docs/format.md`,
//! "Ordering rules".
//!
//! Every way of reading a record (a gather, a single read, a read-ahead) finds it here, so a
//! record is refused for the same reasons however it is asked for. The caller loads the
//! length and the header once and passes them in, so one read sees one published length
//! throughout. Nothing here reads a record's stored bytes, and nothing here writes.

use alloc::format;
use alloc::vec::Vec;

use super::sums::Slot;
use super::{table, Stats, Store};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::format::{entry_offset, Header, RecordLoc, ENTRY_LEN};
use crate::io::{Backend, StorageFile};

impl<B: Backend> Store<B> {
    /// Table entry `index`, read without checking it against the length.
    pub fn entry(&self, index: u32) -> Result<RecordLoc> {
        let at = entry_offset(index);
        if let Some(view) = self.meta.view() {
            if let Some(bytes) = view.get(at as usize..at as usize + ENTRY_LEN) {
                return Ok(RecordLoc::decode(bytes));
            }
        }
        let mut b = [0u8; ENTRY_LEN];
        self.meta.read_at(at, &mut b)?;
        Ok(RecordLoc::decode(&b))
    }

    /// Looks up and checks the entry of each index, for a read.
    pub(super) fn locate(&self, index: u64, length: u32, header: &Header) -> Result<(RecordLoc, Codec)> {
        if index >= u64::from(length) {
            return Err(Error::IndexOutOfRange { index, length });
        }
        let loc = self.entry(index as u32)?;
        let codec = loc.check(header).map_err(|source| Error::Decode { index, source })?;
        Ok((loc, codec))
    }

    /// Logical length of each record in `idxs`, into `out`.
    pub fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        if out.len() < idxs.len() {
            return Err(Error::BufferTooSmall(format!("{} lengths into {} slots", idxs.len(), out.len())));
        }
        let length = self.len();
        self.hint_entries(idxs, length);
        let mut locs = Vec::new();
        let mut k = 0;
        while k < idxs.len() {
            let first = idxs[k];
            if first >= u64::from(length) {
                return Err(Error::IndexOutOfRange { index: first, length });
            }
            self.prefetch_entry(idxs, k + table::ENTRIES_AHEAD);
            // A run of consecutive indices reads its entries with one call.
            let n = table::run_len(&idxs[k..], length);
            self.entries_into(first as u32, n as u32, &mut locs)?;
            for (slot, loc) in out[k..k + n].iter_mut().zip(&locs) {
                *slot = loc.logic_length;
            }
            k += n;
        }
        Ok(())
    }
    /// Storage usage, and how many records are unchecked; reads every live entry (and its
    /// checksum slot).
    pub fn stats(&self) -> Result<Stats> {
        let h = self.header();
        let (mut live_bytes, mut unchecked) = (0u64, 0u32);
        let (mut locs, mut slots) = (Vec::new(), Vec::new());
        let mut first = 0;
        while first < h.length {
            let run = (h.length - first).min(table::RUN_ENTRIES);
            self.entries_into(first, run, &mut locs)?;
            self.slots_into(first, &locs, &mut slots)?;
            live_bytes += locs.iter().map(|e| u64::from(e.phys_length)).sum::<u64>();
            unchecked += slots.iter().filter(|s| !matches!(s, Slot::Same(_))).count() as u32;
            first += run;
        }
        let chunk_bytes = h.chunk_bytes();
        Ok(Stats {
            records: h.length,
            live_bytes,
            chunk_bytes,
            reclaimable: chunk_bytes.saturating_sub(live_bytes),
            unchecked,
        })
    }
}
