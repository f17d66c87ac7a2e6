//! `zr view`: serves the dataset viewer's page (built by `make view` from bindings/js's
//! viewer, which reads the dataset in the browser with zr.wasm) and, for a local dataset,
//! the dataset's files, on 127.0.0.1.
//!
//! The server holds no dataset logic: it answers GET and HEAD for the page's static files
//! and for files under the dataset directory, with single byte ranges (`Range: bytes=a-b`,
//! `a-`, `-n`), which is how the page reads a store a block at a time. Paths are checked
//! to stay inside their folder after resolving links. A dataset URL (`http(s)://...`) is
//! handed to the page, which reads it from the browser: the server then serves the page
//! only, and the dataset's host must allow ranged GETs from the page's origin (CORS).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response, Server, StatusCode};
use zrecord_app::cli::{Failure, ViewOptions};

use super::INTERRUPTED;

/// Where the page is, unless `--site` or `$ZR_VIEW_SITE` says: `make view`'s output in the
/// source tree this `zr` was built from.
const BUILT_SITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/view");
/// Threads answering requests (a page reads a few files at once).
const THREADS: usize = 4;

/// What the server hands out.
struct Served {
    /// The page's files.
    site: PathBuf,
    /// A local dataset's directory, served under `/dataset/`.
    dataset: Option<PathBuf>,
    /// A tokenizer.json, served as `/tokenizer.json`.
    tokenizer: Option<PathBuf>,
}

fn failure(target: &str, message: impl Into<String>) -> Failure {
    Failure::new(target.to_owned(), message.into())
}

/// The page's folder, checked to hold the built page.
fn site(options: &ViewOptions) -> Result<PathBuf, String> {
    let (dir, from) = match (&options.site, std::env::var_os("ZR_VIEW_SITE")) {
        (Some(d), _) => (PathBuf::from(d), "--site"),
        (None, Some(d)) => (PathBuf::from(d), "$ZR_VIEW_SITE"),
        (None, None) => (PathBuf::from(BUILT_SITE), "the source tree"),
    };
    if !dir.join("index.html").is_file() || !dir.join("worker.js").is_file() {
        return Err(format!(
            "no viewer page in {} ({from}): build it with `make view` in the zrecord source tree, \
             or name a built one with --site DIR",
            dir.display()
        ));
    }
    dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))
}

