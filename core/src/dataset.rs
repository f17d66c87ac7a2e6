//! The dataset manifest `dataset.json`: named fields over shards of stores, and the one
//! index space `0..N` that spans them.
//!
//! A dataset directory holds the manifest and one folder per shard; each shard holds one
//! store per field (`<shard>/<field>/`). A fixed field's store carries loaderx's
//! `schema.json`, so once sparse ([`crate::format::FileLayout`]; datasets are written dense)
//! loaderx 0.5.4 opens any one of them; a ragged field's
//! records are the raw little-endian bytes of a variable-length 1-D sequence. Sample `i` of
//! the dataset is record `i - start(s)` of every field store of the shard `s` whose range
//! holds `i` ([`Layout::locate`]). `docs/format.md` ("Datasets") has the byte-level rules.
//!
//! The manifest is the commit point of a write: shards are written and synced first, the
//! manifest replaces the old one last (write beside, rename), so a reader sees either the
//! old dataset or the new one, and a shard folder the manifest does not list is leftover
//! work of an interrupted write that the next write removes.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

pub mod long;
pub mod split;
pub mod values;

use crate::error::FormatError;
use crate::{Codec, MAX_RECORDS};

/// File name of the manifest inside a dataset directory.
pub const MANIFEST_FILE: &str = "dataset.json";
/// The manifest's `format` value.
pub const FORMAT: &str = "zrecord-dataset";
/// The newest manifest version this build reads. A reader refuses a higher version (it
/// could not know what changed) instead of misreading it. A writer writes the lowest
/// version that holds what the manifest has ([`Manifest::needed_version`]): 1 without a
/// dataset card, 2 with one, 3 with a bytes or string field, 4 once it grew by an append
/// (`grown_from`), 5 with a sample longer than a record (a shard's `long`), 6 with an image
/// field, so datasets without them stay readable by earlier builds.
pub const VERSION: u32 = 6;
/// The version of a manifest with no key past version 1's.
pub const VERSION_1: u32 = 1;
/// The most identities [`Manifest::grown_from`] keeps (the oldest go first): states saved
/// more appends ago than this no longer resume.
pub const MAX_GROWN_FROM: usize = 256;
/// Upper bound on the dataset card ([`Manifest::metadata`]), as compact JSON.
pub const MAX_METADATA_LEN: usize = 1 << 20;
/// The most samples a dataset may hold (2^62): the stream's position limit.
pub const MAX_SAMPLES: u64 = crate::stream::MAX_POSITION;
/// The shard size a compaction of a dataset merges up to unless told otherwise
/// (`zr compact DATASET`, `Dataset.compact`): 2^20 samples, big enough that a shard's fixed
/// costs (its stores' files, their opening) vanish beside its samples, small enough that a
/// later delete copies little.
pub const DEFAULT_COMPACT_ROWS: u64 = 1 << 20;
/// Upper bound on a manifest's size; a larger file is refused before it is parsed.
pub const MAX_MANIFEST_LEN: u64 = 64 << 20;

/// The shape of one field's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldKind {
    /// Every sample has the same shape (empty for scalars); one record per sample, exactly
    /// `itemsize * prod(shape)` bytes.
    Fixed,
    /// Every sample is a 1-D sequence of its own length (at least one element).
    Ragged,
    /// Every sample is a byte string of its own length, empty included (manifest version
    /// 3): its record is the bytes and a stop byte ([`values`]).
    Bytes,
    /// Every sample is a UTF-8 string, empty included (manifest version 3), checked when
    /// written and when read; stored as a bytes field is.
    String,
    /// Every sample is an encoded image, JPEG, PNG or WebP (manifest version 6): stored as
    /// a bytes field is, its header checked when written ([`crate::image::info`]); a
    /// loader can decode and crop it ([`crate::image::crop::Pipeline`]).
    Image,
}

impl FieldKind {
    /// The kind's name in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            FieldKind::Fixed => "fixed",
            FieldKind::Ragged => "ragged",
            FieldKind::Bytes => "bytes",
            FieldKind::String => "string",
            FieldKind::Image => "image",
        }
    }
}

/// One named field of a dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// The field's name: the batch key and the store folder's name.
    pub name: String,
    /// Fixed or ragged.
    pub kind: FieldKind,
    /// NumPy `dtype.str` of one element (`|u1`, `<i8`, `<u2`, ...).
    pub dtype: String,
    /// The shape of one sample of a fixed field; empty for a ragged one.
    #[serde(default)]
    pub shape: Vec<u64>,
    /// The codec new records of this field are written with.
    pub codec: String,
}

