#![allow(clippy::unwrap_used)]
use serde_json::json;

use super::*;

/// 2026-12-06T00:00:00Z.
const NOW: i64 = 1_796_515_200_000;

fn made(v: Value) -> Freeze {
    Freeze::made(
        "f1".into(),
        parse_request(&v, NOW).unwrap(),
        "ops".into(),
        NOW,
    )
}

#[test]
fn a_freeze_stops_what_it_names_exactly() {
    let keys = WriteKeys {
        caller: Some("sub:sha256:aa"),
        operation: "PUT /api/v2/items/{id}",
        also: None,
        resource: "https://erp.example.com/api/v2/items/B",
    };
    let all = made(json!({"scope": "all", "reason": "incident 7"}));
    assert!(all.stops(&keys, NOW));
    let caller = made(json!({"scope": "caller", "value": "sub:sha256:aa", "reason": "loop"}));
    assert!(caller.stops(&keys, NOW));
    assert!(!caller.stops(
        &WriteKeys {
            caller: None,
            ..keys
        },
        NOW
    ));
    let other = made(json!({"scope": "caller", "value": "sub:sha256:a", "reason": "loop"}));
    assert!(!other.stops(&keys, NOW), "no prefix match");
    let op = made(json!({"scope": "operation", "value": "PUT /api/v2/items/{id}", "reason": "x"}));
    assert!(op.stops(&keys, NOW));
    // Issue 54, defect 5: a connection's agent-facing name stops the write as well as the
    // legacy name it maps onto; with no other name, nothing else matches.
    let facing = made(json!({"scope": "operation", "value": "mcp:tool/set_stock", "reason": "x"}));
    assert!(!facing.stops(&keys, NOW));
    let mapped = WriteKeys {
        operation: "mcp:tool/legacy_set_level",
        also: Some("mcp:tool/set_stock"),
        ..keys
    };
    assert!(facing.stops(&mapped, NOW));
    let legacy =
        made(json!({"scope": "operation", "value": "mcp:tool/legacy_set_level", "reason": "x"}));
    assert!(legacy.stops(&mapped, NOW));
    let res = made(json!({"scope": "resource",
                          "value": "https://erp.example.com/api/v2/items/B", "reason": "x"}));
    assert!(res.stops(&keys, NOW));
    let res2 = made(json!({"scope": "resource",
                           "value": "https://erp.example.com/api/v2/items/BB", "reason": "x"}));
    assert!(!res2.stops(&keys, NOW));
    // `until` ends it.
    let timed = made(json!({"scope": "all", "reason": "x", "until": "2026-12-06T00:00:01Z"}));
    assert!(timed.stops(&keys, NOW + 999));
    assert!(!timed.stops(&keys, NOW + 1000));
    let list = [res2, timed, op];
    assert_eq!(
        stopping(&list, &keys, NOW).unwrap().until_ms,
        Some(NOW + 1000)
    );
    assert_eq!(
        stopping(&list, &keys, NOW + 1000).unwrap().scope,
        Scope::Operation
    );
}

#[test]
fn a_request_is_read_strictly() {
    for (body, why) in [
        (json!([]), "JSON object"),
        (
            json!({"scope": "everything", "reason": "x"}),
            "scope must be",
        ),
        (
            json!({"scope": "all", "value": "x", "reason": "x"}),
            "takes no value",
        ),
        (
            json!({"scope": "caller", "reason": "x"}),
            "value is required",
        ),
        (
            json!({"scope": "caller", "value": "", "reason": "x"}),
            "1 to 2048 bytes",
        ),
        (
            json!({"scope": "caller", "value": "a".repeat(2049), "reason": "x"}),
            "1 to 2048",
        ),
        (json!({"scope": "all"}), "reason is required"),
        (
            json!({"scope": "all", "reason": "  "}),
            "reason is required",
        ),
        (
            json!({"scope": "all", "reason": "x".repeat(1025)}),
            "at most 1024",
        ),
        (
            json!({"scope": "all", "reason": 7}),
            "reason must be a string",
        ),
        (
            json!({"scope": "all", "reason": "x", "until": "tomorrow"}),
            "RFC 3339",
        ),
        (
            json!({"scope": "all", "reason": "x", "until": "2026-12-05T23:59:59Z"}),
            "in the past",
        ),
        (
            json!({"scope": "all", "reason": "x", "untill": "2027-01-01T00:00:00Z"}),
            "unknown member",
        ),
    ] {
        let e = parse_request(&body, NOW).unwrap_err();
        assert!(e.contains(why), "{body}: {e}");
    }
    let f = made(json!({"scope": "all", "reason": "x", "until": "2026-12-07T00:00:00+01:00"}));
    assert_eq!(f.until_ms, Some(NOW + 23 * 3_600_000));
    // Stored and read back as it was.
    let back: Freeze = serde_json::from_value(serde_json::to_value(&f).unwrap()).unwrap();
    assert_eq!(back, f);
}

/// Issue 54, defect 3: every spelling the probe sent names the data plane's key, or is refused.
#[test]
fn a_value_is_stored_in_the_data_planes_spelling() {
    let base = Some("https://erp.example.com");
    let key = "https://erp.example.com/api/v2/stock/A";
    for spelling in [
        "/api/v2/stock/A",
        "HTTPS://ERP.EXAMPLE.COM/api/v2/stock/A",
        "https://erp.example.com:443/api/v2/stock/A",
        "https://erp.example.com/api/%762/stock/A",
        "https://erp.example.com/api/./v2/stock/A",
        "https://erp.example.com/api/x/../v2/stock/A",
        "https://erp.example.com/api/v2/stock/A?x=1",
        "https://erp.example.com/api/v2/stock/A#frag",
    ] {
        assert_eq!(
            canonical_value(Scope::Resource, spelling, base).as_deref(),
            Ok(key),
            "{spelling}"
        );
    }
    assert_eq!(
        canonical_value(Scope::Resource, "mcp:tool/set_stock/A", base).as_deref(),
        Ok("mcp:tool/set_stock/A")
    );
    for bad in [
        "api/v2/stock/A",
        "ftp://erp.example.com/x",
        "https://erp.example.com/a/%2F/b",
        "https://erp.example.com/a\\b",
        "/a\n",
    ] {
        assert!(
            canonical_value(Scope::Resource, bad, base).is_err(),
            "{bad:?}"
        );
    }
    let e = canonical_value(Scope::Resource, "/api/v2/stock/A", None).unwrap_err();
    assert!(e.contains("public_base"), "{e}");

    let op = |v: &str| canonical_value(Scope::Operation, v, base);
    assert_eq!(
        op("PUT /api/v2/stock/{id}").as_deref(),
        Ok("PUT /api/v2/stock/{id}")
    );
    assert_eq!(
        op("put /api/v2/stock/{id}").as_deref(),
        Ok("PUT /api/v2/stock/{id}")
    );
    assert_eq!(
        op("PUT /api/./v2/stock/%41").as_deref(),
        Ok("PUT /api/v2/stock/A")
    );
    assert_eq!(
        op("mcp:tool/set_stock").as_deref(),
        Ok("mcp:tool/set_stock")
    );
    assert_eq!(
        op("put /api/v2/items/{sku}").as_deref(),
        Ok("PUT /api/v2/items/{sku}"),
        "a template of a bundle not loaded yet"
    );
    assert!(op("PUT api/v2/items").is_err());
    assert!(op("PUT").is_err());
    assert!(op("P-T /x").is_err());
    assert_eq!(
        canonical_value(Scope::Caller, "sub:sha256:aa", base).as_deref(),
        Ok("sub:sha256:aa")
    );
}
