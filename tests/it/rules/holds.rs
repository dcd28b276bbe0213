//! Held writes under operator rules: expiry, Slack notices, the approval register, and a
//! deny in force at release.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_undecided_at_its_expiry_is_rejected_and_nothing_is_forwarded() {
    let rules = "[[rule]]\nname = \"brief\"\non = [\"PUT /orders/brief\"]\naction = \"hold\"\nexpires = \"1s\"\n";
    let (s, _, _dir) = sidecar(rules).await;
    let a = write(&s, "/orders/brief", json!({"qty": 1}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let id = a.doc["escrow_id"].as_str().unwrap().to_owned();
    let status = || {
        let (_, body) = curl(
            &s.p,
            "GET",
            &format!("/admin/v1/escrow/{id}"),
            Some("tok-alice"),
        );
        serde_json::from_str::<Value>(&body).unwrap_or(Value::Null)
    };
    assert_eq!(status()["state"], "held");
    wait::until(
        "the hold runs out",
        std::time::Duration::from_secs(10),
        || status()["state"] == "rejected",
    )
    .await;
    assert_eq!(status()["code"], "ERR_POLICY_DENIED");
    let e = events(&s)
        .into_iter()
        .find(|e| e["code"] == "ERR_POLICY_DENIED")
        .expect("a policy event for the expired hold");
    assert_eq!(e["diagnostics"]["rule"], "brief");
    // An approval now finds nothing held; nothing was ever forwarded.
    let (code, body) = curl(
        &s.p,
        "POST",
        &format!("/admin/v1/escrow/{id}/approve"),
        Some("tok-alice"),
    );
    assert_eq!(code, 409, "{body}");
    assert_eq!(puts_to(&s, "/orders/brief"), 0);
}

/// `escrow.webhook_format = "slack"`: one message per held write, in the shape Slack's
/// incoming webhooks document (an object: `text`, the fallback, and `blocks`, here one
/// `section` of `mrkdwn` text, at most 3,000 characters), naming the operation's template,
/// the rule, the approvals needed and the console link, and no value of the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_is_announced_to_slack_in_its_documented_shape() {
    let receiver = Receiver::start(0, StatusCode::OK).await;
    let extra = format!(
        "[escrow]\nwebhook = \"{}\"\nwebhook_format = \"slack\"\nconsole_url = \"https://palisade-admin.example/ui/\"\n",
        receiver.url()
    );
    let (s, _, _dir) = sidecar_with(RULES, &extra).await;
    let a = write(
        &s,
        "/orders/big",
        json!({"qty": 20000, "note": "secret-7731"}),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let id = a.doc["escrow_id"].as_str().unwrap().to_owned();
    wait::until(
        "the hold is announced",
        std::time::Duration::from_secs(10),
        || !receiver.accepted.lock().unwrap().is_empty(),
    )
    .await;
    let bodies = receiver.accepted.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "one message, not a batch");
    let raw = String::from_utf8(bodies[0].to_vec()).unwrap();
    let msg: Value = serde_json::from_str(&raw).unwrap();
    // Slack's incoming-webhook payload: an object with `text` and optional `blocks`.
    let obj = msg.as_object().expect("an object, not an array");
    assert!(obj.keys().all(|k| k == "text" || k == "blocks"), "{msg}");
    let text = msg["text"].as_str().unwrap();
    assert!(!text.is_empty() && text.len() <= 40_000, "{msg}");
    let blocks = msg["blocks"].as_array().unwrap();
    assert!(!blocks.is_empty() && blocks.len() <= 50, "{msg}");
    for b in blocks {
        assert_eq!(b["type"], "section", "{msg}");
        assert!(
            matches!(b["text"]["type"].as_str(), Some("mrkdwn" | "plain_text")),
            "{msg}"
        );
        assert!(b["text"]["text"].as_str().unwrap().len() <= 3000, "{msg}");
    }
    let shown = blocks[0]["text"]["text"].as_str().unwrap();
    assert!(shown.contains("`PUT /orders/big`"), "{shown}");
    assert!(shown.contains("`big-orders`"), "{shown}");
    assert!(shown.contains("*Approvals needed:* 2"), "{shown}");
    assert!(
        shown.contains(&format!(
            "<https://palisade-admin.example/ui/#/escrow/{id}|"
        )),
        "{shown}"
    );
    for value in ["20000", "secret-7731"] {
        assert!(
            !raw.contains(value),
            "a request value in the message: {raw}"
        );
    }
}

