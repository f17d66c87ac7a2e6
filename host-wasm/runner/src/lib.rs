//! The wasmtime host for `zr.wasm`.
//!
//! [`Runtime`] holds the engine and the compiled component (from the code cache when it
//! can). Each call gets a fresh [`wasmtime::Store`] that sees only the directories the
//! caller lists in [`Sandbox::preopens`], is bounded in memory by a [`MemoryCap`] and in
//! time by epoch interruption, and reports hitting either bound as a [`Limit`] error
//! rather than a bare trap. Errors are `wasmtime::Error` (wasmtime 48's own type), so
//! downcasting to [`Limit`], [`Trap`] and `I32Exit` works on everything a call returns.
//!
//! Two ways in: [`Runtime::run_command`] runs the component's `wasi:cli/run` (what the
//! `zr-wasm` binary does), and [`Runtime::instantiate`] returns the typed bindings of
//! `wit/zrecord.wit` (generated here by `bindgen!` from the same files the guest uses).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::error::Context;
use wasmtime::{format_err, Config, Engine, Error, ResourceLimiter, Result, Store, Trap};
use wasmtime_wasi::p2::bindings::sync::Command;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "zr",
});

/// How often the epoch ticks: the granularity of [`Sandbox::timeout`].
const TICK: Duration = Duration::from_millis(10);

/// A host directory the guest may see, and under which guest path.
#[derive(Clone, Debug)]
pub struct Preopen {
    /// Directory on the host.
    pub host: PathBuf,
    /// Where the guest sees it, e.g. `/store`.
    pub guest: String,
    /// Whether the guest may create, change and remove files in it.
    pub writable: bool,
}

/// What one call may see and use.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// The only directories visible to the guest.
    pub preopens: Vec<Preopen>,
    /// Upper bound on the guest's linear memory, in bytes.
    pub max_memory: usize,
    /// Wall-clock bound on the call; `None` for none.
    pub timeout: Option<Duration>,
    /// Let the guest write to this process's stdout and stderr (the CLI does; tests capture).
    pub inherit_stdio: bool,
    /// Environment variables the guest sees (and no others). `zr-wasm` passes the user's
    /// names of the paths it preopened this way (`zrecord_app::cli::PathNote`).
    pub env: Vec<(String, String)>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            preopens: Vec::new(),
            max_memory: 1 << 30,
            timeout: Some(Duration::from_secs(3600)),
            inherit_stdio: false,
            env: Vec::new(),
        }
    }
}

/// A bound the guest ran into. Returned (inside the `wasmtime::Error`) instead of the trap it
/// caused, so callers can tell "stopped by a limit" from "guest failed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// The call ran past [`Sandbox::timeout`].
    Timeout(Duration),
    /// The guest asked to grow its memory to `requested` bytes, past the `cap`.
    Memory {
        /// Bytes the guest wanted in all.
        requested: usize,
        /// [`Sandbox::max_memory`].
        cap: usize,
    },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Timeout(t) => write!(
                f,
                "stopped: the call ran past its time limit of {:.3} s (raise it with --timeout)",
                t.as_secs_f64()
            ),
            Limit::Memory { requested, cap } => write!(
                f,
                "stopped: the guest asked for {} MiB of memory, over the cap of {} MiB (raise it with --max-memory)",
                requested.div_ceil(1 << 20),
                cap / (1 << 20)
            ),
        }
    }
}

impl std::error::Error for Limit {}

