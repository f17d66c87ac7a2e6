//! The guest's front end of the `zr` command line: everything a user sees is
//! `zrecord_app::cli`; this file supplies the host, over `std::fs` (wasi:filesystem).
//!
//! Run by `zr-wasm`, the paths the guest receives are guest paths under the directories
//! the runner preopened, and the runner describes each of them in the environment (see
//! [`PathNote`]): what the user typed, so messages name it, and what is on the host, so a
//! path the runner could not preopen (a missing store, a file given as a store) gets the
//! same message as natively. When the runner staged a new output (`staged`), the guest
//! builds it in place and the runner moves it to its final path after a successful exit.
//! Run by any other WASI host, with no notes, paths are taken as they are.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use zrecord_app::cli::{self, Access, Closed, Host, PathKind, PathNote};
use zrecord_app::partial;
use zrecord_core::io::Serial;
use zrecord_core::{Error, IoError, IoErrorKind, Options, Store, Writer};

use crate::fs::{FsDir, FsFile};

/// The runner's notes on the paths of this run (none when run without `zr-wasm`).
pub fn notes() -> &'static [PathNote] {
    static NOTES: OnceLock<Vec<PathNote>> = OnceLock::new();
    NOTES.get_or_init(|| PathNote::from_env(|k| std::env::var(k).ok()))
}

/// How to name the guest path `path` to the user.
pub fn shown(path: &str) -> String {
    PathNote::shown(notes(), path)
}

fn note(path: &str) -> Option<&'static PathNote> {
    notes().iter().find(|n| n.guest == path)
}

/// Directories made for an output that was not staged by the runner, outermost first, so
/// that a failure removes exactly what this run created.
pub fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    zrecord_core::io::std_dir::create_missing_dirs(dir).map_err(|(p, e)| {
        Error::Io(IoError::from_std(e, format!("create directory {}", shown(&p.display().to_string()))))
    })
}

/// Removes what [`create_dirs`] made: the innermost directory (the output) with what is
/// in it, then each parent made for it if it is still empty.
pub fn remove_dirs(created: &[PathBuf]) {
    if let Some((inner, parents)) = created.split_last() {
        let _ = std::fs::remove_dir_all(inner);
        for p in parents.iter().rev() {
            let _ = std::fs::remove_dir(p);
        }
    }
}

struct Guest {
    /// Outputs created in place (no runner staging) and the directories made for them.
    created: Vec<(String, Vec<PathBuf>)>,
}

impl Host for Guest {
    type Backend = FsDir;
    type File = FsFile;

    fn kind(&self, path: &str) -> PathKind {
        if let Some(n) = note(path) {
            return n.kind;
        }
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => PathKind::Dir,
            Ok(_) => PathKind::File,
            Err(e) if e.kind() == ErrorKind::NotFound => match Path::new(path).parent() {
                Some(p) if !p.as_os_str().is_empty() && !p.is_dir() => PathKind::MissingParent,
                _ => PathKind::Missing,
            },
            Err(_) => PathKind::File,
        }
    }

    fn shown(&self, path: &str) -> String {
        shown(path)
    }

    fn open_store(&mut self, path: &str, access: Access) -> Result<(Store<FsDir>, Writer), Error> {
        let options = match access {
            Access::Read => Options::read_only(),
            Access::Write => Options { create: false, ..Options::default() },
            Access::Create => Options::default(),
        };
        Store::open(FsDir::new(path, !options.read_only), options)
    }

    fn open_input(&mut self, path: &str) -> Result<FsFile, Error> {
        FsFile::open(path.into(), false, false)?.ok_or_else(|| {
            Error::Io(IoError::new(IoErrorKind::NotFound, format!("open {}", shown(path)), "no such file"))
        })
    }

    fn stage_store(&mut self, path: &str) -> Result<String, Error> {
        if note(path).is_some_and(|n| n.staged) {
            return Ok(path.to_string());
        }
        let created = create_dirs(Path::new(path))?;
        self.created.push((path.to_string(), created));
        Ok(path.to_string())
    }

    fn stage_file(&mut self, path: &str) -> Result<(FsFile, String), Error> {
        if note(path).is_some_and(|n| n.staged) {
            return Ok((FsFile::create(path.into())?, path.to_string()));
        }
        // Beside the output, renamed over it at the end, as the native zr does; with no
        // process id to give (WASI has none), under the name without one.
        let p = Path::new(path);
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = p.with_file_name(partial::staged_name(&name, None)).display().to_string();
        let file = FsFile::create(tmp.clone().into())?;
        self.created.push((tmp.clone(), Vec::new()));
        Ok((file, tmp))
    }

    fn commit(&mut self, staged: &str, path: &str) -> Result<(), Error> {
        // A runner-staged output is built in place and moved by the runner after we exit 0.
        if staged != path {
            std::fs::rename(staged, path)
                .map_err(|e| Error::Io(IoError::from_std(e, format!("rename {} to {}", shown(staged), shown(path)))))?;
        }
        self.created.retain(|(p, _)| p != staged);
        Ok(())
    }

    fn discard(&mut self, staged: &str) {
        if let Some(i) = self.created.iter().position(|(p, _)| p == staged) {
            let (p, dirs) = self.created.remove(i);
            if dirs.is_empty() {
                let _ = std::fs::remove_file(&p);
            }
            remove_dirs(&dirs);
        } else if Path::new(staged).is_file() {
            let _ = std::fs::remove_file(staged);
        }
    }

    fn progress(&mut self, _what: &str, _done: u64, _total: u64) {}

    fn out(&mut self, text: &str) -> Result<(), Closed> {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|_| Closed)
    }

    fn err(&mut self, text: &str) {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

/// Runs the command line and returns the exit status.
///
/// wasi:cli/exit (0.2) carries only success or failure, so a failing guest exits 1
/// whatever its code. `zr-wasm` therefore names a file in a private preopen in
/// `ZR_STATUS_FILE`, and the guest writes its exit code there before exiting, so the
/// runner exits 2 for an error and 1 for `verify`'s bad records, as `zr` does.
pub fn run(args: &[String]) -> i32 {
    let code = cli::run(&mut Guest { created: Vec::new() }, &Serial, args);
    if let Ok(path) = std::env::var("ZR_STATUS_FILE") {
        let _ = std::fs::write(path, code.to_string());
    }
    code
}
