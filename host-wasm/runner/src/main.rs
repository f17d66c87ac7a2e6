//! `zr-wasm`: the `zr` command line, run inside wasmtime from `zr.wasm`.
//!
//! ```text
//! zr-wasm [OPTIONS] inspect STORE [--json]
//! zr-wasm [OPTIONS] verify STORE [--json]
//! zr-wasm [OPTIONS] stats STORE
//! zr-wasm [OPTIONS] convert IN.npy OUT [--codec flate|raw] [--chunk-mib N]
//! zr-wasm [OPTIONS] export STORE OUT.npy
//!
//! OPTIONS: --max-memory MIB (default 1024)   --timeout SECS (default 3600, 0: none)
//!          --component PATH   --cache-dir DIR   --no-cache
//! ```
//!
//! The guest sees only what the command needs: the store (read-only) as `/store`; the
//! directory of `IN.npy` (read-only) as `/in`; for convert the output store directory
//! (read-write, created if missing) as `/out`; for export a fresh private directory
//! (read-write) beside `OUT.npy` as `/out`, whose one file is renamed onto `OUT.npy` when the
//! guest succeeds. Every other path, including `..` out of a preopen and symlinks pointing
//! out of one, is refused by wasmtime-wasi.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use wasmtime::error::Context;
use wasmtime::{bail, Result};
use zr_wasm::{default_cache_dir, Limit, Preopen, Runtime, Sandbox, Source};

const USAGE: &str =
    "usage: zr-wasm [--max-memory MIB] [--timeout SECS] [--component PATH] [--cache-dir DIR] [--no-cache]
                 inspect STORE [--json] | verify STORE [--json] | stats STORE
                 | convert IN.npy OUT [--codec flate|raw] [--chunk-mib N] | export STORE OUT.npy";

/// Guest options that take a separate value.
const GUEST_VALUED: &[&str] = &["--codec", "--chunk-mib"];

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
                o.timeout = (secs > 0.0).then(|| Duration::from_secs_f64(secs));
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

fn existing_dir(p: &str) -> Result<PathBuf> {
    let path = Path::new(p).canonicalize().with_context(|| format!("{p}: no such directory"))?;
    if !path.is_dir() {
        bail!("{p} is not a directory");
    }
    Ok(path)
}

/// The parent directory and file name of `p` (which need not exist).
fn split_file(p: &str) -> Result<(PathBuf, String)> {
    let path = Path::new(p);
    let name =
        path.file_name().and_then(|n| n.to_str()).with_context(|| format!("{p} does not name a file"))?.to_string();
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent = parent.canonicalize().with_context(|| format!("{}: no such directory", parent.display()))?;
    Ok((parent, name))
}

fn ro(host: PathBuf, guest: &str) -> Preopen {
    Preopen { host, guest: guest.into(), writable: false }
}

fn rw(host: PathBuf, guest: &str) -> Preopen {
    Preopen { host, guest: guest.into(), writable: true }
}

/// A private directory for export's output, removed when dropped.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(o: Options) -> Result<i32> {
    let (cmd, args) = o.rest.split_first().context("no command given")?;
    // Guest options pass through untouched; only paths are rewritten. Options that take a
    // value keep it, so a value is never mistaken for a path.
    let (mut positional, mut flags) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a.starts_with("--") {
            flags.push(a.clone());
            if GUEST_VALUED.contains(&a.as_str()) {
                flags.push(it.next().with_context(|| format!("{a} needs a value"))?.clone());
            }
        } else {
            positional.push(a.clone());
        }
    }
    let mut sandbox = Sandbox {
        max_memory: o.max_memory_mib.checked_mul(1 << 20).context("--max-memory is too large")?,
        timeout: o.timeout,
        inherit_stdio: true,
        preopens: Vec::new(),
    };
    let mut guest_args = vec![cmd.clone()];
    let mut staging = None;
    let mut finish: Option<(PathBuf, PathBuf)> = None;
    match (cmd.as_str(), positional.as_slice()) {
        ("inspect" | "verify" | "stats", [store]) => {
            sandbox.preopens.push(ro(existing_dir(store)?, "/store"));
            guest_args.push("/store".into());
        }
        ("convert", [input, output]) => {
            let (in_dir, in_name) = split_file(input)?;
            std::fs::create_dir_all(output).with_context(|| format!("creating {output}"))?;
            sandbox.preopens.push(ro(in_dir, "/in"));
            sandbox.preopens.push(rw(existing_dir(output)?, "/out"));
            guest_args.push(format!("/in/{in_name}"));
            guest_args.push("/out".into());
        }
        ("export", [store, output]) => {
            let (out_dir, out_name) = split_file(output)?;
            let stage = out_dir.join(format!(".zr-wasm-export-{}", std::process::id()));
            std::fs::create_dir(&stage).with_context(|| format!("creating {}", stage.display()))?;
            staging = Some(Staging(stage.clone()));
            sandbox.preopens.push(ro(existing_dir(store)?, "/store"));
            sandbox.preopens.push(rw(stage.clone(), "/out"));
            guest_args.push("/store".into());
            guest_args.push("/out/export.npy".into());
            finish = Some((stage.join("export.npy"), out_dir.join(out_name)));
        }
        ("help", _) => {
            println!("{USAGE}");
            return Ok(0);
        }
        (_, _) => bail!("cannot run {cmd:?} with {} path(s)\n{USAGE}", positional.len()),
    }
    guest_args.extend(flags);

    let runtime = Runtime::from_source(&source(&o)?, o.cache_dir.as_deref())?;
    let status = runtime.run_command(&guest_args, &sandbox)?;
    if let (0, Some((from, to))) = (status, finish) {
        std::fs::rename(&from, &to).with_context(|| format!("moving the export into {}", to.display()))?;
    }
    drop(staging);
    Ok(status)
}

fn main() -> ExitCode {
    let result = parse_options(std::env::args().skip(1).collect()).and_then(run);
    match result {
        Ok(status) => ExitCode::from(u8::try_from(status).unwrap_or(1)),
        Err(e) => {
            if let Some(limit) = e.downcast_ref::<Limit>() {
                eprintln!("zr-wasm: {limit}");
                return ExitCode::from(3);
            }
            eprintln!("zr-wasm: {e:#}");
            ExitCode::from(1)
        }
    }
}
