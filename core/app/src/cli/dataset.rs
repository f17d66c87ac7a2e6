//! `zr inspect|stats|verify` on a dataset directory (a `dataset.json` manifest over shards
//! of stores): the same reports as for one store, for every store of every shard, with
//! totals. Both front ends run it through their [`Host`], so it reads the same in `zr` and
//! `zr-wasm`. `zr convert DIR|IN.npz` and `zr export DATASET` stage and publish their
//! output here; the reading and writing of fields is the host's dataset writer
//! ([`Host::import_fields`], [`Host::export_fields`]).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use zrecord_core::dataset::{FieldKind, Manifest, MANIFEST_FILE, MAX_MANIFEST_LEN};
use zrecord_core::engine::Verify;
use zrecord_core::io::{Parallel, StorageFile};

use super::{
    damage_lines, json, open_checked, publish, Access, Failure, FieldImport, Host, Out, PathKind, EXIT_BAD_RECORDS,
    EXIT_OK,
};
use crate::tools;

/// The shard size `zr compact DATASET` merges up to unless `--target-rows` says otherwise.
pub const DEFAULT_TARGET_ROWS: u64 = zrecord_core::dataset::DEFAULT_COMPACT_ROWS;

/// `dir/name`, with one separator.
fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The manifest of the dataset in `dir`, if `dir` holds one.
pub(super) fn manifest<H: Host>(host: &mut H, dir: &str) -> Result<Option<Manifest>, Failure> {
    // Only a directory can hold a manifest; a file or a missing path is left to the
    // store commands, whose errors name it as such.
    if host.kind(dir) != PathKind::Dir {
        return Ok(None);
    }
    let path = join(dir, MANIFEST_FILE);
    if let Some(bytes) = host.inline_manifest(dir)? {
        return Manifest::from_json(&bytes).map(Some).map_err(|e| Failure::new(host.shown(&path), e.to_string()));
    }
    if host.kind(&path) != PathKind::File {
        return Ok(None);
    }
    let shown = host.shown(&path);
    let file = host.open_input(&path).map_err(|e| Failure::at(shown.clone(), e))?;
    let len = file.len().map_err(|e| Failure::at(shown.clone(), e.into()))?;
    if len > MAX_MANIFEST_LEN {
        return Err(Failure::new(
            shown,
            format!("is {len} bytes, over the {MAX_MANIFEST_LEN}-byte limit of a manifest"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_at(0, &mut bytes).map_err(|e| Failure::at(shown.clone(), e.into()))?;
    Manifest::from_json(&bytes).map(Some).map_err(|e| Failure::new(shown, e.to_string()))
}

/// Every store of the dataset: `(shard dir name, field name, store path, records listed)`.
fn stores(dir: &str, m: &Manifest) -> Vec<(String, String, String, u64)> {
    stores_with_long(dir, m).into_iter().map(|(shard, field, path, records, _)| (shard, field, path, records)).collect()
}

/// [`stores`], and whether the shard lists the field's store as holding samples longer
/// than a record (whose pieces and long index follow its samples: more records than
/// samples).
fn stores_with_long(dir: &str, m: &Manifest) -> Vec<(String, String, String, u64, bool)> {
    let mut out = Vec::new();
    for shard in &m.shards {
        for field in &m.fields {
            let path = join(&join(dir, &shard.dir), &field.name);
            let long = shard.long.contains(&field.name);
            out.push((shard.dir.clone(), field.name.clone(), path, shard.records, long));
        }
    }
    out
}

/// The path of every store of the dataset in `dir`, shard by shard, field by field.
pub(super) fn store_paths(dir: &str, m: &Manifest) -> Vec<String> {
    stores(dir, m).into_iter().map(|(_, _, path, _)| path).collect()
}

fn describe(m: &Manifest) -> String {
    let parts: Vec<String> = m
        .fields
        .iter()
        .map(|f| match f.kind {
            FieldKind::Fixed => format!("{} {} {:?} {}", f.name, f.dtype, f.shape, f.codec),
            _ => format!("{} {} {}", f.name, f.type_name(), f.codec),
        })
        .collect();
    parts.join("; ")
}

pub(super) fn inspect<H: Host>(host: &mut H, dir: &str, m: &Manifest, as_json: bool) -> Result<i32, Failure> {
    let mut reports = Vec::new();
    for (shard, field, path, records) in stores(dir, m) {
        let (s, _w) = open_checked(host, &path, Access::Read)?;
        let shown = host.shown(&path);
        if u64::from(s.len()) < records {
            return Err(Failure::new(shown, format!("holds {} records but {MANIFEST_FILE} lists {records}", s.len())));
        }
        let report = tools::inspect(&s).map_err(|e| Failure::at(shown, e))?;
        reports.push((shard, field, report));
    }
    let shown = host.shown(dir);
    let mut out = Out { host, closed: false };
    if as_json {
        let stores: Vec<serde_json::Value> = reports
            .iter()
            .map(|(shard, field, r)| serde_json::json!({"shard": shard, "field": field, "inspection": r}))
            .collect();
        out.line(&json(&serde_json::json!({"dataset": m, "samples": m.len(), "stores": stores})));
        return Ok(EXIT_OK);
    }
    out.line(&format!("dataset       {shown}"));
    out.line(&format!("format        {} v{} ({MANIFEST_FILE})", zrecord_core::dataset::FORMAT, m.version));
    out.line(&format!("samples       {}", m.len()));
    out.line(&format!("shards        {}", m.shards.len()));
    out.line(&format!("fields        {}", describe(m)));
    if let Some(card) = &m.metadata {
        let text = serde_json::to_string(card).unwrap_or_default();
        const SHOWN: usize = 400;
        if text.len() <= SHOWN {
            out.line(&format!("metadata      {text}"));
        } else {
            let cut = (0..=SHOWN).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
            out.line(&format!("metadata      {} ... ({} bytes; --json shows it whole)", &text[..cut], text.len()));
        }
    }
    for (shard, field, r) in &reports {
        out.line(&format!(
            "  {shard}/{field:<16} {:>9} records  stored {:>12} bytes  raw {} flate {} zstd {}  bad entries {}  {}",
            r.records, r.live_bytes, r.raw_records, r.flate_records, r.zstd_records, r.bad_entries, r.layout
        ));
    }
    leftover_lines(host, dir)?;
    Ok(EXIT_OK)
}

pub(super) fn stats<H: Host>(host: &mut H, dir: &str, m: &Manifest) -> Result<i32, Failure> {
    let (mut records, mut live, mut chunk, mut reclaimable, mut unchecked) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for (_, _, path, _) in stores(dir, m) {
        let (s, _w) = open_checked(host, &path, Access::Read)?;
        let st = s.stats().map_err(|e| Failure::at(host.shown(&path), e))?;
        records += u64::from(st.records);
        live += st.live_bytes;
        chunk += st.chunk_bytes;
        reclaimable += st.reclaimable;
        unchecked += u64::from(st.unchecked);
    }
    Out { host, closed: false }.line(&format!(
        "{{\"samples\": {}, \"shards\": {}, \"fields\": {}, \"records\": {records}, \"live_bytes\": {live}, \
         \"chunk_bytes\": {chunk}, \"reclaimable\": {reclaimable}, \"unchecked\": {unchecked}}}",
        m.len(),
        m.shards.len(),
        m.fields.len()
    ));
    Ok(EXIT_OK)
}

pub(super) fn verify<H: Host, P: Parallel>(
    host: &mut H,
    par: &P,
    dir: &str,
    m: &Manifest,
    as_json: bool,
) -> Result<i32, Failure> {
    let mut reports = Vec::new();
    // What the manifest says and the stores do not: a missing or unreadable store, one of
    // another length. Each makes the dataset unreadable, whatever its records' checksums.
    let mut broken: Vec<(String, String, String)> = Vec::new();
    for (shard, field, path, records, long) in stores_with_long(dir, m) {
        if host.kind(&path) != PathKind::Dir {
            broken.push((shard, field, format!("is missing: {MANIFEST_FILE} lists the field's store here")));
            continue;
        }
        let shown = host.shown(&path);
        let s = match open_checked(host, &path, Access::Read) {
            Ok((s, _w)) => s,
            Err(f) => {
                broken.push((shard, field, format!("cannot be opened: {}", f.message)));
                continue;
            }
        };
        // A store with long samples holds their pieces and index after its samples.
        if u64::from(s.len()) < records || (!long && u64::from(s.len()) != records) {
            broken.push((
                shard.clone(),
                field.clone(),
                format!(
                    "holds {} records but {MANIFEST_FILE} lists {records}: the store was changed on its own \
                     (a record deleted or appended outside the dataset)",
                    s.len()
                ),
            ));
        }
        let report =
            tools::verify(&s, par, &mut |d, t| host.progress("verify", d, t)).map_err(|e| Failure::at(shown, e))?;
        reports.push((shard, field, report));
    }
    let bad: u64 = reports.iter().map(|(_, _, r)| u64::from(r.bad_count)).sum();
    let sound = broken.is_empty() && reports.iter().all(|(_, _, r)| r.ok());
    if !as_json {
        leftover_lines(host, dir)?;
    }
    let mut out = Out { host, closed: false };
    if as_json {
        let stores: Vec<serde_json::Value> = reports
            .iter()
            .map(|(shard, field, r)| serde_json::json!({"shard": shard, "field": field, "verification": r}))
            .collect();
        let problems: Vec<serde_json::Value> = broken
            .iter()
            .map(|(shard, field, what)| serde_json::json!({"shard": shard, "field": field, "problem": what}))
            .collect();
        out.line(&json(
            &serde_json::json!({"samples": m.len(), "bad": bad, "stores": stores, "manifest_problems": problems}),
        ));
    } else {
        for (shard, field, what) in &broken {
            out.line(&format!("broken: {shard}/{field} {what}"));
        }
        let (mut checked, mut summed, mut unchecked) = (0u64, 0u64, 0u64);
        for (shard, field, r) in &reports {
            damage_lines(&mut out, r, Some(&format!("{shard}/{field}")));
            checked += u64::from(r.checked);
            summed += u64::from(r.checksummed);
            unchecked += u64::from(r.unchecked);
        }
        out.line(&format!(
            "{} samples in {} shards: {checked} records checked, {bad} bad ({summed} checked against their \
             checksums, {unchecked} unchecked)",
            m.len(),
            m.shards.len()
        ));
        if !broken.is_empty() {
            out.line(&format!(
                "{} stores do not match {MANIFEST_FILE}: the dataset cannot be read as it is",
                broken.len()
            ));
        }
    }
    Ok(if sound { EXIT_OK } else { EXIT_BAD_RECORDS })
}

/// Fails when the store at `store` is a field of a dataset of named fields (its folder is
/// `DATASET/SHARD/FIELD` and `DATASET/dataset.json` lists both): changing it alone would
/// leave it out of step with the shard's other fields, so the message names the dataset
/// command instead (and `--force`, for one who means it).
pub(super) fn refuse_field_store<H: Host>(host: &mut H, store: &str, command: &str) -> Result<(), Failure> {
    // `DATASET/SHARD/FIELD`, where DATASET may be `.` left out (run inside the dataset).
    let trimmed = store.trim_end_matches('/');
    let Some((shard_path, field)) = trimmed.rsplit_once('/') else { return Ok(()) };
    let shard_path = shard_path.trim_end_matches('/');
    let (dataset_dir, shard) = shard_path.rsplit_once('/').unwrap_or((".", shard_path));
    let dataset_dir = if dataset_dir.is_empty() { "/" } else { dataset_dir };
    let Ok(Some(m)) = manifest(host, dataset_dir) else { return Ok(()) };
    if m.field_index(field).is_none() || !m.shards.iter().any(|s| s.dir == shard) {
        return Ok(());
    }
    let shown = host.shown(dataset_dir);
    let what = match command {
        "delete" => format!("`zr delete {shown} INDEX...` deletes samples from every field"),
        _ => format!("`zr compact {shown}` merges the dataset's shards"),
    };
    Err(Failure::new(
        host.shown(store),
        format!(
            "is field {field:?} of {shard} of the dataset {shown}: {command} it alone and it no longer matches the \
             shard's other fields; {what} (--force changes this store anyway)"
        ),
    ))
}

/// The indices in file `path` for `delete --from-file`: non-negative integers separated by
/// whitespace or commas (one a line, say); `#` starts a comment to the end of its line.
pub(super) fn read_indices<H: Host>(host: &mut H, path: &str) -> Result<Vec<u64>, Failure> {
    let shown = host.shown(path);
    let file = host.open_input(path).map_err(|e| Failure::at(shown.clone(), e))?;
    let len = file.len().map_err(|e| Failure::at(shown.clone(), e.into()))?;
    // Twenty bytes an index at most: 2^24 records a store, any number of shards.
    const MAX_INDEX_FILE: u64 = 1 << 32;
    if len > MAX_INDEX_FILE {
        return Err(Failure::new(
            shown,
            format!("is {len} bytes, over the {MAX_INDEX_FILE}-byte limit of an index file"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_at(0, &mut bytes).map_err(|e| Failure::at(shown.clone(), e.into()))?;
    let text = core::str::from_utf8(&bytes).map_err(|_| Failure::new(shown.clone(), "is not text"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for word in line.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()) {
            let i = word
                .parse::<u64>()
                .map_err(|_| Failure::new(shown.clone(), format!("line {}: {word:?} is not a sample index", n + 1)))?;
            out.push(i);
        }
    }
    Ok(out)
}

/// Prints the leftovers of interrupted writes in `dir` ([`Host::leftovers`]), if any.
fn leftover_lines<H: Host>(host: &mut H, dir: &str) -> Result<(), Failure> {
    let found = host.leftovers(dir, false, None)?;
    if found.is_empty() {
        return Ok(());
    }
    let shown = host.shown(dir);
    let bytes: u64 = found.iter().map(|(_, b)| b).sum();
    let mut out = Out { host, closed: false };
    for (path, size) in &found {
        out.line(&format!("leftover: {path} ({size} bytes), not listed in the dataset's {MANIFEST_FILE}"));
    }
    out.line(&format!(
        "{} leftovers of interrupted writes ({bytes} bytes); `zr clean {shown}` removes them",
        found.len()
    ));
    Ok(())
}

/// The failure for a command that works on one store, given a dataset directory.
pub(super) fn refuse<H: Host>(host: &mut H, dir: &str, command: &str) -> Failure {
    Failure::new(
        host.shown(dir),
        format!(
            "is a dataset of named fields over shards ({MANIFEST_FILE}); `zr {command}` works on one store: \
             name a shard's field store (DIR/shard-NNNNNN/FIELD)"
        ),
    )
}

/// A failure about something under `staged`, named as the user's `output` instead.
fn unstage(mut f: Failure, staged: &str, out_shown: &str) -> Failure {
    if let Some(rest) = f.path.strip_prefix(staged) {
        f.path = format!("{out_shown}{rest}");
    }
    f.message = f.message.replace(staged, out_shown);
    f
}

/// `convert DIR|IN.npz OUT`: a new dataset is built beside `output` and moved there at the
/// end; samples added to an existing one are published by its manifest, all at once.
pub(super) fn convert<H: Host>(host: &mut H, input: &str, output: &str, options: &FieldImport) -> Result<i32, Failure> {
    let (in_shown, out_shown) = (host.shown(input), host.shown(output));
    if matches!(host.kind(input), PathKind::Missing | PathKind::MissingParent) {
        return Err(Failure::new(in_shown, "no such file or directory"));
    }
    if !host.has_fields_io() {
        return Err(Failure::new(in_shown, super::NO_FIELDS_IO));
    }
    let (dir, staged) = match host.kind(output) {
        PathKind::Dir if host.is_empty_dir(output) => {
            (host.stage_store(output).map_err(|e| Failure::at(out_shown.clone(), e))?, true)
        }
        PathKind::Dir => (output.to_string(), false),
        PathKind::File => return Err(Failure::new(out_shown, "is a file, not a dataset directory")),
        PathKind::Missing | PathKind::MissingParent => {
            (host.stage_store(output).map_err(|e| Failure::at(out_shown.clone(), e))?, true)
        }
    };
    let done = match host.import_fields(input, &dir, options) {
        Ok(d) => d,
        Err(f) => {
            if staged {
                host.discard(&dir);
                return Err(unstage(f, &host.shown(&dir), &out_shown));
            }
            return Err(f);
        }
    };
    publish(host, staged.then_some(dir.as_str()), output, out_shown.clone())?;
    Out { host, closed: false }.line(&format!(
        "added {} samples of {} fields to {out_shown}; it holds {} samples in {} shard(s)",
        done.added, done.fields, done.samples, done.shards
    ));
    Ok(EXIT_OK)
}

/// `export DATASET OUT|OUT.npz`: the output is built beside its path and moved there at
/// the end. A directory output must be new; an `.npz` replaces a file there.
pub(super) fn export<H: Host>(host: &mut H, dataset: &str, output: &str, verify: Verify) -> Result<i32, Failure> {
    let out_shown = host.shown(output);
    if !host.has_fields_io() {
        return Err(Failure::new(host.shown(dataset), super::NO_FIELDS_IO));
    }
    let npz = output.to_ascii_lowercase().ends_with(".npz");
    let staged = match (npz, host.kind(output)) {
        (_, PathKind::MissingParent) if npz => return Err(Failure::new(out_shown, "its directory does not exist")),
        (true, PathKind::Dir) => return Err(Failure::new(out_shown, "is a directory, not an .npz file")),
        (true, _) => host.stage_file(output).map(|(_, path)| path),
        (false, PathKind::Dir | PathKind::File) => {
            return Err(Failure::new(out_shown, "exists; export writes a new directory (or name an OUT.npz)"))
        }
        (false, _) => host.stage_store(output),
    }
    .map_err(|e| Failure::at(out_shown.clone(), e))?;
    let n = into_place(host, &staged, output, &out_shown, |h| h.export_fields(dataset, &staged, npz, verify))?;
    Out { host, closed: false }.line(&format!("exported {n} samples to {out_shown}"));
    Ok(EXIT_OK)
}

/// `pull URL OUT`: the pushed dataset is written beside `output` and moved there at the
/// end; `output` must be new.
pub(super) fn pull<H: Host>(host: &mut H, url: &str, output: &str) -> Result<i32, Failure> {
    let out_shown = host.shown(output);
    match host.kind(output) {
        PathKind::Missing => {}
        PathKind::MissingParent => return Err(Failure::new(out_shown, "its directory does not exist")),
        PathKind::Dir | PathKind::File => return Err(Failure::new(out_shown, "exists; pull writes a new directory")),
    }
    let staged = host.stage_store(output).map_err(|e| Failure::at(out_shown.clone(), e))?;
    let files = into_place(host, &staged, output, &out_shown, |h| h.pull(url, &staged))?;
    Out { host, closed: false }.line(&format!("pulled {files} files of {url} into {out_shown}"));
    Ok(EXIT_OK)
}

/// Runs `work`, which writes into `staged`, then moves `staged` to `output`; a failure of
/// either removes what was staged (the error then names `output`, not the staged path).
fn into_place<H: Host, T>(
    host: &mut H,
    staged: &str,
    output: &str,
    out_shown: &str,
    work: impl FnOnce(&mut H) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let done = match work(host) {
        Ok(v) => v,
        Err(f) => {
            let shown_staged = host.shown(staged);
            host.discard(staged);
            return Err(unstage(f, &shown_staged, out_shown));
        }
    };
    if let Err(e) = host.commit(staged, output) {
        host.discard(staged);
        return Err(Failure::at(out_shown.to_string(), e));
    }
    Ok(done)
}
