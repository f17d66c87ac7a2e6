//! A whole dataset's `inspect`, `verify` and `stats`, for an opened [`Dataset`] (local or
//! in an object store): the store tools `zr` runs (`zrecord_app::tools`) over every store of
//! every shard, each report named by its shard and field. `zr` walks a dataset's stores
//! through its host instead (`core/app/src/cli/dataset.rs`), since it also runs in the wasm
//! sandbox; what is measured and checked per store is the same code.

use zrecord_core::engine::Stats;

use super::{Dataset, DatasetError};
use crate::{Inspection, Verification};

/// One store's report, named as `zr inspect --json` names it.
#[derive(Clone, Debug)]
pub struct StoreReport<T> {
    /// The shard's directory name (`shard-000000`), or `""` for a single-store dataset.
    pub shard: String,
    /// The field's name.
    pub field: String,
    /// What the tool found in the store.
    pub report: T,
}

/// The sums `zr stats` prints for a dataset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatasetStats {
    /// Samples in the dataset.
    pub samples: u64,
    /// Shards.
    pub shards: u64,
    /// Fields.
    pub fields: u64,
    /// Live records over every store.
    pub records: u64,
    /// Stored bytes of the live records.
    pub live_bytes: u64,
    /// How far the stores' chunk files have grown.
    pub chunk_bytes: u64,
    /// What compacting every store could free, at most.
    pub reclaimable: u64,
    /// Live records without a checksum.
    pub unchecked: u64,
}

impl Dataset {
    /// Every store with its shard's name and its field's, shard by shard, field by field.
    fn named_stores(&self) -> impl Iterator<Item = (usize, usize, String, String)> + '_ {
        let single = self.manifest.is_none();
        (0..self.shards.len()).flat_map(move |s| {
            let shard = match single {
                true => String::new(),
                false => self.shards[s].dir.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
            };
            self.fields.iter().enumerate().map(move |(f, field)| (s, f, shard.clone(), field.name.clone()))
        })
    }

    /// `zr inspect` of every store (read-only: nothing is changed).
    pub fn inspect_stores(&self) -> Result<Vec<StoreReport<Inspection>>, DatasetError> {
        self.named_stores()
            .map(|(s, f, shard, field)| {
                let report = self.store(s, f)?.inspect().map_err(|e| self.error(s, f, e))?;
                Ok(StoreReport { shard, field, report })
            })
            .collect()
    }

    /// `zr verify` of every store: every checksum checked and every record decoded, the
    /// failures listed per store. `progress(done, total)` counts records over all stores.
    pub fn verify_stores(
        &self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<StoreReport<Verification>>, DatasetError> {
        let total: u64 = self.stores()?.iter().map(|s| u64::from(s.len())).sum();
        let mut before = 0u64;
        let mut out = Vec::new();
        for (s, f, shard, field) in self.named_stores().collect::<Vec<_>>() {
            let store = self.store(s, f)?;
            let report =
                store.verify(&mut |done, _| progress(before + done, total)).map_err(|e| self.error(s, f, e))?;
            before += u64::from(store.len());
            out.push(StoreReport { shard, field, report });
        }
        progress(total, total);
        Ok(out)
    }

    /// `zr stats` of the dataset: every store's usage summed.
    pub fn stats(&self) -> Result<DatasetStats, DatasetError> {
        let mut sum = DatasetStats {
            samples: self.len(),
            shards: self.shards.len() as u64,
            fields: self.fields.len() as u64,
            ..DatasetStats::default()
        };
        for (s, f, _, _) in self.named_stores() {
            let st: Stats = self.store(s, f)?.stats().map_err(|e| self.error(s, f, e))?;
            sum.records += u64::from(st.records);
            sum.live_bytes += st.live_bytes;
            sum.chunk_bytes += st.chunk_bytes;
            sum.reclaimable += st.reclaimable;
            sum.unchecked += u64::from(st.unchecked);
        }
        Ok(sum)
    }
}
