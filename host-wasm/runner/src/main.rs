//! `zr-wasm`: the `zr` command line, run inside wasmtime from `zr.wasm`.
//!
//! ```text
//! zr-wasm [OPTIONS] COMMAND ...      the commands of `zr --help`, with the same output,
//!                                    messages and exit codes (they are one code base:
//!                                    zrecord_app::cli)
//! OPTIONS: --max-memory MIB (default 1024)   --timeout SECS (default 3600, 0: none)
//!          --component PATH   --cache-dir DIR   --no-cache
//! ```
//!
//! This binary parses the command line with the same parser as the guest, only to learn
//! which paths the command names and what each is for; it then preopens the least the
//! command needs and hands the guest its paths rewritten:
//! - a store that is only read: its directory, read-only, as `/store`;
//! - a store changed in place (`delete`, `compact`): its directory, read-write, as `/store`;
//! - `convert`'s input: the directory of the file, read-only, as `/in`;
//! - `convert`'s output: an existing directory read-write as `/out`; a new one is built in
//!   a fresh directory beside it (`.NAME.zr-partial-PID`, see `zrecord_app::partial`),
//!   preopened as `/out` and renamed onto the output when the guest succeeds (removed, with
//!   any parent made for it, when it fails);
//! - `export`'s output: a fresh private directory beside it as `/out`, whose one file is
//!   renamed onto the output when the guest succeeds.
//!
//! The guest learns, for every rewritten path, what the user typed and what is there (see
//! `zrecord_app::cli::PathNote`), so its messages name the user's paths, and a path that
//! cannot be preopened (missing, or a file where a directory is needed) gets the message
//! the native `zr` prints. `..` out of a preopen and symlinks pointing out of one are
//! refused by wasmtime-wasi.
//!
//! Exit codes: the guest's (0, 1 for verify's bad records, 2 for errors); 2 for this
//! runner's own errors (bad options, no component); 3 when the guest is stopped at its
//! memory cap or time limit.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use wasmtime::error::Context;
use wasmtime::{bail, Result};
use zr_wasm::{default_cache_dir, Limit, Preopen, Runtime, Sandbox, Source};
use zrecord_app::cli::{Command, PathKind, PathNote, Role};
use zrecord_app::partial;

/// Printed after the guest's `--help`.
const RUNNER_HELP: &str = "
zr-wasm runs these commands inside wasmtime, seeing only the paths the command names.
zr-wasm options (before or after the command):
  --max-memory MIB    cap on the guest's memory (default 1024); past it, exit 3
  --timeout SECS      wall-clock limit (default 3600, 0: none); past it, exit 3
  --component PATH    run another build of zr.wasm
  --cache-dir DIR     compiled-code cache (default $ZR_WASM_CACHE, else
                      $XDG_CACHE_HOME/zr-wasm, else ~/.cache/zr-wasm); used only if it and
                      its entries belong to you and no one else may write them
  --no-cache          compile every time";

/// Exit code of this runner's own errors (the guest's errors exit 2 as well).
const EXIT_ERROR: u8 = 2;
/// Exit code when the guest was stopped at a limit.
const EXIT_LIMIT: u8 = 3;
/// The largest `--timeout`: a year, far past any command and well inside what the epoch
/// ticker and a `Duration` can count.
const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;
/// How long past `--timeout` the watchdog waits for the epoch interruption, which stops a
/// guest that computes, before it ends a guest stuck in a host call (a read of a FIFO, a
/// write to a pipe nobody reads), which epochs cannot interrupt.
const WATCHDOG_GRACE: Duration = Duration::from_secs(1);

struct Options {
    max_memory_mib: usize,
    timeout: Option<Duration>,
    component: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    rest: Vec<String>,
}

