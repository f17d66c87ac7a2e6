//! How every constructor of a [`Loader`] ends. The six of them (new, fetching and packed,
//! each also resumed) come down to two set-ups, a loader of samples (`samples.rs`) and a
//! packed one (`packed.rs`), and both end in the same parts of a running loader (its shared
//! state, buffers, threads to come, remote cache plan). Those are built here once, so that
//! neither set-up repeats them and each constructor stays a call.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use zrecord_core::stream::pack::PackCursor;
use zrecord_core::stream::Stream;

use super::consumer::Consumer;
use super::packed;
use super::workers::Shared;
use super::{
    lock, samples, skip, BufferPool, Fetch, Loader, LoaderError, LoaderOptions, OnError, PackOptions, SetUp, Source,
};

impl Loader {
    /// The loader of `feed` at global batch `step`: the set-up of its kind, then the loader
    /// built from that.
    pub(super) fn start(stream: Stream, feed: Feed, options: LoaderOptions, step: u64) -> Result<Loader, LoaderError> {
        let set_up = match feed {
            Feed::Sources(sources) => samples::of_sources(&stream, sources, &options, step)?,
            Feed::Fetch(fetch) => samples::fetching(&stream, fetch, &options, step)?,
            Feed::Packed { sources, pack, rows, cursor } => {
                packed::set_up(&stream, sources, &pack, rows, cursor, &options, step)?
            }
        };
        Ok(Self::assemble(stream, set_up, options, step))
    }

    /// The loader `set_up` describes, at global batch `step`: its threads start with the
    /// first [`Loader::next`] (none without workers).
    fn assemble(stream: Stream, set_up: SetUp, options: LoaderOptions, step: u64) -> Loader {
        let SetUp { sources, fetch, planner, batch_size, packed, pass, ended } = set_up;
        let (packing, shared_packing) = match packed {
            Some((p, s)) => (Some(p), Some(s)),
            None => (None, None),
        };
        let shared_packing_is_none = shared_packing.is_none();
        // A buffer per field of every batch in flight: each worker's queued one and the
        // one it waits to queue, and the consumer's (or, without workers, the few a
        // caller holds).
        let fields = shared_packing.as_ref().map_or_else(
            || sources.first().map_or(1, |s| s.data().fields().len()),
            |_| 4, // tokens, segment ids, positions, sources
        );
        let buffers = Arc::new(BufferPool::keeping(fields * (2 * options.num_workers + options.prefetch + 2)));
        let skips = (options.on_error == OnError::Skip).then(|| Arc::new(skip::Skips::default()));
        let mut loader = Loader {
            stream,
            rank: options.rank,
            world_size: options.world_size,
            batch_size,
            shared: Mutex::new(Some(Arc::new(Shared {
                sources,
                fetch,
                pool: options.pool,
                buffers: buffers.clone(),
                skips: skips.clone(),
                transform: None,
                packing: shared_packing,
                announced: Arc::new(AtomicU64::new(step)),
            }))),
            buffers,
            stop: Arc::new(AtomicBool::new(false)),
            consumer: Mutex::new(Consumer { queues: None, turn: 0, failure: None }),
            consumed: Arc::new(AtomicU64::new(step)),
            threads: Mutex::new(Vec::new()),
            inline: None,
            pending: Mutex::new(None),
            packing,
            owner_pid: std::process::id(),
            warm: options.warm,
            warming: Mutex::new(None),
            streaming: Mutex::new(Vec::new()),
            warmer: Mutex::new(None),
            skips,
            pass,
            ended: AtomicBool::new(ended),
            finite_packed: !shared_packing_is_none && options.passes.is_some(),
        };
        if options.num_workers == 0 {
            loader.inline = Some(Mutex::new(planner));
        } else {
            *lock(&loader.pending) = Some((planner, options.num_workers, options.prefetch.max(1)));
        }
        lock(&loader.consumer).queues = Some(Vec::new());
        loader.plan_remote_reads();
        if let Some(shared) = lock(&loader.shared).clone() {
            *lock(&loader.streaming) =
                shared.sources.iter().filter_map(|s| s.data().cache()).map(|cache| cache.streaming()).collect();
        }
        loader
    }
}

/// What a loader reads: stores, or the caller's [`Fetch`].
pub(super) enum Feed {
    Sources(Vec<Source>),
    Fetch(Arc<dyn Fetch>),
    /// Packed rows of `rows` per global batch, from the start or a saved cursor.
    Packed {
        sources: Vec<Source>,
        pack: PackOptions,
        rows: u64,
        cursor: Option<PackCursor>,
    },
}
