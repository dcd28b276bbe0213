//! Who is asking: the caller's identity as every stage derives it, its identity document in
//! the callers file, and the Authority-Scope tokens the request claims.

use std::collections::BTreeSet;
use std::sync::Arc;

use palisade_rich::rcns::{claimed_scopes, Caller, Callers};

use crate::context::RcnsState;
use crate::net::conn::ConnInfo;

pub struct Who {
    /// `spiffe://…` for an mTLS client with an SVID; else the sidecar's usual caller
    /// identity (`sub:sha256:…`, `x509:sha256:…`, `authz:sha256:…`).
    pub identity: Option<String>,
    /// Kept so the document borrowed below stays the one this request decided with.
    callers: Option<Arc<Callers>>,
    pub claim: BTreeSet<String>,
}

impl Who {
    /// The caller's identity document, when the callers file names it.
    pub fn caller(&self) -> Option<&Caller> {
        self.callers.as_deref()?.get(self.identity.as_deref()?)
    }

    /// Whether the caller may see every agent's contracts: `inspect:all`, granted and
    /// claimed.
    pub fn sees_all(&self) -> bool {
        let all = palisade_rich::rcns::SCOPE_INSPECT_ALL;
        self.caller().is_some_and(|c| c.scopes.contains(all)) && self.claim.contains(all)
    }
}

pub fn resolve(rcns: Option<&RcnsState>, conn: &ConnInfo, parts: &http::request::Parts) -> Who {
    // The request's one caller (a token's subject, an SVID's SPIFFE ID, a digest).
    let identity = conn.caller(parts);
    let claim = claimed_scopes(
        parts
            .headers
            .get(super::headers::AUTHORITY_SCOPE)
            .and_then(|v| v.to_str().ok()),
    );
    Who {
        identity,
        callers: rcns.map(|r| r.callers.load_full()),
        claim,
    }
}
