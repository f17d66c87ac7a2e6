//! The resume state of a stream reader: a few integers, versioned, as compact JSON.
//!
//! A state records where the caller is (global batches consumed) and everything the stream
//! at that place depends on: seed, mode, global batch size, the datasets' lengths and
//! generations, and a mixture's weights. [`Stream::resume`](super::Stream::resume) refuses
//! a state whose stream would differ from the one it is applied to, with an error naming
//! the difference, so samples are never silently shifted. Neither the rank, the world size
//! nor the per-rank batch size is recorded: any split of the same global batch resumes it.
//!
//! Weights are written as decimal strings (Rust's shortest round-trip form) rather than
//! JSON numbers, because a JSON number parser need not round to the nearest double and a
//! one-ulp difference could move a mixture's slice.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::eras::{self, Era};
use super::pack::{self, PackCursor, PackMode, PackSpec};
use super::{Blocks, DatasetId, Mixture, Mode, Stream};

/// The state layout this crate writes for a stream over data that never grew under it.
pub const STATE_VERSION: u32 = 1;
/// The layout of a state that lists its stream's eras (a dataset grown under a resumed
/// job, `eras.rs`): version 1 plus `eras`. Both are read.
pub const STATE_VERSION_ERAS: u32 = 2;
/// The layout of a state whose stream reads SHUFFLE epochs in blocks (`blocks.rs`): version
/// 1 plus `blocks`, and `eras` when the dataset grew. A reader of versions 1 and 2 only
/// refuses it by its version rather than misreading it as a full permutation.
pub const STATE_VERSION_BLOCKS: u32 = 3;

/// Where a reader's caller stands in a [`Stream`], and what that stream is.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamState {
    /// Layout version ([`STATE_VERSION`]).
    pub version: u32,
    /// The stream's seed.
    pub seed: u64,
    /// The stream's mode, numbered as [`Mode`] (2 for a mixture).
    pub mode: u8,
    /// Samples per global batch (per-rank batch size * world size).
    pub global_batch: u64,
    /// Global batches the caller consumed: the next one to read.
    pub step: u64,
    /// The dataset read, or the mixture's sources in order.
    pub datasets: Vec<DatasetId>,
    /// A mixture's weights as given; `None` for a single dataset.
    pub weights: Option<Vec<f64>>,
    /// A packed loader's spec and cursor ([`super::pack`]); `None` for batches of samples.
    /// `global_batch` then counts rows, and `step` global batches of rows.
    pub pack: Option<PackedState>,
    /// The stream's eras when its dataset grew under it (version 2, or 3); empty otherwise.
    pub eras: Vec<Era>,
    /// The blocks its SHUFFLE epochs are read in (version 3); `None` for the full
    /// permutation.
    pub blocks: Option<Blocks>,
}

/// What a packed loader's state adds: the packing it did and where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedState {
    /// Row length, mode, ids and window.
    pub spec: PackSpec,
    /// Documents taken, tokens taken and pieces waiting after the last batch returned.
    pub cursor: PackCursor,
}

/// The JSON layout of [`PackedState`]: waiting pieces as one flat array of
/// `source, position, start` triples.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PackWire {
    seq_len: u32,
    mode: String,
    bos: Option<u64>,
    eos: Option<u64>,
    pad: u64,
    window: u64,
    /// Shuffled rows (`rows.rs`); absent in states of sequential rows, and in those
    /// saved before shuffled rows existed.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    shuffle_rows: bool,
    taken: Vec<u64>,
    tokens: Vec<u64>,
    waiting: Vec<u64>,
}

/// A dataset's identity as the state writes it: the generation (which is 64 bits of hash
/// for every store zrecord created) as a [`portable`] number.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IdWire {
    length: u64,
    #[serde(with = "portable")]
    generation: u64,
}

/// A u64 that survives every JSON parser: a number below 2^53 (what a double holds
/// exactly, so JavaScript's `JSON.parse` keeps it), a decimal string at or above. Either
/// form is read.
mod portable {
    use alloc::string::{String, ToString};

    /// The largest integer every JSON parser keeps exactly (2^53 - 1).
    pub const EXACT: u64 = (1 << 53) - 1;

