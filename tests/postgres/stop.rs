//! Stopping a runaway agent across replicas (SPEC §14, issue 38): a freeze posted at one
//! replica holds at the others within 1 s under load, measured; no write that begins after it
//! took effect at a replica is forwarded there; its removal reaches them the same way. A write
//! budget is one count for the fleet, exact under a race.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::client::*;
use super::support::writes::*;
use super::support::*;

/// One write as a load task saw it: when it began, at which replica, what it got.
struct Seen {
    began: Instant,
    /// When its answer arrived: a refusal shows the freeze in force at the replica by then.
    ended: Instant,
    replica: usize,
    status: Option<StatusCode>,
    code: Option<String>,
}

/// Every write the load tasks have had answered so far, shared with the test as they come.
type Log = Arc<std::sync::Mutex<Vec<Seen>>>;

/// Leased writes to fresh resources from `tasks` clients over `bases`, into `log`, until
/// `stop`.
async fn load(bases: Vec<String>, tasks: usize, log: Log, stop: Arc<AtomicBool>) {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (bases, stop, log) = (bases.clone(), stop.clone(), log.clone());
        handles.push(tokio::spawn(async move {
            let agent = KeyPair::from_seed(AGENT_SEED);
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let replica = (t + n) % bases.len();
                let path = format!("/items/frz-{t}-{n}");
                n += 1;
                let lease = lease_for(&agent, &path, 1, |_| {});
                let began = Instant::now();
                let g = got(try_send(leased_put(&bases[replica], &path, &lease, None, "{}")).await);
                log.lock().unwrap().push(Seen {
                    began,
                    ended: Instant::now(),
                    replica,
                    status: g.status,
                    code: g.code,
                });
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

/// Waits until each of the three replicas has answered at least `n` writes that began after
/// `from` and are `matching`.
async fn until_each(log: &Log, what: &str, n: usize, from: Instant, matching: fn(&Seen) -> bool) {
    wait::until(what, Duration::from_secs(10), || {
        let seen = log.lock().unwrap();
        (0..3).all(|r| {
            seen.iter()
                .filter(|s| s.replica == r && s.began >= from && matching(s))
                .count()
                >= n
        })
    })
    .await;
}

fn forwarded(s: &Seen) -> bool {
    s.status == Some(StatusCode::OK)
}

fn frozen(s: &Seen) -> bool {
    s.code.as_deref() == Some("ERR_FROZEN")
}

async fn admin(p: &Palisade, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin))
        .header("content-type", "application/json")
        .body(full(body.map(|b| b.to_string()).unwrap_or_default()))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Per replica: how long after `from` its last forwarded write began (the freeze took effect
/// there by then), and whether a write that began after one was refused as frozen was
/// forwarded.
fn effect(seen: &[Seen], replica: usize, from: Instant) -> (Duration, bool) {
    let mut mine: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.replica == replica && s.began >= from)
        .collect();
    mine.sort_by_key(|s| s.began);
    let last_ok = mine
        .iter()
        .filter(|s| s.status == Some(StatusCode::OK))
        .map(|s| s.began - from)
        .max()
        .unwrap_or_default();
    // A write refused as frozen shows the freeze in force at the replica by the time its
    // answer came back (not by the time it began: with a runtime per CPU, a write that began
    // earlier may be checked later than one that began after it).
    let frozen_by = mine
        .iter()
        .filter(|s| s.code.as_deref() == Some("ERR_FROZEN"))
        .map(|s| s.ended)
        .min();
    let forwarded_after = frozen_by.is_some_and(|t| {
        mine.iter()
            .any(|s| s.began > t && s.status == Some(StatusCode::OK))
    });
    (last_ok, forwarded_after)
}

pub async fn a_freeze_holds_at_every_replica_within_a_second(fleet: &super::Fleet) {
    let socket = fleet.socket.as_str();
    let replicas = [
        fleet.replica(socket),
        fleet.replica(socket),
        fleet.replica(socket),
    ];
    let bases: Vec<String> = replicas.iter().map(|p| p.url("")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Log::default();
    let start = Instant::now();
    let loading = tokio::spawn(load(bases, 12, log.clone(), stop.clone()));
    until_each(
        &log,
        "10 writes forwarded at each replica",
        10,
        start,
        forwarded,
    )
    .await;

    // Posted at replica 0; in force there before the answer, at the others by their poll.
    let (status, made) = admin(
        &replicas[0],
        "POST",
        "/admin/v1/freeze",
        Some(json!({"scope": "all", "reason": "runaway agent"})),
    )
    .await;
    let answered = Instant::now();
    assert_eq!(status, StatusCode::CREATED, "{made}");
    // The load goes on until each replica has refused ten writes as frozen.
    let what = "10 writes refused as frozen at each replica";
    until_each(&log, what, 10, answered, frozen).await;
    let id = made["id"].as_str().unwrap().to_owned();
    // A write that begins once the removal is sent may be forwarded at the replica that stores
    // it before its answer comes back: the freeze is judged on the writes before this.
    let lifting = Instant::now();
    let (status, lifted) = admin(
        &replicas[1],
        "DELETE",
        &format!("/admin/v1/freeze/{id}"),
        None,
    )
    .await;
    let lifted_at = Instant::now();
    assert_eq!(status, StatusCode::OK, "{lifted}");
    let what = "10 writes forwarded at each replica after the removal";
    until_each(&log, what, 10, lifted_at, forwarded).await;
    stop.store(true, Ordering::Relaxed);
    loading.await.unwrap();
    let seen = std::mem::take(&mut *log.lock().unwrap());

    let (during, after): (Vec<Seen>, Vec<Seen>) = seen.into_iter().partition(|s| s.began < lifting);
    let mut report = Vec::new();
    for r in 0..3 {
        let (took, forwarded_after) = effect(&during, r, answered);
        report.push(format!("replica {r}: {} ms", took.as_millis()));
        assert!(
            took <= Duration::from_secs(1),
            "replica {r}: a write began {took:?} after the freeze's answer and was forwarded"
        );
        assert!(
            !forwarded_after,
            "replica {r}: a write was forwarded after one was refused as frozen"
        );
        assert!(
            during
                .iter()
                .any(|s| s.replica == r && s.code.as_deref() == Some("ERR_FROZEN")),
            "replica {r} refused nothing"
        );
    }
    eprintln!(
        "the freeze held after its answer, under load, at {}",
        report.join(", ")
    );
    // Lifted at replica 1: every replica forwards again, within a second of the answer.
    for r in 0..3 {
        let late_refusal = after
            .iter()
            .filter(|s| s.replica == r && s.code.as_deref() == Some("ERR_FROZEN"))
            .map(|s| s.began.saturating_duration_since(lifted_at))
            .max();
        assert!(
            late_refusal.is_none_or(|d| d <= Duration::from_secs(1)),
            "replica {r}: still frozen {late_refusal:?} after the removal"
        );
        assert!(
            after
                .iter()
                .any(|s| s.replica == r && s.status == Some(StatusCode::OK)),
            "replica {r} forwarded nothing after the removal"
        );
    }
    // The freeze and its removal are in the one log, naming who.
    let (_, list) = admin(&replicas[2], "GET", "/admin/v1/freeze", None).await;
    assert_eq!(list["freezes"], json!([]), "{list}");
    let made = verified_receipt(&made["receipt"]);
    let lifted = verified_receipt(&lifted["receipt"]);
    assert_eq!(
        (made["outcome"].as_str(), lifted["outcome"].as_str()),
        (Some("frozen"), Some("unfrozen"))
    );
}

/// Three replicas with a budget of `N` per minute per caller; `3N` valid writes at once,
/// spread over them: `N` forwarded, the rest 429, and the upstream saw `N`.
pub async fn a_budget_is_one_count_for_the_fleet(fleet: &super::Fleet) {
    const N: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let replicas: Vec<Palisade> = (0..3)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            let extra = format!(
                "kind = \"postgres\"\nurl = \"{}\"\n[ptcl]\npre_image = \"off\"\n[budgets]\nrules = [{{ name = \"fleet\", per = [\"caller\"], limit = {N}, window = \"1m\" }}]\n",
                fleet.socket
            );
            let text = write_config(&fleet.upstream, dir.path(), "", &extra);
            Palisade::start_in(dir, &text)
        })
        .collect();
    drop(dir);
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut tasks = Vec::new();
    for i in 0..3 * N {
        let base = replicas[i % 3].url("");
        let path = format!("/items/budget-{i}");
        let lease = lease_for(&agent, &path, 1, |_| {});
        tasks.push(tokio::spawn(async move {
            let mut req = leased_put(&base, &path, &lease, None, "{}");
            req.headers_mut()
                .insert("authorization", "Bearer fleet-agent".parse().unwrap());
            got(try_send(req).await)
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let g = t.await.unwrap();
        match g.status {
            Some(StatusCode::OK) => ok += 1,
            Some(StatusCode::TOO_MANY_REQUESTS) => {
                assert_eq!(g.code.as_deref(), Some("ERR_WRITE_BUDGET"));
                assert!(g.receipt.is_some(), "a receipted refusal");
            }
            other => panic!("{other:?} {g:?}"),
        }
    }
    assert_eq!(ok, N, "forwarded across the fleet under a budget of {N}");
    let seen = fleet
        .upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query.starts_with("/items/budget-"))
        .count();
    assert_eq!(seen, N, "the upstream saw {seen}");
}
