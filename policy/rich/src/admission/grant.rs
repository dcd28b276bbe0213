//! What a verified token admits (seed 002 §12, SPEC §13): its RFC 9396
//! `authorization_details` entries of type `rich_binding`, each naming operations by the
//! lockfile's name and the contract digest they were granted for, optionally with a bound over
//! the operation's input.
//!
//! ```text
//! {"type": "rich_binding", "bindingId": "…"?,
//!  "operations": [{"operation": "PUT /api/v2/allocations/{id}",
//!                  "contractDigest": "sha-256:…", "bound": {JSON Schema}?}]}
//! ```
//! A call is admitted when one entry (whose `bindingId`, if any, is the lockfile's) names its
//! operation with the digest of the contract in force, and its input satisfies the granted
//! bound: the binding is narrowed to contract ∩ bound, so what it can do lies inside the grant
//! by construction (§12.2). A bound outside the decidable fragment (type, enum, const,
//! minimum/maximum and their exclusive forms, minLength/maxLength, minItems/maxItems, items,
//! properties, required, additionalProperties) cannot be shown to bound anything, and admits
//! nothing.

use std::sync::Arc;

use jsonschema::{Draft, Validator};
use serde_json::{json, Value};

use palisade_policy::digest::Sha256Digest;
use palisade_policy::{ErrorCode, Refusal};

/// The `authorization_details` type RICH grants use.
pub const DETAILS_TYPE: &str = "rich_binding";
/// Deepest bound schema accepted.
pub const MAX_BOUND_DEPTH: usize = 16;

/// Annotations a bound may carry beside the fragment's keywords: they constrain nothing.
const ANNOTATIONS: &[&str] = &["title", "description"];

/// Whether a bound may use `keyword`: the decidable fragment of RICH §12.2 (SPEC §13), the
/// same keywords a worst-case bound is made of, and annotations.
fn in_fragment(keyword: &str) -> bool {
    use crate::bound::{NESTED_KEYWORDS, SCALAR_KEYWORDS};
    [SCALAR_KEYWORDS, NESTED_KEYWORDS, ANNOTATIONS]
        .iter()
        .any(|list| list.contains(&keyword))
}

/// A granted bound over an operation's input.
#[derive(Debug, Clone)]
pub enum Bound {
    /// Inside the fragment, compiled once.
    Within(Arc<Validator>),
    /// Outside it (the reason): admits nothing.
    Outside(String),
}

/// One operation a token grants.
#[derive(Debug, Clone)]
pub struct Operation {
    pub operation: String,
    pub contract_digest: Option<Sha256Digest>,
    pub bound: Option<Bound>,
}

/// One `rich_binding` entry.
#[derive(Debug, Clone)]
pub struct Grant {
    pub binding_id: Option<String>,
    pub operations: Vec<Operation>,
}

/// The call to decide: the bound capability as the bundle in force names it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub binding_id: &'a str,
    pub operation: &'a str,
    /// The contract's digest (`sha-256:…`).
    pub contract_digest: &'a str,
}

fn malformed(detail: &'static str) -> Refusal {
    Refusal::new(ErrorCode::TokenInvalid, detail)
}

/// The token's `rich_binding` entries (entries of other types are someone else's and are
/// left alone). A malformed entry makes the token unusable (401): guessing at a grant could
/// admit what was not granted.
pub fn parse(details: &Value) -> Result<Vec<Grant>, Refusal> {
    let list = match details {
        Value::Null => return Ok(Vec::new()),
        Value::Array(list) => list,
        _ => return Err(malformed("authorization_details must be an array")),
    };
    let mut out = Vec::new();
    for entry in list {
        if entry.get("type").and_then(Value::as_str) != Some(DETAILS_TYPE) {
            continue;
        }
        let binding_id = match entry.get("bindingId") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(malformed("a rich_binding's bindingId must be a string")),
        };
        let ops = entry
            .get("operations")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("a rich_binding needs an operations array"))?;
        let mut operations = Vec::with_capacity(ops.len());
        for op in ops {
            let operation = op
                .get("operation")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed("each granted operation needs an operation name"))?
                .to_owned();
            let contract_digest = match op.get("contractDigest") {
                None => None,
                Some(v) => Some(
                    v.as_str()
                        .and_then(|s| s.parse::<Sha256Digest>().ok())
                        .ok_or_else(|| malformed("a contractDigest must be a sha-256 digest"))?,
                ),
            };
            let bound = op.get("bound").map(compile_bound);
            operations.push(Operation {
                operation,
                contract_digest,
                bound,
            });
        }
        out.push(Grant {
            binding_id,
            operations,
        });
    }
    Ok(out)
}

