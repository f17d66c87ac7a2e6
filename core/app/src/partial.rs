//! Partial outputs: the name an output has while a command builds it.
//!
//! A command that creates a store or a file builds it beside its final path and renames it
//! into place once it is whole, so a command that fails or is stopped leaves nothing at that
//! path. While it is built the output is `.NAME.zr-partial-PID`, in the directory of its
//! final path: NAME is the output's file name, PID the process building it. The PID lets the
//! next command that stages an output of the same name tell a partial output still being
//! written from one whose process is gone (killed outright, or crashed), which it removes
//! ([`stage`]).
//!
//! A process that builds several outputs of one name at once adds `.N` to tell them apart
//! (Python's `zrecord.export`, one per thread: `.NAME.zr-partial-PID.TID`); a process with no
//! id to give (the wasm guest run by a WASI host other than `zr-wasm`) leaves `-PID` out, and
//! what it leaves is never taken for an orphan. Every such name starts with `.`, so listings
//! that leave hidden entries out (`zr push`) leave partial outputs out too.

use alloc::format;
use alloc::string::String;

/// What follows `.NAME` in a partial output's name.
const MARK: &str = ".zr-partial";

/// The name under which process `pid` builds the output named `name`:
/// `.NAME.zr-partial-PID`, or `.NAME.zr-partial` for a process with no id.
pub fn staged_name(name: &str, pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!(".{name}{MARK}-{pid}"),
        None => format!(".{name}{MARK}"),
    }
}

/// The process that was building the output `name` as `entry`, when `entry` is one of its
/// partial outputs with a process id (`.NAME.zr-partial-PID` or `.NAME.zr-partial-PID.N`).
pub fn partial_pid(name: &str, entry: &str) -> Option<u32> {
    let rest = entry.strip_prefix('.')?.strip_prefix(name)?.strip_prefix(MARK)?.strip_prefix('-')?;
    let (pid, n) = rest.split_once('.').unwrap_or((rest, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(feature = "std")]
pub use on_disk::{dir_of, remove, stage};

#[cfg(feature = "std")]
mod on_disk {
    use std::path::{Path, PathBuf};

    use super::{partial_pid, staged_name};

    /// The directory holding `path`, where its partial output goes (`.` for a bare name).
    pub fn dir_of(path: impl AsRef<Path>) -> PathBuf {
        match path.as_ref().parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Where this process builds the output `name` in `dir`: `dir/.NAME.zr-partial-PID`.
    /// First removes the partial outputs of `name` in `dir` whose process is gone: no live
    /// process can still be writing them.
    pub fn stage(dir: &Path, name: &str) -> PathBuf {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let pid = entry.file_name().to_str().and_then(|e| partial_pid(name, e));
                if pid.is_some_and(is_gone) {
                    remove(&entry.path());
                }
            }
        }
        dir.join(staged_name(name, Some(std::process::id())))
    }

    /// Removes a partial output: a directory with what is in it, or a file.
    pub fn remove(path: &Path) {
        let _ = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    }

    /// True when no process `pid` exists.
    #[cfg(unix)]
    #[allow(unsafe_code)]
    fn is_gone(pid: u32) -> bool {
        let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
        // SAFETY: kill with signal 0 sends nothing; it only asks whether `pid` exists.
        pid > 0
            && unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// Without a way to ask, every process may still be alive.
    #[cfg(not(unix))]
    fn is_gone(_pid: u32) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(staged_name("out.npy", Some(42)), ".out.npy.zr-partial-42");
        assert_eq!(staged_name("out", None), ".out.zr-partial");
        assert_eq!(partial_pid("out.npy", &staged_name("out.npy", Some(42))), Some(42));
        assert_eq!(partial_pid("out.npy", ".out.npy.zr-partial-42.140213"), Some(42));
    }

    #[test]
    fn other_names_are_not_partial_outputs_of_name() {
        for entry in [
            "out.npy",
            ".out.npy.zr-partial",
            ".out.npy.zr-partial-",
            ".out.npy.zr-partial-x",
            ".out.npy.zr-partial-+4",
            ".out.npy.zr-partial--4",
            ".out.npy.zr-partial-4.",
            ".out.npy.zr-partial-4.5.6",
            ".other.npy.zr-partial-4",
            ".out.npy.zr-partial-99999999999",
        ] {
            assert_eq!(partial_pid("out.npy", entry), None, "{entry}");
        }
    }

    #[test]
    fn partial_outputs_are_hidden() {
        assert!(staged_name("x", Some(1)).starts_with('.') && staged_name("x", None).starts_with('.'));
    }
}
