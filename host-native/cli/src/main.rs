//! `zr`: the native front end of the zrecord command line.
//!
//! Everything a user sees (subcommands, output, messages, exit codes) is
//! `zrecord_core::cli`; this file supplies only the host: store directories through the
//! `zrecord` crate's backend, rayon, a progress bar on a terminal, and stdout/stderr.
//! New outputs are built beside their final path (`.NAME.zr-partial-PID`) and renamed
//! into place, so a failed command leaves nothing behind.

use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use zrecord::dataset::{export_npy, import_npy, ExportTo, ImportOptions};
use zrecord::{Dataset, DatasetError, DatasetOptions, Verify, WriteOptions};
use zrecord::{DirBackend, Error, IoError, IoErrorKind, NativeFile, Rayon};
use zrecord_core::cli::{self, Access, Closed, Failure, FieldImport, FieldsDone, Host, PathKind};
use zrecord_core::{Options, Store, Writer};

struct Native {
    /// The progress bar of the step under way, and which step it is.
    bar: Option<(String, ProgressBar)>,
    /// Parent directories each staged output had to create, to remove with it.
    created: HashMap<String, Vec<PathBuf>>,
}

fn io_err(e: std::io::Error, context: String) -> Error {
    Error::Io(IoError::from_std(e, context))
}

/// `.NAME.zr-partial-PID` beside `path`, and `path`'s parent.
fn partial(path: &str) -> Result<(PathBuf, PathBuf), Error> {
    let p = Path::new(path);
    let name = p.file_name().ok_or_else(|| Error::InvalidArgument(format!("{path} does not name a file")))?;
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let staged = parent.join(format!(".{}.zr-partial-{}", name.to_string_lossy(), std::process::id()));
    Ok((parent, staged))
}

fn utf8(p: PathBuf) -> Result<String, Error> {
    p.into_os_string().into_string().map_err(|p| Error::InvalidArgument(format!("{} is not UTF-8", p.display())))
}

impl Native {
    /// Creates `dir` and its missing parents, returning those it created, outermost first.
    fn create_parents(dir: &Path) -> Result<Vec<PathBuf>, Error> {
        zrecord_core::io::std_dir::create_missing_dirs(dir)
            .map_err(|(p, e)| io_err(e, format!("create directory {}", p.display())))
    }
}

impl Host for Native {
    type Backend = DirBackend;
    type File = NativeFile;