/// A [`ResourceLimiter`] that refuses memory growth past a cap and remembers that it did,
/// so a trap that follows (the guest aborting on a failed allocation) can be explained.
#[derive(Debug)]
pub struct MemoryCap {
    cap: usize,
    refused: Option<usize>,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        if desired > self.cap {
            self.refused = Some(self.refused.unwrap_or(0).max(desired));
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// Per-call host state.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryCap,
    /// The guest's stderr, held until it exits (see [`GUEST_STDERR_CAP`]).
    stderr: Option<MemoryOutputPipe>,
}

/// How much of the guest's stderr is held (its messages are one line each). Held rather
/// than passed through so that a guest stopped at the memory cap, whose Rust runtime prints
/// "memory allocation of N bytes failed" and a panic note as it aborts, ends with
/// `zr-wasm`'s one line ("zr-wasm: stopped: ...") as every other failure does: the guest
/// cannot catch the allocation failure itself (Rust has no stable allocation-error hook).
const GUEST_STDERR_CAP: usize = 1 << 20;

/// Writes what the guest wrote to stderr to this process's, unless the memory cap stopped
/// it (`capped`): an aborted guest's last words are its runtime's, not a message of ours.
fn pass_stderr(state: &State, capped: bool) {
    use std::io::Write;
    if let Some(pipe) = state.stderr.as_ref().filter(|_| !capped) {
        let _ = std::io::stderr().lock().write_all(&pipe.contents());
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// Where the compiled component comes from.
pub enum Source {
    /// `zr.wasm` embedded in this binary at build time, if it was built first.
    Embedded,
    /// A component file.
    File(PathBuf),
}

/// The component bytes embedded at build time, if any.
pub fn embedded() -> Option<&'static [u8]> {
    #[cfg(zr_embedded)]
    {
        Some(include_bytes!(env!("ZR_WASM_EMBEDDED")))
    }
    #[cfg(not(zr_embedded))]
    {
        None
    }
}

/// The default code cache directory: `$ZR_WASM_CACHE`, else `$XDG_CACHE_HOME/zr-wasm`, else
/// `~/.cache/zr-wasm`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ZR_WASM_CACHE") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(p).join("zr-wasm"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("zr-wasm"))
}

/// The engine, the compiled component and a linker with WASI preview 2.
pub struct Runtime {
    engine: Engine,
    component: Component,
    linker: Linker<State>,
    /// Whether the component came from the cache (for tests and `--verbose`).
    pub cache_hit: bool,
    /// Why the cache directory was not used, if it was given and refused (see
    /// [`check_private`]); `zr-wasm` prints it as a one-line warning.
    pub cache_refused: Option<String>,
}

impl Runtime {
    /// Loads the component from `bytes`, through the code cache in `cache_dir` if given.
    pub fn new(bytes: &[u8], cache_dir: Option<&Path>) -> Result<Runtime> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config)?;
        let (component, cache_hit, cache_refused) = load_cached(&engine, bytes, cache_dir)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        Ok(Runtime { engine, component, linker, cache_hit, cache_refused })
    }

    /// Loads the component from `source` (see [`Runtime::new`]).
    pub fn from_source(source: &Source, cache_dir: Option<&Path>) -> Result<Runtime> {
        match source {
            Source::Embedded => {
                let bytes = embedded().ok_or_else(|| format_err!("this zr-wasm was built without zr.wasm embedded"))?;
                Runtime::new(bytes, cache_dir)
            }
            Source::File(p) => {
                let bytes = std::fs::read(p).with_context(|| format!("reading component {}", p.display()))?;
                Runtime::new(&bytes, cache_dir)
            }
        }
    }

    fn store(&self, sandbox: &Sandbox, args: &[String]) -> Result<Store<State>> {
        let mut b = WasiCtxBuilder::new();
        // The guest runs synchronously on this thread, so its file reads may block it too:
        // without this every read is handed to a blocking pool and waited for, which cost
        // `stats` a third of its CPU time in thread wake-ups (bench/results/2026-12-05-wasm.md).
        b.allow_blocking_current_thread(true);
        b.args(args);
        b.envs(&sandbox.env);
        let stderr = sandbox.inherit_stdio.then(|| MemoryOutputPipe::new(GUEST_STDERR_CAP));
        if let Some(pipe) = &stderr {
            b.inherit_stdout().stderr(pipe.clone());
        }
        for p in &sandbox.preopens {
            let perms = if p.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            b.preopened_dir(&p.host, &p.guest, perms)
                .with_context(|| format!("preopening {} as {}", p.host.display(), p.guest))?;
        }
        let state = State {
            wasi: b.build(),
            table: ResourceTable::new(),
            limiter: MemoryCap { cap: sandbox.max_memory, refused: None },
            stderr,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_trap();
        let ticks = match sandbox.timeout {
            Some(t) => (t.as_nanos() / TICK.as_nanos()).max(1) as u64,
            None => u64::MAX,
        };
        store.set_epoch_deadline(ticks);
        Ok(store)
    }

    /// Runs `f` with an epoch ticker running, and turns a trap caused by a limit into
    /// a [`Limit`] error.
    fn bounded<T>(
        &self,
        store: &mut Store<State>,
        sandbox: &Sandbox,
        f: impl FnOnce(&mut Store<State>) -> Result<T>,
    ) -> Result<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = sandbox.timeout.map(|_| {
            let (engine, stop) = (self.engine.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                }
            })
        });
        let out = f(store);
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = ticker {
            let _ = t.join();
        }
        out.map_err(|e| explain(e, store, sandbox))
    }

    /// Runs the component as a command with `args` (the guest's argv after its name).
    /// Returns the guest's exit status.
    pub fn run_command(&self, args: &[String], sandbox: &Sandbox) -> Result<i32> {
        let mut argv = vec!["zr".to_string()];
        argv.extend_from_slice(args);
        let mut store = self.store(sandbox, &argv)?;
        let command = Command::instantiate(&mut store, &self.component, &self.linker)
            .map_err(|e| explain_instantiate(e, &store, sandbox))?;
        let result = self.bounded(&mut store, sandbox, |store| command.wasi_cli_run().call_run(store));
        let capped = store.data().limiter.refused.is_some()
            && matches!(&result, Err(e) if e.downcast_ref::<Limit>().is_some_and(|l| matches!(l, Limit::Memory { .. })));
        pass_stderr(store.data(), capped);
        match result {
            Ok(Ok(())) => Ok(0),
            Ok(Err(())) => Ok(1),
            Err(e) => match e.downcast_ref::<I32Exit>() {
                Some(exit) => Ok(exit.0),
                None => Err(e),
            },
        }
    }

    /// Instantiates the component for typed calls through the `wit/zrecord.wit` bindings.
    /// Calls made through the returned store are bounded by `sandbox` as a whole; use
    /// [`Runtime::call`] to get limit errors explained.
    pub fn instantiate(&self, sandbox: &Sandbox) -> Result<(Store<State>, Zr)> {
        let mut store = self.store(sandbox, &["zr".to_string()])?;
        let zr = Zr::instantiate(&mut store, &self.component, &self.linker)
            .map_err(|e| explain_instantiate(e, &store, sandbox))?;
        Ok((store, zr))
    }

    /// Makes one typed call with the time limit running and limit traps explained.
    pub fn call<T>(
        &self,
        store: &mut Store<State>,
        sandbox: &Sandbox,
        f: impl FnOnce(&mut Store<State>) -> Result<T>,
    ) -> Result<T> {
        self.bounded(store, sandbox, f)
    }
}

