//! `zr`: the native front end of the zrecord command line, as a library: the `zr` binary
//! (`main.rs`) and the Python wheel's `zr` console script (`zrecord._zrecord._zr_main`)
//! both call [`run`], so `pip install zrecord` gives the same command.
//!
//! Everything a user sees (subcommands, output, messages, exit codes) is
//! `zrecord_app::cli`; this file supplies only the host: store directories through the
//! `zrecord` crate's backend, rayon, a progress bar on a terminal, and stdout/stderr.
//! New outputs are built beside their final path (`.NAME.zr-partial-PID`, see
//! `zrecord_app::partial`) and renamed into place, so a failed command leaves nothing
//! behind; SIGINT and SIGTERM remove the unfinished output before `zr` exits (status 130),
//! and a partial output of a `zr` that was killed outright (its PID gone) is removed by the
//! next command staging beside it.

use std::ffi::OsString;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use zrecord::dataset::{
    export_npy, import_image_folder, import_megatron, import_npy, import_text, import_tokens, import_webdataset,
    load_tokenizer, text_inputs, webdataset_shards, ExportTo, ImportOptions, TextImport,
};
use zrecord::remote::file::RemoteDir;
use zrecord::remote::objects::{Objects, LISTING};
use zrecord::remote::push::read_listing;
use zrecord::remote::{is_url, Remote};
use zrecord::{Dataset, DatasetError, DatasetOptions, Verify, WriteOptions};
use zrecord::{DirBackend, Error, IoError, IoErrorKind, NativeFile, Rayon};
use zrecord_app::cli::{self, Access, Closed, Failure, FieldImport, FieldsDone, Host, PathKind, ViewOptions};

mod view;
use zrecord_app::partial;
use zrecord_core::{Options, Store, Writer};

struct Native {
    /// The progress bar of the step under way, and which step it is.
    bar: Option<(String, ProgressBar)>,
    /// Pushed datasets read by URL: each root's location and listing.
    remotes: std::cell::RefCell<Vec<(Remote, Objects)>>,
    /// `--follow-symlinks`: open store files that are symbolic links leading out of the
    /// store (refused otherwise).
    follow_symlinks: bool,
}

/// The option that lets `zr` open store files that are symbolic links leading out of the
/// store; the native host's only (zr-wasm's sandbox never follows them).
const FOLLOW_SYMLINKS: &str = "--follow-symlinks";

/// Every staged output not yet committed or discarded, with the parent directories its
/// staging created (to remove with it). A static so that the signal handler's thread can
/// remove them; `commit` renames under the same lock, so an output is either moved into
/// place or removed, never cut in half.
static STAGED: Mutex<Vec<(String, Vec<PathBuf>)>> = Mutex::new(Vec::new());

fn staged_list() -> MutexGuard<'static, Vec<(String, Vec<PathBuf>)>> {
    STAGED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Set by SIGINT or SIGTERM: the main thread stops at its next progress report.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Removes every staged output and exits with 130, as an interrupted command does. Called
/// by the main thread at a progress report (so nothing is writing into what it removes), or
/// by the signal thread if the main thread does not get there in time (then under the
/// lock that `commit` renames under, so no output is left half moved).
fn exit_interrupted() -> ! {
    let list = staged_list();
    for (path, created) in list.iter() {
        remove_staged(path, created);
    }
    let _ = std::io::stderr().lock().write_all(b"zr: interrupted; the unfinished output was removed\n");
    std::process::exit(130);
}

/// Removes `path` (a staged directory or file) and the parents its staging created.
fn remove_staged(path: &str, created: &[PathBuf]) {
    partial::remove(Path::new(path));
    for p in created.iter().rev() {
        let _ = std::fs::remove_dir(p);
    }
}

fn io_err(e: std::io::Error, context: String) -> Error {
    Error::Io(IoError::from_std(e, context))
}

