//! `$ref`s inside an OpenAPI document (issue 37).

use serde_json::Value;

/// Longest chain of `$ref`s followed.
const MAX_REF_HOPS: usize = 32;

/// Follows a chain of `$ref`s inside the document (`#/components/requestBodies/…`,
/// `…/parameters/…`, `…/responses/…`, `…/headers/…`, `…/pathItems/…`, or any JSON pointer in
/// it, percent-decoded as a URI fragment): the object reached, or why it cannot be.
pub(super) fn resolve<'a>(doc: &'a Value, v: &'a Value) -> Result<&'a Value, String> {
    let mut current = v;
    let mut seen: Vec<&str> = Vec::new();
    for _ in 0..MAX_REF_HOPS {
        let Some(r) = current.get("$ref").and_then(Value::as_str) else {
            return Ok(current);
        };
        let Some(fragment) = r.strip_prefix('#') else {
            return Err(format!(
                "`$ref` {r} names another document, which is not fetched"
            ));
        };
        if seen.contains(&r) {
            return Err(format!("`$ref` {r} leads back to itself"));
        }
        seen.push(r);
        let pointer = percent_encoding::percent_decode_str(fragment)
            .decode_utf8()
            .map_err(|_| format!("`$ref` {r} is not UTF-8 once decoded"))?;
        current = doc
            .pointer(&pointer)
            .ok_or_else(|| format!("`$ref` {r} names nothing in the document"))?;
    }
    Err(format!("a chain of more than {MAX_REF_HOPS} `$ref`s"))
}
