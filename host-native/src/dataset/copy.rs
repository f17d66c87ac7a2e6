//! A dataset of named fields copied as one consistent state while writers change it
//! ([`copy_dataset`]): what `cp -r` and `rsync` cannot promise.
//!
//! The rule that makes it possible: a shard folder a published manifest lists is never
//! written again. Appends add new folders, deletes and compactions copy into new folders
//! and publish a manifest without the old ones, and only then remove them. So a copy reads
//! the manifest, copies the stores of the shards and fields it lists, and if a folder
//! vanished on the way (a change published and its old shards removed), reads the manifest
//! again and copies what the new one lists, keeping the shards already copied that it
//! still lists. The manifest the copy ends with is written last, as the copied bytes read
//! it: the copy is the dataset as that manifest published it, whatever ran beside it.
//!
//! Files are written as long as the bytes they hold: a sparse store's trailing holes are
//! left holes (the file is sized again afterwards without writing them), so a copy never
//! fills a disk with zeros. The copy is built beside its destination under a partial name
//! (`zrecord_app::partial`) and renamed into place once whole.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use zrecord_core::dataset::{Manifest, MANIFEST_FILE, MAX_MANIFEST_LEN};
use zrecord_core::error::{Error, IoError};

use super::manifest_io::io_at;
use super::DatasetError;

/// Times the manifest is read again when a change removed a listed shard during the copy.
const TRIES: usize = 64;
/// Bytes copied at a time.
const BLOCK: usize = 8 << 20;

/// What [`copy_dataset`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Samples in the copy.
    pub samples: u64,
    /// Shards in the copy.
    pub shards: usize,
    /// Files written.
    pub files: u64,
    /// Bytes written (what the files hold).
    pub bytes: u64,
    /// Times a change under the copy made it read the manifest again.
    pub restarts: usize,
}

/// Copies the dataset of named fields at `src` to the new directory `dst` as one state
/// of it (see the module docs); `progress(shards done, shards)`.
pub fn copy_dataset(src: &Path, dst: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<Copied, DatasetError> {
    let manifest_path = src.join(MANIFEST_FILE);
    if !manifest_path.is_file() {
        return Err(DatasetError::at(
            src,
            None,
            Error::InvalidArgument(format!("is not a dataset of named fields (no {MANIFEST_FILE})")),
        ));
    }
    if dst.exists() {
        return Err(DatasetError::at(
            dst,
            None,
            Error::InvalidArgument("exists; a copy writes a new directory".into()),
        ));
    }
    let parent = zrecord_app::partial::dir_of(dst);
    let name = dst.file_name().and_then(|n| n.to_str()).unwrap_or("copy");
    let staged = zrecord_app::partial::stage(&parent, name);
    std::fs::create_dir(&staged).map_err(io_at(&staged, "create"))?;
    let result = copy_into(src, &staged, progress);
    let done = match result {
        Ok(done) => done,
        Err(e) => {
            zrecord_app::partial::remove(&staged);
            return Err(e);
        }
    };
    if let Err(e) = std::fs::rename(&staged, dst) {
        zrecord_app::partial::remove(&staged);
        return Err(io_at(dst, "rename into")(e));
    }
    File::open(&parent).and_then(|d| d.sync_all()).map_err(io_at(&parent, "sync"))?;
    Ok(done)
}

fn copy_into(src: &Path, out: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<Copied, DatasetError> {
    let manifest_path = src.join(MANIFEST_FILE);
    let read = || super::read_meta_file(&manifest_path, MAX_MANIFEST_LEN).map_err(|e| DatasetError::at(src, None, e));
    let mut done = Copied::default();
    // Shard folders copied whole, with the fields they were copied for.
    let mut copied: Vec<(String, Vec<String>)> = Vec::new();
    let mut bytes = read()?;
    for attempt in 0..TRIES {
        let manifest = Manifest::from_json(&bytes).map_err(|e| DatasetError::in_metadata(&manifest_path, e))?;
        let fields: Vec<String> = manifest.fields.iter().map(|f| f.name.clone()).collect();
        // What a newer manifest no longer lists goes from the copy.
        copied.retain(|(dir, had)| {
            let keep = manifest.shards.iter().any(|s| &s.dir == dir) && had == &fields;
            if !keep {
                let _ = std::fs::remove_dir_all(out.join(dir));
            }
            keep
        });
        let total = manifest.shards.len() as u64;
        let mut vanished = false;
        for (k, shard) in manifest.shards.iter().enumerate() {
            progress(k as u64, total);
            if copied.iter().any(|(dir, _)| dir == &shard.dir) {
                continue;
            }
            let _ = std::fs::remove_dir_all(out.join(&shard.dir));
            match copy_shard(&src.join(&shard.dir), &out.join(&shard.dir), &fields, &mut done) {
                Ok(()) => copied.push((shard.dir.clone(), fields.clone())),
                Err(Fail::Other(e)) => return Err(e),
                Err(Fail::Missing(path)) => {
                    // Gone under us: a change was published. Otherwise the dataset is
                    // broken, and the copy says so.
                    let now = read()?;
                    if now == bytes {
                        return Err(DatasetError::at(
                            &path,
                            None,
                            Error::Io(IoError::new(
                                zrecord_core::error::IoErrorKind::NotFound,
                                format!("copy {}", path.display()),
                                format!("{MANIFEST_FILE} lists it, but it is missing"),
                            )),
                        ));
                    }
                    bytes = now;
                    vanished = true;
                    break;
                }
            }
        }
        if vanished {
            done.restarts = attempt + 1;
            continue;
        }
        // Unchanged since the copy began: no shard it lists was removed (a change removes
        // shards only after publishing the manifest that drops them), so every one was
        // copied whole. Changed: a folder may have been emptied while it was listed here;
        // go round again with the new manifest.
        let now = read()?;
        if now != bytes {
            bytes = now;
            done.restarts = attempt + 1;
            continue;
        }
        progress(total, total);
        write_synced(&out.join(MANIFEST_FILE), &bytes)?;
        File::open(out).and_then(|d| d.sync_all()).map_err(io_at(out, "sync"))?;
        done.samples = manifest.len();
        done.shards = manifest.shards.len();
        return Ok(done);
    }
    Err(DatasetError::at(
        src,
        None,
        Error::Locked(format!("changed {TRIES} times while it was copied; copy it when its writers pause")),
    ))
}

/// Why a shard was not copied: a file or folder of the source is not there (perhaps
/// removed by a change published meanwhile), or another failure.
enum Fail {
    Missing(PathBuf),
    Other(DatasetError),
}

/// `e` at `path`: [`Fail::Missing`] when it says the path is not there.
fn fail<'a>(path: &'a Path, what: &str) -> impl Fn(std::io::Error) -> Fail + 'a {
    let what = what.to_owned();
    move |e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Fail::Missing(path.to_path_buf())
        } else {
            Fail::Other(io_at(path, &what)(e))
        }
    }
}