impl Field {
    /// A fixed-shape field.
    pub fn fixed(name: &str, dtype: &str, shape: &[u64], codec: Codec) -> Self {
        Field {
            name: name.into(),
            kind: FieldKind::Fixed,
            dtype: dtype.into(),
            shape: shape.to_vec(),
            codec: codec.name().into(),
        }
    }

    /// A ragged (variable-length 1-D) field.
    pub fn ragged(name: &str, dtype: &str, codec: Codec) -> Self {
        Field {
            name: name.into(),
            kind: FieldKind::Ragged,
            dtype: dtype.into(),
            shape: Vec::new(),
            codec: codec.name().into(),
        }
    }

    /// A field of byte strings ([`FieldKind::Bytes`]).
    pub fn bytes(name: &str, codec: Codec) -> Self {
        Field { kind: FieldKind::Bytes, ..Field::ragged(name, "|u1", codec) }
    }

    /// A field of UTF-8 strings ([`FieldKind::String`]).
    pub fn string(name: &str, codec: Codec) -> Self {
        Field { kind: FieldKind::String, ..Field::ragged(name, "|u1", codec) }
    }

    /// A field of encoded images ([`FieldKind::Image`]); images are compressed already, so
    /// its codec is usually raw.
    pub fn image(name: &str, codec: Codec) -> Self {
        Field { kind: FieldKind::Image, ..Field::ragged(name, "|u1", codec) }
    }

    /// True for a field whose samples differ in length: ragged, bytes and string fields
    /// (gathered as values and offsets).
    pub fn is_ragged(&self) -> bool {
        self.kind != FieldKind::Fixed
    }

    /// True for a bytes, string or image field: each record is a value and its stop byte
    /// ([`values`]).
    pub fn has_stop_byte(&self) -> bool {
        matches!(self.kind, FieldKind::Bytes | FieldKind::String | FieldKind::Image)
    }

    /// The field's type in words, for messages: `<i8[3, 4]` (fixed), `ragged <u2`,
    /// `bytes`, `string`.
    pub fn type_name(&self) -> String {
        match self.kind {
            FieldKind::Fixed => format!("{}{:?}", self.dtype, self.shape),
            FieldKind::Ragged => format!("ragged {}", self.dtype),
            kind => kind.name().into(),
        }
    }

    /// Bytes of one element.
    pub fn itemsize(&self) -> Result<u64, FormatError> {
        crate::dtype::itemsize(&self.dtype)
    }

    /// Bytes of one sample of a fixed field (`None` for a ragged one).
    pub fn sample_len(&self) -> Result<Option<u64>, FormatError> {
        if self.is_ragged() {
            return Ok(None);
        }
        let item = self.itemsize()?;
        self.shape
            .iter()
            .try_fold(item, |acc, &d| acc.checked_mul(d))
            .map(Some)
            .ok_or_else(|| FormatError::Container(format!("field {:?}: sample size overflows", self.name)))
    }

    /// The codec named by [`Field::codec`].
    pub fn codec(&self) -> Result<Codec, FormatError> {
        Codec::from_name(&self.codec).ok_or_else(|| {
            FormatError::Container(format!("field {:?} names unknown codec {:?}", self.name, self.codec))
        })
    }

    /// The loaderx `schema.json` of this field's stores (fixed fields only).
    pub fn schema(&self) -> Option<crate::schema::Schema> {
        let codec = self.codec().ok()?;
        (!self.is_ragged()).then(|| crate::schema::Schema::new(&self.dtype, &self.shape, codec))
    }

