//! `convert`: a `.npy` file into a dataset, one record per slice along axis 0, checked in full
//! before the store is touched and committed at once.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use serde::Serialize;

use zrecord_core::codec::{Codec, CodecPolicy};
use zrecord_core::dtype::itemsize;
use zrecord_core::engine::{Batch, Store, Writer};
use zrecord_core::error::{Error, FormatError, Result};
use zrecord_core::format::MAX_RECORD_LEN;
use zrecord_core::io::{Backend, Parallel, StorageFile};
use zrecord_core::schema::Schema;

use super::schema_for_append;
use crate::npy;

/// The outcome of [`convert`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conversion {
    /// Records appended.
    pub appended: u64,
    /// Index of the first appended record.
    pub first_index: u32,
    /// The dataset's schema (the existing one when appending).
    pub schema: Schema,
}

/// Reads and checks the header of the `.npy` in `input`.
pub fn read_npy_header<F: StorageFile>(input: &F) -> Result<npy::NpyHeader> {
    let file_len = input.len()?;
    if file_len < npy::PREFIX_LEN as u64 {
        return Err(FormatError::Container("not a .npy file (too short)".into()).into());
    }
    let mut prefix = [0u8; npy::PREFIX_LEN];
    input.read_at(0, &mut prefix)?;
    let total = npy::header_len(&prefix)?;
    if total > file_len || total > 1 << 24 {
        return Err(FormatError::Container(".npy header is truncated".into()).into());
    }
    let mut bytes = vec![0u8; total as usize];
    input.read_at(0, &mut bytes)?;
    Ok(npy::parse_header(&bytes)?)
}

/// A `.npy` input checked for conversion: its header, and the sizes [`convert`] streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpySource {
    /// The parsed header.
    pub header: npy::NpyHeader,
    /// Rows along axis 0: the records a conversion appends.
    pub rows: u64,
    /// Bytes per row: one record.
    pub sample_len: u64,
}

impl NpySource {
    /// The shape of one sample (the array's shape without axis 0).
    pub fn sample_shape(&self) -> &[u64] {
        &self.header.shape[1..]
    }
}

impl NpySource {
    /// The rows and sample size `h` describes, after checking that each row can be one
    /// record: a sample axis and samples of 1 byte ..= [`MAX_RECORD_LEN`], in C or Fortran
    /// order ([`NpySource::read_rows`] reads either as C-order rows).
    pub fn from_header(h: npy::NpyHeader) -> Result<NpySource> {
        let Some((&rows, sample_shape)) = h.shape.split_first() else {
            return Err(Error::InvalidArgument("array must have a sample axis (it is 0-dimensional)".into()));
        };
        let sample_len = sample_shape
            .iter()
            .try_fold(itemsize(&h.descr)?, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| Error::InvalidArgument("sample size overflows".into()))?;
        if sample_len > u64::from(MAX_RECORD_LEN) || sample_len == 0 {
            return Err(Error::RecordTooLarge { length: sample_len });
        }
        rows.checked_mul(sample_len).ok_or_else(|| Error::InvalidArgument("array size overflows".into()))?;
        Ok(NpySource { header: h, rows, sample_len })
    }

    /// Bytes of array data after the header.
    pub fn data_len(&self) -> u64 {
        self.rows * self.sample_len
    }

    /// True when a row's elements are not contiguous in the file: a Fortran-ordered array
    /// with more than one element per sample (axis 0 varies fastest).
    pub fn transposed(&self) -> bool {
        self.header.fortran_order && self.sample_shape().iter().product::<u64>() > 1
    }