/// The approval register (`GET /admin/v1/approvals`): every approval and rejection of a
/// scenario with two approvers, from the receipt log, as JSON lines and as CSV.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_register_lists_every_decision_of_two_approvers() {
    let (s, _, _dir) = sidecar(RULES).await;
    let a = write(&s, "/orders/big", json!({"qty": 20000}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let first = a.doc["escrow_id"].as_str().unwrap().to_owned();
    let decide = |id: &str, what: &str, token: &str| {
        let (code, body) = curl(
            &s.p,
            "POST",
            &format!("/admin/v1/escrow/{id}/{what}"),
            Some(token),
        );
        assert!(code < 300, "{what}: {code} {body}");
    };
    decide(&first, "approve", "tok-alice");
    decide(&first, "approve", "tok-bob");
    // The resource's next epoch: a second big order, rejected by bob.
    let a = write_at(&s, "/orders/big", 2, json!({"qty": 30000}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let second = a.doc["escrow_id"].as_str().unwrap().to_owned();
    decide(&second, "reject", "tok-bob");

    let (code, body) = curl(&s.p, "GET", "/admin/v1/approvals", Some("tok-alice"));
    assert_eq!(code, 200, "{body}");
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(String, String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["escrow_id"].as_str().unwrap().to_owned(),
                l["approver"].as_str().unwrap().to_owned(),
                l["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (first.clone(), "alice".to_owned(), "approved".to_owned()),
            (first.clone(), "bob".to_owned(), "approved".to_owned()),
            (second.clone(), "bob".to_owned(), "rejected".to_owned()),
        ],
        "{body}"
    );
    // Each decision names the operation and the rule that held the write, and what became
    // of the write: the first released, the second rejected.
    for l in &lines {
        assert_eq!(l["operation"], "PUT /orders/big", "{l}");
        assert_eq!(l["rule"], "big-orders", "{l}");
    }
    assert_eq!(lines[1]["final"], "released", "{body}");
    assert_eq!(lines[2]["final"], "rejected", "{body}");
    // Each line names its receipt's place in the log, and the register pages by it.
    let after = lines[0]["index"].as_u64().unwrap();
    let (_, body) = curl(
        &s.p,
        "GET",
        &format!("/admin/v1/approvals?after={after}&limit=1"),
        Some("tok-alice"),
    );
    let page: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0]["approver"], "bob");
    // CSV: a header row and one row a decision.
    let (code, csv) = curl(
        &s.p,
        "GET",
        "/admin/v1/approvals?format=csv",
        Some("tok-alice"),
    );
    assert_eq!(code, 200);
    let rows: Vec<&str> = csv.trim_end().split("\r\n").collect();
    assert_eq!(
        rows[0],
        "index,at,escrow_id,operation,rule,outcome,approver,reason,final,request_digest,lease_id,receipt_id"
    );
    assert_eq!(rows.len(), 4, "{csv}");
    assert!(
        rows[3].contains(&second) && rows[3].contains(",rejected,bob,"),
        "{csv}"
    );
}

/// A held write is released only if the rules in force at its release let it go: a `deny`
/// swapped in while it waited refuses it (409, state `refused`, `ERR_POLICY_DENIED`, its
/// rejection receipt naming the rule), and nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_in_force_at_release_refuses_a_held_write() {
    let (s, file, _dir) = sidecar(RULES).await;
    let a = write(&s, "/orders/big", json!({"qty": 20000}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let id = a.doc["escrow_id"].as_str().unwrap().to_owned();
    // A deny on the same operation, ahead of the hold rule: it decides first.
    let denying = format!(
        "[[rule]]\nname = \"stop-big\"\non = [\"PUT /orders/big\"]\naction = \"deny\"\n{RULES}"
    );
    std::fs::write(&file, &denying).unwrap();
    let (code, body) = curl(&s.p, "POST", "/admin/v1/reload", Some("tok-alice"));
    assert_eq!(code, 200, "{body}");
    let approve = |token: &str| {
        curl(
            &s.p,
            "POST",
            &format!("/admin/v1/escrow/{id}/approve"),
            Some(token),
        )
    };
    assert_eq!(approve("tok-alice").0, 202);
    let (code, body) = approve("tok-bob");
    assert_eq!(code, 409, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "refused", "{doc}");
    assert_eq!(doc["code"], "ERR_POLICY_DENIED", "{doc}");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(doc["receipt"]["receipt"]["rule"], "stop-big", "{doc}");
    assert_eq!(
        puts_to(&s, "/orders/big"),
        0,
        "a denied release reached the upstream"
    );
}
