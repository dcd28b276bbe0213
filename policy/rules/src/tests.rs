#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

mod fast;

fn facts<'a>(body: Option<&'a serde_json::Value>) -> Facts<'a> {
    Facts {
        caller: Some("spiffe://cluster.local/ns/prod/sa/agent"),
        operation: "POST /api/v2/orders",
        resource: "https://erp.example/api/v2/orders",
        method: "POST",
        path: "/api/v2/orders",
        query: Some("tag=a&tag=b%20c&x=1+2"),
        body,
        now_ms: 1_765_000_000_000,
        ..Facts::default()
    }
}

fn load(text: &str) -> RuleSet {
    RuleSet::load(text.as_bytes()).unwrap_or_else(|p| panic!("{p:?}"))
}

fn refused(text: &str) -> String {
    RuleSet::load(text.as_bytes()).unwrap_err().join("\n")
}

#[test]
fn the_first_rule_in_force_that_matches_decides() {
    let rules = load(
        r#"
[[rule]]
name = "small-orders"
on = ["POST /api/v2/orders"]
when = 'body.amount < 100'
action = "allow"

[[rule]]
name = "big-orders"
on = ["POST /api/v2/orders"]
when = 'body.amount > 10000.0'
action = "hold"
approvals = 2
expires = "4h"
reason = "orders over 10k need two approvers"

[[rule]]
name = "no-experiments"
when = 'caller.startsWith("spiffe://cluster.local/ns/experiments/")'
action = "deny"
"#,
    );
    let big = json!({"amount": 12000});
    let d = rules.decide(&facts(Some(&big)));
    let m = d.decided.unwrap();
    assert_eq!((&*m.rule, m.action), ("big-orders", Action::Hold));
    assert_eq!(
        (m.approvals, m.expires_ms),
        (Some(2), Some(4 * 3600 * 1000))
    );
    assert!(!m.failed);

    let small = json!({"amount": 5});
    let m = rules.decide(&facts(Some(&small))).decided.unwrap();
    assert_eq!((&*m.rule, m.action), ("small-orders", Action::Allow));

    let middling = json!({"amount": 500});
    assert!(rules.decide(&facts(Some(&middling))).decided.is_none());

    let mut f = facts(Some(&middling));
    f.caller = Some("spiffe://cluster.local/ns/experiments/sa/x");
    assert_eq!(rules.decide(&f).decided.unwrap().action, Action::Deny);
    // Another operation: the scoped rules do not apply, the unscoped one does.
    f.operation = "DELETE /api/v2/orders/{id}";
    assert_eq!(&*rules.decide(&f).decided.unwrap().rule, "no-experiments");
}

#[test]
fn a_rule_in_report_mode_records_and_decides_nothing() {
    let rules = load(
        r#"
[[rule]]
name = "would-deny"
when = 'method == "POST"'
action = "deny"
mode = "report"

[[rule]]
name = "holds"
when = 'true'
action = "hold"
"#,
    );
    let d = rules.decide(&facts(None));
    assert_eq!(d.reported.len(), 1);
    assert_eq!(
        (&*d.reported[0].rule, d.reported[0].action),
        ("would-deny", Action::Deny)
    );
    assert_eq!(&*d.decided.unwrap().rule, "holds");
}

#[test]
fn an_expression_that_fails_matches_deny_and_hold_and_never_allow() {
    let rules = load(
        r#"
[[rule]]
name = "exception"
when = 'body.vip == true'
action = "allow"

[[rule]]
name = "guard"
when = 'body.amount > 10'
action = "deny"
"#,
    );
    // No `vip` and no `amount`: both fail; the allow does not match, the deny does.
    let body = json!({"other": 1});
    let d = rules.decide(&facts(Some(&body)));
    let m = d.decided.unwrap();
    assert_eq!(
        (&*m.rule, m.action, m.failed),
        ("guard", Action::Deny, true)
    );
    assert_eq!(d.failed.len(), 2, "{:?}", d.failed);
    // Not a boolean: a failure too.
    let rules = load("[[rule]]\nname = \"n\"\nwhen = 'body.amount'\naction = \"hold\"\n");
    let body = json!({"amount": 3});
    let d = rules.decide(&facts(Some(&body)));
    assert!(d.decided.unwrap().failed);
    assert!(d.failed[0].1.contains("not a bool"), "{:?}", d.failed);
    // `has()` guards a member that may be missing.
    let rules = load(
        "[[rule]]\nname = \"n\"\nwhen = 'has(body.amount) && body.amount > 10'\naction = \"deny\"\n",
    );
    let d = rules.decide(&facts(Some(&json!({}))));
    assert!(d.decided.is_none() && d.failed.is_empty(), "{d:?}");
}

