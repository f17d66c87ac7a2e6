//! `export`: a dataset back to a `.npy` file, after checking that its records can be read
//! and are all one sample long.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use zrecord_core::engine::Store;
use zrecord_core::error::{Error, FormatError, Result};
use zrecord_core::format::MAX_RECORD_LEN;
use zrecord_core::io::{Backend, Parallel, StorageFile};

use super::census::{census, check_placement};
use super::read_schema;
use crate::npy;

/// Writes the dataset in `store` to `output` as a `.npy` of shape `(len, *schema.shape)`,
/// replacing whatever `output` held. Returns the number of records written.
pub fn export<B: Backend, P: Parallel, F: StorageFile>(
    store: &Store<B>,
    output: &F,
    chunk_bytes: usize,
    par: &P,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64> {
    let schema = read_schema(store)?.ok_or_else(|| {
        Error::InvalidArgument("the store has no schema.json: it is a plain record store, not a dataset".into())
    })?;
    let sample_len = schema.sample_len()?;
    if sample_len == 0 || sample_len > u64::from(MAX_RECORD_LEN) {
        return Err(Error::RecordTooLarge { length: sample_len });
    }
    check_placement(&census(store, &store.header())?.chunks, 1)?;
    let rows = u64::from(store.len());
    let mut shape = vec![rows];
    shape.extend_from_slice(&schema.shape);
    let header = npy::write_header(&schema.dtype, &shape);
    output.set_len(0)?;
    output.write_at(0, &header)?;
    let step = (chunk_bytes as u64 / sample_len).max(1);
    let (mut buf, mut idxs, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    let mut done = 0u64;
    progress(0, rows);
    while done < rows {
        let n = step.min(rows - done);
        idxs.clear();
        idxs.extend(done..done + n);
        lens.resize(n as usize, 0u32);
        store.lengths(&idxs, &mut lens)?;
        if let Some((k, &len)) = lens.iter().enumerate().find(|(_, &l)| u64::from(l) != sample_len) {
            return Err(FormatError::Container(format!(
                "record {} holds {len} bytes but schema.json says samples are {sample_len}",
                done + k as u64
            ))
            .into());
        }
        buf.resize((n * sample_len) as usize, 0);
        store.gather(&idxs, &mut buf, sample_len as usize, par)?;
        output.write_at(header.len() as u64 + done * sample_len, &buf)?;
        done += n;
        progress(done, rows);
    }
    output.sync()?;
    Ok(rows)
}
