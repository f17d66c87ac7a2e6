//! The verbs that read or change one store or dataset where it is (inspect, verify, stats,
//! compact, clean, layout, delete, export) are parsed and written back together: they share
//! their shape (a store, a few switches), every front end runs them, and their parse and
//! their [`Command::to_args`] side by side are what the round-trip test holds together.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use zrecord_core::engine::Verify;
use zrecord_core::format::FileLayout;

use super::scan::{usage, Line};
use super::verbs::{Command, UsageError};

/// The command `line` says; its verb is one of the store verbs.
pub(super) fn parse(mut line: Line<'_>) -> Result<Command, UsageError> {
    let json = line.flag("json").is_some();
    Ok(match line.cmd {
        "inspect" => {
            line.want(1, "STORE")?;
            Command::Inspect { store: line.pos.remove(0), json }
        }
        "verify" => {
            line.want(1, "STORE")?;
            Command::Verify { store: line.pos.remove(0), json, seal: line.flag("seal").is_some() }
        }
        "stats" => {
            line.want(1, "STORE")?;
            Command::Stats { store: line.pos.remove(0) }
        }
        "compact" => {
            line.want(1, "STORE|DATASET")?;
            let target_rows = match line.flag("target-rows") {
                Some(n) => Some(
                    n.parse::<u64>()
                        .ok()
                        .filter(|&n| (1..=u64::from(zrecord_core::format::MAX_RECORDS)).contains(&n))
                        .ok_or_else(|| {
                            usage(format!(
                                "--target-rows takes a number of samples from 1 to {}, not {n:?}",
                                zrecord_core::format::MAX_RECORDS
                            ))
                        })?,
                ),
                None => None,
            };
            Command::Compact { store: line.pos.remove(0), target_rows, force: line.flag("force").is_some() }
        }
        "clean" => {
            line.want(1, "DATASET")?;
            let older_than = match line.flag("older-than") {
                Some(n) => Some(
                    n.parse::<u64>()
                        .map_err(|_| usage(format!("--older-than takes a number of seconds, not {n:?}")))?,
                ),
                None => None,
            };
            Command::Clean { dataset: line.pos.remove(0), older_than }
        }
        "layout" => {
            line.want(2, "STORE dense|sparse")?;
            let name = line.pos.pop().expect("two positionals");
            let layout = FileLayout::from_name(&name)
                .ok_or_else(|| usage(format!("layout takes dense or sparse, not {name:?}")))?;
            Command::Layout { store: line.pos.remove(0), layout }
        }
        "delete" => {
            let from_file = line.flag("from-file").map(String::from);
            if line.pos.is_empty() || (line.pos.len() < 2 && from_file.is_none()) {
                return Err(usage(format!(
                    "delete takes STORE INDEX... (or DATASET INDEX... / --from-file F), got {} argument(s)",
                    line.pos.len()
                )));
            }
            let store = line.pos.remove(0);
            let indices = line
                .pos
                .iter()
                .map(|s| s.parse::<u64>().map_err(|_| usage(format!("delete: {s:?} is not a record index"))))
                .collect::<Result<Vec<u64>, UsageError>>()?;
            Command::Delete { store, indices, from_file, force: line.flag("force").is_some() }
        }
        "export" => {
            line.want(2, "STORE OUT.npy")?;
            let name = line.flag("verify").unwrap_or("auto");
            let verify = Verify::from_name(name)
                .ok_or_else(|| usage(format!("unknown --verify mode {name:?} (auto, always or never)")))?;
            let output = line.pos.pop().expect("two positionals");
            Command::Export { store: line.pos.pop().expect("two positionals"), output, verify }
        }
        _ => unreachable!("Command::parse sends only the store verbs here"),
    })
}

/// The command line of `command`, one of the store verbs' commands.
pub(super) fn to_args(command: &Command) -> Vec<String> {
    let s = |v: &str| v.to_string();
    match command {
        Command::Inspect { store, json } | Command::Verify { store, json, .. } => {
            let name = if matches!(command, Command::Inspect { .. }) { "inspect" } else { "verify" };
            let mut v = alloc::vec![s(name), s(store)];
            if *json {
                v.push(s("--json"));
            }
            if let Command::Verify { seal: true, .. } = command {
                v.push(s("--seal"));
            }
            v
        }
        Command::Stats { store } => alloc::vec![s("stats"), s(store)],
        Command::Compact { store, target_rows, force } => {
            let mut v = alloc::vec![s("compact"), s(store)];
            v.extend(target_rows.map(|n| format!("--target-rows={n}")));
            if *force {
                v.push(s("--force"));
            }
            v
        }
        Command::Clean { dataset, older_than } => {
            let mut v = alloc::vec![s("clean"), s(dataset)];
            v.extend(older_than.map(|n| format!("--older-than={n}")));
            v
        }
        Command::Layout { store, layout } => alloc::vec![s("layout"), s(store), s(layout.name())],
        Command::Delete { store, indices, from_file, force } => {
            let mut v = alloc::vec![s("delete"), s(store)];
            v.extend(indices.iter().map(|i| i.to_string()));
            v.extend(from_file.as_ref().map(|f| format!("--from-file={f}")));
            if *force {
                v.push(s("--force"));
            }
            v
        }
        Command::Export { store, output, verify } => {
            let mut v = alloc::vec![s("export"), s(store), s(output)];
            if *verify != Verify::Auto {
                v.push(format!("--verify={}", verify.name()));
            }
            v
        }
        _ => unreachable!("Command::to_args sends only the store verbs' commands here"),
    }
}