/// `.NAME.zr-partial-PID` beside `path`, and `path`'s parent.
fn staged_beside(path: &str) -> Result<(PathBuf, PathBuf), Error> {
    let name =
        Path::new(path).file_name().ok_or_else(|| Error::InvalidArgument(format!("{path} does not name a file")))?;
    let parent = partial::dir_of(path);
    let staged = partial::stage(&parent, &name.to_string_lossy());
    Ok((parent, staged))
}

fn utf8(p: PathBuf) -> Result<String, Error> {
    p.into_os_string().into_string().map_err(|p| Error::InvalidArgument(format!("{} is not UTF-8", p.display())))
}

impl Native {
    /// The pushed dataset holding `url` (its root's location and listing, found by reading
    /// `remote.json` at `url` or the nearest prefix above it that has one) and `url`'s path
    /// under that root (`""` for the root itself).
    fn remote_at(&self, url: &str) -> Result<(Remote, Objects, String), Error> {
        let url = url.trim_end_matches('/');
        for (remote, listing) in self.remotes.borrow().iter() {
            if let Some(rest) = url.strip_prefix(remote.url()) {
                if rest.is_empty() || rest.starts_with('/') {
                    return Ok((remote.clone(), listing.clone(), rest.trim_start_matches('/').to_owned()));
                }
            }
        }
        let mut root = url.to_owned();
        loop {
            let remote = Remote::open(&root, &[])?;
            if let Some((bytes, _, _)) = read_listing(&remote)? {
                let listing = Objects::from_json(&bytes, &remote.shown(LISTING))?;
                self.remotes.borrow_mut().push((remote.clone(), listing.clone()));
                let rest = url[root.len()..].trim_start_matches('/').to_owned();
                return Ok((remote, listing, rest));
            }
            match root.rfind('/') {
                Some(k) if root[..k].contains("://") && !root[..k].ends_with('/') => root.truncate(k),
                _ => {
                    return Err(Error::Io(IoError::new(
                        IoErrorKind::NotFound,
                        format!("open {url}"),
                        "no pushed dataset here (no remote.json at it or above it)",
                    )))
                }
            }
        }
    }

    /// Creates `dir` and its missing parents, returning those it created, outermost first.
    fn create_parents(dir: &Path) -> Result<Vec<PathBuf>, Error> {
        zrecord_core::io::std_dir::create_missing_dirs(dir)
            .map_err(|(p, e)| io_err(e, format!("create directory {}", p.display())))
    }
}

impl Native {
    /// `convert --tokenizer`: the text of `input` tokenized into `output`, with the
    /// throughput on stderr.
    fn import_text(
        &mut self,
        input: &Path,
        output: &Path,
        text: &zrecord_app::cli::TextImport,
        o: &FieldImport,
        write: WriteOptions,
    ) -> Result<zrecord::dataset::Imported, Failure> {
        let tokenizer = load_tokenizer(Path::new(&text.tokenizer)).map_err(failure)?;
        let inputs = text_inputs(input).map_err(failure)?;
        let import = TextImport {
            text_field: text.text_field.clone(),
            eos: text.eos,
            codec: o.policy.codec,
            write,
            block_bytes: (o.chunk_mib << 20).max(1 << 20),
            keep_fields: !text.tokens_only,
        };
        let started = std::time::Instant::now();
        let done = import_text(&inputs, tokenizer, output, &import, &mut |d, t| self.progress("tokenize", d, t))
            .map_err(failure)?;
        if done.empty > 0 {
            self.err(&format!("zr: {} documents with no token left out (--skip-empty)\n", done.empty));
        }
        if !done.kept.is_empty() {
            self.err(&format!("zr: kept the fields {} beside tokens (--tokens-only: none)\n", done.kept.join(", ")));
        }
        if !done.left_out.is_empty() {
            self.err(&format!("zr: left out the fields {} (null, array or object values)\n", done.left_out.join(", ")));
        }
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        self.err(&format!(
            "zr: {} tokens from {:.1} MB of text in {:.1} s ({:.1} MB/s)\n",
            done.tokens,
            done.text_bytes as f64 / 1e6,
            seconds,
            done.text_bytes as f64 / 1e6 / seconds
        ));
        Ok(done.imported)
    }
}

