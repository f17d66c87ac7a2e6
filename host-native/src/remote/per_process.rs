//! Values bound to one process: the remote runtime and the read permits.
//!
//! A child forked from a process that read a remote dataset inherits those values without
//! the threads behind them: the runtime's workers and timer, and the requests holding
//! permits, do not exist in the child, so a future spawned there never ran and a read
//! waited forever (a remote dataset in a torch DataLoader worker, which forks by default on
//! Linux). [`PerProcess::get`] makes the value again in a process that did not make it.
//! The parent's copy is leaked in the child: dropping a runtime waits for its threads.
//!
//! A process is told apart by a count of forks bumped in the child by a `pthread_atfork`
//! handler, not by its pid: `get` runs on every remote read, and `getpid` is a system call.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, Once};

/// Forks into this process's line so far, plus one (0 means "not made" below).
static GENERATION: AtomicU32 = AtomicU32::new(1);

#[cfg(unix)]
extern "C" fn after_fork_child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// This process's generation; the first call installs the fork handler.
pub(crate) fn generation() -> u32 {
    static HOOKED: Once = Once::new();
    HOOKED.call_once(|| {
        // SAFETY: the handler is an `extern "C"` function with static lifetime that never
        // unwinds and only bumps an atomic, which is async-signal-safe as the child of a
        // multi-threaded fork requires.
        #[cfg(unix)]
        let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
        // Only ENOMEM is possible; a fork would then go unseen, as before this module.
        #[cfg(unix)]
        debug_assert_eq!(rc, 0);
    });
    GENERATION.load(Ordering::Acquire)
}

/// A value made on first use in each process (see the module docs).
pub(crate) struct PerProcess<T: 'static> {
    value: AtomicPtr<T>,
    /// The [`generation`] that made `value` (0: none yet).
    made_in: AtomicU32,
    making: Mutex<()>,
}

impl<T: 'static> PerProcess<T> {
    pub(crate) const fn new() -> Self {
        PerProcess { value: AtomicPtr::new(std::ptr::null_mut()), made_in: AtomicU32::new(0), making: Mutex::new(()) }
    }

    /// This process's value, made by `make` if this process has none yet.
    pub(crate) fn get(&'static self, make: impl FnOnce() -> T) -> &'static T {
        let now = generation();
        if let Some(value) = self.current(now) {
            return value;
        }
        let _one = self.making.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(value) = self.current(now) {
            return value; // another thread made it meanwhile
        }
        let made: &'static T = Box::leak(Box::new(make()));
        self.value.store(std::ptr::from_ref(made).cast_mut(), Ordering::Release);
        self.made_in.store(now, Ordering::Release);
        made
    }

    fn current(&self, now: u32) -> Option<&'static T> {
        if self.made_in.load(Ordering::Acquire) != now {
            return None;
        }
        let value = self.value.load(Ordering::Acquire);
        // SAFETY: `value` was stored (before `made_in`, which the Acquire load above saw) from
        // a `Box::leak`ed value that is never freed, so it is valid and shared for 'static.
        (!value.is_null()).then(|| unsafe { &*value })
    }
}

#[cfg(test)]
mod tests {
    use super::PerProcess;

    #[test]
    fn a_value_is_made_once_per_process() {
        static SLOT: PerProcess<u64> = PerProcess::new();
        let made = std::sync::atomic::AtomicU32::new(0);
        let a = SLOT.get(|| {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            7
        });
        let b = SLOT.get(|| unreachable!("made already in this process"));
        assert!(std::ptr::eq(a, b) && *a == 7);
        assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
