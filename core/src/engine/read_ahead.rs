//! Telling the host what will be read before it is read: [`Store::will_read`] (a loader's
//! read-ahead), [`Store::is_cold`] (whether a read would wait for a disk), and the
//! announcements a cold gather makes through `announce` and `by_store`.
//!
//! Hints are advice. Nothing here reads or decodes a record, and nothing here refuses one:
//! an index out of range or a bad entry is left for the read itself to report, so a batch
//! fails, or not, for the same reasons with or without a read-ahead. What a hint costs is
//! bounded instead: a warm batch pays a few residency checks, each file hears a batch's
//! records in one announcement, and each store its indices once, in ascending order.

use alloc::vec::Vec;

use super::{table, Store};
use crate::error::Result;
use crate::io::{Backend, StorageFile};

/// Announces each `(file, (offset, length, index))` of `records` to its file, each file's
/// records at once ([`StorageFile::will_need_records`]: the remote cache takes a file's
/// announcements under one lock, which the readers of that file wait on, instead of one
/// lock per record); returns the files, each once.
pub(super) fn announce<F: StorageFile>(mut records: Vec<(&F, (u64, u64, u32))>) -> Vec<&F> {
    records.sort_unstable_by_key(|&(f, _)| core::ptr::from_ref(f) as usize);
    let (mut files, mut batch) = (Vec::new(), Vec::new());
    for group in records.chunk_by(|a, b| core::ptr::eq(a.0, b.0)) {
        batch.clear();
        batch.extend(group.iter().map(|&(_, record)| record));
        group[0].0.will_need_records(&batch);
        files.push(group[0].0);
    }
    files
}

/// Calls `each` once per store of `records` (`(source, store, index)`, any order), with
/// that store's indices in ascending order.
pub(super) fn by_store<'s, B: Backend + 's>(
    records: impl Iterator<Item = (usize, &'s Store<B>, u64)>,
    mut each: impl FnMut(&'s Store<B>, &[u64]),
) {
    let mut records: Vec<(usize, u64, &'s Store<B>)> = records.map(|(s, store, i)| (s, i, store)).collect();
    records.sort_unstable_by_key(|&(s, i, _)| (s, i));
    let mut idxs = Vec::with_capacity(records.len());
    for group in records.chunk_by(|a, b| a.0 == b.0) {
        idxs.clear();
        idxs.extend(group.iter().map(|r| r.1));
        each(group[0].2, &idxs);
    }
}
impl<B: Backend> Store<B> {
    /// Whether reading record `index` would wait for a local disk: its table entry, its
    /// checksum slot (when reads check it) or its first byte is not in memory. False for a
    /// store in an object store (it plans its own reads) and on hosts that cannot tell.
    pub fn is_cold(&self, index: u64) -> bool {
        let (length, header) = (self.len(), self.header());
        if self.entries_cold(index) || (index < u64::from(length) && self.slots_cold(index as u32)) {
            return true;
        }
        self.locate(index, length, &header)
            .is_ok_and(|(loc, _)| self.chunk(loc.chunk_id).is_ok_and(|f| table::cold(f, u64::from(loc.offset))))
    }

    /// A read-ahead: announces records `idxs` to their chunk files and lets the host start
    /// fetching them ([`crate::io::StorageFile::start_reads`]: an object store sends the
    /// requests now), reading and decoding nothing. An index out of range or a bad entry is
    /// left for the read itself to report.
    ///
    /// A local store is announced only what is not in memory, as a cold gather asks for
    /// its own (`hint_cold` in `read.rs`): the table entries first (the lookups below then
    /// wait for reads already in flight), the checksum slots, and the records when the
    /// first is not resident. A warm batch costs a few residency checks.
    pub fn will_read(&self, idxs: &[u64]) -> Result<()> {
        let (length, header) = (self.len(), self.header());
        let Some(&first) = idxs.first() else { return Ok(()) };
        self.hint_entries(idxs, length);
        if first < u64::from(length) && self.slots_absent(first as u32) {
            self.will_need_slots(idxs.iter().filter(|&&i| i < u64::from(length)).map(|&i| i as u32));
        }
        if let Ok((loc, _)) = self.locate(first, length, &header) {
            let file = self.chunk(loc.chunk_id)?;
            if !file.wants_hints() && file.resident(u64::from(loc.offset)) {
                return Ok(());
            }
        }
        let mut records = Vec::with_capacity(idxs.len());
        for &index in idxs {
            let Ok((loc, _)) = self.locate(index, length, &header) else { continue };
            if loc.phys_length == 0 {
                continue;
            }
            let record = (u64::from(loc.offset), u64::from(loc.phys_length), index as u32);
            records.push((self.chunk(loc.chunk_id)?, record));
        }
        for file in announce(records) {
            file.start_reads();
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::error::IoError;
    use std::sync::Mutex;

    /// A file that keeps what it was told ahead of reads.
    #[derive(Default)]
    struct Told(Mutex<Vec<Vec<(u64, u64, u32)>>>);

    impl StorageFile for Told {
        fn read_at(&self, _: u64, _: &mut [u8]) -> core::result::Result<(), IoError> {
            unreachable!("nothing is read")
        }
        fn write_at(&self, _: u64, _: &[u8]) -> core::result::Result<(), IoError> {
            unreachable!("nothing is written")
        }
        fn len(&self) -> core::result::Result<u64, IoError> {
            Ok(0)
        }
        fn set_len(&self, _: u64) -> core::result::Result<(), IoError> {
            Ok(())
        }
        fn sync(&self) -> core::result::Result<(), IoError> {
            Ok(())
        }
        fn will_need_records(&self, records: &[(u64, u64, u32)]) {
            self.0.lock().unwrap().push(records.to_vec());
        }
    }

    #[test]
    fn each_file_hears_its_records_in_one_announcement() {
        let (a, b) = (Told::default(), Told::default());
        let records = vec![(&a, (0, 8, 0)), (&b, (16, 8, 7)), (&a, (64, 8, 5)), (&b, (0, 8, 6)), (&a, (8, 8, 1))];
        let files = announce(records);
        assert_eq!(files.len(), 2);
        assert!(files.iter().any(|f| core::ptr::eq(*f, &a)) && files.iter().any(|f| core::ptr::eq(*f, &b)));
        let mut told_a = a.0.into_inner().unwrap();
        assert_eq!(told_a.len(), 1, "one announcement per file");
        told_a[0].sort_unstable();
        assert_eq!(told_a[0], [(0, 8, 0), (8, 8, 1), (64, 8, 5)]);
        let mut told_b = b.0.into_inner().unwrap();
        told_b[0].sort_unstable();
        assert_eq!(told_b, [[(0, 8, 6), (16, 8, 7)]]);
    }
}
