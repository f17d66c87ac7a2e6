//! How a loader reads its stream: [`LoaderOptions`] (ranks, workers, prefetch, pool,
//! warming, damaged samples) and their defaults.

use super::OnError;

/// How a loader reads its stream.
#[derive(Clone, Copy, Debug)]
pub struct LoaderOptions {
    /// This process's rank, in `0..world_size` (default 0).
    pub rank: u64,
    /// Number of processes reading the stream (default 1); it must divide the stream's
    /// global batch, and each batch holds `global_batch / world_size` samples.
    pub world_size: u64,
    /// Gathering threads; 0 gathers inside [`Loader::next`](super::Loader::next) (default 4).
    pub num_workers: usize,
    /// Batches prepared ahead of the consumer, at least 1 (default 4).
    pub prefetch: usize,
    /// Which rayon pool a batch's gathers run on, asked once per batch; `None` for rayon's
    /// global pool (the default, [`global_pool`]). A process forked after the global pool
    /// started must answer with a pool of its own there: the inherited one has no threads.
    pub pool: fn() -> Option<&'static rayon::ThreadPool>,
    /// Whether the stores are read into the page cache in the background when the threads
    /// start (default [`Warm::Auto`]).
    pub warm: Warm,
    /// What a sample that fails its checksum or decode does (default [`OnError::Raise`];
    /// [`OnError::Skip`] replaces it, deterministically: see [`Skipped`](super::Skipped)).
    pub on_error: OnError,
    /// A finite pass, for evaluation: `Some(k)` reads the dataset `k` times in SEQUENTIAL
    /// order and ends ([`Loader::next`](super::Loader::next) then returns `None`); the last
    /// batch's slots past the pass are padding ([`LoaderBatch::valid`](super::LoaderBatch::valid)
    /// counts the others; packed rows pad with segment id 0). `None` (default): endless.
    pub passes: Option<u64>,
}

/// Whether a loader with workers warms its stores ([`Zrecord::warm`](crate::Zrecord::warm)) on a thread of its
/// own when it starts: the stores' used bytes read once, front to back, so that the random
/// reads of a cold first epoch find them in memory instead of going to disk one record at a
/// time. A loader with no workers starts no thread, and never warms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Warm {
    /// When all the loader's stores together fit in a quarter of the memory available to
    /// the page cache ([`zrecord_core::engine::worth_warming`]; `MemAvailable`, and the
    /// room left under this process's cgroup memory limit, v1 or v2, when it has one). Larger
    /// stores are read as the batches ask: warming them would evict what it read before
    /// the epoch got there.
    #[default]
    Auto,
    /// Always, whatever the size.
    Always,
    /// Never.
    Never,
}

/// The default [`LoaderOptions::pool`]: rayon's global pool.
pub fn global_pool() -> Option<&'static rayon::ThreadPool> {
    None
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            rank: 0,
            world_size: 1,
            num_workers: 4,
            prefetch: 4,
            pool: global_pool,
            warm: Warm::Auto,
            on_error: OnError::Raise,
            passes: None,
        }
    }
}