    /// Reads rows `first..first + n` into `buf` (`n * sample_len` bytes) as C-order rows,
    /// whichever order the file holds. A Fortran-ordered file is read one sample element at
    /// a time across the `n` rows (`n` elements back to back in the file), so memory stays
    /// one block and the file is still read once.
    pub fn read_rows<F: StorageFile>(&self, input: &F, first: u64, n: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.header.data_offset;
        if !self.transposed() {
            return Ok(input.read_at(at + first * self.sample_len, buf)?);
        }
        let item = itemsize(&self.header.descr)? as usize;
        let shape = self.sample_shape();
        let elems = shape.iter().product::<u64>() as usize;
        let mut column = vec![0u8; n as usize * item];
        // Walk the sample's elements in C order, keeping each one's Fortran index.
        let mut index = vec![0u64; shape.len()];
        let strides: Vec<u64> = (0..shape.len()).map(|k| shape[..k].iter().product()).collect();
        for c in 0..elems {
            let f: u64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
            input.read_at(at + (f * self.rows + first) * item as u64, &mut column)?;
            for (k, value) in column.chunks_exact(item).enumerate() {
                let to = (k * elems + c) * item;
                buf[to..to + item].copy_from_slice(value);
            }
            for k in (0..shape.len()).rev() {
                index[k] += 1;
                if index[k] < shape[k] {
                    break;
                }
                index[k] = 0;
            }
        }
        Ok(())
    }
}

/// Checks that `input` is a `.npy` that [`convert`] can append in full: a header
/// [`NpySource::from_header`] accepts and all the data the header promises. Reads nothing
/// but the header and the file's length, so a caller can check an input before creating
/// anything.
pub fn check_npy<F: StorageFile>(input: &F) -> Result<NpySource> {
    let src = NpySource::from_header(read_npy_header(input)?)?;
    if input.len()? < src.header.data_offset + src.data_len() {
        return Err(FormatError::Container(format!(
            ".npy data is truncated: {} rows of {} bytes expected",
            src.rows, src.sample_len
        ))
        .into());
    }
    Ok(src)
}

/// Appends every slice along axis 0 of the `.npy` in `input` as one record, streaming
/// `chunk_bytes` of source at a time, and writes or checks `schema.json` exactly as
/// loaderx's `Dataset.write` does (an existing schema must have the same dtype and shape,
/// and its codec wins, under `policy`'s `min_savings`). Syncs the store at the end. The
/// input is checked with [`check_npy`] before the store is touched.
#[allow(clippy::too_many_arguments)]
pub fn convert<B: Backend, P: Parallel, F: StorageFile>(
    input: &F,
    store: &Store<B>,
    w: &mut Writer,
    policy: impl Into<CodecPolicy>,
    chunk_bytes: usize,
    par: &P,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Conversion> {
    let policy = policy.into();
    let codec = policy.codec;
    // Before anything is written: a build that cannot write zstd leaves no schema behind.
    codec.check_writable()?;
    let src = check_npy(input)?;
    let (h, rows, sample_len) = (&src.header, src.rows, src.sample_len);
    let sample_shape = src.sample_shape();

    let schema = schema_for_append(store, &h.descr, sample_shape, codec)?;
    let policy = policy.with_codec(Codec::from_name(&schema.codec).unwrap_or(codec));

    // Every block is staged and the whole conversion committed once: one sync, and a
    // conversion that fails half-way adds nothing to the store.
    let step = (chunk_bytes as u64 / sample_len).max(1);
    let mut buf = Vec::new();
    let mut first_index = store.len();
    let mut done = 0u64;
    progress(0, rows);
    let staged = (|| {
        while done < rows {
            let n = step.min(rows - done);
            let bytes = (n * sample_len) as usize;
            buf.resize(bytes, 0);
            src.read_rows(input, done, n, &mut buf)?;
            let batch = Batch::Fixed { src: &buf, count: n as usize, item_len: sample_len as usize };
            let at = store.stage(w, &batch, policy, par)?;
            if done == 0 {
                first_index = at;
            }
            done += n;
            progress(done, rows);
        }
        store.commit(w, par)
    })();
    if let Err(e) = staged {
        store.discard(w);
        return Err(e);
    }
    store.sync(w)?;
    Ok(Conversion { appended: rows, first_index, schema })
}
