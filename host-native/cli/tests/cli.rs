//! The native `zr` as a user meets it: one-line errors that name the user's path, exit
//! codes, a quiet end on a closed pipe, and failed commands that leave nothing behind.
//! (The same commands through `zr-wasm`, compared output for output, are in
//! `host-wasm/python/tests/test_cli_matrix.py`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn zr() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zr"))
}

fn run(dir: &Path, args: &[&str]) -> Output {
    zr().current_dir(dir).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// A `|u1` `.npy` of `rows` x `cols`.
fn npy(rows: usize, cols: usize) -> Vec<u8> {
    let mut out = zrecord_app::npy::write_header("|u1", &[rows as u64, cols as u64]);
    out.extend((0..rows * cols).map(|i| (i / cols) as u8 ^ (i % 7) as u8));
    out
}

/// Every name under `dir`, recursively, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out.sort();
    out
}

/// A directory with `a.npy` (300 x 64) converted into the dataset `good.zr`.
fn fixture() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.npy"), npy(300, 64)).unwrap();
    let out = run(tmp.path(), &["convert", "a.npy", "good.zr"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    tmp
}

#[test]
fn errors_are_one_line_name_the_path_and_exit_2() {
    let tmp = fixture();
    std::fs::create_dir(tmp.path().join("junk.zr")).unwrap();
    std::fs::write(tmp.path().join("junk.zr/meta.zr"), b"definitely not a store").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["inspect", "junk.zr"], "zr: error: junk.zr: not a zrecord store: meta.zr is 22 bytes"),
        (&["verify", "junk.zr"], "zr: error: junk.zr: not a zrecord store"),
        (&["stats", "junk.zr"], "zr: error: junk.zr: not a zrecord store"),
        (&["export", "junk.zr", "out.npy"], "zr: error: junk.zr: not a zrecord store"),
        (&["inspect", "nope.zr"], "zr: error: nope.zr: no such store directory"),
        // A file where a store belongs is named as such, not as a missing directory.
        (&["inspect", "a.npy"], "zr: error: a.npy: is a file, not a store directory"),
        (&["frobnicate"], "zr: error: unknown command \"frobnicate\" (zr --help shows usage)"),
        (&["inspect"], "zr: error: inspect takes STORE, got 0 argument(s)"),
        (&["delete", "good.zr", "99999"], "zr: error: good.zr: index 99999 out of range"),
    ];
    for (args, want) in cases {
        let out = run(tmp.path(), args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn help_and_version_go_to_stdout_and_exit_0() {
    for args in [&["--help"][..], &["-h"], &["help"], &["inspect", "--help"]] {
        let out = zr().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(text(&out.stdout).starts_with("zr: inspect, verify, compact"), "{args:?}");
        assert!(out.stderr.is_empty());
    }
    let out = zr().arg("--version").output().unwrap();
    assert_eq!(text(&out.stdout), format!("zr {}\n", env!("CARGO_PKG_VERSION")));
}

/// `zr verify s | head -1`: the reader goes away before zr writes. zr must stop quietly
/// with the command's own exit code, not panic (exit 101).
#[test]
fn a_closed_stdout_ends_quietly() {
    let tmp = fixture();
    for args in [&["verify", "good.zr"][..], &["inspect", "--json", "good.zr"], &["inspect", "good.zr"]] {
        let mut child =
            zr().current_dir(tmp.path()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn a_failed_convert_into_a_new_path_leaves_nothing() {
    let tmp = fixture();
    let d = tmp.path();
    std::fs::write(d.join("fake.npy"), b"this is text, not an array").unwrap();
    let whole = npy(300, 64);
    std::fs::write(d.join("trunc.npy"), &whole[..whole.len() - 100]).unwrap();
    std::fs::create_dir(d.join("npydir")).unwrap();
    let before = tree(d);
    let cases: &[(&[&str], &str)] = &[
        (&["convert", "missing.npy", "new.zr"], "zr: error: missing.npy: no such file"),
        (&["convert", "fake.npy", "new.zr"], "zr: error: fake.npy: not a .npy file (bad magic)"),
        (&["convert", "trunc.npy", "deep/er/new.zr"], "zr: error: trunc.npy: .npy data is truncated"),
        (&["convert", "npydir", "new.zr"], "zr: error: npydir: invalid argument: holds no .npy file"),
        (&["convert", "npydir", "deep/new"], "zr: error: npydir: invalid argument: holds no .npy file"),
        (&["convert", "a.npy", "new.zr", "--shard-records", "10"], "zr: error: a.npy: --shard-records is for"),
        (&["convert", "a.npy", "a.npy"], "zr: error: a.npy: is a file, not a store directory"),
        (&["export", "good.zr", "no/such/out.npy"], "zr: error: no/such/out.npy: its directory does not exist"),
        (&["export", "good.zr", "npydir"], "zr: error: npydir: is a directory, not a .npy file"),
    ];
    for (args, want) in cases {
        let out = run(d, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with(want), "{args:?}: {err}");
        assert!(!err.contains("not a zrecord store"), "{args:?}: {err}");
        assert_eq!(tree(d), before, "{args:?} left something behind");
    }
    // An incompatible append fails and leaves the dataset as it was.
    std::fs::write(d.join("wide.npy"), npy(3, 65)).unwrap();
    let out = run(d, &["convert", "wide.npy", "good.zr"]);
    assert!(text(&out.stderr).contains("cannot append"), "{}", text(&out.stderr));
    assert!(text(&run(d, &["verify", "good.zr"]).stdout).contains("300 records checked, 0 bad"));
}

#[test]
fn new_outputs_appear_whole() {
    let tmp = fixture();
    let d = tmp.path();
    let out = run(d, &["convert", "a.npy", "deep/er/new.zr", "--codec", "raw", "--chunk-mib", "1"]);
    assert_eq!(text(&out.stdout), "appended 300 records of |u1[64] (raw) at index 0; store holds 300\n");
    let out = run(d, &["export", "deep/er/new.zr", "back.npy"]);
    assert_eq!(text(&out.stdout), "exported 300 records to back.npy\n");
    assert_eq!(std::fs::read(d.join("back.npy")).unwrap(), npy(300, 64));
    // Only the outputs: no staging directory or file is left beside them.
    let names: Vec<String> = tree(d).iter().map(|p| p.display().to_string()).collect();
    assert!(names.iter().all(|n| !n.contains("zr-partial")), "{names:?}");
    let out = run(d, &["delete", "good.zr", "3", "7"]);
    assert_eq!(text(&out.stdout), "deleted 2 records; 298 remain\n");
    let out = run(d, &["compact", "good.zr"]);
    assert!(text(&out.stdout).starts_with("compacted 298 records: chunk bytes "), "{}", text(&out.stdout));
}

/// Flips the first stored byte of record `i` of the store at `dir`.
fn damage_record(dir: &Path, i: u64) {
    use std::os::unix::fs::FileExt;
    let meta = std::fs::File::open(dir.join("meta.zr")).unwrap();
    let mut e = [0u8; 16];
    meta.read_exact_at(&mut e, 16 + 16 * i).unwrap();
    let offset = u64::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
    let chunk = u16::from_le_bytes([e[12], e[13]]);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(dir.join(format!("{chunk}.zr"))).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[!b[0]], offset).unwrap();
}

#[test]
fn verify_checks_checksums_counts_unchecked_and_seals() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("a.npy"), npy(300, 64)).unwrap();
    assert!(run(d, &["convert", "a.npy", "raw.zr", "--codec", "raw"]).status.success());
    let out = run(d, &["verify", "raw.zr"]);
    assert_eq!(text(&out.stdout), "300 records checked, 0 bad (300 checked against their checksums, 0 unchecked)\n");
    assert!(text(&run(d, &["stats", "raw.zr"]).stdout).ends_with(", \"unchecked\": 0}\n"));

    // A damaged raw record decodes fine: only its checksum catches it.
    damage_record(&d.join("raw.zr"), 17);
    let out = run(d, &["verify", "raw.zr"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("bad record 17: fails its checksum"), "{stdout}");
    assert!(stdout.ends_with("300 records checked, 1 bad (300 checked against their checksums, 0 unchecked)\n"));
    let out = run(d, &["export", "raw.zr", "x.npy"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("zr: error: raw.zr: record 17 (chunk 0, offset "), "{}", text(&out.stderr));
    assert!(!d.join("x.npy").exists());
    assert!(run(d, &["export", "raw.zr", "x.npy", "--verify", "never"]).status.success());

    // A store that kept checksums and lost the file fails verify with one finding.
    assert!(run(d, &["convert", "a.npy", "lx.zr"]).status.success());
    std::fs::remove_file(d.join("lx.zr/checksums.zrc")).unwrap();
    let out = run(d, &["verify", "lx.zr"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).starts_with("damaged: checksums.zrc is missing or unusable"), "{}", text(&out.stdout));

    // Without its checksum files (as loaderx alone leaves a store) every record is unchecked;
    // --seal checksums them (a damaged record would be sealed too: it decodes).
    std::fs::remove_file(d.join("lx.zr/checksums.zrk")).unwrap();
    let out = run(d, &["verify", "lx.zr"]);
    assert_eq!(text(&out.stdout), "300 records checked, 0 bad (0 checked against their checksums, 300 unchecked)\n");
    assert_eq!(text(&run(d, &["stats", "lx.zr"]).stdout).matches("unchecked").count(), 0, "loaderx's keys only");
    let out = run(d, &["verify", "lx.zr", "--seal"]);
    assert_eq!(
        text(&out.stdout),
        "sealed 300 records (0 already had a checksum, 0 failed to decode)\n\
         300 records checked, 0 bad (300 checked against their checksums, 0 unchecked)\n"
    );
    assert!(d.join("lx.zr/checksums.zrc").exists() && d.join("lx.zr/checksums.zrk").exists());
}

#[test]
fn convert_with_zstd_counts_and_warns_in_inspect_and_exports_the_same_array() {
    let tmp = fixture();
    let out = run(tmp.path(), &["convert", "a.npy", "z.zr", "--codec", "zstd"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("(zstd)"), "{}", text(&out.stdout));
    let out = run(tmp.path(), &["inspect", "z.zr"]);
    let report = text(&out.stdout);
    assert!(report.contains("codecs        raw 0  flate 0  zstd 300  bad entries 0"), "{report}");
    assert!(report.contains("loaderx 0.5.4 cannot read this store"), "{report}");
    assert!(report.contains("codec zstd"), "{report}");
    // A flate store says nothing about loaderx.
    assert!(!text(&run(tmp.path(), &["inspect", "good.zr"]).stdout).contains("loaderx 0.5.4 cannot"));
    let out = run(tmp.path(), &["export", "z.zr", "back.npy"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(tmp.path().join("back.npy")).unwrap(), npy(300, 64));
}

/// `dir/NAME.npy` for each `(name, descr, shape, data)`.
fn npy_files(dir: &Path, files: &[(&str, &str, &[u64], Vec<u8>)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, descr, shape, data) in files {
        let mut bytes = zrecord_app::npy::write_header(descr, shape);
        bytes.extend_from_slice(data);
        std::fs::write(dir.join(format!("{name}.npy")), bytes).unwrap();
    }
}

#[test]
fn a_directory_of_npy_files_converts_to_a_dataset_of_fields_and_exports_back() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let n = 250u64;
    let image: Vec<u8> = (0..n * 6).map(|i| (i % 251) as u8).collect();
    let label: Vec<u8> = (0..n as i64).flat_map(|i| i.to_le_bytes()).collect();
    let mut offsets = vec![0i64];
    let mut tokens = Vec::new();
    for i in 0..n {
        for k in 0..1 + i % 5 {
            tokens.extend_from_slice(&((i * 10 + k) as u16).to_le_bytes());
        }
        offsets.push((tokens.len() / 2) as i64);
    }
    let offset_bytes: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
    npy_files(
        &d.join("in"),
        &[
            ("image", "|u1", &[n, 2, 3], image),
            ("label", "<i8", &[n], label),
            ("tokens", "<u2", &[tokens.len() as u64 / 2], tokens),
            ("tokens_offsets", "<i8", &[n + 1], offset_bytes),
        ],
    );
    let out = run(d, &["convert", "in", "ds", "--shard-records", "100", "--chunk-mib", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "added 250 samples of 3 fields to ds; it holds 250 samples in 3 shard(s)\n");
    let inspect = text(&run(d, &["inspect", "ds"]).stdout);
    assert!(inspect.contains("tokens ragged <u2"), "{inspect}");
    assert!(text(&run(d, &["verify", "ds"]).stdout).contains("750 records checked, 0 bad"));

    // Back out, as a directory and as an .npz: the same bytes as the input files.
    for (args, said) in [
        (&["export", "ds", "back"][..], "exported 250 samples to back\n"),
        (&["export", "ds", "sub/back.npz", "--verify", "always"][..], "exported 250 samples to sub/back.npz\n"),
    ] {
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let out = run(d, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), said);
    }
    for name in ["image", "label", "tokens", "tokens_offsets"] {
        let a = std::fs::read(d.join(format!("in/{name}.npy"))).unwrap();
        assert_eq!(std::fs::read(d.join(format!("back/{name}.npy"))).unwrap(), a, "{name}");
    }
    // The .npz converts into a second dataset whose export is the same again.
    assert!(run(d, &["convert", "sub/back.npz", "ds2"]).status.success());
    assert!(run(d, &["export", "ds2", "back2"]).status.success());
    for name in ["image", "label", "tokens", "tokens_offsets"] {
        let a = std::fs::read(d.join(format!("in/{name}.npy"))).unwrap();
        assert_eq!(std::fs::read(d.join(format!("back2/{name}.npy"))).unwrap(), a, "{name}");
    }
    // Appending the files again doubles the dataset.
    let out = run(d, &["convert", "in", "ds", "--shard-records", "100"]);
    assert_eq!(text(&out.stdout), "added 250 samples of 3 fields to ds; it holds 500 samples in 6 shard(s)\n");

    // Errors name the file and leave nothing behind.
    npy_files(&d.join("short"), &[("a", "|u1", &[3, 2], vec![0; 6]), ("b", "|u1", &[4], vec![0; 4])]);
    let before = tree(d);
    let cases: &[(&[&str], &str)] = &[
        (&["convert", "short", "new"], "zr: error: short/b.npy: field \"b\": invalid argument: 4 samples, but"),
        (&["convert", "short", "ds"], "zr: error: short/b.npy: field \"b\": invalid argument: 4 samples, but"),
        (&["convert", "short", "deep/er/x", "--codec", "raw"], "zr: error: short/b.npy: field \"b\""),
        (&["export", "ds", "back"], "zr: error: back: exists; export writes a new directory"),
        (&["export", "ds", "no/such/x.npz"], "zr: error: no/such/x.npz: its directory does not exist"),
        (&["convert", "missing", "new"], "zr: error: missing: no such file"),
    ];
    for (args, want) in cases {
        let out = run(d, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with(want), "{args:?}: {err}");
        assert!(!err.contains("zr-partial"), "{args:?}: the staged path leaked: {err}");
        assert_eq!(tree(d), before, "{args:?} left something behind");
    }
}

/// Runs `zr args` in `dir`, stops it (SIGSTOP) as soon as its staged output appears, sends
/// `signal`, lets it go on, and returns its output: the signal lands mid-command.
fn interrupted(dir: &Path, args: &[&str], signal: &str) -> Output {
    let child = zr().current_dir(dir).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id().to_string();
    let start = std::time::Instant::now();
    loop {
        let staged = tree(dir).iter().any(|p| p.to_string_lossy().contains(&format!(".zr-partial-{pid}")));
        if staged {
            break;
        }
        assert!(start.elapsed().as_secs() < 30, "{args:?}: no staged output appeared");
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let kill = |sig: &str| assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    kill("-STOP");
    kill(signal);
    kill("-CONT");
    child.wait_with_output().unwrap()
}

#[test]
fn sigint_and_sigterm_remove_the_unfinished_output_and_orphans_are_cleaned() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // 128 MiB of compressible rows: a conversion that takes a while after it stages.
    let (rows, cols) = (8192usize, 16384usize);
    let mut big = zrecord_app::npy::write_header("|u1", &[rows as u64, cols as u64]);
    big.extend((0..rows * cols).map(|i| ((i / 7) % 5) as u8 ^ (i >> 20) as u8));
    std::fs::write(d.join("big.npy"), &big).unwrap();
    std::fs::create_dir(d.join("fields")).unwrap();
    std::fs::write(d.join("fields/x.npy"), &big).unwrap();
    // Existing empty directories stay empty: the output is built beside them too.
    std::fs::create_dir(d.join("empty")).unwrap();
    std::fs::create_dir(d.join("empty-ds")).unwrap();
    let before = tree(d);
    for (args, signal) in [
        (&["convert", "big.npy", "out/new.zr", "--chunk-mib", "1"][..], "-INT"),
        (&["convert", "big.npy", "new.zr", "--chunk-mib", "1"][..], "-TERM"),
        (&["convert", "fields", "ds", "--chunk-mib", "1"][..], "-INT"),
        (&["convert", "big.npy", "empty", "--chunk-mib", "1"][..], "-INT"),
        (&["convert", "fields", "empty-ds", "--chunk-mib", "1"][..], "-TERM"),
    ] {
        let out = interrupted(d, args, signal);
        assert_eq!(out.status.code(), Some(130), "{args:?} {signal}: {}", text(&out.stderr));
        assert_eq!(text(&out.stderr).lines().last(), Some("zr: interrupted; the unfinished output was removed"));
        assert_eq!(tree(d), before, "{args:?} {signal} left something behind");
    }
    // Uninterrupted, the new store takes the empty directory's place.
    assert!(run(d, &["convert", "big.npy", "empty", "--chunk-mib", "32"]).status.success());
    assert!(d.join("empty/meta.zr").exists() && d.join("empty/checksums.zrk").exists());
    // A zr killed outright leaves its partial output; the next command beside it removes it.
    assert!(run(d, &["convert", "fields", "ds"]).status.success());
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let orphan = d.join(format!(".out.npz.zr-partial-{dead_pid}"));
    std::fs::write(&orphan, b"left by a killed zr").unwrap();
    // Python's export names one per thread (`-PID.TID`).
    let python_orphan = d.join(format!(".out.npz.zr-partial-{dead_pid}.140213"));
    std::fs::write(&python_orphan, b"left by a killed Python export").unwrap();
    let mine = d.join(format!(".out.npz.zr-partial-{}", std::process::id()));
    std::fs::write(&mine, b"a live process's: kept").unwrap();
    let out = run(d, &["export", "ds", "out.npz"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!orphan.exists() && !python_orphan.exists(), "an orphan was not removed");
    assert!(mine.exists(), "a live process's partial output was removed");
}