#[test]
fn every_variable_reads_as_spec_15_says() {
    let annotations = json!({"destructiveHint": true, "readOnlyHint": false});
    let body = json!({"items": [{"qty": 1}, {"qty": 700}], "note": null});
    let mut f = facts(Some(&body));
    f.lease = Some(LeaseFacts {
        recovery_mode: "COMPENSATING_ACTION",
        t_granted_ms: 30_000,
        agent_id: Some("agent-7"),
        issuer: Some("k1"),
    });
    f.tool = Some(ToolFacts {
        name: "create_order",
        annotations: Some(&annotations),
    });
    f.headers = vec![("X-Tenant", "acme")];
    for (when, expect) in [
        (r#"operation == "POST /api/v2/orders""#, true),
        (r#"resource.endsWith("/orders")"#, true),
        (r#"path == "/api/v2/orders" && method == "POST""#, true),
        (r#"query.tag == ["a", "b c"] && query.x == ["1 2"]"#, true),
        (r#"body.items.exists(i, i.qty > 500)"#, true),
        (r#"body.items.all(i, i.qty > 500)"#, false),
        (r#"body.note == null"#, true),
        (
            r#"lease.recovery_mode == "COMPENSATING_ACTION" && lease.t_granted_ms >= 30000"#,
            true,
        ),
        (
            r#"lease.agent_id == "agent-7" && lease.issuer == "k1""#,
            true,
        ),
        (
            r#"tool.name == "create_order" && tool.annotations.destructiveHint"#,
            true,
        ),
        (r#"headers["x-tenant"] == "acme""#, true),
        (r#"now > timestamp("2025-01-01T00:00:00Z")"#, true),
        (
            r#"caller.matches("^spiffe://cluster[.]local/ns/prod/")"#,
            true,
        ),
    ] {
        let rules = load(&format!(
            "[[rule]]\nname = \"r\"\nwhen = '{when}'\naction = \"deny\"\n"
        ));
        let d = rules.decide(&f);
        assert!(d.failed.is_empty(), "{when}: {:?}", d.failed);
        assert_eq!(d.decided.is_some(), expect, "{when}");
    }
    // An HTTP write has no tool and no lease facts here: null.
    let f = facts(None);
    let rules = load("[[rule]]\nname = \"r\"\nwhen = 'tool == null && body == null && lease == null'\naction = \"deny\"\n");
    assert!(rules.decide(&f).decided.is_some());
}

#[test]
fn a_file_with_any_problem_is_refused_whole_and_says_where() {
    for (text, says) in [
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen = 'bdy.amount > 1'\n", "unknown variable `bdy`"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen = 'body.amount >'\n", "does not compile"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen = '1 + 2'\n", "is not a boolean"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen = 'body.a.exists(x, body.b.exists(y, x == y))'\n", "inside another"),
        ("[[rule]]\nname = \"a\"\naction = \"block\"\n", "rule[0].action"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen_ = 'true'\n", "unknown field"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\napprovals = 2\n", "only a hold"),
        ("[[rule]]\nname = \"a\"\naction = \"hold\"\nexpires = \"forever\"\n", "rule[0].expires"),
        ("[[rule]]\nname = \"a\"\naction = \"hold\"\napprovals = 0\n", "1 to 16"),
        ("[[rule]]\nname = \"a b\"\naction = \"deny\"\n", "rule[0].name"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\n[[rule]]\nname = \"a\"\naction = \"hold\"\n", "used twice"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\non = []\n", "empty"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\non = [\"post /x\"]\n", "not an operation"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\nmode = \"dry\"\n", "rule[0].mode"),
        ("[[rule]]\naction = \"deny\"\n", "rule[0].name: required"),
        ("[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen = 'Foo{a: 1} == null'\n", "struct literals"),
    ] {
        let problems = refused(text);
        assert!(problems.contains(says), "{text}\n→ {problems}");
    }
    // Every problem of a file is listed, not only the first.
    let problems =
        refused("[[rule]]\nname = \"a\"\naction = \"x\"\n[[rule]]\nname = \"b\"\naction = \"y\"\n");
    assert!(
        problems.contains("rule[0]") && problems.contains("rule[1]"),
        "{problems}"
    );
}

#[test]
fn the_digest_is_of_the_file_s_bytes() {
    let text = "[[rule]]\nname = \"a\"\naction = \"deny\"\n";
    let rules = load(text);
    assert_eq!(
        *rules.digest(),
        palisade_core::Sha256Digest::of(text.as_bytes())
    );
    assert!(load("").rules().is_empty());
}

#[test]
fn an_expression_that_does_not_compile_is_placed_in_the_file() {
    let text = "[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen = 'body.qty > > 1'\n";
    let problems = refused(text);
    // `when = '` is 8 characters: the expression starts at column 9 of line 4.
    assert!(
        problems.contains("rule[0].when (line 4, column"),
        "{problems}"
    );
    assert!(problems.contains("does not compile"), "{problems}");
    let col: usize = problems
        .split("column ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!((9..=24).contains(&col), "{problems}");
    let text =
        "[[rule]]\nname = \"a\"\naction = \"deny\"\nwhen = '''\nbody.qty > 1 &&\n  body.x >\n'''\n";
    let problems = refused(text);
    assert!(
        problems.contains("(line 6, column") || problems.contains("(line 7, column"),
        "{problems}"
    );
}

#[test]
fn only_the_body_members_rules_read_are_made_and_they_read_the_same() {
    let body = json!({"amount": 12, "lines": [{"qty": 3}], "note": "x"});
    // Member reads alone: the rest of the body is not converted, and reads are unchanged.
    let members = load(
        "[[rule]]\nname = \"a\"\nwhen = 'body.amount > 10 && !has(body.vip)'\naction = \"deny\"\n\
         [[rule]]\nname = \"b\"\nwhen = 'body.lines.exists(l, l.qty > 2)'\naction = \"deny\"\nmode = \"report\"\n",
    );
    assert_eq!(members.body.members, vec!["amount", "vip", "lines"]);
    assert!(!members.body.whole);
    let d = members.decide(&facts(Some(&body)));
    assert!(d.failed.is_empty(), "{:?}", d.failed);
    assert_eq!(&*d.decided.unwrap().rule, "a");
    // A rule that reads the body whole makes it whole, for every rule.
    let whole = load(
        "[[rule]]\nname = \"a\"\nwhen = 'size(body) == 3 && body.note == \"x\"'\naction = \"deny\"\n",
    );
    assert!(whole.body.whole);
    assert!(whole.decide(&facts(Some(&body))).decided.is_some());
    // A body that is not an object is read as it is.
    let list = json!([1, 2]);
    let d = members.decide(&facts(Some(&list)));
    assert!(!d.failed.is_empty(), "a member of a list fails: {d:?}");
}

#[test]
fn a_rule_that_reads_what_is_not_known_ends_the_decision() {
    let rules = load(
        r#"
[[rule]]
name = "by-caller"
when = 'caller.endsWith("/other")'
action = "deny"

[[rule]]
name = "watch-bodies"
when = 'has(body.qty)'
action = "hold"
mode = "report"

[[rule]]
name = "big"
when = 'body.qty > 10'
action = "hold"

[[rule]]
name = "after"
action = "deny"
"#,
    );
    let f = facts(None);
    // The caller is known and does not match; the report rule reads the body and is passed
    // over; `big` reads the body and might have held the write.
    let e = rules.decide_knowing(&f, &["body", "query"]).unwrap_err();
    assert_eq!(&*e, "big");
    // Knowing everything, `big` fails closed on a missing body (a hold) and decides.
    let d = rules.decide_knowing(&f, &[]).unwrap();
    assert_eq!(d.decided.unwrap().rule.as_ref(), "big");
    // A caller that matches decides before any unknown is needed.
    let other = Facts {
        caller: Some("spiffe://x/other"),
        ..facts(None)
    };
    let d = rules.decide_knowing(&other, &["body"]).unwrap();
    assert_eq!(d.decided.unwrap().rule.as_ref(), "by-caller");
}
