//! `remote.json`: the listing a push writes last at the root of a pushed dataset or store.
//!
//! ```json
//! {"version": 1, "kind": "dataset",
//!  "objects": {"dataset.json": {"size": 512, "stored": 512, "xxh3": "9f...", "etag": "\"a1...\""},
//!              "shard-000000/image/meta.zr": {"size": 268435472, "stored": 16400, ...}}}
//! ```
//!
//! `size` is the file's size on disk (what the store engine expects, sparse files
//! included), `stored` the bytes uploaded (the file up to the end of its last written
//! byte; past it the file reads as zeros), `xxh3` the XXH3-64 of the stored bytes (a second
//! push skips an object whose stored bytes already match) and `etag` the object's ETag
//! when it was pushed (every read is made with `If-Match` on it). Until `remote.json` exists
//! the prefix is not a dataset, so a push cut short is never read as one.
//!
//! Version 2 holds the dataset's manifest itself, as `"manifest": {...}` (what `dataset.json`
//! would hold), and lists no `dataset.json` object: an append to a pushed dataset
//! (`zrecord.ray.Datasink(..., mode="append")`) uploads its shards under new names and then
//! replaces the listing alone, conditionally, so the new shards and the manifest that lists
//! them appear in one step and two appenders cannot interleave. A push writes version 1.
//! An object of a version 2 listing may be stored under another name (`"key"`): a field
//! added in an object store is uploaded under names of its own write.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zrecord_core::error::{IoError, IoErrorKind};

/// The listing's file name.
pub const LISTING: &str = "remote.json";
/// Its layout version, for a listing whose manifest is the object `dataset.json`.
pub const LISTING_VERSION: u32 = 1;
/// The layout version of a listing that holds its dataset's manifest.
pub const LISTING_VERSION_INLINE: u32 = 2;

/// One pushed file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Object {
    /// The file's size on disk.
    pub size: u64,
    /// Bytes uploaded (a prefix of the file; the rest is zeros).
    pub stored: u64,
    /// XXH3-64 of the stored bytes, as 16 hex digits.
    pub xxh3: String,
    /// The object's ETag after the upload, if the store gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Where the bytes are under the prefix, when not at the file's own path (a version 2
    /// listing only): a field added in an object store goes up under a name of its own
    /// write, so that no object a listing names is ever overwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Object {
    /// The object's name under the prefix: its [`Object::key`], else the file's path `rel`.
    pub fn stored_at<'a>(&'a self, rel: &'a str) -> &'a str {
        self.key.as_deref().unwrap_or(rel)
    }
}

/// The listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Objects {
    /// [`LISTING_VERSION`].
    pub version: u32,
    /// `dataset` (a `dataset.json` over shards) or `store` (one store directory).
    pub kind: String,
    /// Every file, by its path relative to the root (`/`-separated).
    pub objects: BTreeMap<String, Object>,
    /// The dataset's manifest, in a listing of [`LISTING_VERSION_INLINE`] (and only there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<serde_json::Value>,
}

impl Objects {
    /// The stored bytes of every object: what reading the whole dataset fetches.
    pub fn stored_bytes(&self) -> u64 {
        self.objects.values().map(|o| o.stored).sum()
    }

    /// Parses a listing read from `shown`.
    pub fn from_json(bytes: &[u8], shown: &str) -> Result<Objects, IoError> {
        let bad = |what: String| IoError::new(IoErrorKind::Other, format!("read {shown}"), what);
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not a zrecord remote listing: {e}")))?;
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(LISTING_VERSION) || v == u64::from(LISTING_VERSION_INLINE) => {}
            Some(v) => return Err(bad(format!("listing version {v} is not supported (this zrecord reads 1 and 2)"))),
            None => return Err(bad("not a zrecord remote listing: no version".into())),
        }
        let objects: Objects = serde_json::from_value(value).map_err(|e| bad(format!("damaged listing: {e}")))?;
        if objects.kind != "dataset" && objects.kind != "store" {
            return Err(bad(format!("unknown kind {:?}", objects.kind)));
        }
        let inline = objects.version == LISTING_VERSION_INLINE;
        let listed = objects.objects.contains_key(zrecord_core::dataset::MANIFEST_FILE);
        if inline != objects.manifest.is_some() || (inline && (objects.kind != "dataset" || listed)) {
            return Err(bad(format!(
                "damaged listing: a version {} listing of a {} that {} a manifest{}",
                objects.version,
                objects.kind,
                if objects.manifest.is_some() { "holds" } else { "lacks" },
                if listed { " and lists dataset.json" } else { "" }
            )));
        }
        if let Some((name, o)) = objects.objects.iter().find(|(_, o)| o.stored > o.size) {
            return Err(bad(format!("{name}: stored {} bytes of a {}-byte file", o.stored, o.size)));
        }
        let plain = |p: &str| !p.split('/').any(|part| part.is_empty() || part == "." || part == "..");
        if let Some((name, o)) = objects.objects.iter().find(|(k, o)| !plain(k) || !o.key.as_deref().is_none_or(plain))
        {
            return Err(bad(format!("{name:?} (stored at {:?}) is not a plain relative path", o.key)));
        }
        if !inline && objects.objects.values().any(|o| o.key.is_some()) {
            return Err(bad("damaged listing: a version 1 listing names stored keys".into()));
        }
        Ok(objects)
    }

    /// The manifest a version 2 listing holds, as the bytes of a `dataset.json`.
    pub fn manifest_bytes(&self) -> Option<Vec<u8>> {
        self.manifest.as_ref().map(|m| serde_json::to_vec_pretty(m).unwrap_or_default())
    }

    /// The listing as JSON.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// The objects under directory `dir` (`""` for the root), by their name relative to it.
    pub fn under(&self, dir: &str) -> BTreeMap<String, Object> {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        self.objects
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|rest| (rest.to_owned(), v.clone())))
            .filter(|(k, _)| !k.contains('/'))
            .collect()
    }
}

/// An XXH3-64 as the listing writes it ([`Object::xxh3`]): 16 hex digits.
pub fn hash_text(hash: u64) -> String {
    format!("{hash:016x}")
}

/// Whether `bytes` are the whole of `object` as its push recorded it (size and XXH3-64).
pub fn holds(object: &Object, bytes: &[u8]) -> bool {
    object.size == object.stored
        && bytes.len() as u64 == object.size
        && hash_text(zrecord_core::format::sums::checksum(bytes)) == object.xxh3
}