/// An instantiation that failed after the cap refused memory (the component's initial
/// memory is over the cap, as with `--max-memory 1`) failed because of the cap.
fn explain_instantiate(e: Error, store: &Store<State>, sandbox: &Sandbox) -> Error {
    match store.data().limiter.refused {
        Some(requested) => Error::new(Limit::Memory { requested, cap: sandbox.max_memory }),
        None => e,
    }
}

/// Replaces a trap caused by a limit with the [`Limit`] that caused it.
fn explain(e: Error, store: &Store<State>, sandbox: &Sandbox) -> Error {
    if let Some(requested) = store.data().limiter.refused {
        // The guest may have handled the refusal (an out-of-memory error result); only a
        // trap that follows it is the cap's doing.
        if e.downcast_ref::<Trap>().is_some() {
            return Error::new(Limit::Memory { requested, cap: sandbox.max_memory });
        }
    }
    if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        if let Some(t) = sandbox.timeout {
            return Error::new(Limit::Timeout(t));
        }
    }
    e
}

/// Checks that `path` can only have been written by this user: it is not a symlink, it is
/// a directory if `dir` (else a regular file), it is owned by the effective user, and
/// neither its group nor others may write it. A code cache that fails this is not used:
/// whoever can write it could make this process run their machine code.
#[cfg(unix)]
pub fn check_private(path: &Path, dir: bool) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let ft = m.file_type();
    if ft.is_symlink() {
        return Err(format!("{} is a symbolic link", path.display()));
    }
    if dir && !ft.is_dir() {
        return Err(format!("{} is not a directory", path.display()));
    }
    if !dir && !ft.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return Err(format!("{} is owned by uid {}, not by this user (uid {me})", path.display(), m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!("{} is writable by its group or by others (mode {:o})", path.display(), m.mode() & 0o7777));
    }
    Ok(())
}

