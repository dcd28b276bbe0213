//! Escalation, idempotent synthesis and rate limits, unregistered pairs, persistence,
//! revocation, patterns, recipe edits.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_rejections_of_a_task_tell_the_agent_to_escalate() {
    let r = Rcns::start("").await;
    let mut impossible = reserve(false);
    impossible["endpoint"]["path"] = json!("/nowhere");
    for n in 1..=4u64 {
        let (parts, b) = r.propose("tok-a", impossible.clone()).await;
        assert_eq!(parts.status.as_u16(), 463);
        assert_eq!(b["rejections"], n);
        assert_eq!(b["escalate"].as_bool(), (n >= 3).then_some(true), "{b}");
    }
    // Another agent's count is its own.
    let (_, b) = r.propose("tok-b", impossible).await;
    assert_eq!(
        (b["rejections"].as_u64(), b.get("escalate")),
        (Some(1), None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_gives_the_same_synthesis_and_proposals_are_rate_limited() {
    let r = Rcns::start("rate_limit = 6\nmax_contracts_per_agent = 3\n").await;
    let claim = FULL.join(" ");
    let body = json!({"method": "PROPOSE", "parameters": reserve(false)});
    let keyed = |key: &'static str| {
        vec![
            ("allow-rcns", "true"),
            ("authority-scope", claim.as_str()),
            ("idempotency-key", key),
        ]
    };
    let (p1, b1) = r
        .call("PROPOSE", "/", Some("tok-a"), &keyed("k-1"), Some(&body))
        .await;
    let (p2, b2) = r
        .call("PROPOSE", "/", Some("tok-a"), &keyed("k-1"), Some(&body))
        .await;
    assert_eq!((p1.status.as_u16(), p2.status.as_u16()), (263, 263));
    assert_eq!(b1, b2, "the same synthesis, answered again");
    assert_eq!(
        p2.headers["contract-synthesized"],
        b1["synthesis_id"].as_str().unwrap()
    );
    // The same key with another body is not a replay.
    let other = json!({"method": "PROPOSE", "parameters": reserve(true)});
    let reused = r
        .call("PROPOSE", "/", Some("tok-a"), &keyed("k-1"), Some(&other))
        .await;
    assert_refused(&r, reused, 422, "ERR_IDEMPOTENCY_KEY_REUSED", None).await;
    // Another agent's same key is another contract.
    let (_, bb) = r
        .call("PROPOSE", "/", Some("tok-b"), &keyed("k-1"), Some(&body))
        .await;
    assert_ne!(bb["synthesis_id"], b1["synthesis_id"]);
    // agent-a holds one contract (k-1); two more reach max_contracts_per_agent = 3, and
    // its sixth PROPOSE of the minute is refused by the cap.
    for _ in 0..2 {
        let (parts, b) = r.propose("tok-a", reserve(false)).await;
        assert_eq!(parts.status.as_u16(), 263, "{b}");
    }
    let capped = r.propose("tok-a", reserve(false)).await;
    assert_refused(&r, capped, 463, "ERR_RCNS_REJECTED", Some("policy-refused")).await;
    // The seventh is over rcns.rate_limit = 6.
    let (parts, b) = r.propose("tok-a", reserve(false)).await;
    assert_eq!(parts.status.as_u16(), 429, "{b}");
    assert_eq!(b["code"], "ERR_RATE_LIMITED");
    let retry: u64 = parts.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry));
    // agent-b is not limited by agent-a's rate; its own cap holds.
    for _ in 0..2 {
        let (parts, b) = r.propose("tok-b", reserve(false)).await;
        assert_eq!(parts.status.as_u16(), 263, "{b}");
    }
    let capped = r.propose("tok-b", reserve(false)).await;
    assert_refused(&r, capped, 463, "ERR_RCNS_REJECTED", Some("policy-refused")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregistered_pair_is_answered_by_the_delivery_mode() {
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-1", "qty": 3, "warehouse": "BER-1", "order": "SO-1234"});
    let consent = [("allow-rcns", "true"), ("authority-scope", claim.as_str())];
    let confirm = Rcns::start("").await;
    let answer = confirm
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &consent,
            Some(&input),
        )
        .await;
    let b = assert_refused(&confirm, answer, 461, "ERR_RCNS_PROPOSE_FIRST", None).await;
    assert_eq!(b["patterns"][0]["recipe_name"], "reserve-stock");
    assert_eq!(b["propose"], "/.well-known/agtp/propose");
    // Without Allow-RCNS it is an ordinary request to a pair no binding serves.
    let (parts, plain) = confirm
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &[],
            Some(&input),
        )
        .await;
    assert_eq!(plain["code"], "ERR_UNBOUND_OPERATION", "{plain}");
    assert_eq!(parts.status, StatusCode::NOT_FOUND);

    let optimistic = Rcns::start("delivery = \"optimistic\"\n").await;
    let (parts, b) = optimistic
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &consent,
            Some(&input),
        )
        .await;
    assert_eq!(parts.status.as_u16(), 263, "{b}");
    assert_eq!(
        parts.headers["contract-synthesized"],
        b["synthesis_id"].as_str().unwrap()
    );
    assert_eq!(b["negotiation_origin"], "rcns-gate");
    assert_eq!(b["contract_hash"].as_str().unwrap(), independent_hash(&b));
    // The gate holds for the implicit route too.
    let low = optimistic
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-low"),
            &consent,
            Some(&input),
        )
        .await;
    assert_refused(
        &optimistic,
        low,
        464,
        "ERR_RCNS_REFUSED",
        Some("trust-tier-insufficient"),
    )
    .await;
    assert!(optimistic.s.upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contracts_survive_a_restart_and_revocation_is_the_operators() {
    let r = Rcns::start("").await;
    let (_, kept) = r.propose("tok-a", reserve(true)).await;
    let (_, other) = r.propose("tok-a", reserve(false)).await;
    let id = kept["synthesis_id"].as_str().unwrap().to_owned();
    // Restart on the same store (SIGKILL: nothing is flushed on the way out).
    let Rcns { s, b, _bundle } = r;
    let Setup { upstream, p } = s;
    let dir = kill_and_keep_state(p);
    let extra = config(&b, dir.path(), "");
    let text = write_config(&upstream, dir.path(), "", &extra);
    let r = Rcns {
        s: Setup {
            upstream,
            p: Palisade::start_in(dir, &text),
        },
        b,
        _bundle,
    };
    let (s, view) = r.get("INSPECT", &format!("/contracts/{id}"), "tok-a").await;
    assert_eq!(s, StatusCode::OK, "{view}");
    assert_eq!(view["contract_hash"], kept["contract_hash"]);

    // Revocation: admin only, then 464 contract-revoked is what the agent learns on INSPECT's
    // list (gone) and the view (marked).
    let (status, _) = admin_post(
        r.s.p.admin,
        &format!("/admin/v1/rcns/contracts/{id}/revoke"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, view) = r.get("INSPECT", &format!("/contracts/{id}"), "tok-a").await;
    assert_eq!(view["revoked"], true);
    assert_eq!(
        view["contract_hash"], kept["contract_hash"],
        "revocation is state, not contract"
    );
    let (_, list) = r.get("DISCOVER", "/contracts", "tok-a").await;
    let ids: Vec<&Value> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["synthesis_id"])
        .collect();
    assert_eq!(ids, vec![&other["synthesis_id"]]);
    let (status, _) = admin_post(r.s.p.admin, "/admin/v1/rcns/contracts/syn_none/revoke").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, listed) = admin_get(r.s.p.admin, "/admin/v1/rcns/contracts").await;
    assert_eq!(status, StatusCode::OK);
    assert!(listed.contains(&id));
    // The lifecycle events, in the same sinks as drift events.
    let events = drift_events(&r.s.p);
    let revoked: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "rcns_contract_revoked")
        .collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["synthesis_id"], id.as_str());
    assert!(r.s.upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_is_the_operators_to_refuse() {
    let r = Rcns::start("persistent = false\nsession_ttl = \"10m\"\n").await;
    let (parts, b) = r.propose("tok-a", reserve(true)).await;
    assert_eq!(parts.status.as_u16(), 263);
    assert_eq!(
        (b["persistent"].as_bool(), b["persistent_refused"].as_bool()),
        (Some(false), Some(true))
    );
    assert!(parts.headers.get("session-id").is_some());
    // A session the agent names is kept.
    let claim = FULL.join(" ");
    let body = json!({"method": "PROPOSE", "parameters": reserve(false)});
    let (parts, b) = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[
                ("allow-rcns", "true"),
                ("authority-scope", &claim),
                ("session-id", "ses-agent-7"),
            ],
            Some(&body),
        )
        .await;
    assert_eq!(parts.headers["session-id"], "ses-agent-7");
    assert_eq!(b["session"], "ses-agent-7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_are_listed_even_when_negotiation_is_off() {
    let r = Rcns::start("enabled = false\n").await;
    for (method, path) in [
        ("DISCOVER", "/patterns"),
        ("GET", "/.well-known/agtp/patterns"),
    ] {
        let (parts, doc) = r.call(method, path, None, &[], None).await;
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(doc["rcns_enabled"], false);
        let p = &doc["patterns"][0];
        assert_eq!(
            (p["recipe_name"].as_str(), p["recipe_version"].as_str()),
            (Some("reserve-stock"), Some("1"))
        );
        assert_eq!(
            (p["method"].as_str(), p["path_exact"].as_str()),
            (Some("RESERVE"), Some("/stock-reservations"))
        );
        assert!(p.get("path_regex").is_none());
    }
    let b = assert_refused(
        &r,
        r.propose("tok-a", reserve(false)).await,
        464,
        "ERR_RCNS_REFUSED",
        Some("rcns-disabled"),
    )
    .await;
    assert_eq!(b["lock"], 1);
    let (parts, _) = r.call("DISCOVER", "/nothing", None, &[], None).await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_edit_leaves_existing_contracts_on_their_captured_version() {
    let r = Rcns::start("").await;
    let (_, v1) = r.propose("tok-a", reserve(true)).await;
    // The operator edits the recipe (a new version, another second step) and reloads.
    let mut lock = r.b.lock();
    let mut set = palisade::cli::sample_bundle::recipes();
    set["recipes"][0]["version"] = json!("2");
    set["recipes"][0]["description"] = json!("Sets an item's stock only.");
    set["recipes"][0]["steps"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    set["recipes"][0]["output"] = json!("{item: steps[0], allocation: `null`}");
    let hex = Sha256Digest::of_json(&set).to_hex();
    std::fs::write(r.b.contracts.join(format!("{hex}.json")), set.to_string()).unwrap();
    lock["rcns"]["recipesDigest"] = json!(format!("sha-256:{hex}"));
    std::fs::write(&r.b.lockfile, lock.to_string()).unwrap();
    let (status, doc) = admin_post(r.s.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK, "{doc}");

    let (_, patterns) = r.call("DISCOVER", "/patterns", None, &[], None).await;
    assert_eq!(patterns["patterns"][0]["recipe_version"], "2");
    let (_, old) = r
        .get(
            "INSPECT",
            &format!("/contracts/{}", v1["synthesis_id"].as_str().unwrap()),
            "tok-a",
        )
        .await;
    assert_eq!(old["recipe_lineage"]["recipe_version"], "1");
    assert_eq!(old["contract_hash"], v1["contract_hash"]);
    // A new proposal gets the new version, and a new contract.
    let (_, v2) = r.propose("tok-a", reserve(true)).await;
    assert_eq!(v2["recipe_lineage"]["recipe_version"], "2");
    assert_eq!(v2["endpoint"]["description"], "Sets an item's stock only.");
    assert_ne!(v2["synthesis_id"], v1["synthesis_id"]);
}