impl Host for Native {
    type Backend = DirBackend;
    type File = NativeFile;

    fn kind(&self, path: &str) -> PathKind {
        if is_url(path) {
            return match self.remote_at(path) {
                Ok((_, _, rel)) if rel.is_empty() => PathKind::Dir,
                Ok((_, listing, rel)) if listing.objects.contains_key(&rel) => PathKind::File,
                Ok((_, listing, rel)) if listing.objects.keys().any(|k| k.starts_with(&format!("{rel}/"))) => {
                    PathKind::Dir
                }
                _ => PathKind::Missing,
            };
        }
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

    fn is_empty_dir(&self, path: &str) -> bool {
        use std::os::unix::fs::MetadataExt;
        // Built beside it and renamed over it, which only works within one file system: an
        // empty mount point is written in place, as before.
        let same_fs = match (std::fs::metadata(path), std::fs::metadata(partial::dir_of(path))) {
            (Ok(dir), Ok(parent)) => dir.dev() == parent.dev(),
            _ => false,
        };
        same_fs && std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none())
    }

    fn open_store(&mut self, path: &str, access: Access) -> Result<(Store<DirBackend>, Writer), Error> {
        if is_url(path) {
            if access != Access::Read {
                return Err(Error::InvalidArgument(format!("{path} is a pushed dataset: read-only")));
            }
            let (remote, listing, rel) = self.remote_at(path)?;
            return Store::open(DirBackend::remote(RemoteDir::new(&remote, &listing, &rel)), Options::read_only());
        }
        let options = match access {
            Access::Read => Options::read_only(),
            Access::Write => Options { create: false, ..Options::default() },
            Access::Create => Options::default(),
        };
        let backend = DirBackend::new(Path::new(path), !options.read_only)?.follow_links(self.follow_symlinks);
        Store::open(backend, options)
    }

