//! Append: the **Append** rule of `docs/format.md`, "Ordering rules".
//!
//! Compress every record (in parallel) → place them serially from the frontier, rolling
//! over to a new chunk when a payload would pass the chunk capacity (a new chunk's directory
//! entry is synced first) → write the payloads → write their table entries and the checksums
//! of their stored bytes (`checksums.zrc`) → sync the chunks written, the checksums and
//! meta.zr → write the header → publish. A crash anywhere leaves the old header,
//! or the new one with everything it covers durable.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::Range;

use super::{shard_count, Batch, Store, Writer};
use crate::codec::{Codec, CodecPolicy, Encoder};
use crate::error::{Error, FormatError, Result};
use crate::format::sums::checksum;
use crate::format::{entry_offset, FileLayout, RecordLoc, CHUNK_FILE_LEN, ENTRY_LEN, MAX_CHUNKS, MAX_RECORDS};
use crate::io::{Backend, LockMode, Parallel, StorageFile};

/// A worker's share of an append: its records, their stored bytes and where they go.
struct WriteShard {
    records: Range<usize>,
    encoder: Option<Encoder>,
    /// Compressed bytes of this shard's compressed records, back to back.
    packed: Vec<u8>,
    /// Per record: stored length, codec, and where its stored bytes start in `packed`
    /// (`None`: stored raw, straight from the batch source).
    stored: Vec<(u32, Codec, Option<usize>)>,
    /// Per record: where it lands.
    placed: Vec<(u16, u32)>,
    /// Per record: the checksum of its stored bytes (empty if the store keeps none).
    sums: Vec<u64>,
}

impl<B: Backend> Store<B> {
    /// Appends `batch`, compressing as `policy` says (a [`Codec`] converts to its default
    /// policy; records the codec does not shrink by the policy's `min_savings` are stored
    /// raw), and returns the index of its first record. The batch becomes visible to readers
    /// all at once, after its bytes and entries are written. Records staged before
    /// ([`Store::stage`]) are committed with it.
    pub fn append<P: Parallel>(
        &self,
        w: &mut Writer,
        batch: &Batch<'_>,
        policy: impl Into<CodecPolicy>,
        par: &P,
    ) -> Result<u32> {
        let first = self.stage(w, batch, policy, par)?;
        self.commit(w, par)?;
        Ok(first)
    }

