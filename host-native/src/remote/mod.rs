//! Datasets in object storage (S3, GCS, Azure Blob, HTTP), read-only, through the
//! `object_store` crate.
//!
//! A pushed dataset (or store) is a prefix of objects: every file of the local directory,
//! dense (a sparse file's trailing hole is not uploaded), and `remote.json`, written last,
//! naming each object's nominal size (the file's size on disk), stored size and ETag
//! ([`objects::Objects`]). A reader opens that listing first, then reads each file through a
//! [`file::RemoteFile`]: ranged GETs of exactly the bytes asked for, each sent with
//! `If-Match` on the listed ETag, so an object rewritten under a running job fails with
//! [`zrecord_core::error::IoErrorKind::Other`] naming it instead of mixing versions. Bytes
//! past the stored size read as zeros, as the sparse file's hole did.
//!
//! Async code lives here only: the futures run on one small tokio runtime of this crate
//! ([`runtime`]); callers block on them from their own threads (the loader's workers, rayon).

pub mod cache;
pub mod dir;
pub mod disk;
pub mod file;
mod gate;
pub mod objects;
mod pending;
mod per_process;
mod permits;
pub mod plan;
pub mod push;
pub mod sending;
mod spans;
mod throttle;
pub mod traffic;

use per_process::PerProcess;
pub(crate) use permits::read_permit;
pub use permits::MAX_READS_IN_FLIGHT;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme};
use url::Url;
use zrecord_core::error::{IoError, IoErrorKind};

/// How long a request that keeps failing with transient errors (5xx such as 503 SlowDown,
/// 408, 429, resets, refused connections, timeouts) is retried before it fails, unless the
/// `retry_deadline` storage option (seconds) says otherwise: long enough to ride out a
/// throttling burst, a failover or a restarting endpoint.
pub const RETRY_DEADLINE: Duration = Duration::from_secs(120);
/// The storage option that sets the retry deadline, in seconds (zrecord's own key; the
/// others are object_store's).
pub const RETRY_DEADLINE_KEY: &str = "retry_deadline";
/// First backoff; it doubles per attempt up to [`MAX_BACKOFF`], each wait drawn between
/// half and all of it (jitter, so clients that failed together do not retry together).
const BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The runtime every remote future runs on: two worker threads, started on first use in
/// each process (a forked child starts its own: [`per_process`]).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: PerProcess<tokio::runtime::Runtime> = PerProcess::new();
    RT.get(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("zrecord-remote")
            .enable_all()
            .build()
            .expect("the remote I/O runtime starts (threads and a timer)")
    })
}

/// True when `path` names an object store location rather than a local path.
pub fn is_url(path: &str) -> bool {
    ["s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://", "azure://", "http://", "https://", "memory://"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// What a remote dataset's reads cost so far (shared by every file of it).
#[derive(Debug, Default)]
pub struct RemoteStats {
    /// GET requests sent (retries included).
    pub requests: AtomicU64,
    /// Bytes received.
    pub bytes: AtomicU64,
    /// Requests sent again after a transient failure.
    pub retries: AtomicU64,
    /// Reads served from bytes already fetched.
    pub hits: AtomicU64,
    /// Requests sent and not answered yet.
    pub in_flight: AtomicU64,
    /// The most requests that were ever in flight at once.
    pub most_in_flight: AtomicU64,
    /// Reads that waited more than [`STALL`] for bytes still on their way: a reader
    /// (a loader worker) held up by the network.
    pub stalls: AtomicU64,
}

/// How long a read may wait for bytes in flight before it counts as a stall: longer than a
/// busy machine's scheduling delays, shorter than a far store's round trip.
pub const STALL: Duration = Duration::from_millis(5);

/// A snapshot of [`RemoteStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteCounts {
    /// GET requests sent (retries included).
    pub requests: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Requests sent again after a transient failure.
    pub retries: u64,
    /// Reads served from bytes already fetched.
    pub hits: u64,
    /// Ranges read from the cache directory instead of the network.
    pub disk_hits: u64,
    /// Bytes read from the cache directory instead of the network.
    pub disk_bytes: u64,
    /// The most requests that were in flight at once.
    pub most_in_flight: u64,
    /// Reads held up more than [`STALL`] by bytes still on their way.
    pub stalls: u64,
}

impl RemoteStats {
    /// The counts now.
    pub fn counts(&self) -> RemoteCounts {
        RemoteCounts {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            most_in_flight: self.most_in_flight.load(Ordering::Relaxed),
            stalls: self.stalls.load(Ordering::Relaxed),
            ..RemoteCounts::default()
        }
    }
}

/// Locks `m`, taking the data of a poisoned lock as it is (a reader that panicked leaves
/// counts and ranges that are still whole).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Maps an I/O error on `path` to one naming `what` was done to it.
pub(crate) fn io<'a>(path: &'a std::path::Path, what: &str) -> impl Fn(std::io::Error) -> IoError + 'a {
    let what = what.to_owned();
    move |e| IoError::from_std(e, format!("{what} {}", path.display()))
}

