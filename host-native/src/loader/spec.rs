//! A loader as a binding describes it. A binding gets a loader's arguments as its language
//! has them (signed integers, names as strings, optional parts), and their rules used to
//! be written where each was read: the Python binding checked the numbers and names, the
//! loader the rest. They are here once instead: a binding only converts its values into
//! a [`LoaderSpec`], and [`Loader::from_spec`] checks every rule in the order the checks
//! always ran, refusing an argument with an [`ArgumentError`] that names it, before it
//! builds the loader.
//!
//! The rules of [`LoaderOptions`] themselves (a world size that divides the global batch,
//! what packing and fetching refuse) stay with the loader's set-ups, where every caller of
//! the Rust API meets them too.

use std::path::PathBuf;
use std::sync::Arc;

use zrecord_core::image::crop::Pipeline;
use zrecord_core::sampler::Mode;
use zrecord_core::stream::pack::PackMode;
use zrecord_core::stream::rows::KEEP_DOCS;
use zrecord_core::stream::{Blocks, DatasetId, Mixture, Stream, StreamState};

use super::{ArgumentError, Fetch, Loader, LoaderError, LoaderOptions, OnError, PackOptions, RowIndexes, Source, Warm};
use crate::{Dataset, Zrecord};

/// A loader's arguments as a binding receives them (the Python `_Pipeline(...)`'s, by
/// the same names), unchecked: [`Loader::from_spec`] checks and builds them.
pub struct LoaderSpec {
    /// Samples per batch of this rank, at least 1 (for a packed loader, rows).
    pub batch_size: i64,
    /// The stream's order by its number: 0 SEQUENTIAL, 1 IID, 2 SHUFFLE ([`mode_of`]).
    pub mode: i64,
    /// The stream's seed.
    pub seed: u64,
    /// A mixture's weights, one per source; `None` for one source.
    pub weights: Option<Vec<f64>>,
    /// This process's rank, in `0..world_size`.
    pub rank: i64,
    /// Processes reading the stream, at least 1.
    pub world_size: i64,
    /// Gathering threads, at least 0 ([`LoaderOptions::num_workers`]).
    pub num_workers: i64,
    /// Batches prepared ahead ([`LoaderOptions::prefetch`]); anything below 1 is 1.
    pub prefetch_size: i64,
    /// `None`: [`Warm::Auto`]; `Some(true)`: [`Warm::Always`]; `Some(false)`: [`Warm::Never`].
    pub warm: Option<bool>,
    /// `"raise"` or `"skip"` ([`OnError`]).
    pub on_error: String,
    /// [`LoaderOptions::passes`].
    pub passes: Option<u64>,
    /// A block shuffle: `(records per block, blocks per window)` (`shuffle_block` and
    /// `shuffle_window`), checked by [`Blocks::new`].
    pub blocks: Option<(i64, i64)>,
    /// [`LoaderOptions::pool`].
    pub pool: fn() -> Option<&'static rayon::ThreadPool>,
    /// A saved state as its JSON text ([`StreamState::encode`]); `None` starts at step 0.
    pub state: Option<String>,
    /// What the loader reads.
    pub reads: Reads,
    /// Packed rows of a dataset's token field instead of samples (ignored by a fetch).
    pub pack: Option<PackArgs>,
}

/// What a [`LoaderSpec`] reads.
pub enum Reads {
    /// loaderx's form: per source (one, or one per mixture source), one store per field;
    /// each field's sample size in bytes is in `itemsizes`, shared by every source.
    Stores {
        /// The stores of each source, in field order.
        sources: Vec<Vec<Arc<Zrecord>>>,
        /// One sample's bytes, per field.
        itemsizes: Vec<usize>,
    },
    /// Datasets of named fields, one source each, with `pads` (field name, one element's
    /// bytes) and `images` (field name, pipeline) applied to every source.
    Datasets {
        /// The datasets, one per source.
        datasets: Vec<Arc<Dataset>>,
        /// Ragged fields read padded, and the element they are padded with.
        pads: Vec<(String, Vec<u8>)>,
        /// Image fields decoded by a pipeline.
        images: Vec<(String, Pipeline)>,
    },
    /// A dataset that is not zrecord's, of `length` samples, whose batches `fetch` reads
    /// ([`Loader::fetching`]).
    Fetch {
        /// The caller's reader.
        fetch: Arc<dyn Fetch>,
        /// The dataset's length (required).
        length: Option<u64>,
    },
}

