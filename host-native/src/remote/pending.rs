//! A fetched range's bytes, on their way or come ([`Pending`]): what a read waits on.
//!
//! A range used to be a shared future around a task of its own. With a cache far smaller
//! than the dataset each record is a request of its own, and a task, a boxed future and
//! a shared waker list per record cost more CPU than the bytes (a 10% cache at memory
//! speed read 0.3x of a whole cache's samples/s). Now one task sends all the ranges a
//! batch's announcement makes ([`super::sending::sending_together`]; a read that misses sends
//! its own at once) and fills each range's slot as its answer comes; a reader takes a slot that is filled without touching the runtime, and only a
//! reader that arrives early sleeps, on the slot's condition variable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use bytes::Bytes;
use zrecord_core::error::{IoError, IoErrorKind};

/// What a range's request answered.
pub(crate) type Answer = Result<Bytes, Arc<IoError>>;

/// One range's answer, set once (see the module docs).
#[derive(Debug)]
pub(crate) struct Pending {
    answer: OnceLock<Answer>,
    /// Whether a read took the answer (eviction tells the read-ahead's ranges by it).
    taken: AtomicBool,
    /// Readers asleep on `woken`.
    sleepers: Mutex<usize>,
    woken: Condvar,
    /// The process that made the slot ([`super::per_process::generation`]): a forked child
    /// inherits slots whose requests run only in the parent, and must not wait on them.
    made_in: u32,
}

impl Pending {
    /// A slot whose answer is still to come.
    pub(crate) fn new() -> Arc<Pending> {
        Arc::new(Pending {
            answer: OnceLock::new(),
            taken: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            woken: Condvar::new(),
            made_in: super::per_process::generation(),
        })
    }

    /// A slot answered already (bytes read from the cache directory).
    pub(crate) fn ready(answer: Answer) -> Arc<Pending> {
        let slot = Pending::new();
        slot.set(answer);
        slot
    }

    /// The answer, if it came.
    pub(crate) fn peek(&self) -> Option<&Answer> {
        self.answer.get()
    }

    /// Whether a read took the answer, or the range was dropped untaken ([`Pending::claim`]).
    pub(crate) fn taken(&self) -> bool {
        self.taken.load(Ordering::Relaxed)
    }

    /// Marks the range taken; true for the one call that found it untaken (a read that
    /// takes it, or the cache dropping it before any read did), which settles the cache's
    /// count of untaken bytes once.
    pub(crate) fn claim(&self) -> bool {
        !self.taken.swap(true, Ordering::Relaxed)
    }

    /// Whether no answer will ever come to this process: the request was sent by the
    /// process this one was forked from.
    pub(crate) fn orphaned(&self) -> bool {
        self.answer.get().is_none() && self.made_in != super::per_process::generation()
    }

    /// Sets the answer (a second one is ignored) and wakes the readers waiting for it.
    pub(crate) fn set(&self, answer: Answer) {
        if self.answer.set(answer).is_err() {
            return;
        }
        // A reader checks for the answer holding the lock, so once it is set and the lock
        // taken here, every reader that missed it is asleep and counted.
        let sleepers = self.sleepers.lock().unwrap_or_else(|p| p.into_inner());
        if *sleepers > 0 {
            self.woken.notify_all();
        }
    }

    /// The answer, waiting for it if it has not come.
    pub(crate) fn wait(&self) -> Answer {
        if let Some(answer) = self.answer.get() {
            return answer.clone();
        }
        let mut sleepers = self.sleepers.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(answer) = self.answer.get() {
                return answer.clone();
            }
            *sleepers += 1;
            sleepers = self.woken.wait(sleepers).unwrap_or_else(|p| p.into_inner());
            *sleepers -= 1;
        }
    }
}

/// Fills its slot with an error when dropped unanswered: a task that ends early (its
/// runtime shut down, a panic) leaves no reader waiting for ever.
pub(crate) struct Answering(pub(crate) Arc<Pending>);

impl Drop for Answering {
    fn drop(&mut self) {
        if self.0.peek().is_none() {
            let e = IoError::new(IoErrorKind::Other, "remote read", "the request was dropped before it was answered");
            self.0.set(Err(Arc::new(e)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_that_waits_is_woken_by_the_answer() {
        let slot = Pending::new();
        let reader = {
            let slot = Arc::clone(&slot);
            std::thread::spawn(move || slot.wait())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        slot.set(Ok(Bytes::from_static(b"abc")));
        assert_eq!(reader.join().unwrap().unwrap(), Bytes::from_static(b"abc"));
        assert_eq!(slot.wait().unwrap(), Bytes::from_static(b"abc"), "a late reader takes it without waiting");
    }

    #[test]
    fn a_request_dropped_unanswered_answers_with_an_error() {
        let slot = Pending::new();
        drop(Answering(Arc::clone(&slot)));
        let e = slot.wait().unwrap_err();
        assert!(e.message.contains("dropped before it was answered"), "{e}");
        // An answered slot keeps its answer.
        let slot = Pending::ready(Ok(Bytes::new()));
        drop(Answering(Arc::clone(&slot)));
        assert!(slot.wait().is_ok());
    }
}