    /// The first half of [`Store::append`]: compresses, places and writes `batch` (payloads,
    /// table entries, checksums) after what is already staged, and returns the index of its
    /// first record; but neither syncs nor writes the header, so the records are neither
    /// durable nor visible until [`Store::commit`] (or an append, or [`Store::sync`]). The
    /// disk starts writing the payloads back meanwhile ([`StorageFile::start_writeback`]).
    ///
    /// A bulk write stages its blocks and commits once: one barrier instead of one per
    /// block, the disk busy while later blocks compress, and all of the write or none of it
    /// after a crash or an error. Staged records that are never committed (the handle is
    /// dropped, [`Store::discard`]) leave the store as it was: their bytes lie past the
    /// published frontier and the next append writes over them.
    pub fn stage<P: Parallel>(
        &self,
        w: &mut Writer,
        batch: &Batch<'_>,
        policy: impl Into<CodecPolicy>,
        par: &P,
    ) -> Result<u32> {
        let policy = policy.into();
        let codec = policy.codec;
        w.check_writable()?;
        batch.validate()?;
        let count = batch.len();
        if count == 0 {
            return Ok(w.frontier().length);
        }
        if w.staged.is_none() {
            // Taken on every call (a no-op while held): a handle inherited through fork()
            // must win the lock in its own process before it writes. Under it, the header on
            // disk is the truth: another handle may have appended since this one last
            // looked. While records are staged, the lock has been held since the first.
            self.backend.lock(LockMode::Appender)?;
            self.reload(w)?;
        }
        let base = w.frontier();
        let first = base.length;
        if u64::from(first) + count as u64 > u64::from(MAX_RECORDS) {
            return Err(Error::StoreFull("the 2^24 record limit would be exceeded"));
        }
        let sums_file = self.ensure_sums()?;
        let keep_sums = sums_file.is_some();

        // 1. Compress, each worker a contiguous run of records with its own compressor.
        let src = batch.src();
        let total: usize = (0..count).map(|i| batch.range(i).len()).sum();
        let shards = if codec == Codec::Raw { 1 } else { shard_count(par.workers(), count, total) };
        let per = count.div_ceil(shards);
        let mut work: Vec<WriteShard> = (0..count)
            .step_by(per)
            .map(|s| {
                let pooled = w.encoders.iter().rposition(|e| e.codec() == codec).map(|i| w.encoders.swap_remove(i));
                Ok(WriteShard {
                    records: s..(s + per).min(count),
                    encoder: match pooled {
                        Some(e) => Some(e),
                        None => Encoder::new(codec)?,
                    },
                    packed: Vec::new(),
                    stored: Vec::new(),
                    placed: Vec::new(),
                    sums: Vec::new(),
                })
            })
            .collect::<Result<_>>()?;
        let compress = |shard: &mut WriteShard| -> Result<()> {
            let bytes: usize = shard.records.clone().map(|i| batch.range(i).len()).sum();
            shard.stored.reserve(shard.records.len());
            if keep_sums {
                shard.sums.reserve(shard.records.len());
            }
            match shard.encoder.as_mut() {
                None => {
                    for i in shard.records.clone() {
                        shard.stored.push((batch.range(i).len() as u32, Codec::Raw, None));
                        if keep_sums {
                            shard.sums.push(checksum(&src[batch.range(i)]));
                        }
                    }
                }
                Some(encoder) => {
                    // Zeroed by the allocator (fresh pages come zeroed from the kernel, and
                    // only the pages compressed bytes land on are ever touched), not by a
                    // pass over the whole window.
                    shard.packed = alloc::vec![0u8; bytes];
                    let mut used = 0;
                    for i in shard.records.clone() {
                        let rec = &src[batch.range(i)];
                        // `used` never passes the bytes of the records before this one, so
                        // the window fits in `packed`.
                        let limit = policy.keep_limit(rec.len());
                        match encoder.compress(rec, &mut shard.packed[used..used + limit]) {
                            Some(n) => {
                                shard.stored.push((n as u32, codec, Some(used)));
                                if keep_sums {
                                    shard.sums.push(checksum(&shard.packed[used..used + n]));
                                }
                                used += n;
                            }
                            None => {
                                shard.stored.push((rec.len() as u32, Codec::Raw, None));
                                if keep_sums {
                                    shard.sums.push(checksum(rec));
                                }
                            }
                        }
                    }
                    shard.packed.truncate(used);
                }
            }
            Ok(())
        };
        if work.len() == 1 {
            compress(&mut work[0])?;
        } else {
            par.for_each(&mut work, compress)?;
        }

        // 2. Place serially: dense from the frontier, rolling over to a fresh chunk when a
        //    record would cross the capacity. Nothing is changed yet.
        let mut h = base;
        for shard in &mut work {
            shard.placed.reserve(shard.stored.len());
            for &(phys, _, _) in &shard.stored {
                if u64::from(phys) > self.capacity {
                    return Err(Error::RecordTooLarge { length: u64::from(phys) });
                }
                if u64::from(h.tail_offset) + u64::from(phys) > self.capacity {
                    if u32::from(h.tail_chunk) + 1 >= MAX_CHUNKS {
                        return Err(Error::StoreFull("all 4096 chunk files are full"));
                    }
                    h.tail_chunk += 1;
                    h.tail_offset = 0;
                }
                shard.placed.push((h.tail_chunk, h.tail_offset));
                h.tail_offset += phys;
            }
        }
        h.length = first + count as u32;
        for id in base.tail_chunk + 1..=h.tail_chunk {
            self.create_chunk(w, id)?;
        }

        // 3. Write the bytes, each worker its own records, coalescing adjacent ones.
        let write = |shard: &mut WriteShard| -> Result<()> { self.write_shard(shard, batch) };
        if work.len() == 1 {
            write(&mut work[0])?;
        } else {
            par.for_each(&mut work, write)?;
        }

        // The disk may start on the payloads now; `commit`'s barrier waits for what is left.
        for id in base.tail_chunk..=h.tail_chunk {
            let start = if id == base.tail_chunk { u64::from(base.tail_offset) } else { 0 };
            let end = if id == h.tail_chunk { u64::from(h.tail_offset) } else { self.capacity };
            if end > start {
                self.chunk(id)?.start_writeback(start, end - start);
            }
        }

        // 4. Entries and checksums; the header waits for `commit`.
        let mut entries = Vec::with_capacity(count);
        for shard in &work {
            for (k, (&(phys, codec, _), &(chunk_id, offset))) in shard.stored.iter().zip(&shard.placed).enumerate() {
                let logic = batch.range(shard.records.start + k).len() as u32;
                entries.push(RecordLoc {
                    offset,
                    phys_length: phys,
                    logic_length: logic,
                    chunk_id,
                    codec: codec.tag(),
                });
            }
        }
        self.write_entries(first, &entries)?;
        if let Some(f) = sums_file {
            let sums: Vec<u64> = work.iter().flat_map(|s| s.sums.iter().copied()).collect();
            self.write_sums(f, first, &entries, &sums)?;
        }
        w.staged = Some(h);
        w.encoders.extend(work.into_iter().filter_map(|s| s.encoder));
        Ok(first)
    }

