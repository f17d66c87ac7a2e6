//! Locks across fork() and exec: a child never holds a lock its parent gave back, and a child
//! that uses an inherited handle takes its own (docs/format.md, "Locks").

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrecord::{Error, Zrecord};

/// A pipe the parent uses to tell a forked child when to go on.
struct Pipe {
    read: libc::c_int,
    write: libc::c_int,
}

impl Pipe {
    fn new() -> Pipe {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        Pipe { read: fds[0], write: fds[1] }
    }

    /// Blocks until the other end writes a byte or is closed, or 30 s pass (async-signal-safe:
    /// usable in a forked child of this multi-threaded test process).
    fn wait(&self) -> u8 {
        // Never forever: a parent that failed an assertion must not leave a child behind.
        let mut pfd = libc::pollfd { fd: self.read, events: libc::POLLIN, revents: 0 };
        // SAFETY: polls the one descriptor described by `pfd`, which lives across the call.
        if unsafe { libc::poll(&mut pfd, 1, 30_000) } != 1 {
            return 0;
        }
        let mut b = 0u8;
        // SAFETY: reads at most one byte into `b`, which lives across the call.
        let n = unsafe { libc::read(self.read, (&mut b as *mut u8).cast(), 1) };
        if n == 1 {
            b
        } else {
            0
        }
    }

    fn send(&self, b: u8) {
        // SAFETY: writes one byte from `b`, which lives across the call.
        assert_eq!(unsafe { libc::write(self.write, (&b as *const u8).cast(), 1) }, 1);
    }
}

/// Forks; the child runs `child` and exits with its return value, without unwinding or
/// running destructors (as a forked child of a threaded process must).
fn fork(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only calls `child` and `_exit`; the closures given here use
    // async-signal-safe calls, or zrecord calls that take no lock another thread of the
    // parent could have held at fork (the store registry is held across fork by zrecord's
    // own atfork handlers, and glibc's malloc is fork-safe).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child at once, skipping the parent's atexit handlers and buffers.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn wait_exit(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waits for our own child and writes its status into `status`.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child did not exit normally: status {status}");
    libc::WEXITSTATUS(status)
}

fn filled(dir: &std::path::Path, n: usize) -> Zrecord {
    let z = Zrecord::open(dir).unwrap();
    let bytes: Vec<u8> = (0..n * 16).map(|i| (i / 16) as u8).collect();
    z.append(&bytes, n, 16, None).unwrap();
    z
}

#[test]
fn a_forked_child_that_never_uses_the_store_does_not_block_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let a = filled(dir.path(), 10);
    let go = Pipe::new();
    let pid = fork(|| {
        go.wait();
        0
    });
    drop(a);
    let mut b = Zrecord::open(dir.path()).unwrap();
    let deleted = b.delete(&[0]);
    let compacted = b.compact();
    go.send(1);
    assert_eq!(wait_exit(pid), 0);
    deleted.unwrap();
    compacted.unwrap();
    assert_eq!(b.len(), 9);
}

#[test]
fn processes_spawned_by_other_threads_never_hold_a_closed_handles_lock() {
    // The window this closes is the one between a spawned child's clone and its exec, in
    // which it shares the parent's descriptors: a flock taken through one of them stayed
    // held there. Spawn as fast as possible from another thread and race it many times.
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path(), 200);
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                Command::new("true").status().unwrap();
                n += 1;
            }
            n
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rounds = 0;
    while rounds < 100 || Instant::now() < deadline {
        let a = Zrecord::open(dir.path()).unwrap();
        drop(a);
        let mut b = Zrecord::open(dir.path()).unwrap();
        b.delete(&[0]).unwrap_or_else(|e| panic!("round {rounds}: {e}"));
        rounds += 1;
        if rounds >= 150 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(spawner.join().unwrap() > 0);
}

#[test]
fn a_child_reading_through_an_inherited_handle_holds_its_own_lock() {
    let dir = tempfile::tempdir().unwrap();
    let a = filled(dir.path(), 10);
    let (go, ready) = (Pipe::new(), Pipe::new());
    let pid = fork(|| {
        // The first use in the child takes the child's own presence lock.
        let ok = a.read(3).map(|r| r == vec![3u8; 16]).unwrap_or(false);
        ready.send(if ok { 1 } else { 2 });
        go.wait();
        0
    });
    assert_eq!(ready.wait(), 1, "the child could not read through its inherited handle");
    drop(a);
    // The parent's handle is gone, but the child is reading: delete must wait for it.
    let mut b = Zrecord::open(dir.path()).unwrap();
    let e = b.delete(&[0]).unwrap_err();
    go.send(1);
    assert_eq!(wait_exit(pid), 0);
    assert!(matches!(e, Error::Locked(_)), "{e}");
    b.delete(&[0]).unwrap();
}

#[test]
fn a_child_whose_store_changed_behind_its_back_is_refused_not_misled() {
    let dir = tempfile::tempdir().unwrap();
    let a = filled(dir.path(), 10);
    let (go, done) = (Pipe::new(), Pipe::new());
    let pid = fork(|| {
        go.wait();
        // The parent deleted and compacted while this inherited handle held no lock.
        let code = match a.read(9) {
            Err(Error::Locked(_)) => 1,
            Err(_) => 2,
            Ok(_) => 3,
        };
        done.send(1);
        code
    });
    drop(a);
    let mut b = Zrecord::open(dir.path()).unwrap();
    b.delete(&[0, 1]).unwrap();
    b.compact().unwrap();
    drop(b);
    go.send(1);
    done.wait();
    assert_eq!(wait_exit(pid), 1, "the child must get a Locked error, not stale records");
}

#[test]
fn handles_of_one_process_count_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = filled(dir.path(), 4);
    let b = Zrecord::open_read_only(dir.path()).unwrap();
    let c = Zrecord::open(dir.path()).unwrap();
    // Dropping one handle of this process must not drop the locks the others hold.
    drop(c);
    assert!(matches!(a.delete(&[0]).unwrap_err(), Error::Locked(_)));
    drop(b);
    a.delete(&[0]).unwrap();
    // Another handle appended and closed since `a` last looked: a's next append must land
    // after those records, not over them.
    let d = Zrecord::open(dir.path()).unwrap();
    drop(a);
    let e = Zrecord::open(dir.path()).unwrap();
    e.append(&[7u8; 16], 1, 16, None).unwrap();
    drop(e);
    let at = d.append(&[8u8; 16], 1, 16, None).unwrap();
    assert_eq!(at, 4);
    assert_eq!(d.read(3).unwrap(), vec![7u8; 16]);
    assert_eq!(d.read(4).unwrap(), vec![8u8; 16]);
}
