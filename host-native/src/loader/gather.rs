//! A worker's gather: every field of one batch, from one source or a mixture's several,
//! into buffers from the [`BufferPool`].
//!
//! A fixed field is one `(batch, sample)` block. A ragged field is either its samples back
//! to back with `batch + 1` offsets (Arrow's list layout) or, padded, one
//! `(batch, longest)` block filled with the pad value past each sample, with the lengths.
//! An image field with a pipeline ([`Source::images`]) is gathered as values, then each
//! image is decoded, cropped and resized into its slot of one `(batch, h, w, 3)` or
//! `(batch, 3, h, w)` block, the batch's images in parallel on the gather's rayon pool.

use std::cell::RefCell;

use rayon::prelude::*;
use zrecord_core::error::DecodeError;
use zrecord_core::image::crop::Key;
use zrecord_core::image::render::{render, Scratch};

use super::workers::Job;
use super::{BufferPool, LoaderBatch, Source};
use crate::{DatasetError, Error};

/// How a ragged field of a batch is laid out (offsets and lengths count elements).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RaggedField {
    /// Sample `i` is elements `offsets[i]..offsets[i + 1]` of the field's buffer.
    Offsets(Vec<u64>),
    /// Sample `i` is the first `lengths[i]` elements of row `i` of a `(batch, width)` block.
    Padded {
        /// Elements of each sample.
        lengths: Vec<u64>,
        /// Elements per row: the batch's longest sample.
        width: usize,
    },
}

/// Per field of a batch: `None` for a fixed field, the layout of a ragged one.
pub type RaggedBatch = Vec<Option<RaggedField>>;

/// The slots of a batch each source fills: `(indices, slots)` per source.
fn by_source(job: &Job, sources: usize) -> Vec<(Vec<u64>, Vec<usize>)> {
    let mut groups: Vec<(Vec<u64>, Vec<usize>)> = vec![(Vec::new(), Vec::new()); sources];
    for (slot, (&index, &s)) in job.indices.iter().zip(&job.sources).enumerate() {
        let (indices, slots) = &mut groups[s as usize];
        indices.push(index);
        slots.push(slot);
    }
    groups
}

pub(super) fn gather(sources: &[Source], buffers: &BufferPool, job: Job) -> Result<LoaderBatch, DatasetError> {
    let n = job.indices.len();
    let first = &sources[0];
    let field_count = first.dataset.fields().len();
    let groups = if sources.len() == 1 { Vec::new() } else { by_source(&job, sources.len()) };
    let oom = |e: Error| DatasetError::at(first.dataset.path(), None, e);
    let mut fields = Vec::with_capacity(field_count);
    let mut ragged = Vec::with_capacity(field_count);
    for f in 0..field_count {
        if !first.dataset.fields()[f].is_ragged() {
            let size = first.dataset.sample_len(f);
            let (mut buf, reused) = buffers.take(n * size).map_err(oom)?;
            if sources.len() == 1 {
                first.dataset.gather_fixed(f, &job.indices, &mut buf, None, reused)?;
            } else {
                for (source, (indices, slots)) in sources.iter().zip(&groups) {
                    if !indices.is_empty() {
                        source.dataset.gather_fixed(f, indices, &mut buf, Some(slots), reused)?;
                    }
                }
            }
            fields.push(buf);
            ragged.push(None);
            continue;
        }
        if let Some(image) = &first.images[f] {
            fields.push(images(sources, buffers, &job, &groups, f, image)?);
            ragged.push(None);
            continue;
        }
        let item = first.dataset.itemsize(f);
        let lengths = byte_lengths(sources, &job, &groups, f)?;
        let (buf, layout) = match &first.pads[f] {
            None => {
                let (buf, mut offsets) = values(sources, buffers, &job, &groups, f, &lengths)?;
                offsets.iter_mut().for_each(|o| *o /= item as u64);
                (buf, RaggedField::Offsets(offsets))
            }
            Some(pad) => {
                let width = lengths.iter().max().map_or(0, |&m| m as usize / item);
                let row = width * item;
                let (mut buf, _) = buffers.take(n * row).map_err(oom)?;
                for chunk in buf.chunks_exact_mut(item) {
                    chunk.copy_from_slice(pad);
                }
                let offsets: Vec<u64> = (0..n).map(|slot| (slot * row) as u64).collect();
                put(sources, &groups, f, &job.indices, &mut buf, &offsets)?;
                let lengths = lengths.iter().map(|&len| len / item as u64).collect();
                (buf, RaggedField::Padded { lengths, width })
            }
        };
        fields.push(buf);
        ragged.push(Some(layout));
    }
    Ok(LoaderBatch {
        step: job.step,
        indices: job.indices,
        sources: job.sources,
        fields,
        ragged,
        fetched: None,
        pack: None,
        valid: 0, // set by Loader::next
        replaced: Vec::new(),
    })
}

