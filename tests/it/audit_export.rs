//! Audit export (SPEC §9, issue 58) through the real binary: a scenario of writes, refusals,
//! a rule's denial, a hold, its approval and a freeze, then `GET /admin/v1/receipts` for each
//! filter returns exactly the receipts the scenario made of that sort (known by the answers
//! the clients and the operator got, not by reading the export), every exported line verifies
//! against the log with the independent verifier (`tests/log/verify_log.py`), and
//! `palisade audit export` writes the same to stdout, as JSON lines and as CSV.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use crate::support::log_mirror::assert_log_verifies_independently;
use crate::support::writes::*;
use crate::support::*;

const RULES: &str = r#"
[[rule]]
name = "no-archive"
on = ["PUT /items/archive"]
action = "deny"
reason = "the archive is read-only"

[[rule]]
name = "big-items"
on = ["PUT /items/big"]
action = "hold"
approvals = 1
"#;

/// A leased write of `path` from `agent` (a bearer credential, which is what tells callers
/// apart without admission): its status and the receipt it carried, from its header or its
/// problem (and its answer's document).
async fn write_doc(s: &Setup, path: &str, agent: &str, leased: bool) -> (StatusCode, Value, Value) {
    let key = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&key, path, 1, |_| {});
    let mut req = put(
        &s.p,
        path,
        leased.then_some(lease.as_str()),
        Some(&inverse_for(path)),
    );
    req.headers_mut()
        .insert("authorization", format!("Bearer {agent}").parse().unwrap());
    let (parts, body) = send(&http1_client(), req).await;
    let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let receipt = match parts.headers.get("agent-commit-receipt") {
        Some(_) => envelope_of(&parts.headers)["receipt"].clone(),
        None => doc["receipt"]["receipt"].clone(),
    };
    assert!(receipt.is_object(), "{path}: {} {doc}", parts.status);
    (parts.status, receipt, doc)
}

async fn write(s: &Setup, path: &str, agent: &str, leased: bool) -> (StatusCode, Value) {
    let (status, receipt, _) = write_doc(s, path, agent, leased).await;
    (status, receipt)
}

