//! What a loader reads: a [`Source`] is one dataset (fields over shards), how its ragged
//! fields are handed out (flat with offsets, or padded) and which image fields are decoded
//! ([`Source::images`]); and whether a loader's sources fit its stream and each other.

use std::sync::Arc;

use zrecord_core::dataset::{Field, FieldKind};
use zrecord_core::image::crop::{field_key, Pipeline};
use zrecord_core::stream::{DatasetId, Stream};

use super::LoaderError;
use crate::{Dataset, Zrecord};

/// One source of a loader: a dataset, read field by field. A mixture has one source per
/// dataset, all with the same fields.
#[derive(Clone)]
pub struct Source {
    pub(super) dataset: Arc<Dataset>,
    /// Per field: `Some(one element's bytes)` to hand a ragged field out padded to the
    /// longest sample of each batch, `None` for flat values and offsets.
    pub(super) pads: Vec<Option<Vec<u8>>>,
    /// Per field: the image pipeline its values go through, and the field's part of each
    /// image's key ([`zrecord_core::image::crop::Key::field`]).
    pub(super) images: Vec<Option<Arc<(Pipeline, u64)>>>,
    /// The loader's seed, which images' keys start from (set when a loader takes the
    /// source).
    pub(super) seed: u64,
    /// Per field: records shorter than the sample are zero-padded (stores the caller
    /// handed over, which loaderx may have written so); a manifest dataset's are exact.
    id: DatasetId,
}

impl Source {
    /// A source of `fields`, each a store and the bytes of one of its samples (loaderx's
    /// data and label stores).
    ///
    /// Fails when there is no field, a sample size is zero, or the stores differ in length.
    /// Records shorter than the sample size are read zero-padded and longer ones fail,
    /// as [`Zrecord::gather`] does.
    pub fn new(fields: Vec<(Arc<Zrecord>, usize)>) -> Result<Source, LoaderError> {
        Self::named(
            fields.into_iter().enumerate().map(|(i, (store, size))| (format!("field{i}"), store, size)).collect(),
        )
    }

    /// [`Source::new`] with a name for each field (errors name the field: loaderx's pair is
    /// `data` and `label`).
    pub fn named(fields: Vec<(String, Arc<Zrecord>, usize)>) -> Result<Source, LoaderError> {
        let Some((_, first, _)) = fields.first() else {
            return Err(LoaderError::Sources("a source needs at least one field".into()));
        };
        let length = first.len();
        if let Some((_, store, _)) = fields.iter().find(|(_, s, _)| s.len() != length) {
            return Err(LoaderError::Sources(format!(
                "the stores of a source must have the same length: {} has {} records, {} has {length}",
                store.path().display(),
                store.len(),
                first.path().display(),
            )));
        }
        if fields.iter().any(|(_, _, n)| *n == 0) {
            return Err(LoaderError::Sources("a sample size must be at least one byte".into()));
        }
        let defs = fields
            .into_iter()
            .map(|(name, store, size)| (Field::fixed(&name, "|u1", &[size as u64], store.codec()), store))
            .collect();
        let dataset = Dataset::from_stores(defs).map_err(LoaderError::Dataset)?;
        Self::dataset(Arc::new(dataset))
    }

    /// A source reading every field of `dataset`; ragged fields come as flat values and
    /// offsets until [`Source::padded`] says otherwise.
    pub fn dataset(dataset: Arc<Dataset>) -> Result<Source, LoaderError> {
        let id = dataset.id().map_err(LoaderError::Dataset)?;
        let pads = vec![None; dataset.fields().len()];
        let images = vec![None; dataset.fields().len()];
        Ok(Source { dataset, pads, images, seed: 0, id })
    }

    /// Decodes the images of field `name` (an image field, or a bytes field of encoded
    /// images) in the loader's workers through `pipeline`: each batch then holds one
    /// `(batch, *pipeline.shape())` block of the pipeline's dtype for the field, each
    /// image cropped, resized and flipped as its key draws ([`zrecord_core::image::crop`]).
    pub fn images(mut self, name: &str, pipeline: Pipeline) -> Result<Source, LoaderError> {
        let Some(f) = self.dataset.field_index(name) else {
            return Err(LoaderError::Sources(format!("images names field {name:?}, which the dataset does not have")));
        };
        let kind = self.dataset.fields()[f].kind;
        if !matches!(kind, FieldKind::Image | FieldKind::Bytes) {
            let what = if kind == FieldKind::Fixed { "fixed".into() } else { format!("a {} field", kind.name()) };
            return Err(LoaderError::Sources(format!(
                "images names field {name:?}, which is {what}, not an image or bytes field"
            )));
        }
        pipeline.check().map_err(|what| LoaderError::Sources(format!("images of field {name:?}: {what}")))?;
        self.images[f] = Some(Arc::new((pipeline, field_key(name))));
        Ok(self)
    }