    /// Makes the staged records ([`Store::stage`]) durable, then visible: syncs the chunk
    /// files they went to, the checksums and meta.zr, writes the header and publishes it.
    /// Nothing staged: nothing to do.
    pub fn commit<P: Parallel>(&self, w: &mut Writer, par: &P) -> Result<()> {
        let Some(h) = w.staged else { return Ok(()) };
        w.check_writable()?;
        // Barrier: the payloads, entries and checksums must be durable before the header
        // that makes them visible, or a power cut could keep the header and lose what it
        // points at (or keep an older checksum in a slot the header now publishes).
        self.sync_files_with(w, w.header.tail_chunk..=h.tail_chunk, par)?;
        self.write_header(w, h)?;
        self.publish(&h);
        w.staged = None;
        Ok(())
    }

    /// Forgets the staged records ([`Store::stage`]): the store stays as last committed.
    pub fn discard(&self, w: &mut Writer) {
        w.staged = None;
    }

    pub(super) fn write_entries(&self, first: u32, entries: &[RecordLoc]) -> Result<()> {
        let mut bytes = Vec::with_capacity(entries.len() * ENTRY_LEN);
        for e in entries {
            bytes.extend_from_slice(&e.encode());
        }
        self.meta.write_at(entry_offset(first), &bytes)?;
        Ok(())
    }

    pub(super) fn create_chunk(&self, w: &mut Writer, id: u16) -> Result<()> {
        let file = self.backend.open_chunk(id, true)?.ok_or(FormatError::MissingChunk { chunk: id })?;
        // A sparse store's chunk is created at its full size; a dense one's grows as its
        // payloads are written.
        if self.layout == FileLayout::Sparse && file.len()? < CHUNK_FILE_LEN {
            file.set_len(CHUNK_FILE_LEN)?;
        }
        // The new file's directory entry must be durable before anything points into it.
        Self::poison_on_err(w, self.backend.sync_dir())?;
        let slot = &self.chunks[usize::from(id)];
        // A slot already filled by an earlier, failed append holds the same file.
        let _ = slot.set(Box::new(file));
        Ok(())
    }

