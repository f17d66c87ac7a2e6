//! The `zr` command line's grammar: what a command line says ([`Command`]), how it is parsed
//! and written back, the usage text, and what each path argument is to its command (its
//! [`Role`], the locks it needs, the [`PathNote`] a front end passes for it).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use zrecord_core::codec::{Codec, CodecPolicy};
use zrecord_core::engine::Verify;
use zrecord_core::format::FileLayout;
use zrecord_core::io::LockMode;

use super::{PathKind, TextImport};
use crate::tools;

/// What `--help` prints (the same for `zr` and `zr-wasm`; `zr-wasm` adds its own options).
pub const USAGE: &str = "\
zr: inspect, verify, compact, convert and export zrecord stores and datasets

usage:
  zr inspect STORE [--json]     header, record count, codec mix, chunk use, sizes, schema
                                (inspect, stats, verify and export also take a dataset
                                of named fields: a directory with a dataset.json)
  zr verify STORE [--json] [--seal]
                                check every record's checksum and decode every record;
                                exit 1 if any fails; --seal first checksums the records
                                that have none (added or moved by another writer)
  zr stats STORE                storage usage as JSON
  zr delete STORE INDEX...      delete records (the tail moves into each hole)
  zr delete DATASET INDEX... [--from-file F]
                                delete samples of a dataset of named fields (every field;
                                the samples after them move up; indices also one a line
                                or space-separated in F); a store that is a field of a
                                dataset is refused unless --force (it would break the
                                dataset)
  zr compact STORE              reclaim the space of deleted records, in place
  zr compact DATASET [--target-rows N]
                                merge neighbouring small shards into shards of at most N
                                samples (default 1048576); values, order and the identity
                                a saved loader state names stay
  zr clean DATASET              remove the folders an interrupted write left (the ones
                                dataset.json does not name; verify and inspect list them)
  zr copy DATASET|URL OUT|URL   copy a dataset as one consistent state, even while others
                                append, delete or compact it (cp -r and rsync are safe
                                only on a dataset no one changes); files written dense
  zr layout STORE dense|sparse  size a store's (or every store of a dataset's) files:
                                dense, as long as what they hold (safe for cp, rsync,
                                tar, any copy; datasets are written so), or sparse, the
                                fixed sizes loaderx 0.5.4 needs; atomic per store
  zr convert IN.npy OUT [--codec flate|raw|zstd] [--chunk-mib N] [--min-savings F]
                                append each axis-0 slice of IN.npy to the dataset OUT
                                (created if missing; default codec flate, 64 MiB per step;
                                zstd: native zr only, unreadable by loaderx 0.5.4;
                                a record compression shrinks by less than the fraction F,
                                default 0.125, is stored raw)
  zr convert DIR|IN.npz OUT [--shard-records N] [--codec ...] [--chunk-mib N] [--min-savings F]
                                add the samples of a directory of .npy files (or an .npz),
                                one per field, to the dataset of named fields OUT; a ragged
                                field NAME is NAME.npy (values) with NAME_offsets.npy
                                (n + 1 element offsets from 0); a new shard every N samples
  zr convert TOKENS.bin OUT --tokens uint16|uint32|int32|... --eos ID [--shard-records N] ...
                                split a flat file of token ids (nanoGPT's train.bin) into
                                documents at each end-of-document id ID (not kept: give
                                it back with Pack(eos=ID)) and add them to the dataset OUT
                                as the ragged field tokens
                                (--skip-empty: leave out empty documents, two ids in a row,
                                and count them; without it they fail the conversion)
  zr convert TEXT OUT --tokenizer tokenizer.json [--text-field text] [--eos ID] [--tokens-only] ...
                                tokenize a JSON Lines file (its text under --text-field), a
                                .txt file (one document) or a directory of them with a
                                Hugging Face tokenizer.json, on all cores, into the dataset
                                OUT's ragged field tokens (uint16, or uint32 past 65536 ids),
                                one sample per document, ID after each; the JSON objects'
                                other strings, numbers and booleans become fields beside it
                                (--tokens-only: none)
  zr convert DATA.bin OUT --megatron [--shard-records N] ...
                                a Megatron-LM indexed dataset (DATA.bin with DATA.idx) into
                                the dataset OUT's ragged field tokens, one sample per
                                sequence, its tokens as stored
  zr convert DIR OUT --images [--shard-records N]
                                an ImageFolder tree (DIR/CLASS/*.jpg|png|webp) into the
                                dataset OUT: an image field image (the files as they are,
                                headers checked) and label (int64, the class's place in the
                                sorted names, which go into the dataset card as classes);
                                WebDataset tar shards (a .tar or a directory of them):
                                .jpg/.png/.webp -> image, .cls -> label, .txt -> text
  zr push LOCAL URL             upload a dataset or store to an object store (s3://bucket/prefix,
                                gs://, az://; credentials and endpoint from AWS_*, GOOGLE_*,
                                AZURE_* variables): only its bytes, resumable, listing last
  zr pull URL OUT               a pushed dataset or store into the new directory OUT, as it
                                was (sparse files sparse: loaderx 0.5.4 reads it)
                                (inspect, stats, verify and export also read a pushed URL)
  zr view DATASET|URL [--port N] [--site DIR] [--tokenizer FILE] [--index N]
                                serve the dataset viewer on 127.0.0.1 (a free port unless
                                --port; the URL is printed; Ctrl-C stops it): a page that
                                reads the dataset in the browser with zr.wasm, a range at a
                                time (a URL: a dataset folder that allows ranged reads)
  zr export STORE OUT.npy [--verify auto|always|never]
                                write a dataset back to a .npy file, checking checksums
                                as --verify says (default auto: where there is one)
  zr export DATASET OUT|OUT.npz [--verify ...]
                                write each field of a dataset of named fields as NAME.npy
                                (and NAME_offsets.npy) into the new directory OUT, or an .npz
  zr --help | --version

native zr only:
  --follow-symlinks             open store files that are symbolic links leading out of
                                the store (refused by default)

exit status: 0 done, 1 verify found bad records, 2 error or bad arguments";

/// One parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `inspect STORE [--json]`.
    Inspect {
        /// Store directory.
        store: String,
        /// Print JSON.
        json: bool,
    },
    /// `verify STORE [--json] [--seal]`.
    Verify {
        /// Store directory.
        store: String,
        /// Print JSON.
        json: bool,
        /// Checksum the unchecked records first (opens the store writable).
        seal: bool,
    },
    /// `stats STORE`.
    Stats {
        /// Store directory.
        store: String,
    },
    /// `delete STORE|DATASET INDEX... [--from-file F] [--force]`.
    Delete {
        /// Store or dataset directory.
        store: String,
        /// Indices to delete.
        indices: Vec<u64>,
        /// A file of more indices.
        from_file: Option<String>,
        /// Change a store that is a field of a dataset all the same.
        force: bool,
    },
    /// `compact STORE|DATASET [--target-rows N] [--force]`.
    Compact {
        /// Store or dataset directory.
        store: String,
        /// A dataset's shard size to merge up to.
        target_rows: Option<u64>,
        /// Change a store that is a field of a dataset all the same.
        force: bool,
    },
    /// `clean DATASET`: remove what interrupted writes left.
    Clean {
        /// Dataset directory.
        dataset: String,
    },
    /// `copy SRC DST`: a dataset copied as one state (native host).
    Copy {
        /// The dataset (a directory or URL).
        src: String,
        /// The new copy (a directory or URL).
        dst: String,
    },
    /// `layout STORE dense|sparse`.
    Layout {
        /// Store or dataset directory.
        store: String,
        /// The layout to give it.
        layout: FileLayout,
    },
    /// `convert IN.npy|DIR|IN.npz OUT [--codec C] [--chunk-mib N] [--min-savings F]
    /// [--shard-records N]`.
    Convert {
        /// Input `.npy` file, or a directory of them, or an `.npz`.
        input: String,
        /// Output store directory.
        output: String,
        /// Codec for a new dataset, and the least fraction compression must save for a
        /// record to be stored compressed.
        policy: CodecPolicy,
        /// MiB of source per append.
        chunk_mib: usize,
        /// Samples per shard of a dataset of named fields (`None`: the writer's default).
        shard_records: Option<u64>,
        /// `--tokens DTYPE --eos ID`: the input is a flat token file, split into documents
        /// at each `ID` (the numpy dtype string and the id).
        tokens: Option<(&'static str, u64)>,
        /// `--skip-empty`: samples with an empty ragged field (empty documents) are left
        /// out and counted instead of failing the conversion.
        skip_empty: bool,
        /// `--tokenizer FILE [--text-field NAME] [--eos ID]`: the input is text, tokenized.
        text: Option<TextImport>,
        /// `--megatron`: the input is a Megatron-LM indexed dataset (`.bin` with `.idx`).
        megatron: bool,
        /// `--images`: the input is an ImageFolder tree (a folder of images per class).
        images: bool,
    },
    /// `push LOCAL URL`: a dataset or store into an object store (native host).
    Push {
        /// The local dataset or store directory.
        local: String,
        /// Where it goes (`s3://bucket/prefix`, ...).
        url: String,
    },
    /// `pull URL OUT`: a pushed dataset or store into a new local directory (native host).
    Pull {
        /// The pushed dataset's location.
        url: String,
        /// The new local directory.
        output: String,
    },
    /// `view DATASET|URL [--port N] [--site DIR] [--tokenizer FILE] [--index N]`: the
    /// dataset viewer's page served on 127.0.0.1 (native host).
    View {
        /// A local dataset directory, or the URL of a dataset folder.
        target: String,
        /// The port; 0 asks the system for a free one.
        port: u16,
        /// The page's files (built by `make view`); `None`: where the host finds them.
        site: Option<String>,
        /// A tokenizer.json to decode token fields with in the page.
        tokenizer: Option<String>,
        /// The first sample the page shows.
        index: u64,
    },
    /// `export STORE OUT.npy [--verify MODE]`.
    Export {
        /// Store directory.
        store: String,
        /// Output `.npy` file.
        output: String,
        /// When records are checked against their checksums.
        verify: Verify,
    },
    /// `--help`, `-h`, `help`.
    Help,
    /// `--version`, `-V`.
    Version,
}

/// What a path argument is to its command: a front end that must grant access to paths
/// (`zr-wasm` preopens directories) decides from this what to grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A store that is only read.
    StoreRead,
    /// A store changed in place (`delete`, `compact`).
    StoreWrite,
    /// `convert`'s output: an existing store appended to, or a new one built.
    StoreOut,
    /// `convert`'s input file, only read.
    InputFile,
    /// `export`'s output file, created or replaced.
    OutputFile,
}

/// One path argument as handed over by a front end that runs the command in another file
/// namespace: `zr-wasm` preopens directories under guest paths (`/store`, `/in`...) and
/// tells the guest, for each path it rewrote, what the user typed and what is there on
/// the host, so that messages name the user's paths and a path it could not preopen (a
/// missing store, a file given as a store) still gets the native message.
///
/// Passed as environment variables: `ZR_PATHS` (the count) and, for each `i`,
/// `ZR_PATH_{i}_GUEST`, `ZR_PATH_{i}_SHOWN` and `ZR_PATH_{i}_KIND` (`dir`, `file`,
/// `missing`, `missing-parent`, or `staged`: missing on the host, and the front end has
/// made an empty place at the guest path that it moves into place if the command succeeds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathNote {
    /// The path the command receives.
    pub guest: String,
    /// The path the user typed.
    pub shown: String,
    /// What is at the user's path.
    pub kind: PathKind,
    /// The front end staged the output at `guest` (`kind` is then [`PathKind::Missing`]).
    pub staged: bool,
}

impl PathNote {
    /// The environment variables that carry `notes`.
    pub fn to_env(notes: &[PathNote]) -> Vec<(String, String)> {
        let mut env = alloc::vec![("ZR_PATHS".to_string(), notes.len().to_string())];
        for (i, n) in notes.iter().enumerate() {
            let kind = match (n.staged, n.kind) {
                (true, _) => "staged",
                (false, PathKind::Dir) => "dir",
                (false, PathKind::File) => "file",
                (false, PathKind::Missing) => "missing",
                (false, PathKind::MissingParent) => "missing-parent",
            };
            env.push((format!("ZR_PATH_{i}_GUEST"), n.guest.clone()));
            env.push((format!("ZR_PATH_{i}_SHOWN"), n.shown.clone()));
            env.push((format!("ZR_PATH_{i}_KIND"), kind.to_string()));
        }
        env
    }

    /// The notes in the environment `var` reads; malformed entries are skipped.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Vec<PathNote> {
        let n = var("ZR_PATHS").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        (0..n.min(64))
            .filter_map(|i| {
                let guest = var(&format!("ZR_PATH_{i}_GUEST"))?;
                let shown = var(&format!("ZR_PATH_{i}_SHOWN"))?;
                let (kind, staged) = match var(&format!("ZR_PATH_{i}_KIND"))?.as_str() {
                    "dir" => (PathKind::Dir, false),
                    "file" => (PathKind::File, false),
                    "missing" => (PathKind::Missing, false),
                    "missing-parent" => (PathKind::MissingParent, false),
                    "staged" => (PathKind::Missing, true),
                    _ => return None,
                };
                Some(PathNote { guest, shown, kind, staged })
            })
            .collect()
    }

    /// How to name `path` given `notes`: the note's user path for a noted path or a path
    /// under one, else `path` itself.
    pub fn shown(notes: &[PathNote], path: &str) -> String {
        for n in notes {
            if path == n.guest {
                return n.shown.clone();
            }
            if let Some(rest) = path.strip_prefix(n.guest.as_str()).and_then(|r| r.strip_prefix('/')) {
                let sep = if n.shown.ends_with('/') { "" } else { "/" };
                return format!("{}{sep}{rest}", n.shown);
            }
        }
        path.to_string()
    }
}

/// A wrong command line: printed as one line, exit [`EXIT_ERROR`](super::EXIT_ERROR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

/// The token dtypes `convert --tokens` reads: the name it takes, the numpy dtype string.
pub const TOKEN_DTYPES: &[(&str, &str)] =
    &[("uint8", "|u1"), ("uint16", "<u2"), ("int32", "<i4"), ("uint32", "<u4"), ("int64", "<i8")];

impl Command {
    /// Parses the arguments after the program name. Options may come before, between or
    /// after the paths; `--name=value` and `--name value` are both accepted.
    pub fn parse(args: &[String]) -> Result<Command, UsageError> {
        let usage = |m: String| UsageError(m);
        if args.iter().any(|a| a == "--help" || a == "-h") {
            return Ok(Command::Help);
        }
        if args.iter().any(|a| a == "--version" || a == "-V") {
            return Ok(Command::Version);
        }
        let Some((cmd, rest)) = args.split_first() else {
            return Err(usage("no command given".into()));
        };
        let valued: &[&str] = match cmd.as_str() {
            "convert" => {
                &["codec", "chunk-mib", "min-savings", "shard-records", "tokens", "eos", "tokenizer", "text-field"]
            }
            "export" => &["verify"],
            "delete" => &["from-file"],
            "compact" => &["target-rows"],
            "view" => &["port", "site", "tokenizer", "index"],
            _ => &[],
        };
        let switches: &[&str] = match cmd.as_str() {
            "inspect" => &["json"],
            "verify" => &["json", "seal"],
            "delete" | "compact" => &["force"],
            "convert" => &["skip-empty", "megatron", "tokens-only", "images"],
            _ => &[],
        };
        let (mut pos, mut flags): (Vec<String>, Vec<(String, String)>) = (Vec::new(), Vec::new());
        match cmd.as_str() {
            "inspect" | "verify" | "stats" | "delete" | "compact" | "clean" | "copy" | "layout" | "convert"
            | "export" | "push" | "pull" | "view" => {}
            "help" => return Ok(Command::Help),
            c if c.starts_with('-') => return Err(usage(format!("unknown option {c}"))),
            c => return Err(usage(format!("unknown command {c:?}"))),
        }
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
        let flag = |name: &str| flags.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        let want = |n: usize, what: &str| -> Result<(), UsageError> {
            if pos.len() == n {
                Ok(())
            } else {
                Err(usage(format!("{cmd} takes {what}, got {} argument(s)", pos.len())))
            }
        };
        let json = flag("json").is_some();
        Ok(match cmd.as_str() {
            "inspect" => {
                want(1, "STORE")?;
                Command::Inspect { store: pos.remove(0), json }
            }
            "verify" => {
                want(1, "STORE")?;
                Command::Verify { store: pos.remove(0), json, seal: flag("seal").is_some() }
            }
            "stats" => {
                want(1, "STORE")?;
                Command::Stats { store: pos.remove(0) }
            }
            "compact" => {
                want(1, "STORE|DATASET")?;
                let target_rows = match flag("target-rows") {
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
                Command::Compact { store: pos.remove(0), target_rows, force: flag("force").is_some() }
            }
            "clean" => {
                want(1, "DATASET")?;
                Command::Clean { dataset: pos.remove(0) }
            }
            "copy" => {
                want(2, "DATASET|URL OUT|URL")?;
                let dst = pos.pop().expect("two positionals");
                Command::Copy { src: pos.pop().expect("two positionals"), dst }
            }
            "layout" => {
                want(2, "STORE dense|sparse")?;
                let name = pos.pop().expect("two positionals");
                let layout = FileLayout::from_name(&name)
                    .ok_or_else(|| usage(format!("layout takes dense or sparse, not {name:?}")))?;
                Command::Layout { store: pos.remove(0), layout }
            }
            "delete" => {
                let from_file = flag("from-file").map(String::from);
                if pos.is_empty() || (pos.len() < 2 && from_file.is_none()) {
                    return Err(usage(format!(
                        "delete takes STORE INDEX... (or DATASET INDEX... / --from-file F), got {} argument(s)",
                        pos.len()
                    )));
                }
                let store = pos.remove(0);
                let indices = pos
                    .iter()
                    .map(|s| s.parse::<u64>().map_err(|_| usage(format!("delete: {s:?} is not a record index"))))
                    .collect::<Result<Vec<u64>, UsageError>>()?;
                Command::Delete { store, indices, from_file, force: flag("force").is_some() }
            }
            "convert" => {
                want(2, "IN.npy|DIR|IN.npz OUT")?;
                let name = flag("codec").unwrap_or("flate");
                let codec = Codec::from_name(name)
                    .ok_or_else(|| usage(format!("unknown codec {name:?} ({})", Codec::NAMES)))?;
                let chunk_mib = match flag("chunk-mib") {
                    Some(m) => m
                        .parse::<usize>()
                        .ok()
                        .filter(|&m| m >= 1 && m.checked_mul(1 << 20).is_some())
                        .ok_or_else(|| usage(format!("--chunk-mib takes a positive number of MiB, not {m:?}")))?,
                    None => tools::DEFAULT_CHUNK_BYTES >> 20,
                };
                let policy = match flag("min-savings") {
                    Some(m) => m
                        .parse::<f64>()
                        .ok()
                        .and_then(|f| CodecPolicy::new(codec, f).ok())
                        .ok_or_else(|| usage(format!("--min-savings takes a fraction from 0 to 1, not {m:?}")))?,
                    None => CodecPolicy::from(codec),
                };
                let shard_records = match flag("shard-records") {
                    Some(m) => Some(
                        m.parse::<u64>()
                            .ok()
                            .filter(|&n| n >= 1 && n <= u64::from(zrecord_core::MAX_RECORDS))
                            .ok_or_else(|| {
                                usage(format!(
                                    "--shard-records takes a number of samples from 1 to {}, not {m:?}",
                                    zrecord_core::MAX_RECORDS
                                ))
                            })?,
                    ),
                    None => None,
                };
                if flag("tokens-only").is_some() && flag("tokenizer").is_none() {
                    return Err(usage("--tokens-only goes with --tokenizer FILE (text to tokenize)".into()));
                }
                let text = match (flag("tokenizer"), flag("text-field")) {
                    (None, None) => None,
                    (None, Some(_)) => {
                        return Err(usage("--text-field goes with --tokenizer FILE (text to tokenize)".into()))
                    }
                    (Some(_), _) if flag("tokens").is_some() => {
                        return Err(usage(
                            "--tokens reads a file of token ids; --tokenizer reads text: give one of them".into(),
                        ))
                    }
                    (Some(tokenizer), field) => {
                        let eos = match flag("eos") {
                            None => None,
                            Some(eos) => Some(eos.parse::<u32>().map_err(|_| {
                                usage(format!("--eos takes a token id (an integer from 0 to 2^32 - 1), not {eos:?}"))
                            })?),
                        };
                        Some(TextImport {
                            tokenizer: String::from(tokenizer),
                            text_field: String::from(field.unwrap_or("text")),
                            eos,
                            tokens_only: flag("tokens-only").is_some(),
                        })
                    }
                };
                let tokens = match (flag("tokens"), flag("eos").filter(|_| text.is_none())) {
                    (None, None) => None,
                    (Some(name), Some(eos)) => {
                        let descr =
                            TOKEN_DTYPES.iter().find(|(n, _)| *n == name).map(|(_, d)| *d).ok_or_else(|| {
                                let names: Vec<&str> = TOKEN_DTYPES.iter().map(|(n, _)| *n).collect();
                                usage(format!("--tokens takes a token dtype ({}), not {name:?}", names.join(", ")))
                            })?;
                        let eos = eos
                            .parse::<u64>()
                            .map_err(|_| usage(format!("--eos takes a token id (an integer >= 0), not {eos:?}")))?;
                        Some((descr, eos))
                    }
                    (Some(_), None) => {
                        return Err(usage(
                            "--tokens needs --eos ID: the end-of-document id to split the file on".into(),
                        ))
                    }
                    (None, Some(_)) => return Err(usage("--eos goes with --tokens DTYPE (a flat token file)".into())),
                };
                let megatron = flag("megatron").is_some();
                if megatron && (tokens.is_some() || text.is_some()) {
                    return Err(usage(
                        "--megatron reads a Megatron .bin/.idx pair: not with --tokens or --tokenizer".into(),
                    ));
                }
                let images = flag("images").is_some();
                if images && (megatron || tokens.is_some() || text.is_some()) {
                    return Err(usage(
                        "--images reads an ImageFolder tree: not with --megatron, --tokens or --tokenizer".into(),
                    ));
                }
                let output = pos.pop().expect("two positionals");
                Command::Convert {
                    input: pos.pop().expect("two positionals"),
                    output,
                    policy,
                    chunk_mib,
                    shard_records,
                    tokens,
                    skip_empty: flag("skip-empty").is_some(),
                    text,
                    megatron,
                    images,
                }
            }
            "push" => {
                want(2, "LOCAL URL")?;
                let url = pos.pop().expect("two positionals");
                Command::Push { local: pos.pop().expect("two positionals"), url }
            }
            "view" => {
                want(1, "DATASET|URL")?;
                let number = |name: &str, max: u64| -> Result<u64, UsageError> {
                    match flag(name) {
                        None => Ok(0),
                        Some(v) => v
                            .parse::<u64>()
                            .ok()
                            .filter(|&n| n <= max)
                            .ok_or_else(|| usage(format!("--{name} takes a number from 0 to {max}, got {v:?}"))),
                    }
                };
                Command::View {
                    target: pos.pop().expect("one positional"),
                    port: number("port", u64::from(u16::MAX))? as u16,
                    site: flag("site").map(String::from),
                    tokenizer: flag("tokenizer").map(String::from),
                    index: number("index", u64::MAX)?,
                }
            }
            "pull" => {
                want(2, "URL OUT")?;
                let output = pos.pop().expect("two positionals");
                Command::Pull { url: pos.pop().expect("two positionals"), output }
            }
            "export" => {
                want(2, "STORE OUT.npy")?;
                let name = flag("verify").unwrap_or("auto");
                let verify = Verify::from_name(name)
                    .ok_or_else(|| usage(format!("unknown --verify mode {name:?} (auto, always or never)")))?;
                let output = pos.pop().expect("two positionals");
                Command::Export { store: pos.pop().expect("two positionals"), output, verify }
            }
            _ => unreachable!("checked above"),
        })
    }

    /// Every path argument with its role, in command-line order.
    pub fn paths(&self) -> Vec<(&str, Role)> {
        match self {
            Command::Verify { store, seal: true, .. } => alloc::vec![(store.as_str(), Role::StoreWrite)],
            Command::Inspect { store, .. } | Command::Verify { store, .. } | Command::Stats { store } => {
                alloc::vec![(store.as_str(), Role::StoreRead)]
            }
            Command::Delete { store, from_file: Some(file), .. } => {
                alloc::vec![(store.as_str(), Role::StoreWrite), (file.as_str(), Role::InputFile)]
            }
            Command::Delete { store, .. } | Command::Compact { store, .. } | Command::Layout { store, .. } => {
                alloc::vec![(store.as_str(), Role::StoreWrite)]
            }
            Command::Clean { dataset } => alloc::vec![(dataset.as_str(), Role::StoreWrite)],
            // Copied by the native host only (a sandbox has no second dataset writer).
            Command::Copy { .. } => Vec::new(),
            Command::Convert { input, output, .. } => {
                alloc::vec![(input.as_str(), Role::InputFile), (output.as_str(), Role::StoreOut)]
            }
            Command::Export { store, output, .. } => {
                alloc::vec![(store.as_str(), Role::StoreRead), (output.as_str(), Role::OutputFile)]
            }
            // URLs are not paths: only the local side is one.
            Command::Push { local, .. } => alloc::vec![(local.as_str(), Role::StoreRead)],
            Command::Pull { output, .. } => alloc::vec![(output.as_str(), Role::StoreOut)],
            // Served to a browser by the native host only: nothing for a sandbox to open.
            Command::Help | Command::Version | Command::View { .. } => Vec::new(),
        }
    }

    /// The locks the engine takes on each store this command works on, which a front end
    /// whose command runs where it cannot take them (`zr-wasm`: WASI has no file locks)
    /// takes on the command's behalf, on the store's meta.zr, for the whole run: presence
    /// ([`LockMode::Shared`]) on every store it reads, the appender lock for `convert` into
    /// an existing store and `verify --seal`, the exclusive lock for `delete` and `compact`.
    /// A new store (`convert` into a missing directory) needs none: no one else can have
    /// it open.
    pub fn locks(&self) -> Vec<(&str, LockMode)> {
        let mut out = Vec::new();
        for (path, role) in self.paths() {
            let extra = match (self, role) {
                (Command::Delete { .. }, Role::InputFile) => continue,
                (
                    Command::Delete { .. } | Command::Compact { .. } | Command::Layout { .. } | Command::Clean { .. },
                    _,
                ) => Some(LockMode::Exclusive),
                (Command::Verify { seal: true, .. }, _) | (_, Role::StoreOut) => Some(LockMode::Appender),
                (_, Role::StoreRead) => None,
                _ => continue,
            };
            out.push((path, LockMode::Shared));
            out.extend(extra.map(|m| (path, m)));
        }
        out
    }

    /// The same command with every path replaced by `f(path, role)`.
    pub fn map_paths(&self, mut f: impl FnMut(&str, Role) -> String) -> Command {
        let mut c = self.clone();
        match &mut c {
            Command::Verify { store, seal: true, .. } => *store = f(store, Role::StoreWrite),
            Command::Inspect { store, .. } | Command::Verify { store, .. } | Command::Stats { store } => {
                *store = f(store, Role::StoreRead)
            }
            Command::Delete { store, from_file, .. } => {
                *store = f(store, Role::StoreWrite);
                if let Some(file) = from_file {
                    *file = f(file, Role::InputFile);
                }
            }
            Command::Compact { store, .. } | Command::Layout { store, .. } => *store = f(store, Role::StoreWrite),
            Command::Clean { dataset } => *dataset = f(dataset, Role::StoreWrite),
            Command::Copy { .. } => {}
            Command::Convert { input, output, .. } => {
                *input = f(input, Role::InputFile);
                *output = f(output, Role::StoreOut);
            }
            Command::Export { store, output, .. } => {
                *store = f(store, Role::StoreRead);
                *output = f(output, Role::OutputFile);
            }
            Command::Push { local, .. } => *local = f(local, Role::StoreRead),
            Command::Pull { output, .. } => *output = f(output, Role::StoreOut),
            Command::Help | Command::Version | Command::View { .. } => {}
        }
        c
    }

    /// A command line that [`Command::parse`] turns back into this command.
    pub fn to_args(&self) -> Vec<String> {
        let s = |v: &str| v.to_string();
        match self {
            Command::Inspect { store, json } | Command::Verify { store, json, .. } => {
                let name = if matches!(self, Command::Inspect { .. }) { "inspect" } else { "verify" };
                let mut v = alloc::vec![s(name), s(store)];
                if *json {
                    v.push(s("--json"));
                }
                if let Command::Verify { seal: true, .. } = self {
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
            Command::Clean { dataset } => alloc::vec![s("clean"), s(dataset)],
            Command::Copy { src, dst } => alloc::vec![s("copy"), s(src), s(dst)],
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
                let mut v = alloc::vec![
                    s("convert"),
                    s(input),
                    s(output),
                    format!("--codec={}", policy.codec.name()),
                    format!("--chunk-mib={chunk_mib}"),
                    format!("--min-savings={}", policy.min_savings()),
                ];
                if let Some(n) = shard_records {
                    v.push(format!("--shard-records={n}"));
                }
                if let Some((descr, eos)) = tokens {
                    let name = TOKEN_DTYPES.iter().find(|(_, d)| d == descr).map_or(*descr, |(n, _)| *n);
                    v.push(format!("--tokens={name}"));
                    v.push(format!("--eos={eos}"));
                }
                if *skip_empty {
                    v.push(s("--skip-empty"));
                }
                if *megatron {
                    v.push(s("--megatron"));
                }
                if *images {
                    v.push(s("--images"));
                }
                if let Some(t) = text {
                    v.push(format!("--tokenizer={}", t.tokenizer));
                    v.push(format!("--text-field={}", t.text_field));
                    if let Some(eos) = t.eos {
                        v.push(format!("--eos={eos}"));
                    }
                    if t.tokens_only {
                        v.push(s("--tokens-only"));
                    }
                }
                v
            }
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
            Command::Export { store, output, verify } => {
                let mut v = alloc::vec![s("export"), s(store), s(output)];
                if *verify != Verify::Auto {
                    v.push(format!("--verify={}", verify.name()));
                }
                v
            }
            Command::Help => alloc::vec![s("--help")],
            Command::Version => alloc::vec![s("--version")],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

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
