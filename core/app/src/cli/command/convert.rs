//! `convert` has a file of its own because it is most of the grammar: one verb for six
//! inputs (`.npy`, a folder of them or an `.npz`, a token file, text through a tokenizer,
//! Megatron, images), whose options depend on each other. Its parse and its command line
//! written back sit together so that a new option is added to both at once.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use zrecord_core::codec::{Codec, CodecPolicy};

use super::scan::{usage, Line};
use super::verbs::{Command, UsageError, TOKEN_DTYPES};
use crate::cli::host::TextImport;
use crate::tools;

/// The `convert` command `line` says.
pub(super) fn parse(mut line: Line<'_>) -> Result<Command, UsageError> {
    line.want(2, "IN.npy|DIR|IN.npz OUT")?;
    let (policy, chunk_mib, shard_records) = storage(&line)?;
    let text = text_import(&line)?;
    let tokens = token_file(&line, text.is_some())?;
    let megatron = line.flag("megatron").is_some();
    if megatron && (tokens.is_some() || text.is_some()) {
        return Err(usage("--megatron reads a Megatron .bin/.idx pair: not with --tokens or --tokenizer".into()));
    }
    let images = line.flag("images").is_some();
    if images && (megatron || tokens.is_some() || text.is_some()) {
        return Err(usage("--images reads an ImageFolder tree: not with --megatron, --tokens or --tokenizer".into()));
    }
    let skip_empty = line.flag("skip-empty").is_some();
    let output = line.pos.pop().expect("two positionals");
    Ok(Command::Convert {
        input: line.pos.pop().expect("two positionals"),
        output,
        policy,
        chunk_mib,
        shard_records,
        tokens,
        skip_empty,
        text,
        megatron,
        images,
    })
}

/// How the records are stored, whatever the input: `--codec` and `--min-savings` (the
/// codec policy), `--chunk-mib` (MiB of source per append) and `--shard-records`.
fn storage(line: &Line<'_>) -> Result<(CodecPolicy, usize, Option<u64>), UsageError> {
    let name = line.flag("codec").unwrap_or("flate");
    let codec = Codec::from_name(name).ok_or_else(|| usage(format!("unknown codec {name:?} ({})", Codec::NAMES)))?;
    let chunk_mib = match line.flag("chunk-mib") {
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|&m| m >= 1 && m.checked_mul(1 << 20).is_some())
            .ok_or_else(|| usage(format!("--chunk-mib takes a positive number of MiB, not {m:?}")))?,
        None => tools::DEFAULT_CHUNK_BYTES >> 20,
    };
    let policy = match line.flag("min-savings") {
        Some(m) => m
            .parse::<f64>()
            .ok()
            .and_then(|f| CodecPolicy::new(codec, f).ok())
            .ok_or_else(|| usage(format!("--min-savings takes a fraction from 0 to 1, not {m:?}")))?,
        None => CodecPolicy::from(codec),
    };
    let shard_records = match line.flag("shard-records") {
        Some(m) => {
            Some(m.parse::<u64>().ok().filter(|&n| n >= 1 && n <= u64::from(zrecord_core::MAX_RECORDS)).ok_or_else(
                || {
                    usage(format!(
                        "--shard-records takes a number of samples from 1 to {}, not {m:?}",
                        zrecord_core::MAX_RECORDS
                    ))
                },
            )?)
        }
        None => None,
    };
    Ok((policy, chunk_mib, shard_records))
}

/// `--tokenizer FILE [--text-field NAME] [--eos ID] [--tokens-only]`: text to tokenize, if
/// the input is text.
fn text_import(line: &Line<'_>) -> Result<Option<TextImport>, UsageError> {
    let flag = |name: &str| line.flag(name);
    if flag("tokens-only").is_some() && flag("tokenizer").is_none() {
        return Err(usage("--tokens-only goes with --tokenizer FILE (text to tokenize)".into()));
    }
    Ok(match (flag("tokenizer"), flag("text-field")) {
        (None, None) => None,
        (None, Some(_)) => return Err(usage("--text-field goes with --tokenizer FILE (text to tokenize)".into())),
        (Some(_), _) if flag("tokens").is_some() => {
            return Err(usage("--tokens reads a file of token ids; --tokenizer reads text: give one of them".into()))
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
    })
}

/// `--tokens DTYPE --eos ID`: the numpy dtype string and the end-of-document id of a flat
/// token file, if the input is one. With `text` (a tokenizer given), `--eos` is the text's.
fn token_file(line: &Line<'_>, text: bool) -> Result<Option<(&'static str, u64)>, UsageError> {
    Ok(match (line.flag("tokens"), line.flag("eos").filter(|_| !text)) {
        (None, None) => None,
        (Some(name), Some(eos)) => {
            let descr = TOKEN_DTYPES.iter().find(|(n, _)| *n == name).map(|(_, d)| *d).ok_or_else(|| {
                let names: Vec<&str> = TOKEN_DTYPES.iter().map(|(n, _)| *n).collect();
                usage(format!("--tokens takes a token dtype ({}), not {name:?}", names.join(", ")))
            })?;
            let eos = eos
                .parse::<u64>()
                .map_err(|_| usage(format!("--eos takes a token id (an integer >= 0), not {eos:?}")))?;
            Some((descr, eos))
        }
        (Some(_), None) => {
            return Err(usage("--tokens needs --eos ID: the end-of-document id to split the file on".into()))
        }
        (None, Some(_)) => return Err(usage("--eos goes with --tokens DTYPE (a flat token file)".into())),
    })
}

/// The command line of `command`, a `convert` command.
pub(super) fn to_args(command: &Command) -> Vec<String> {
    let s = |v: &str| v.to_string();
    let Command::Convert {
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
    } = command
    else {
        unreachable!("Command::to_args sends only a convert command here")
    };
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
