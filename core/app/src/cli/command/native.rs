//! The verbs only the native `zr` runs (copy, push, pull, view: another dataset writer, an
//! object store, a browser) are parsed and written back apart from the store verbs: their
//! arguments are URLs as often as paths, and a sandboxed front end grants them little or
//! nothing (see `paths.rs`).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::scan::{usage, Line};
use super::verbs::{Command, UsageError};

/// The command `line` says; its verb is one of the native host's verbs.
pub(super) fn parse(mut line: Line<'_>) -> Result<Command, UsageError> {
    Ok(match line.cmd {
        "copy" => {
            line.want(2, "DATASET|URL OUT|URL")?;
            let dst = line.pos.pop().expect("two positionals");
            Command::Copy { src: line.pos.pop().expect("two positionals"), dst }
        }
        "push" => {
            line.want(2, "LOCAL URL")?;
            let url = line.pos.pop().expect("two positionals");
            Command::Push { local: line.pos.pop().expect("two positionals"), url }
        }
        "view" => {
            line.want(1, "DATASET|URL")?;
            let number = |name: &str, max: u64| -> Result<u64, UsageError> {
                match line.flag(name) {
                    None => Ok(0),
                    Some(v) => v
                        .parse::<u64>()
                        .ok()
                        .filter(|&n| n <= max)
                        .ok_or_else(|| usage(format!("--{name} takes a number from 0 to {max}, got {v:?}"))),
                }
            };
            let port = number("port", u64::from(u16::MAX))? as u16;
            let index = number("index", u64::MAX)?;
            Command::View {
                target: line.pos.pop().expect("one positional"),
                port,
                site: line.flag("site").map(String::from),
                tokenizer: line.flag("tokenizer").map(String::from),
                index,
            }
        }
        "pull" => {
            line.want(2, "URL OUT")?;
            let output = line.pos.pop().expect("two positionals");
            Command::Pull { url: line.pos.pop().expect("two positionals"), output }
        }
        _ => unreachable!("Command::parse sends only the native host's verbs here"),
    })
}

/// The command line of `command`, one of the native host's commands.
pub(super) fn to_args(command: &Command) -> Vec<String> {
    let s = |v: &str| v.to_string();
    match command {
        Command::Copy { src, dst } => alloc::vec![s("copy"), s(src), s(dst)],
        Command::Push { local, url } => alloc::vec![s("push"), s(local), s(url)],
        Command::Pull { url, output } => alloc::vec![s("pull"), s(url), s(output)],
        Command::View { target, port, site, tokenizer, index } => {
            let mut v = alloc::vec![s("view"), s(target)];
            if *port != 0 {
                v.push(format!("--port={port}"));
            }
            if let Some(d) = site {
                v.push(format!("--site={d}"));
            }
            if let Some(t) = tokenizer {
                v.push(format!("--tokenizer={t}"));
            }
            if *index != 0 {
                v.push(format!("--index={index}"));
            }
            v
        }
        _ => unreachable!("Command::to_args sends only the native host's commands here"),
    }
}