fn parse_options(args: Vec<String>) -> Result<Options> {
    let mut o = Options {
        max_memory_mib: 1024,
        timeout: Some(Duration::from_secs(3600)),
        component: None,
        cache_dir: default_cache_dir(),
        rest: Vec::new(),
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--max-memory" => {
                o.max_memory_mib =
                    value("--max-memory")?.parse::<usize>().context("--max-memory takes a number of MiB")?
            }
            "--timeout" => {
                let secs: f64 = value("--timeout")?.parse::<f64>().context("--timeout takes a number of seconds")?;
                if !(secs >= 0.0 && secs.is_finite()) {
                    bail!("--timeout must be a non-negative number of seconds");
                }
                // Past about 584 years a Duration cannot hold it: say so, do not panic.
                let limit = Duration::try_from_secs_f64(secs)
                    .ok()
                    .filter(|t| t.as_secs() <= MAX_TIMEOUT_SECS)
                    .with_context(|| format!("--timeout takes at most {MAX_TIMEOUT_SECS} seconds (0: none)"))?;
                o.timeout = (secs > 0.0).then_some(limit);
            }
            "--component" => o.component = Some(PathBuf::from(value("--component")?)),
            "--cache-dir" => o.cache_dir = Some(PathBuf::from(value("--cache-dir")?)),
            "--no-cache" => o.cache_dir = None,
            _ => o.rest.push(a),
        }
    }
    Ok(o)
}

/// The component to run: `--component`, else the embedded one, else `zr.wasm` beside the
/// executable.
fn source(o: &Options) -> Result<Source> {
    if let Some(p) = &o.component {
        return Ok(Source::File(p.clone()));
    }
    if zr_wasm::embedded().is_some() {
        return Ok(Source::Embedded);
    }
    let exe = std::env::current_exe().context("locating zr-wasm")?;
    let beside = exe.with_file_name("zr.wasm");
    if beside.is_file() {
        return Ok(Source::File(beside));
    }
    bail!("zr.wasm is not embedded in this build and not found at {}; pass --component PATH", beside.display())
}

/// What is at `path` on this host (the same answer the native `zr` gives).
fn kind(path: &str) -> PathKind {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => PathKind::Dir,
        Ok(_) => PathKind::File,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(parent) if !parent.is_dir() => PathKind::MissingParent,
                _ => PathKind::Missing,
            }
        }
        Err(_) => PathKind::File,
    }
}

/// The parent directory and file name of `p`.
fn split_file(p: &str) -> Result<(PathBuf, String)> {
    let path = Path::new(p);
    let name =
        path.file_name().and_then(|n| n.to_str()).with_context(|| format!("{p} does not name a file"))?.to_string();
    Ok((partial::dir_of(p), name))
}

/// An output built in a private place and moved to its final path if the guest succeeds.
/// Dropping it (on failure) removes the place and any parent directory made for it.
struct Staged {
    /// The directory preopened for the guest.
    dir: PathBuf,
    /// What to move, and where: the directory itself (a store) or the one file in it.
    from: PathBuf,
    to: PathBuf,
    /// Parent directories created for the output, outermost first.
    created: Vec<PathBuf>,
    committed: bool,
}

impl Staged {
    fn new(target: &str, store: bool) -> Result<Staged> {
        let (parent, name) = split_file(target)?;
        let mut created = Vec::new();
        let mut d = Some(parent.as_path());
        while let Some(p) = d.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            created.push(p.to_path_buf());
            d = p.parent();
        }
        created.reverse();
        let dir = partial::stage(&parent, &name);
        let from = if store { dir.clone() } else { dir.join(&name) };
        let staged = Staged { dir, from, to: PathBuf::from(target), created, committed: false };
        for p in &staged.created {
            std::fs::create_dir(p).with_context(|| format!("creating {}", p.display()))?;
        }
        // A store is the staged directory itself, made as the native zr makes it; a file is
        // staged in a directory private to this user.
        let mut b = std::fs::DirBuilder::new();
        if !store {
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        }
        b.create(&staged.dir).with_context(|| format!("creating {}", staged.dir.display()))?;
        Ok(staged)
    }

    fn commit(&mut self) -> Result<()> {
        std::fs::rename(&self.from, &self.to)
            .with_context(|| format!("moving the output into {}", self.to.display()))?;
        self.committed = true;
        let parent = partial::dir_of(&self.to);
        std::fs::File::open(&parent)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing directory {}", parent.display()))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // A committed store has moved away with its directory; a file's directory stays.
        if self.from != self.dir || !self.committed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if !self.committed {
            for p in self.created.iter().rev() {
                let _ = std::fs::remove_dir(p);
            }
        }
    }
}

fn preopen(host: impl Into<PathBuf>, guest: &str, writable: bool) -> Preopen {
    Preopen { host: host.into(), guest: guest.into(), writable }
}

