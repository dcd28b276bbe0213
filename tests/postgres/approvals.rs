//! Two approvers at two replicas at once (SPEC §9, issue 39): with
//! `escrow.approvals_required = 2`, alice approves at one replica while bob approves the same
//! held write at another. Each approval either counts (202, or 200 when it releases) or is
//! refused as stale (409) and changes nothing, to be decided again; none is lost silently,
//! and no write is released on one name or twice.

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use super::client::*;
use super::support::writes::*;
use super::support::*;

const ALICE: &str = "tok-alice-pg-1b7";
const BOB: &str = "tok-bob-pg-9e2";

async fn admin(p: &Palisade, path: &str, token: &str) -> (StatusCode, Value) {
    let req = Request::post(format!("http://{}{path}", p.admin))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(full(""))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    let doc = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, doc)
}

async fn read(p: &Palisade, id: &str) -> Value {
    let req = Request::get(format!("http://{}/admin/v1/escrow/{id}", p.admin))
        .header("authorization", format!("Bearer {ALICE}"))
        .body(full(""))
        .unwrap();
    let (_, bytes) = send(&http1_client(), req).await;
    serde_json::from_slice(&bytes).unwrap()
}

pub async fn two_approvers_at_two_replicas(fleet: &super::Fleet) {
    const N: usize = 12;
    let replicas: Vec<Palisade> = (0..2)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            let tokens = dir.path().join("admin-token");
            std::fs::write(&tokens, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
            let extra = format!(
                "kind = \"postgres\"\nurl = \"{}\"\n[ptcl]\npre_image = \"off\"\n\
                 [admin]\naddr = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\
                 [escrow]\napprovals_required = 2\n",
                fleet.socket,
                tokens.display()
            );
            let text = write_config(&fleet.upstream, dir.path(), "", &extra);
            Palisade::start_in(dir, &text)
        })
        .collect();
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut ids = Vec::new();
    for i in 0..N {
        let path = format!("/items/approve-race-{i}");
        let lease = lease_for(&agent, &path, 1, |f| {
            f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
        });
        let (status, _, body) =
            try_send(leased_put(&replicas[0].url(""), &path, &lease, None, "{}"))
                .await
                .unwrap();
        assert_eq!(status, StatusCode::ACCEPTED);
        let doc: Value = serde_json::from_slice(&body).unwrap();
        ids.push(doc["escrow_id"].as_str().unwrap().to_owned());
    }
    let (mut released, mut stale) = (0, 0);
    for id in &ids {
        let path = format!("/admin/v1/escrow/{id}/approve");
        let (a, b) = tokio::join!(
            admin(&replicas[0], &path, ALICE),
            admin(&replicas[1], &path, BOB)
        );
        let doc = read(&replicas[1], id).await;
        let counted: Vec<&str> = [(&a, "alice"), (&b, "bob")]
            .iter()
            .filter(|((s, _), _)| s.is_success())
            .map(|(_, name)| *name)
            .collect();
        for (status, answer) in [&a, &b] {
            assert!(
                [StatusCode::OK, StatusCode::ACCEPTED, StatusCode::CONFLICT].contains(status),
                "{status} {answer}"
            );
        }
        match counted.len() {
            // Both counted: released once, naming both.
            2 => {
                released += 1;
                assert_eq!(doc["state"], "released", "{doc}");
                let mut names: Vec<&str> = doc["approvals"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                names.sort_unstable();
                assert_eq!(names, ["alice", "bob"]);
            }
            // One was refused as stale: still held, with exactly the other's name; the one
            // refused decides again and releases it.
            1 => {
                stale += 1;
                assert_eq!(doc["state"], "held", "{doc}");
                assert_eq!(doc["approvals"], json!(counted));
                let (again, token) = if counted[0] == "alice" {
                    (&replicas[1], BOB)
                } else {
                    (&replicas[0], ALICE)
                };
                let (status, doc) = admin(again, &path, token).await;
                assert_eq!(status, StatusCode::OK, "{doc}");
                assert_eq!(doc["state"], "released", "{doc}");
            }
            _ => panic!("neither approval counted: {a:?} {b:?}"),
        }
    }
    let puts = fleet
        .upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query.starts_with("/items/approve-race-"))
        .count();
    assert_eq!(
        puts, N,
        "each write was released once, on two names, and reached the upstream once"
    );
    eprintln!("{N} races: {released} released, {stale} refused as stale (409)");
}
