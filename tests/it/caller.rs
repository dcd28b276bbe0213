//! One caller per request (issue 35): the identity a lease is granted to, the one its
//! `agent_id` is checked against, the idempotency scope, the escrow's owner, and the `caller` of
//! every receipt and drift event are the same value, worked out once. Real mTLS with client
//! certificates (X.509-SVIDs) from a test CA, and the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use http::{Request, StatusCode};
use serde_json::{json, Value};
use support::writes::*;
use support::*;

const AGENT: &str = "spiffe://erp.example/ns/agents/sa/writer";
const OTHER: &str = "spiffe://erp.example/ns/agents/sa/other";
const LEASES: &str = "/.well-known/ptcl/v1/leases";

/// A sidecar whose data plane asks for client certificates from `pki`'s CA.
fn mtls_sidecar(pki: &Pki, upstream: &Upstream, dir: tempfile::TempDir) -> Palisade {
    pki.write_server("palisade");
    let text = write_config(upstream, dir.path(), "", "").replacen(
        "[listen]\naddr = \"127.0.0.1:0\"\n",
        &format!(
            "[listen]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\", client_ca = \"{}\" }}\n",
            pki.path("server.crt").display(),
            pki.path("server.key").display(),
            pki.path("ca.pem").display()
        ),
        1,
    );
    Palisade::start_in(dir, &text)
}

async fn connect(p: &Palisade, pki: &Pki, who: &str) -> TlsConn {
    let cert = pki.issue_client_spiffe(who);
    TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, Some(&cert)))
        .await
        .unwrap()
}

async fn grant(c: &mut TlsConn, path: &str) -> Value {
    grant_mode(c, path, "COMPENSATING_ACTION").await
}

async fn grant_mode(c: &mut TlsConn, path: &str, mode: &str) -> Value {
    let body = json!({
        "sor_target_uri": format!("{BASE}{path}"),
        "recovery_mode": mode,
        "t_req_ms": 60_000,
        "inverse_payload": serde_json::from_slice::<Value>(&inverse_for(path)).unwrap(),
    });
    let req = Request::post(LEASES)
        .header("content-type", "application/json")
        .body(full(body.to_string()))
        .unwrap();
    let (parts, bytes) = c.send(req).await.unwrap();
    let lease: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::CREATED, "{lease}");
    lease
}

fn leased_put(path: &str, lease: &Value, key: &str) -> Request<BoxBody> {
    Request::put(path)
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease.to_string())
        .header("idempotency-key", key)
        .body(full(r#"{"qty":3}"#))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_svid_caller_is_one_identity_for_lease_receipt_key_and_refusal() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let p = mtls_sidecar(&pki, &upstream, dir);
    let mut agent = connect(&p, &pki, AGENT).await;
    let mut other = connect(&p, &pki, OTHER).await;

    // The grant binds the lease to the SVID's SPIFFE ID, which the agent can read and match.
    let lease = grant(&mut agent, "/items/7").await;
    assert_eq!(lease["agent_id"], AGENT, "{lease}");

    // Another SVID from the same CA is another caller: refused, named as itself in the
    // receipt and the drift event, and the upstream sees nothing.
    let (parts, bytes) = other
        .send(leased_put("/items/7", &lease, "k-1"))
        .await
        .unwrap();
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::FORBIDDEN, "{doc}");
    assert_eq!(doc["code"], "ERR_LEASE_NOT_YOURS");
    assert_eq!(doc["receipt"]["receipt"]["caller"], OTHER, "{doc}");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert!(
        drift_events(&p)
            .iter()
            .any(|e| e["code"] == "ERR_LEASE_NOT_YOURS" && e["caller"] == OTHER),
        "{:?}",
        drift_events(&p)
    );
    assert_eq!(writes_seen(&upstream), 0);

    // Its own caller writes under it; the commit receipt names the same identity.
    let (parts, bytes) = agent
        .send(leased_put("/items/7", &lease, "k-1"))
        .await
        .unwrap();
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let receipt = receipt_of(&parts.headers);
    assert_eq!(receipt["caller"], AGENT);
    assert_eq!(receipt["lease_id"], lease["lease_id"]);
    assert_eq!(writes_seen(&upstream), 1);

    // Idempotency keys are scoped by the same identity: the agent's retry is replayed; the
    // other caller's request with the same key is its own, run under its own lease.
    let (parts, _) = agent
        .send(leased_put("/items/7", &lease, "k-1"))
        .await
        .unwrap();
    assert_eq!(parts.headers["idempotent-replayed"], "true");
    assert_eq!(receipt_of(&parts.headers)["caller"], AGENT);
    let theirs = grant(&mut other, "/items/8").await;
    assert_eq!(theirs["agent_id"], OTHER);
    let (parts, bytes) = other
        .send(leased_put("/items/8", &theirs, "k-1"))
        .await
        .unwrap();
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    assert!(parts.headers.get("idempotent-replayed").is_none());
    assert_eq!(receipt_of(&parts.headers)["caller"], OTHER);
    assert_eq!(writes_seen(&upstream), 2);

    // The lease's record answers its caller only.
    let id = lease["lease_id"].as_str().unwrap();
    let look = || {
        Request::get(format!("{LEASES}/{id}"))
            .body(full(""))
            .unwrap()
    };
    let (parts, _) = agent.send(look()).await.unwrap();
    assert_eq!(parts.status, StatusCode::OK);
    let (parts, bytes) = other.send(look()).await.unwrap();
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::FORBIDDEN, "{doc}");
    assert_eq!(doc["code"], "ERR_LEASE_NOT_YOURS");
}

/// A held write belongs to the caller that sent it: its status answers that caller only, and
/// the release an operator approves leaves a commit receipt naming that caller, not the
/// operator and not nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_escrow_is_receipted_for_the_caller_that_sent_it() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let p = mtls_sidecar(&pki, &upstream, dir);
    let mut agent = connect(&p, &pki, AGENT).await;
    let mut other = connect(&p, &pki, OTHER).await;
    let lease = grant_mode(&mut agent, "/items/9", "HUMAN_ESCROW").await;
    let (parts, bytes) = agent
        .send(leased_put("/items/9", &lease, "k-e"))
        .await
        .unwrap();
    let held: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::ACCEPTED, "{held}");
    let id = held["escrow_id"].as_str().unwrap().to_owned();
    let status = || {
        Request::get(format!("/.well-known/ptcl/v1/escrow/{id}"))
            .body(full(""))
            .unwrap()
    };
    let (parts, _) = agent.send(status()).await.unwrap();
    assert_eq!(parts.status, StatusCode::OK);
    let (parts, _) = other.send(status()).await.unwrap();
    assert_eq!(
        parts.status,
        StatusCode::NOT_FOUND,
        "another caller's escrow"
    );
    assert_eq!(writes_seen(&upstream), 0);

    let (code, doc) = admin_post(p.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(code, StatusCode::OK, "{doc}");
    assert_eq!(doc["state"], "released", "{doc}");
    assert_eq!(doc["receipt"]["receipt"]["kind"], "commit", "{doc}");
    assert_eq!(doc["receipt"]["receipt"]["caller"], AGENT, "{doc}");
    assert!(
        doc.get("caller").is_none(),
        "the status shows no caller: {doc}"
    );
    assert_eq!(writes_seen(&upstream), 1);
}