/// The sandbox and guest arguments for `cmd`, and the outputs to move into place.
fn plan(cmd: &Command, sandbox: &mut Sandbox) -> Result<(Vec<String>, Vec<Staged>)> {
    let mut notes = Vec::new();
    let mut staged = Vec::new();
    let mut failed = None;
    let guest_cmd = cmd.map_paths(|path, role| {
        let k = kind(path);
        let i = notes.len();
        let mut note = |guest: String, kind: PathKind, is_staged: bool| -> String {
            notes.push(PathNote { guest: guest.clone(), shown: path.to_string(), kind, staged: is_staged });
            guest
        };
        let result = (|| -> Result<String> {
            Ok(match (role, k) {
                (Role::StoreRead | Role::StoreWrite, PathKind::Dir) => {
                    sandbox.preopens.push(preopen(path, "/store", role == Role::StoreWrite));
                    note("/store".into(), k, false)
                }
                (Role::InputFile, PathKind::File) => {
                    let (dir, name) = split_file(path)?;
                    sandbox.preopens.push(preopen(dir, "/in", false));
                    note(format!("/in/{name}"), k, false)
                }
                (Role::StoreOut, PathKind::Dir) => {
                    sandbox.preopens.push(preopen(path, "/out", true));
                    note("/out".into(), k, false)
                }
                (Role::StoreOut, PathKind::Missing | PathKind::MissingParent) => {
                    let s = Staged::new(path, true)?;
                    sandbox.preopens.push(preopen(&s.dir, "/out", true));
                    staged.push(s);
                    note("/out".into(), PathKind::Missing, true)
                }
                (Role::OutputFile, PathKind::File | PathKind::Missing) => {
                    let s = Staged::new(path, false)?;
                    let name = split_file(path)?.1;
                    sandbox.preopens.push(preopen(&s.dir, "/out", true));
                    staged.push(s);
                    note(format!("/out/{name}"), PathKind::Missing, true)
                }
                // Nothing to preopen: the guest reports it from the note alone.
                (_, k) => note(format!("/arg{i}"), k, false),
            })
        })();
        result.unwrap_or_else(|e| {
            failed.get_or_insert(e);
            String::new()
        })
    });
    if let Some(e) = failed {
        return Err(e);
    }
    sandbox.env = PathNote::to_env(&notes);
    Ok((guest_cmd.to_args(), staged))
}

/// Takes, for the run, the locks the native host would take for `cmd`
/// ([`Command::locks`]) on each existing store's meta.zr, so that `zr-wasm delete` fails
/// while a native `zr` or Python process has the store open, and a native delete waits for
/// no `zr-wasm` reader. Open-file-description locks (`F_OFD_SETLK`): they conflict with the
/// native host's process locks, and the guest's own descriptors of meta.zr, opened and
/// closed inside this process, cannot drop them. `Ok(Err(line))` when a lock is held
/// elsewhere: the native `zr`'s message for it.
fn take_locks(cmd: &Command) -> Result<std::result::Result<Vec<std::fs::File>, String>> {
    let locks = cmd.locks();
    let mut held = Vec::new();
    let mut paths: Vec<&str> = locks.iter().map(|&(p, _)| p).collect();
    paths.dedup();
    for path in paths {
        let modes: Vec<_> = locks.iter().filter(|&&(p, _)| p == path).map(|&(_, m)| m).collect();
        let meta = Path::new(path).join(zrecord_core::format::META_FILE);
        if kind(path) != PathKind::Dir || !meta.is_file() {
            continue; // a new store, or none: the guest says what is wrong
        }
        // One descriptor per store: an OFD lock conflicts with this process's other ones.
        let writes = modes.iter().any(|m| m.writes());
        let Ok(file) =
            zrecord_core::io::std_dir::open_regular(std::fs::OpenOptions::new().read(true).write(writes), &meta)
        else {
            continue; // cannot be opened so: the guest's own open reports why
        };
        for mode in modes {
            let kind = if mode.writes() { libc::F_WRLCK } else { libc::F_RDLCK };
            let got = zrecord_core::io::std_dir::set_lock(&file, libc::F_OFD_SETLK, kind, mode.byte())
                .with_context(|| format!("locking {}", meta.display()))?;
            if !got {
                return Ok(Err(format!("zr: error: {path}: {}", mode.refused())));
            }
        }
        held.push(file);
    }
    Ok(Ok(held))
}

