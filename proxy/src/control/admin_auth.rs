//! Who may call the admin listener (SPEC §9).
//!
//! With `admin.token_file` set, every `POST` and every `/admin/v1/*` read needs
//! `Authorization: Bearer <token>`; `/healthz`, `/readyz` and `/metrics` stay open for probes
//! and scrapers. The file is read on every guarded call (a handful a minute), so a rotated
//! Kubernetes Secret takes effect at once, with no watcher to get wrong. The comparison is of
//! SHA-256 digests in constant time, so neither the token's bytes nor its length leak through
//! timing. A file that cannot be read, or is empty, refuses every guarded call: fail closed.
//!
//! With `admin.tls` (client CA) and `admin.allowed_spiffe_ids`, a client certificate that
//! verifies against the CA and carries one of those SPIFFE IDs (URI SAN) is a credential too
//! (mTLS, as a service mesh or SPIRE issues them). Certificates are optional at the TLS layer,
//! so kubelet probes without one still reach `/healthz`.
//!
//! Without any credential the listener is loopback-only (`config` refuses anything else),
//! where only the pod's own containers reach it.
//!
//! Every admin action is attributed to a name (SPEC §9, issue 39): the token file may hold
//! named tokens, one `name:token` a line (a name is 1–64 of `A–Z a–z 0–9 . _ -`; a line
//! without one is the token of `admin-token`), and an mTLS caller is named by its SPIFFE ID.

use std::path::Path;

use http::{header, HeaderMap, Method, Response};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::ErrorCode;
use subtle::ConstantTimeEq as _;

use crate::net::body::ProxyBody;

/// Largest token file read (a token is tens of bytes; this bounds a mistaken mount).
const MAX_TOKEN_FILE: u64 = 4096;

/// Whether a call needs the admin credential.
pub(super) fn guarded(method: &Method, path: &str) -> bool {
    *method != Method::GET || path.starts_with("/admin/")
}

/// The token in `path`, trimmed; `None` when unreadable, too large or empty.
pub(crate) fn read_token(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_TOKEN_FILE + 1)
        .read_to_string(&mut text)
        .ok()?;
    let token = text.trim();
    (text.len() as u64 <= MAX_TOKEN_FILE && !token.is_empty()).then(|| token.to_owned())
}

/// The named tokens of a token file's text: `name:token` lines, or a bare token (`admin-token`).
/// A line whose token part is empty or blank (`dave:`, written to revoke dave) names no token
/// at all: it is skipped with a warning, never read as the bare token `dave:` (SPEC §9).
/// Blank lines and `#` comments are skipped.
fn named_tokens(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(':') {
            Some((name, token)) if token.trim().is_empty() => {
                warn_once(name.trim());
            }
            Some((name, token)) if is_name(name) => out.push((name, token.trim())),
            _ => out.push(("admin-token", line)),
        }
    }
    out
}

/// Warns of an emptied token line, once per name (the file is read on every guarded call).
fn warn_once(name: &str) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let Ok(mut warned) = WARNED.lock() else {
        return;
    };
    let set = warned.get_or_insert_with(HashSet::new);
    if set.len() < 1024 && set.insert(name.to_owned()) {
        let shown: String = name.chars().take(64).collect();
        tracing::warn!(name = %shown, "admin.token_file: a line has a name and no token; it grants nothing");
    }
}

fn is_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether a guarded call may go on.
pub(super) fn allowed(
    config: &crate::config::Config,
    headers: &HeaderMap,
    peer_spiffe_id: Option<&str>,
) -> bool {
    let token = config.admin.token_file.as_deref();
    if token.is_none() && config.admin.spiffe_ids.is_empty() {
        return true;
    }
    caller(config, headers, peer_spiffe_id).is_some()
}

/// The name of an admin call's credential: the allowed client certificate's SPIFFE ID, or the
/// name of the token presented; `None` when it presents neither.
pub(super) fn caller(
    config: &crate::config::Config,
    headers: &HeaderMap,
    peer_spiffe_id: Option<&str>,
) -> Option<String> {
    if let Some(id) = peer_spiffe_id.filter(|id| config.admin.spiffe_ids.iter().any(|a| a == id)) {
        return Some(id.to_owned());
    }
    config
        .admin
        .token_file
        .as_deref()
        .and_then(|f| authorized(f, headers))
}

/// Who an allowed admin call is, for the receipts that name them (a freeze's `by`, an
/// approval's `approver`): its credential's name, or (no credential configured: loopback
/// only) the listener's own name.
pub(super) fn who(
    config: &crate::config::Config,
    headers: &HeaderMap,
    peer_spiffe_id: Option<&str>,
) -> String {
    caller(config, headers, peer_spiffe_id).unwrap_or_else(|| "admin-listener".to_owned())
}

