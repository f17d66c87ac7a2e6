//! Image trees into datasets: `zr convert DIR OUT --images` takes an ImageFolder tree or
//! WebDataset tar shards ([`import_webdataset`]).
//!
//! `DIR` holds a folder per class; every `.jpg`, `.jpeg`, `.png` and `.webp` file in a class
//! folder or any folder below it (any case) becomes a sample of three fields: `image` (an
//! image field: the file's bytes as they are, its header checked), `label` (`<i8`, the
//! class's place in the sorted class names) and `path` (a string: the file's path under
//! `DIR`, `/`-separated, so that a sample a decode error names leads back to its file).
//! The order is torchvision's `ImageFolder`'s, so sample `i` is its sample `i`: classes in
//! name order; within a class the folders it holds (itself included, links followed) in the
//! order of their paths as strings, and each folder's files in name order. The class names
//! go into the dataset card as `classes`.
//! Files are read a block at a time, the block's files in parallel on rayon's pool, while
//! the writer stages the block before; nothing is published before the commit (the `zr`
//! front end also stages the output beside its final name). A file that is not an image
//! names itself.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use zrecord_core::dataset::Field;
use zrecord_core::error::Error;
use zrecord_core::Codec;

use super::convert::{ImportOptions, Imported};
use super::manifest_io::io_at;
use super::{Column, DatasetError, DatasetWriter};

/// File name extensions taken as images (compared lower-cased).
const EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp"];

/// What an ImageFolder tree holds.
#[derive(Clone, Debug)]
pub struct ImageFolder {
    /// The class folders' names, in name order: a label is a place in this list.
    pub classes: Vec<String>,
    /// Every image, `(file, label)`: classes in order, files in name order within each.
    pub files: Vec<(PathBuf, usize)>,
}

/// The entries of folder `dir`, in name order.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, DatasetError> {
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(io_at(dir, "read"))?.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    Ok(paths)
}

/// Links followed deeper than this are taken for a cycle.
const MAX_DEPTH: usize = 64;

/// `dir` and every folder below it (links followed), each with its files in name order, in
/// the order of the folders' paths compared as strings (what Python's `sorted(os.walk(d))`
/// gives, which torchvision's ImageFolder walks; `Path`'s own order compares components).
fn walk(dir: &Path) -> Result<Vec<(PathBuf, Vec<PathBuf>)>, DatasetError> {
    let mut folders = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), 0usize)];
    while let Some((folder, depth)) = todo.pop() {
        if depth > MAX_DEPTH {
            let why = format!("folders nest more than {MAX_DEPTH} deep (a link that loops?)");
            return Err(DatasetError::at(&folder, None, Error::InvalidArgument(why)));
        }
        let (subs, files): (Vec<PathBuf>, Vec<PathBuf>) = entries(&folder)?.into_iter().partition(|p| p.is_dir());
        todo.extend(subs.into_iter().map(|s| (s, depth + 1)));
        folders.push((folder, files));
    }
    folders.sort_by(|a, b| a.0.as_os_str().as_encoded_bytes().cmp(b.0.as_os_str().as_encoded_bytes()));
    Ok(folders)
}

/// The classes and images of the ImageFolder tree `root`.
pub fn image_folder(root: &Path) -> Result<ImageFolder, DatasetError> {
    let mut classes = Vec::new();
    let mut files = Vec::new();
    for dir in entries(root)?.into_iter().filter(|p| p.is_dir()) {
        let name = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned).ok_or_else(|| {
            DatasetError::at(&dir, None, Error::InvalidArgument("a class folder's name is not UTF-8".into()))
        })?;
        let class = classes.len();
        for (_, folder_files) in walk(&dir)? {
            for file in folder_files {
                let ext = file.extension().and_then(|x| x.to_str()).map(str::to_ascii_lowercase);
                if file.is_file() && ext.is_some_and(|x| EXTENSIONS.contains(&x.as_str())) {
                    files.push((file, class));
                }
            }
        }
        classes.push(name);
    }
    if files.is_empty() {
        let what =
            "holds no class folder with a .jpg, .jpeg, .png or .webp file (an ImageFolder tree: DIR/CLASS/IMAGE)";
        return Err(DatasetError::at(root, None, Error::InvalidArgument(what.into())));
    }
    Ok(ImageFolder { classes, files })
}