    pub fn serialize<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        if *v <= EXACT {
            s.serialize_u64(*v)
        } else {
            s.serialize_str(&v.to_string())
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Either {
            Number(u64),
            Text(String),
        }
        match <Either as serde::Deserialize>::deserialize(d)? {
            Either::Number(n) => Ok(n),
            Either::Text(t) => t
                .parse::<u64>()
                .map_err(|_| serde::de::Error::custom(alloc::format!("{t:?} is not an unsigned 64-bit integer"))),
        }
    }
}

/// The JSON layout.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    version: u32,
    #[serde(with = "portable")]
    seed: u64,
    mode: u8,
    global_batch: u64,
    step: u64,
    datasets: Vec<IdWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weights: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pack: Option<PackWire>,
    /// `[position, epoch, length]` per era.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    eras: Vec<[u64; 3]>,
    /// `[records, window]` of a block shuffle (version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    blocks: Option<[u64; 2]>,
}

/// Why a saved state cannot be loaded into a stream.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The text is not a stream state.
    #[error("not a zrecord stream state: {0}")]
    Malformed(String),
    /// A state layout this version of zrecord does not read.
    #[error("stream state version {found} is not supported (this zrecord reads versions 1 to {supported})")]
    UnsupportedVersion {
        /// The state's version.
        found: u32,
        /// The version read here.
        supported: u32,
    },
    /// A mixture state loaded into a single-dataset stream, or the reverse.
    #[error("the state was saved from {saved}, but this loader reads {current}")]
    Kind {
        /// What the state was saved from.
        saved: &'static str,
        /// What the stream reads.
        current: &'static str,
    },
    /// The mixture has another number of sources.
    #[error("the state was saved from a mixture of {saved} sources, this one has {current}")]
    SourceCount {
        /// Sources in the state.
        saved: usize,
        /// Sources now.
        current: usize,
    },
    /// A dataset's length changed.
    #[error(
        "dataset {index} has {current} samples but the state was saved when it had {saved}: \
         records were appended, deleted or compacted since, so the saved position would \
         point at other samples"
    )]
    DatasetLength {
        /// Which source (0 for a single dataset).
        index: usize,
        /// Length in the state.
        saved: u64,
        /// Length now.
        current: u64,
    },
    /// A dataset's generation changed.
    #[error(
        "dataset {index} is at generation {current} but the state was saved at generation \
         {saved}: it is another dataset of the same length, or its records were deleted or \
         compacted since, so the saved position would point at other samples"
    )]
    DatasetGeneration {
        /// Which source (0 for a single dataset).
        index: usize,
        /// Its length, the same in the state and now.
        length: u64,
        /// Generation in the state.
        saved: u64,
        /// Generation now.
        current: u64,
    },
    /// Another seed.
    #[error("the state was saved with seed {saved}, this loader uses seed {current}")]
    Seed {
        /// Seed in the state.
        saved: u64,
        /// Seed now.
        current: u64,
    },
    /// Another mode.
    #[error("the state was saved in mode {saved} ({}), this loader uses mode {current} ({})", mode_name(*saved), mode_name(*current))]
    Mode {
        /// Mode in the state.
        saved: u8,
        /// Mode now.
        current: u8,
    },
    /// Other mixture weights (compared through the slices they give, so `[7, 3]` matches
    /// `[0.7, 0.3]`).
    #[error("the state was saved with mixture weights {saved:?}, this loader uses {current:?}")]
    Weights {
        /// Weights in the state.
        saved: Vec<f64>,
        /// Weights now.
        current: Vec<f64>,
    },
    /// Another global batch size.
    #[error(
        "the state was saved with a global batch of {saved} samples (batch_size * world_size), \
         this loader's is {current}; a resumed job may change world_size and batch_size only \
         if their product stays {saved}"
    )]
    GlobalBatch {
        /// Global batch in the state.
        saved: u64,
        /// Global batch now.
        current: u64,
    },
    /// A packed state loaded into a loader of samples, or the reverse.
    #[error("the state was saved from {saved}, but this loader reads {current}")]
    Packing {
        /// What the state was saved from.
        saved: &'static str,
        /// What the loader reads.
        current: &'static str,
    },
    /// Another packing.
    #[error("the state was saved from {saved}; this loader does {current}")]
    Pack {
        /// The saved packing, in words.
        saved: String,
        /// This loader's.
        current: String,
    },
    /// The state was saved while reading a dataset that has grown since, and this
    /// stream does not follow it.
    #[error(
        "the state was saved on the dataset as it was before an append ({saved:?}); resume it with \
         Stream::resumed and the dataset's grown_from identities (a loader does)"
    )]
    Grown {
        /// The eras the state lists.
        saved: Vec<Era>,
    },
    /// Another block shuffle, or blocks on one side only.
    #[error(
        "the state was saved reading SHUFFLE epochs {}, this loader reads them {}; resume with the \
         same shuffle_block and shuffle_window", blocks_name(*saved), blocks_name(*current)
    )]
    Blocks {
        /// The saved blocks.
        saved: Option<Blocks>,
        /// This stream's.
        current: Option<Blocks>,
    },
    /// The saved step lies beyond the stream's last position.
    #[error("the saved step {step} lies beyond the stream's 2^62 samples")]
    Step {
        /// The saved step.
        step: u64,
    },
}

