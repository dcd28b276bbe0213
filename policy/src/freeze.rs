//! The emergency stop (SPEC §14): an operator's freeze of every write, or of one caller's,
//! one operation's or one resource's, until it is lifted or its `until` passes.
//!
//! ```json
//! POST /admin/v1/freeze {"scope": "caller", "value": "sub:sha256:…",
//!                        "reason": "agent loops on refunds", "until": "2026-12-06T18:00:00Z"}
//! ```
//!
//! The keys are the budgets' (SPEC §14): `caller` is the receipts' `caller`; `operation` the
//! lockfile's (`"METHOD /template"`), `mcp:tool/<name>` for a tool call, `"METHOD <canonical
//! path>"` for an unbound write; `resource` the fence key (the absolute URI without query).
//! Values match exactly: a freeze names what it stops, and a prefix would stop what its
//! author did not name. A request is read strictly (unknown members, a `value` on `all`, an
//! `until` in the past are refused): an emergency stop that silently means something else is
//! worse than one that is refused.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Longest `value`, in bytes (a resource key is an absolute URI).
pub const MAX_VALUE: usize = 2048;
/// Longest `reason`, in characters.
pub const MAX_REASON: usize = 1024;
/// Most freezes in force at once: each write is matched against all of them.
pub const MAX_FREEZES: usize = 1024;

/// What a freeze stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    All,
    Caller,
    Operation,
    Resource,
}

/// A freeze in force, as stored and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeze {
    pub id: String,
    pub scope: Scope,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub value: Option<String>,
    pub reason: String,
    /// RFC 3339; absent: until it is lifted.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub until_ms: Option<i64>,
    /// Who made it: the admin credential's name.
    pub by: String,
    /// RFC 3339.
    pub at: String,
}

/// A freeze as asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub scope: Scope,
    pub value: Option<String>,
    pub reason: String,
    pub until: Option<(String, i64)>,
}

/// A write's keys, as a freeze matches them.
#[derive(Debug, Clone, Copy)]
pub struct WriteKeys<'a> {
    pub caller: Option<&'a str>,
    pub operation: &'a str,
    /// The operation's other name, when a connection maps an agent-facing tool or route onto
    /// the legacy `operation`: a freeze of either stops the write (SPEC §14).
    pub also: Option<&'a str>,
    pub resource: &'a str,
}

/// Reads a `POST /admin/v1/freeze` body; `Err` says what is wrong (a 400's detail).
pub fn parse_request(v: &Value, now_ms: i64) -> Result<Request, String> {
    let Value::Object(o) = v else {
        return Err("the body must be a JSON object".into());
    };
    if let Some(k) = o
        .keys()
        .find(|k| !["scope", "value", "reason", "until"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown member {k:?}: a freeze has scope, value, reason and until"
        ));
    }
    let scope = match o.get("scope").and_then(Value::as_str) {
        Some("all") => Scope::All,
        Some("caller") => Scope::Caller,
        Some("operation") => Scope::Operation,
        Some("resource") => Scope::Resource,
        _ => return Err("scope must be \"all\", \"caller\", \"operation\" or \"resource\"".into()),
    };
    let value = text(o, "value")?;
    match (&value, scope) {
        (Some(_), Scope::All) => return Err("a freeze of all writes takes no value".into()),
        (None, s) if s != Scope::All => {
            return Err("value is required: the caller, operation or resource to freeze".into())
        }
        (Some(v), _) if v.is_empty() || v.len() > MAX_VALUE => {
            return Err(format!("value must be 1 to {MAX_VALUE} bytes"))
        }
        _ => {}
    }
    let reason = text(o, "reason")?.unwrap_or_default();
    let chars = reason.chars().count();
    if reason.trim().is_empty() || chars > MAX_REASON {
        return Err(format!(
            "reason is required: a non-empty string of at most {MAX_REASON} characters"
        ));
    }
    let until = match text(o, "until")? {
        None => None,
        Some(s) => {
            let t = OffsetDateTime::parse(&s, &Rfc3339)
                .map_err(|_| "until must be an RFC 3339 timestamp".to_owned())?;
            let ms = i64::try_from(t.unix_timestamp_nanos() / 1_000_000)
                .map_err(|_| "until is out of range".to_owned())?;
            if ms <= now_ms {
                return Err("until is in the past: the freeze would hold nothing".into());
            }
            Some((s, ms))
        }
    };
    Ok(Request {
        scope,
        value,
        reason,
        until,
    })
}

