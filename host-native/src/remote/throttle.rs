//! A server's own request to slow down: the `Retry-After` of a 429 or 503 answer (S3's
//! `SlowDown`, a throttling proxy, Azure's and GCS's rate limits), honoured by every retry
//! at the location.
//!
//! object_store turns such an answer into an error that keeps its status and body but not
//! its headers, so the header is read one layer below: the HTTP client object_store builds
//! is wrapped ([`Heeding`]) and notes, per location, the latest instant the server asked
//! requests to wait for ([`Throttle`]). [`super::Remote::retrying`] then waits at least that
//! long before the next attempt, instead of its own backoff when that is shorter. The hint
//! applies to every request of the location: a server that throttles one request throttles
//! the client. Only the delay-seconds form is read (what S3-compatible servers, GCS and
//! Azure send); an HTTP date leaves the usual backoff.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

/// The longest wait one `Retry-After` is taken for; the retry deadline still decides
/// when to give up.
const LONGEST_HINT: Duration = Duration::from_secs(300);

/// The instant, per location, before which the server asked not to be sent requests.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    /// Milliseconds after [`epoch`] (0: no request to wait).
    until_ms: AtomicU64,
}

/// The process's reference instant for [`Throttle`]'s millisecond counts.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Throttle {
    /// The server asked for `wait` from now.
    pub(crate) fn note(&self, wait: Duration) {
        let until = epoch().elapsed() + wait.min(LONGEST_HINT);
        self.until_ms.fetch_max(until.as_millis() as u64, Ordering::Relaxed);
    }

    /// How much longer the server asked requests to wait (zero when it did not).
    pub(crate) fn remaining(&self) -> Duration {
        let until = Duration::from_millis(self.until_ms.load(Ordering::Relaxed));
        until.saturating_sub(epoch().elapsed())
    }
}

/// `Retry-After`'s delay-seconds form.
fn delay_seconds(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Builds object_store's usual HTTP client, wrapped to read `Retry-After`.
#[derive(Debug)]
pub(crate) struct Heeded {
    pub(crate) throttle: Arc<Throttle>,
}

impl HttpConnector for Heeded {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Heeding { inner, throttle: self.throttle.clone() }))
    }
}

/// The HTTP client with the `Retry-After` of its 429 and 503 answers noted.
#[derive(Debug)]
struct Heeding {
    inner: HttpClient,
    throttle: Arc<Throttle>,
}

#[async_trait::async_trait]
impl HttpService for Heeding {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let answer = self.inner.execute(req).await?;
        if matches!(answer.status().as_u16(), 429 | 503) {
            let hint = answer.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(delay_seconds);
            if let Some(wait) = hint {
                self.throttle.note(wait);
            }
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_keep_the_latest_instant_and_run_down() {
        let t = Throttle::default();
        assert_eq!(t.remaining(), Duration::ZERO);
        t.note(Duration::from_secs(3));
        t.note(Duration::from_secs(1));
        let left = t.remaining();
        assert!(left > Duration::from_millis(2500) && left <= Duration::from_secs(3), "{left:?}");
        t.note(Duration::from_secs(100_000));
        assert!(t.remaining() <= LONGEST_HINT);
        assert_eq!(delay_seconds(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(delay_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