/// A packed loader's arguments ([`PackOptions`], with names as strings).
pub struct PackArgs {
    /// [`PackOptions::field`].
    pub field: String,
    /// [`PackOptions::seq_len`].
    pub seq_len: u32,
    /// `"concat"` or `"best_fit"` ([`PackMode::from_name`]).
    pub mode: String,
    /// [`PackOptions::bos`].
    pub bos: Option<u64>,
    /// [`PackOptions::eos`].
    pub eos: Option<u64>,
    /// [`PackOptions::pad`].
    pub pad: u64,
    /// [`PackOptions::window`].
    pub window: Option<u64>,
    /// `"shuffled"`, `"sequential"`, or `None` for wherever shuffled rows apply
    /// ([`PackOptions::shuffle_rows`]).
    pub row_order: Option<String>,
    /// Where row indexes are kept ([`PackOptions::row_indexes`]).
    pub index_dir: IndexDirArg,
    /// [`PackOptions::keep_order`]; `None`: [`KEEP_DOCS`].
    pub keep_order: Option<u64>,
}

/// `index_dir` as a binding gets it: nothing, a flag, or a directory.
pub enum IndexDirArg {
    /// The default cache ([`RowIndexes::Default`]).
    Default,
    /// `false`: no row indexes kept ([`RowIndexes::Off`]); `true` is refused.
    Flag(bool),
    /// This directory ([`RowIndexes::In`]).
    In(PathBuf),
}

/// The stream's mode numbered `mode` (0 SEQUENTIAL, 1 IID, 2 SHUFFLE, as loaderx numbers
/// them), or the error that names the three.
pub fn mode_of(mode: i64) -> Result<Mode, ArgumentError> {
    u8::try_from(mode).ok().and_then(Mode::from_u8).ok_or_else(|| {
        ArgumentError::new("mode", format!("mode must be 0 (SEQUENTIAL), 1 (IID) or 2 (SHUFFLE), got {mode}"))
    })
}

impl ArgumentError {
    fn new(argument: &'static str, message: impl Into<String>) -> Self {
        ArgumentError { argument, message: message.into() }
    }
}

/// What the checks of a spec's numbers and names make of them.
struct Checked {
    options: LoaderOptions,
    mode: Mode,
    /// Samples (or rows) of a global batch: the batch size times the world size.
    global: u64,
    blocks: Option<Blocks>,
}

impl LoaderSpec {
    /// The rules of the numbers and names, in the order they have always been checked.
    fn check(&self) -> Result<Checked, LoaderError> {
        let blocks = match self.blocks {
            None => None,
            Some((records, window)) => match (u64::try_from(records), u64::try_from(window)) {
                (Ok(r), Ok(w)) => Some(Blocks::new(r, w)?),
                _ => {
                    return Err(ArgumentError::new(
                        "blocks",
                        format!("shuffle_block and shuffle_window must be positive, got {records} and {window}"),
                    )
                    .into())
                }
            },
        };
        let num_workers = usize::try_from(self.num_workers)
            .map_err(|_| ArgumentError::new("num_workers", "num_workers must be >= 0"))?;
        let batch_size = u64::try_from(self.batch_size)
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| ArgumentError::new("batch_size", "batch_size must be >= 1"))?;
        let world_size = u64::try_from(self.world_size).ok().filter(|&w| w >= 1).ok_or_else(|| {
            ArgumentError::new("world_size", format!("world_size must be >= 1, got {}", self.world_size))
        })?;
        let rank = u64::try_from(self.rank)
            .ok()
            .filter(|&r| r < world_size)
            .ok_or_else(|| ArgumentError::new("rank", format!("rank must be in 0..{world_size}, got {}", self.rank)))?;
        let global = batch_size.checked_mul(world_size).ok_or_else(|| {
            ArgumentError::new(
                "batch_size",
                format!("batch_size * world_size ({batch_size} * {world_size}) is too large"),
            )
        })?;
        let mode = mode_of(self.mode)?;
        let options = LoaderOptions {
            rank,
            world_size,
            num_workers,
            prefetch: usize::try_from(self.prefetch_size).unwrap_or(0).max(1),
            pool: self.pool,
            warm: match self.warm {
                None => Warm::Auto,
                Some(true) => Warm::Always,
                Some(false) => Warm::Never,
            },
            on_error: match self.on_error.as_str() {
                "raise" => OnError::Raise,
                "skip" => OnError::Skip,
                other => {
                    return Err(ArgumentError::new(
                        "on_error",
                        format!("on_error must be \"raise\" or \"skip\", not {other:?}"),
                    )
                    .into())
                }
            },
            passes: self.passes,
        };
        Ok(Checked { options, mode, global, blocks })
    }
}

