//! A dataset's read-ahead ([`Dataset::will_read`]): the records of the samples a batch
//! is about to read start on their way, to the kernel's page cache for a local dataset, as
//! requests for one in an object store, side by side across stores when their tables are
//! cold.

use std::sync::Arc;

use super::{shard, Dataset};
use crate::Zrecord;

impl Dataset {
    /// A read-ahead: every field's records of samples `indices` start on their way (an
    /// object store sends the requests now; a local dataset asks the kernel for what is not
    /// in memory: [`Zrecord::will_read`]). Reads nothing, reports nothing: the reads that
    /// follow report what is wrong.
    pub fn will_read(&self, indices: &[u64]) {
        let Ok(indices) = self.to_whole(indices) else { return };
        let indices = &*indices;
        if self.cache.is_none() {
            // A local dataset is mostly all warm or all cold: one look at the first sample
            // decides, instead of a few residency checks in every store the batch touches.
            let Some((s, index)) = indices.first().and_then(|&i| self.layout.locate(i)) else { return };
            let Ok(first) = self.opened(s) else { return };
            if !first.stores.iter().any(|z| z.is_cold(index)) {
                return;
            }
        }
        let mut per_shard: Vec<Vec<u64>> = vec![Vec::new(); self.shards.len()];
        for &i in indices {
            if let Some((s, index)) = self.layout.locate(i) {
                per_shard[s].push(index);
            }
        }
        // A long sample's continuation records, which only its own fields' stores hold,
        // are read ahead by those stores below (the other fields ask for nothing more).
        let mut more: Vec<(usize, usize, Vec<u64>)> = Vec::new();
        let mut opened = Vec::new();
        for (s, local) in per_shard.iter().enumerate() {
            if local.is_empty() {
                continue;
            }
            // A shard that does not open is left to the read, which reports it.
            let Ok(shard) = self.opened(s) else { continue };
            opened.push((shard, local));
            for (f, long) in shard.long.iter().enumerate() {
                let Some(long) = long else { continue };
                let records: Vec<u64> = per_shard[s]
                    .iter()
                    .filter_map(|&i| long.find(i))
                    .flat_map(|sample| sample.records().skip(1).map(|(r, _)| r))
                    .collect();
                if !records.is_empty() {
                    more.push((s, f, records));
                }
            }
        }
        crate::remote::file::sending_together(|| self.announce(&opened, &more));
    }

    /// [`Dataset::will_read`]'s announcements to the stores: `touched` the opened shards a
    /// batch reads with their samples, `more` long samples' further records by shard and
    /// field.
    fn announce(&self, touched: &[(&shard::Opened, &Vec<u64>)], more: &[(usize, usize, Vec<u64>)]) {
        for (s, f, records) in more {
            if let Some(o) = self.shards[*s].if_open() {
                let _ = o.stores[*f].will_read(records);
            }
        }
        let touched: Vec<(&Arc<Zrecord>, &Vec<u64>)> =
            touched.iter().flat_map(|&(shard, local)| shard.stores.iter().map(move |store| (store, local))).collect();
        // In an object store each store fetches its table's block before it can send its
        // records' requests: one round trip each while the blocks are not held. Side by
        // side, a cold batch over many shards and fields waits about two round trips, not
        // two per store; a warm one (the usual case) sends its requests from here.
        let cold = self.cache.is_some() && touched.len() > 1 && touched.iter().any(|(z, local)| z.table_cold(local[0]));
        if !cold {
            for (store, local) in touched {
                let _ = store.will_read(local);
            }
            return;
        }
        std::thread::scope(|scope| {
            for (store, local) in touched {
                scope.spawn(move || {
                    let _ = store.will_read(local);
                });
            }
        });
    }
}