    fn write_shard(&self, shard: &WriteShard, batch: &Batch<'_>) -> Result<()> {
        // A pending run: destination chunk and offset, whether its bytes come from `packed`
        // (else from the batch source), and their range there.
        let mut run: Option<(u16, u32, bool, Range<usize>)> = None;
        let flush = |run: Option<(u16, u32, bool, Range<usize>)>| -> Result<()> {
            if let Some((chunk, offset, packed, range)) = run {
                let mem = if packed { &shard.packed[..] } else { batch.src() };
                self.chunk(chunk)?.write_at(u64::from(offset), &mem[range])?;
            }
            Ok(())
        };
        for (k, (&(phys, _, packed_at), &(chunk, offset))) in shard.stored.iter().zip(&shard.placed).enumerate() {
            let (packed, start) = match packed_at {
                Some(at) => (true, at),
                None => (false, batch.range(shard.records.start + k).start),
            };
            let bytes = start..start + phys as usize;
            run = match run {
                Some((c, o, p, r))
                    if c == chunk && p == packed && r.end == bytes.start && o as usize + r.len() == offset as usize =>
                {
                    Some((c, o, p, r.start..bytes.end))
                }
                other => {
                    flush(other)?;
                    Some((chunk, offset, packed, bytes))
                }
            };
        }
        flush(run)
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use crate::codec::{Codec, CodecPolicy, Encoder};
    use crate::engine::{Batch, Options, Store};
    use crate::format::MAX_RECORD_LEN;
    use crate::io::mem::MemBackend;
    use crate::io::Serial;

    /// The placement rule behind `docs/format.md`, "Limits", at 1/1024 scale: a chunk that
    /// places at most 2^k - 1 bytes holds 2^(k-20) - 1 records stored in exactly 1 MiB, and
    /// 2^(k-20) stored in 1 MiB - 1 (at the real 2^32 - 1: 4095 and 4096).
    #[test]
    fn a_chunk_of_2k_minus_1_bytes_holds_one_record_of_exactly_1_mib_fewer() {
        const COUNT: usize = 12;
        for (len, per_chunk) in [(MAX_RECORD_LEN as usize, 3), (MAX_RECORD_LEN as usize - 1, 4)] {
            let opts = Options { chunk_capacity: (4 << 20) - 1, ..Options::default() };
            let (s, mut w) = Store::open(MemBackend::new(), opts).unwrap();
            let src = vec![7u8; len * COUNT];
            s.append(&mut w, &Batch::Fixed { src: &src, count: COUNT, item_len: len }, Codec::Raw, &Serial).unwrap();
            for i in 0..COUNT {
                let e = s.entry(i as u32).unwrap();
                assert_eq!(usize::from(e.chunk_id), i / per_chunk, "record {i} of {len} bytes");
                assert_eq!(e.offset as usize, (i % per_chunk) * len, "record {i} of {len} bytes");
            }
            assert_eq!(usize::from(s.header().tail_chunk), (COUNT - 1) / per_chunk);
        }
    }

    /// A record is stored compressed exactly when its codec saves the policy's minimum, raw
    /// (tag 0) otherwise, and reads back the same either way; the same rule for every codec.
    #[test]
    fn min_savings_decides_the_codec_per_record() {
        const LEN: usize = 4096;
        // Record k has k/16 of its bytes zeroed, the rest pseudo-random: from about 0% to
        // 60% saved, so each threshold splits the batch.
        let mut x = 0x2545_f491_u32;
        let mut src = vec![0u8; LEN * 16];
        for (i, b) in src.iter_mut().enumerate() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = if (i % LEN) * 16 < (i / LEN) * LEN { 0 } else { x as u8 };
        }
        let codecs: &[Codec] = if cfg!(feature = "zstd") { &[Codec::Flate, Codec::Zstd] } else { &[Codec::Flate] };
        for &codec in codecs {
            let packed: Vec<Option<usize>> = src
                .chunks(LEN)
                .map(|r| Encoder::new(codec).unwrap().unwrap().compress(r, &mut vec![0u8; LEN]))
                .collect();
            for min_savings in [0.0, 0.125, 0.3, 1.0] {
                let policy = CodecPolicy::new(codec, min_savings).unwrap();
                let (s, mut w) = Store::open(MemBackend::new(), Options::default()).unwrap();
                s.append(&mut w, &Batch::Fixed { src: &src, count: 16, item_len: LEN }, policy, &Serial).unwrap();
                let mut kept = 0;
                for (i, n) in packed.iter().enumerate() {
                    let e = s.entry(i as u32).unwrap();
                    let keep = n.is_some_and(|n| n <= policy.keep_limit(LEN));
                    assert_eq!(e.codec, if keep { codec.tag() } else { Codec::Raw.tag() }, "{codec} {min_savings} {i}");
                    assert_eq!(e.phys_length as usize, if keep { n.unwrap() } else { LEN });
                    assert_eq!(s.read(i as u64).unwrap(), &src[i * LEN..][..LEN]);
                    kept += usize::from(keep);
                }
                match min_savings {
                    0.0 => assert!(kept >= 15, "{codec}: {kept}"),
                    1.0 => assert_eq!(kept, 0),
                    _ => assert!((1..15).contains(&kept), "{codec} {min_savings}: {kept}"),
                }
            }
            // A bare codec is the default policy.
            let (s, mut w) = Store::open(MemBackend::new(), Options::default()).unwrap();
            s.append(&mut w, &Batch::Fixed { src: &src, count: 16, item_len: LEN }, codec, &Serial).unwrap();
            let default = CodecPolicy::from(codec);
            for (i, n) in packed.iter().enumerate() {
                let keep = n.is_some_and(|n| n <= default.keep_limit(LEN));
                assert_eq!(s.entry(i as u32).unwrap().codec == codec.tag(), keep, "{codec} {i}");
            }
        }
    }