    /// Checks the name, dtype, shape and codec.
    pub fn check(&self) -> Result<(), FormatError> {
        check_name(&self.name)?;
        if !numeric(&self.dtype) {
            return Err(FormatError::Container(format!(
                "field {:?}: dtype {:?} is not a numeric dtype (bool, integer, float or complex)",
                self.name, self.dtype
            )));
        }
        let item = self.itemsize()?;
        self.codec()?;
        if self.has_stop_byte() && (self.dtype != "|u1" || !self.shape.is_empty()) {
            return Err(FormatError::Container(format!(
                "field {:?}: a {} field holds bytes (dtype \"|u1\", no shape), found {:?} of shape {:?}",
                self.name,
                self.kind.name(),
                self.dtype,
                self.shape
            )));
        }
        match self.kind {
            FieldKind::Bytes | FieldKind::String | FieldKind::Image => Ok(()),
            FieldKind::Ragged if !self.shape.is_empty() => Err(FormatError::Container(format!(
                "field {:?}: a ragged field has no fixed shape, found {:?}",
                self.name, self.shape
            ))),
            FieldKind::Ragged if item as u32 > crate::MAX_RECORD_LEN => {
                Err(FormatError::Container(format!("field {:?}: elements too large", self.name)))
            }
            FieldKind::Ragged => Ok(()),
            FieldKind::Fixed => match self.sample_len()? {
                Some(0) => Err(FormatError::Container(format!(
                    "field {:?}: samples of shape {:?} hold 0 bytes; a record must hold at least one",
                    self.name, self.shape
                ))),
                Some(n) if n > u64::from(crate::MAX_RECORD_LEN) => Err(FormatError::Container(format!(
                    "field {:?}: a sample of {n} bytes exceeds the {} byte record limit",
                    self.name,
                    crate::MAX_RECORD_LEN
                ))),
                _ => Ok(()),
            },
        }
    }
}

/// True for the numeric NumPy type codes a field may hold: bool, signed and unsigned
/// integers, floats and complex numbers.
fn numeric(dtype: &str) -> bool {
    matches!(dtype.as_bytes().get(1), Some(b'b' | b'i' | b'u' | b'f' | b'c'))
}

/// A field name is a batch key and a folder name: 1 to 64 of `[A-Za-z0-9_.-]`, not
/// starting with `.` or `-`, and not ending in `_offsets` or `_lengths` (the keys a batch
/// adds next to a ragged field).
pub fn check_name(name: &str) -> Result<(), FormatError> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    let reserved = name.ends_with("_offsets") || name.ends_with("_lengths") || name == "source";
    if name.is_empty() || name.len() > 64 || !ok_chars || name.starts_with(['.', '-']) || reserved {
        return Err(FormatError::Container(format!(
            "field name {name:?} is not allowed: use 1-64 of A-Z a-z 0-9 _ . - (not starting with . or -), \
             not \"source\" and not ending in _offsets or _lengths"
        )));
    }
    Ok(())
}

/// One shard: a folder of one store per field, all holding `records` records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// The folder's name, relative to the dataset directory.
    pub dir: String,
    /// Samples: records `0..records` of each of its field stores.
    pub records: u64,
    /// Fields with a sample longer than a record (version 5): their stores hold the
    /// continuation pieces and a long index after the samples ([`long`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub long: Vec<String>,
}

/// The shard folder name of the `k`-th shard a dataset ever created.
pub fn shard_dir(k: u64) -> String {
    format!("shard-{k:06}")
}

/// The contents of `dataset.json`. Field order is the serialised order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The fields, in the order batches list them.
    pub fields: Vec<Field>,
    /// The shards, in index order.
    pub shards: Vec<ShardEntry>,
    /// The number of the next shard folder a write creates (never reused, so a leftover
    /// folder of an interrupted write is never mistaken for a listed one).
    pub next_shard: u64,
    /// The dataset card (version 2): a JSON object the writer gave (a description, a
    /// licence, sources, a tokenizer's name, class names ...), kept as it is and carried
    /// by push and pull; at most [`MAX_METADATA_LEN`] bytes. `None` when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// The identity of the rows (version 3), set by the first field added or dropped, or
    /// the first append: the generation the dataset's stores gave its identity before
    /// ([`crate::DatasetId`]), so that states saved before a column change resume after it
    /// (a stream reads rows, not columns), and an append need not open every store to
    /// know it. Appends fold their new stores into it, which keeps it equal to what the
    /// stores give. `None`: the identity is the stores'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// The identities the dataset had before its appends, oldest first (version 4): the
    /// rows of each are the first rows now, unchanged, so a loader state saved on any of
    /// them resumes (`core/src/stream/eras.rs`). Emptied by whatever changes rows (a
    /// delete, a rewrite); kept across added and dropped fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grown_from: Vec<crate::stream::DatasetId>,
}

impl Manifest {
    /// An empty dataset of `fields`.
    pub fn new(fields: Vec<Field>) -> Result<Self, FormatError> {
        let m = Manifest {
            format: FORMAT.into(),
            version: VERSION_1,
            fields,
            shards: Vec::new(),
            next_shard: 0,
            metadata: None,
            rows: None,
            grown_from: Vec::new(),
        };
        m.check()?;
        Ok(m)
    }

