//! What a connection knows about the downstream peer.

use std::net::SocketAddr;

/// What the connection knows about the downstream peer.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub tls: bool,
    /// DER of the client's verified leaf certificate (mTLS only).
    pub client_cert: Option<Vec<u8>>,
}

impl ConnInfo {
    /// The caller's identity (SPEC §5.6, §5.7): the client certificate under mTLS, else a
    /// digest of `Authorization`; `None` for a caller with neither. Digests, so no credential
    /// is ever stored or signed into a lease.
    pub fn caller(&self, headers: &http::HeaderMap) -> Option<String> {
        use palisade_policy::digest::Sha256Digest;
        if let Some(der) = &self.client_cert {
            return Some(format!("x509:{}", Sha256Digest::of(der)));
        }
        headers
            .get(http::header::AUTHORIZATION)
            .map(|v| format!("authz:{}", Sha256Digest::of(v.as_bytes())))
    }
}