impl PackArgs {
    /// The packing these arguments ask for, or the argument refused.
    fn options(self) -> Result<PackOptions, ArgumentError> {
        let mode = PackMode::from_name(&self.mode).ok_or_else(|| {
            ArgumentError::new("pack", format!("pack mode must be \"concat\" or \"best_fit\", not {:?}", self.mode))
        })?;
        let shuffle_rows = match self.row_order.as_deref() {
            None => None,
            Some("shuffled") => Some(true),
            Some("sequential") => Some(false),
            Some(other) => {
                return Err(ArgumentError::new(
                    "pack",
                    format!("pack row_order must be \"shuffled\" or \"sequential\", not {other:?}"),
                ))
            }
        };
        let row_indexes = match self.index_dir {
            IndexDirArg::Default => RowIndexes::Default,
            IndexDirArg::Flag(false) => RowIndexes::Off,
            IndexDirArg::Flag(true) => {
                return Err(ArgumentError::new(
                    "pack",
                    "pack index_dir is a directory, None (the default cache) or False (none)",
                ))
            }
            IndexDirArg::In(dir) => RowIndexes::In(dir),
        };
        Ok(PackOptions {
            field: self.field,
            seq_len: self.seq_len,
            mode,
            bos: self.bos,
            eos: self.eos,
            pad: self.pad,
            window: self.window,
            shuffle_rows,
            row_indexes,
            keep_order: self.keep_order.unwrap_or(KEEP_DOCS),
        })
    }
}

/// A saved state from its text.
fn decoded(state: Option<&str>) -> Result<Option<StreamState>, LoaderError> {
    Ok(state.map(StreamState::decode).transpose()?)
}

impl Loader {
    /// The loader `spec` describes, its arguments checked first (an [`ArgumentError`] names
    /// the one refused; the stream's and the sources' own refusals come as they are), at
    /// the saved state when it has one.
    pub fn from_spec(spec: LoaderSpec) -> Result<Loader, LoaderError> {
        let Checked { options, mode, global, blocks } = spec.check()?;
        // A stream in blocks when asked for; its refusal (not SHUFFLE over one dataset) as is.
        let blocked = |stream: Stream| match blocks {
            None => Ok(stream),
            Some(b) => stream.with_blocks(b),
        };
        let LoaderSpec { seed, weights, state, reads, pack, .. } = spec;
        let (built, named) = match reads {
            Reads::Fetch { fetch, length } => {
                let length = length.ok_or_else(|| ArgumentError::new("length", "fetch needs the dataset's length"))?;
                let stream = Stream::new(DatasetId { length, generation: 0 }, mode, seed, global).and_then(blocked)?;
                return match decoded(state.as_deref())? {
                    None => Loader::fetching(stream, fetch, options),
                    Some(state) => Loader::resume_fetching(stream, fetch, options, &state),
                };
            }
            Reads::Stores { sources, itemsizes } => (store_sources(sources, &itemsizes)?, false),
            Reads::Datasets { datasets, pads, images } => (dataset_sources(datasets, &pads, &images)?, true),
        };
        let ids: Vec<_> = built.iter().map(Source::id).collect();
        if let Some(pack) = pack {
            if blocks.is_some() {
                return Err(ArgumentError::new(
                    "blocks",
                    "shuffle_block orders samples; a packed loader orders documents (pack's row_order shuffles rows)",
                )
                .into());
            }
            if !named {
                return Err(ArgumentError::new("pack", "pack reads a Dataset of named fields").into());
            }
            let pack = pack.options()?;
            let docs = match weights {
                None => Stream::new(ids[0], mode, seed, 1),
                Some(weights) => Mixture::new(ids, weights).and_then(|m| Stream::mixture(m, seed, 1)),
            }?;
            return match decoded(state.as_deref())? {
                None => Loader::packed(docs, global, built, pack, options),
                Some(state) => Loader::resume_packed(docs, global, built, pack, options, &state),
            };
        }
        let stream = match weights {
            None => {
                let [id] = ids[..] else {
                    return Err(ArgumentError::new("weights", "more than one source needs mixture weights").into());
                };
                Stream::new(id, mode, seed, global)
            }
            Some(weights) => Mixture::new(ids, weights).and_then(|m| Stream::mixture(m, seed, global)),
        }
        .and_then(blocked)?;
        match decoded(state.as_deref())? {
            None => Loader::new(stream, built, options),
            Some(state) => Loader::resume(stream, built, options, &state),
        }
    }
}