    fn open_input(&mut self, path: &str) -> Result<NativeFile, Error> {
        if is_url(path) {
            let (remote, listing, rel) = self.remote_at(path)?;
            let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel.as_str()));
            return RemoteDir::new(&remote, &listing, dir)
                .file(name)
                .map(NativeFile::from_remote)
                .ok_or_else(|| Error::Io(IoError::new(IoErrorKind::NotFound, format!("open {path}"), "not pushed")));
        }
        NativeFile::open(Path::new(path), false, false, false)?
            .ok_or_else(|| Error::Io(IoError::new(IoErrorKind::NotFound, format!("open {path}"), "no such file")))
    }

    fn stage_store(&mut self, path: &str) -> Result<String, Error> {
        let (parent, staged) = staged_beside(path)?;
        let created = Native::create_parents(&parent)?;
        let staged = utf8(staged)?;
        if let Err(e) = std::fs::create_dir(&staged) {
            for p in created.iter().rev() {
                let _ = std::fs::remove_dir(p);
            }
            return Err(io_err(e, format!("create directory {staged}")));
        }
        staged_list().push((staged.clone(), created));
        Ok(staged)
    }

    fn stage_file(&mut self, path: &str) -> Result<(NativeFile, String), Error> {
        let (_, path) = staged_beside(path)?;
        let path = utf8(path)?;
        let mut list = staged_list();
        let file = NativeFile::create(Path::new(&path))?;
        list.push((path.clone(), Vec::new()));
        Ok((file, path))
    }

    fn commit(&mut self, staged: &str, path: &str) -> Result<(), Error> {
        {
            let mut list = staged_list();
            std::fs::rename(staged, path).map_err(|e| io_err(e, format!("rename {staged} to {path}")))?;
            list.retain(|(s, _)| s != staged);
        }
        // The rename is durable once the directory holding the new name is.
        let parent = partial::dir_of(path);
        std::fs::File::open(&parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(e, format!("sync directory {}", parent.display())))
    }

    fn discard(&mut self, path: &str) {
        let mut list = staged_list();
        let created = list.iter().position(|(s, _)| s == path).map(|k| list.remove(k).1).unwrap_or_default();
        remove_staged(path, &created);
    }

    fn progress(&mut self, what: &str, done: u64, total: u64) {
        if INTERRUPTED.load(Ordering::Acquire) {
            if let Some((_, bar)) = self.bar.take() {
                bar.finish_and_clear();
            }
            exit_interrupted();
        }
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
            skip_empty: o.skip_empty,
            ..WriteOptions::default()
        };
        let options = ImportOptions { codec: o.policy.codec, write, chunk_bytes: o.chunk_mib << 20 };
        let (input, output) = (Path::new(input), Path::new(output));
        let done = if o.megatron {
            import_megatron(input, output, &options, &mut |d, t| self.progress("convert", d, t)).map_err(failure)?
        } else if o.images {
            match webdataset_shards(input).map_err(failure)? {
                Some(tars) => import_webdataset(&tars, output, &options, &mut |d, t| self.progress("images", d, t)),
                None => import_image_folder(input, output, &options, &mut |d, t| self.progress("images", d, t)),
            }
            .map_err(failure)?
        } else if let Some(text) = &o.text {
            self.import_text(input, output, text, o, write)?
        } else {
            match o.tokens {
                None => import_npy(input, output, &options, &mut |d, t| self.progress("convert", d, t)),
                Some((descr, eos)) => {
                    import_tokens(input, output, descr, eos, &options, &mut |d, t| self.progress("convert", d, t)).map(
                        |t| {
                            if t.empty > 0 {
                                self.err(&format!(
                                    "zr: {} empty documents (two end-of-document ids in a row) left out \
                                     (--skip-empty)\n",
                                    t.empty
                                ));
                            }
                            t.imported
                        },
                    )
                }
            }
            .map_err(failure)?
        };
        let ds = &done.dataset;
        Ok(FieldsDone { added: done.samples, samples: ds.len(), fields: ds.fields().len(), shards: ds.shard_count() })
    }

    fn push(&mut self, local: &str, url: &str) -> Result<String, Failure> {
        let remote = Remote::open(url, &[]).map_err(|e| Failure::at(url.to_owned(), Error::Io(e)))?;
        let done = zrecord::remote::push::push(Path::new(local), &remote, &mut |d, t| self.progress("push", d, t))
            .map_err(|e| Failure::at(local.to_owned(), Error::Io(e)))?;
        Ok(format!(
            "pushed the {} {local} to {url}: {} files, {} uploaded now ({} bytes); {} bytes stored for {} on disk",
            done.kind, done.files, done.uploaded, done.bytes, done.stored, done.apparent
        ))
    }

    fn pull(&mut self, url: &str, output: &str) -> Result<u64, Failure> {
        let remote = Remote::open(url, &[]).map_err(|e| Failure::at(url.to_owned(), Error::Io(e)))?;
        zrecord::remote::push::pull(&remote, Path::new(output), &mut |d, t| self.progress("pull", d, t))
            .map_err(|e| Failure::at(url.to_owned(), Error::Io(e)))
    }

    fn view(&mut self, target: &str, options: &ViewOptions) -> Result<(), Failure> {
        view::view(target, options, &mut |line| {
            let _ = self.out(line);
        })
    }

    fn delete_samples(&mut self, dataset: &str, indices: &[u64]) -> Result<(u64, u64), Failure> {
        let done = if is_url(dataset) {
            let remote = Remote::open(dataset, &[]).map_err(|e| Failure::at(dataset.to_owned(), Error::Io(e)))?;
            zrecord::dataset::delete_remote(&remote, indices, &mut |d, t| self.progress("delete", d, t))
        } else {
            zrecord::dataset::delete_samples(dataset, indices, &mut |d, t| self.progress("delete", d, t))
        }
        .map_err(failure)?;
        Ok((done.samples, done.remaining))
    }

    fn copy(&mut self, src: &str, dst: &str) -> Result<String, Failure> {
        let started = std::time::Instant::now();
        let line = match (is_url(src), is_url(dst)) {
            (false, false) => {
                let done = zrecord::dataset::copy_dataset(Path::new(src), Path::new(dst), &mut |d, t| {
                    self.progress("copy", d, t)
                })
                .map_err(failure)?;
                let again = match done.restarts {
                    0 => String::new(),
                    n => format!("; read again {n} times as writers changed it"),
                };
                format!(
                    "copied {src} to {dst}: {} samples in {} shards, {} files, {:.1} MB{again}",
                    done.samples,
                    done.shards,
                    done.files,
                    done.bytes as f64 / 1e6
                )
            }
            // An object store's listing is replaced whole by every change: a pull or a
            // push is a copy of one state.
            (true, false) => {
                if Path::new(dst).exists() {
                    return Err(Failure::new(dst.to_owned(), "exists; a copy writes a new directory"));
                }
                let staged = self.stage_store(dst).map_err(|e| Failure::at(dst.to_owned(), e))?;
                let pulled = self.pull(src, &staged).and_then(|files| {
                    self.commit(&staged, dst).map_err(|e| Failure::at(dst.to_owned(), e))?;
                    Ok(files)
                });
                let files = pulled.inspect_err(|_| self.discard(&staged))?;
                format!("copied {src} to {dst}: {files} files")
            }
            (false, true) => self.push(src, dst)?,
            // One listing read is one state: pulled into a scratch folder (dense files),
            // then pushed, so the copy is of that state whatever writers do meanwhile.
            (true, true) => {
                let to = Remote::open(dst, &[]).map_err(|e| Failure::at(dst.to_owned(), Error::Io(e)))?;
                let there =
                    zrecord::remote::push::read_listing(&to).map_err(|e| Failure::at(dst.to_owned(), Error::Io(e)))?;
                if there.is_some() {
                    return Err(Failure::new(
                        dst.to_owned(),
                        "holds a dataset or store already; a copy writes a new location",
                    ));
                }
                let scratch = std::env::temp_dir().join(format!("zrecord-copy-{}", zrecord::dataset::write_tag()));
                let shown = scratch.display().to_string();
                let copied = self.pull(src, &shown).and_then(|files| self.push(&shown, dst).map(|_| files));
                let _ = std::fs::remove_dir_all(&scratch);
                format!("copied {src} to {dst}: {} files", copied?)
            }
        };
        Ok(format!("{line} in {:.2} s", started.elapsed().as_secs_f64()))
    }

    fn compact_dataset(&mut self, dataset: &str, target_rows: u64) -> Result<String, Failure> {
        let started = std::time::Instant::now();
        let done = if is_url(dataset) {
            let remote = Remote::open(dataset, &[]).map_err(|e| Failure::at(dataset.to_owned(), Error::Io(e)))?;
            zrecord::dataset::compact_remote(&remote, target_rows, &mut |d, t| self.progress("compact", d, t))
        } else {
            zrecord::dataset::compact_shards(dataset, target_rows, &mut |d, t| self.progress("compact", d, t))
        }
        .map_err(failure)?;
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        Ok(format!(
            "compacted {dataset}: {} shards -> {} (at most {target_rows} samples each), {} samples copied ({:.1} MB) \
             in {seconds:.2} s",
            done.shards_before,
            done.shards_after,
            done.samples_copied,
            done.bytes_copied as f64 / 1e6
        ))
    }

    fn leftovers(
        &mut self,
        dataset: &str,
        remove: bool,
        older_than: Option<u64>,
    ) -> Result<Vec<(String, u64)>, Failure> {
        if is_url(dataset) {
            let remote = Remote::open(dataset, &[]).map_err(|e| Failure::at(dataset.to_owned(), Error::Io(e)))?;
            let age = older_than.map_or(zrecord::dataset::LEFTOVER_AGE, std::time::Duration::from_secs);
            let found = if remove {
                let (removed, young) = zrecord::dataset::remove_remote_leftovers(&remote, age).map_err(failure)?;
                // No lock keeps a change in flight out of a bucket: its uploads are young.
                if !young.is_empty() {
                    let _ = self.out(&format!(
                        "kept {} unlisted objects written within the last {} s: they may be a change in flight \
                         (--older-than SECONDS to say otherwise)\n",
                        young.len(),
                        age.as_secs()
                    ));
                }
                removed
            } else {
                zrecord::dataset::remote_leftovers(&remote).map_err(failure)?
            };
            return Ok(found.into_iter().map(|l| (remote.shown(&l.name), l.size)).collect());
        }
        let path = Path::new(dataset);
        let found = if remove {
            zrecord::dataset::remove_leftovers(path)
        } else {
            // The manifest alone: a dataset whose stores do not match it still lists them.
            let manifest = std::fs::read(path.join(zrecord_core::dataset::MANIFEST_FILE))
                .ok()
                .and_then(|b| zrecord_core::dataset::Manifest::from_json(&b).ok());
            match manifest {
                Some(m) => zrecord::dataset::leftovers(path, &m),
                None => Ok(Vec::new()),
            }
        }
        .map_err(failure)?;
        Ok(found.into_iter().map(|(p, size)| (p.display().to_string(), size)).collect())
    }

    fn inline_manifest(&mut self, dir: &str) -> Result<Option<Vec<u8>>, Failure> {
        if !is_url(dir) {
            return Ok(None);
        }
        let (_, listing, rel) = self.remote_at(dir).map_err(|e| Failure::at(dir.to_owned(), e))?;
        Ok(match (rel.is_empty(), &listing.manifest) {
            (true, Some(manifest)) => Some(manifest.to_string().into_bytes()),
            _ => None,
        })
    }

    fn export_fields(&mut self, dataset: &str, output: &str, npz: bool, verify: Verify) -> Result<u64, Failure> {
        let ds = Dataset::open_with(dataset, DatasetOptions { read_only: Some(true), verify }).map_err(failure)?;
        let to = if npz { ExportTo::Npz } else { ExportTo::Dir };
        export_npy(&ds, Path::new(output), to, zrecord_app::tools::DEFAULT_CHUNK_BYTES, &mut |d, t| {
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

/// Runs `zr` with `args` (the arguments after the program name) and returns its exit
/// status. Installs the SIGINT/SIGTERM handler once per process (a second call keeps the
/// first's): an interrupted command removes its staged output and exits the process
/// with 130.
pub fn run(args: Vec<OsString>) -> i32 {
    // SIGINT and SIGTERM: the main thread removes what is staged at its next progress
    // report (after at most one block) and exits 130; a main thread that does not report
    // within two seconds (a step without progress) is not waited for.
    let _ = ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::Release);
        std::thread::sleep(Duration::from_secs(2));
        exit_interrupted();
    });
    let mut host = Native { bar: None, remotes: Default::default(), follow_symlinks: false };
    let args: Result<Vec<String>, _> = args.into_iter().map(|a| a.into_string()).collect();
    match args {
        Ok(mut args) => {
            host.follow_symlinks = args.iter().any(|a| a == FOLLOW_SYMLINKS);
            args.retain(|a| a != FOLLOW_SYMLINKS);
            cli::run(&mut host, &Rayon, &args)
        }
        Err(bad) => {
            host.err(&format!("zr: error: argument {} is not valid UTF-8\n", Path::new(&bad).display()));
            cli::EXIT_ERROR
        }
    }
}