/// A prefix in an object store, with the client that reads it and the counts of its reads.
#[derive(Clone)]
pub struct Remote {
    store: Arc<dyn ObjectStore>,
    /// The prefix, without a trailing separator.
    prefix: ObjectPath,
    /// The URL as given (without a trailing `/`), for messages.
    url: String,
    stats: Arc<RemoteStats>,
    /// Round-trip time and transfer rate as measured: `(seconds of the quickest recent
    /// request, bytes per second of the fastest)`.
    timing: Arc<std::sync::Mutex<(f64, f64)>>,
    /// How long transient failures of one request are retried ([`RETRY_DEADLINE`]).
    deadline: Duration,
    /// Until when the server asked requests to wait (`Retry-After`, `throttle.rs`).
    throttle: Arc<throttle::Throttle>,
    /// How many record reads the store gets at once (`gate.rs`).
    gate: Arc<gate::Gate>,
}

/// Largest gap [`Remote::merge_gap`] ever spans.
pub(crate) const MAX_GAP: u64 = 4 << 20;

/// A store whose round trip is shorter than this (seconds) is asked from the thread that
/// reads, not from the runtime's: handing a request to a runtime thread and waking the
/// reader with its answer took 25-30 us here (spawn, then wait on the answer's slot), and
/// a store that answers quicker than that is waited for longest in the hand-off. Only a
/// store in memory answers that fast (a network store's quickest round trip is a
/// fraction of a millisecond on the same host); see [`asked_inline`].
pub(crate) const INLINE_ROUND_TRIP: f64 = 20e-6;

/// Whether a store whose quickest recent round trip is `round_trip` seconds (`None`: not
/// measured yet) is asked from the reading thread: a read that misses sends its requests
/// and waits for them there, and a loader does not announce batches ahead, since nothing
/// is gained by asking early what comes back sooner than a hand-off to another thread.
/// (A cache of a tenth of the dataset, one request per record, at memory speed: the
/// runtime thread, the sampler's announcements and the wakes between them took about a
/// quarter of its CPU, and it read 0.645-0.675x of a whole cache's samples/s; asked from
/// the workers, 0.69-0.72x.)
pub(crate) fn asked_inline(round_trip: Option<f64>) -> bool {
    round_trip.is_some_and(|t| t < INLINE_ROUND_TRIP)
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish_non_exhaustive()
    }
}

fn invalid(what: String) -> IoError {
    IoError::new(IoErrorKind::Other, "open", what)
}

impl Remote {
    /// The location `url` (`s3://bucket/prefix`, `gs://...`, `az://container/...`,
    /// `https://...`, `memory://...` for tests), configured by `options` (object_store's
    /// configuration keys, such as `aws_endpoint`, `aws_access_key_id`, `aws_allow_http`,
    /// `google_service_account`, `azure_storage_account_name`) over the usual environment
    /// variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`). An unknown key is an error.
    pub fn open(url: &str, options: &[(String, String)]) -> Result<Remote, IoError> {
        let (deadline, options) = retry_deadline(url, options)?;
        let throttle = Arc::new(throttle::Throttle::default());
        let mut remote = Self::open_store(url, &options, &throttle)?;
        remote.deadline = deadline;
        remote.throttle = throttle;
        Ok(remote)
    }