fn mode_name(mode: u8) -> &'static str {
    match Mode::from_u8(mode) {
        Some(Mode::Sequential) => "SEQUENTIAL",
        Some(Mode::Iid) => "IID",
        Some(Mode::Shuffle) => "SHUFFLE",
        None => "unknown",
    }
}

fn blocks_name(blocks: Option<Blocks>) -> String {
    match blocks {
        None => "as one permutation of every sample".into(),
        Some(b) => format!("in blocks of {} neighbouring samples, {} blocks mixed together", b.records(), b.window()),
    }
}

/// Checks a saved packing spec against the loader's.
fn check_saved_spec(saved: &PackSpec, now: &PackSpec) -> Result<(), StateError> {
    if saved != now {
        let mut current = pack::describe(now);
        if (PackSpec { shuffle_rows: now.shuffle_rows, ..*saved }) == *now {
            // Only the row order differs: most likely a state saved before rows were
            // shuffled by default, resumed by a loader that now shuffles them.
            let order = if saved.shuffle_rows { "shuffled" } else { "sequential" };
            current.push_str(&format!("; Pack(row_order=\"{order}\") resumes this state"));
        }
        return Err(StateError::Pack { saved: pack::describe(saved), current });
    }
    Ok(())
}

/// Whether this crate reads state layout `version`.
fn known_version(version: u64) -> bool {
    [STATE_VERSION, STATE_VERSION_ERAS, STATE_VERSION_BLOCKS].iter().any(|&v| u64::from(v) == version)
}

impl StreamState {
    /// The state as one line of JSON (an object; about 150 bytes plus about 85 per mixture
    /// source, so under 1 KiB up to 8 sources whatever the values).
    pub fn encode(&self) -> String {
        let wire = Wire {
            version: self.version,
            seed: self.seed,
            mode: self.mode,
            global_batch: self.global_batch,
            step: self.step,
            datasets: self.datasets.iter().map(|d| IdWire { length: d.length, generation: d.generation }).collect(),
            weights: self.weights.as_ref().map(|w| w.iter().map(|x| format!("{x:?}")).collect()),
            pack: self.pack.as_ref().map(|p| PackWire {
                seq_len: p.spec.seq_len,
                mode: p.spec.mode.name().into(),
                bos: p.spec.bos,
                eos: p.spec.eos,
                pad: p.spec.pad,
                window: p.spec.window,
                shuffle_rows: p.spec.shuffle_rows,
                taken: p.cursor.taken.clone(),
                tokens: p.cursor.tokens.clone(),
                waiting: p.cursor.waiting.iter().flat_map(|&(s, pos, start)| [u64::from(s), pos, start]).collect(),
            }),
            eras: self.eras.iter().map(|e| [e.position, e.epoch, e.length]).collect(),
            blocks: self.blocks.map(|b| [b.records(), b.window()]),
        };
        // Plain integers, strings and arrays: serialising them cannot fail.
        serde_json::to_string(&wire).unwrap_or_default()
    }

