//! The `zr` command line's grammar: what a command line says ([`Command`]), how it is parsed
//! and written back, the usage text, and what each path argument is to its command (its
//! [`Role`], the locks it needs, the [`PathNote`] a front end passes for it).
//!
//! The files, from the bottom: `command/verbs.rs` the [`Command`] itself; `command/usage.rs`
//! [`USAGE`]; `command/paths.rs` the path roles, locks and notes; `command/scan.rs` the one
//! way a verb's arguments are split into positionals and options; then one parser (and its
//! way back to a command line) per family of verbs: `command/store.rs` the verbs on a store
//! or dataset where it is, `command/native.rs` the native host's own (copy, push, pull,
//! view), `command/convert.rs` convert. This file only sends each verb to its family.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

mod convert;
mod native;
mod paths;
mod scan;
mod store;
mod usage;
mod verbs;

pub use paths::{PathNote, Role};
pub use usage::USAGE;
pub use verbs::{Command, UsageError, TOKEN_DTYPES};

use scan::{usage, Line};

impl Command {
    /// Parses the arguments after the program name. Options may come before, between or
    /// after the paths; `--name=value` and `--name value` are both accepted.
    pub fn parse(args: &[String]) -> Result<Command, UsageError> {
        if args.iter().any(|a| a == "--help" || a == "-h") {
            return Ok(Command::Help);
        }
        if args.iter().any(|a| a == "--version" || a == "-V") {
            return Ok(Command::Version);
        }
        let Some((cmd, rest)) = args.split_first() else {
            return Err(usage("no command given".into()));
        };
        match cmd.as_str() {
            "inspect" | "verify" | "stats" | "delete" | "compact" | "clean" | "layout" | "export" => {
                store::parse(Line::scan(cmd, rest)?)
            }
            "copy" | "push" | "pull" | "view" => native::parse(Line::scan(cmd, rest)?),
            "convert" => convert::parse(Line::scan(cmd, rest)?),
            "help" => Ok(Command::Help),
            c if c.starts_with('-') => Err(usage(format!("unknown option {c}"))),
            c => Err(usage(format!("unknown command {c:?}"))),
        }
    }