/// The one spelling of a freeze's `value` that writes are matched against (SPEC §14, issue 54
/// defect 3): a freeze given in another spelling than the data plane's key would be stored,
/// answered 201, and stop nothing.
///
/// - `resource`: an `mcp:tool/…` key as given; otherwise a URI normalised as the data plane
///   normalises a request's target (SPEC §4.3: scheme and host case, default port, dot
///   segments, percent-encoding of unreserved characters), a relative one taken against
///   `public_base`, then the query dropped: the fence key.
/// - `operation`: `mcp:tool/<name>` as given; `METHOD <path>` with the method as the data
///   plane accepts it (upper case) and the path canonical, unless it is a template (`{id}`),
///   kept as the lockfile writes it (bound or not: it may name the next bundle's operation).
/// - `caller`: as given (digests and SPIFFE IDs have one spelling).
///
/// `Err` says why the value names nothing (a 400's detail).
pub fn canonical_value(
    scope: Scope,
    value: &str,
    public_base: Option<&str>,
) -> Result<String, String> {
    if value.chars().any(char::is_control) {
        return Err("value has a control character".into());
    }
    match scope {
        Scope::All | Scope::Caller => Ok(value.to_owned()),
        Scope::Resource => {
            if value.starts_with("mcp:tool/") {
                return Ok(value.to_owned());
            }
            let absolute = if value.starts_with('/') {
                let base = public_base.ok_or(
                    "a relative resource is taken against listen.public_base, which is not set: give the absolute URI",
                )?;
                format!("{}{value}", base.trim_end_matches('/'))
            } else {
                value.to_owned()
            };
            let normalized = crate::target::normalize(&absolute).map_err(|e| {
                format!("the resource is not an http(s) URI or mcp:tool/ key with a canonical form: {e}")
            })?;
            Ok(crate::target::resource_key(&normalized).to_owned())
        }
        Scope::Operation => {
            if value.starts_with("mcp:tool/") {
                return Ok(value.to_owned());
            }
            let (method, path) = value
                .split_once(' ')
                .ok_or("an operation is \"METHOD /path\" (or mcp:tool/<name>)")?;
            let upper = method.to_ascii_uppercase();
            if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
                return Err("the operation's method is not a method name".into());
            }
            let path = path.split(['?', '#']).next().unwrap_or_default();
            if !path.starts_with('/') {
                return Err("the operation's path must start with '/'".into());
            }
            // A template is the lockfile's spelling (`{id}`), kept as written: it may name an
            // operation of a bundle not loaded yet.
            if path.contains(['{', '}']) {
                return Ok(format!("{upper} {path}"));
            }
            let canonical = crate::path::canonical_path(path)
                .map_err(|e| format!("the operation's path has no canonical form: {e}"))?;
            Ok(format!("{upper} {canonical}"))
        }
    }
}

fn text(o: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

impl Freeze {
    /// The freeze `request` makes, by `by`, at `now_ms`.
    pub fn made(id: String, request: Request, by: String, now_ms: i64) -> Freeze {
        let (until, until_ms) = match request.until {
            Some((s, ms)) => (Some(s), Some(ms)),
            None => (None, None),
        };
        Freeze {
            id,
            scope: request.scope,
            value: request.value,
            reason: request.reason,
            until,
            until_ms,
            by,
            at: crate::lease::format_rfc3339_ms(now_ms),
        }
    }

    /// Whether it is in force at `now_ms` (its `until` not passed).
    pub fn in_force(&self, now_ms: i64) -> bool {
        self.until_ms.is_none_or(|u| now_ms < u)
    }

    /// Whether it stops a write with `keys` at `now_ms`.
    pub fn stops(&self, keys: &WriteKeys<'_>, now_ms: i64) -> bool {
        if !self.in_force(now_ms) {
            return false;
        }
        let v = self.value.as_deref();
        match self.scope {
            Scope::All => true,
            Scope::Caller => keys.caller.is_some() && keys.caller == v,
            Scope::Operation => {
                Some(keys.operation) == v || (keys.also.is_some() && keys.also == v)
            }
            Scope::Resource => Some(keys.resource) == v,
        }
    }
}

/// The first freeze (oldest first, as listed) that stops a write with `keys`.
pub fn stopping<'f>(
    freezes: &'f [Freeze],
    keys: &WriteKeys<'_>,
    now_ms: i64,
) -> Option<&'f Freeze> {
    freezes.iter().find(|f| f.stops(keys, now_ms))
}

#[cfg(test)]
mod tests;