    /// Parses [`StreamState::encode`]'s output. Unknown fields, missing fields, a layout
    /// version other than [`STATE_VERSION`], [`STATE_VERSION_ERAS`] and
    /// [`STATE_VERSION_BLOCKS`], and fields another version than their own carries are errors.
    pub fn decode(text: &str) -> Result<Self, StateError> {
        let malformed = |e: serde_json::Error| StateError::Malformed(e.to_string());
        let value: serde_json::Value = serde_json::from_str(text).map_err(malformed)?;
        let version = match value.get("version").map(serde_json::Value::as_u64) {
            Some(Some(v)) => v,
            Some(None) => return Err(StateError::Malformed("`version` is not a number".into())),
            None => return Err(StateError::Malformed("missing field `version`".into())),
        };
        if !known_version(version) {
            return Err(StateError::UnsupportedVersion {
                found: u32::try_from(version).unwrap_or(u32::MAX),
                supported: STATE_VERSION_BLOCKS,
            });
        }
        let wire: Wire = serde_json::from_value(value).map_err(malformed)?;
        let with_blocks = version == u64::from(STATE_VERSION_BLOCKS);
        if !with_blocks && (version == u64::from(STATE_VERSION_ERAS)) == wire.eras.is_empty() {
            return Err(StateError::Malformed(
                "eras belong to a version 2 state, and a version 2 state has them".into(),
            ));
        }
        if wire.blocks.is_some() && (wire.weights.is_some() || wire.pack.is_some() || wire.mode != Mode::Shuffle as u8)
        {
            return Err(StateError::Malformed("blocks belong to a SHUFFLE stream over one dataset".into()));
        }
        if with_blocks != wire.blocks.is_some() {
            return Err(StateError::Malformed(
                "blocks belong to a version 3 state, and a version 3 state has them".into(),
            ));
        }
        let blocks = match wire.blocks {
            None => None,
            Some([records, window]) => {
                Some(Blocks::new(records, window).map_err(|e| StateError::Malformed(e.to_string()))?)
            }
        };
        let eras: Vec<Era> =
            wire.eras.iter().map(|&[position, epoch, length]| Era { position, epoch, length }).collect();
        if !eras.is_empty() {
            let mode = Mode::from_u8(wire.mode).filter(|_| wire.weights.is_none() && wire.pack.is_none());
            let Some(mode) = mode else {
                return Err(StateError::Malformed("eras belong to a stream over one dataset".into()));
            };
            let length = wire.datasets.first().map_or(0, |d| d.length);
            eras::check(&eras, mode, wire.global_batch.max(1), length).map_err(StateError::Malformed)?;
        }
        let weights = match wire.weights {
            None => None,
            Some(ws) => Some(
                ws.iter()
                    .map(|w| {
                        w.parse::<f64>().map_err(|_| StateError::Malformed(format!("weight {w:?} is not a number")))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let datasets: Vec<DatasetId> =
            wire.datasets.iter().map(|d| DatasetId { length: d.length, generation: d.generation }).collect();
        if datasets.is_empty() {
            return Err(StateError::Malformed("the state names no dataset".into()));
        }
        if weights.is_none() && datasets.len() != 1 {
            return Err(StateError::Malformed("a single-dataset state names more than one dataset".into()));
        }
        let pack = match wire.pack {
            None => None,
            Some(p) => {
                let mode = PackMode::from_name(&p.mode).ok_or_else(|| {
                    StateError::Malformed(format!("packing mode {:?} is not concat or best_fit", p.mode))
                })?;
                if p.waiting.len() % 3 != 0 {
                    return Err(StateError::Malformed("waiting pieces are not source, position, start triples".into()));
                }
                if p.taken.len() != wire.datasets.len() || p.tokens.len() != wire.datasets.len() {
                    return Err(StateError::Malformed("the packing cursor needs one count per dataset".into()));
                }
                let mut waiting = Vec::with_capacity(p.waiting.len() / 3);
                for t in p.waiting.chunks_exact(3) {
                    let source =
                        u32::try_from(t[0]).ok().filter(|&s| (s as usize) < wire.datasets.len()).ok_or_else(|| {
                            StateError::Malformed(format!("waiting piece of source {} out of range", t[0]))
                        })?;
                    waiting.push((source, t[1], t[2]));
                }
                Some(PackedState {
                    spec: PackSpec {
                        seq_len: p.seq_len,
                        mode,
                        bos: p.bos,
                        eos: p.eos,
                        pad: p.pad,
                        window: p.window,
                        shuffle_rows: p.shuffle_rows,
                    },
                    cursor: PackCursor { taken: p.taken, tokens: p.tokens, waiting },
                })
            }
        };
        Ok(StreamState {
            version: wire.version,
            seed: wire.seed,
            mode: wire.mode,
            global_batch: wire.global_batch,
            step: wire.step,
            datasets,
            weights,
            pack,
            eras,
            blocks,
        })
    }

    /// Checks that this state was saved by a packed loader of `spec` with global batches
    /// of `rows` rows over `docs` (the document stream, global batch 1), and returns the
    /// global batch to read next and the packing cursor.
    pub fn check_packed(&self, docs: &Stream, spec: &PackSpec, rows: u64) -> Result<(u64, PackCursor), StateError> {
        let Some(saved) = &self.pack else {
            return Err(StateError::Packing { saved: "a loader of samples", current: "packed rows" });
        };
        self.check_with(docs, rows)?;
        check_saved_spec(&saved.spec, spec)?;
        Ok((self.step, saved.cursor.clone()))
    }

    /// Checks that this state belongs to `stream` (see [`Stream::resume`]).
    pub(super) fn check(&self, stream: &Stream) -> Result<(), StateError> {
        if self.pack.is_some() {
            return Err(StateError::Packing { saved: "packed rows", current: "batches of samples" });
        }
        self.check_with(stream, stream.global_batch())?;
        if stream.position(self.step).is_err() {
            return Err(StateError::Step { step: self.step });
        }
        Ok(())
    }

    /// The checks of [`StreamState::check`] but the global batch, which is `global_batch`.
    fn check_with(&self, stream: &Stream, global_batch: u64) -> Result<(), StateError> {
        if !known_version(u64::from(self.version)) {
            return Err(StateError::UnsupportedVersion { found: self.version, supported: STATE_VERSION_BLOCKS });
        }
        let kind = |mixture: bool| if mixture { "a mixture" } else { "a single dataset" };
        let current_mixture = stream.mixture_sources();
        if self.weights.is_some() != current_mixture.is_some() {
            return Err(StateError::Kind {
                saved: kind(self.weights.is_some()),
                current: kind(current_mixture.is_some()),
            });
        }
        let current = stream.datasets();
        if self.datasets.len() != current.len() {
            return Err(StateError::SourceCount { saved: self.datasets.len(), current: current.len() });
        }
        for (source, (saved, now)) in self.datasets.iter().zip(current).enumerate() {
            if saved.length != now.length {
                return Err(StateError::DatasetLength { index: source, saved: saved.length, current: now.length });
            }
            if saved.generation != now.generation {
                return Err(StateError::DatasetGeneration {
                    index: source,
                    length: now.length,
                    saved: saved.generation,
                    current: now.generation,
                });
            }
        }
        let mode = stream.mode() as u8;
        if self.mode != mode {
            return Err(StateError::Mode { saved: self.mode, current: mode });
        }
        if self.seed != stream.seed() {
            return Err(StateError::Seed { saved: self.seed, current: stream.seed() });
        }
        if let (Some(saved), Some(now)) = (&self.weights, current_mixture) {
            let mismatch = || StateError::Weights { saved: saved.clone(), current: now.weights().to_vec() };
            let saved_mixture = Mixture::new(self.datasets.clone(), saved.clone()).map_err(|_| mismatch())?;
            if saved_mixture.bounds() != now.bounds() {
                return Err(mismatch());
            }
        }
        if self.global_batch != global_batch {
            return Err(StateError::GlobalBatch { saved: self.global_batch, current: global_batch });
        }
        if !self.eras.is_empty() && self.eras != stream.eras() {
            return Err(StateError::Grown { saved: self.eras.clone() });
        }
        if self.blocks != stream.blocks() {
            return Err(StateError::Blocks { saved: self.blocks, current: stream.blocks() });
        }
        Ok(())
    }
}