/// A private, empty directory the guest writes its exit code into (see `ZR_STATUS_FILE` in
/// the guest's `cli.rs`: wasi:cli/exit carries only success or failure). Removed on drop.
struct StatusDir(PathBuf);

impl StatusDir {
    const GUEST: &'static str = "/.zr-status";

    fn new() -> Result<StatusDir> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("zr-wasm-status-{}-{seq}", std::process::id()));
        let mut b = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(StatusDir(dir))
    }

    /// The exit code the guest recorded, if it recorded one.
    fn code(&self) -> Option<i32> {
        std::fs::read_to_string(self.0.join("code")).ok()?.trim().parse().ok()
    }
}

impl Drop for StatusDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(o: Options) -> Result<u8> {
    let mut sandbox = Sandbox {
        max_memory: o.max_memory_mib.checked_mul(1 << 20).context("--max-memory is too large")?,
        timeout: o.timeout,
        inherit_stdio: true,
        preopens: Vec::new(),
        env: Vec::new(),
    };
    // A command line the parser refuses, --help and --version go to the guest untouched,
    // with nothing preopened, so that it answers them exactly as the native zr does.
    let parsed = Command::parse(&o.rest);
    let (guest_args, mut staged) = match &parsed {
        Ok(cmd) if !matches!(cmd, Command::Help | Command::Version) => plan(cmd, &mut sandbox)?,
        _ => (o.rest.clone(), Vec::new()),
    };
    let runtime = Runtime::from_source(&source(&o)?, o.cache_dir.as_deref())?;
    if let Some(why) = &runtime.cache_refused {
        eprintln!("zr-wasm: warning: not using the compiled-code cache ({why}); compiling instead");
    }
    let _locks = match &parsed {
        Ok(cmd) => match take_locks(cmd)? {
            Ok(held) => held,
            Err(message) => {
                eprintln!("{message}");
                return Ok(EXIT_ERROR);
            }
        },
        Err(_) => Vec::new(),
    };
    let status_dir = StatusDir::new()?;
    if let Some(t) = sandbox.timeout {
        // What a stopped run must not leave behind: the staged outputs, the status directory.
        let mut leftovers: Vec<PathBuf> = staged.iter().flat_map(|s| [s.dir.clone()]).collect();
        let parents: Vec<PathBuf> = staged.iter().flat_map(|s| s.created.iter().rev().cloned()).collect();
        leftovers.push(status_dir.0.clone());
        std::thread::spawn(move || {
            std::thread::sleep(t + WATCHDOG_GRACE);
            for d in &leftovers {
                let _ = std::fs::remove_dir_all(d);
            }
            for p in &parents {
                let _ = std::fs::remove_dir(p);
            }
            eprintln!("zr-wasm: {}", Limit::Timeout(t));
            std::process::exit(i32::from(EXIT_LIMIT));
        });
    }
    sandbox.preopens.push(preopen(&status_dir.0, StatusDir::GUEST, true));
    sandbox.env.push(("ZR_STATUS_FILE".into(), format!("{}/code", StatusDir::GUEST)));
    let status = match runtime.run_command(&guest_args, &sandbox)? {
        0 => 0,
        failed => status_dir.code().filter(|&c| c != 0).unwrap_or(failed),
    };
    if status == 0 {
        for s in &mut staged {
            s.commit()?;
        }
        if matches!(parsed, Ok(Command::Help)) {
            let _ = writeln!(std::io::stdout(), "{RUNNER_HELP}");
        }
    }
    drop(staged);
    Ok(u8::try_from(status).unwrap_or(EXIT_ERROR))
}

fn main() -> ExitCode {
    let args: Result<Vec<String>> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string().map_err(|a| wasmtime::format_err!("argument {} is not valid UTF-8", a.display())))
        .collect();
    let result = args.and_then(parse_options).and_then(run);
    match result {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            if let Some(limit) = e.downcast_ref::<Limit>() {
                eprintln!("zr-wasm: {limit}");
                return ExitCode::from(EXIT_LIMIT);
            }
            eprintln!("zr-wasm: error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