/// Without Unix ownership and modes there is nothing to check a cache with: never use one.
#[cfg(not(unix))]
pub fn check_private(path: &Path, _dir: bool) -> std::result::Result<(), String> {
    Err(format!("{}: cannot check who may write it on this platform", path.display()))
}

/// Creates the cache directory if missing, private to this user.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Writes `bytes` to a new file at `path` that only this user may write.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)?.write_all(bytes)
}

/// The compiled component for `bytes`, from `cache_dir` if an entry compiled by this same
/// engine configuration is there and the directory and the entry pass [`check_private`],
/// else compiled now and stored for next time. Returns the component, whether it came
/// from the cache, and why the cache was refused, if it was.
fn load_cached(engine: &Engine, bytes: &[u8], cache_dir: Option<&Path>) -> Result<(Component, bool, Option<String>)> {
    let Some(dir) = cache_dir else {
        return Ok((Component::new(engine, bytes)?, false, None));
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    engine.precompile_compatibility_hash().hash(&mut h);
    env!("CARGO_PKG_VERSION").hash(&mut h);
    let path = dir.join(format!("zr-{:016x}.cwasm", h.finish()));
    // A cache that cannot be created only costs this start its compile time.
    if create_private_dir(dir).is_err() {
        return Ok((Component::new(engine, bytes)?, false, None));
    }
    if let Err(why) = check_private(dir, true) {
        return Ok((Component::new(engine, bytes)?, false, Some(why)));
    }
    let mut refused = None;
    if path.exists() {
        match check_private(&path, false) {
            // SAFETY: `deserialize_file` runs the machine code in the file as if it were
            // compiled here: it is sound only if the file is the unmodified output of
            // `Component::serialize` from an engine like this one. wasmtime checks the
            // version and configuration recorded in the file, not the code. What makes the
            // code ours is who could have written it: `check_private` has just verified that
            // the directory and the entry are owned by this user, are not symlinks and are
            // not writable by group or others, so only this user (or root) could have put
            // it there, and this program only writes entries it serialized itself (into a
            // new private file, renamed into place). Entries are replaced only by rename,
            // never rewritten, so the mapped file does not change under us. A user who
            // edits their own cache by hand can already run any code as themselves.
            // Remaining gap: a file swapped between the check and the open by this same user.
            Ok(()) => match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => return Ok((c, true, None)),
                // Fails wasmtime's version/configuration checks: recompiled and replaced.
                Err(_) => {
                    let _ = std::fs::remove_file(&path);
                }
            },
            Err(why) => refused = Some(why),
        }
    }
    let component = Component::new(engine, bytes)?;
    // In our own private directory, a refused entry is replaced by one of ours.
    if let Ok(serialized) = component.serialize() {
        // Unique per writer: deserialize_file maps the entry, so a file another thread
        // or process might be reading is only ever replaced by rename, never rewritten.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{:016x}.{}.{seq}.tmp", h.finish(), std::process::id()));
        if write_private(&tmp, &serialized).is_err() || std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok((component, false, refused))
}