/// The name of the token in `token_file` that `headers` present, compared in constant time
/// against every one (so which one matched does not show in the timing either).
pub(super) fn authorized(token_file: &Path, headers: &HeaderMap) -> Option<String> {
    let Some(text) = read_token(token_file) else {
        tracing::warn!(file = %token_file.display(), "admin.token_file unreadable or empty; refusing admin calls");
        return None;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())?;
    let given = Sha256Digest::of(given.as_bytes());
    let mut found = None;
    for (name, token) in named_tokens(&text) {
        let matched: bool = given.0.ct_eq(&Sha256Digest::of(token.as_bytes()).0).into();
        if matched && found.is_none() {
            found = Some(name.to_owned());
        }
    }
    found
}

pub(super) fn refused() -> Response<ProxyBody> {
    // The admin API's problems are made in one place (`escrow::problem`).
    let mut resp = crate::enforce::escrow::problem(
        ErrorCode::AdminUnauthorized,
        "this admin endpoint needs Authorization: Bearer <admin token> or an allowed client certificate",
    );
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"palisade-admin\""),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_in_the_file_is_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret-token\n").expect("write");
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().expect("value"));
            h
        };
        assert_eq!(
            authorized(&file, &with("Bearer s3cret-token")).as_deref(),
            Some("admin-token")
        );
        assert!(authorized(&file, &with("bearer s3cret-token")).is_some());
        for wrong in [
            "Bearer s3cret",
            "Bearer s3cret-token2",
            "Basic s3cret-token",
            "s3cret-token",
            "Bearer ",
        ] {
            assert!(authorized(&file, &with(wrong)).is_none(), "{wrong}");
        }
        assert!(authorized(&file, &HeaderMap::new()).is_none());
        std::fs::write(&file, "  \n").expect("write");
        assert!(
            authorized(&file, &with("Bearer ")).is_none(),
            "an empty file refuses everything"
        );
        assert!(authorized(&dir.path().join("missing"), &with("Bearer x")).is_none());
        // Named tokens: each call is its token's name; a line that names nothing is
        // `admin-token`'s (a token may hold a colon).
        std::fs::write(
            &file,
            "alice:tok-a\nbob:tok-b\nhex:with:colons\nbad name:tok-c\n",
        )
        .expect("write");
        assert_eq!(
            authorized(&file, &with("Bearer tok-a")).as_deref(),
            Some("alice")
        );
        assert_eq!(
            authorized(&file, &with("Bearer tok-b")).as_deref(),
            Some("bob")
        );
        assert_eq!(
            authorized(&file, &with("Bearer with:colons")).as_deref(),
            Some("hex")
        );
        assert_eq!(
            authorized(&file, &with("Bearer bad name:tok-c")).as_deref(),
            Some("admin-token")
        );
        assert!(authorized(&file, &with("Bearer tok-c")).is_none());
        assert!(authorized(&file, &with("Bearer alice:tok-a")).is_none());
    }

    /// Issue 54, defect 1: `dave:` (dave's token removed to revoke him) was read as the bare
    /// token `dave:` of `admin-token`, so `Bearer dave:` opened every admin route.
    #[test]
    fn an_emptied_token_line_grants_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(
            &file,
            "# operators\nalice:tok-a\ndave:\nerin:   \n:\n \t \n",
        )
        .expect("write");
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().expect("value"));
            h
        };
        for given in [
            "Bearer dave:",
            "Bearer dave",
            "Bearer erin:",
            "Bearer erin:   ",
            "Bearer :",
            "Bearer # operators",
            "Bearer #",
        ] {
            assert!(authorized(&file, &with(given)).is_none(), "{given}");
        }
        assert_eq!(
            authorized(&file, &with("Bearer tok-a")).as_deref(),
            Some("alice")
        );
        // A file of nothing but emptied lines refuses everything.
        std::fs::write(&file, "dave:\n").expect("write");
        assert!(authorized(&file, &with("Bearer dave:")).is_none());
    }

    #[test]
    fn probes_stay_open() {
        for (m, p, want) in [
            (Method::GET, "/healthz", false),
            (Method::GET, "/readyz", false),
            (Method::GET, "/metrics", false),
            (Method::GET, "/admin/v1/escrow", true),
            (Method::GET, "/admin/v1/drift-events", true),
            (Method::POST, "/admin/v1/reload", true),
            (Method::POST, "/healthz", true),
        ] {
            assert_eq!(guarded(&m, p), want, "{m} {p}");
        }
    }
}
