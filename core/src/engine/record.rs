//! One record read and checked: the decode every read ends in (`read_record`, which each
//! job of a gather calls too), and the reads of one record at a time that tools use
//! ([`Store::read_into`], [`Store::read_verified`], [`Store::read_verified_range`]).
//!
//! The order of the decode and the checksum, and what a failed read leaves behind, are one
//! rule, so they are written once for the gathers and the single reads alike:
//! - a record's stored bytes are checked against its checksum, as the [`Verify`] mode asks,
//!   before its decoded bytes are promised to anyone, and a checksum failure is reported
//!   as such even when the damage also breaks the decode;
//! - on an error the destination holds no promised bytes;
//! - a short read inside a chunk means the entry points past the file: a damaged store (a
//!   decode error), not an I/O error.

use alloc::format;
use alloc::vec::Vec;

use super::sums::Slot;
use super::{table, Store, Verify};
use crate::codec::{decode_into, Codec};
use crate::error::{DecodeError, Error, IoError, IoErrorKind, Result};
use crate::format::RecordLoc;
use crate::io::{Backend, StorageFile};

/// What a read already holds for a record because it read it with its neighbours: its
/// checksum slot, its stored bytes.
#[derive(Clone, Copy, Default)]
pub(super) struct Known<'a> {
    pub(super) slot: Option<Slot>,
    pub(super) stored: Option<&'a [u8]>,
}

