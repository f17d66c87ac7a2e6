//! Golden stores written by the reference wheel (loaderx 0.5.4), checked in under
//! `tests/golden/` in shrunken form (see `tests/golden/make_golden.py`), read by every run.

use std::fs;
use std::path::{Path, PathBuf};

use zrecord::{Codec, OpenOptions, Zrecord};
use zrecord_app::npy;
use zrecord_core::format::{CHUNK_FILE_LEN, META_LEN};

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/loaderx-0.5.4").join(name)
}

/// Rebuilds a full sparse store from its checked-in heads.
fn materialize(name: &str, dir: &Path) {
    let src = golden(name);
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        if let Some(base) = file.strip_suffix(".head") {
            let out = dir.join(base);
            fs::write(&out, fs::read(&path).unwrap()).unwrap();
            let full = if base == "meta.zr" { META_LEN } else { CHUNK_FILE_LEN };
            fs::OpenOptions::new().write(true).open(&out).unwrap().set_len(full).unwrap();
        } else if file == "schema.json" {
            fs::copy(&path, dir.join(file)).unwrap();
        }
    }
}

/// The data bytes and shape of a `.npy` file.
fn load_npy(path: &Path) -> (Vec<u8>, Vec<u64>) {
    let bytes = fs::read(path).unwrap();
    let h = npy::parse_header(&bytes).unwrap();
    (bytes[h.data_offset as usize..].to_vec(), h.shape)
}

fn read_all(zr: &Zrecord, item: usize) -> Vec<u8> {
    let idxs: Vec<u64> = (0..u64::from(zr.len())).collect();
    let mut out = vec![0u8; idxs.len() * item];
    zr.gather(&idxs, &mut out, item).unwrap();
    out
}

#[test]
fn reads_loaderx_datasets() {
    for name in ["flate", "raw", "compacted"] {
        let dir = tempfile::tempdir().unwrap();
        materialize(name, dir.path());
        let (expected, shape) = load_npy(&golden(name).join("expected.npy"));
        let item: u64 = shape[1..].iter().product();
        let zr = Zrecord::open(dir.path()).unwrap();
        assert_eq!(u64::from(zr.len()), shape[0], "{name}");
        assert_eq!(read_all(&zr, item as usize), expected, "{name}");
        let report = zr.verify(&mut |_, _| {}).unwrap();
        assert_eq!(report.bad_count, 0, "{name}");
        let schema = zr.schema().unwrap().unwrap();
        assert_eq!(schema.shape, shape[1..].to_vec());
        let stats = zr.stats().unwrap();
        assert_eq!(stats.reclaimable, 0, "{name}");
    }
}

#[test]
fn reads_loaderx_ragged_records() {
    let dir = tempfile::tempdir().unwrap();
    materialize("ragged", dir.path());
    let (expected, _) = load_npy(&golden("ragged").join("expected.npy"));
    let (lens_bytes, _) = load_npy(&golden("ragged").join("lengths.npy"));
    let lens: Vec<u32> = lens_bytes.chunks(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
    let zr = Zrecord::open_read_only(dir.path()).unwrap();
    let idxs: Vec<u64> = (0..lens.len() as u64).collect();
    let mut got_lens = vec![0u32; lens.len()];
    zr.lengths(&idxs, &mut got_lens).unwrap();
    assert_eq!(got_lens, lens);
    let mut offsets = vec![0u64; lens.len()];
    for i in 1..lens.len() {
        offsets[i] = offsets[i - 1] + u64::from(lens[i - 1]);
    }
    let mut out = vec![0u8; expected.len()];
    zr.gather_var(&idxs, &mut out, &offsets).unwrap();
    assert_eq!(out, expected);
    let report = zr.inspect().unwrap();
    assert!(report.raw_records > 0 && report.flate_records > 0, "{report:?}");
}

/// With the raw codec there is no compressor in play, so our writer must produce the very
/// bytes loaderx produced: header, table and chunk data, and schema.json.
#[test]
fn raw_conversion_is_byte_identical_to_loaderx() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let zr = Zrecord::open_with(&store, OpenOptions { codec: Codec::Raw, ..Default::default() }).unwrap();
    zr.convert_npy(&golden("raw").join("expected.npy"), Codec::Raw, 1 << 20, &mut |_, _| {}).unwrap();
    drop(zr);
    for head in ["meta.zr", "0.zr"] {
        let want = fs::read(golden("raw").join(format!("{head}.head"))).unwrap();
        // Compare the used region and a margin past it, not the whole sparse file.
        let mut got = vec![0u8; want.len() + 4096];
        std::os::unix::fs::FileExt::read_exact_at(&fs::File::open(store.join(head)).unwrap(), &mut got, 0).unwrap();
        assert_eq!(&got[..want.len()], &want[..], "{head}");
        assert!(got[want.len()..].iter().all(|&b| b == 0), "{head} past the used region");
    }
    assert_eq!(fs::read(store.join("schema.json")).unwrap(), fs::read(golden("raw").join("schema.json")).unwrap());
}