    /// The file's bytes.
    pub fn to_json(&self) -> String {
        let mut m = self.clone();
        m.version = self.needed_version();
        let mut s = serde_json::to_string_pretty(&m).expect("a manifest always serialises");
        s.push('\n');
        s
    }

    /// Parses and checks a manifest; errors name the file.
    pub fn from_json(bytes: &[u8]) -> Result<Self, FormatError> {
        let bad = |what: String| FormatError::Container(format!("{MANIFEST_FILE}: {what}"));
        if bytes.len() as u64 > MAX_MANIFEST_LEN {
            return Err(bad(format!("{} bytes is over the {MAX_MANIFEST_LEN}-byte limit", bytes.len())));
        }
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(bad(format!("not a {FORMAT} manifest")));
        }
        let version = match v.get("version").and_then(|f| f.as_u64()) {
            Some(n) if (1..=u64::from(VERSION)).contains(&n) => n,
            Some(n) => return Err(bad(format!("version {n} is newer than this build reads ({VERSION})"))),
            None => return Err(bad("no version".into())),
        };
        if version < 2 && v.get("metadata").is_some() {
            return Err(bad("a version 1 manifest holds \"metadata\", which came with version 2".into()));
        }
        let m: Manifest = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
        if version < 3 && m.rows.is_some() {
            return Err(bad(format!("a version {version} manifest holds \"rows\", which came with version 3")));
        }
        if version < 4 && !m.grown_from.is_empty() {
            return Err(bad(format!("a version {version} manifest holds \"grown_from\", which came with version 4")));
        }
        if version < 5 && m.shards.iter().any(|s| !s.long.is_empty()) {
            return Err(bad(format!("a version {version} manifest holds \"long\", which came with version 5")));
        }
        if let Some(f) = m.fields.iter().find(|f| f.has_stop_byte()).filter(|_| version < 3) {
            return Err(bad(format!(
                "a version {version} manifest holds field {:?} of kind {}, which came with version 3",
                f.name,
                f.kind.name()
            )));
        }
        m.check().map_err(|e| bad(e.to_string()))?;
        Ok(m)
    }

    /// Checks the fields (at least one, unique names) and the shards (unique folders,
    /// each within the store's limits, the total within [`MAX_SAMPLES`]).
    pub fn check(&self) -> Result<(), FormatError> {
        if self.fields.is_empty() {
            return Err(FormatError::Container("a dataset needs at least one field".into()));
        }
        if let Some(card) = &self.metadata {
            let len = serde_json::to_string(card).map(|t| t.len()).unwrap_or(usize::MAX);
            if len > MAX_METADATA_LEN {
                return Err(FormatError::Container(format!(
                    "the dataset metadata is {len} bytes as JSON, over the {MAX_METADATA_LEN}-byte limit"
                )));
            }
        }
        for (i, f) in self.fields.iter().enumerate() {
            f.check()?;
            if self.fields[..i].iter().any(|g| g.name == f.name) {
                return Err(FormatError::Container(format!("field {:?} is named twice", f.name)));
            }
        }
        let mut total: u64 = 0;
        for (i, s) in self.shards.iter().enumerate() {
            check_name(&s.dir)?;
            if self.shards[..i].iter().any(|t| t.dir == s.dir) {
                return Err(FormatError::Container(format!("shard {:?} is listed twice", s.dir)));
            }
            if s.records > u64::from(MAX_RECORDS) {
                return Err(FormatError::Container(format!(
                    "shard {:?} claims {} records, over the store's {MAX_RECORDS}",
                    s.dir, s.records
                )));
            }
            for (k, name) in s.long.iter().enumerate() {
                let field = self.fields.iter().find(|f| &f.name == name);
                if field.is_none_or(|f| f.kind == FieldKind::Fixed) || s.long[..k].contains(name) {
                    return Err(FormatError::Container(format!(
                        "shard {:?} lists {name:?} as long: not a ragged, bytes or string field, or listed twice",
                        s.dir
                    )));
                }
            }
            total = total
                .checked_add(s.records)
                .filter(|&t| t <= MAX_SAMPLES)
                .ok_or_else(|| FormatError::Container(format!("the shards hold more than {MAX_SAMPLES} samples")))?;
        }
        Ok(())
    }

    /// The lowest version that holds this manifest: 5 with a long sample, 4 once it grew
    /// by an append, 3 with a
    /// bytes or string field or a row identity, 2 with a dataset card, else 1.
    pub fn needed_version(&self) -> u32 {
        if self.fields.iter().any(|f| f.kind == FieldKind::Image) {
            6
        } else if self.shards.iter().any(|s| !s.long.is_empty()) {
            5
        } else if !self.grown_from.is_empty() {
            4
        } else if self.rows.is_some() || self.fields.iter().any(Field::has_stop_byte) {
            3
        } else if self.metadata.is_some() {
            2
        } else {
            VERSION_1
        }
    }

    /// Sets the dataset card from its JSON text: an object, at most [`MAX_METADATA_LEN`]
    /// bytes as compact JSON.
    pub fn set_metadata(&mut self, json: &str) -> Result<(), FormatError> {
        let bad = |what: String| FormatError::Container(format!("dataset metadata: {what}"));
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        let serde_json::Value::Object(map) = value else {
            return Err(bad("must be a JSON object (a dict of names to values)".into()));
        };
        let len = serde_json::to_string(&map).map_err(|e| bad(e.to_string()))?.len();
        if len > MAX_METADATA_LEN {
            return Err(bad(format!("{len} bytes as JSON is over the {MAX_METADATA_LEN}-byte limit")));
        }
        self.metadata = Some(map);
        Ok(())
    }

    /// The dataset's identity as a stream's input ([`crate::stream::DatasetId`]): its
    /// length, and its row identity ([`Manifest::rows`]) when it has one, else every
    /// store's generation folded in order ([`crate::stream::DatasetId::of_stores`]).
    /// `generations(s, f)` gives the generation of field `f`'s store in shard `s`; it is
    /// called for every store, shard by shard, field by field, only when there is no row
    /// identity. Every host computes a dataset's identity here, so a state saved on one
    /// resumes on another.
    pub fn identity<E>(
        &self,
        generation: impl FnMut(usize, usize) -> Result<u64, E>,
    ) -> Result<crate::stream::DatasetId, E> {
        self.identity_of_first(self.shards.len(), generation)
    }

    /// [`Manifest::identity`] of the dataset as it was when it listed only its first
    /// `shards` shards (what an append records before it adds its own).
    pub fn identity_of_first<E>(
        &self,
        shards: usize,
        mut generation: impl FnMut(usize, usize) -> Result<u64, E>,
    ) -> Result<crate::stream::DatasetId, E> {
        let length = self.shards[..shards].iter().map(|s| s.records).sum();
        if let Some(rows) = self.rows {
            return Ok(crate::stream::DatasetId { length, generation: rows });
        }
        let mut generations = Vec::with_capacity(shards * self.fields.len());
        for s in 0..shards {
            for f in 0..self.fields.len() {
                generations.push(generation(s, f)?);
            }
        }
        Ok(crate::stream::DatasetId::of_stores(length, generations))
    }

    /// Records that the dataset, whose identity was `before`, grew by an append: a state
    /// saved on `before` resumes on the grown dataset. Keeps the last [`MAX_GROWN_FROM`].
    pub fn grew_from(&mut self, before: crate::stream::DatasetId) {
        if before.length == 0 || self.grown_from.last() == Some(&before) {
            return;
        }
        self.grown_from.push(before);
        if self.grown_from.len() > MAX_GROWN_FROM {
            let extra = self.grown_from.len() - MAX_GROWN_FROM;
            self.grown_from.drain(..extra);
        }
    }

    /// Adds `field` after the others; its stores, one per shard, are the caller's to
    /// write. `rows` is the identity the dataset has now (kept if it had one).
    pub fn add_field(&mut self, field: Field, rows: u64) -> Result<(), FormatError> {
        field.check()?;
        if self.field_index(&field.name).is_some() {
            return Err(FormatError::Container(format!("the dataset already has a field {:?}", field.name)));
        }
        self.fields.push(field);
        self.rows.get_or_insert(rows);
        Ok(())
    }

    /// Removes the field called `name` (not the last one); its stores are the caller's to
    /// remove. `rows` is the identity the dataset has now (kept if it had one).
    pub fn drop_field(&mut self, name: &str, rows: u64) -> Result<Field, FormatError> {
        let f = self.field_index(name).ok_or_else(|| {
            FormatError::Container(format!("the dataset has no field {name:?}; its fields are {}", self.field_names()))
        })?;
        if self.fields.len() == 1 {
            return Err(FormatError::Container(format!(
                "{name:?} is the dataset's only field: a dataset needs at least one"
            )));
        }
        self.rows.get_or_insert(rows);
        for shard in &mut self.shards {
            shard.long.retain(|n| n != name);
        }
        Ok(self.fields.remove(f))
    }

    fn field_names(&self) -> String {
        let names: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
        names.join(", ")
    }

    /// How `fields` differ from this dataset's, in words ("missing caption; extra score;
    /// label is <i4[] here, <i8[] there"), empty when [`Manifest::accepts`] them.
    pub fn field_differences(&self, fields: &[Field]) -> String {
        let mut out = Vec::new();
        let missing: Vec<&str> =
            self.fields.iter().filter(|f| !fields.iter().any(|g| g.name == f.name)).map(|f| f.name.as_str()).collect();
        if !missing.is_empty() {
            out.push(format!("missing {}", missing.join(", ")));
        }
        let extra: Vec<&str> =
            fields.iter().filter(|g| self.field_index(&g.name).is_none()).map(|g| g.name.as_str()).collect();
        if !extra.is_empty() {
            out.push(format!("extra {}", extra.join(", ")));
        }
        for g in fields {
            if let Some(f) = self.fields.iter().find(|f| f.name == g.name) {
                if f.type_name() != g.type_name() {
                    out.push(format!("{} is {} here, {} there", f.name, f.type_name(), g.type_name()));
                }
            }
        }
        if out.is_empty() && !self.accepts(fields) {
            out.push(format!("the order differs: {} here", self.field_names()));
        }
        out.join("; ")
    }

    /// The position of the field called `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Total samples.
    pub fn len(&self) -> u64 {
        self.shards.iter().map(|s| s.records).sum()
    }

    /// True when the dataset holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The layout of the index space over the shards.
    pub fn layout(&self) -> Layout {
        Layout::new(self.shards.iter().map(|s| s.records))
    }

    /// True if samples of `fields` may be added to this dataset: the same names, kinds,
    /// dtypes and shapes, in the same order (codecs may differ; the dataset's win).
    pub fn accepts(&self, fields: &[Field]) -> bool {
        self.fields.len() == fields.len()
            && self
                .fields
                .iter()
                .zip(fields)
                .all(|(a, b)| a.name == b.name && a.kind == b.kind && a.dtype == b.dtype && a.shape == b.shape)
    }
}

