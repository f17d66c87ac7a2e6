//! A server that answers "slow down" with a `Retry-After` is given the wait it asked for,
//! not the client's own shorter backoff. The server is a real HTTP listener on 127.0.0.1
//! (object_store's HTTP store talks to it), scripted to throttle the first requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrecord::remote::Remote;

/// Serves `answers` in turn, one per request (then 204s), each on its own connection;
/// returns the URL and the count of requests seen.
fn scripted_server(answers: Vec<&'static str>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/data", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut body_len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    body_len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; body_len];
            let _ = reader.read_exact(&mut body);
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let head = answers.get(n).copied().unwrap_or("204 No Content");
            let reply = format!("HTTP/1.1 {head}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    (url, seen)
}

fn open(url: &str, deadline: &str) -> Remote {
    let options = [("allow_http", "true"), ("retry_deadline", deadline)];
    let options: Vec<(String, String)> = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Remote::open(url, &options).unwrap()
}

#[test]
fn a_retry_after_is_waited_for_before_the_next_attempt() {
    // Without the header the first retry would follow within 50 ms.
    let (url, seen) =
        scripted_server(vec!["503 Slow Down\r\nretry-after: 2", "429 Too Many Requests\r\nretry-after: 1"]);
    let remote = open(&url, "60");
    let began = Instant::now();
    remote.delete("x.bin").unwrap();
    let took = began.elapsed();
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(remote.stats().counts().retries, 2);
    // The second answer comes after the first wait: the waits add up to 3 s.
    assert!(took >= Duration::from_millis(2900), "retried after {took:?}, before the server's 2 s + 1 s");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn a_wait_past_the_deadline_is_named_in_the_error() {
    let (url, _) = scripted_server(vec!["503 Slow Down\r\nretry-after: 120"; 4]);
    let remote = open(&url, "5");
    let began = Instant::now();
    let err = remote.delete("x.bin").unwrap_err();
    // The client gives up at once rather than sleeping past its deadline.
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    assert!(err.message.contains("the server asked to wait 120 s more (Retry-After)"), "{}", err.message);
    assert!(err.message.contains("the retry deadline is 5 s"), "{}", err.message);
}
