//! Changing the file layout of a dataset's stores, or of one store ([`set_layout`]): dense
//! (files as long as what they hold, safe for every copy tool) or sparse (the fixed sizes
//! loaderx 0.5.4 needs). The rule and its atomicity are the core's
//! (`zrecord_core::engine::Store::set_layout`); this visits the stores.

use std::path::Path;

use zrecord_core::dataset::MANIFEST_FILE;
use zrecord_core::error::Error;
use zrecord_core::format::{FileLayout, META_FILE};

use super::manifest_io::WRITE_LOCK_FILE;
use super::DatasetError;
use crate::{OpenOptions, Zrecord};

/// What [`set_layout`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutChange {
    /// Stores visited.
    pub stores: usize,
    /// Of those, stores that had the other layout.
    pub changed: usize,
}

/// Gives the store in `path`, or every store of the dataset of named fields in `path`, the
/// file layout `layout`, store by store (each atomically; run it again after a kill to
/// finish). A dataset's writer lock is held meanwhile, so no write adds a shard while its
/// stores change; each store needs the only open handle, as compact does.
/// `progress(done, total)` is called after each store.
pub fn set_layout(
    path: &Path,
    layout: FileLayout,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<LayoutChange, DatasetError> {
    let manifest_path = path.join(MANIFEST_FILE);
    if !manifest_path.exists() {
        let at = |e: Error| DatasetError::at(path, None, e);
        if !path.join(META_FILE).exists() {
            return Err(at(Error::InvalidArgument(format!(
                "{} holds neither {MANIFEST_FILE} nor {META_FILE}: not a dataset or store",
                path.display()
            ))));
        }
        let changed = set_store_layout(path, layout).map_err(at)?;
        progress(1, 1);
        return Ok(LayoutChange { stores: 1, changed: usize::from(changed) });
    }
    let lock_path = path.join(WRITE_LOCK_FILE);
    let io = |e: std::io::Error| {
        DatasetError::at(&lock_path, None, Error::Io(crate::fs::io_err(e, format!("lock {}", lock_path.display()))))
    };
    let Some(_lock) = crate::lock::try_exclusive(&lock_path).map_err(io)? else {
        return Err(DatasetError::at(
            path,
            None,
            Error::Locked(format!("a writer is adding to {}; change its layout after it finished", path.display())),
        ));
    };
    let manifest = super::manifest_io::read_manifest(&manifest_path)?;
    let total = (manifest.shards.len() * manifest.fields.len()) as u64;
    let mut done = LayoutChange::default();
    for shard in &manifest.shards {
        for field in &manifest.fields {
            let dir = path.join(&shard.dir).join(&field.name);
            let changed = set_store_layout(&dir, layout).map_err(|e| DatasetError::at(&dir, Some(&field.name), e))?;
            done.stores += 1;
            done.changed += usize::from(changed);
            progress(done.stores as u64, total);
        }
    }
    Ok(done)
}

/// One store; true if it had the other layout.
fn set_store_layout(dir: &Path, layout: FileLayout) -> Result<bool, Error> {
    let mut store = Zrecord::open_with(dir, OpenOptions { create: false, ..OpenOptions::default() })?;
    let was = store.layout();
    store.set_layout(layout)?;
    Ok(was != layout)
}