/// The samples of one batch that one shard holds: `(shard, records in the shard, slots in
/// the batch)`.
pub type ShardGroup = (usize, Vec<u64>, Vec<usize>);

/// Where each shard's samples start in the dataset's index space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `starts[s]` is the first index of shard `s`; the last entry is the total.
    starts: Vec<u64>,
}

impl Layout {
    /// The layout of shards of the given record counts.
    pub fn new(records: impl IntoIterator<Item = u64>) -> Self {
        let mut starts = Vec::from([0u64]);
        let mut at = 0u64;
        for n in records {
            at = at.saturating_add(n);
            starts.push(at);
        }
        Layout { starts }
    }

    /// Total samples.
    pub fn len(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    /// True when no shard holds a sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.starts.len() - 1
    }

    /// The first index of shard `s`.
    pub fn start(&self, s: usize) -> u64 {
        self.starts[s]
    }

    /// The shard holding sample `index` and its record there, or `None` past the end.
    /// Empty shards never hold a sample.
    pub fn locate(&self, index: u64) -> Option<(usize, u64)> {
        if index >= self.len() {
            return None;
        }
        // The last start <= index that begins a non-empty range.
        let s = self.starts.partition_point(|&start| start <= index) - 1;
        Some((s, index - self.starts[s]))
    }

