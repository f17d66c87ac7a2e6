//! What each path argument is to its command, apart from the parsing: a front end that
//! runs the command somewhere else (`zr-wasm` preopens directories, takes the engine's locks,
//! passes the user's paths to the guest) needs the paths' roles and notes and nothing about
//! how the arguments were read.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use zrecord_core::io::LockMode;

use super::verbs::Command;
use crate::cli::host::PathKind;

/// What a path argument is to its command: a front end that must grant access to paths
/// (`zr-wasm` preopens directories) decides from this what to grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A store that is only read.
    StoreRead,
    /// A store changed in place (`delete`, `compact`).
    StoreWrite,
    /// `convert`'s output: an existing store appended to, or a new one built.
    StoreOut,
    /// `convert`'s input file, only read.
    InputFile,
    /// `export`'s output file, created or replaced.
    OutputFile,
}

/// One path argument as handed over by a front end that runs the command in another file
/// namespace: `zr-wasm` preopens directories under guest paths (`/store`, `/in`...) and
/// tells the guest, for each path it rewrote, what the user typed and what is there on
/// the host, so that messages name the user's paths and a path it could not preopen (a
/// missing store, a file given as a store) still gets the native message.
///
/// Passed as environment variables: `ZR_PATHS` (the count) and, for each `i`,
/// `ZR_PATH_{i}_GUEST`, `ZR_PATH_{i}_SHOWN` and `ZR_PATH_{i}_KIND` (`dir`, `file`,
/// `missing`, `missing-parent`, or `staged`: missing on the host, and the front end has
/// made an empty place at the guest path that it moves into place if the command succeeds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathNote {
    /// The path the command receives.
    pub guest: String,
    /// The path the user typed.
    pub shown: String,
    /// What is at the user's path.
    pub kind: PathKind,
    /// The front end staged the output at `guest` (`kind` is then [`PathKind::Missing`]).
    pub staged: bool,
}

impl PathNote {
    /// The environment variables that carry `notes`.
    pub fn to_env(notes: &[PathNote]) -> Vec<(String, String)> {
        let mut env = alloc::vec![("ZR_PATHS".to_string(), notes.len().to_string())];
        for (i, n) in notes.iter().enumerate() {
            let kind = match (n.staged, n.kind) {
                (true, _) => "staged",
                (false, PathKind::Dir) => "dir",
                (false, PathKind::File) => "file",
                (false, PathKind::Missing) => "missing",
                (false, PathKind::MissingParent) => "missing-parent",
            };
            env.push((format!("ZR_PATH_{i}_GUEST"), n.guest.clone()));
            env.push((format!("ZR_PATH_{i}_SHOWN"), n.shown.clone()));
            env.push((format!("ZR_PATH_{i}_KIND"), kind.to_string()));
        }
        env
    }

    /// The notes in the environment `var` reads; malformed entries are skipped.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Vec<PathNote> {
        let n = var("ZR_PATHS").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        (0..n.min(64))
            .filter_map(|i| {
                let guest = var(&format!("ZR_PATH_{i}_GUEST"))?;
                let shown = var(&format!("ZR_PATH_{i}_SHOWN"))?;
                let (kind, staged) = match var(&format!("ZR_PATH_{i}_KIND"))?.as_str() {
                    "dir" => (PathKind::Dir, false),
                    "file" => (PathKind::File, false),
                    "missing" => (PathKind::Missing, false),
                    "missing-parent" => (PathKind::MissingParent, false),
                    "staged" => (PathKind::Missing, true),
                    _ => return None,
                };
                Some(PathNote { guest, shown, kind, staged })
            })
            .collect()
    }

    /// How to name `path` given `notes`: the note's user path for a noted path or a path
    /// under one, else `path` itself.
    pub fn shown(notes: &[PathNote], path: &str) -> String {
        for n in notes {
            if path == n.guest {
                return n.shown.clone();
            }
            if let Some(rest) = path.strip_prefix(n.guest.as_str()).and_then(|r| r.strip_prefix('/')) {
                let sep = if n.shown.ends_with('/') { "" } else { "/" };
                return format!("{}{sep}{rest}", n.shown);
            }
        }
        path.to_string()
    }
}

