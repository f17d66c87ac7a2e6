//! The `zr` command line, written once for every front end: argument parsing, the
//! subcommands, every line printed, every message and the exit codes.
//!
//! `zr` (native) and `zr.wasm` (run by `zr-wasm`) are thin front ends: they implement
//! [`Host`] (how to open a store or a file, where paths lead, progress display, stdout and
//! stderr) and call [`run`]. So the same arguments give the same stdout, the same stderr and
//! the same exit code on both, which `host-wasm/python/tests/test_cli_matrix.py` checks.
//!
//! Exit codes, part of the interface:
//! - [`EXIT_OK`] (0): done.
//! - [`EXIT_BAD_RECORDS`] (1): `verify` ran and found records that fail to decode.
//! - [`EXIT_ERROR`] (2): the command failed, or its arguments were wrong; one line on stderr.
//! - 3 is `zr-wasm`'s own: it stopped the guest at its memory or time limit.
//!
//! Paths are strings, as the user typed them; a host that runs the command somewhere else
//! (the wasm guest sees preopened guest paths) maps them back with [`Host::shown`] so that
//! messages name what the user typed.
//!
//! The files: `cli.rs` running a command ([`run`]: the exit codes, what is printed, the
//! one-line [`Failure`]); `command.rs` the command line's grammar ([`Command`], its parsing,
//! [`USAGE`], path roles and notes, a file each under `command/`); `host.rs` the [`Host`] trait and the types it passes;
//! `dataset.rs` the commands on a dataset of named fields.

use alloc::format;
use alloc::string::{String, ToString};

use zrecord_core::codec::CodecPolicy;
use zrecord_core::engine::{Store, Verify, Writer};
use zrecord_core::error::{Error, FormatError};
use zrecord_core::io::Parallel;

use crate::tools;

mod command;
mod dataset;
mod host;

pub use command::{Command, PathNote, Role, UsageError, TOKEN_DTYPES, USAGE};
pub use host::{
    Access, Closed, FieldImport, FieldsDone, Host, PathKind, TextImport, ViewOptions, NO_FIELDS_IO, NO_REMOTE, NO_VIEW,
};

/// The command succeeded.
pub const EXIT_OK: i32 = 0;
/// `verify` found records that fail to decode.
pub const EXIT_BAD_RECORDS: i32 = 1;
/// The command failed or was given wrong arguments.
pub const EXIT_ERROR: i32 = 2;

/// The version `--version` prints.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why a command failed, printed as the one line `zr: error: PATH: MESSAGE`, PATH being
/// the path at fault as the user typed it.
#[derive(Debug)]
pub struct Failure {
    /// The path at fault, as the user typed it.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

impl Failure {
    /// A failure about `path`.
    pub fn new(path: String, message: impl Into<String>) -> Failure {
        Failure { path, message: message.into() }
    }

    /// The failure of `e` about `path`.
    pub fn at(path: String, e: Error) -> Failure {
        Failure::new(path, e.to_string())
    }
}

/// stdout, which stays quiet once its reader has gone.
struct Out<'h, H: Host> {
    host: &'h mut H,
    closed: bool,
}

impl<H: Host> Out<'_, H> {
    fn line(&mut self, text: &str) {
        if !self.closed {
            let mut s = String::with_capacity(text.len() + 1);
            s.push_str(text);
            s.push('\n');
            self.closed = self.host.out(&s).is_err();
        }
    }
}

/// Renames the staged output `staged` (if the command staged one) to `output`, discarding
/// it if that fails.
fn publish<H: Host>(host: &mut H, staged: Option<&str>, output: &str, out_shown: String) -> Result<(), Failure> {
    if let Some(dir) = staged {
        if let Err(e) = host.commit(dir, output) {
            host.discard(dir);
            return Err(Failure::at(out_shown, e));
        }
    }
    Ok(())
}

