//! Where shuffled packed rows keep their row indexes between ranks, processes and runs
//! ([`zrecord_core::stream::row_index`] says what a file holds and checks it).
//!
//! A directory of `TAG-EPOCH.zrri` files, where `TAG` names the source's documents (the
//! dataset's path, its `dataset.json` or `meta.zr` as the filesystem sees it: size,
//! modification time, inode), the packed field and everything of the key but the epoch.
//! Writes go to a temporary file renamed over the name, so a reader sees a whole file or
//! none; ranks that build the same index at once write the same bytes. Saving epoch `e`
//! removes that tag's files of epochs before `e - 1`, so a long run keeps two per source.
//! Every failure here is a cache miss: the planner builds the index from the lengths.

use std::path::{Path, PathBuf};

use twox_hash::XxHash3_64;
use zrecord_core::stream::row_index::{self, RowIndexKey};

use super::source::Source;

/// Documents a source needs before the default directory keeps its indexes (below it,
/// building takes a few milliseconds and a file per dataset and epoch is clutter).
pub const DEFAULT_MIN_DOCS: u64 = 1 << 20;

/// A directory of row indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowIndexDir {
    dir: PathBuf,
    /// Sources with fewer documents are not saved or looked up.
    min_docs: u64,
}

impl RowIndexDir {
    /// Indexes of every source, in `dir` (made when first needed).
    pub fn new(dir: impl Into<PathBuf>) -> RowIndexDir {
        RowIndexDir { dir: dir.into(), min_docs: 0 }
    }

    /// The default: `$ZRECORD_CACHE_DIR/rows`, else `$XDG_CACHE_HOME/zrecord/rows`, else
    /// `~/.cache/zrecord/rows`, for sources of at least [`DEFAULT_MIN_DOCS`] documents.
    /// `None` when no such directory can be named (no `HOME`).
    pub fn default_dir() -> Option<RowIndexDir> {
        Self::default_from(|k| std::env::var_os(k))
    }

    /// [`RowIndexDir::default_dir`] with the environment read through `env`.
    fn default_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<RowIndexDir> {
        let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let dir = var("ZRECORD_CACHE_DIR")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("zrecord")))
            .or_else(|| var("HOME").map(|h| h.join(".cache").join("zrecord")))?;
        Some(RowIndexDir { dir: dir.join("rows"), min_docs: DEFAULT_MIN_DOCS })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The saved counts of `key` for `source`'s field `field`, if a whole file of them is here.
    pub(super) fn load(&self, source: &Source, field: usize, key: &RowIndexKey) -> Option<Vec<u64>> {
        if key.dataset.length < self.min_docs {
            return None;
        }
        let bytes = std::fs::read(self.file(self.tag(source, field, key), key.epoch)).ok()?;
        row_index::decode(&bytes, key)
    }

    /// Saves `counts` under `key`, and drops this source's files of epochs before
    /// `key.epoch - 1`.
    pub(super) fn save(&self, source: &Source, field: usize, key: &RowIndexKey, counts: &[u64]) {
        if key.dataset.length < self.min_docs || std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let tag = self.tag(source, field, key);
        let path = self.file(tag, key.epoch);
        let tmp = path.with_extension(format!("zrri-tmp-{}-{:?}", std::process::id(), std::thread::current().id()));
        let written = std::fs::write(&tmp, row_index::encode(key, counts)).and_then(|()| std::fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let old = name
                .to_str()
                .and_then(|n| n.strip_suffix(".zrri"))
                .and_then(|n| n.strip_prefix(&format!("{tag:016x}-")))
                .and_then(|e| e.parse::<u64>().ok())
                .is_some_and(|e| e + 1 < key.epoch);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    fn file(&self, tag: u64, epoch: u64) -> PathBuf {
        self.dir.join(format!("{tag:016x}-{epoch}.zrri"))
    }

    /// What names a source's documents and the key but its epoch.
    fn tag(&self, source: &Source, field: usize, key: &RowIndexKey) -> u64 {
        let data = source.data();
        let mut text = format!(
            "{}\0{field}\0{}\0{}\0{}\0{}\0{}\0{}\0{}",
            data.path().display(),
            key.source,
            key.dataset.length,
            key.dataset.generation,
            key.seed,
            key.bos,
            key.eos,
            key.stride
        );
        for name in ["dataset.json", "meta.zr"] {
            if let Ok(m) = std::fs::metadata(data.path().join(name)) {
                use std::os::unix::fs::MetadataExt;
                text.push_str(&format!("\0{name}:{}:{}:{}:{}", m.len(), m.mtime(), m.mtime_nsec(), m.ino()));
            }
        }
        XxHash3_64::oneshot(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_directory_follows_the_environment_for_large_sources_only() {
        fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| std::ffi::OsString::from(v))
        }
        let d =
            RowIndexDir::default_from(env(&[("ZRECORD_CACHE_DIR", "/z"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]))
                .unwrap();
        assert_eq!((d.dir(), d.min_docs), (Path::new("/z/rows"), DEFAULT_MIN_DOCS));
        let d = RowIndexDir::default_from(env(&[("ZRECORD_CACHE_DIR", ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]));
        assert_eq!(d.unwrap().dir(), Path::new("/x/zrecord/rows"));
        let d = RowIndexDir::default_from(env(&[("HOME", "/h")])).unwrap();
        assert_eq!(d.dir(), Path::new("/h/.cache/zrecord/rows"));
        assert!(RowIndexDir::default_from(env(&[])).is_none());
        assert_eq!(RowIndexDir::new("/d").min_docs, 0, "an explicit directory keeps every source's");
    }
}