/// The loaderx form: one source per list of stores, one store per field.
fn store_sources(sources: Vec<Vec<Arc<Zrecord>>>, itemsizes: &[usize]) -> Result<Vec<Source>, LoaderError> {
    let mut built = Vec::with_capacity(sources.len());
    for stores in sources {
        if stores.len() != itemsizes.len() {
            return Err(ArgumentError::new("sources", "every source needs one store per field").into());
        }
        // loaderx's pair is named as its batches are: "data" and "label".
        let names: Vec<String> = match stores.len() {
            2 => vec!["data".into(), "label".into()],
            n => (0..n).map(|i| format!("field{i}")).collect(),
        };
        let fields = stores.into_iter().zip(itemsizes).zip(names).map(|((store, &size), name)| (name, store, size));
        built.push(Source::named(fields.collect())?);
    }
    Ok(built)
}

/// Datasets of named fields, one source each, with `pads` and `images` applied to every
/// source.
fn dataset_sources(
    datasets: Vec<Arc<Dataset>>,
    pads: &[(String, Vec<u8>)],
    images: &[(String, Pipeline)],
) -> Result<Vec<Source>, LoaderError> {
    let mut built = Vec::with_capacity(datasets.len());
    for dataset in datasets {
        let mut source = Source::dataset(dataset)?;
        for (name, pad) in pads {
            source = source.padded(name, pad.clone())?;
        }
        for (name, pipeline) in images {
            source = source.images(name, pipeline.clone())?;
        }
        built.push(source);
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use std::any::Any;

    use super::*;
    use crate::loader::global_pool;

    /// A fetch that is never called: these loaders are built, not read.
    struct Nothing;

    impl Fetch for Nothing {
        fn fetch(&self, _: &[u64]) -> Box<dyn Any + Send> {
            Box::new(())
        }
    }

    fn spec() -> LoaderSpec {
        LoaderSpec {
            batch_size: 4,
            mode: 2,
            seed: 7,
            weights: None,
            rank: 0,
            world_size: 1,
            num_workers: 0,
            prefetch_size: 4,
            warm: None,
            on_error: "raise".into(),
            passes: None,
            blocks: None,
            pool: global_pool,
            state: None,
            reads: Reads::Fetch { fetch: Arc::new(Nothing), length: Some(100) },
            pack: None,
        }
    }

    fn no_stores() -> Reads {
        Reads::Stores { sources: Vec::new(), itemsizes: Vec::new() }
    }

    fn pack_args() -> PackArgs {
        PackArgs {
            field: "tokens".into(),
            seq_len: 16,
            mode: "concat".into(),
            bos: None,
            eos: None,
            pad: 0,
            window: None,
            row_order: None,
            index_dir: IndexDirArg::Default,
            keep_order: None,
        }
    }

    fn refused(spec: LoaderSpec) -> (&'static str, String) {
        match Loader::from_spec(spec) {
            Err(LoaderError::Argument(e)) => (e.argument, e.to_string()),
            other => panic!("not an argument refused: {other:?}"),
        }
    }

    // The messages are the ones the Python binding always raised, and its tests match on
    // them: a change here is a change of the Python API's errors.
    #[test]
    fn a_refused_argument_is_named_with_its_message() {
        let cases: Vec<(LoaderSpec, &str, &str)> = vec![
            (LoaderSpec { num_workers: -1, ..spec() }, "num_workers", "num_workers must be >= 0"),
            (LoaderSpec { batch_size: 0, ..spec() }, "batch_size", "batch_size must be >= 1"),
            (LoaderSpec { world_size: 0, ..spec() }, "world_size", "world_size must be >= 1, got 0"),
            (LoaderSpec { rank: 1, ..spec() }, "rank", "rank must be in 0..1, got 1"),
            (
                LoaderSpec { batch_size: i64::MAX, world_size: 3, rank: 2, ..spec() },
                "batch_size",
                "batch_size * world_size (9223372036854775807 * 3) is too large",
            ),
            (LoaderSpec { mode: 3, ..spec() }, "mode", "mode must be 0 (SEQUENTIAL), 1 (IID) or 2 (SHUFFLE), got 3"),
            (
                LoaderSpec { on_error: "ignore".into(), ..spec() },
                "on_error",
                "on_error must be \"raise\" or \"skip\", not \"ignore\"",
            ),
            (
                LoaderSpec { blocks: Some((-1, 8)), ..spec() },
                "blocks",
                "shuffle_block and shuffle_window must be positive, got -1 and 8",
            ),
            (
                LoaderSpec { reads: Reads::Fetch { fetch: Arc::new(Nothing), length: None }, ..spec() },
                "length",
                "fetch needs the dataset's length",
            ),
            (LoaderSpec { reads: no_stores(), ..spec() }, "weights", "more than one source needs mixture weights"),
            (
                LoaderSpec { reads: no_stores(), pack: Some(pack_args()), ..spec() },
                "pack",
                "pack reads a Dataset of named fields",
            ),
            (
                LoaderSpec { reads: no_stores(), pack: Some(pack_args()), blocks: Some((4, 8)), ..spec() },
                "blocks",
                "shuffle_block orders samples; a packed loader orders documents (pack's row_order shuffles rows)",
            ),
            // Checked in the order they always were: the first rule broken is the one named.
            (LoaderSpec { num_workers: -1, batch_size: 0, ..spec() }, "num_workers", "num_workers must be >= 0"),
        ];
        for (spec, argument, message) in cases {
            assert_eq!(refused(spec), (argument, message.to_owned()));
        }
    }

    #[test]
    fn a_packed_spec_names_its_refused_names() {
        let refused = |args: PackArgs| {
            let e = args.options().expect_err("refused");
            (e.argument, e.message)
        };
        let cases = [
            (
                PackArgs { mode: "greedy".into(), ..pack_args() },
                "pack mode must be \"concat\" or \"best_fit\", not \"greedy\"",
            ),
            (
                PackArgs { row_order: Some("random".into()), ..pack_args() },
                "pack row_order must be \"shuffled\" or \"sequential\", not \"random\"",
            ),
            (
                PackArgs { index_dir: IndexDirArg::Flag(true), ..pack_args() },
                "pack index_dir is a directory, None (the default cache) or False (none)",
            ),
        ];
        for (args, message) in cases {
            assert_eq!(refused(args), ("pack", message.to_owned()));
        }
        let options = pack_args().options().expect("accepted");
        assert_eq!(
            (options.keep_order, options.row_indexes, options.shuffle_rows),
            (KEEP_DOCS, RowIndexes::Default, None)
        );
    }

    #[test]
    fn a_spec_that_passes_its_checks_is_the_loader_it_describes() {
        // A prefetch below 1 is taken as 1, not refused.
        let loader = Loader::from_spec(LoaderSpec { prefetch_size: -3, world_size: 2, rank: 1, ..spec() }).unwrap();
        assert_eq!((loader.batch_size(), loader.rank(), loader.world_size(), loader.step()), (4, 1, 2, 0));
        assert_eq!(loader.stream().global_batch(), 8);
        loader.next().unwrap().expect("a batch");
        let state = loader.state().encode();
        // The same global batch on one rank.
        let resumed = Loader::from_spec(LoaderSpec { batch_size: 8, state: Some(state), ..spec() }).unwrap();
        assert_eq!((resumed.step(), resumed.next().unwrap().expect("a batch").step), (1, 1));
        let e = Loader::from_spec(LoaderSpec { state: Some("{".into()), ..spec() }).unwrap_err();
        assert!(matches!(e, LoaderError::State(_)), "{e}");
    }
}
