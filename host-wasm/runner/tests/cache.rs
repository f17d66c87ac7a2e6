//! The compiled-code cache holds machine code that the runner executes, so it is used only
//! when no one but this user could have written it: a directory or an entry that others
//! may write, that someone else owns, or that is a symlink, is not loaded.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use zr_wasm::Runtime;

// Only the component loader of the shared helpers is needed here.
#[allow(dead_code)]
mod common;
use common::component;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

fn entry(dir: &Path) -> PathBuf {
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

#[test]
fn a_cache_others_can_write_is_not_loaded() {
    let bytes = component();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let load = || Runtime::new(&bytes, Some(&dir)).unwrap();

    // Made private, then used.
    let first = load();
    assert!(!first.cache_hit && first.cache_refused.is_none());
    assert_eq!(mode(&dir), 0o700);
    let e = entry(&dir);
    assert_eq!(mode(&e), 0o600);
    drop(first);
    assert!(load().cache_hit);

    // A directory others may write: nothing in it is loaded, nothing is written to it.
    for m in [0o777, 0o770, 0o1777] {
        chmod(&dir, m);
        let rt = load();
        assert!(!rt.cache_hit, "mode {m:o}");
        let why = rt.cache_refused.clone().expect("refused");
        assert!(why.contains("writable by its group or by others"), "{why}");
    }
    chmod(&dir, 0o700);
    assert!(load().cache_hit);

    // An entry others may write is not loaded; ours replaces it.
    chmod(&e, 0o622);
    let rt = load();
    assert!(!rt.cache_hit);
    assert!(rt.cache_refused.as_deref().unwrap().contains("writable by its group or by others"));
    assert_eq!(mode(&entry(&dir)), 0o600);
    drop(rt);
    assert!(load().cache_hit);

    // An entry that is a symlink (here to a genuine entry elsewhere) is not followed.
    let elsewhere = tmp.path().join("elsewhere.cwasm");
    std::fs::rename(&e, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &e).unwrap();
    let rt = load();
    assert!(!rt.cache_hit);
    assert!(rt.cache_refused.as_deref().unwrap().contains("symbolic link"));
    drop(rt);

    // An entry owned by someone else. Only root can give a file away; as anyone else the
    // directory check above is what keeps other users' entries out.
    let me = std::fs::metadata(&dir).unwrap().uid();
    if me == 0 {
        let e = entry(&dir);
        std::os::unix::fs::chown(&e, Some(4242), Some(4242)).unwrap();
        let rt = load();
        assert!(!rt.cache_hit);
        assert!(rt.cache_refused.as_deref().unwrap().contains("owned by uid 4242"));
    } else {
        eprintln!("not root: the foreign-owner case needs chown and was not exercised");
    }

    // A cache directory that is itself a symlink is refused too.
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let rt = Runtime::new(&bytes, Some(&link)).unwrap();
    assert!(!rt.cache_hit);
    assert!(rt.cache_refused.as_deref().unwrap().contains("symbolic link"));
}
