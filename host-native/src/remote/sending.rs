//! The send machinery: how a file's requests reach the store and come back.
//!
//! A [`super::file::RemoteFile`] decides which ranges to request and where each answer
//! goes (a `Pending` slot); this module sends them: `dispatch` hands a file's requests to
//! the remote runtime at once, to the batch being announced ([`sending_together`]: one
//! task, one wake of the runtime per batch), or back to a reading thread that sends them
//! itself (a store asked inline: `send_here`), and `fetch_range` is one ranged GET,
//! through the store's gate and a read permit, retried, checked against the listed
//! version and counted. It knows nothing of the cache or of the file's ranges.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use object_store::{GetOptions, GetRange};
use zrecord_core::error::{IoError, IoErrorKind};

use super::Remote;

/// Requests a reading thread sends and waits for itself, once it let go of the file's
/// ranges: those of a store asked inline ([`super::asked_inline`]).
pub(super) type Sends = futures::future::BoxFuture<'static, ()>;

/// Where a file's requests go ([`RemoteFile::to`](super::file::RemoteFile::to)).
pub(super) struct Target {
    pub(super) remote: Remote,
    pub(super) path: object_store::path::Path,
    /// The version listed, sent as `If-Match`.
    pub(super) etag: Option<String>,
    /// The file's URL, for errors.
    pub(super) shown: String,
}

/// When a file's requests go to the runtime.
#[derive(Clone, Copy)]
pub(super) enum Sending {
    /// At once.
    Now,
    /// At once, for a reader that waits for them: a store asked inline
    /// ([`super::asked_inline`]) gets them from the reading thread itself.
    ByReader,
    /// With the rest of the batch being announced ([`sending_together`]): nobody waits
    /// for them before the announcement ends.
    Together,
}

/// Sends `sends` and waits for their answers on this thread (a store asked inline:
/// [`super::asked_inline`]). A thread that drives an async runtime must not block on one:
/// there they go to the remote runtime as any other requests, and the read waits on its
/// slot.
pub(super) fn send_here(sends: Sends) {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => drop(super::runtime().spawn(sends)),
        Err(_) => super::runtime().block_on(sends),
    }
}

std::thread_local! {
    /// The sends of a [`sending_together`] call in progress on this thread.
    static TOGETHER: std::cell::RefCell<Option<Vec<futures::future::BoxFuture<'static, ()>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Hands `sends` (a file's requests, one future) to the remote runtime as `when` says, or,
/// for a reader of a store asked `inline`, back to the caller, to send once it let go of
/// the file's ranges ([`send_here`]).
pub(super) fn dispatch(
    sends: impl std::future::Future<Output = ()> + Send + 'static,
    when: Sending,
    inline: bool,
) -> Option<Sends> {
    match when {
        Sending::ByReader if inline => Some(futures::FutureExt::boxed(sends)),
        Sending::Now | Sending::ByReader => {
            drop(super::runtime().spawn(sends));
            None
        }
        Sending::Together => {
            spawn_sends(sends);
            None
        }
    }
}

/// Runs `sends` on the remote runtime: in the task of the [`sending_together`] call in
/// progress on this thread, if there is one, or in a task of its own.
fn spawn_sends(sends: impl std::future::Future<Output = ()> + Send + 'static) {
    use futures::FutureExt;
    let sends = TOGETHER.with(|t| match t.borrow_mut().as_mut() {
        Some(together) => {
            together.push(sends.boxed());
            None
        }
        None => Some(sends),
    });
    if let Some(sends) = sends {
        super::runtime().spawn(sends);
    }
}

/// Runs `announce` (a batch's announcements over many files) and sends the requests it
/// makes from one task: one wake of the runtime per batch rather than one per file (a
/// small cache's batch of 64 touched 16 files; the wakes were a tenth of its CPU).
pub fn sending_together<R>(announce: impl FnOnce() -> R) -> R {
    /// Spawns what was gathered, also when `announce` unwinds.
    struct Flush;
    impl Drop for Flush {
        fn drop(&mut self) {
            let Some(gathered) = TOGETHER.with(|t| t.borrow_mut().take()) else { return };
            if !gathered.is_empty() {
                super::runtime().spawn(futures::future::join_all(gathered));
            }
        }
    }
    // Only the outermost call sends; a nested one adds to it.
    let outer = TOGETHER.with(|t| {
        let mut t = t.borrow_mut();
        t.is_none().then(|| *t = Some(Vec::new())).is_some()
    });
    let _flush = outer.then_some(Flush);
    announce()
}

/// GETs `start..end` of the object at `path` (the version `etag`, when known), retried as
/// `remote` says, timed from the read permit on (waiting for one is not the store's
/// latency) and counted.
///
/// Asked `inline` (by a reading thread that waits for it: [`super::asked_inline`]), a
/// request passes neither the store's gate nor a read permit: the readers ask the store
/// themselves, a batch's records each, and the store answers before requests could queue
/// in it (if it slows down, its round trip grows and its requests go back through the
/// runtime, gate and permits). The gate's two locks a request, taken by every reading
/// thread at once, were a cost of their own.
pub(super) async fn fetch_range(
    remote: &Remote,
    path: &object_store::path::Path,
    etag: &Option<String>,
    shown: &str,
    start: u64,
    end: u64,
    inline: bool,
) -> Result<Bytes, IoError> {
    let (pass, _permit) = match inline {
        true => (None, None),
        false => (Some(remote.gate().enter().await), Some(super::read_permit().await)),
    };
    let began = std::time::Instant::now();
    // Spelled out only for an error: formatting it for every request of a small cache cost
    // as much as the in-memory store's answer.
    let what = ReadOf { shown, start, end };
    let (bytes, tag) = remote
        .retrying_from(began, &what, || {
            let options = GetOptions {
                range: Some(GetRange::Bounded(start..end)),
                if_match: etag.clone(),
                ..GetOptions::default()
            };
            let client = remote.client().clone();
            async move {
                let mut got = client.get_opts(path, options).await?;
                let tag = got.meta.e_tag.take();
                Ok((got.bytes().await?, tag))
            }
        })
        .await?;
    // A store that ignores If-Match still says which version it sent.
    if let (Some(want), Some(got)) = (etag, &tag) {
        if want != got {
            return Err(IoError::new(IoErrorKind::Other, what.to_string(), super::CHANGED));
        }
    }
    if bytes.len() as u64 != end - start {
        return Err(IoError::new(
            IoErrorKind::UnexpectedEof,
            what.to_string(),
            format!("{} bytes came back: the object is shorter than its listing says", bytes.len()),
        ));
    }
    let took = began.elapsed();
    if let Some(pass) = pass {
        pass.answered(bytes.len() as u64, took);
    }
    remote.stats().bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    remote.observe(bytes.len() as u64, took);
    Ok(bytes)
}

/// What a ranged read is, for its errors: "read FILE bytes START..END".
struct ReadOf<'a> {
    shown: &'a str,
    start: u64,
    end: u64,
}

impl std::fmt::Display for ReadOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "read {} bytes {}..{}", self.shown, self.start, self.end)
    }
}
