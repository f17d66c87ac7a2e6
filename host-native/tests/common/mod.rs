//! What several test suites share: an object store that holds reads in rounds, and the
//! ids of a dataset whose first field is an `<i8` id.

#![allow(dead_code)]

use std::sync::Arc;

/// An in-memory object store that holds every read until the test lets the reads that
/// have arrived go together: a round trip the test counts instead of timing it. A read
/// reads the store when it arrives and answers when let go, so reads held together all see
/// the store as it was before any of them was answered.
#[derive(Debug)]
pub struct Rounds {
    inner: Arc<object_store::memory::InMemory>,
    /// Only reads of objects whose name ends so are held (all when empty).
    only: &'static str,
    /// Reads that arrived, in every round so far.
    pub arrived: std::sync::Mutex<usize>,
    /// The name of the thread each GET ran on, in order ("unnamed" for a thread without).
    pub askers: std::sync::Mutex<Vec<String>>,
    came: std::sync::Condvar,
    /// How many rounds were let go.
    released: tokio::sync::watch::Sender<usize>,
}

impl std::fmt::Display for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rounds({})", self.inner)
    }
}

impl Rounds {
    /// Holds the reads of `inner`'s objects whose names end in `only` (every read if empty).
    pub fn new(inner: Arc<object_store::memory::InMemory>, only: &'static str) -> Rounds {
        let arrived = std::sync::Mutex::new(0);
        let released = tokio::sync::watch::channel(0).0;
        let askers = std::sync::Mutex::new(Vec::new());
        Rounds { inner, only, arrived, askers, came: std::sync::Condvar::new(), released }
    }

    /// A read of `location` arrives, and waits until the round it arrived in is let go.
    async fn hold(&self, location: &object_store::path::Path) {
        if !location.as_ref().ends_with(self.only) {
            return;
        }
        let round = *self.released.borrow();
        *self.arrived.lock().unwrap() += 1;
        self.came.notify_all();
        if round == usize::MAX {
            return;
        }
        let mut rx = self.released.subscribe();
        rx.wait_for(|r| *r > round).await.unwrap();
    }

    /// Waits until `total` reads have arrived since the store opened, then lets them go.
    pub fn release_when(&self, total: usize, what: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut arrived = self.arrived.lock().unwrap();
        while *arrived < total {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(
                !left.is_zero(),
                "{what}: {} reads of {total} came and no more: the rest wait on a reply",
                *arrived
            );
            arrived = self.came.wait_timeout(arrived, left).unwrap().0;
        }
        assert_eq!(*arrived, total, "{what}: more reads than expected in this round");
        drop(arrived);
        self.released.send_modify(|r| *r += 1);
    }

    /// Lets every read go, now and from now on.
    pub fn open_up(&self) {
        self.released.send_replace(usize::MAX);
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for Rounds {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_owned();
        self.askers.lock().unwrap().push(thread);
        let answer = self.inner.get_opts(location, options).await;
        self.hold(location).await;
        answer
    }

    async fn get_ranges(
        &self,
        location: &object_store::path::Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        let answer = self.inner.get_ranges(location, ranges).await;
        self.hold(location).await;
        answer
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Field 0 (`<i8`, one per sample) of every sample of `ds`, in order.
pub fn ids(ds: &zrecord::Dataset) -> Vec<i64> {
    let n = ds.len();
    let idx: Vec<u64> = (0..n).collect();
    let mut out = vec![0u8; n as usize * 8];
    ds.gather_fixed(0, &idx, &mut out, None, false).unwrap();
    out.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}
