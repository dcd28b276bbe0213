//! Operator rules on PostgreSQL (SPEC §15, issue 56): a hold that runs out, rejected once
//! across replicas.

use super::*;

/// A write an operator's rule holds until its `expires` (SPEC §15), left undecided: every
/// replica looks each second, and exactly one rejects it (one rejection receipt in the log,
/// one drift event); nothing is forwarded, and an approval after it finds nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_that_runs_out_is_rejected_once_across_replicas() {
    let fleet = Fleet::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"hold-briefly\"\non = [\"PUT /items/held-briefly\"]\n\
         action = \"hold\"\nexpires = \"1s\"\n",
    )
    .unwrap();
    let extra = format!("[rules]\nfile = \"{}\"\n", rules.display());
    let replicas: Vec<Palisade> = (0..3)
        .map(|_| fleet.replica_configured(&fleet.socket, &extra))
        .collect();
    let agent = KeyPair::from_seed(AGENT_SEED);
    let path = "/items/held-briefly";
    let lease = lease_for(&agent, path, 1, |_| {});
    let held = got(try_send(leased_put(
        &replicas[1].url(""),
        path,
        &lease,
        None,
        r#"{"qty":1}"#,
    ))
    .await);
    assert_eq!(held.status, Some(StatusCode::ACCEPTED), "{held:?}");
    let state = || {
        fleet
            .cluster
            .query("SELECT convert_from(record, 'UTF8')::json->>'state' FROM escrows")
    };
    assert_eq!(state(), "held");
    wait::until(
        "the hold runs out and is rejected",
        Duration::from_secs(10),
        || state() == "rejected",
    )
    .await;
    // Every replica looks twice more after it (each look reads the escrows): none rejects
    // it again.
    let rejected = "SELECT count(*) FROM log_entries WHERE position('\"outcome\":\"expired\"' in convert_from(entry, 'UTF8')) > 0";
    let looks = |p: &Palisade| {
        let m = metrics_text(p);
        m.lines()
            .find_map(|l| l.strip_prefix("palisade_hold_expiry_looks_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let seen: Vec<u64> = replicas.iter().map(looks).collect();
    wait::until(
        "every replica looks twice more",
        Duration::from_secs(10),
        || replicas.iter().zip(&seen).all(|(p, s)| looks(p) >= s + 2),
    )
    .await;
    assert_eq!(fleet.cluster.query(rejected), "1", "one rejection receipt");
    let code = fleet
        .cluster
        .query("SELECT convert_from(record, 'UTF8')::json->>'code' FROM escrows");
    assert_eq!(code, "ERR_POLICY_DENIED");
    assert_eq!(
        fleet
            .upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == path)
            .count(),
        0
    );
}

/// A replica's `/metrics`, as Prometheus reads it.
fn metrics_text(p: &Palisade) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(p.admin).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}