    fn open_store(
        url: &str,
        options: &[(String, String)],
        throttle: &Arc<throttle::Throttle>,
    ) -> Result<Remote, IoError> {
        let trimmed = url.trim_end_matches('/');
        let parsed = Url::parse(trimmed).map_err(|e| invalid(format!("{url} is not a URL: {e}")))?;
        if parsed.scheme() == "memory" {
            // memory://NAME/prefix: an in-memory store per NAME, for tests and benchmarks;
            // `?latency_ms=N` puts N ms before every GET (object_store's ThrottledStore), a
            // far object store's round trip without a network.
            let prefix = ObjectPath::parse(parsed.path()).map_err(|e| invalid(format!("{url}: {e}")))?;
            let mut store = memory_store(parsed.host_str().unwrap_or(""));
            for (key, value) in parsed.query_pairs() {
                let ms: u64 = match (key.as_ref(), value.parse()) {
                    ("latency_ms", Ok(ms)) => ms,
                    _ => return Err(invalid(format!("{url}: memory:// takes only ?latency_ms=N"))),
                };
                let wait = object_store::throttle::ThrottleConfig {
                    wait_get_per_call: Duration::from_millis(ms),
                    ..Default::default()
                };
                store = Arc::new(object_store::throttle::ThrottledStore::new(store, wait));
            }
            let shown = trimmed.split('?').next().unwrap_or(trimmed);
            return Ok(Remote::new(store, prefix, shown));
        }
        let (scheme, path) =
            ObjectStoreScheme::parse(&parsed).map_err(|e| invalid(format!("{url}: not an object store URL ({e})")))?;
        let prefix = ObjectPath::parse(path).map_err(|e| invalid(format!("{url}: {e}")))?;
        let unknown =
            |key: &str, kind: &str| invalid(format!("storage option {key:?} is not one of object_store's {kind} keys"));
        // Transient failures are retried here, counted (see `get`); the client's own
        // retries would hide them.
        let no_retry = object_store::RetryConfig { max_retries: 0, ..Default::default() };
        // Each builder: the environment's settings, the URL, no retries of its own, an HTTP
        // client that notes Retry-After, then the caller's options, every key checked
        // against the builder's own key list.
        macro_rules! build {
            ($builder:expr, $kind:literal) => {{
                let mut b =
                    $builder.with_retry(no_retry).with_http_connector(throttle::Heeded { throttle: throttle.clone() });
                for (k, v) in options {
                    let key = k.to_ascii_lowercase().parse().map_err(|_| unknown(k, $kind))?;
                    b = b.with_config(key, v.clone());
                }
                Arc::new(b.build().map_err(|e| invalid(format!("{url}: {e}")))?) as Arc<dyn ObjectStore>
            }};
        }
        let store: Arc<dyn ObjectStore> = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                build!(object_store::aws::AmazonS3Builder::from_env().with_url(trimmed), "S3")
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                build!(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(trimmed), "GCS")
            }
            ObjectStoreScheme::MicrosoftAzure => {
                build!(object_store::azure::MicrosoftAzureBuilder::from_env().with_url(trimmed), "Azure")
            }
            ObjectStoreScheme::Http => {
                let base = &parsed[..url::Position::BeforePath];
                build!(object_store::http::HttpBuilder::new().with_url(base), "HTTP client")
            }
            other => return Err(invalid(format!("{url}: {other:?} locations are not supported; give a local path"))),
        };
        Ok(Remote::new(store, prefix, trimmed))
    }

    fn new(store: Arc<dyn ObjectStore>, prefix: ObjectPath, url: &str) -> Remote {
        Remote {
            store,
            prefix,
            url: url.to_owned(),
            stats: Arc::new(RemoteStats::default()),
            timing: Arc::new(std::sync::Mutex::new((f64::INFINITY, 0.0))),
            deadline: RETRY_DEADLINE,
            throttle: Arc::default(),
            gate: Arc::default(),
        }
    }

    /// The gate record reads of this store pass (`gate.rs`).
    pub(crate) fn gate(&self) -> &Arc<gate::Gate> {
        &self.gate
    }

    /// Records a GET of `bytes` that took `took`.
    pub(crate) fn observe(&self, bytes: u64, took: Duration) {
        let t = took.as_secs_f64().max(1e-6);
        let mut timing = self.timing.lock().unwrap_or_else(|p| p.into_inner());
        // Old extremes fade (5% per request), so a link that changes is followed.
        timing.0 = (timing.0 * 1.05).min(t);
        timing.1 = (timing.1 * 0.95).max(bytes as f64 / t);
    }

    /// The quickest recent request's time, in seconds (`None` before the first): about one
    /// round trip to the store.
    pub fn round_trip(&self) -> Option<f64> {
        let (latency, _) = *self.timing.lock().unwrap_or_else(|p| p.into_inner());
        latency.is_finite().then_some(latency)
    }

    /// Whether requests to this store are sent from the reading thread ([`asked_inline`]).
    pub(crate) fn answers_inline(&self) -> bool {
        asked_inline(self.round_trip())
    }

    /// Bytes between two wanted ranges worth reading rather than asking for separately:
    /// what the link moves in one round trip (the quickest request's time times the
    /// fastest rate seen), up to 4 MiB; 0 until a request was measured.
    pub fn merge_gap(&self) -> u64 {
        let (latency, rate) = *self.timing.lock().unwrap_or_else(|p| p.into_inner());
        if !latency.is_finite() {
            return 0;
        }
        ((latency * rate) as u64).min(MAX_GAP)
    }

    /// The URL of this prefix.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The counts of this location's reads (and of every [`Remote::child`] of it).
    pub fn stats(&self) -> &Arc<RemoteStats> {
        &self.stats
    }

    /// The prefix `self/name` (a shard or field directory), sharing the client and counts.
    pub fn child(&self, name: &str) -> Remote {
        Remote {
            store: self.store.clone(),
            prefix: self.path(name),
            url: format!("{}/{name}", self.url),
            stats: self.stats.clone(),
            timing: self.timing.clone(),
            deadline: self.deadline,
            throttle: self.throttle.clone(),
            gate: self.gate.clone(),
        }
    }

    /// The object `name` under this prefix (`name` may hold `/`).
    pub(crate) fn path(&self, name: &str) -> ObjectPath {
        let mut p = self.prefix.clone();
        for part in name.split('/').filter(|s| !s.is_empty()) {
            p = p.clone().join(part);
        }
        p
    }

    /// The URL of object `name`, for messages.
    pub fn shown(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// Writes object `name` whole (small objects: listings, side files); returns its ETag.
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<Option<String>, IoError> {
        let target = self.path(name);
        let body = bytes::Bytes::from(bytes);
        let put = self.block(self.retrying(&format!("write {}", self.shown(name)), || {
            let (client, target, body) = (self.store.clone(), target.clone(), body.clone());
            async move { client.put(&target, object_store::PutPayload::from(body)).await }
        }))?;
        Ok(put.e_tag)
    }

    /// Deletes object `name`; one that is not there counts as deleted.
    pub fn delete(&self, name: &str) -> Result<(), IoError> {
        let target = self.path(name);
        self.block(self.retrying(&format!("delete {}", self.shown(name)), || {
            let (client, target) = (self.store.clone(), target.clone());
            async move {
                match client.delete(&target).await {
                    Err(object_store::Error::NotFound { .. }) => Ok(()),
                    other => other,
                }
            }
        }))
    }

    /// Every object under this prefix, at any depth: its name relative to the prefix
    /// (`/`-separated), its size, and when it was last written. One listing request per
    /// thousand objects (the store's page), each retried as a read is.
    pub fn list_all(&self) -> Result<Vec<Stored>, IoError> {
        use futures::TryStreamExt;
        let what = format!("list {}", self.url);
        let objects: Vec<object_store::ObjectMeta> = self.block(self.retrying(&what, || {
            let (client, prefix) = (self.store.clone(), self.prefix.clone());
            async move { client.list(Some(&prefix)).try_collect().await }
        }))?;
        let base: Vec<_> = self.prefix.parts().collect();
        Ok(objects
            .into_iter()
            .filter_map(|meta| {
                let parts: Vec<_> = meta.location.parts().collect();
                let rel = parts.get(base.len()..)?.iter().map(|p| p.as_ref()).collect::<Vec<&str>>().join("/");
                let modified = std::time::SystemTime::UNIX_EPOCH
                    + Duration::from_millis(u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0));
                Some(Stored { name: rel, size: meta.size, modified })
            })
            .collect())
    }

    pub(crate) fn client(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Runs `attempt` until it succeeds, fails for good (a failure that cannot pass: 4xx
    /// but 408 and 429, a configuration error), or keeps failing transiently past the retry
    /// deadline; each retry waits a jittered backoff (doubling from 50 ms up to 5 s) and is
    /// counted. The caller waits meanwhile: a loader's place in its stream does not move.
    pub(crate) async fn retrying<T, F, Fut>(&self, what: impl std::fmt::Display, attempt: F) -> Result<T, IoError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        self.retrying_from(std::time::Instant::now(), what, attempt).await
    }

    /// [`Remote::retrying`], its deadline counted from `began` (the caller read the clock
    /// already).
    pub(crate) async fn retrying_from<T, F, Fut>(
        &self,
        began: std::time::Instant,
        what: impl std::fmt::Display,
        mut attempt: F,
    ) -> Result<T, IoError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        let mut wait = BACKOFF;
        for attempts in 1u64.. {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let now = self.stats.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            self.stats.most_in_flight.fetch_max(now, Ordering::Relaxed);
            let answer = attempt().await;
            self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
            let e = match answer {
                Ok(v) => return Ok(v),
                Err(e) if transient(&e) => e,
                Err(e) => return Err(io_error(e, &what.to_string())),
            };
            // The server's Retry-After, when it gave one and it is longer than the backoff.
            let asked = self.throttle.remaining();
            let pause = jittered(wait).max(asked);
            if began.elapsed() + pause > self.deadline {
                let mut err = io_error(e, &what.to_string());
                let hint = match asked.is_zero() {
                    true => String::new(),
                    false => format!("; the server asked to wait {:.0} s more (Retry-After)", asked.as_secs_f64()),
                };
                err.message = format!(
                    "{} (gave up after {attempts} attempts over {:.1} s: the retry deadline is {} s{hint}; \
                     set storage option {RETRY_DEADLINE_KEY} to wait longer)",
                    err.message,
                    began.elapsed().as_secs_f64(),
                    self.deadline.as_secs_f64()
                );
                return Err(err);
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(pause).await;
            wait = (wait * 2).min(MAX_BACKOFF);
        }
        unreachable!("attempts never run out before the deadline does")
    }

    /// Blocks on `fut` on the remote runtime.
    pub(crate) fn block<T>(&self, fut: impl std::future::Future<Output = T>) -> T {
        runtime().block_on(fut)
    }
}

