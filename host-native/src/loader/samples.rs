//! Setting up a loader of samples, of stores or of the caller's fetch. Both read the
//! rank's shard of the stream a batch at a time, so they share one set-up; what differs
//! is only what is checked first. A packed loader plans rows instead of a shard and is set
//! up in `packed.rs`.

use std::sync::Arc;

use zrecord_core::stream::pass::FinitePass;
use zrecord_core::stream::Stream;

use super::source::check_sources;
use super::workers::Planner;
use super::{zeroed, Fetch, LoaderError, LoaderOptions, OnError, SetUp, Source};
use crate::Error;

/// The set-up of a loader of `sources` ([`Loader::new`](super::Loader::new) and
/// [`Loader::resume`](super::Loader::resume)), from global batch `step`.
pub(super) fn of_sources(
    stream: &Stream,
    mut sources: Vec<Source>,
    options: &LoaderOptions,
    step: u64,
) -> Result<SetUp, LoaderError> {
    check_sources(stream, &sources)?;
    // Image keys start from the loader's seed (image/crop.rs).
    sources.iter_mut().for_each(|s| s.seed = stream.seed());
    set_up(stream, sources, None, options, step)
}

/// The set-up of a loader whose batches `fetch` reads
/// ([`Loader::fetching`](super::Loader::fetching)), from global batch `step`.
pub(super) fn fetching(
    stream: &Stream,
    fetch: Arc<dyn Fetch>,
    options: &LoaderOptions,
    step: u64,
) -> Result<SetUp, LoaderError> {
    if options.on_error == OnError::Skip {
        return Err(LoaderError::Sources(
            "on_error=skip replaces samples of zrecord datasets; a fetching loader's errors are its fetch's".into(),
        ));
    }
    if stream.mixture_sources().is_some() {
        return Err(LoaderError::Sources("a fetching loader reads one dataset, not a mixture".into()));
    }
    set_up(stream, Vec::new(), Some(fetch), options, step)
}

fn set_up(
    stream: &Stream,
    sources: Vec<Source>,
    fetch: Option<Arc<dyn Fetch>>,
    options: &LoaderOptions,
    step: u64,
) -> Result<SetUp, LoaderError> {
    let mixture = stream.mixture_sources().is_some();
    let pass = options.passes.map(|passes| FinitePass::new(stream, passes)).transpose()?;
    let mut shard = stream.shard(options.rank, options.world_size)?;
    shard.seek(step)?;
    let batch_size = shard.batch_size();
    // Make one batch's buffers now, so that an impossible batch size fails
    // here rather than inside a thread.
    zeroed::<u64>(batch_size)?;
    zeroed::<u32>(batch_size)?;
    for size in sources.first().map(Source::sample_sizes).unwrap_or_default() {
        zeroed::<u8>(batch_size.checked_mul(size).ok_or(Error::OutOfMemory)?)?;
    }
    Ok(SetUp {
        sources,
        fetch,
        planner: Planner::Samples { shard, mixture },
        batch_size,
        packed: None,
        pass,
        ended: false,
    })
}
