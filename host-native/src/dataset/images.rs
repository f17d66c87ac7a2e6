//! An ImageFolder tree into a dataset: `zr convert DIR OUT --images` and
//! `zrecord.vision.image_folder`.
//!
//! `DIR` holds a folder per class; every `.jpg`, `.jpeg`, `.png` and `.webp` file in a class
//! folder (any case, name order) becomes a sample of two fields: `image` (an image field:
//! the file's bytes as they are, its header checked) and `label` (`<i8`, the class's place
//! in the sorted class names). The class names go into the dataset card as `classes`.
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
use super::write::io_at;
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

/// The classes and images of the ImageFolder tree `root`.
pub fn image_folder(root: &Path) -> Result<ImageFolder, DatasetError> {
    let entries = |dir: &Path| -> Result<Vec<PathBuf>, DatasetError> {
        let mut paths: Vec<PathBuf> =
            std::fs::read_dir(dir).map_err(io_at(dir, "read"))?.filter_map(Result::ok).map(|e| e.path()).collect();
        paths.sort();
        Ok(paths)
    };
    let mut classes = Vec::new();
    let mut files = Vec::new();
    for dir in entries(root)?.into_iter().filter(|p| p.is_dir()) {
        let name = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned).ok_or_else(|| {
            DatasetError::at(&dir, None, Error::InvalidArgument("a class folder's name is not UTF-8".into()))
        })?;
        let class = classes.len();
        for file in entries(&dir)? {
            let ext = file.extension().and_then(|x| x.to_str()).map(str::to_ascii_lowercase);
            if file.is_file() && ext.is_some_and(|x| EXTENSIONS.contains(&x.as_str())) {
                files.push((file, class));
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
    let fields = vec![Field::image("image", Codec::Raw), Field::fixed("label", "<i8", &[], Codec::Raw)];
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
        writer.write(&[Column::Ragged { values: &values, offsets: &offsets }, Column::Fixed(&labels)])?;
        done = end;
        progress(done as u64, total);
    }
    let dataset = writer.commit()?;
    Ok(Imported { samples: total, dataset })
}