    /// A command line that [`Command::parse`] turns back into this command.
    pub fn to_args(&self) -> Vec<String> {
        match self {
            Command::Inspect { .. }
            | Command::Verify { .. }
            | Command::Stats { .. }
            | Command::Compact { .. }
            | Command::Clean { .. }
            | Command::Layout { .. }
            | Command::Delete { .. }
            | Command::Export { .. } => store::to_args(self),
            Command::Copy { .. } | Command::Push { .. } | Command::Pull { .. } | Command::View { .. } => {
                native::to_args(self)
            }
            Command::Convert { .. } => convert::to_args(self),
            Command::Help => alloc::vec!["--help".to_string()],
            Command::Version => alloc::vec!["--version".to_string()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use zrecord_core::codec::{Codec, CodecPolicy};
    use zrecord_core::io::LockMode;

    use crate::cli::PathKind;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parse_round_trips_through_to_args() {
        for line in [
            "inspect s --json",
            "--json inspect s",
            "view d",
            "view http://h/d/ --port=8000 --site=s --tokenizer=t.json --index=7",
            "verify s",
            "verify s --seal --json",
            "export s o.npy --verify never",
            "stats s",
            "delete s 3 99 3 40",
            "delete ds 3 --from-file gone.txt --force",
            "delete ds --from-file=gone.txt",
            "compact s",
            "compact ds --target-rows 500 --force",
            "clean ds",
            "copy ds out",
            "convert a.npy out --codec raw --chunk-mib 2",
            "convert --codec=raw a.npy out",
            "convert a.npy out --min-savings 0",
            "convert a.npy out --min-savings=0.3 --codec flate",
            "convert npys out --shard-records 1000",
            "convert x.npz out --shard-records=16777216 --codec raw",
            "convert t.bin out --tokens uint16 --eos 5 --skip-empty",
            "convert corpus.jsonl out --tokenizer tok.json --text-field body --eos 7",
            "convert data.bin out --megatron --shard-records 100",
            "convert photos out --images --shard-records 1000",
            "export s o.npy",
            "--help",
            "--version",
        ] {
            let c = Command::parse(&args(line));
            let c = match c {
                Ok(c) => c,
                Err(e) if line.starts_with("--json") => {
                    assert_eq!(e, UsageError("unknown option --json".into()));
                    continue;
                }
                Err(e) => panic!("{line}: {e:?}"),
            };
            assert_eq!(Command::parse(&c.to_args()), Ok(c.clone()), "{line}");
        }
    }

    #[test]
    fn parse_rejects_what_it_should() {
        let err = |s: &str| Command::parse(&args(s)).unwrap_err().0;
        assert_eq!(err(""), "no command given");
        assert_eq!(err("frobnicate s"), "unknown command \"frobnicate\"");
        assert_eq!(err("inspect"), "inspect takes STORE, got 0 argument(s)");
        assert_eq!(err("inspect a b"), "inspect takes STORE, got 2 argument(s)");
        assert_eq!(err("stats s --json"), "stats has no option --json");
        assert_eq!(
            err("delete s"),
            "delete takes STORE INDEX... (or DATASET INDEX... / --from-file F), got 1 argument(s)"
        );
        assert_eq!(
            err("compact s --target-rows 0"),
            "--target-rows takes a number of samples from 1 to 16777216, not \"0\""
        );
        assert_eq!(err("clean"), "clean takes DATASET, got 0 argument(s)");
        assert_eq!(err("copy a"), "copy takes DATASET|URL OUT|URL, got 1 argument(s)");
        assert_eq!(err("delete s -1"), "delete: \"-1\" is not a record index");
        assert_eq!(err("convert a b --codec lz4"), "unknown codec \"lz4\" (raw, flate or zstd)");
        assert_eq!(err("convert a b --chunk-mib 0"), "--chunk-mib takes a positive number of MiB, not \"0\"");
        assert_eq!(
            err("convert a b --shard-records 0"),
            "--shard-records takes a number of samples from 1 to 16777216, not \"0\""
        );
        assert!(err("convert a b --shard-records 16777217").starts_with("--shard-records takes"));
        assert_eq!(err("convert a b --codec"), "--codec needs a value");
        assert_eq!(err("export s o --verify sometimes"), "unknown --verify mode \"sometimes\" (auto, always or never)");
        assert_eq!(err("inspect s --seal"), "inspect has no option --seal");
        for bad in ["1.5", "-0.1", "nan", "x"] {
            assert_eq!(
                err(&format!("convert a b --min-savings {bad}")),
                format!("--min-savings takes a fraction from 0 to 1, not {bad:?}")
            );
        }
        assert_eq!(
            Command::parse(&args("convert a b --min-savings 0.3")).map(|c| match c {
                Command::Convert { policy, .. } => policy,
                _ => unreachable!(),
            }),
            Ok(CodecPolicy::new(Codec::Flate, 0.3).unwrap())
        );
        assert_eq!(Command::parse(&args("inspect s --help")), Ok(Command::Help));
        assert_eq!(Command::parse(&args("help")), Ok(Command::Help));
    }

    #[test]
    fn path_notes_survive_the_environment() {
        let notes = vec![
            PathNote { guest: "/store".into(), shown: "data/train.zr".into(), kind: PathKind::Dir, staged: false },
            PathNote { guest: "/p1".into(), shown: "gone".into(), kind: PathKind::MissingParent, staged: false },
            PathNote { guest: "/out/x.npy".into(), shown: "x.npy".into(), kind: PathKind::Missing, staged: true },
        ];
        let env = PathNote::to_env(&notes);
        let back = PathNote::from_env(|k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()));
        assert_eq!(back, notes);
        assert_eq!(PathNote::shown(&notes, "/store/meta.zr"), "data/train.zr/meta.zr");
        assert_eq!(PathNote::shown(&notes, "/storex"), "/storex");
        assert_eq!(PathNote::shown(&notes, "/out/x.npy"), "x.npy");
    }

    #[test]
    fn locks_are_the_engines() {
        let locks = |s: &str| {
            Command::parse(&args(s)).unwrap().locks().iter().map(|&(p, m)| (p.to_string(), m)).collect::<Vec<_>>()
        };
        let l = |p: &str, m| (p.to_string(), m);
        assert_eq!(locks("inspect s"), vec![l("s", LockMode::Shared)]);
        assert_eq!(locks("export s o.npy"), vec![l("s", LockMode::Shared)]);
        assert_eq!(locks("delete s 1"), vec![l("s", LockMode::Shared), l("s", LockMode::Exclusive)]);
        assert_eq!(locks("compact s"), vec![l("s", LockMode::Shared), l("s", LockMode::Exclusive)]);
        // The index file is read, not locked.
        assert_eq!(locks("delete s --from-file f 1"), vec![l("s", LockMode::Shared), l("s", LockMode::Exclusive)]);
        assert_eq!(locks("verify s --seal"), vec![l("s", LockMode::Shared), l("s", LockMode::Appender)]);
        assert_eq!(locks("convert a.npy s"), vec![l("s", LockMode::Shared), l("s", LockMode::Appender)]);
        assert!(locks("--help").is_empty());
    }

    #[test]
    fn paths_and_map_paths_agree() {
        let c = Command::parse(&args("convert a.npy out")).unwrap();
        assert_eq!(c.paths(), vec![("a.npy", Role::InputFile), ("out", Role::StoreOut)]);
        let m = c.map_paths(|p, r| format!("/{r:?}/{p}"));
        assert_eq!(m.paths(), vec![("/InputFile/a.npy", Role::InputFile), ("/StoreOut/out", Role::StoreOut)]);
    }
}