impl<B: Backend> Store<B> {
    /// Decodes one checked entry's record into `dst` (exactly its logical length) and
    /// checks its stored bytes against its checksum as `verify` asks. Returns whether a
    /// checksum was checked. On an error `dst` holds no promised bytes.
    // The record, where its bytes go, the caller's scratch and mode, and what it read ahead:
    // one read, whose inputs do not belong together anywhere else.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_record(
        &self,
        index: u32,
        loc: &RecordLoc,
        codec: Codec,
        dst: &mut [u8],
        scratch: &mut Vec<u8>,
        verify: Verify,
        known: Known<'_>,
    ) -> Result<bool> {
        let file = self.chunk(loc.chunk_id)?;
        let start = loc.offset as usize;
        let phys = loc.phys_length as usize;
        let decode_err = |source| Error::Decode { index: u64::from(index), source };
        if let Some(bytes) = known.stored.or_else(|| file.view().and_then(|v| v.get(start..start + phys))) {
            // Decode first, then hash: decoding brings the stored bytes into this core's
            // cache, so the hash reads them from there instead of waiting on memory a second
            // time (a raw copy or an inflate of a cold record). The check comes before the
            // decode's own result, so damage that also breaks the compressed stream is reported
            // as the checksum error it is. Every decoder (libdeflate, miniz_oxide, libzstd,
            // ruzstd) bounds its writes to `dst` whatever the input, and on an error `dst` holds no promised bytes.
            let decoded = decode_into(codec, bytes, dst);
            let checked = self.check_stored(verify, index, loc, bytes, known.slot)?;
            decoded.map_err(decode_err)?;
            return Ok(checked);
        }
        let at = u64::from(loc.offset);
        match codec {
            Codec::Raw => {
                // Raw stored bytes are the record: read them in place, then check them.
                file.read_at(at, dst).map_err(|e| self.read_err(e, loc, index))?;
                self.check_stored(verify, index, loc, dst, known.slot)
            }
            Codec::Flate | Codec::Zstd => {
                scratch.resize(phys, 0);
                file.read_at(at, scratch).map_err(|e| self.read_err(e, loc, index))?;
                let checked = self.check_stored(verify, index, loc, scratch, known.slot)?;
                decode_into(codec, scratch, dst).map_err(decode_err)?;
                Ok(checked)
            }
        }
    }

    /// A short read inside a chunk means the entry points past the file: a damaged store.
    fn read_err(&self, e: IoError, loc: &RecordLoc, index: u32) -> Error {
        if e.kind == IoErrorKind::UnexpectedEof {
            let source = DecodeError::OutOfBounds { chunk: loc.chunk_id, offset: loc.offset, phys: loc.phys_length };
            Error::Decode { index: u64::from(index), source }
        } else {
            Error::Io(e)
        }
    }

    /// Decodes record `index` into a new vector (for tools; loaders use [`Store::gather`]).
    pub fn read(&self, index: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_into(index, &mut out, &mut Vec::new())?;
        Ok(out)
    }

    /// Logical bytes `from .. from + out.len()` of record `index` into `out`, its checksum
    /// checked over the whole record as every read does. A raw record in a mapped file is
    /// hashed in place and only the piece copied (a packed row's share of a long document);
    /// otherwise the record is decoded whole into `scratch` and the piece copied from it.
    pub fn read_piece(&self, index: u64, from: u64, out: &mut [u8], scratch: &mut Vec<u8>) -> Result<()> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        let end = from.checked_add(out.len() as u64).filter(|&e| e <= u64::from(loc.logic_length));
        let Some(end) = end else {
            return Err(Error::InvalidArgument(format!(
                "bytes {from}..+{} of record {index}, which holds {}",
                out.len(),
                loc.logic_length
            )));
        };
        if codec == Codec::Raw {
            let file = self.chunk(loc.chunk_id)?;
            let (start, phys) = (loc.offset as usize, loc.phys_length as usize);
            if let Some(bytes) = file.view().and_then(|v| v.get(start..start + phys)) {
                self.check_stored(self.verify, index as u32, &loc, bytes, None)?;
                out.copy_from_slice(&bytes[from as usize..end as usize]);
                return Ok(());
            }
        }
        let mut whole = core::mem::take(scratch);
        whole.clear();
        whole.resize(loc.logic_length as usize, 0);
        let mut inner = Vec::new();
        let read = self.read_record(index as u32, &loc, codec, &mut whole, &mut inner, self.verify, Known::default());
        if read.is_ok() {
            out.copy_from_slice(&whole[from as usize..end as usize]);
        }
        *scratch = whole;
        read.map(|_| ())
    }

    /// Decodes record `index` into `out`, resized to its logical length; `scratch` is reused
    /// between calls for compressed bytes.
    pub fn read_into(&self, index: u64, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<()> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        out.clear();
        out.resize(loc.logic_length as usize, 0);
        self.read_record(index as u32, &loc, codec, out, scratch, self.verify, Known::default()).map(|_| ())
    }

    /// [`Store::read_into`] for verification tools: checks the record's checksum whenever it
    /// has one, whatever the store's [`Verify`] mode, and never fails for want of one.
    /// Returns whether a checksum was checked (`false`: the record is unchecked).
    pub fn read_verified(&self, index: u64, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<bool> {
        let (loc, codec) = self.locate(index, self.len(), &self.header())?;
        out.clear();
        out.resize(loc.logic_length as usize, 0);
        self.read_record(index as u32, &loc, codec, out, scratch, Verify::Auto, Known::default())
    }

    /// [`Store::read_verified`] of every record in `range` (which must lie below the
    /// length), in order, calling `visit(index, entry, result)` for each; a record for which
    /// `skip(entry)` holds is not read (`result` is `None`). The entries, checksum slots and
    /// stored bytes of neighbouring records are read together (see the `table` module), so a
    /// host without a map pays a few calls per range, not per record. `visit` returning an
    /// error stops the scan with it.
    pub fn read_verified_range(
        &self,
        range: core::ops::Range<u32>,
        skip: impl Fn(&RecordLoc) -> bool,
        mut visit: impl FnMut(u32, &RecordLoc, Option<Result<bool>>) -> Result<()>,
    ) -> Result<()> {
        let header = self.header();
        let n = range.end.saturating_sub(range.start);
        let (mut locs, mut slots, mut span, mut out, mut scratch) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        self.entries_into(range.start, n, &mut locs)?;
        self.slots_into(range.start, &locs, &mut slots)?;
        let groups = table::spans(locs.len(), table::SPAN_GAP, |k| {
            let e = &locs[k];
            // Entries that fail their check, or are skipped, are spans of their own.
            let key = if e.check(&header).is_err() || skip(e) { u64::MAX - k as u64 } else { u64::from(e.chunk_id) };
            (key, u64::from(e.offset), u64::from(e.phys_length))
        });
        for group in groups {
            let (head, last) = (&locs[group.start], &locs[group.end - 1]);
            let base = self.chunk(head.chunk_id).ok().and_then(|f| table::read_span(f, head, last, &mut span));
            for k in group {
                let (index, loc) = (range.start + k as u32, &locs[k]);
                if skip(loc) {
                    visit(index, loc, None)?;
                    continue;
                }
                let result = loc.check(&header).map_err(|source| Error::Decode { index: u64::from(index), source });
                let result = result.and_then(|codec| {
                    let stored = base.map(|b| {
                        let at = (u64::from(loc.offset) - b) as usize;
                        &span[at..at + loc.phys_length as usize]
                    });
                    out.clear();
                    out.resize(loc.logic_length as usize, 0);
                    let known = Known { slot: Some(slots[k]), stored };
                    self.read_record(index, loc, codec, &mut out, &mut scratch, Verify::Auto, known)
                });
                visit(index, loc, Some(result))?;
            }
        }
        Ok(())
    }
}
