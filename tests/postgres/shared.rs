//! State every replica shares through the database: the AIP-2.1 relay and RCNS records,
//! through stores and through sidecars.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use http::StatusCode;
use palisade::clock::SetClock;
use serde_json::{json, Value};

use crate::client::*;
use crate::support::writes::*;
use crate::support::*;
use palisade::store::RcnsRecords;
use palisade::store::Relay;

pub fn relay_replicas(replicas: &[&Palisade; 3]) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join("target/pyenv/bin/python");
    assert!(python.exists(), "run scripts/test.sh: it makes the venv");
    let out = Command::new(python)
        .current_dir(repo.join("tests/aip2"))
        .arg("relay_replicas.py")
        .args(replicas.iter().map(|p| p.url("")))
        .output()
        .unwrap();
    if !out.status.success() {
        let logs: Vec<String> = replicas
            .iter()
            .flat_map(|p| p.logs().lines().map(str::to_owned).collect::<Vec<_>>())
            .filter(|l| l.contains("relay") || l.contains("ERROR") || l.contains("WARN"))
            .take(40)
            .collect();
        panic!(
            "relay_replicas.py failed:\n{}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            logs.join("\n")
        );
    }
}

/// An expired relay message is listed nowhere, and the same message posted again is kept
/// anew under a newer cursor (the expired row goes in the same transaction).
pub async fn relay_expiry(url: &str) {
    use palisade::store::{RelayLimits, RelayMessage, RelayPosted, RelayQuery};
    // Two replicas' stores on one clock, moved by the test (the sidecars beside them keep
    // the wall's, which runs no faster: they never see these records expire first).
    let clock = SetClock::at(palisade::clock::WallClock::now_ms());
    let (one, two) = (open_on(url, &clock).await, open_on(url, &clock).await);
    let now_ms = palisade::clock::Clock::now_ms(&*clock);
    let message = |expires_ms| RelayMessage {
        tx_id: format!("0x{}", "e1".repeat(32)),
        signature: format!("0x{}", "5a".repeat(65)),
        parties: [(84532, [7; 20]), (84532, [8; 20])],
        envelope: br#"{"type":"t","message":{}}"#.to_vec(),
        received_at_s: 1,
        expires_ms,
    };
    let limits = RelayLimits {
        per_tx: 50,
        total: 100_000,
    };
    let first = one.relay_post(message(now_ms + 300), limits).await.unwrap();
    let RelayPosted::Stored { cursor } = first else {
        panic!("{first:?}")
    };
    let q = RelayQuery::Tx(format!("0x{}", "e1".repeat(32)));
    assert_eq!(two.relay_page(&q, 0, 50).await.unwrap().len(), 1);
    assert_eq!(
        two.relay_post(message(now_ms + 300), limits).await.unwrap(),
        RelayPosted::Duplicate { cursor }
    );
    clock.advance(Duration::from_millis(400));
    assert!(two.relay_page(&q, 0, 50).await.unwrap().is_empty());
    let inbox = RelayQuery::Party {
        address: [8; 20],
        chain: Some(84532),
    };
    assert!(one.relay_page(&inbox, 0, 100).await.unwrap().is_empty());
    match two
        .relay_post(message(now_ms + 60_000), limits)
        .await
        .unwrap()
    {
        RelayPosted::Stored { cursor: again } => assert!(again > cursor),
        other => panic!("{other:?}"),
    }
    assert_eq!(one.relay_page(&inbox, 0, 100).await.unwrap().len(), 1);
}

