//! Changing a store's layout ([`FileLayout`]): `docs/format.md`, "Two layouts".
//!
//! The bytes at every offset are the same in both layouts; only the files' lengths and
//! meta.zr's `version` differ, and a dense store accepts every length a sparse one has. So
//! the version write (16 bytes in one sector, synced) is the commit point, and the files
//! are resized on the side of it where both layouts accept them:
//! - to dense: the version is written first, then the files are cut to what they hold;
//! - to sparse: the files are extended (sparse) first, then the version is written.
//!
//! Killed anywhere, the store is in the old layout or the new one, with every record where
//! it was, and running the change again finishes it. Records never move, so the generation
//! and every saved loader state stay valid.

use alloc::vec::Vec;

use super::{Store, Writer};
use crate::error::{Error, Result};
use crate::format::sums::{slot_offset, SUMS_LEN};
use crate::format::{entry_offset, FileLayout, Header, CHUNK_FILE_LEN, META_LEN};
use crate::io::{Backend, LockMode, StorageFile};

impl<B: Backend> Store<B> {
    /// Changes how the store's files are sized, under the exclusive lock (no other handle
    /// may be open, as for compact). Changing to the layout the store has cuts (dense) or
    /// extends (sparse) its files again, which finishes a change that was interrupted.
    pub fn set_layout(&mut self, w: &mut Writer, layout: FileLayout) -> Result<()> {
        w.check_writable()?;
        w.check_nothing_staged()?;
        self.backend.lock(LockMode::Exclusive)?;
        let result = self.reload(w).and_then(|()| self.set_layout_locked(w, layout));
        self.backend.unlock(LockMode::Exclusive);
        result
    }

    fn set_layout_locked(&mut self, w: &mut Writer, layout: FileLayout) -> Result<()> {
        let header = w.header;
        match layout {
            FileLayout::Dense => {
                // The table is read (and checked) before anything changes: a damaged entry
                // fails the call with the store as it was.
                let ends = self.chunk_ends(&header)?;
                self.write_version(w, &header, FileLayout::Dense)?;
                let sums_len = slot_offset(header.length);
                self.resize_files(w, entry_offset(header.length), &ends, sums_len)?;
            }
            FileLayout::Sparse => {
                let full = alloc::vec![CHUNK_FILE_LEN; usize::from(header.tail_chunk) + 1];
                self.resize_files(w, META_LEN, &full, SUMS_LEN)?;
                self.write_version(w, &header, FileLayout::Sparse)?;
            }
        }
        Ok(())
    }

    /// Writes meta.zr's header with `layout`'s version, syncs it, and adopts the layout.
    fn write_version(&mut self, w: &mut Writer, header: &Header, layout: FileLayout) -> Result<()> {
        let was = self.layout;
        self.layout = layout;
        if let Err(e) = self.write_header(w, *header) {
            self.layout = was;
            return Err(e);
        }
        Self::poison_on_err(w, self.meta.sync())
    }

    /// Where the live payloads of each chunk `0..=tail_chunk` end (the tail chunk at the
    /// frontier): what a dense store keeps of each file.
    fn chunk_ends(&self, header: &Header) -> Result<Vec<u64>> {
        let mut ends = alloc::vec![0u64; usize::from(header.tail_chunk) + 1];
        let mut entries = Vec::new();
        let mut first = 0;
        while first < header.length {
            let n = (header.length - first).min(super::RUN_ENTRIES);
            self.entries_into(first, n, &mut entries)?;
            for (k, loc) in entries.iter().enumerate() {
                loc.check(header).map_err(|source| Error::Decode { index: u64::from(first) + k as u64, source })?;
                let end = u64::from(loc.offset) + u64::from(loc.phys_length);
                let slot = &mut ends[usize::from(loc.chunk_id)];
                *slot = (*slot).max(end);
            }
            first += n;
        }
        ends[usize::from(header.tail_chunk)] = u64::from(header.tail_offset);
        Ok(ends)
    }

    /// Sets meta.zr, each chunk `0..chunks.len()` and checksums.zrc (if the store has one)
    /// to the given lengths, then syncs them and the directory.
    fn resize_files(&self, w: &mut Writer, meta: u64, chunks: &[u64], sums: u64) -> Result<()> {
        let resize = |f: &B::File, len: u64| -> Result<()> {
            if f.len()? != len {
                f.set_len(len)?;
            }
            Ok(())
        };
        resize(&self.meta, meta)?;
        for (id, &len) in chunks.iter().enumerate() {
            resize(self.chunk(id as u16)?, len)?;
        }
        if let Some(f) = self.sums.get() {
            resize(f, sums)?;
        }
        self.sync_files(w, 0..=(chunks.len() - 1) as u16)?;
        Self::poison_on_err(w, self.backend.sync_dir())
    }
}