impl Command {
    /// Every path argument with its role, in command-line order.
    pub fn paths(&self) -> Vec<(&str, Role)> {
        match self {
            Command::Verify { store, seal: true, .. } => alloc::vec![(store.as_str(), Role::StoreWrite)],
            Command::Inspect { store, .. } | Command::Verify { store, .. } | Command::Stats { store } => {
                alloc::vec![(store.as_str(), Role::StoreRead)]
            }
            Command::Delete { store, from_file: Some(file), .. } => {
                alloc::vec![(store.as_str(), Role::StoreWrite), (file.as_str(), Role::InputFile)]
            }
            Command::Delete { store, .. } | Command::Compact { store, .. } | Command::Layout { store, .. } => {
                alloc::vec![(store.as_str(), Role::StoreWrite)]
            }
            Command::Clean { dataset, .. } => alloc::vec![(dataset.as_str(), Role::StoreWrite)],
            // Copied by the native host only (a sandbox has no second dataset writer).
            Command::Copy { .. } => Vec::new(),
            Command::Convert { input, output, .. } => {
                alloc::vec![(input.as_str(), Role::InputFile), (output.as_str(), Role::StoreOut)]
            }
            Command::Export { store, output, .. } => {
                alloc::vec![(store.as_str(), Role::StoreRead), (output.as_str(), Role::OutputFile)]
            }
            // URLs are not paths: only the local side is one.
            Command::Push { local, .. } => alloc::vec![(local.as_str(), Role::StoreRead)],
            Command::Pull { output, .. } => alloc::vec![(output.as_str(), Role::StoreOut)],
            // Served to a browser by the native host only: nothing for a sandbox to open.
            Command::Help | Command::Version | Command::View { .. } => Vec::new(),
        }
    }

    /// The locks the engine takes on each store this command works on, which a front end
    /// whose command runs where it cannot take them (`zr-wasm`: WASI has no file locks)
    /// takes on the command's behalf, on the store's meta.zr, for the whole run: presence
    /// ([`LockMode::Shared`]) on every store it reads, the appender lock for `convert` into
    /// an existing store and `verify --seal`, the exclusive lock for `delete` and `compact`.
    /// A new store (`convert` into a missing directory) needs none: no one else can have
    /// it open.
    pub fn locks(&self) -> Vec<(&str, LockMode)> {
        let mut out = Vec::new();
        for (path, role) in self.paths() {
            let extra = match (self, role) {
                (Command::Delete { .. }, Role::InputFile) => continue,
                (
                    Command::Delete { .. } | Command::Compact { .. } | Command::Layout { .. } | Command::Clean { .. },
                    _,
                ) => Some(LockMode::Exclusive),
                (Command::Verify { seal: true, .. }, _) | (_, Role::StoreOut) => Some(LockMode::Appender),
                (_, Role::StoreRead) => None,
                _ => continue,
            };
            out.push((path, LockMode::Shared));
            out.extend(extra.map(|m| (path, m)));
        }
        out
    }

    /// The same command with every path replaced by `f(path, role)`.
    pub fn map_paths(&self, mut f: impl FnMut(&str, Role) -> String) -> Command {
        let mut c = self.clone();
        match &mut c {
            Command::Verify { store, seal: true, .. } => *store = f(store, Role::StoreWrite),
            Command::Inspect { store, .. } | Command::Verify { store, .. } | Command::Stats { store } => {
                *store = f(store, Role::StoreRead)
            }
            Command::Delete { store, from_file, .. } => {
                *store = f(store, Role::StoreWrite);
                if let Some(file) = from_file {
                    *file = f(file, Role::InputFile);
                }
            }
            Command::Compact { store, .. } | Command::Layout { store, .. } => *store = f(store, Role::StoreWrite),
            Command::Clean { dataset, .. } => *dataset = f(dataset, Role::StoreWrite),
            Command::Copy { .. } => {}
            Command::Convert { input, output, .. } => {
                *input = f(input, Role::InputFile);
                *output = f(output, Role::StoreOut);
            }
            Command::Export { store, output, .. } => {
                *store = f(store, Role::StoreRead);
                *output = f(output, Role::OutputFile);
            }
            Command::Push { local, .. } => *local = f(local, Role::StoreRead),
            Command::Pull { output, .. } => *output = f(output, Role::StoreOut),
            Command::Help | Command::Version | Command::View { .. } => {}
        }
        c
    }
}