async fn admin(s: &Setup, method: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", s.p.admin))
        .header("content-type", "application/json")
        .body(full(body.to_string()))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// `GET /admin/v1/receipts?query`, every page: the envelopes.
async fn export(s: &Setup, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut next = None::<String>;
    loop {
        let q = match &next {
            Some(a) => format!("{query}&after={a}"),
            None => query.to_owned(),
        };
        let (parts, body) = send(
            &http1_client(),
            Request::get(format!("http://{}/admin/v1/receipts?{q}", s.p.admin))
                .body(full(""))
                .unwrap(),
        )
        .await;
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert_eq!(parts.status, StatusCode::OK, "{q}: {text}");
        out.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
        match parts.headers.get("palisade-next-after") {
            Some(n) => {
                let link = parts.headers["link"].to_str().unwrap();
                assert!(
                    link.ends_with(&format!("after={}>; rel=\"next\"", n.to_str().unwrap())),
                    "{link}"
                );
                next = Some(n.to_str().unwrap().to_owned());
            }
            None => return out,
        }
    }
}

fn ids(envelopes: &[Value]) -> BTreeSet<String> {
    envelopes
        .iter()
        .map(|e| e["receipt"]["receipt_id"].as_str().unwrap().to_owned())
        .collect()
}

fn id(r: &Value) -> String {
    r["receipt_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_export_returns_exactly_the_receipts_each_filter_names() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let s = start_in(
        Upstream::start().await,
        dir,
        &format!("[rules]\nfile = \"{}\"\n", rules.display()),
    );

    // Before `mid`: two writes by agent-a, one by agent-b, a write without a lease, one a
    // rule denies.
    let (st, a1) = write(&s, "/items/a-1", "agent-a", true).await;
    assert_eq!(st, StatusCode::OK);
    let (_, a2) = write(&s, "/items/a-2", "agent-a", true).await;
    let (_, b1) = write(&s, "/items/b-1", "agent-b", true).await;
    let (st, unleased) = write(&s, "/items/b-2", "agent-b", false).await;
    assert!(st.is_client_error(), "{st}");
    let (st, denied) = write(&s, "/items/archive", "agent-a", true).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    // `mid`: a millisecond after the newest receipt so far, once the clock has passed it (a
    // spin of at most a millisecond, not a sleep), so every later receipt is at or after it.
    let last_at = palisade_policy::log::query::at_ms(&denied).unwrap();
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    while now_ms() <= last_at {
        tokio::task::yield_now().await;
    }
    let mid = palisade_policy::lease::format_rfc3339_ms(last_at + 1);

    // After `mid`: a write a rule holds, its approval (and so its release), a freeze.
    let (st, held, doc) = write_doc(&s, "/items/big", "agent-b", true).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{doc}");
    assert_eq!(
        (&held["kind"], &held["rule"]),
        (&json!("escrow"), &json!("big-items"))
    );
    let escrow = doc["escrow_id"].as_str().unwrap().to_owned();
    let (st, approved) = admin(
        &s,
        "POST",
        &format!("/admin/v1/escrow/{escrow}/approve"),
        json!({}),
    )
    .await;
    assert!(st.is_success(), "{st} {approved}");
    let body = json!({"scope": "caller", "value": "someone-else", "reason": "ticket 7"});
    let (st, frozen) = admin(&s, "POST", "/admin/v1/freeze", body).await;
    assert_eq!(st, StatusCode::CREATED, "{frozen}");
    let freeze = frozen["receipt"]["receipt"].clone();

    let everything = export(&s, "").await;
    let all = ids(&everything);
    // The approval's receipt and its release's commit are the two the clients did not see.
    let answered: BTreeSet<String> = [&a1, &a2, &b1, &unleased, &denied, &held, &freeze]
        .iter()
        .map(|r| id(r))
        .collect();
    assert!(answered.is_subset(&all), "{all:?}");
    let unseen: Vec<&Value> = everything
        .iter()
        .map(|e| &e["receipt"])
        .filter(|r| !answered.contains(&id(r)))
        .collect();
    let kinds: BTreeSet<&str> = unseen.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!((unseen.len(), kinds), (2, ["approval", "commit"].into()));
    let approval = id(unseen.iter().find(|r| r["kind"] == "approval").unwrap());
    let released = id(unseen.iter().find(|r| r["kind"] == "commit").unwrap());
    // Oldest first, each once.
    let indexes: Vec<u64> = everything
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "{indexes:?}");

    let set = |rs: &[&Value]| rs.iter().map(|r| id(r)).collect::<BTreeSet<_>>();
    let with = |extra: &[&str]| {
        let mut s = set(&[]);
        s.extend(extra.iter().map(|x| (*x).to_owned()));
        s
    };
    let caller_a = a1["caller"].as_str().unwrap().to_owned();
    let enc = |v: &str| {
        percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    for (query, want) in [
        (
            "kind=commit".to_owned(),
            set(&[&a1, &a2, &b1])
                .union(&with(&[&released]))
                .cloned()
                .collect(),
        ),
        ("outcome=refused".to_owned(), set(&[&unleased, &denied])),
        (
            format!("code={}", unleased["code"].as_str().unwrap()),
            set(&[&unleased]),
        ),
        ("rule=no-archive".to_owned(), set(&[&denied])),
        (
            "code=ERR_POLICY_DENIED&rule=no-archive".to_owned(),
            set(&[&denied]),
        ),
        ("outcome=held".to_owned(), set(&[&held])),
        ("kind=approval".to_owned(), with(&[&approval])),
        ("kind=freeze".to_owned(), set(&[&freeze])),
        (
            format!("caller={}", enc(&caller_a)),
            set(&[&a1, &a2, &denied]),
        ),
        (
            format!("operation={}", enc("PUT /items/big")),
            set(&[&held])
                .union(&with(&[&approval, &released]))
                .cloned()
                .collect(),
        ),
        (
            format!("until={}", enc(&mid)),
            set(&[&a1, &a2, &b1, &unleased, &denied]),
        ),
        (
            format!("since={}", enc(&mid)),
            set(&[&held, &freeze])
                .union(&with(&[&approval, &released]))
                .cloned()
                .collect(),
        ),
        (
            format!("since={}&kind=commit&limit=1", enc(&mid)),
            with(&[&released]),
        ),
        (
            "kind=commit&limit=1".to_owned(),
            set(&[&a1, &a2, &b1])
                .union(&with(&[&released]))
                .cloned()
                .collect(),
        ),
        ("kind=compensation".to_owned(), BTreeSet::new()),
    ] {
        assert_eq!(ids(&export(&s, &query).await), want, "{query}");
    }

    // A filter the export does not know is refused by name, never read as "everything".
    let (parts, body) = send(
        &http1_client(),
        Request::get(format!("http://{}/admin/v1/receipts?callr=x", s.p.admin))
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("callr"));
    // So is a format it does not write, on the register as on the export.
    for path in ["receipts", "approvals"] {
        let (parts, body) = send(
            &http1_client(),
            Request::get(format!("http://{}/admin/v1/{path}?format=xml", s.p.admin))
                .body(full(""))
                .unwrap(),
        )
        .await;
        assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(
            String::from_utf8_lossy(&body).contains("neither jsonl nor csv"),
            "{path}"
        );
    }

    // Every exported line verifies against the log, by a verifier that is not ours.
    let verdict = assert_log_verifies_independently(s.p.admin, &everything).await;
    assert_eq!(verdict["envelopes"], everything.len(), "{verdict}");

    // The command: the same receipts on stdout, JSON lines and CSV (one header row).
    let cli = |format: &str| {
        let o = std::process::Command::new(bin())
            .args([
                "audit",
                "export",
                "--url",
                &format!("http://{}", s.p.admin),
                "--format",
                format,
                "--since",
                &mid,
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let lines: Vec<Value> = cli("jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        ids(&lines),
        ids(&export(&s, &format!("since={}", enc(&mid))).await)
    );
    let csv = cli("csv");
    let rows: Vec<&str> = csv.lines().collect();
    assert!(
        rows[0].starts_with("index,at,kind,receipt_id,operation,"),
        "{csv}"
    );
    assert_eq!(rows.len(), 1 + lines.len(), "{csv}");
    assert!(
        rows.iter().skip(1).all(|r| !r.starts_with("index,")),
        "{csv}"
    );
    // A time that is not one is refused before anything is asked.
    let o = std::process::Command::new(bin())
        .args([
            "audit",
            "export",
            "--url",
            &format!("http://{}", s.p.admin),
            "--since",
            "yesterday",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
