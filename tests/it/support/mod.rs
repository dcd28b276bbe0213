//! Shared harness for the integration tests: a real HTTP upstream that records what reached
//! it, generated certificates, the real `palisade` binary as a child process, and clients for
//! HTTP/1.1, h2c and TLS (with ALPN and client certificates).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::{Digest as _, Sha256};
use tokio::net::{TcpListener, TcpStream};

mod clients;
mod pki;
mod receiver;
mod sidecar;
mod upstream;
pub use clients::*;
pub use pki::*;
// Not every test binary that includes this module takes a webhook receiver.
#[allow(unused_imports)]
pub use receiver::*;
pub use sidecar::*;
pub use upstream::*;

pub mod bundles;
pub mod log_mirror;
pub mod tokens;
pub mod wait;
pub mod writes;

pub type BoxBody =
    http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

pub fn full(b: impl Into<Bytes>) -> BoxBody {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}
