//! Samples longer than a record, written and read ([`zrecord_core::dataset::long`] has
//! the layout: a long sample's first piece is its record, the rest follows the shard's
//! samples in its field's store, and a long index ends the store).
//!
//! Writing: a store's records go in order, so the continuation pieces can only be staged
//! once the shard's last sample is. Until then [`Spill`] keeps them in a scratch file in
//! the shard folder (`.<field>.long`, removed with the shard if the write fails), so a
//! writer's memory stays bounded by a block whatever the documents' lengths; finishing the
//! shard stages them and the index. Reading: [`read_indexes`] loads each listed store's
//! index when the dataset opens, with every long sample's length from the table.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zrecord_core::dataset::long::{more_pieces, LongIndex, MAX_LONG};
use zrecord_core::error::Error;
use zrecord_core::{CodecPolicy, MAX_RECORDS};

use super::manifest_io::io_at;
use super::DatasetError;
use crate::Zrecord;

/// Bytes of continuation pieces staged at a time when a shard finishes.
const STAGE_BYTES: u64 = 64 << 20;

/// The continuation pieces of one store's long samples, kept until its shard finishes.
pub(super) struct Spill {
    /// Where the pieces wait (created at the first long sample).
    path: PathBuf,
    file: Option<BufWriter<File>>,
    /// Bytes of every piece but a sample's last.
    piece: u64,
    /// (record, continuation pieces, bytes past the first piece) of each long sample.
    entries: Vec<(u32, u32, u64)>,
    /// Continuation pieces so far.
    more: u64,
}

impl Spill {
    /// The spill of field `field`'s store in shard folder `shard`, whose samples' pieces are
    /// `piece` bytes.
    pub(super) fn new(shard: &Path, field: &str, piece: u64) -> Spill {
        Spill { path: shard.join(format!(".{field}.long")), file: None, piece, entries: Vec::new(), more: 0 }
    }

    /// Bytes of a long sample's first piece (what its own record holds).
    pub(super) fn piece(&self) -> u64 {
        self.piece
    }

    /// How many of the next samples, of record lengths `lens` in order, a store already
    /// holding `samples` samples takes: all must stay within the record limit (samples,
    /// continuation pieces and the index) and the index's entry limit.
    pub(super) fn room(&self, samples: u64, lens: impl Iterator<Item = u64>) -> u64 {
        let (mut samples, mut more, mut long) = (samples, self.more, self.entries.len());
        let mut fit = 0;
        for len in lens {
            let m = more_pieces(len, self.piece);
            let index = u64::from(more + m > 0);
            if (m > 0 && long >= MAX_LONG) || samples + 1 + more + m + index > u64::from(MAX_RECORDS) {
                break;
            }
            samples += 1;
            more += m;
            long += usize::from(m > 0);
            fit += 1;
        }
        fit
    }

    /// Keeps `rest`, the bytes of sample `record` past its first piece.
    pub(super) fn add(&mut self, record: u64, rest: &[u8]) -> Result<(), DatasetError> {
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&self.path)
                .map_err(io_at(&self.path, "create"))?;
            self.file = Some(BufWriter::with_capacity(1 << 20, f));
        }
        let file = self.file.as_mut().expect("made above");
        file.write_all(rest).map_err(io_at(&self.path, "write"))?;
        let more = more_pieces(rest.len() as u64 + self.piece, self.piece);
        self.entries.push((record as u32, more as u32, rest.len() as u64));
        self.more += more;
        Ok(())
    }

    /// Stages the kept pieces and the long index into `store` (after its samples) and
    /// removes the scratch file. Returns whether the store has long samples.
    pub(super) fn finish(mut self, store: &Zrecord, policy: CodecPolicy) -> Result<bool, DatasetError> {
        let Some(file) = self.file.take() else { return Ok(false) };
        let at = |e: Error| DatasetError::at(store.path(), None, e);
        let mut file = file.into_inner().map_err(|e| io_at(&self.path, "write")(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(io_at(&self.path, "read"))?;
        let piece = self.piece;
        // Pieces in order, each sample's rest cut at `piece`, staged about STAGE_BYTES at a time.
        let mut lens: Vec<u32> = Vec::new();
        for &(_, _, rest) in &self.entries {
            let mut left = rest;
            while left > 0 {
                let n = left.min(piece);
                lens.push(n as u32);
                left -= n;
            }
        }
        let mut buf = Vec::new();
        let mut k = 0;
        while k < lens.len() {
            let mut end = k;
            let mut bytes = 0u64;
            while end < lens.len() && (end == k || bytes + u64::from(lens[end]) <= STAGE_BYTES) {
                bytes += u64::from(lens[end]);
                end += 1;
            }
            buf.resize(bytes as usize, 0);
            file.read_exact(&mut buf).map_err(io_at(&self.path, "read"))?;
            let mut starts = Vec::with_capacity(end - k);
            let mut at_byte = 0u64;
            for &len in &lens[k..end] {
                starts.push(at_byte);
                at_byte += u64::from(len);
            }
            store.stage_var_with(&buf, &starts, &lens[k..end], policy).map_err(at)?;
            k = end;
        }
        let pairs: Vec<(u32, u32)> = self.entries.iter().map(|&(record, more, _)| (record, more)).collect();
        let index = LongIndex::encode(&pairs);
        store.stage_var_with(&index, &[0], &[index.len() as u32], policy).map_err(at)?;
        drop(file);
        let _ = std::fs::remove_file(&self.path);
        Ok(true)
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The long index of a field store whose shard lists it as long, holding `records`
/// samples ([`LongIndex::load`] over the store).
pub(super) fn read_index(store: &Zrecord, records: u64) -> Result<Arc<LongIndex>, Error> {
    let index = LongIndex::load(records, u64::from(store.len()), |r| store.read(r), |r, out| store.lengths(r, out))?;
    Ok(Arc::new(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_counts_continuations_and_the_index_against_the_record_limit() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill::new(dir.path(), "tokens", 10);
        let near = u64::from(MAX_RECORDS) - 3;
        // A short sample fits; a 25-byte one needs 2 continuations and the index: no room.
        assert_eq!(spill.room(near, [5, 25, 5].into_iter()), 1);
        assert_eq!(spill.room(0, [5, 25, 5].into_iter()), 3);
        assert_eq!(spill.room(u64::from(MAX_RECORDS), [1].into_iter()), 0);
    }
}
