//! OTLP traces and receipt log records (SPEC §16, issue 58) from the real binary to a local
//! collector, decoded by the official `opentelemetry-proto` Python package
//! (`tests/otlp/decode.py`): the spans of an enforced write, a refusal and a read, joined to
//! the clients' traces; the attributes, and no body, query or header value in any of them;
//! the receipts as log records; and a collector that is down costs the requests nothing
//! while the drop counter rises.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use crate::support::writes::*;
use crate::support::*;

/// In every request somewhere a span must never show: a header, a query and a body value.
const CANARY: &str = "c4n4ry-5ecret";

/// The spans and log records the collector received, decoded by `opentelemetry-proto`.
fn decoded(collector: &Receiver) -> Value {
    let posts: Vec<Value> = {
        let bodies = collector.accepted.lock().unwrap();
        let paths = collector.paths.lock().unwrap();
        bodies
            .iter()
            .zip(paths.iter())
            .map(|(b, p)| {
                json!({"path": p, "body": base64::engine::general_purpose::STANDARD.encode(b)})
            })
            .collect()
    };
    let python =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pyenv/bin/python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/otlp/decode.py");
    let mut child = std::process::Command::new(python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the test venv (scripts/test.sh makes it)");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&posts).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "decode.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn spans_of<'a>(all: &'a Value, trace: &str) -> Vec<&'a Value> {
    all["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["trace_id"] == trace)
        .collect()
}

/// [`decoded`], again only when the collector has received more since `seen`.
fn decoded_if_more(collector: &Receiver, seen: &mut usize, all: &mut Value) -> bool {
    let n = collector.accepted.lock().unwrap().len();
    if n == *seen {
        return false;
    }
    *seen = n;
    *all = decoded(collector);
    true
}

/// The trace's server span (kind 2) and its children by name.
fn server_and_children<'a>(spans: &[&'a Value]) -> (&'a Value, Vec<&'a str>) {
    let server: Vec<&&Value> = spans.iter().filter(|s| s["kind"] == 2).collect();
    assert_eq!(server.len(), 1, "one server span: {spans:#?}");
    let server = *server[0];
    let mut children: Vec<&str> = spans
        .iter()
        .filter(|s| s["parent_span_id"] == server["span_id"])
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    children.sort_unstable();
    (server, children)
}