/// Copies the stores of `fields` in the shard folder `from` to `to`.
fn copy_shard(from: &Path, to: &Path, fields: &[String], done: &mut Copied) -> Result<(), Fail> {
    std::fs::create_dir_all(to).map_err(fail(to, "create"))?;
    for field in fields {
        let (store, out) = (from.join(field), to.join(field));
        let entries = std::fs::read_dir(&store).map_err(fail(&store, "list"))?;
        std::fs::create_dir(&out).map_err(fail(&out, "create"))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(fail(&store, "list"))?;
            let name = entry.file_name();
            // Lock files and partial outputs are hidden; neither belongs in a copy.
            if name.to_string_lossy().starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            names.push(name);
        }
        for name in names {
            let file = store.join(&name);
            let bytes = copy_file(&file, &out.join(&name)).map_err(fail(&file, "copy"))?;
            done.files += 1;
            done.bytes += bytes;
        }
        File::open(&out).and_then(|d| d.sync_all()).map_err(fail(&out, "sync"))?;
    }
    Ok(())
}

/// Copies the bytes `from` holds to the new file `to`, a trailing hole left a hole, and
/// syncs it; returns the bytes written.
fn copy_file(from: &Path, to: &Path) -> std::io::Result<u64> {
    let src = File::open(from)?;
    let size = src.metadata()?.len();
    let held = crate::remote::push::dense_len(&src, size);
    let dst = File::options().write(true).create_new(true).open(to)?;
    let mut buf = vec![0u8; BLOCK.min(held as usize).max(1)];
    let mut at = 0u64;
    while at < held {
        let n = ((held - at) as usize).min(buf.len());
        src.read_exact_at(&mut buf[..n], at)?;
        dst.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
    if size > held {
        dst.set_len(size)?;
    }
    dst.sync_all()?;
    Ok(held)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), DatasetError> {
    let mut file = File::create(path).map_err(io_at(path, "create"))?;
    file.write_all(bytes).map_err(io_at(path, "write"))?;
    file.sync_all().map_err(io_at(path, "sync"))
}