/// An object found by [`Remote::list_all`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its name under the listed prefix, `/`-separated.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, as the store says.
    pub modified: std::time::SystemTime,
}

/// A wait drawn between half and all of `wait`.
fn jittered(wait: Duration) -> Duration {
    let fraction = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    wait.mul_f64(0.5 + 0.5 * fraction)
}

/// 64 unpredictable bits: the process's random hasher keys over the clock and the process
/// id (jitter, write tags; nothing that needs a cryptographic source).
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish()
}

/// The retry deadline `options` set ([`RETRY_DEADLINE_KEY`], seconds) and the options left
/// for object_store.
fn retry_deadline(url: &str, options: &[(String, String)]) -> Result<(Duration, Vec<(String, String)>), IoError> {
    let mut deadline = RETRY_DEADLINE;
    let mut rest = Vec::with_capacity(options.len());
    for (k, v) in options {
        if !k.eq_ignore_ascii_case(RETRY_DEADLINE_KEY) {
            rest.push((k.clone(), v.clone()));
            continue;
        }
        let seconds: f64 = v.trim().trim_end_matches('s').parse().map_err(|_| {
            invalid(format!("{url}: storage option {RETRY_DEADLINE_KEY}={v:?} is not a number of seconds"))
        })?;
        if !(0.0..=86_400.0).contains(&seconds) {
            return Err(invalid(format!("{url}: {RETRY_DEADLINE_KEY} must be 0 to 86400 seconds, got {v}")));
        }
        deadline = Duration::from_secs_f64(seconds);
    }
    Ok((deadline, rest))
}

