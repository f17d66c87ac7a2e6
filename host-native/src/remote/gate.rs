//! How many record reads one store gets at once ([`Gate`]): as many as it answers without
//! queueing them.
//!
//! A loader announces the batches ahead, and a small cache's announcement is one request
//! per record: at the start of an epoch, hundreds to thousands at once. A store that
//! answers a few hundred requests a second (a small S3-compatible server, a throttled
//! bucket) queued them all, and the first batch waited behind the whole window: 15 s and
//! 1,829 requests in flight for its first 64 records against a local server answering
//! 170 a second. The gate lets requests out in the order they were asked for, and only as
//! many as the store answers at about its quickest: while the latency of recent requests
//! stays near the quickest seen, the limit grows by one per answer (doubling every round
//! trip); when it climbs above, requests are queueing in the store, and the limit shrinks
//! by a hundredth per answer (only answers up to 1 MiB tell latency: a large range takes
//! longer by its size, not by a queue). A store whose latency does not grow with load (an object
//! store's front end, the in-memory store at any set latency) opens the gate to
//! [`MAX_OPEN`]; the process-wide limit on reads in flight (`permits.rs`) still holds.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// The fewest reads the gate lets out at once.
pub(crate) const MIN_OPEN: f64 = 8.0;
/// The most (the process-wide limit on reads in flight is the same).
pub(crate) const MAX_OPEN: f64 = super::MAX_READS_IN_FLIGHT as f64;
/// Where a gate starts: a batch of direct reads (`ds[list]` of a few hundred samples)
/// goes out in one round trip before anything is measured.
const FIRST_OPEN: f64 = 256.0;
/// Recent latency above `QUEUEING` times the quickest (plus [`SLACK`]) means requests wait
/// in the store.
const QUEUEING: f64 = 3.0;
/// Latency differences below this are noise, not queueing.
const SLACK: f64 = 0.002;
/// Answers up to this size tell the store's latency (a table's block among them, read
/// first); larger ones only give their place back.
const LATENCY_BYTES: u64 = 1 << 20;

#[derive(Debug)]
struct State {
    /// Reads let out and not answered.
    open: usize,
    /// How many may be.
    limit: f64,
    /// Reads waiting, in the order they asked.
    waiting: VecDeque<oneshot::Sender<()>>,
    /// The quickest answer's latency, seconds, fading upward a little per answer.
    quickest: f64,
    /// Recent answers' latency, smoothed.
    recent: f64,
    /// The process whose reads these are ([`super::per_process::generation`]): a forked
    /// child inherits the parent's count of reads out, whose answers never come to it.
    made_in: u32,
}

impl State {
    fn new() -> State {
        State {
            open: 0,
            limit: FIRST_OPEN,
            waiting: VecDeque::new(),
            quickest: f64::INFINITY,
            recent: 0.0,
            made_in: super::per_process::generation(),
        }
    }
}

/// The gate of one store (shared by every file of a dataset; see the module docs).
#[derive(Debug)]
pub(crate) struct Gate {
    state: Mutex<State>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { state: Mutex::new(State::new()) }
    }
}

/// A read let through the gate: its answer (or its drop) lets the next one out.
pub(crate) struct Pass {
    gate: Arc<Gate>,
    /// The answer's time and bytes, once it came.
    answered: Option<(Duration, u64)>,
}

impl Gate {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.made_in != super::per_process::generation() {
            // A forked child starts with a gate of its own.
            *state = State::new();
        }
        state
    }

    /// Waits for the read's turn.
    pub(crate) async fn enter(self: &Arc<Self>) -> Pass {
        let turn = {
            let mut state = self.state();
            if state.waiting.is_empty() && (state.open as f64) < state.limit {
                state.open += 1;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                state.waiting.push_back(tx);
                Some(rx)
            }
        };
        if let Some(rx) = turn {
            let mut waiting = Waiting { gate: self, rx: Some(rx) };
            // A sender dropped without sending is a gate torn down: go on regardless.
            let _ = waiting.rx.as_mut().expect("set above").await;
            waiting.rx = None;
        }
        Pass { gate: Arc::clone(self), answered: None }
    }

    /// How many reads may be out at once now.
    #[cfg(test)]
    fn limit(&self) -> f64 {
        self.state().limit
    }

    /// Lets one read out (or, with none waiting, closes its place).
    fn leave(&self, answer: Option<(Duration, u64)>) {
        let mut state = self.state();
        // Only a small answer's time is its latency: a 16 MiB range takes longer than a
        // 12 KiB one without any queue.
        if let Some((took, _)) = answer.filter(|&(_, bytes)| bytes <= LATENCY_BYTES) {
            let t = took.as_secs_f64();
            state.quickest = (state.quickest * 1.001).min(t);
            state.recent = if state.recent == 0.0 { t } else { 0.95 * state.recent + 0.05 * t };
            let queueing = state.recent > QUEUEING * state.quickest + SLACK;
            state.limit = match queueing {
                true => (state.limit * 0.99).max(MIN_OPEN),
                false => (state.limit + 1.0).min(MAX_OPEN),
            };
        }
        // This read's place goes to the first still waiting, and more places to more of
        // them while the limit allows.
        state.open -= 1;
        while (state.open as f64) < state.limit {
            let Some(next) = state.waiting.pop_front() else { break };
            if next.send(()).is_ok() {
                state.open += 1;
            }
        }
    }
}

