//! The `dataset` export: a dataset directory (`dataset.json` over shards of one store per
//! field) read through the core, for `zr view`'s page and other embedders.
//!
//! The rules are the core's: the manifest ([`Manifest`]), which shard holds a sample
//! ([`Layout`]), a long sample's pieces ([`LongIndex`]) and a bytes or string record's stop
//! byte ([`values::strip`]). This file opens each field store of a shard the first time a
//! read needs it and keeps it open, so a page of samples reads only the stores, table
//! entries and records it shows (in a browser every file read is a ranged request).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use zrecord_core::dataset::long::LongIndex;
use zrecord_core::dataset::{values, Field, FieldKind, Layout, Manifest, MANIFEST_FILE, MAX_MANIFEST_LEN};
use zrecord_core::io::Serial;
use zrecord_core::{Error, IoError, IoErrorKind, Options, Store as CoreStore, Writer};

use crate::api::{to_wit, try_zeroed};
use crate::exports::zrecord::store::dataset as wit_dataset;
use crate::exports::zrecord::store::store::Gathered;
use crate::exports::zrecord::store::stream::DatasetId;
use crate::exports::zrecord::store::types::{Error as WitError, ErrorCode};
use crate::fs::FsDir;
use crate::stream::wit_id;

/// The most bad records `verify` lists.
const MAX_LISTED: usize = 1000;
/// Samples `verify` reads with one gather.
const VERIFY_BATCH: u64 = 256;

/// One field store of one shard, open for reading.
struct Opened {
    store: CoreStore<FsDir>,
    writer: Writer,
    /// The store's directory as opened, for errors.
    path: String,
    /// Its long samples when the shard lists the field as long.
    long: Option<LongIndex>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.store.release_locks(&mut self.writer);
    }
}

/// The `dataset` resource.
pub struct DatasetRes {
    path: String,
    manifest: Manifest,
    layout: Layout,
    /// Stores opened so far, by (shard, field).
    stores: RefCell<BTreeMap<(usize, usize), Rc<Opened>>>,
}

/// The WIT error for a failure of the store at `path` (field `field`): a record that fails
/// its checksum or cannot be decoded is named by store, field and record, in the fields
/// and in the message.
fn named(path: &str, field: &str, e: Error) -> WitError {
    let mut err = crate::api::to_wit_at(path, e);
    if err.record.is_some() {
        err.message = format!("field {field:?}, {}", err.message);
        err.field = Some(field.to_owned());
    }
    err
}

fn io_error(e: std::io::Error, what: String) -> Error {
    Error::Io(IoError::from_std(e, what))
}

impl DatasetRes {
    fn field(&self, name: &str) -> Result<usize, WitError> {
        self.manifest.field_index(name).ok_or_else(|| {
            let names: Vec<&str> = self.manifest.fields.iter().map(|f| f.name.as_str()).collect();
            to_wit(Error::InvalidArgument(format!(
                "{}: no field {name:?}; its fields are {}",
                self.path,
                names.join(", ")
            )))
        })
    }

    /// The store of field `f` in shard `s`, opened on first use.
    fn store(&self, s: usize, f: usize) -> Result<Rc<Opened>, WitError> {
        if let Some(o) = self.stores.borrow().get(&(s, f)) {
            return Ok(Rc::clone(o));
        }
        let shard = &self.manifest.shards[s];
        let field = &self.manifest.fields[f];
        let path = format!("{}/{}/{}", self.path.trim_end_matches('/'), shard.dir, field.name);
        let (store, writer) = CoreStore::open(FsDir::new(path.clone(), false), Options::read_only())
            .map_err(|e| named(&path, &field.name, e))?;
        let long = if shard.long.contains(&field.name) {
            let index = LongIndex::load(
                shard.records,
                u64::from(store.len()),
                |r| store.read(r),
                |r, out| store.lengths(r, out),
            )
            .map_err(|e| named(&path, &field.name, e))?;
            Some(index)
        } else {
            None
        };
        let opened = Rc::new(Opened { store, writer, path, long });
        self.stores.borrow_mut().insert((s, f), Rc::clone(&opened));
        Ok(opened)
    }

