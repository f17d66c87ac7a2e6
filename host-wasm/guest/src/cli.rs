//! The command line of `zr.wasm`, mirroring the native `zr`:
//!
//! ```text
//! zr inspect STORE [--json]
//! zr verify STORE [--json]
//! zr stats STORE
//! zr convert IN.npy OUT [--codec flate|raw] [--chunk-mib N]
//! zr export STORE OUT.npy
//! ```
//!
//! Paths are guest paths; `zr-wasm` maps the host paths it was given onto preopened
//! directories before calling in. Exit status: 0 on success, 1 on an error or when verify
//! finds bad records, 2 on a usage error.

use zrecord_core::tools;
use zrecord_core::{Codec, Error};

use crate::api::{convert, export, open_store, verify_json};

const USAGE: &str = "usage:
  zr inspect STORE [--json]           header, counts, codec mix, chunk use and schema
  zr verify STORE [--json]            decode every record and report bad ones
  zr stats STORE                      storage usage
  zr convert IN.npy OUT [--codec C] [--chunk-mib N]
                                      append each axis-0 slice of IN.npy to the dataset OUT (C: flate|raw, default flate)
  zr export STORE OUT.npy             write a dataset back to .npy";

/// A usage error (exit 2) or a store error (exit 1).
enum Failure {
    Usage(String),
    Store(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Store(e)
    }
}

/// Positional arguments, and `(name, value)` for each option given.
type Parsed = (Vec<String>, Vec<(String, String)>);

/// Splits `args` into positionals and options: `valued` options take a value (`--codec raw`
/// or `--codec=raw`), `switches` take none and are recorded with an empty value.
fn parse(args: &[String], valued: &[&str], switches: &[&str]) -> Result<Parsed, Failure> {
    let (mut pos, mut flags) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(name) = a.strip_prefix("--") {
            let (name, inline) = match name.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (name, None),
            };
            if valued.contains(&name) {
                let v = match inline {
                    Some(v) => v,
                    None => it.next().cloned().ok_or_else(|| Failure::Usage(format!("--{name} needs a value")))?,
                };
                flags.push((name.to_string(), v));
            } else if switches.contains(&name) && inline.is_none() {
                flags.push((name.to_string(), String::new()));
            } else {
                return Err(Failure::Usage(format!("unknown option --{name}")));
            }
        } else {
            pos.push(a.clone());
        }
    }
    Ok((pos, flags))
}

fn flag<'a>(flags: &'a [(String, String)], name: &str) -> Option<&'a str> {
    flags.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

fn positionals<const N: usize>(cmd: &str, pos: Vec<String>) -> Result<[String; N], Failure> {
    let n = pos.len();
    pos.try_into().map_err(|_| Failure::Usage(format!("{cmd} takes {N} path(s), got {n}")))
}

fn dispatch(args: Vec<String>) -> Result<i32, Failure> {
    let Some((cmd, rest)) = args.split_first() else {
        return Err(Failure::Usage("no command given".into()));
    };
    match cmd.as_str() {
        "inspect" => {
            let (pos, flags) = parse(rest, &[], &["json"])?;
            let [path] = positionals("inspect", pos)?;
            let (store, _w) = open_store(&path, false)?;
            let report = tools::inspect(&store)?;
            if flag(&flags, "json").is_some() {
                println!("{}", serde_json::to_string_pretty(&report).expect("a report always serialises"));
            } else {
                println!("{report}");
            }
            Ok(0)
        }
        "verify" => {
            let (pos, flags) = parse(rest, &[], &["json"])?;
            let [path] = positionals("verify", pos)?;
            let (v, json) = verify_json(&path)?;
            if flag(&flags, "json").is_some() {
                println!("{json}");
            } else {
                for b in &v.bad {
                    println!("bad record {}: {}", b.index, b.error);
                }
                if v.bad.len() < v.bad_count as usize {
                    println!("... and {} more", v.bad_count as usize - v.bad.len());
                }
                println!("{} records checked, {} bad", v.checked, v.bad_count);
            }
            Ok(if v.bad_count == 0 { 0 } else { 1 })
        }
        "stats" => {
            let (pos, _) = parse(rest, &[], &[])?;
            let [path] = positionals("stats", pos)?;
            let (store, _w) = open_store(&path, false)?;
            let s = store.stats()?;
            println!(
                "{{\"records\": {}, \"live_bytes\": {}, \"chunk_bytes\": {}, \"reclaimable\": {}}}",
                s.records, s.live_bytes, s.chunk_bytes, s.reclaimable
            );
            Ok(0)
        }
        "convert" => {
            let (pos, flags) = parse(rest, &["codec", "chunk-mib"], &[])?;
            let [input, output] = positionals("convert", pos)?;
            let name = flag(&flags, "codec").unwrap_or("flate");
            let codec = Codec::from_name(name)
                .ok_or_else(|| Failure::Usage(format!("unknown codec {name:?} (flate or raw)")))?;
            let chunk_bytes = match flag(&flags, "chunk-mib") {
                Some(m) => m
                    .parse::<usize>()
                    .ok()
                    .and_then(|m| m.max(1).checked_mul(1 << 20))
                    .ok_or_else(|| Failure::Usage(format!("--chunk-mib takes a number of MiB, not {m:?}")))?,
                None => tools::DEFAULT_CHUNK_BYTES,
            };
            let (c, len) = convert(&input, &output, codec, chunk_bytes)?;
            println!(
                "appended {} records of {}{:?} ({}) at index {}; store holds {len}",
                c.appended, c.schema.dtype, c.schema.shape, c.schema.codec, c.first_index
            );
            Ok(0)
        }
        "export" => {
            let (pos, _) = parse(rest, &[], &[])?;
            let [input, output] = positionals("export", pos)?;
            let n = export(&input, &output)?;
            println!("exported {n} records to {output}");
            Ok(0)
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(0)
        }
        other => Err(Failure::Usage(format!("unknown command {other:?}"))),
    }
}

/// Runs the command line and returns the exit status.
pub fn run(args: Vec<String>) -> i32 {
    match dispatch(args) {
        Ok(code) => code,
        Err(Failure::Usage(msg)) => {
            eprintln!("zr: {msg}\n{USAGE}");
            2
        }
        Err(Failure::Store(e)) => {
            eprintln!("zr: error {}: {e}", e.code());
            1
        }
    }
}
