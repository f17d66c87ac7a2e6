//! Saved row indexes: the running token counts of one epoch's document order
//! ([`super::rows`]), kept in a file so that another rank, worker process or run need not
//! read every document's length again to build them (0.94 s and 50 MB for 10^8 documents).
//!
//! The host decides where files live and names them (it alone knows which dataset is which
//! on disk); the core says what a file holds and checks a file it is given, so a file of
//! another dataset, seed, epoch or packing, a torn one or a damaged one is never used:
//! [`decode`] returns `None` and the planner builds the index itself. `docs/format.md`
//! ("Row indexes") has the byte layout:
//!
//! ```text
//! magic "ZRRI" | version u32 | key (72 bytes) | count u64 | counts (count x u64) | xxh3 u64
//! ```
//!
//! all little-endian; the checksum covers every byte before it.

use alloc::vec::Vec;

use twox_hash::XxHash3_64;

use super::DatasetId;

/// First bytes of a row index file.
pub const MAGIC: [u8; 4] = *b"ZRRI";

/// The version this build writes and reads.
pub const VERSION: u32 = 1;

const KEY_BYTES: usize = 72;
const HEADER_BYTES: usize = 4 + 4 + KEY_BYTES + 8;

/// What a row index depends on: the documents of one source (its identity and length),
/// the stream's seed and the epoch (which give the order), whether `bos`/`eos` are added
/// (which give each document's virtual length) and the stride the counts are kept at.
/// `seq_len` does not enter: the counts are of tokens, not rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowIndexKey {
    /// The source's number in a mixture (0 for one dataset).
    pub source: u32,
    /// The source's identity.
    pub dataset: DatasetId,
    /// The stream's seed.
    pub seed: u64,
    /// The epoch of the source's documents.
    pub epoch: u64,
    /// Whether a `bos` id is added before every document.
    pub bos: bool,
    /// Whether an `eos` id is added after every document.
    pub eos: bool,
    /// Documents between two kept counts.
    pub stride: u64,
}

impl RowIndexKey {
    fn to_bytes(self) -> [u8; KEY_BYTES] {
        let mut out = [0u8; KEY_BYTES];
        let words = [
            u64::from(self.source),
            self.dataset.length,
            self.dataset.generation,
            self.seed,
            self.epoch,
            u64::from(self.bos),
            u64::from(self.eos),
            self.stride,
            0, // reserved
        ];
        for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The counts an index of this key holds: one per stride of the source's documents and
    /// one for the end.
    pub fn counts(&self) -> u64 {
        self.dataset.length.div_ceil(self.stride) + 1
    }
}

/// The file holding `counts` under `key`.
pub fn encode(key: &RowIndexKey, counts: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + counts.len() * 8 + 8);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&key.to_bytes());
    out.extend_from_slice(&(counts.len() as u64).to_le_bytes());
    for c in counts {
        out.extend_from_slice(&c.to_le_bytes());
    }
    let sum = XxHash3_64::oneshot(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The counts of a file written by [`encode`] under `key`; `None` for anything else: another
/// key or version, a wrong number of counts, counts that go down, a length that does not
/// match, or a checksum that fails.
pub fn decode(bytes: &[u8], key: &RowIndexKey) -> Option<Vec<u64>> {
    let n = usize::try_from(key.counts()).ok()?;
    let want = n.checked_mul(8)?.checked_add(HEADER_BYTES + 8)?;
    if bytes.len() != want || bytes[..4] != MAGIC {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (body, sum) = bytes.split_at(want - 8);
    if XxHash3_64::oneshot(body).to_le_bytes() != sum {
        return None;
    }
    if u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) != VERSION
        || bytes[8..8 + KEY_BYTES] != key.to_bytes()
        || word(8 + KEY_BYTES) != n as u64
    {
        return None;
    }
    let counts: Vec<u64> = (0..n).map(|k| word(HEADER_BYTES + 8 * k)).collect();
    (counts.first() == Some(&0) && counts.windows(2).all(|w| w[0] <= w[1])).then_some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn key() -> RowIndexKey {
        RowIndexKey {
            source: 1,
            dataset: DatasetId { length: 40, generation: 3 },
            seed: 9,
            epoch: 2,
            bos: false,
            eos: true,
            stride: 16,
        }
    }

    #[test]
    fn a_file_reads_back_under_its_own_key_only() {
        let counts = vec![0, 100, 230, 231];
        assert_eq!(key().counts(), 4);
        let file = encode(&key(), &counts);
        assert_eq!(file.len(), HEADER_BYTES + 4 * 8 + 8);
        assert_eq!(decode(&file, &key()), Some(counts.clone()));
        for other in [
            RowIndexKey { epoch: 3, ..key() },
            RowIndexKey { seed: 8, ..key() },
            RowIndexKey { bos: true, ..key() },
            RowIndexKey { source: 0, ..key() },
            RowIndexKey { dataset: DatasetId { length: 40, generation: 4 }, ..key() },
        ] {
            assert_eq!(decode(&file, &other), None, "{other:?}");
        }
        // Torn, flipped, or counts that go down (a bug's file, checksummed): refused.
        assert_eq!(decode(&file[..file.len() - 1], &key()), None);
        for at in 0..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            assert_eq!(decode(&bad, &key()), None, "byte {at}");
        }
        assert_eq!(decode(&encode(&key(), &[0, 100, 90, 231]), &key()), None);
    }
}
