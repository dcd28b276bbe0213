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

use std::path::Path;

use http::{header, HeaderMap, Method, Response};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::ErrorCode;
use subtle::ConstantTimeEq as _;

use crate::net::body::ProxyBody;
use crate::net::problem::Problem;

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

/// Whether a guarded call may go ahead: no credential configured (a loopback listener), the
/// admin token, or a verified client certificate whose SPIFFE ID is allowed. Either
/// credential is enough; the token file is read only when the certificate does not settle it.
pub(super) fn allowed(
    config: &crate::config::Config,
    headers: &HeaderMap,
    peer_spiffe_id: Option<&str>,
) -> bool {
    let token = config.admin_token_file.as_deref();
    let ids = &config.admin_spiffe_ids;
    if token.is_none() && ids.is_empty() {
        return true;
    }
    peer_spiffe_id.is_some_and(|id| ids.iter().any(|a| a == id))
        || token.is_some_and(|f| authorized(f, headers))
}

/// Whether `headers` carry `Authorization: Bearer <the token in token_file>`.
/// Who an allowed admin call is, for the receipts that name them (a freeze's `by`): the
/// client certificate's SPIFFE ID when it is an allowed one, else the admin token's holder,
/// else (no credential configured: loopback only) the listener's own name.
pub(super) fn who(
    config: &crate::config::Config,
    headers: &HeaderMap,
    peer_spiffe_id: Option<&str>,
) -> String {
    if let Some(id) = peer_spiffe_id.filter(|id| config.admin_spiffe_ids.iter().any(|a| a == id)) {
        return id.to_owned();
    }
    match &config.admin_token_file {
        Some(f) if authorized(f, headers) => "admin-token".to_owned(),
        _ => "admin-listener".to_owned(),
    }
}

pub(super) fn authorized(token_file: &Path, headers: &HeaderMap) -> bool {
    let Some(expected) = read_token(token_file) else {
        tracing::warn!(file = %token_file.display(), "admin.token_file unreadable or empty; refusing admin calls");
        return false;
    };
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
    else {
        return false;
    };
    let (a, b) = (
        Sha256Digest::of(given.as_bytes()),
        Sha256Digest::of(expected.as_bytes()),
    );
    a.0.ct_eq(&b.0).into()
}

/// 401 with the challenge RFC 6750 §3 asks for.
pub(super) fn refused() -> Response<ProxyBody> {
    let mut resp = Problem::new(
        ErrorCode::AdminUnauthorized,
        "this admin endpoint needs Authorization: Bearer <admin token> or an allowed client certificate",
        &uuid::Uuid::new_v4().to_string(),
        &uuid::Uuid::new_v4().simple().to_string(),
    )
    .into_response();
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
        assert!(authorized(&file, &with("Bearer s3cret-token")));
        assert!(authorized(&file, &with("bearer s3cret-token")));
        for wrong in [
            "Bearer s3cret",
            "Bearer s3cret-token2",
            "Basic s3cret-token",
            "s3cret-token",
            "Bearer ",
        ] {
            assert!(!authorized(&file, &with(wrong)), "{wrong}");
        }
        assert!(!authorized(&file, &HeaderMap::new()));
        std::fs::write(&file, "  \n").expect("write");
        assert!(
            !authorized(&file, &with("Bearer ")),
            "an empty file refuses everything"
        );
        assert!(!authorized(&dir.path().join("missing"), &with("Bearer x")));
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
