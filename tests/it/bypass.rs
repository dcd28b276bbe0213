//! The request Palisade checks is the request the SoR receives (issue: close the bypasses).
//!
//! Every test here speaks raw bytes on both sides: the client writes its request line by hand
//! (no HTTP library that would normalise anything) and the upstream is a TCP listener that
//! records the bytes it receives, so each assertion is about what actually crossed the wire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use palisade_policy::keys::KeyPair;
use serde_json::Value;
use support::writes::*;
use support::*;

mod paths;
mod second;

/// A raw HTTP/1.1 upstream: records every request's bytes (head and body) and answers
/// `{"ok":true}` (the pre-image the test leases name) with forged PTCL headers of its own.
struct RawUpstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

impl RawUpstream {
    fn start() -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let rec = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let rec = rec.clone();
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // One request: its head, then Content-Length bytes of body.
                        let end = loop {
                            if let Some(e) = head_end(&buf) {
                                break e;
                            }
                            match conn.read(&mut chunk) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let want = end + content_length(&buf[..end]);
                        while buf.len() < want {
                            match conn.read(&mut chunk) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        rec.lock().unwrap().push(buf[..want].to_vec());
                        buf.drain(..want);
                        let answer =
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\
                            agent-commit-receipt: forged-by-upstream\r\nagent-fence-token: 777\r\n\
                            content-length: 11\r\n\r\n{\"ok\":true}";
                        if conn.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        RawUpstream { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, as text (the test bodies are ASCII).
    fn requests(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect()
    }

    /// Requests other than the sidecar's own pre-image GETs.
    fn writes(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| !r.starts_with("GET "))
            .collect()
    }
}

/// A sidecar in front of a raw upstream; `extra` is added to its config.
fn sidecar(up: &RawUpstream, extra: &str) -> Palisade {
    let dir = tempfile::tempdir().unwrap();
    let text = write_config_for(&up.url(), dir.path(), "", extra);
    Palisade::start_in(dir, &text)
}

struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
            .collect()
    }
}

/// Sends `head` (request line and headers, without the blank line) and `body` as written,
/// with `Content-Length` and `Connection: close` added, and reads the answer.
fn raw(p: &Palisade, head: &str, body: &str) -> Answer {
    let mut s = TcpStream::connect(p.data).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let connection = if head.to_ascii_lowercase().contains("\r\nconnection:") {
        ""
    } else {
        "Connection: close\r\n"
    };
    write!(
        s,
        "{head}\r\nHost: erp.example.com\r\n{connection}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = head_end(&buf) {
            if buf.len() >= end + content_length(&buf[..end]) {
                break;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let end = head_end(&buf).unwrap_or(buf.len());
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head,
        body: buf[end..].to_vec(),
    }
}

fn agent() -> KeyPair {
    KeyPair::from_seed(AGENT_SEED)
}

fn lease_headers(path: &str, epoch: u64) -> String {
    format!(
        "Agent-Compensation-Lease: {}\r\nAgent-Compensation-Inverse: {}",
        lease_for(&agent(), path, epoch, |_| {}),
        URL_SAFE_NO_PAD.encode(inverse_for(path))
    )
}

const BODY: &str = r#"{"qty":1150}"#;

/// Runs a future to completion on a small runtime (the admin helpers are async).
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}