/// A read waiting for its turn; dropped (the read cancelled) after its turn came, it gives
/// the place on.
struct Waiting<'a> {
    gate: &'a Gate,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.gate.leave(None);
            }
        }
    }
}

impl Pass {
    /// Says the read was answered with `bytes`, `took` after it was sent (its latency
    /// counts; the request's own measure, so the clock is read once for both: with a
    /// small cache at memory speed, five reads of it per request were a tenth of the
    /// runtime thread's time); a pass dropped unanswered (a failure, a cancelled read)
    /// only gives its place back.
    pub(crate) fn answered(mut self, bytes: u64, took: Duration) {
        self.answered = Some((took, bytes));
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.gate.leave(self.answered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    #[test]
    fn reads_go_out_in_the_order_they_asked_within_the_limit() {
        runtime().block_on(async {
            let gate = Arc::new(Gate::default());
            let first: Vec<Pass> = futures::future::join_all((0..256).map(|_| gate.enter())).await;
            // The gate is full: the next ones wait, and leave in order.
            let order = Arc::new(Mutex::new(Vec::new()));
            let waiting = (0..3).map(|i| {
                let (gate, order) = (Arc::clone(&gate), Arc::clone(&order));
                async move {
                    let pass = gate.enter().await;
                    order.lock().unwrap().push(i);
                    pass
                }
            });
            let (later, ()) = futures::future::join(futures::future::join_all(waiting), async {
                tokio::task::yield_now().await;
                assert!(order.lock().unwrap().is_empty(), "nobody passes a full gate");
                drop(first);
            })
            .await;
            assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
            drop(later);
        });
    }

    #[cfg(unix)]
    #[test]
    fn a_forked_child_starts_with_a_gate_of_its_own() {
        let gate = Arc::new(Gate::default());
        // The parent's reads fill the gate; their answers never come to a child.
        let passes: Vec<Pass> = runtime().block_on(futures::future::join_all((0..256).map(|_| gate.enter())));
        assert!(futures::FutureExt::now_or_never(gate.enter()).is_none(), "the parent's gate is full");
        // SAFETY: the child polls one future without a runtime (the gate's lock is free: no
        // other thread uses this gate) and leaves with `_exit`, running nothing of the
        // parent's; an alarm ends a child that hangs.
        match unsafe { libc::fork() } {
            0 => {
                unsafe { libc::alarm(20) };
                let passed = futures::FutureExt::now_or_never(gate.enter()).is_some();
                unsafe { libc::_exit(if passed { 0 } else { 1 }) }
            }
            -1 => panic!("fork failed: {}", std::io::Error::last_os_error()),
            child => {
                let mut status = 0;
                // SAFETY: `child` is this process's own child, waited for once.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "in the child the parent's reads still held the gate (status {status})"
                );
            }
        }
        drop(passes);
    }

    #[test]
    fn the_limit_grows_while_answers_stay_quick_and_shrinks_when_they_queue() {
        let gate = Arc::new(Gate::default());
        let answer = |took: f64| {
            gate.state().open += 1;
            gate.leave(Some((Duration::from_secs_f64(took), 0)));
        };
        for _ in 0..200 {
            answer(0.020);
        }
        assert_eq!(gate.limit(), FIRST_OPEN + 200.0, "a steady 20 ms store is not queueing");
        // The same store answering ever later: its queue grows, the limit falls to the floor.
        for i in 0..2000 {
            answer(0.020 + i as f64 * 0.001);
        }
        assert_eq!(gate.limit(), MIN_OPEN);
        // Once quick again (the recent latency forgets the queue), it grows; a large
        // answer's transfer time is not queueing.
        for _ in 0..400 {
            answer(0.020);
        }
        let before = gate.limit();
        assert!(before > MIN_OPEN + 100.0, "{before}");
        for _ in 0..20 {
            gate.state().open += 1;
            gate.leave(Some((Duration::from_secs_f64(0.5), 16 << 20)));
        }
        assert_eq!(gate.limit(), before, "16 MiB in half a second says nothing of a queue");
        // A failed read gives its place back without a latency.
        gate.state().open += 1;
        gate.leave(None);
        let open = gate.state().open;
        assert_eq!((open, gate.limit()), (0, before));
    }
}