/// In-memory stores for tests, one per name, alive for the process.
type MemoryStores = std::sync::Mutex<std::collections::HashMap<String, Arc<dyn ObjectStore>>>;

/// The stores behind `memory://NAME/...`, one per NAME, for the life of the process.
fn memory_stores() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, Arc<dyn ObjectStore>>> {
    static STORES: OnceLock<MemoryStores> = OnceLock::new();
    STORES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

fn memory_store(name: &str) -> Arc<dyn ObjectStore> {
    memory_stores().entry(name.to_owned()).or_insert_with(|| Arc::new(object_store::memory::InMemory::new())).clone()
}

/// Puts `store` behind `memory://NAME/...` for what opens it from now on: a test's own store
/// (one that holds or fails requests) under the URLs the product opens.
#[doc(hidden)]
pub fn serve_memory(name: &str, store: Arc<dyn ObjectStore>) {
    memory_stores().insert(name.to_owned(), store);
}

/// Whether a failure may pass if the request is sent again.
fn transient(e: &object_store::Error) -> bool {
    match e {
        object_store::Error::Generic { source, .. } => {
            let text = format!("{source:?} {source}").to_ascii_lowercase();
            // A request the client could not build (an http:// endpoint without
            // aws_allow_http, say) or a destination it refuses (the cloud metadata address,
            // tried when no credentials are set) fails the same way every time.
            if text.contains("builder error") || text.contains("denied destination") || instance_credentials(&text) {
                return false;
            }
            // 4xx answers (but 408 and 429) are the request's fault, and stay. The status is
            // read where the client writes it, never from digits elsewhere (a port, a size).
            let status = ["status code: ", "status: ", "client error ("]
                .iter()
                .find_map(|tag| text.find(tag).map(|at| &text[at + tag.len()..]))
                .and_then(|rest| rest.get(..3))
                .and_then(|digits| digits.parse::<u16>().ok());
            !matches!(status, Some(code) if (400..500).contains(&code) && code != 408 && code != 429)
        }
        _ => false,
    }
}

/// An object_store error as the store's I/O error, naming what was being done.
pub(crate) fn io_error(e: object_store::Error, what: &str) -> IoError {
    let kind = match &e {
        object_store::Error::NotFound { .. } => IoErrorKind::NotFound,
        object_store::Error::Precondition { .. } => IoErrorKind::Other,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            IoErrorKind::PermissionDenied
        }
        _ => IoErrorKind::Other,
    };
    let message = match &e {
        object_store::Error::Precondition { .. } => CHANGED.to_owned(),
        other => with_hint(other.to_string()),
    };
    IoError::new(kind, what, message)
}