/// The byte length of field `f` of every slot, from its source.
fn byte_lengths(
    sources: &[Source],
    job: &Job,
    groups: &[(Vec<u64>, Vec<usize>)],
    f: usize,
) -> Result<Vec<u64>, DatasetError> {
    let mut lengths = vec![0u64; job.indices.len()];
    if sources.len() == 1 {
        sources[0].dataset.byte_lengths(f, &job.indices, &mut lengths)?;
        return Ok(lengths);
    }
    let mut part = Vec::new();
    for (source, (indices, slots)) in sources.iter().zip(groups) {
        part.clear();
        part.resize(indices.len(), 0);
        source.dataset.byte_lengths(f, indices, &mut part)?;
        for (&slot, &len) in slots.iter().zip(&part) {
            lengths[slot] = len;
        }
    }
    Ok(lengths)
}

/// Field `f` of every slot (of `lengths` bytes each) back to back, with `n + 1` byte
/// offsets; a bytes, string or image field's stop bytes stripped.
fn values(
    sources: &[Source],
    buffers: &BufferPool,
    job: &Job,
    groups: &[(Vec<u64>, Vec<usize>)],
    f: usize,
    lengths: &[u64],
) -> Result<(Vec<u8>, Vec<u64>), DatasetError> {
    let mut offsets = Vec::with_capacity(lengths.len() + 1);
    let mut total = 0u64;
    for &len in lengths {
        offsets.push(total);
        total += len;
    }
    let oom = |e: Error| DatasetError::at(sources[0].dataset.path(), None, e);
    let (mut buf, _) = buffers.take(total as usize).map_err(oom)?;
    put(sources, groups, f, &job.indices, &mut buf, &offsets)?;
    offsets.push(total);
    if sources[0].dataset.fields()[f].has_stop_byte() {
        strip(sources, job, f, &mut buf, &mut offsets)?;
    }
    Ok((buf, offsets))
}

/// Field `f`'s images decoded through `image`'s pipeline into one block, slot by slot; a
/// value that is not an image the pipeline can use is the error of its record.
fn images(
    sources: &[Source],
    buffers: &BufferPool,
    job: &Job,
    groups: &[(Vec<u64>, Vec<usize>)],
    f: usize,
    image: &(zrecord_core::image::crop::Pipeline, u64),
) -> Result<Vec<u8>, DatasetError> {
    thread_local! {
        // A decoder thread's resizer and output buffers, kept between images.
        static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    }
    let (pipeline, field) = image;
    let lengths = byte_lengths(sources, job, groups, f)?;
    let (encoded, offsets) = values(sources, buffers, job, groups, f, &lengths)?;
    let size = pipeline.sample_bytes();
    let oom = |e: Error| DatasetError::at(sources[0].dataset.path(), None, e);
    let (mut out, _) = buffers.take(job.indices.len() * size).map_err(oom)?;
    let seed = sources[0].seed;
    let decoded = out.par_chunks_mut(size).enumerate().try_for_each(|(slot, dst)| {
        let source = job.sources.get(slot).map_or(0, |&s| s as usize);
        let index = job.indices[slot];
        let key = Key { seed, step: job.step, source: source as u32, index, field: *field };
        let bytes = &encoded[offsets[slot] as usize..offsets[slot + 1] as usize];
        SCRATCH
            .with(|scratch| render(bytes, pipeline, &key, dst, &mut scratch.borrow_mut()))
            .map(drop)
            .map_err(|e| sources[source].dataset.value_error(f, index, DecodeError::Image(e)))
    });
    buffers.give(encoded);
    decoded?;
    Ok(out)
}

/// A bytes or string field's records, gathered back to back, made its values: each stop
/// byte stripped (a string field's values checked to be UTF-8), the buffer cut to them.
fn strip(sources: &[Source], job: &Job, f: usize, buf: &mut Vec<u8>, offsets: &mut [u64]) -> Result<(), DatasetError> {
    let text = sources[0].dataset.fields()[f].kind == zrecord_core::dataset::FieldKind::String;
    let len = zrecord_core::dataset::values::strip(buf, offsets, text).map_err(|(k, why)| {
        let source = &sources[job.sources.get(k).map_or(0, |&s| s as usize)];
        source.dataset.value_error(f, job.indices[k], why)
    })?;
    buf.truncate(len);
    Ok(())
}

/// Decodes field `f` of each slot at its byte offset, from its source.
fn put(
    sources: &[Source],
    groups: &[(Vec<u64>, Vec<usize>)],
    f: usize,
    indices: &[u64],
    buf: &mut [u8],
    offsets: &[u64],
) -> Result<(), DatasetError> {
    if sources.len() == 1 {
        return sources[0].dataset.gather_at(f, indices, buf, offsets);
    }
    for (source, (indices, slots)) in sources.iter().zip(groups) {
        if !indices.is_empty() {
            let at: Vec<u64> = slots.iter().map(|&slot| offsets[slot]).collect();
            source.dataset.gather_at(f, indices, buf, &at)?;
        }
    }
    Ok(())
}