/// Adds the images of the ImageFolder tree `input` to the dataset `output` (see the module
/// documentation); `progress(files done, files)` after each block.
pub fn import_image_folder(
    input: &Path,
    output: &Path,
    options: &ImportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Imported, DatasetError> {
    let ImageFolder { classes, files } = image_folder(input)?;
    let fields = vec![
        Field::image("image", Codec::Raw),
        Field::fixed("label", "<i8", &[], Codec::Raw),
        Field::string("path", Codec::Raw),
    ];
    let mut writer = DatasetWriter::open(output, fields, options.write)?;
    let card = serde_json::json!({ "classes": classes });
    writer.set_metadata(&card.to_string())?;
    let total = files.len() as u64;
    progress(0, total);
    // Blocks of about `chunk_bytes` of files, by their sizes.
    let budget = options.chunk_bytes.max(1 << 20) as u64;
    let mut done = 0usize;
    while done < files.len() {
        let mut end = done;
        let mut bytes = 0u64;
        while end < files.len() && (end == done || bytes < budget) {
            bytes += std::fs::metadata(&files[end].0).map_or(0, |m| m.len());
            end += 1;
        }
        let block = &files[done..end];
        let read: Vec<Vec<u8>> = block
            .par_iter()
            .map(|(path, _)| {
                let data = std::fs::read(path).map_err(io_at(path, "read"))?;
                zrecord_core::image::info(&data)
                    .map_err(|e| DatasetError::at(path, None, Error::InvalidArgument(e.to_string())))?;
                Ok(data)
            })
            .collect::<Result<_, DatasetError>>()?;
        let mut offsets = Vec::with_capacity(read.len() + 1);
        offsets.push(0u64);
        let mut values = Vec::with_capacity(read.iter().map(Vec::len).sum());
        for data in &read {
            values.extend_from_slice(data);
            offsets.push(values.len() as u64);
        }
        let labels: Vec<u8> = block.iter().flat_map(|&(_, class)| (class as i64).to_le_bytes()).collect();
        let mut names = Vec::new();
        let mut name_offsets = vec![0u64];
        for (path, _) in block {
            names.extend_from_slice(relative_name(input, path)?.as_bytes());
            name_offsets.push(names.len() as u64);
        }
        writer.write(&[
            Column::Ragged { values: &values, offsets: &offsets },
            Column::Fixed(&labels),
            Column::Ragged { values: &names, offsets: &name_offsets },
        ])?;
        done = end;
        progress(done as u64, total);
    }
    let dataset = writer.commit()?;
    Ok(Imported { samples: total, dataset })
}

/// `file`'s path under `root`, `/`-separated (the `path` field).
fn relative_name(root: &Path, file: &Path) -> Result<String, DatasetError> {
    let rel = file.strip_prefix(root).unwrap_or(file);
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    parts
        .map(|p| p.join("/"))
        .ok_or_else(|| DatasetError::at(file, None, Error::InvalidArgument("the file's name is not UTF-8".into())))
}

/// The tar files of a WebDataset: `input` itself, or a directory's `.tar` files in name
/// order (`None` when it is neither: an ImageFolder tree).
pub fn webdataset_shards(input: &Path) -> Result<Option<Vec<PathBuf>>, DatasetError> {
    let is_tar = |p: &Path| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("tar"));
    if input.is_file() {
        return Ok(is_tar(input).then(|| vec![input.to_path_buf()]));
    }
    let mut tars: Vec<PathBuf> = std::fs::read_dir(input)
        .map_err(io_at(input, "read"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && is_tar(p))
        .collect();
    tars.sort();
    Ok((!tars.is_empty()).then_some(tars))
}

/// A WebDataset member's part of its sample: which field, from its extension.
fn webdataset_field(ext: &str) -> Field {
    match ext {
        "jpg" | "jpeg" | "png" | "webp" => Field::image("image", Codec::Raw),
        "cls" => Field::fixed("label", "<i8", &[], Codec::Raw),
        "txt" => Field::string("text", Codec::Flate),
        other => Field::bytes(other, Codec::Raw),
    }
}

/// One sample's members' bytes, in the order of the fields.
type Members = Vec<Option<Vec<u8>>>;

/// The sample being read from a tar: its key and its members, `(extension, bytes)`.
type Reading = Option<(String, Vec<(String, Vec<u8>)>)>;

/// Adds the samples of the WebDataset tar shards `shards` to the dataset `output`: the
/// members of a sample share a key (the name before its first dot) and lie together in a
/// tar; `.jpg`/`.jpeg`/`.png`/`.webp` become the image field `image`, `.cls` the label
/// `label` (`<i8`, the member's decimal text), `.txt` the string field `text`, any other
/// extension a bytes field of its name. The first sample says which fields there are;
/// every sample must have the same. `progress(bytes of tar read, bytes in all)`.
pub fn import_webdataset(
    shards: &[PathBuf],
    output: &Path,
    options: &ImportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Imported, DatasetError> {
    let total: u64 = shards.iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum();
    progress(0, total);
    let mut exts: Vec<String> = Vec::new();
    let mut writer: Option<DatasetWriter> = None;
    let mut block: Vec<Members> = Vec::new();
    let mut block_bytes = 0usize;
    let mut samples = 0u64;
    let mut read = 0u64;
    let budget = options.chunk_bytes.max(1 << 20);
    for tar_path in shards {
        let bad = |what: String| DatasetError::at(tar_path, None, Error::InvalidArgument(what));
        let file = std::fs::File::open(tar_path).map_err(io_at(tar_path, "open"))?;
        let mut archive = tar::Archive::new(std::io::BufReader::with_capacity(1 << 20, file));
        let mut current: Reading = None;
        let flush_sample = |current: &mut Reading,
                            exts: &mut Vec<String>,
                            block: &mut Vec<Members>,
                            block_bytes: &mut usize|
         -> Result<(), DatasetError> {
            let Some((key, members)) = current.take() else { return Ok(()) };
            if exts.is_empty() {
                let mut first: Vec<String> = members.iter().map(|(e, _)| e.clone()).collect();
                first.sort_by_key(|e| (webdataset_field(e).name != "image", webdataset_field(e).name));
                if !first.iter().any(|e| webdataset_field(e).name == "image") {
                    return Err(bad(format!("sample {key:?} has no .jpg, .jpeg, .png or .webp member: {first:?}")));
                }
                *exts = first;
            }
            let mut row: Members = vec![None; exts.len()];
            for (ext, data) in members {
                let Some(k) = exts.iter().position(|e| *e == ext) else {
                    return Err(bad(format!("sample {key:?} has a .{ext} member, which the first sample has not")));
                };
                *block_bytes += data.len();
                row[k] = Some(data);
            }
            if let Some(k) = row.iter().position(Option::is_none) {
                return Err(bad(format!("sample {key:?} has no .{} member, which the first sample has", exts[k])));
            }
            block.push(row);
            Ok(())
        };
        let entries = archive.entries().map_err(io_at(tar_path, "read"))?;
        for entry in entries {
            let mut entry = entry.map_err(io_at(tar_path, "read"))?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let name = entry.path().map_err(io_at(tar_path, "read"))?.to_string_lossy().into_owned();
            // The key is the path up to the first dot of its last part; the rest, the extension.
            let cut = name.rfind('/').map_or(0, |s| s + 1);
            let Some(dot) = name[cut..].find('.').map(|d| cut + d) else { continue };
            let (key, ext) = (name[..dot].to_owned(), name[dot + 1..].to_ascii_lowercase());
            let mut data = Vec::with_capacity(entry.header().size().unwrap_or(0) as usize);
            std::io::Read::read_to_end(&mut entry, &mut data).map_err(io_at(tar_path, "read"))?;
            if current.as_ref().is_some_and(|(k, _)| *k != key) {
                flush_sample(&mut current, &mut exts, &mut block, &mut block_bytes)?;
            }
            current.get_or_insert_with(|| (key, Vec::new())).1.push((ext, data));
            if block_bytes >= budget {
                let w = match &mut writer {
                    Some(w) => w,
                    None => writer.insert(open_webdataset(output, &exts, options)?),
                };
                samples += write_webdataset(w, &exts, std::mem::take(&mut block), tar_path)?;
                block_bytes = 0;
            }
        }
        flush_sample(&mut current, &mut exts, &mut block, &mut block_bytes)?;
        read += std::fs::metadata(tar_path).map_or(0, |m| m.len());
        progress(read.min(total), total);
    }
    if exts.is_empty() {
        let what = "holds no sample: WebDataset shards are tar files of KEY.jpg, KEY.cls, ... members";
        return Err(DatasetError::at(&shards[0], None, Error::InvalidArgument(what.into())));
    }
    let mut w = match writer {
        Some(w) => w,
        None => open_webdataset(output, &exts, options)?,
    };
    samples += write_webdataset(&mut w, &exts, block, shards.last().expect("a shard"))?;
    progress(total, total);
    let dataset = w.commit()?;
    Ok(Imported { samples, dataset })
}

fn open_webdataset(output: &Path, exts: &[String], options: &ImportOptions) -> Result<DatasetWriter, DatasetError> {
    DatasetWriter::open(output, exts.iter().map(|e| webdataset_field(e)).collect(), options.write)
}

/// Writes a block of samples; returns how many.
fn write_webdataset(
    writer: &mut DatasetWriter,
    exts: &[String],
    block: Vec<Members>,
    tar_path: &Path,
) -> Result<u64, DatasetError> {
    let n = block.len();
    let mut columns: Vec<(Vec<u8>, Vec<u64>)> = vec![(Vec::new(), vec![0]); exts.len()];
    for (s, row) in block.into_iter().enumerate() {
        for (k, member) in row.into_iter().enumerate() {
            let data = member.expect("checked whole");
            let (values, offsets) = &mut columns[k];
            if exts[k] == "cls" {
                let text = std::str::from_utf8(&data).unwrap_or("").trim();
                let label: i64 = text.parse().map_err(|_| {
                    let what = format!("sample {s} of the block: a .cls member holds {text:?}, not an integer label");
                    DatasetError::at(tar_path, Some("label"), Error::InvalidArgument(what))
                })?;
                values.extend_from_slice(&label.to_le_bytes());
            } else {
                values.extend_from_slice(&data);
                offsets.push(values.len() as u64);
            }
        }
    }
    let cols: Vec<Column<'_>> = exts
        .iter()
        .zip(&columns)
        .map(|(e, (values, offsets))| match e.as_str() {
            "cls" => Column::Fixed(values),
            _ => Column::Ragged { values, offsets },
        })
        .collect();
    if n > 0 {
        writer.write(&cols)?;
    }
    Ok(n as u64)
}