/// A read of an object whose ETag is not the one its listing recorded.
pub(crate) const CHANGED: &str = "the object changed after the listing recorded it (its ETag differs), and a job \
     never mixes versions: if zrecord changed the dataset meanwhile (a push, an append, a delete), open it again; if \
     something else overwrote the object, push the dataset again to repair it";

/// Whether `lower` (an error's text in lower case) is a failure to fetch credentials from the
/// cloud's instance metadata service: what the client does when none are configured. It
/// fails the same way on every retry off the cloud.
fn instance_credentials(lower: &str) -> bool {
    lower.contains("169.254.169.254") || lower.contains("/latest/api/token") || lower.contains("/latest/meta-data")
}

/// `message`, with what to do when it is one of the client's own failures that do not say
/// (found by their words: object_store gives them no variant of their own).
fn with_hint(message: String) -> String {
    let lower = message.to_ascii_lowercase();
    if lower.contains("nosuchbucket") {
        // S3 names it: <BucketName>NAME</BucketName>.
        let name = message.split("<BucketName>").nth(1).and_then(|rest| rest.split('<').next()).unwrap_or("");
        return format!(
            "the bucket {name:?} does not exist (the server said NoSuchBucket): create it, or check the URL ({message})"
        );
    }
    let hint = if lower.contains("builder error") && lower.contains("http://") {
        "the endpoint is plain http: set the storage option aws_allow_http to \"true\" (or use https)"
    } else if instance_credentials(&lower) || lower.contains("denied destination") {
        "no credentials were found, so the client asked the cloud's instance metadata service, which is not \
         reachable here: set aws_access_key_id and aws_secret_access_key in storage_options (or \
         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment)"
    } else {
        return message;
    };
    format!("{hint} ({message})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic { store: "S3", source: text.to_owned().into() }
    }

    #[test]
    fn a_missing_bucket_is_named() {
        let raw = "Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?><Error>\
                   <Code>NoSuchBucket</Code><BucketName>raw-data</BucketName></Error>";
        let message = with_hint(raw.to_owned());
        assert!(message.starts_with("the bucket \"raw-data\" does not exist"), "{message}");
        assert!(message.ends_with(&format!("({raw})")));
    }

    #[test]
    fn failures_that_cannot_pass_are_not_retried() {
        assert!(transient(&generic("Server returned non-2xx status code: 503 Service Unavailable: SlowDown")));
        assert!(transient(&generic("Server returned non-2xx status code: 429 Too Many Requests")));
        assert!(transient(&generic("error sending request for url (http://127.0.0.1:40812/b/k)")));
        assert!(!transient(&generic("Server returned non-2xx status code: 400 Bad Request")));
        assert!(!transient(&generic("HTTP error: builder error")));
        assert!(!transient(&generic("resolve_deny: denied destination 169.254.169.254")));
        // No credentials, off the cloud: the metadata service is not there, on every retry.
        let imds = "Error performing PUT http://127.0.0.1:9/latest/api/token - error sending request";
        assert!(!transient(&generic(imds)));
        assert!(with_hint(imds.into()).starts_with("no credentials were found"));
        assert!(with_hint("HTTP error: builder error for http://x".into()).contains("aws_allow_http"));
        assert_eq!(with_hint("error sending request".into()), "error sending request");
        // A port or a length that happens to hold 408 or 4xx digits says nothing.
        assert!(transient(&generic("error sending request for url (http://127.0.0.1:40829/b/k): 4096 bytes")));
    }

    #[test]
    fn the_retry_deadline_is_a_storage_option_in_seconds() {
        let opts = |v: &str| vec![("RETRY_DEADLINE".to_owned(), v.to_owned()), ("aws_region".into(), "x".into())];
        let (d, rest) = retry_deadline("s3://b", &opts("2.5")).unwrap();
        assert_eq!((d, rest.len()), (Duration::from_millis(2500), 1));
        assert_eq!(retry_deadline("s3://b", &opts("90s")).unwrap().0, Duration::from_secs(90));
        assert_eq!(retry_deadline("s3://b", &[]).unwrap().0, RETRY_DEADLINE);
        assert!(retry_deadline("s3://b", &opts("soon")).unwrap_err().to_string().contains("not a number of seconds"));
        assert!(retry_deadline("s3://b", &opts("-1")).is_err());
        for _ in 0..100 {
            let w = jittered(Duration::from_millis(100));
            assert!(w >= Duration::from_millis(50) && w <= Duration::from_millis(100), "{w:?}");
        }
    }

    #[test]
    fn a_request_that_keeps_failing_gives_up_at_the_deadline_naming_it() {
        let remote = Remote::open("memory://deadline/x", &[("retry_deadline".into(), "1".into())]).unwrap();
        let began = std::time::Instant::now();
        let calls = std::sync::atomic::AtomicU64::new(0);
        let err = remote
            .block(remote.retrying("read memory://deadline/x/0.zr", || {
                calls.fetch_add(1, Ordering::Relaxed);
                async { Err::<(), _>(generic("error sending request: connection refused")) }
            }))
            .unwrap_err();
        let took = began.elapsed();
        let n = calls.load(Ordering::Relaxed);
        // Gave up rather than retrying for ever; tried more than once (the first wait,
        // at most 50 ms, fits the deadline whatever the load).
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert!(n >= 2, "{n} attempts in {took:?}");
        let text = err.to_string();
        assert!(
            text.contains("memory://deadline/x/0.zr") && text.contains(&format!("gave up after {n} attempts")),
            "{text}"
        );
        assert!(text.contains("retry deadline is 1 s") && text.contains("retry_deadline"), "{text}");
        assert_eq!(remote.stats().counts().retries, n - 1);
        // A failure that cannot pass is not retried at all.
        calls.store(0, Ordering::Relaxed);
        let err = remote
            .block(remote.retrying("read", || {
                calls.fetch_add(1, Ordering::Relaxed);
                async { Err::<(), _>(generic("HTTP error: builder error")) }
            }))
            .unwrap_err();
        assert_eq!(calls.load(Ordering::Relaxed), 1, "{err}");
    }
}