fn otlp_config(endpoint: &str, extra: &str) -> String {
    format!("[telemetry]\notlp = {{ endpoint = \"{endpoint}\", timeout = \"2s\"{extra} }}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_a_refusal_and_a_read_are_spans_of_the_clients_traces() {
    let collector = Receiver::start(0, StatusCode::OK).await;
    let endpoint = format!("http://{}", collector.addr);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"no-archive\"\non = [\"PUT /items/archive\"]\naction = \"deny\"\n",
    )
    .unwrap();
    let s = start_in(
        Upstream::start().await,
        dir,
        &format!(
            "{}[rules]\nfile = \"{}\"\n",
            otlp_config(&endpoint, ", sample = 1.0, receipts = true"),
            rules.display()
        ),
    );
    let client = http1_client();
    let (t_write, t_refused, t_read) = (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "5bf92f3577b34da6a3ce929d0e0e4737",
        "6bf92f3577b34da6a3ce929d0e0e4738",
    );
    let parent = "00f067aa0ba902b7";
    let traceparent = |t: &str| format!("00-{t}-{parent}-01");

    // An enforced write, with a secret in a header and in the body.
    let key = KeyPair::from_seed(AGENT_SEED);
    let path = "/items/traced";
    let lease = lease_for(&key, path, 1, |_| {});
    let mut req = put(&s.p, path, Some(&lease), Some(&inverse_for(path)));
    req.headers_mut()
        .insert("traceparent", traceparent(t_write).parse().unwrap());
    req.headers_mut()
        .insert("x-api-key", CANARY.parse().unwrap());
    req.headers_mut()
        .insert("tracestate", format!("vendor={CANARY}").parse().unwrap());
    *req.body_mut() = full(format!(r#"{{"qty":1150,"note":"{CANARY}"}}"#));
    let (written, _) = send(&client, req).await;
    assert_eq!(written.status, StatusCode::OK);
    let write_receipt = envelope_of(&written.headers);

    // A refusal: no lease.
    let mut req = put(&s.p, "/items/refused", None, None);
    req.headers_mut()
        .insert("traceparent", traceparent(t_refused).parse().unwrap());
    let (refused, body) = send(&client, req).await;
    assert!(refused.status.is_client_error());
    let problem: Value = serde_json::from_slice(&body).unwrap();
    let refusal_receipt = envelope_of(&refused.headers);

    // A rule's denial.
    let t_denied = "8bf92f3577b34da6a3ce929d0e0e473a";
    let lease = lease_for(&key, "/items/archive", 1, |_| {});
    let mut req = put(
        &s.p,
        "/items/archive",
        Some(&lease),
        Some(&inverse_for("/items/archive")),
    );
    req.headers_mut()
        .insert("traceparent", traceparent(t_denied).parse().unwrap());
    let (denied, _) = send(&client, req).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);

    // A pass-through read with a secret in its query and a header.
    let req = Request::get(s.p.url(&format!("/items/7?token={CANARY}")))
        .header("traceparent", traceparent(t_read))
        .header("authorization", format!("Bearer {CANARY}"))
        .body(full(""))
        .unwrap();
    let (read, _) = send(&client, req).await;
    assert_eq!(read.status, StatusCode::OK);

    // A read without a traceparent is a root span whose trace the upstream is told.
    let req = Request::get(s.p.url("/items/8")).body(full("")).unwrap();
    assert_eq!(send(&client, req).await.0.status, StatusCode::OK);

    let (mut all, mut seen) = (Value::Null, 0);
    wait::until(
        "the collector has the five traces and three receipts",
        Duration::from_secs(10),
        || {
            if !decoded_if_more(&collector, &mut seen, &mut all) {
                return false;
            }
            let traces = [t_write, t_refused, t_read, t_denied]
                .iter()
                .all(|t| spans_of(&all, t).iter().any(|s| s["kind"] == 2));
            let roots = all["spans"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["kind"] == 2)
                .count();
            traces && roots >= 5 && all["logs"].as_array().unwrap().len() >= 3
        },
    )
    .await;

    // The write: a child of the client's span, its children the lease's check, the store's
    // waits and the upstream calls; the facts the client was answered with.
    let spans = spans_of(&all, t_write);
    let (server, children) = server_and_children(&spans);
    assert_eq!(server["parent_span_id"], parent);
    assert_eq!(
        children,
        [
            // The pre-image fetch, then the write itself.
            "GET",
            "PUT",
            "palisade.lease.verify",
            "palisade.store.advance",
            "palisade.store.lock",
            "palisade.store.receipt"
        ],
        "{spans:#?}"
    );
    let a = &server["attributes"];
    assert_eq!(a["http.request.method"], "PUT");
    assert_eq!(a["url.path"], path);
    assert_eq!(a["http.response.status_code"], 200);
    assert_eq!(a["palisade.decision"], "forwarded");
    assert_eq!(a["palisade.fence_epoch"], 1);
    assert_eq!(
        a["palisade.operation"],
        write_receipt["receipt"]["operation"]
    );
    assert_eq!(server["name"], "PUT");
    assert_eq!(a["palisade.receipt_index"], write_receipt["index"]);
    assert!(a.get("palisade.code").is_none(), "{a}");
    assert_eq!(server["resource"]["service.name"], "palisade");
    let upstream_span = spans.iter().find(|s| s["name"] == "PUT").unwrap();
    assert_eq!(upstream_span["kind"], 3, "a client span");
    assert_eq!(
        upstream_span["attributes"]["http.response.status_code"],
        200
    );
    // The upstream was told the upstream call's span is the parent of its work.
    let seen = s.upstream.requests();
    let put_seen = seen.iter().find(|r| r.method == "PUT").unwrap();
    assert_eq!(
        put_seen.headers["traceparent"],
        format!(
            "00-{t_write}-{}-01",
            upstream_span["span_id"].as_str().unwrap()
        )
    );

    // The refusal: its code and receipt, no upstream call.
    let spans = spans_of(&all, t_refused);
    let (server, children) = server_and_children(&spans);
    let a = &server["attributes"];
    assert_eq!(a["palisade.decision"], "refused");
    assert_eq!(a["palisade.code"], problem["code"]);
    assert_eq!(a["http.response.status_code"], refused.status.as_u16());
    assert_eq!(a["palisade.receipt_index"], refusal_receipt["index"]);
    assert_eq!(children, ["palisade.store.receipt"], "{spans:#?}");
    assert!(!seen.iter().any(|r| r.path_and_query == "/items/refused"));

    // The rule's denial names the rule.
    let spans = spans_of(&all, t_denied);
    let (server, _) = server_and_children(&spans);
    assert_eq!(server["attributes"]["palisade.rule"], "no-archive");
    assert_eq!(server["attributes"]["palisade.decision"], "refused");
    assert!(!seen
        .iter()
        .any(|r| r.path_and_query == "/items/archive" && r.method == "PUT"));

    // The read: forwarded, one upstream call, no code, no receipt.
    let spans = spans_of(&all, t_read);
    let (server, children) = server_and_children(&spans);
    let a = &server["attributes"];
    assert_eq!(a["palisade.decision"], "forwarded");
    assert_eq!(a["url.path"], "/items/7");
    assert!(a.get("palisade.code").is_none() && a.get("palisade.receipt_index").is_none());
    assert_eq!(children, ["GET"]);

    // The untraced read: a root span, the upstream got its trace.
    let root = all["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == 2 && s["attributes"]["url.path"] == "/items/8")
        .unwrap();
    assert_eq!(root["parent_span_id"], "");
    let got = seen
        .iter()
        .find(|r| r.path_and_query == "/items/8")
        .unwrap();
    let tp = got.headers["traceparent"].to_str().unwrap();
    assert!(
        tp.starts_with(&format!("00-{}-", root["trace_id"].as_str().unwrap())),
        "{tp}"
    );

    // No value of a body, query or header in any span, attribute or record attribute.
    let text = all["spans"].to_string();
    assert!(!text.contains(CANARY), "a secret reached a span: {text}");
    for log in all["logs"].as_array().unwrap() {
        assert!(!log["attributes"].to_string().contains(CANARY));
    }

    // The receipts as log records: the body is the receipt's JCS, index and trace beside it.
    let logs = all["logs"].as_array().unwrap();
    for envelope in [&write_receipt, &refusal_receipt] {
        let record = logs
            .iter()
            .find(|l| l["attributes"]["palisade.receipt_index"] == envelope["index"])
            .unwrap_or_else(|| panic!("no record of receipt {}: {logs:#?}", envelope["index"]));
        let body: Value = serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
        assert_eq!(body, envelope["receipt"]);
        assert_eq!(record["body_is_jcs"], true);
        assert_eq!(record["trace_id"], envelope["receipt"]["trace_id"]);
        assert_eq!(record["event_name"], "palisade.receipt");
        assert_eq!(record["resource"]["service.name"], "palisade");
        assert_eq!(
            record["attributes"]["palisade.receipt_kind"],
            envelope["receipt"]["kind"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_down_requests_pass_and_the_drop_counter_rises() {
    // A port nothing listens on.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let s = start_in(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        &otlp_config(&format!("http://{down}"), ", receipts = true"),
    );
    let client = http1_client();
    for i in 0..20 {
        let req = Request::get(s.p.url(&format!("/items/{i}")))
            .body(full(""))
            .unwrap();
        assert_eq!(send(&client, req).await.0.status, StatusCode::OK);
    }
    let key = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&key, "/items/w", 1, |_| {});
    let req = put(
        &s.p,
        "/items/w",
        Some(&lease),
        Some(&inverse_for("/items/w")),
    );
    assert_eq!(send(&client, req).await.0.status, StatusCode::OK);
    let dropped = |text: &str, name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{reason=\"export_failed\"}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let last = std::sync::Mutex::new(String::new());
    let (admin, last_ref) = (s.p.admin, &last);
    wait::until_async(
        "the failed exports are counted",
        Duration::from_secs(15),
        || async move {
            let text = admin_get(admin, "/metrics").await.1;
            let done = dropped(&text, "palisade_otlp_spans_dropped_total") >= 21
                && dropped(&text, "palisade_otlp_records_dropped_total") >= 1;
            *last_ref.lock().unwrap() = text;
            done
        },
    )
    .await;
    let text = last.into_inner().unwrap();
    assert!(
        text.contains("palisade_otlp_spans_dropped_total{reason=\"queue_full\"} 0"),
        "{text}"
    );
    assert!(
        s.p.logs().contains("OTLP export of spans failed"),
        "{}",
        s.p.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sample_share_decides_for_roots_and_a_sampled_client_for_its_trace() {
    let collector = Receiver::start(0, StatusCode::OK).await;
    let s = start_in(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        &otlp_config(&format!("http://{}", collector.addr), ", sample = 0.0"),
    );
    let client = http1_client();
    for i in 0..10 {
        let req = Request::get(s.p.url(&format!("/items/{i}")))
            .body(full(""))
            .unwrap();
        assert_eq!(send(&client, req).await.0.status, StatusCode::OK);
    }
    let trace = "7bf92f3577b34da6a3ce929d0e0e4739";
    for flags in ["00", "01"] {
        let req = Request::get(s.p.url(&format!("/items/flag{flags}")))
            .header(
                "traceparent",
                format!("00-{trace}-00f067aa0ba902b7-{flags}"),
            )
            .body(full(""))
            .unwrap();
        assert_eq!(send(&client, req).await.0.status, StatusCode::OK);
    }
    // The requests were sequential and one task exports in order: once the last one's span
    // is in, any span of an earlier one would be too.
    let (mut all, mut seen) = (Value::Null, 0);
    wait::until("the sampled client's span", Duration::from_secs(10), || {
        decoded_if_more(&collector, &mut seen, &mut all) && !spans_of(&all, trace).is_empty()
    })
    .await;
    let servers: Vec<&Value> = all["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == 2)
        .collect();
    assert_eq!(servers.len(), 1, "{servers:#?}");
    assert_eq!(servers[0]["attributes"]["url.path"], "/items/flag01");
}