    /// Token-like records of `len` bytes that DEFLATE shrinks, some kept raw by the policy.
    fn mixed_records(count: usize, len: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_u32;
        (0..count * len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if (i / len).is_multiple_of(3) {
                    x as u8
                } else {
                    (x % 7) as u8
                }
            })
            .collect()
    }

    /// The first 256 KiB of every file of a store (all these tests write), by name, for
    /// byte comparisons; the files themselves are sparse and gigabytes long.
    /// Every file's first bytes, the checksum file's nonce and its seal (48..64) blanked:
    /// each store draws its own.
    fn files(b: &MemBackend) -> Vec<(alloc::string::String, Vec<u8>)> {
        use crate::io::StorageFile;
        b.names()
            .into_iter()
            .map(|n| {
                let f = b.file(&n).unwrap();
                let mut head = vec![0u8; f.len().unwrap().min(256 << 10) as usize];
                f.read_at(0, &mut head).unwrap();
                if n == crate::format::sums::SUMS_FILE {
                    head[48..64].fill(0);
                }
                (n, head)
            })
            .collect()
    }

    /// Staging is an append in pieces: blocks staged and committed once leave the same
    /// bytes in every file as one append of all their records (across a chunk rollover),
    /// and nothing of them is visible, to this handle or on disk, before the commit.
    #[test]
    fn staged_blocks_then_commit_equal_one_append_and_stay_hidden_until_then() {
        const LEN: usize = 3000;
        let src = mixed_records(40, LEN);
        let opts = Options { chunk_capacity: 40_000, ..Options::default() };
        let once = MemBackend::new();
        {
            let (s, mut w) = Store::open(once.clone(), opts).unwrap();
            s.append(&mut w, &Batch::Fixed { src: &src[..LEN], count: 1, item_len: LEN }, Codec::Flate, &Serial)
                .unwrap();
            s.append(&mut w, &Batch::Fixed { src: &src[LEN..], count: 39, item_len: LEN }, Codec::Flate, &Serial)
                .unwrap();
        }
        let staged = MemBackend::new();
        let (s, mut w) = Store::open(staged.clone(), opts).unwrap();
        s.append(&mut w, &Batch::Fixed { src: &src[..LEN], count: 1, item_len: LEN }, Codec::Flate, &Serial).unwrap();
        let mut first = Vec::new();
        for block in [1..10, 10..11, 11..40] {
            let batch =
                Batch::Fixed { src: &src[block.start * LEN..block.end * LEN], count: block.len(), item_len: LEN };
            first.push(s.stage(&mut w, &batch, Codec::Flate, &Serial).unwrap());
            assert_eq!(s.len(), 1, "staged records are not visible");
            let (reopened, _) = Store::open(staged.clone(), Options { read_only: true, ..opts }).unwrap();
            assert_eq!(reopened.len(), 1, "nor on disk");
        }
        assert_eq!(first, [1, 10, 11], "each block's first index");
        assert!(w.has_staged());
        s.commit(&mut w, &Serial).unwrap();
        assert!(!w.has_staged());
        assert_eq!(s.len(), 40);
        assert!(s.header().tail_chunk > 0, "the blocks crossed into another chunk");
        for i in 0..40 {
            assert_eq!(s.read(i as u64).unwrap(), &src[i * LEN..][..LEN], "record {i}");
        }
        drop((s, w));
        assert!(files(&staged) == files(&once), "staged and committed = one append, byte for byte");
    }

    /// Discarded (or never committed) records leave the store as it was, and the next
    /// append writes over their bytes; delete, compact and seal refuse to run past staged
    /// records, and sync commits them.
    #[test]
    fn discarded_stages_leave_the_store_as_it_was() {
        const LEN: usize = 3000;
        let src = mixed_records(20, LEN);
        let fixed = |r: core::ops::Range<usize>| Batch::Fixed {
            src: &src[r.start * LEN..r.end * LEN],
            count: r.len(),
            item_len: LEN,
        };
        let backend = MemBackend::new();
        let (mut s, mut w) = Store::open(backend.clone(), Options::default()).unwrap();
        s.append(&mut w, &fixed(0..5), Codec::Flate, &Serial).unwrap();
        let before = files(&backend);
        s.stage(&mut w, &fixed(5..15), Codec::Flate, &Serial).unwrap();
        for refused in [
            s.delete(&mut w, &[0]).err(),
            s.compact(&mut w, &mut |_, _| {}).err(),
            s.seal(&mut w, &mut |_, _| {}).err(),
        ] {
            match refused {
                Some(crate::Error::InvalidArgument(msg)) => assert!(msg.contains("staged"), "{msg}"),
                other => panic!("{other:?}"),
            }
        }
        s.discard(&mut w);
        assert_eq!(s.len(), 5);
        let (reopened, _) = Store::open(backend.clone(), Options { read_only: true, ..Options::default() }).unwrap();
        assert_eq!(reopened.len(), 5);
        let header = |f: &[(alloc::string::String, Vec<u8>)]| {
            f.iter().find(|(n, _)| n == "meta.zr").map(|(_, b)| b[..crate::format::HEADER_LEN].to_vec())
        };
        assert!(header(&files(&backend)) == header(&before), "the header on disk did not move");
        // A later append goes where the discarded records were.
        assert_eq!(s.append(&mut w, &fixed(15..20), Codec::Flate, &Serial).unwrap(), 5);
        for (k, i) in (0..5).chain(15..20).enumerate() {
            assert_eq!(s.read(k as u64).unwrap(), &src[i * LEN..][..LEN]);
        }
        // Never committed: a handle dropped with staged records.
        s.stage(&mut w, &fixed(0..20), Codec::Flate, &Serial).unwrap();
        drop((s, w));
        let (s, mut w) = Store::open(backend.clone(), Options::default()).unwrap();
        assert_eq!(s.len(), 10);
        // Sync commits.
        s.stage(&mut w, &fixed(0..3), Codec::Flate, &Serial).unwrap();
        s.sync(&mut w).unwrap();
        assert_eq!(s.len(), 13);
        assert_eq!(s.read(12).unwrap(), &src[2 * LEN..][..LEN]);
    }

    /// Appends alternating codecs through one writer: each reuses its own pooled
    /// compressors and every record reads back.
    #[cfg(feature = "zstd")]
    #[test]
    fn codecs_mix_in_one_store() {
        let (s, mut w) = Store::open(MemBackend::new(), Options::default()).unwrap();
        let rec = |k: usize| -> Vec<u8> { (0..3000).map(|i| ((i / 5 + k) % 17) as u8).collect() };
        for k in 0..6 {
            let codec = [Codec::Flate, Codec::Zstd, Codec::Raw][k % 3];
            s.append(&mut w, &Batch::Fixed { src: &rec(k), count: 1, item_len: 3000 }, codec, &Serial).unwrap();
            assert_eq!(s.entry(k as u32).unwrap().codec, codec.tag());
        }
        for k in 0..6 {
            assert_eq!(s.read(k as u64).unwrap(), rec(k));
        }
    }

    /// Without the `zstd` feature (the wasm guest) a zstd append is refused before anything
    /// is written, with a message that says where zstd can be written.
    #[cfg(not(feature = "zstd"))]
    #[test]
    fn zstd_append_needs_the_native_host() {
        let (s, mut w) = Store::open(MemBackend::new(), Options::default()).unwrap();
        let src = vec![0u8; 1000];
        let err = s.append(&mut w, &Batch::Fixed { src: &src, count: 1, item_len: 1000 }, Codec::Zstd, &Serial);
        match err {
            Err(crate::Error::InvalidArgument(msg)) => assert!(msg.contains("needs the native host"), "{msg}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.len(), 0);
    }
}
