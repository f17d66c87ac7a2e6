//! Every verb's arguments are read by one scanner, so that options come before, between or
//! after the paths, as `--name=value` or `--name value`, the same way for every verb: the
//! verbs' parsers get the positionals and the options already apart and only say what
//! they mean.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::verbs::UsageError;

/// A wrong command line saying `m`.
pub(super) fn usage(m: String) -> UsageError {
    UsageError(m)
}

/// One verb's arguments, the positionals apart from the options.
pub(super) struct Line<'a> {
    /// The verb as typed.
    pub cmd: &'a str,
    /// The positional arguments, in order.
    pub pos: Vec<String>,
    /// Every option given, in order, as `(name, value)` (a switch's value empty).
    flags: Vec<(String, String)>,
}

impl<'a> Line<'a> {
    /// Reads `rest`, the arguments after the verb `cmd`: the options `cmd` takes, and the
    /// positionals between them.
    pub fn scan(cmd: &'a str, rest: &[String]) -> Result<Line<'a>, UsageError> {
        let valued: &[&str] = match cmd {
            "convert" => {
                &["codec", "chunk-mib", "min-savings", "shard-records", "tokens", "eos", "tokenizer", "text-field"]
            }
            "export" => &["verify"],
            "delete" => &["from-file"],
            "compact" => &["target-rows"],
            "clean" => &["older-than"],
            "view" => &["port", "site", "tokenizer", "index"],
            _ => &[],
        };
        let switches: &[&str] = match cmd {
            "inspect" => &["json"],
            "verify" => &["json", "seal"],
            "delete" | "compact" => &["force"],
            "convert" => &["skip-empty", "megatron", "tokens-only", "images"],
            _ => &[],
        };
        let (mut pos, mut flags): (Vec<String>, Vec<(String, String)>) = (Vec::new(), Vec::new());
        let mut it = rest.iter();
        while let Some(a) = it.next() {
            if let Some(name) = a.strip_prefix("--") {
                let (name, inline) = match name.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (name, None),
                };
                if valued.contains(&name) {
                    let v = match inline {
                        Some(v) => v,
                        None => it.next().cloned().ok_or_else(|| usage(format!("--{name} needs a value")))?,
                    };
                    flags.push((name.to_string(), v));
                } else if switches.contains(&name) && inline.is_none() {
                    flags.push((name.to_string(), String::new()));
                } else {
                    return Err(usage(format!("{cmd} has no option --{name}")));
                }
            } else if a.len() > 1 && a.starts_with('-') && cmd != "delete" {
                return Err(usage(format!("{cmd} has no option {a}")));
            } else {
                pos.push(a.clone());
            }
        }
        Ok(Line { cmd, pos, flags })
    }

    /// The value of option `--name` (empty for a switch), the last one given; `None` if not
    /// given.
    pub fn flag(&self, name: &str) -> Option<&str> {
        self.flags.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// `Ok` if the verb was given `n` positionals, else the error that it takes `what`.
    pub fn want(&self, n: usize, what: &str) -> Result<(), UsageError> {
        if self.pos.len() == n {
            Ok(())
        } else {
            Err(usage(format!("{} takes {what}, got {} argument(s)", self.cmd, self.pos.len())))
        }
    }
}