    /// Splits `indices` by shard: for each shard that holds any, `(shard, local records,
    /// slots in `indices`)`, in shard order. `Err(k)` names the first index out of range.
    pub fn group(&self, indices: &[u64]) -> Result<Vec<ShardGroup>, usize> {
        let mut groups: Vec<ShardGroup> = Vec::new();
        if self.shards() == 1 {
            if let Some(k) = indices.iter().position(|&i| i >= self.len()) {
                return Err(k);
            }
            return Ok(Vec::from([(0, indices.to_vec(), (0..indices.len()).collect())]));
        }
        for (slot, &index) in indices.iter().enumerate() {
            let (s, local) = self.locate(index).ok_or(slot)?;
            match groups.iter_mut().find(|g| g.0 == s) {
                Some(g) => {
                    g.1.push(local);
                    g.2.push(slot);
                }
                None => groups.push((s, Vec::from([local]), Vec::from([slot]))),
            }
        }
        groups.sort_unstable_by_key(|g| g.0);
        Ok(groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn sample() -> Manifest {
        let mut m = Manifest::new(vec![
            Field::fixed("image", "|u1", &[3, 4, 4], Codec::Flate),
            Field::fixed("label", "<i8", &[], Codec::Raw),
            Field::ragged("tokens", "<u2", Codec::Flate),
        ])
        .unwrap();
        m.shards = vec![
            ShardEntry { dir: shard_dir(0), records: 1000, long: vec![] },
            ShardEntry { dir: shard_dir(1), records: 24, long: vec![] },
        ];
        m.next_shard = 2;
        m
    }

    #[test]
    fn round_trips_and_names_the_file_in_errors() {
        let m = sample();
        let text = m.to_json();
        assert_eq!(Manifest::from_json(text.as_bytes()).unwrap(), m);
        assert_eq!(m.len(), 1024);
        let truncated = &text.as_bytes()[..text.len() / 2];
        let e = Manifest::from_json(truncated).unwrap_err().to_string();
        assert!(e.contains(MANIFEST_FILE), "{e}");
        let newer = text.replace("\"version\": 1", &format!("\"version\": {}", VERSION + 1));
        let e = Manifest::from_json(newer.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("newer"), "{e}");
    }

    #[test]
    fn a_shard_with_long_samples_is_version_5() {
        let mut m = sample();
        m.shards[1].long = vec!["tokens".into()];
        let text = m.to_json();
        assert!(text.contains("\"version\": 5") && text.contains("\"long\""), "{text}");
        assert_eq!(Manifest::from_json(text.as_bytes()).unwrap().shards, m.shards);
        let e = Manifest::from_json(text.replace("\"version\": 5", "\"version\": 4").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("came with version 5"), "{e}");
        // Only a ragged, bytes or string field can hold a long sample.
        let e = Manifest::from_json(text.replace("\"tokens\"\n", "\"label\"\n").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("as long"), "{e}");
        m.shards[1].long.clear();
        assert!(m.to_json().contains("\"version\": 1"));
    }

    #[test]
    fn a_dataset_card_is_version_2_and_capped() {
        let mut m = sample();
        assert!(m.to_json().contains("\"version\": 1"));
        m.set_metadata(r#"{"description": "crops", "license": "CC-BY-4.0", "classes": ["cat", "dog"]}"#).unwrap();
        let text = m.to_json();
        assert!(text.contains("\"version\": 2") && text.contains("CC-BY-4.0"), "{text}");
        let back = Manifest::from_json(text.as_bytes()).unwrap();
        assert_eq!(back.metadata, m.metadata);
        assert_eq!(back.needed_version(), 2);
        // A version 1 manifest with a card was not written by a build that knew version 1.
        let e = Manifest::from_json(text.replace("\"version\": 2", "\"version\": 1").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("came with version 2"), "{e}");
        assert!(m.set_metadata("[1, 2]").unwrap_err().to_string().contains("JSON object"));
        assert!(m.set_metadata("{").is_err());
        let big = alloc::format!("{{\"x\": \"{}\"}}", "a".repeat(MAX_METADATA_LEN));
        assert!(m.set_metadata(&big).unwrap_err().to_string().contains("limit"));
        let mut hostile = sample();
        hostile.metadata = Some(serde_json::from_str(&big).unwrap());
        let e = Manifest::from_json(hostile.to_json().as_bytes()).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
    }

    #[test]
    fn bytes_and_string_fields_are_version_3() {
        let mut m = sample();
        m.fields.push(Field::string("caption", Codec::Flate));
        m.fields.push(Field::bytes("jpeg", Codec::Raw));
        let text = m.to_json();
        assert!(text.contains("\"version\": 3") && text.contains("\"kind\": \"string\""), "{text}");
        assert_eq!(Manifest::from_json(text.as_bytes()).unwrap().fields, m.fields);
        assert!(m.fields[3].is_ragged() && m.fields[3].has_stop_byte() && !m.fields[2].has_stop_byte());
        // Written by a build that did not know the kind: refused, naming it.
        let e = Manifest::from_json(text.replace("\"version\": 3", "\"version\": 2").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("\"caption\" of kind string, which came with version 3"), "{e}");
        let mut wide = Field::bytes("b", Codec::Raw);
        wide.dtype = "<u2".into();
        assert!(Manifest::new(vec![wide]).unwrap_err().to_string().contains("a bytes field holds bytes"));
        let mut shaped = Field::string("s", Codec::Raw);
        shaped.shape = vec![2];
        assert!(Manifest::new(vec![shaped]).is_err());
    }

    #[test]
    fn fields_are_added_and_dropped_keeping_the_row_identity() {
        let mut m = sample();
        assert!(m
            .add_field(Field::fixed("label", "<i4", &[], Codec::Raw), 7)
            .unwrap_err()
            .to_string()
            .contains("already"));
        m.add_field(Field::fixed("score", "<f4", &[], Codec::Raw), 7).unwrap();
        assert_eq!(m.rows, Some(7));
        m.drop_field("image", 9).unwrap();
        assert_eq!(m.rows, Some(7), "the first identity is kept");
        let text = m.to_json();
        assert!(text.contains("\"version\": 3") && text.contains("\"rows\": 7"), "{text}");
        assert_eq!(Manifest::from_json(text.as_bytes()).unwrap().rows, Some(7));
        let e = Manifest::from_json(text.replace("\"version\": 3", "\"version\": 2").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("came with version 3"), "{e}");
        assert!(m.drop_field("nope", 0).unwrap_err().to_string().contains("label, tokens, score"));
        let mut one = Manifest::new(vec![Field::ragged("t", "<u2", Codec::Raw)]).unwrap();
        assert!(one.drop_field("t", 0).unwrap_err().to_string().contains("only field"));
        let theirs = vec![Field::fixed("label", "<i8", &[], Codec::Raw), Field::string("caption", Codec::Raw)];
        let d = m.field_differences(&theirs);
        assert_eq!(d, "missing tokens, score; extra caption");
        let mut other = m.fields.clone();
        other[0].dtype = "<i4".into();
        assert_eq!(m.field_differences(&other), "label is <i8[] here, <i4[] there");
        assert_eq!(m.field_differences(&m.fields), "");
    }

    #[test]
    fn refuses_bad_fields_and_shards() {
        let bad = |f: Field| Manifest::new(vec![f]).unwrap_err().to_string();
        assert!(bad(Field::fixed("a/b", "|u1", &[1], Codec::Raw)).contains("not allowed"));
        assert!(bad(Field::fixed("x_offsets", "|u1", &[1], Codec::Raw)).contains("not allowed"));
        assert!(bad(Field::fixed("x", "|O", &[1], Codec::Raw)).contains("x"));
        assert!(bad(Field::fixed("x", "|u1", &[0], Codec::Raw)).contains("0 bytes"));
        assert!(bad(Field::fixed("x", "|u1", &[2 << 20], Codec::Raw)).contains("record limit"));
        let mut twice = Field::ragged("t", "<u2", Codec::Raw);
        twice.shape = vec![3];
        assert!(bad(twice).contains("no fixed shape"));
        let dup = Manifest::new(vec![Field::ragged("t", "<u2", Codec::Raw), Field::ragged("t", "<u2", Codec::Raw)]);
        assert!(dup.unwrap_err().to_string().contains("twice"));
        let mut m = sample();
        m.shards[1].records = u64::from(MAX_RECORDS) + 1;
        assert!(m.check().is_err());
    }

    #[test]
    fn locates_and_groups_across_shards() {
        let layout = Layout::new([3, 0, 2, 5]);
        assert_eq!(layout.len(), 10);
        assert_eq!(layout.locate(0), Some((0, 0)));
        assert_eq!(layout.locate(2), Some((0, 2)));
        assert_eq!(layout.locate(3), Some((2, 0)));
        assert_eq!(layout.locate(5), Some((3, 0)));
        assert_eq!(layout.locate(9), Some((3, 4)));
        assert_eq!(layout.locate(10), None);
        let groups = layout.group(&[9, 0, 4, 1]).unwrap();
        assert_eq!(groups, vec![(0, vec![0, 1], vec![1, 3]), (2, vec![1], vec![2]), (3, vec![4], vec![0])]);
        assert_eq!(layout.group(&[1, 10]), Err(1));
        let one = Layout::new([4]);
        assert_eq!(one.group(&[3, 1]).unwrap(), vec![(0, vec![3, 1], vec![0, 1])]);
        assert_eq!(one.group(&[4]), Err(0));
    }
}