    fn kind(&self, path: &str) -> PathKind {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => PathKind::Dir,
            Ok(_) => PathKind::File,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                match Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
                    Some(parent) if !parent.is_dir() => PathKind::MissingParent,
                    _ => PathKind::Missing,
                }
            }
            // A path under a file (ENOTDIR) or one we may not look at: the open that
            // follows reports the real reason.
            Err(_) => PathKind::File,
        }
    }

    fn shown(&self, path: &str) -> String {
        path.to_string()
    }

    fn open_store(&mut self, path: &str, access: Access) -> Result<(Store<DirBackend>, Writer), Error> {
        let options = match access {
            Access::Read => Options::read_only(),
            Access::Write => Options { create: false, ..Options::default() },
            Access::Create => Options::default(),
        };
        Store::open(DirBackend::new(Path::new(path), !options.read_only)?, options)
    }

    fn open_input(&mut self, path: &str) -> Result<NativeFile, Error> {
        NativeFile::open(Path::new(path), false, false, false)?
            .ok_or_else(|| Error::Io(IoError::new(IoErrorKind::NotFound, format!("open {path}"), "no such file")))
    }

    fn stage_store(&mut self, path: &str) -> Result<String, Error> {
        let (parent, staged) = partial(path)?;
        let created = Native::create_parents(&parent)?;
        let staged = utf8(staged)?;
        if let Err(e) = std::fs::create_dir(&staged) {
            for p in created.iter().rev() {
                let _ = std::fs::remove_dir(p);
            }
            return Err(io_err(e, format!("create directory {staged}")));
        }
        self.created.insert(staged.clone(), created);
        Ok(staged)
    }

    fn stage_file(&mut self, path: &str) -> Result<(NativeFile, String), Error> {
        let (_, staged) = partial(path)?;
        let file = NativeFile::create(&staged)?;
        Ok((file, utf8(staged)?))
    }

    fn commit(&mut self, staged: &str, path: &str) -> Result<(), Error> {
        std::fs::rename(staged, path).map_err(|e| io_err(e, format!("rename {staged} to {path}")))?;
        self.created.remove(staged);
        // The rename is durable once the directory holding the new name is.
        let parent = partial(path)?.0;
        std::fs::File::open(&parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(e, format!("sync directory {}", parent.display())))
    }

    fn discard(&mut self, staged: &str) {
        let _ = if Path::new(staged).is_dir() { std::fs::remove_dir_all(staged) } else { std::fs::remove_file(staged) };
        for p in self.created.remove(staged).unwrap_or_default().iter().rev() {
            let _ = std::fs::remove_dir(p);
        }
    }

    fn progress(&mut self, what: &str, done: u64, total: u64) {
        if self.bar.as_ref().is_none_or(|(w, _)| w != what) {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} records ({per_sec}, eta {eta})")
                    .expect("static template")
                    .progress_chars("=> "),
            );
            bar.set_message(what.to_string());
            self.bar = Some((what.to_string(), bar));
        }
        let (_, bar) = self.bar.as_ref().expect("set above");
        bar.set_length(total);
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
            self.bar = None;
        }
    }

    fn out(&mut self, text: &str) -> Result<(), Closed> {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|_| Closed)
    }

    fn err(&mut self, text: &str) {
        if let Some((_, bar)) = self.bar.take() {
            bar.finish_and_clear();
        }
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }

    fn has_fields_io(&self) -> bool {
        true
    }

    fn import_fields(&mut self, input: &str, output: &str, o: &FieldImport) -> Result<FieldsDone, Failure> {
        let write = WriteOptions {
            shard_records: o.shard_records.unwrap_or(WriteOptions::default().shard_records),
            min_savings: o.policy.min_savings(),
        };
        let options = ImportOptions { codec: o.policy.codec, write, chunk_bytes: o.chunk_mib << 20 };
        let done =
            import_npy(Path::new(input), Path::new(output), &options, &mut |d, t| self.progress("convert", d, t))
                .map_err(failure)?;
        let ds = &done.dataset;
        Ok(FieldsDone { added: done.samples, samples: ds.len(), fields: ds.fields().len(), shards: ds.shard_count() })
    }

    fn export_fields(&mut self, dataset: &str, output: &str, npz: bool, verify: Verify) -> Result<u64, Failure> {
        let ds = Dataset::open_with(dataset, DatasetOptions { read_only: Some(true), verify }).map_err(failure)?;
        let to = if npz { ExportTo::Npz } else { ExportTo::Dir };
        export_npy(&ds, Path::new(output), to, zrecord_core::tools::DEFAULT_CHUNK_BYTES, &mut |d, t| {
            self.progress("export", d, t)
        })
        .map_err(failure)
    }
}

/// A dataset error as `zr` prints it: the store or file at fault, then the field.
fn failure(e: DatasetError) -> Failure {
    let message = match &e.field {
        Some(f) => format!("field {f:?}: {}", e.source),
        None => e.source.to_string(),
    };
    Failure::new(e.path.display().to_string(), message)
}

fn main() -> ExitCode {
    let mut host = Native { bar: None, created: HashMap::new() };
    let args: Result<Vec<String>, _> = std::env::args_os().skip(1).map(|a| a.into_string()).collect();
    let code = match args {
        Ok(args) => cli::run(&mut host, &Rayon, &args),
        Err(bad) => {
            host.err(&format!("zr: error: argument {} is not valid UTF-8\n", Path::new(&bad).display()));
            cli::EXIT_ERROR
        }
    };
    ExitCode::from(code as u8)
}