    /// Splits dataset `indices` by shard, or the error naming the first out of range.
    fn groups(&self, indices: &[u64]) -> Result<Vec<zrecord_core::dataset::ShardGroup>, WitError> {
        self.layout.group(indices).map_err(|k| WitError {
            code: ErrorCode::IndexOutOfRange,
            message: format!(
                "{}: index {} out of range for a dataset of {} samples",
                self.path,
                indices[k],
                self.layout.len()
            ),
            path: None,
            record: None,
            field: None,
        })
    }

    /// A read of field `f` at `indices`, split by shard: each part's store, its records
    /// and the slots of `indices` they fill; and each slot's stored length (a long sample's
    /// whole length; a bytes or string sample's with its stop byte).
    fn plan(&self, f: usize, indices: &[u64]) -> Result<Plan, WitError> {
        let mut lengths = vec![0u64; indices.len()];
        let mut parts = Vec::new();
        for (s, local, slots) in self.groups(indices)? {
            let o = self.store(s, f)?;
            let mut lens = vec![0u32; local.len()];
            o.store.lengths(&local, &mut lens).map_err(|e| named(&o.path, &self.manifest.fields[f].name, e))?;
            for ((&r, &len), &slot) in local.iter().zip(&lens).zip(&slots) {
                lengths[slot] = match o.long.as_ref().and_then(|l| l.find(r)) {
                    Some(sample) => sample.total,
                    None => u64::from(len),
                };
            }
            parts.push((o, local, slots));
        }
        Ok(Plan { parts, lengths })
    }

    fn gather_field(&self, f: usize, indices: &[u64]) -> Result<Gathered, WitError> {
        let field: &Field = &self.manifest.fields[f];
        let Plan { parts, lengths } = self.plan(f, indices)?;
        let mut offsets = Vec::with_capacity(indices.len() + 1);
        let mut total = 0u64;
        offsets.push(0);
        for &l in &lengths {
            total += l;
            offsets.push(total);
        }
        let mut data = try_zeroed(total).map_err(to_wit)?;
        // Where each slot's sample lives: its part, and its record there.
        let mut places: Vec<(usize, u64)> = vec![(0, 0); indices.len()];
        for (p, (o, local, slots)) in parts.iter().enumerate() {
            let mut records = Vec::with_capacity(local.len());
            let mut at = Vec::with_capacity(local.len());
            for (&r, &slot) in local.iter().zip(slots) {
                places[slot] = (p, r);
                match o.long.as_ref().and_then(|l| l.find(r)) {
                    Some(sample) => {
                        for (piece, from) in sample.records() {
                            records.push(piece);
                            at.push(offsets[slot] + from);
                        }
                    }
                    None => {
                        records.push(r);
                        at.push(offsets[slot]);
                    }
                }
            }
            o.store.gather_var(&records, &mut data, &at, &Serial).map_err(|e| named(&o.path, &field.name, e))?;
        }
        if field.has_stop_byte() {
            let text = field.kind == FieldKind::String;
            let len = values::strip(&mut data, &mut offsets, text).map_err(|(k, why)| {
                let (p, r) = places[k];
                named(&parts[p].0.path, &field.name, Error::Decode { index: r, source: why })
            })?;
            data.truncate(len);
        }
        let lengths = offsets.windows(2).map(|w| (w[1] - w[0]) as u32).collect();
        Ok(Gathered { data, lengths })
    }
}

/// [`DatasetRes::plan`]'s answer.
struct Plan {
    /// (store, its records, the slots they fill), shard by shard.
    parts: Vec<(Rc<Opened>, Vec<u64>, Vec<usize>)>,
    /// Each slot's stored length.
    lengths: Vec<u64>,
}

