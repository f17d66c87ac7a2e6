//! Setting up a packed loader, and what it keeps of the batches it returned. A packed
//! loader plans rows, not a shard of samples, so its checks and its planner are packing's
//! (`pack.rs`); kept apart from `pack.rs` itself, which plans and gathers rows on the
//! loader's threads and knows nothing of the loader's options, and from `samples.rs`, with
//! which it shares only the [`SetUp`] both hand to [`Loader::start`](super::Loader::start).

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use zrecord_core::stream::pack::PackCursor;
use zrecord_core::stream::pass::FinitePass;
use zrecord_core::stream::{Stream, StreamError};

use super::pack::{Packing, RankPlanner};
use super::source::check_sources;
use super::workers::Planner;
use super::{zeroed, LoaderError, LoaderOptions, OnError, PackOptions, SetUp, Source};
use crate::Error;

/// A packed loader's own state ([`Loader::packed`](super::Loader::packed)).
pub(super) struct Packed {
    pub packing: Packing,
    /// Shuffled rows' global batches per epoch (`None`: sequential rows, endless).
    pub steps_per_epoch: Option<u64>,
    /// `(step after, cursor)` of the last batch returned.
    pub last: Mutex<(u64, PackCursor)>,
    pub padding: AtomicU64,
    pub batches: AtomicU64,
}

/// The set-up of a packed loader ([`Loader::packed`](super::Loader::packed)): `rows` rows
/// per global batch of `docs`, from `cursor` at global batch `step` (or the start).
pub(super) fn set_up(
    docs: &Stream,
    sources: Vec<Source>,
    pack: &PackOptions,
    rows: u64,
    cursor: Option<PackCursor>,
    options: &LoaderOptions,
    step: u64,
) -> Result<SetUp, LoaderError> {
    check_sources(docs, &sources)?;
    if options.on_error == OnError::Skip {
        return Err(LoaderError::Sources(
            "on_error=skip cannot be used with packing: a replaced document would change every later row".into(),
        ));
    }
    if options.world_size == 0 || !rows.is_multiple_of(options.world_size) || rows == 0 {
        return Err(LoaderError::Stream(StreamError::WorldSize { world_size: options.world_size, global_batch: rows }));
    }
    let packing = Packing::new(pack, &sources, rows, docs)?;
    let finite = options.passes.map(|passes| FinitePass::new(docs, passes)).transpose()?;
    if options.rank >= options.world_size {
        return Err(LoaderError::Stream(StreamError::Rank { rank: options.rank, world_size: options.world_size }));
    }
    let per_rank = (rows / options.world_size) as usize;
    let cells = per_rank.checked_mul(packing.spec.seq_len as usize).ok_or(Error::OutOfMemory)?;
    zeroed::<u8>(cells.checked_mul(packing.item.max(4)).ok_or(Error::OutOfMemory)?)?;
    let mut planner =
        RankPlanner::new(docs, sources.clone(), packing.clone(), options.rank, per_rank, step, cursor.as_ref())?;
    let mut ended = false;
    if let Some(pass) = &finite {
        planner.packer.finish_after(pass.samples())?;
        // A state saved after the pass's last batch: nothing is left.
        ended = planner.packer.finished();
    }
    let last = planner.packer.cursor();
    let packed = Packed {
        steps_per_epoch: planner.packer.steps_per_epoch(),
        packing: packing.clone(),
        last: Mutex::new((step, last)),
        padding: AtomicU64::new(0),
        batches: AtomicU64::new(0),
    };
    Ok(SetUp {
        sources,
        fetch: None,
        planner: Planner::Packed(planner),
        batch_size: per_rank,
        packed: Some((packed, (packing, per_rank))),
        pass: None,
        ended,
    })
}