/// RCNS records (issue 21) on two stores sharing the database, as two replicas: a contract
/// made through one is found, refused as a duplicate, revoked and listed through the other;
/// the per-agent cap counts both; an expired record is gone and its key free again.
pub async fn rcns_shared(url: &str) {
    use palisade::store::{RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord};
    // Two replicas' stores on one clock, moved by the test (the sidecars beside them keep
    // the wall's, which runs no faster: they never see these records expire first).
    let clock = SetClock::at(palisade::clock::WallClock::now_ms());
    let (one, two) = (open_on(url, &clock).await, open_on(url, &clock).await);
    let now_ms = palisade::clock::Clock::now_ms(&*clock);
    let record = |key: &str, owner: &str, expires_ms| RcnsRecord {
        kind: RcnsKind::Contract,
        key: key.into(),
        owner: owner.into(),
        body: json!({"synthesis_id": key, "revoked": false}),
        expires_ms,
    };
    let create = RcnsPutMode::Create {
        per_owner: 2,
        total: 100,
    };
    let later = now_ms + 60_000;
    assert_eq!(
        one.rcns_put(record("syn_1", "a", later), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
    match two
        .rcns_put(record("syn_1", "a", later), create)
        .await
        .unwrap()
    {
        RcnsPut::Exists(old) => assert_eq!(old.owner, "a"),
        other => panic!("{other:?}"),
    }
    let got = two
        .rcns_get(RcnsKind::Contract, "syn_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.body["synthesis_id"], "syn_1");
    assert_eq!(
        two.rcns_put(record("syn_2", "a", now_ms + 300), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
    assert_eq!(
        one.rcns_put(record("syn_3", "a", later), create)
            .await
            .unwrap(),
        RcnsPut::OwnerFull
    );
    assert_eq!(
        one.rcns_put(record("syn_4", "b", later), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
    let mut revoked = got.clone();
    revoked.body["revoked"] = json!(true);
    assert_eq!(
        two.rcns_put(revoked, RcnsPutMode::Replace).await.unwrap(),
        RcnsPut::Stored
    );
    let seen = one
        .rcns_get(RcnsKind::Contract, "syn_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.body["revoked"], true);
    let mine = one
        .rcns_list(RcnsKind::Contract, Some("a"), 10)
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["syn_1", "syn_2"]
    );
    assert_eq!(
        two.rcns_list(RcnsKind::Contract, None, 10)
            .await
            .unwrap()
            .len(),
        3
    );
    clock.advance(Duration::from_millis(400));
    assert!(two
        .rcns_get(RcnsKind::Contract, "syn_2")
        .await
        .unwrap()
        .is_none());
    // The expired one no longer counts: agent a may hold another.
    assert_eq!(
        two.rcns_put(record("syn_3", "a", later), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
}

/// Two sidecars with the example bundle and `[rcns]` on the shared database: a contract
/// PROPOSEd through one is listed and inspected through the other, revoked on the other's
/// admin API, and seen revoked by the first.
/// Two RCNS replicas on the database, and the id of a persistent contract left in force, for
/// the store-down phase ([`rcns_store_down`]).
pub async fn rcns_replicas(upstream: &Upstream, url: &str) -> (Palisade, Palisade, String) {
    use http::Method;
    let bundle = tempfile::tempdir().unwrap();
    palisade::cli::sample_bundle::write(bundle.path()).unwrap();
    let b = crate::support::bundles::BundleFiles::in_dir(bundle.path());
    let token = "Bearer tok-shared";
    let identity = palisade_policy::caller::authorization_caller(token.as_bytes());
    let identity = identity.trim_start_matches("authz:sha256:");
    let scopes = "rcns:negotiate erp:stock:reserve erp:items:write erp:allocations:write";
    let replica = || {
        let dir = tempfile::tempdir().unwrap();
        let callers = dir.path().join("callers.json");
        let doc = json!({"callers": [{"identity": format!("authz:sha256:{identity}"),
            "agent_id": "agent-shared", "scopes": scopes.split(' ').collect::<Vec<_>>(),
            "trust_tier": 1}]});
        std::fs::write(&callers, doc.to_string()).unwrap();
        let extra = format!(
            "kind = \"postgres\"\nurl = \"{url}\"\n{}[rcns]\ncallers = \"{}\"\n",
            b.rich_toml(""),
            callers.display()
        );
        let text = write_config(upstream, dir.path(), "", &extra);
        Palisade::start_in(dir, &text)
    };
    let (one, two) = (replica(), replica());
    let call = |p: &Palisade, method: &str, path: &str, body: Option<Value>| {
        let req = http::Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(p.url(path))
            .header("authorization", token)
            .header("allow-rcns", "true")
            .header("authority-scope", scopes)
            .body(full(body.map(|b| b.to_string()).unwrap_or_default()))
            .unwrap();
        async move {
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts.status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let proposal = json!({"method": "PROPOSE", "parameters": {"endpoint": {"method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve"}}, "persistent": true}});
    let (status, made) = call(&one, "PROPOSE", "/", Some(proposal)).await;
    assert_eq!(status.as_u16(), 263, "{made}");
    let id = made["synthesis_id"].as_str().unwrap().to_owned();
    let (status, list) = call(&two, "DISCOVER", "/contracts", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list[0]["synthesis_id"], id.as_str(), "{list}");
    let (status, _) = admin_post(two.admin, &format!("/admin/v1/rcns/contracts/{id}/revoke")).await;
    assert_eq!(status, StatusCode::OK);
    let (_, view) = call(&one, "INSPECT", &format!("/contracts/{id}"), None).await;
    assert_eq!(view["revoked"], true, "{view}");
    assert_eq!(view["contract_hash"], made["contract_hash"]);
    let proposal = json!({"method": "PROPOSE", "parameters": {"endpoint": {"method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve again"}},
        "persistent": true}});
    let (status, kept) = call(&two, "PROPOSE", "/", Some(proposal)).await;
    assert_eq!(status.as_u16(), 263, "{kept}");
    let kept = kept["synthesis_id"].as_str().unwrap().to_owned();
    (one, two, kept)
}

/// RCNS while the database is down (issue 21's refusal path): a PROPOSE and an invocation of
/// a contract in force are both 503 `ERR_STORE_UNAVAILABLE`, and the upstream sees nothing.
pub async fn rcns_store_down(replicas: &(Palisade, Palisade, String), upstream: &Upstream) {
    use http::Method;
    let (one, two, id) = replicas;
    let scopes = "rcns:negotiate erp:stock:reserve erp:items:write erp:allocations:write";
    // The load running beside this phase sends `/items/load-*`; anything else is ours.
    let ours = || {
        upstream
            .requests()
            .iter()
            .filter(|r| !r.path_and_query.starts_with("/items/load-"))
            .count()
    };
    let before = ours();
    let call = |p: &Palisade, method: &str, headers: Vec<(&str, String)>, body: Value| {
        let mut req = http::Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(p.url(if method == "PROPOSE" {
                "/"
            } else {
                "/stock-reservations"
            }))
            .header("authorization", "Bearer tok-shared")
            .header("allow-rcns", "true")
            .header("authority-scope", scopes);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let req = req.body(full(body.to_string())).unwrap();
        async move {
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts.status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let proposal = json!({"method": "PROPOSE", "parameters": {"endpoint": {"method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve while down"}}}});
    let (status, body) = call(one, "PROPOSE", vec![], proposal).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "PROPOSE: {body}");
    assert_eq!(body["code"], "ERR_STORE_UNAVAILABLE", "{body}");
    let input = json!({"sku": "BOLT-9", "qty": 4, "warehouse": "BER-1", "order": "SO-1234"});
    let headers = vec![("contract-synthesized", id.clone())];
    let (status, body) = call(two, "RESERVE", headers, input).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "invocation: {body}"
    );
    assert_eq!(body["code"], "ERR_STORE_UNAVAILABLE", "{body}");
    assert_eq!(
        ours(),
        before,
        "no RCNS step reached the upstream while the store was down"
    );
    for p in [one, two] {
        assert!(
            drift_events(p)
                .iter()
                .any(|e| e["code"] == "ERR_STORE_UNAVAILABLE"),
            "no drift event for an RCNS request refused while the store was down"
        );
    }
}
