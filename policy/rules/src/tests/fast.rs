//! The fast path against CEL.

use super::*;

/// The fast path never decides differently from CEL: on every expression and facts below,
/// where it answers, CEL gives the same boolean. And it answers for the common shapes (the
/// test fails if it stops doing so, since the cost target rests on it).
#[test]
fn the_fast_path_agrees_with_cel_wherever_it_answers() {
    use crate::expr::Condition;
    let exprs = [
        "true",
        "false",
        "!false",
        "body.qty > 900000",
        "body.qty >= 1150",
        "body.qty == 1150",
        "body.qty != 1150",
        "body.qty < 10.0",
        "body.amount > 10.0",
        "body.amount > 10",
        "body.qty == 1150.0",
        "has(body.qty)",
        "has(body.qty) && body.qty > 1000",
        "has(body.missing) && body.missing > 1",
        "has(body.missing) || body.qty > 1",
        "body.missing > 1 && false",
        "body.missing > 1 || true",
        "body.missing > 1 && true",
        "false && body.qty.x > 1",
        "body.qty.x > 1 || body.qty > 1",
        "body.warehouse == 'BER-1'",
        "body.warehouse.startsWith('BER')",
        "body.warehouse.endsWith('-1')",
        "body.warehouse.contains('R-')",
        "body.s < 'abd'",
        "body.s >= 'ab'",
        "body.n == null",
        "body == null",
        "body.vip",
        "body.vip == true",
        "!body.vip",
        "body.lines[0].qty > 10",
        "body.lines[5].qty > 10",
        "body['qty'] > 3",
        "'qty' in body",
        "caller.startsWith('spiffe://cluster.local/ns/experiments/')",
        "caller == ''",
        "'x-tenant' in headers && headers['x-tenant'] == 'blocked'",
        "'X-Tenant' in headers",
        "headers.x_tenant == 'a'",
        "headers['x-tenant'].startsWith('bl')",
        "method in ['PUT', 'POST']",
        "method in ['DELETE']",
        "operation == 'POST /api/v2/orders'",
        "path.startsWith('/api')",
        "resource.endsWith('/orders')",
        "lease.recovery_mode == 'HUMAN_ESCROW'",
        "lease.t_granted_ms > 1000",
        "lease.agent_id == 'agent-7'",
        "lease.issuer == null",
        "tool.annotations.destructiveHint",
        "tool.annotations.destructiveHint == true",
        "has(tool.annotations.destructiveHint)",
        "tool.name == 'delete_order'",
        "body.big > 5",
        "body.big == 18446744073709551615u",
        "body.neg < 0",
        "body.neg < -2.5",
        "1 in [1, 2]",
        "body.qty in [1150, 3]",
        "body.qty in [1150, 'x']",
        "body.qty in [3, 'x']",
        "body.qty > 1 ? true : false",
        "size(body.lines) > 0",
        "body.lines.exists(l, l.qty > 5)",
        "body.lines.all(l, l.qty > 5)",
        "body.lines.exists(l, l.qty > 500)",
        "body.lines.exists(l, l.missing > 5)",
        "body.lines.all(l, has(l.qty))",
        "body.lines.exists(l, l.qty > 5 && l.sku == 'x')",
        "body.lines.exists(body, body.qty > 5)",
        "[1, 2].exists(x, x > 1)",
    ];
    let full = json!({"qty": 1150, "warehouse": "BER-1", "amount": 120.5, "s": "abc",
        "lines": [{"qty": 12}], "vip": true, "n": null, "big": 18_446_744_073_709_551_615u64,
        "neg": -3});
    let bodies = [
        Some(full.clone()),
        Some(
            json!({"qty": 1150.0, "amount": 120, "warehouse": 7, "vip": "yes", "s": 1,
            "lines": [{"qty": "12"}, {"qty": 600, "sku": "x"}, {"sku": "y"}]}),
        ),
        Some(json!({"lines": [{"qty": 1}, {"qty": 2}]})),
        Some(json!({"qty": "1150"})),
        Some(json!([1, 2])),
        Some(json!("text")),
        None,
    ];
    let annotations = json!({"destructiveHint": true});
    let mut answered = std::collections::HashSet::new();
    let mut pairs = (0, 0);
    for src in exprs {
        let cond = Condition::compile(src).unwrap_or_else(|e| panic!("{src}: {}", e.why));
        let root = cel::Context::default();
        for (b, body) in bodies.iter().enumerate() {
            for variant in 0..4 {
                let f = Facts {
                    caller: (variant % 2 == 1)
                        .then_some("spiffe://cluster.local/ns/experiments/sa/x"),
                    headers: match variant {
                        1 => vec![("X-Tenant", "blocked")],
                        2 => vec![("x-tenant", "acme")],
                        _ => vec![],
                    },
                    lease: (variant >= 2).then_some(LeaseFacts {
                        recovery_mode: "HUMAN_ESCROW",
                        t_granted_ms: 30_000,
                        agent_id: Some("agent-7"),
                        issuer: None,
                    }),
                    tool: (variant > 0).then_some(ToolFacts {
                        name: "delete_order",
                        annotations: (variant != 3).then_some(&annotations),
                    }),
                    ..facts(body.as_ref())
                };
                let cel = cond.holds(&f.context(&root, cond.uses, &cond.body));
                pairs.1 += 1;
                if let Some(fast) = cond.fast.as_ref().and_then(|x| x.eval(&f)) {
                    assert_eq!(cel, Ok(fast), "{src} on body {b}, variant {variant}");
                    answered.insert(src);
                    pairs.0 += 1;
                }
            }
        }
    }
    // What the fast path leaves to CEL: the shapes it does not model, and the ones that are
    // errors (or a comparison across types) on every facts here.
    let missed: Vec<&str> = exprs
        .iter()
        .copied()
        .filter(|e| !answered.contains(e))
        .collect();
    assert_eq!(
        missed,
        [
            "body.missing > 1 && true",
            "body.lines[5].qty > 10",
            "headers.x_tenant == 'a'",
            "body.big > 5",
            "body.neg < -2.5",
            "body.qty in [1150, 'x']",
            "body.qty in [3, 'x']",
            "body.qty > 1 ? true : false",
            "size(body.lines) > 0",
            "body.lines.exists(l, l.missing > 5)",
            "[1, 2].exists(x, x > 1)",
        ]
    );
    assert!(pairs.0 * 3 > pairs.1, "{pairs:?}");
}