/// A bound, checked against the fragment and compiled.
pub fn compile_bound(schema: &Value) -> Bound {
    if let Err(why) = within_fragment(schema, 0) {
        return Bound::Outside(why);
    }
    match jsonschema::options()
        .with_draft(Draft::Draft202012)
        .build(schema)
    {
        Ok(v) => Bound::Within(Arc::new(v)),
        Err(e) => Bound::Outside(format!("the bound does not compile: {e}")),
    }
}

fn within_fragment(schema: &Value, depth: usize) -> Result<(), String> {
    if depth > MAX_BOUND_DEPTH {
        return Err("the bound nests deeper than 16".into());
    }
    let obj = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(o) => o,
        _ => return Err("a bound is a JSON Schema object".into()),
    };
    for (k, v) in obj {
        if !in_fragment(k) {
            return Err(format!("{k:?} is outside the decidable fragment"));
        }
        match k.as_str() {
            "items" | "additionalProperties" => within_fragment(v, depth + 1)?,
            "properties" => {
                let props = v.as_object().ok_or("properties must be an object")?;
                for sub in props.values() {
                    within_fragment(sub, depth + 1)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The `authorization_details` entry `call` needs: what a refusal tells the caller to ask for
/// (draft-zehavi-oauth-rar-metadata).
pub fn needed(call: Call<'_>) -> Value {
    json!([{
        "type": DETAILS_TYPE,
        "bindingId": call.binding_id,
        "operations": [{"operation": call.operation, "contractDigest": call.contract_digest}],
    }])
}

fn not_admitted(detail: &'static str) -> Refusal {
    Refusal::new(ErrorCode::NotAdmitted, detail)
}

/// The grant that admits `call`, or the refusal naming why none does. The call's input is
/// checked against the bound by [`check_input`], once the input is read.
pub fn admit<'g>(grants: &'g [Grant], call: Call<'_>) -> Result<&'g Operation, Refusal> {
    let want = call.contract_digest.parse::<Sha256Digest>().ok();
    let mut named = false;
    let mut outside = None;
    for g in grants {
        if g.binding_id
            .as_deref()
            .is_some_and(|b| b != call.binding_id)
        {
            continue;
        }
        for op in g
            .operations
            .iter()
            .filter(|o| o.operation == call.operation)
        {
            named = true;
            if op.contract_digest.is_none() || op.contract_digest != want {
                continue;
            }
            match &op.bound {
                Some(Bound::Outside(why)) => outside = Some(why.clone()),
                _ => return Ok(op),
            }
        }
    }
    Err(match (named, outside) {
        (_, Some(_)) => not_admitted(
            "the granted bound is outside the decidable fragment, so it admits nothing",
        ),
        (true, None) => not_admitted(
            "the token grants this operation for another contract digest (the contract changed since it was issued)",
        ),
        (false, None) => not_admitted("the token does not grant this operation"),
    })
}

/// The call's input against the operation's granted bound (none: unbounded).
pub fn check_input(op: &Operation, input: &Value) -> Result<(), Refusal> {
    match &op.bound {
        None => Ok(()),
        Some(Bound::Outside(_)) => Err(not_admitted(
            "the granted bound is outside the decidable fragment, so it admits nothing",
        )),
        Some(Bound::Within(v)) => match v.iter_errors(input).next() {
            None => Ok(()),
            Some(e) => Err(
                not_admitted("the input is outside the bound the token grants")
                    .with_location(e.instance_path().to_string()),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const D1: &str = "sha-256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha-256:2222222222222222222222222222222222222222222222222222222222222222";

    fn call(digest: &str) -> Call<'_> {
        Call {
            binding_id: "urn:b",
            operation: "PUT /items/{id}",
            contract_digest: digest,
        }
    }

    fn grants(details: Value) -> Vec<Grant> {
        parse(&details).unwrap()
    }

    #[test]
    fn a_grant_names_operation_digest_and_binding() {
        let g = grants(json!([
            {"type": "openid_credential", "anything": 1},
            {"type": "rich_binding", "bindingId": "urn:b",
             "operations": [{"operation": "PUT /items/{id}", "contractDigest": D1}]}
        ]));
        assert!(admit(&g, call(D1)).is_ok());
        // The same digest in its other spellings is the same digest.
        let hex = D1.trim_start_matches("sha-256:");
        assert!(admit(&g, call(&format!("sha256:{hex}"))).is_ok());
        let stale = admit(&g, call(D2)).unwrap_err();
        assert_eq!(stale.code, ErrorCode::NotAdmitted);
        assert!(stale.detail.contains("another contract digest"));
        let other = Call {
            operation: "GET /items/{id}",
            ..call(D1)
        };
        assert!(admit(&g, other)
            .unwrap_err()
            .detail
            .contains("does not grant"));
        let elsewhere = Call {
            binding_id: "urn:other",
            ..call(D1)
        };
        assert!(admit(&g, elsewhere).is_err());
        // No digest named: nothing admitted (a grant must say which contract it is for).
        let loose = grants(json!([{"type": "rich_binding",
            "operations": [{"operation": "PUT /items/{id}"}]}]));
        assert!(admit(&loose, call(D1)).is_err());
        assert!(admit(&grants(Value::Null), call(D1)).is_err());
    }

    #[test]
    fn malformed_details_make_the_token_unusable() {
        for bad in [
            json!({"type": "rich_binding"}),
            json!([{"type": "rich_binding"}]),
            json!([{"type": "rich_binding", "bindingId": 7, "operations": []}]),
            json!([{"type": "rich_binding", "operations": [{"contractDigest": D1}]}]),
            json!([{"type": "rich_binding",
                    "operations": [{"operation": "x", "contractDigest": "md5:00"}]}]),
        ] {
            assert_eq!(
                parse(&bad).unwrap_err().code,
                ErrorCode::TokenInvalid,
                "{bad}"
            );
        }
    }

    #[test]
    fn bounds_inside_the_fragment_narrow_the_input() {
        let bound = json!({"type": "object", "required": ["qty"], "additionalProperties": false,
            "properties": {"qty": {"type": "integer", "minimum": 0, "maximum": 100},
                           "sku": {"enum": ["A", "B"]},
                           "tags": {"type": "array", "maxItems": 2, "items": {"maxLength": 3}}}});
        let g = grants(json!([{"type": "rich_binding", "operations": [
            {"operation": "PUT /items/{id}", "contractDigest": D1, "bound": bound}]}]));
        let op = admit(&g, call(D1)).unwrap();
        assert!(check_input(op, &json!({"qty": 5, "sku": "A", "tags": ["x"]})).is_ok());
        for (input, at) in [
            (json!({"qty": 101}), "/qty"),
            (json!({"qty": 1, "sku": "C"}), "/sku"),
            (json!({"qty": 1, "extra": true}), ""),
            (json!({"qty": 1, "tags": ["long"]}), "/tags/0"),
            (json!({}), ""),
        ] {
            let r = check_input(op, &input).unwrap_err();
            assert_eq!(r.code, ErrorCode::NotAdmitted, "{input}");
            assert_eq!(r.location.as_deref().unwrap_or(""), at, "{input}");
        }
    }

    #[test]
    fn a_bound_outside_the_fragment_admits_nothing() {
        for bound in [
            json!({"type": "string", "pattern": "^a"}),
            json!({"$ref": "#/x"}),
            json!({"properties": {"q": {"multipleOf": 5}}}),
            json!({"items": {"anyOf": [true]}}),
            json!({"not": {}}),
            json!("object"),
        ] {
            assert!(
                matches!(compile_bound(&bound), Bound::Outside(_)),
                "{bound}"
            );
            let g = grants(json!([{"type": "rich_binding", "operations": [
                {"operation": "PUT /items/{id}", "contractDigest": D1, "bound": bound}]}]));
            let r = admit(&g, call(D1)).unwrap_err();
            assert!(r.detail.contains("outside the decidable fragment"));
        }
        let mut deep = json!({"type": "integer"});
        for _ in 0..20 {
            deep = json!({"items": deep});
        }
        assert!(matches!(compile_bound(&deep), Bound::Outside(_)));
    }
}
