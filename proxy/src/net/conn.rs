//! What a connection knows about the downstream peer.

use std::net::SocketAddr;

use crate::net::headers::PeerForwarding;
use crate::net::memo::LastKey;

/// What the connection knows about the downstream peer.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub tls: bool,
    /// DER of the client's verified leaf certificate (mTLS only).
    pub client_cert: Option<Vec<u8>>,
    /// The connection's own upstream connection (see [`ConnInfo::bound_for`]); `None` outside a
    /// downstream connection.
    pub upstream: Option<crate::net::bound::Bound>,
    /// The peer as the forwarding headers spell it, formatted once for the connection.
    pub forwarding: PeerForwarding,
    /// The last origin a request on this connection had, with its normalised form
    /// (`palisade_policy::target::normalize_origin`): a fenced read's resource key is that
    /// plus the canonical path, without a URL parse per request.
    origin: LastKey<String>,
}

/// Who a verified access token names (`sub:sha256:…`), put in a request's extensions by
/// admission (SPEC §13) when it takes the token off the request.
#[derive(Debug, Clone)]
pub struct TokenCaller(pub String);

/// The request's caller, resolved once ([`ConnInfo::resolve_caller`]) and kept in its
/// extensions for every later stage.
#[derive(Debug, Clone)]
pub struct Caller(pub Option<String>);

impl ConnInfo {
    pub fn new(
        peer: SocketAddr,
        tls: bool,
        client_cert: Option<Vec<u8>>,
        upstream: Option<crate::net::bound::Bound>,
    ) -> Self {
        Self {
            peer,
            tls,
            client_cert,
            upstream,
            forwarding: PeerForwarding::new(peer, if tls { "https" } else { "http" }),
            origin: Default::default(),
        }
    }

    /// `origin` normalised, from the connection's one-entry cache when it is the origin the
    /// last request had (a client rarely changes `Host` on a connection).
    pub fn normalized_origin(&self, origin: &str) -> Option<String> {
        self.origin.get_or(origin, || {
            palisade_policy::target::normalize_origin(origin).ok()
        })
    }

    /// How a request of `version` may use the connection's own upstream connection: owned by
    /// an HTTP/1 request, shared one stream at a time by HTTP/2's concurrent streams.
    pub fn bound_for(&self, version: http::Version) -> Option<crate::net::bound::BoundUse<'_>> {
        self.upstream
            .as_ref()
            .map(|bound| crate::net::bound::BoundUse {
                bound,
                shared: version >= http::Version::HTTP_2,
            })
    }

    /// The caller's identity: the one notion every stage uses (receipts' and drift events'
    /// `caller`, a granted lease's `agent_id` and the caller a lease's `agent_id` must match,
    /// the idempotency scope, an escrow's owner, the RCNS identity, budget and freeze keys).
    /// In order: the subject of a verified access token (`sub:sha256:…`); the SPIFFE ID of an
    /// mTLS client's SVID; a digest of any other client certificate (`x509:sha256:…`); a
    /// digest of `Authorization`, its scheme's spelling normalised (`authz:sha256:…`,
    /// `palisade_policy::caller`); `None` for a caller with none. Digests,
    /// so no credential is ever stored or signed into a lease.
    pub fn caller(&self, parts: &http::request::Parts) -> Option<String> {
        match parts.extensions.get::<Caller>() {
            Some(Caller(c)) => c.clone(),
            None => self.identify(parts),
        }
    }

    /// Works the caller out once (after admission has taken the token) and keeps it on the
    /// request, so every later stage reads the same answer without working it out again.
    pub fn resolve_caller(&self, parts: &mut http::request::Parts) -> Option<String> {
        let caller = self.identify(parts);
        parts.extensions.insert(Caller(caller.clone()));
        caller
    }

    fn identify(&self, parts: &http::request::Parts) -> Option<String> {
        use palisade_policy::digest::Sha256Digest;
        if let Some(TokenCaller(c)) = parts.extensions.get::<TokenCaller>() {
            return Some(c.clone());
        }
        if let Some(der) = &self.client_cert {
            if let Some(id) = crate::net::identity::spiffe_id(der) {
                return Some(id);
            }
            return Some(format!("x509:{}", Sha256Digest::of(der)));
        }
        // The scheme's spelling does not make another caller (SPEC §14).
        parts
            .headers
            .get(http::header::AUTHORIZATION)
            .map(|v| palisade_policy::caller::authorization_caller(v.as_bytes()))
    }
}