/// What `verify` prints about one store's damage, line by line; `at` names the shard and
/// field of a dataset's store (`shard-000001/image`).
fn damage_lines<H: Host>(out: &mut Out<'_, H>, r: &tools::Verification, at: Option<&str>) {
    let (of, within) = match at {
        Some(at) => (format!(" of {at}"), format!(" in {at}")),
        None => (String::new(), String::new()),
    };
    for p in &r.problems {
        match at {
            Some(at) => out.line(&format!("damaged: {at}: {p}")),
            None => out.line(&format!("damaged: {p}")),
        }
    }
    if r.cut_off > 0 {
        out.line(&format!("{} records{of} lie past the end of a truncated chunk", r.cut_off));
    }
    for b in &r.bad {
        out.line(&format!("bad record {}{of}: {}", b.index, b.error));
    }
    if r.unlisted() > 0 {
        out.line(&format!("... and {} more{within}", r.unlisted()));
    }
}

fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The store at `path`, after checking there is a directory there (so a missing path or a
/// file gets a message about the path, not an I/O error).
fn open_checked<H: Host>(host: &mut H, path: &str, access: Access) -> Result<(Store<H::Backend>, Writer), Failure> {
    let shown = host.shown(path);
    match host.kind(path) {
        PathKind::Dir => host.open_store(path, access).map_err(|e| Failure::at(shown, e)),
        PathKind::File => Err(Failure::new(shown, "is a file, not a store directory")),
        PathKind::Missing | PathKind::MissingParent => Err(Failure::new(shown, "no such store directory")),
    }
}

/// Errors about a `.npy` input, without the "not a zrecord store" that format errors about
/// a store carry.
fn blame_input(shown: String, e: Error) -> Failure {
    match e {
        Error::Format(FormatError::Container(m)) => Failure::new(shown, m),
        e => Failure::at(shown, e),
    }
}

/// Parses `args` (without the program name), runs the command on `host` with `par` for
/// parallel work, prints its output and any error, and returns the exit code.
pub fn run<H: Host, P: Parallel>(host: &mut H, par: &P, args: &[String]) -> i32 {
    let cmd = match Command::parse(args) {
        Ok(c) => c,
        Err(UsageError(m)) => {
            host.err(&format!("zr: error: {m} (zr --help shows usage)\n"));
            return EXIT_ERROR;
        }
    };
    match execute(host, par, cmd) {
        Ok(code) => code,
        Err(f) => {
            host.err(&format!("zr: error: {}: {}\n", f.path, f.message));
            EXIT_ERROR
        }
    }
}

fn execute<H: Host, P: Parallel>(host: &mut H, par: &P, cmd: Command) -> Result<i32, Failure> {
    match cmd {
        Command::Help => {
            Out { host, closed: false }.line(USAGE);
        }
        Command::Version => {
            Out { host, closed: false }.line(&format!("zr {VERSION}"));
        }
        Command::Inspect { store, json: as_json } => {
            if let Some(m) = dataset::manifest(host, &store)? {
                return dataset::inspect(host, &store, &m, as_json);
            }
            let (s, _w) = open_checked(host, &store, Access::Read)?;
            let shown = host.shown(&store);
            let report = tools::inspect(&s).map_err(|e| Failure::at(shown.clone(), e))?;
            let mut out = Out { host, closed: false };
            if as_json {
                out.line(&json(&report));
            } else {
                out.line(&format!("store         {shown}"));
                out.line(&report.to_string());
            }
        }
        Command::Stats { store } => {
            if let Some(m) = dataset::manifest(host, &store)? {
                return dataset::stats(host, &store, &m);
            }
            let (s, _w) = open_checked(host, &store, Access::Read)?;
            let st = s.stats().map_err(|e| Failure::at(host.shown(&store), e))?;
            // loaderx's four keys; `unchecked` too when the store keeps checksums (as Python's
            // stats() does).
            let unchecked =
                if s.has_checksums() { format!(", \"unchecked\": {}", st.unchecked) } else { String::new() };
            Out { host, closed: false }.line(&format!(
                "{{\"records\": {}, \"live_bytes\": {}, \"chunk_bytes\": {}, \"reclaimable\": {}{unchecked}}}",
                st.records, st.live_bytes, st.chunk_bytes, st.reclaimable
            ));
        }
        Command::Verify { store, json: as_json, seal } => {
            if let Some(m) = dataset::manifest(host, &store)? {
                if seal {
                    return Err(dataset::refuse(host, &store, "verify --seal"));
                }
                return dataset::verify(host, par, &store, &m, as_json);
            }
            let (s, mut w) = open_checked(host, &store, if seal { Access::Write } else { Access::Read })?;
            let shown = host.shown(&store);
            let sealed = if seal {
                let r = s.seal(&mut w, &mut |d, t| host.progress("seal", d, t));
                s.release_locks(&mut w);
                Some(r.map_err(|e| Failure::at(shown.clone(), e))?)
            } else {
                None
            };
            let report =
                tools::verify(&s, par, &mut |d, t| host.progress("verify", d, t)).map_err(|e| Failure::at(shown, e))?;
            let mut out = Out { host, closed: false };
            if as_json {
                out.line(&json(&report));
            } else {
                if let Some(sealed) = sealed {
                    out.line(&format!(
                        "sealed {} records ({} already had a checksum, {} failed to decode)",
                        sealed.sealed, sealed.already, sealed.bad
                    ));
                }
                damage_lines(&mut out, &report, None);
                out.line(&format!(
                    "{} records checked, {} bad ({} checked against their checksums, {} unchecked)",
                    report.checked, report.bad_count, report.checksummed, report.unchecked
                ));
            }
            if !report.ok() {
                return Ok(EXIT_BAD_RECORDS);
            }
        }
        Command::Compact { store, target_rows, force } => {
            if dataset::manifest(host, &store)?.is_some() {
                let line = host.compact_dataset(&store, target_rows.unwrap_or(dataset::DEFAULT_TARGET_ROWS))?;
                Out { host, closed: false }.line(&line);
                return Ok(EXIT_OK);
            }
            if target_rows.is_some() {
                return Err(Failure::new(
                    host.shown(&store),
                    "--target-rows applies to a dataset of named fields (a directory with a dataset.json)",
                ));
            }
            if !force {
                dataset::refuse_field_store(host, &store, "compact")?;
            }
            let (mut s, mut w) = open_checked(host, &store, Access::Write)?;
            let shown = host.shown(&store);
            let result = (|| {
                let before = s.stats()?;
                s.compact(&mut w, &mut |d, t| host.progress("compact", d, t))?;
                s.sync(&mut w)?;
                Ok::<_, Error>((before, s.stats()?))
            })();
            s.release_locks(&mut w);
            let (before, after) = result.map_err(|e| Failure::at(shown, e))?;
            Out { host, closed: false }.line(&format!(
                "compacted {} records: chunk bytes {} -> {} ({} reclaimable left)",
                after.records, before.chunk_bytes, after.chunk_bytes, after.reclaimable
            ));
        }
        Command::Layout { store, layout } => {
            let paths = match dataset::manifest(host, &store)? {
                Some(m) => dataset::store_paths(&store, &m),
                None => alloc::vec![store.clone()],
            };
            let (mut changed, mut finished) = (0usize, 0usize);
            for path in &paths {
                let (mut s, mut w) = open_checked(host, path, Access::Write)?;
                let was = s.layout();
                let result = s.set_layout(&mut w, layout);
                s.release_locks(&mut w);
                result.map_err(|e| Failure::at(host.shown(path), e))?;
                if was == layout {
                    finished += 1;
                } else {
                    changed += 1;
                }
            }
            let shown = host.shown(&store);
            let already = if finished > 0 {
                format!("; {finished} already were (their files sized again)")
            } else {
                String::new()
            };
            Out { host, closed: false }.line(&format!(
                "{shown} now {}: {changed} of {} stores changed{already}",
                layout.name(),
                paths.len()
            ));
        }
        Command::Delete { store, mut indices, from_file, force } => {
            if let Some(file) = &from_file {
                indices.extend(dataset::read_indices(host, file)?);
            }
            if dataset::manifest(host, &store)?.is_some() {
                let (gone, left) = host.delete_samples(&store, &indices)?;
                let shown = host.shown(&store);
                Out { host, closed: false }
                    .line(&format!("deleted {gone} samples of {shown} (every field); {left} remain"));
                return Ok(EXIT_OK);
            }
            if !force {
                dataset::refuse_field_store(host, &store, "delete")?;
            }
            let (mut s, mut w) = open_checked(host, &store, Access::Write)?;
            let before = s.len();
            let result = s.delete(&mut w, &indices).and_then(|()| s.sync(&mut w));
            s.release_locks(&mut w);
            result.map_err(|e| Failure::at(host.shown(&store), e))?;
            let after = s.len();
            Out { host, closed: false }.line(&format!("deleted {} records; {} remain", before - after, after));
        }
        Command::Clean { dataset: dir, older_than } => {
            if dataset::manifest(host, &dir)?.is_none() {
                return Err(Failure::new(
                    host.shown(&dir),
                    "is not a dataset of named fields (no dataset.json): clean works on a dataset",
                ));
            }
            let removed = host.leftovers(&dir, true, older_than)?;
            let bytes: u64 = removed.iter().map(|(_, b)| b).sum();
            let mut out = Out { host, closed: false };
            for (path, size) in &removed {
                out.line(&format!("removed {path} ({size} bytes)"));
            }
            out.line(&format!("removed {} leftovers of interrupted writes ({bytes} bytes)", removed.len()));
        }
        Command::Copy { src, dst } => {
            let line = host.copy(&src, &dst)?;
            Out { host, closed: false }.line(&line);
        }
        Command::Convert {
            input,
            output,
            policy,
            chunk_mib,
            shard_records,
            tokens,
            skip_empty,
            text,
            megatron,
            images,
        } => {
            if tokens.is_some()
                || text.is_some()
                || megatron
                || images
                || host.kind(&input) == PathKind::Dir
                || input.to_ascii_lowercase().ends_with(".npz")
            {
                let options =
                    FieldImport { policy, chunk_mib, shard_records, tokens, skip_empty, text, megatron, images };
                return dataset::convert(host, &input, &output, &options);
            }
            if shard_records.is_some() {
                return Err(Failure::new(
                    host.shown(&input),
                    "--shard-records is for a dataset of named fields (a directory of .npy files or an .npz)",
                ));
            }
            return convert(host, par, &input, &output, policy, chunk_mib);
        }
        Command::Export { store, output, verify } => return export(host, par, &store, &output, verify),
        Command::Push { local, url } => {
            let report = host.push(&local, &url)?;
            Out { host, closed: false }.line(&report);
        }
        Command::Pull { url, output } => return dataset::pull(host, &url, &output),
        Command::View { target, port, site, tokenizer, index } => {
            host.view(&target, &ViewOptions { port, site, tokenizer, index })?;
        }
    }
    Ok(EXIT_OK)
}

fn convert<H: Host, P: Parallel>(
    host: &mut H,
    par: &P,
    input: &str,
    output: &str,
    policy: CodecPolicy,
    chunk_mib: usize,
) -> Result<i32, Failure> {
    let (in_shown, out_shown) = (host.shown(input), host.shown(output));
    // The input is checked in full before anything is created, so a bad input leaves
    // nothing behind and its error names the input.
    let src = match host.kind(input) {
        PathKind::File => host.open_input(input).map_err(|e| Failure::at(in_shown.clone(), e))?,
        PathKind::Dir => return Err(Failure::new(in_shown, "is a directory, not a .npy file")),
        PathKind::Missing | PathKind::MissingParent => return Err(Failure::new(in_shown, "no such file")),
    };
    tools::check_npy(&src).map_err(|e| blame_input(in_shown.clone(), e))?;
    // A new dataset is built beside its final path and moved there at the end; appending
    // to an existing one happens in place (an append is all-or-nothing per batch already).
    let (dir, staged) = match host.kind(output) {
        PathKind::Dir if host.is_empty_dir(output) => {
            (host.stage_store(output).map_err(|e| Failure::at(out_shown.clone(), e))?, true)
        }
        PathKind::Dir => (output.to_string(), false),
        PathKind::File => return Err(Failure::new(out_shown, "is a file, not a store directory")),
        PathKind::Missing | PathKind::MissingParent => {
            (host.stage_store(output).map_err(|e| Failure::at(out_shown.clone(), e))?, true)
        }
    };
    let result = (|| {
        let (s, mut w) = host.open_store(&dir, Access::Create).map_err(|e| Failure::at(out_shown.clone(), e))?;
        let done =
            tools::convert(&src, &s, &mut w, policy, chunk_mib << 20, par, &mut |d, t| host.progress("convert", d, t));
        s.release_locks(&mut w);
        let done = done.map_err(|e| match e {
            // Input damage found while streaming (it changed under us) still names it.
            Error::Format(FormatError::Container(_)) => blame_input(in_shown.clone(), e),
            e => Failure::at(out_shown.clone(), e),
        })?;
        Ok((done, s.len()))
    })();
    let (done, len) = match result {
        Ok(r) => r,
        Err(f) => {
            if staged {
                host.discard(&dir);
            }
            return Err(f);
        }
    };
    publish(host, staged.then_some(dir.as_str()), output, out_shown)?;
    Out { host, closed: false }.line(&format!(
        "appended {} records of {}{:?} ({}) at index {}; store holds {}",
        done.appended, done.schema.dtype, done.schema.shape, done.schema.codec, done.first_index, len
    ));
    Ok(EXIT_OK)
}

fn export<H: Host, P: Parallel>(
    host: &mut H,
    par: &P,
    store: &str,
    output: &str,
    verify: Verify,
) -> Result<i32, Failure> {
    if dataset::manifest(host, store)?.is_some() {
        return dataset::export(host, store, output, verify);
    }
    let (mut s, _w) = open_checked(host, store, Access::Read)?;
    s.set_verify_mode(verify);
    let (store_shown, out_shown) = (host.shown(store), host.shown(output));
    match host.kind(output) {
        PathKind::Dir => return Err(Failure::new(out_shown, "is a directory, not a .npy file")),
        PathKind::MissingParent => return Err(Failure::new(out_shown, "its directory does not exist")),
        PathKind::File | PathKind::Missing => {}
    }
    let (file, staged) = host.stage_file(output).map_err(|e| Failure::at(out_shown.clone(), e))?;
    let result = tools::export(&s, &file, tools::DEFAULT_CHUNK_BYTES, par, &mut |d, t| host.progress("export", d, t));
    drop(file);
    let n = match result {
        Ok(n) => n,
        Err(e) => {
            host.discard(&staged);
            // Export writes only the output: an error that is not about it is about the store.
            let blame = match e {
                Error::Io(ref io) if io.context.contains(staged.as_str()) || io.context.contains(&out_shown) => {
                    out_shown
                }
                _ => store_shown,
            };
            return Err(Failure::at(blame, e));
        }
    };
    if let Err(e) = host.commit(&staged, output) {
        host.discard(&staged);
        return Err(Failure::at(out_shown, e));
    }
    Out { host, closed: false }.line(&format!("exported {n} records to {out_shown}"));
    Ok(EXIT_OK)
}