impl wit_dataset::GuestDataset for DatasetRes {
    fn open(path: String) -> Result<wit_dataset::Dataset, WitError> {
        let file = format!("{}/{MANIFEST_FILE}", path.trim_end_matches('/'));
        let shown = crate::cli::shown(&file);
        let read = || -> Result<Manifest, Error> {
            let len = std::fs::metadata(&file).map_err(|e| io_error(e, format!("open {shown}")))?.len();
            if len > MAX_MANIFEST_LEN {
                return Err(Error::Io(IoError::new(
                    IoErrorKind::Other,
                    format!("read {shown}"),
                    format!("{len} bytes, more than a manifest may hold ({MAX_MANIFEST_LEN})"),
                )));
            }
            let bytes = std::fs::read(&file).map_err(|e| io_error(e, format!("read {shown}")))?;
            Ok(Manifest::from_json(&bytes)?)
        };
        let manifest = read().map_err(|e| {
            let mut err = to_wit(e);
            err.message = format!("{shown}: {}", err.message);
            err
        })?;
        let layout = manifest.layout();
        Ok(wit_dataset::Dataset::new(DatasetRes { path, manifest, layout, stores: RefCell::new(BTreeMap::new()) }))
    }

    fn len(&self) -> u64 {
        self.layout.len()
    }

    fn describe(&self) -> String {
        let mut v = serde_json::to_value(&self.manifest).expect("a manifest always serialises");
        v["records"] = serde_json::Value::from(self.layout.len());
        v.to_string()
    }

    fn gather(&self, field: String, indices: Vec<u64>) -> Result<Gathered, WitError> {
        let f = self.field(&field)?;
        self.gather_field(f, &indices)
    }

    fn byte_lengths(&self, field: String, indices: Vec<u64>) -> Result<Vec<u64>, WitError> {
        let f = self.field(&field)?;
        let stop = u64::from(self.manifest.fields[f].has_stop_byte());
        Ok(self.plan(f, &indices)?.lengths.into_iter().map(|l| l.saturating_sub(stop)).collect())
    }

    fn verify(&self, start: u64, count: u64) -> Result<String, WitError> {
        let end = start.saturating_add(count).min(self.layout.len());
        let mut checked = 0u64;
        let mut bad = Vec::new();
        let mut bad_count = 0u64;
        for f in 0..self.manifest.fields.len() {
            let mut at = start;
            while at < end {
                let batch: Vec<u64> = (at..end.min(at + VERIFY_BATCH)).collect();
                at += batch.len() as u64;
                checked += batch.len() as u64;
                if self.gather_field(f, &batch).is_ok() {
                    continue;
                }
                // One at a time, to name every bad sample of the batch.
                for &i in &batch {
                    if let Err(e) = self.gather_field(f, &[i]) {
                        bad_count += 1;
                        if bad.len() < MAX_LISTED {
                            bad.push(serde_json::json!({
                                "field": self.manifest.fields[f].name,
                                "index": i,
                                "path": e.path,
                                "record": e.record,
                                "error": e.message,
                            }));
                        }
                    }
                }
            }
        }
        Ok(serde_json::json!({ "checked": checked, "bad_count": bad_count, "bad": bad }).to_string())
    }

    fn id(&self) -> Result<DatasetId, WitError> {
        // The core's rule (`Manifest::identity`), which every host and the Python
        // loader's states share.
        let id = self.manifest.identity(|s, f| {
            let o = self.store(s, f)?;
            o.store.generation().map_err(|e| named(&o.path, &self.manifest.fields[f].name, e))
        })?;
        Ok(wit_id(id))
    }

    fn grown_from(&self) -> Vec<DatasetId> {
        self.manifest.grown_from.iter().copied().map(wit_id).collect()
    }
}

impl wit_dataset::Guest for crate::api::Component {
    type Dataset = DatasetRes;
}