    /// Hands ragged field `name` out padded: each batch a `(batch, longest)` block filled
    /// with `pad` (one element's bytes, in the field's dtype) past each sample's end, with
    /// the samples' lengths beside it.
    pub fn padded(mut self, name: &str, pad: Vec<u8>) -> Result<Source, LoaderError> {
        let Some(f) = self.dataset.field_index(name) else {
            return Err(LoaderError::Sources(format!("pad names field {name:?}, which the dataset does not have")));
        };
        let field = &self.dataset.fields()[f];
        if field.kind != FieldKind::Ragged {
            let what = if field.is_ragged() { format!("a {} field", field.kind.name()) } else { "fixed".into() };
            return Err(LoaderError::Sources(format!("pad names field {name:?}, which is {what}, not ragged")));
        }
        if pad.len() != self.dataset.itemsize(f) {
            return Err(LoaderError::Sources(format!(
                "the pad value of field {name:?} must be one element ({} bytes), got {} bytes",
                self.dataset.itemsize(f),
                pad.len()
            )));
        }
        self.pads[f] = Some(pad);
        Ok(self)
    }

    /// The dataset this source is, for [`crate::Stream::new`] and
    /// [`zrecord_core::Mixture::new`]: its length, and its stores' generations combined
    /// ([`DatasetId::of_stores`]), so that a change to any of them changes it.
    pub fn id(&self) -> DatasetId {
        self.id
    }

    /// The dataset read.
    pub fn data(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// The fields' sample sizes, in bytes (0 for a ragged field).
    pub fn sample_sizes(&self) -> Vec<usize> {
        (0..self.dataset.fields().len())
            .map(|f| match &self.images[f] {
                Some(image) => image.0.sample_bytes(),
                None => self.dataset.sample_len(f),
            })
            .collect()
    }

    /// What a mixture's sources must share: each field's kind, element size, sample size
    /// and padding.
    pub(super) fn shape(&self) -> Vec<(FieldKind, usize, usize, Option<Vec<u8>>)> {
        let d = &self.dataset;
        let sizes = self.sample_sizes();
        (0..d.fields().len()).map(|f| (d.fields()[f].kind, d.itemsize(f), sizes[f], self.pads[f].clone())).collect()
    }
}

/// Fails unless `sources` are the stream's datasets, in order, with the same fields (kinds,
/// element and sample sizes, padding).
pub(super) fn check_sources(stream: &Stream, sources: &[Source]) -> Result<(), LoaderError> {
    let datasets = stream.datasets();
    if sources.len() != datasets.len() {
        return Err(LoaderError::Sources(format!(
            "the stream reads {} dataset(s) but {} source(s) were given",
            datasets.len(),
            sources.len()
        )));
    }
    for (s, (source, dataset)) in sources.iter().zip(datasets).enumerate() {
        if source.id() != *dataset {
            return Err(LoaderError::Sources(format!(
                "source {s} is {:?} but the stream was built for {dataset:?}: build the stream from the sources' id()",
                source.id()
            )));
        }
    }
    // Every store open now: a run that starts before a change removes shards reads the
    // dataset it started on (dataset/shard.rs).
    for source in sources {
        source.data().open_all()?;
    }
    let sizes = sources[0].sample_sizes();
    if let Some(s) = sources.iter().position(|src| src.sample_sizes() != sizes) {
        return Err(LoaderError::Sources(format!(
            "the sources of a loader must have the same fields and sample sizes: source 0 has {sizes:?} bytes, \
             source {s} has {:?}",
            sources[s].sample_sizes()
        )));
    }
    let shape = sources[0].shape();
    if let Some(s) = sources.iter().position(|src| src.shape() != shape) {
        return Err(LoaderError::Sources(format!(
            "the sources of a loader must have the same fields: source {s}'s kinds, element sizes or padding \
             differ from source 0's"
        )));
    }
    Ok(())
}