/// Serves `target` until interrupted, after printing the page's URL through `announce`.
pub fn view(target: &str, options: &ViewOptions, announce: &mut dyn FnMut(&str)) -> Result<(), Failure> {
    let site = site(options).map_err(|m| failure(target, m))?;
    let is_url = target.starts_with("http://") || target.starts_with("https://");
    if target.contains("://") && !is_url {
        return Err(failure(
            target,
            "the page reads a dataset over HTTP(S): give the bucket's https:// URL of the dataset folder \
             (public, or behind a proxy that signs), whose CORS rules allow GET and HEAD with a Range header",
        ));
    }
    let dataset = if is_url {
        None
    } else {
        let dir = Path::new(target);
        if !dir.join(zrecord_core::dataset::MANIFEST_FILE).is_file() {
            return Err(failure(
                target,
                "not a dataset directory (no dataset.json): zr view shows datasets of named fields",
            ));
        }
        Some(dir.canonicalize().map_err(|e| failure(target, e.to_string()))?)
    };
    let tokenizer = match &options.tokenizer {
        Some(t) if !Path::new(t).is_file() => return Err(failure(t, "no such tokenizer file")),
        Some(t) => Some(PathBuf::from(t)),
        None => None,
    };
    let server = Server::http(("127.0.0.1", options.port))
        .map_err(|e| failure(target, format!("cannot listen on 127.0.0.1:{}: {e}", options.port)))?;
    let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(options.port);

    let mut query = format!("dataset={}", if is_url { encode(target) } else { "/dataset/".into() });
    if tokenizer.is_some() {
        query.push_str("&tokenizer=/tokenizer.json");
    }
    if options.index != 0 {
        query.push_str(&format!("&index={}", options.index));
    }
    announce(&format!("zr view: http://127.0.0.1:{port}/?{query} shows {target} (Ctrl-C stops)\n"));

    let served = Arc::new(Served { site, dataset, tokenizer });
    let server = Arc::new(server);
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (server, served) = (Arc::clone(&server), Arc::clone(&served));
            std::thread::spawn(move || {
                while !INTERRUPTED.load(Ordering::Acquire) {
                    match server.recv_timeout(Duration::from_millis(200)) {
                        Ok(Some(request)) => answer(&served, request),
                        Ok(None) => {}
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}

/// `s` as a query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}

fn status(request: Request, code: u16, why: &str) {
    let response = Response::from_string(why).with_status_code(StatusCode(code));
    let _ = request.respond(response);
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("css") => "text/css",
        _ => "application/octet-stream",
    }
}

/// `relative` inside `root`, after resolving links, or `None` (missing, or outside).
fn inside(root: &Path, relative: &str) -> Option<PathBuf> {
    let mut path = root.to_path_buf();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => path.push(p),
        }
    }
    let real = path.canonicalize().ok()?;
    (real.starts_with(root) && real.is_file()).then_some(real)
}

/// Percent-decoding of a URL path.
fn decode(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut k = 0;
    while k < bytes.len() {
        if bytes[k] == b'%' {
            let hex = std::str::from_utf8(bytes.get(k + 1..k + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            k += 3;
        } else {
            out.push(bytes[k]);
            k += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn answer(served: &Served, request: Request) {
    let head = match request.method() {
        Method::Get => false,
        Method::Head => true,
        _ => return status(request, 405, "only GET and HEAD"),
    };
    let url = request.url().to_owned();
    let Some(path) = decode(url.split('?').next().unwrap_or("/")) else {
        return status(request, 400, "bad path");
    };
    let file = if path == "/" {
        inside(&served.site, "index.html")
    } else if let Some(rest) = path.strip_prefix("/dataset/") {
        served.dataset.as_deref().and_then(|d| inside(d, rest))
    } else if path == "/tokenizer.json" {
        served.tokenizer.clone()
    } else {
        inside(&served.site, &path)
    };
    let Some(file) = file else {
        return status(request, 404, "not found");
    };
    let range = request.headers().iter().find(|h| h.field.equiv("Range")).map(|h| h.value.as_str().to_owned());
    send(request, &file, range.as_deref(), head);
}

/// The byte range `spec` asks of a file of `len` bytes: `Ok(None)` for the whole file,
/// `Err(())` when it cannot be satisfied (or is not one range of bytes).
fn parse_range(spec: &str, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = spec.trim().strip_prefix("bytes=") else { return Err(()) };
    if spec.contains(',') {
        return Err(());
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let (start, end) = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: u64 = n.parse().map_err(|_| ())?;
            (len.saturating_sub(n), len)
        }
        (a, "") => (a.parse().map_err(|_| ())?, len),
        (a, b) => {
            let (a, b): (u64, u64) = (a.parse().map_err(|_| ())?, b.parse().map_err(|_| ())?);
            if b < a {
                return Err(());
            }
            (a, b.saturating_add(1).min(len))
        }
    };
    if start >= len || start >= end {
        return Err(());
    }
    Ok(Some((start, end)))
}

fn send(request: Request, path: &Path, range: Option<&str>, head: bool) {
    let Ok(mut file) = File::open(path) else {
        return status(request, 404, "not found");
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let (code, start, end) = match range.map(|r| parse_range(r, len)) {
        None | Some(Ok(None)) => (200, 0, len),
        Some(Ok(Some((a, b)))) => (206, a, b),
        Some(Err(())) => {
            let response =
                Response::empty(StatusCode(416)).with_header(header("Content-Range", &format!("bytes */{len}")));
            let _ = request.respond(response);
            return;
        }
    };
    let mut headers = vec![
        header("Content-Type", content_type(path)),
        header("Accept-Ranges", "bytes"),
        header("Cache-Control", "no-store"),
    ];
    if code == 206 {
        headers.push(header("Content-Range", &format!("bytes {start}-{}/{len}", end - 1)));
    }
    let body: Box<dyn Read + Send> = if head || file.seek(SeekFrom::Start(start)).is_err() {
        Box::new(std::io::empty())
    } else {
        Box::new(file.take(end - start))
    };
    // A length, never chunked encoding (tiny_http's default above 32 KiB): the page sizes
    // a file by HEAD's Content-Length.
    let response = Response::new(StatusCode(code), headers, body, Some((end - start) as usize), None)
        .with_chunked_threshold(usize::MAX);
    let _ = request.respond(response);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_parsed_as_http_says() {
        assert_eq!(parse_range("bytes=0-9", 100), Ok(Some((0, 10))));
        assert_eq!(parse_range("bytes=90-", 100), Ok(Some((90, 100))));
        assert_eq!(parse_range("bytes=-10", 100), Ok(Some((90, 100))));
        assert_eq!(parse_range("bytes=95-200", 100), Ok(Some((95, 100))));
        assert_eq!(parse_range("bytes=100-", 100), Err(()));
        assert_eq!(parse_range("bytes=5-2", 100), Err(()));
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Err(()));
        assert_eq!(parse_range("items=0-1", 100), Err(()));
    }

    #[test]
    fn paths_stay_inside_their_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("a")).unwrap();
        std::fs::write(root.join("a/f"), b"x").unwrap();
        assert!(inside(&root, "a/f").is_some());
        assert!(inside(&root, "a/../a/f").is_none());
        assert!(inside(&root, "a").is_none());
        assert!(inside(&root.join("a"), "../a/f").is_none());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/hostname", root.join("a/out")).unwrap();
            assert!(inside(&root, "a/out").is_none());
        }
        assert_eq!(decode("/dataset/shard-000000/a%20b/meta.zr").as_deref(), Some("/dataset/shard-000000/a b/meta.zr"));
    }
}
