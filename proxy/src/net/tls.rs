//! TLS for the data-plane listener and the upstream client (rustls, ring provider).
//!
//! The listener's certificate is served through [`ReloadingCert`], a resolver whose key pair is
//! swapped atomically when the PEM files change on disk. cert-manager and Kubernetes secret
//! volumes rotate files in place (often by swapping a `..data` symlink), so we poll the files'
//! contents rather than rely on inotify events, which symlink swaps do not always produce. A
//! rotation that fails to parse is logged and the current certificate stays.
//!
//! Client certificates (mTLS) are verified against `listen.tls.client_ca` at the handshake, so
//! an unauthenticated client never reaches HTTP. The CA bundle is read at start-up.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: no PEM certificate found")]
    NoCertificate(PathBuf),
    #[error("{0}: no PEM private key found")]
    NoKey(PathBuf),
    #[error("{0}: unsupported private key type")]
    UnsupportedKey(PathBuf),
    #[error("{0}: the private key does not match the certificate")]
    KeyMismatch(PathBuf),
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

pub(crate) fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .ok()
        .flatten()
        .ok_or_else(|| TlsError::NoKey(path.to_owned()))
}

fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = load_certs(cert)?;
    let key_der = load_key(key)?;
    let signing = provider()
        .key_provider
        .load_private_key(key_der)
        .map_err(|_| TlsError::UnsupportedKey(key.to_owned()))?;
    let ck = CertifiedKey::new(chain, signing);
    // A rotation written file by file (certificate first, key second) is read half-done
    // now and then: a new certificate with the old key would make every handshake fail,
    // so such a pair is refused (and the old one kept) until both files agree.
    match ck.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(ck),
        Err(_) => Err(TlsError::KeyMismatch(key.to_owned())),
    }
}

pub fn root_store(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(ca)? {
        roots
            .add(cert)
            .map_err(|e| TlsError::Rustls(format!("{}: {e}", ca.display())))?;
    }
    Ok(roots)
}

/// Serves the current certificate; [`ReloadingCert::watch`] keeps it current.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: ArcSwap<CertifiedKey>,
}

impl ReloadingCert {
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let ck = certified_key(cert_path, key_path)?;
        Ok(Arc::new(Self {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            current: ArcSwap::from_pointee(ck),
        }))
    }

    /// Polls the files every `every` and swaps in a changed, valid key pair. Ends when the
    /// last other reference to `self` is dropped (the server is gone).
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut last = (read(&self.cert_path).ok(), read(&self.key_path).ok());
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if Arc::strong_count(&self) == 1 {
                return;
            }
            let now = (read(&self.cert_path).ok(), read(&self.key_path).ok());
            if now == last || now.0.is_none() || now.1.is_none() {
                continue;
            }
            match certified_key(&self.cert_path, &self.key_path) {
                Ok(ck) => {
                    self.current.store(Arc::new(ck));
                    tracing::info!(cert = %self.cert_path.display(), "listener certificate reloaded");
                    last = now;
                }
                // Half-written rotation: keep serving the old pair, retry on the next tick.
                Err(e) => tracing::warn!(error = %e, "certificate rotation not loaded yet"),
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The listener's rustls configuration: ALPN `h2` then `http/1.1`, optional mTLS.
pub fn server_config(
    resolver: Arc<ReloadingCert>,
    client_ca: Option<&Path>,
) -> Result<ServerConfig, TlsError> {
    server_config_with(resolver, client_ca, false)
}

/// As [`server_config`]; with `optional_client_cert`, a client without a certificate is let
/// through (one that presents a certificate must still present a valid one): the admin
/// listener, whose probes have no certificate, decides per request.
pub fn server_config_with(
    resolver: Arc<ReloadingCert>,
    client_ca: Option<&Path>,
    optional_client_cert: bool,
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => {
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(root_store(ca)?), provider());
            if optional_client_cert {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The system's trust roots (unreadable ones skipped).
pub(crate) fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
}

/// The upstream client's rustls configuration: the configured CA bundle, or the system roots;
/// with `identity`, the peer must also present that SPIFFE ID ([`crate::peer_identity`]).
pub fn client_config(
    ca: Option<&Path>,
    identity: Option<&str>,
) -> Result<rustls::ClientConfig, TlsError> {
    let roots = match ca {
        Some(ca) => root_store(ca)?,
        None => system_roots(),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let config = match identity {
        None => builder.with_root_certificates(roots).with_no_client_auth(),
        Some(id) => {
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    crate::net::identity::SpiffeVerifier::new(webpki, id.to_owned()),
                ))
                .with_no_client_auth()
        }
    };
    Ok(config)
}

#[cfg(test)]
mod key_match_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_certificate_with_another_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str| {
            let k = rcgen::KeyPair::generate().unwrap();
            let c = rcgen::CertificateParams::new(vec!["localhost".into()])
                .unwrap()
                .self_signed(&k)
                .unwrap();
            let (cp, kp) = (
                dir.path().join(format!("{name}.crt")),
                dir.path().join(format!("{name}.key")),
            );
            std::fs::write(&cp, c.pem()).unwrap();
            std::fs::write(&kp, k.serialize_pem()).unwrap();
            (cp, kp)
        };
        let (a_crt, a_key) = write("a");
        let (b_crt, _) = write("b");
        assert!(certified_key(&a_crt, &a_key).is_ok());
        let e = certified_key(&b_crt, &a_key).unwrap_err();
        assert!(matches!(e, TlsError::KeyMismatch(_)), "{e}");
    }
}
