//! The data plane against a real upstream, through the real `palisade` binary (SPEC §3, §9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use http::{Method, Request, StatusCode};
use support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

mod connections;
mod limits;
mod tls;

/// A pass-through config (`ptcl.writes = []`: no request is buffered or enforced) unless
/// `extra` has its own `[ptcl]`.
fn config(upstream: &Upstream, extra: &str) -> String {
    let ptcl = if extra.contains("[ptcl]") {
        ""
    } else {
        "[ptcl]\nwrites = []\n"
    };
    format!(
        "[upstream]\nurl = \"{}\"\nconnect_timeout = \"1s\"\ntimeout = \"2s\"\n\
         [rich]\nunbound_writes = \"allow\"\n{ptcl}{extra}",
        upstream.url()
    )
}

fn body_for(method: &Method) -> Vec<u8> {
    // Binary, not valid UTF-8, with every byte value: byte-exactness is the point.
    let mut b = pattern(method.as_str().len() as u64, 200_000);
    b.extend_from_slice(&[0, 0xff, 0xfe, b'\r', b'\n']);
    b
}

async fn assert_methods_pass_through(
    mut send: impl AsyncFnMut(Request<BoxBody>) -> (http::response::Parts, bytes::Bytes),
    upstream: &Upstream,
    want_version: Option<http::Version>,
) {
    for method in [Method::GET, Method::POST, Method::PUT, Method::DELETE] {
        let before = upstream.requests().len();
        let body = if method == Method::GET {
            Vec::new()
        } else {
            body_for(&method)
        };
        let req = Request::builder()
            .method(method.clone())
            .uri("/echo/items/7?x=1&y=%2F")
            .header("content-type", "application/octet-stream")
            .header("x-custom", "kept")
            .body(full(body.clone()))
            .unwrap();
        let (parts, got) = send(req).await;
        assert_eq!(parts.status, StatusCode::OK, "{method}");
        if let Some(v) = want_version {
            assert_eq!(parts.version, v, "{method}");
        }
        assert_eq!(
            got.as_ref(),
            body.as_slice(),
            "{method}: response body byte-exact"
        );
        assert_eq!(parts.headers["x-upstream-method"], method.as_str());
        assert!(
            !parts.headers.contains_key("x-hop"),
            "hop-by-hop response header removed"
        );
        let seen = upstream.requests();
        assert_eq!(
            seen.len(),
            before + 1,
            "{method}: exactly one upstream request"
        );
        let s = &seen[before];
        assert_eq!(s.method, method.as_str());
        assert_eq!(s.path_and_query, "/echo/items/7?x=1&y=%2F");
        assert_eq!(
            s.body_sha256,
            sha256_hex(&body),
            "{method}: request body byte-exact"
        );
        assert_eq!(s.headers["x-custom"], "kept");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_pass_through_byte_exact_over_http1_and_h2c() {
    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, ""));
    let base = p.url("");
    let h1 = http1_client();
    assert_methods_pass_through(
        async |mut req| {
            *req.uri_mut() = format!("{base}{}", req.uri()).parse().unwrap();
            send(&h1, req).await
        },
        &upstream,
        Some(http::Version::HTTP_11),
    )
    .await;
    let h2 = h2c_client();
    assert_methods_pass_through(
        async |mut req| {
            *req.uri_mut() = format!("{base}{}", req.uri()).parse().unwrap();
            send(&h2, req).await
        },
        &upstream,
        Some(http::Version::HTTP_2),
    )
    .await;
    // The upstream hop is HTTP/1.1 whatever the downstream spoke.
    assert!(upstream
        .requests()
        .iter()
        .all(|s| s.version == http::Version::HTTP_11));
}
