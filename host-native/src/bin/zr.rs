//! `zr`: inspect, verify, shrink, convert and export zrecord stores.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use zrecord::{Codec, Error, Zrecord};

#[derive(Parser)]
#[command(name = "zr", version, about = "Inspect, verify, compact, convert and export zrecord stores")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum CodecArg {
    Flate,
    Raw,
}

impl From<CodecArg> for Codec {
    fn from(c: CodecArg) -> Codec {
        match c {
            CodecArg::Flate => Codec::Flate,
            CodecArg::Raw => Codec::Raw,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Header, record count, codec mix, chunk usage, sizes and schema.json.
    Inspect {
        /// Store directory.
        store: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Storage usage: records, live_bytes, chunk_bytes, reclaimable (as JSON).
    Stats {
        /// Store directory.
        store: PathBuf,
    },
    /// Decode every record; list the ones that fail and exit non-zero if any does.
    Verify {
        /// Store directory.
        store: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Reclaim the space left by deleted records, in place (safe to interrupt and re-run).
    Compact {
        /// Store directory.
        store: PathBuf,
    },
    /// Delete records by index (the tail moves into each hole).
    Delete {
        /// Store directory.
        store: PathBuf,
        /// Indices to delete.
        #[arg(required = true)]
        indices: Vec<u64>,
    },
    /// Write each slice along axis 0 of a .npy file as one record, with a Dataset schema.json.
    Convert {
        /// Input .npy file.
        input: PathBuf,
        /// Output store directory (created, or appended to if it holds a compatible dataset).
        output: PathBuf,
        /// Record codec for a new dataset (an existing dataset keeps its own).
        #[arg(long, value_enum, default_value = "flate")]
        codec: CodecArg,
        /// Source bytes read and appended per step; bounds memory use.
        #[arg(long, default_value_t = 64)]
        chunk_mib: usize,
    },
    /// Write a dataset (a store with schema.json) to a .npy file.
    Export {
        /// Store directory.
        store: PathBuf,
        /// Output .npy file (replaced).
        output: PathBuf,
    },
}

fn progress_bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} records ({per_sec}, eta {eta})")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

fn track<'a>(bar: &'a ProgressBar) -> impl FnMut(u64, u64) + 'a {
    move |done, total| {
        if bar.length() != Some(total) {
            bar.set_length(total);
        }
        bar.set_position(done);
    }
}

fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(v).expect("reports serialise")
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    match cli.command {
        Command::Inspect { store, json: as_json } => {
            let report = Zrecord::open_read_only(&store)?.inspect()?;
            if as_json {
                println!("{}", json(&report));
            } else {
                println!("store         {}", store.display());
                println!("{report}");
            }
        }
        Command::Stats { store } => {
            let s = Zrecord::open_read_only(&store)?.stats()?;
            println!(
                "{{\"records\": {}, \"live_bytes\": {}, \"chunk_bytes\": {}, \"reclaimable\": {}}}",
                s.records, s.live_bytes, s.chunk_bytes, s.reclaimable
            );
        }
        Command::Verify { store, json: as_json } => {
            let zr = Zrecord::open_read_only(&store)?;
            let bar = progress_bar(u64::from(zr.len()), "verify");
            let report = zr.verify(&mut track(&bar))?;
            bar.finish_and_clear();
            if as_json {
                println!("{}", json(&report));
            } else {
                for b in &report.bad {
                    println!("bad record {}: {}", b.index, b.error);
                }
                if report.bad_count as usize > report.bad.len() {
                    println!("... and {} more", report.bad_count as usize - report.bad.len());
                }
                println!("{} records checked, {} bad", report.checked, report.bad_count);
            }
            if report.bad_count > 0 {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Compact { store } => {
            let mut zr = Zrecord::open_with(&store, zrecord::OpenOptions { create: false, ..Default::default() })?;
            let before = zr.stats()?;
            let bar = progress_bar(u64::from(zr.len()), "compact");
            zr.compact_with_progress(&mut track(&bar))?;
            bar.finish_and_clear();
            let after = zr.stats()?;
            println!(
                "compacted {} records: chunk bytes {} -> {} ({} reclaimable left)",
                after.records, before.chunk_bytes, after.chunk_bytes, after.reclaimable
            );
        }
        Command::Delete { store, indices } => {
            let mut zr = Zrecord::open_with(&store, zrecord::OpenOptions { create: false, ..Default::default() })?;
            let before = zr.len();
            zr.delete(&indices)?;
            zr.sync()?;
            println!("deleted {} records; {} remain", before - zr.len(), zr.len());
        }
        Command::Convert { input, output, codec, chunk_mib } => {
            let zr = Zrecord::open_with(&output, zrecord::OpenOptions { codec: codec.into(), ..Default::default() })?;
            let bar = progress_bar(0, "convert");
            let done = zr.convert_npy(&input, codec.into(), chunk_mib.max(1) << 20, &mut track(&bar))?;
            bar.finish_and_clear();
            println!(
                "appended {} records of {}{:?} ({}) at index {}; store holds {}",
                done.appended,
                done.schema.dtype,
                done.schema.shape,
                done.schema.codec,
                done.first_index,
                zr.len()
            );
        }
        Command::Export { store, output } => {
            let zr = Zrecord::open_read_only(&store)?;
            let bar = progress_bar(u64::from(zr.len()), "export");
            let n = zr.export_npy(&output, 64 << 20, &mut track(&bar))?;
            bar.finish_and_clear();
            println!("exported {n} records to {}", output.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("zr: error: {e}");
            ExitCode::from(2)
        }
    }
}
