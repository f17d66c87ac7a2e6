//! Values bound to one process: the remote runtime and the read permits.
//!
//! A child forked from a process that read a remote dataset inherits those values without
//! the threads behind them: the runtime's workers and timer, and the requests holding
//! permits, do not exist in the child, so a future spawned there never ran and a read
//! waited forever (a remote dataset in a torch DataLoader worker, which forks by default on
//! Linux). [`PerProcess::get`] makes the value again in a process that did not make it.
//! The parent's copy is leaked in the child: dropping a runtime waits for its threads.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

/// A value made on first use in each process (see the module docs).
pub(crate) struct PerProcess<T: 'static> {
    value: AtomicPtr<T>,
    /// The process that made `value` (0: none yet).
    pid: AtomicU32,
    making: Mutex<()>,
}

impl<T: 'static> PerProcess<T> {
    pub(crate) const fn new() -> Self {
        PerProcess { value: AtomicPtr::new(std::ptr::null_mut()), pid: AtomicU32::new(0), making: Mutex::new(()) }
    }

    /// This process's value, made by `make` if this process has none yet.
    pub(crate) fn get(&'static self, make: impl FnOnce() -> T) -> &'static T {
        let pid = std::process::id();
        if let Some(value) = self.current(pid) {
            return value;
        }
        let _one = self.making.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(value) = self.current(pid) {
            return value; // another thread made it meanwhile
        }
        let made: &'static T = Box::leak(Box::new(make()));
        self.value.store(std::ptr::from_ref(made).cast_mut(), Ordering::Release);
        self.pid.store(pid, Ordering::Release);
        made
    }

    fn current(&self, pid: u32) -> Option<&'static T> {
        if self.pid.load(Ordering::Acquire) != pid {
            return None;
        }
        let value = self.value.load(Ordering::Acquire);
        // SAFETY: `value` was stored (before `pid`, which the Acquire load above saw) from
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
