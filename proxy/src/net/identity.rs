//! The upstream's workload identity (SPEC §7, RICH §11.2 duty 2 and §13).
//!
//! A binding's `deployment.identity` names the workload that must answer it, as a SPIFFE ID.
//! When the upstream is HTTPS, the identity is checked *at the TLS handshake*: each expected
//! identity gets its own pooled client whose certificate verifier accepts a peer only if its
//! chain verifies against the configured CA and its certificate carries exactly one SPIFFE URI
//! SAN equal to that identity (the X.509-SVID rule). So a request, a write above all, never
//! reaches a peer with another identity: the handshake fails before a byte of it is sent, and
//! every pooled connection it might reuse passed the same check.
//!
//! As with Envoy's SAN matchers, a pinned identity replaces the host-name check (SVIDs usually
//! carry no DNS name); the chain, validity period and key usage are still verified by webpki.

use std::sync::Arc;

use palisade_rich::Bundle;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};

/// The peer answered with another identity than the one pinned.
#[derive(Clone, thiserror::Error)]
#[error("deployment identity mismatch: expected {expected}, peer presented {}", observed.as_deref().unwrap_or("no SPIFFE ID"))]
pub struct Mismatch {
    pub expected: String,
    /// The peer's SPIFFE ID, when its certificate has exactly one.
    pub observed: Option<String>,
    /// The peer's end-entity certificate (DER); its digest is the drift event's evidence.
    pub certificate: Vec<u8>,
}

impl std::fmt::Debug for Mismatch {
    // Not the certificate: it would fill a log line with bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mismatch")
            .field("expected", &self.expected)
            .field("observed", &self.observed)
            .finish_non_exhaustive()
    }
}

/// The SPIFFE ID of an X.509-SVID: its one `spiffe://` URI SAN. `None` when the certificate
/// cannot be parsed or has no URI SAN, or more than one (the SVID rule: exactly one).
pub fn spiffe_id(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    let mut uris = san.value.general_names.iter().filter_map(|n| match n {
        x509_parser::extensions::GeneralName::URI(u) => Some(*u),
        _ => None,
    });
    let first = uris.next()?;
    if uris.next().is_some() || !first.starts_with("spiffe://") {
        return None;
    }
    Some(first.to_owned())
}

/// webpki's verifier, plus the SPIFFE ID check in place of the host-name check.
#[derive(Debug)]
pub struct SpiffeVerifier {
    inner: Arc<WebPkiServerVerifier>,
    expected: String,
}

impl SpiffeVerifier {
    pub fn new(inner: Arc<WebPkiServerVerifier>, expected: String) -> Self {
        Self { inner, expected }
    }
}

/// webpki's checks of a server certificate but the host name's: its chain, validity and key
/// usage. webpki checks the chain first and the name last, so a name error means the chain
/// itself verified. (A pinned SPIFFE ID or `sslmode=verify-ca` replaces the name check.)
pub(crate) fn verify_chain(
    webpki: &WebPkiServerVerifier,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    server_name: &ServerName<'_>,
    ocsp_response: &[u8],
    now: UnixTime,
) -> Result<(), rustls::Error> {
    match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
        Ok(_)
        | Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => Ok(()),
        Err(e) => Err(e),
    }
}

impl ServerCertVerifier for SpiffeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        verify_chain(
            &self.inner,
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let observed = spiffe_id(end_entity);
        if observed.as_deref() == Some(self.expected.as_str()) {
            return Ok(ServerCertVerified::assertion());
        }
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(Mismatch {
                expected: self.expected.clone(),
                observed,
                certificate: end_entity.to_vec(),
            })),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Identities that will not be checked because the upstream is plain HTTP (SPEC §7: `config
/// check` warns).
pub fn unchecked(config: &crate::config::Config, bundle: Option<&Bundle>) -> Vec<String> {
    if config.upstream.url.scheme() == Some(&http::uri::Scheme::HTTPS) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if config.upstream.identity.is_some() {
        out.push("upstream.tls.identity is not checked: upstream.url is not https".to_owned());
    }
    let pinned = bundle.map_or(0, |b| {
        b.capabilities
            .iter()
            .filter(|c| c.deployment_identity.is_some())
            .count()
    });
    if pinned > 0 {
        out.push(format!(
            "deployment.identity of {pinned} capabilities is not checked: upstream.url is not https"
        ));
    }
    out
}

/// The identity mismatch somewhere in an upstream error's chain, if that is what failed.
///
/// hyper-rustls wraps the handshake's `io::Error` in another `io::Error`, and `io::Error`'s
/// `source()` skips the error it wraps, so each link is unwrapped through `get_ref()` too.
pub fn find_mismatch(err: &(dyn std::error::Error + 'static)) -> Option<Mismatch> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    // Bounded: error chains are short, and this must not spin on a cyclic one.
    for _ in 0..32 {
        let e = cur?;
        if let Some(rustls::Error::InvalidCertificate(CertificateError::Other(other))) =
            e.downcast_ref::<rustls::Error>()
        {
            return other.0.downcast_ref::<Mismatch>().cloned();
        }
        cur = match e.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => e.source(),
            },
            None => e.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(sans: Vec<rcgen::SanType>) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = sans;
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    fn uri(s: &str) -> rcgen::SanType {
        rcgen::SanType::URI(s.try_into().expect("ia5"))
    }

    #[test]
    fn one_spiffe_uri_is_the_identity() {
        let der = cert_with(vec![
            rcgen::SanType::DnsName("erp.local".try_into().expect("dns")),
            uri("spiffe://cluster.local/ns/erp/sa/erp"),
        ]);
        assert_eq!(
            spiffe_id(&der).as_deref(),
            Some("spiffe://cluster.local/ns/erp/sa/erp")
        );
    }

    #[test]
    fn no_two_or_foreign_uris_are_no_identity() {
        assert_eq!(spiffe_id(&cert_with(vec![])), None);
        assert_eq!(spiffe_id(&cert_with(vec![uri("https://erp.local/")])), None);
        let two = cert_with(vec![uri("spiffe://a/x"), uri("spiffe://a/y")]);
        assert_eq!(spiffe_id(&two), None);
        assert_eq!(spiffe_id(b"not a certificate"), None);
    }

    #[test]
    fn a_mismatch_is_found_through_nested_io_errors() {
        let m = Mismatch {
            expected: "spiffe://a/x".into(),
            observed: Some("spiffe://a/y".into()),
            certificate: vec![1, 2, 3],
        };
        let tls =
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(m))));
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let outer = std::io::Error::other(inner);
        let found = find_mismatch(&outer).expect("found");
        assert_eq!(found.observed.as_deref(), Some("spiffe://a/y"));
        let unrelated = std::io::Error::other("connection refused");
        assert!(find_mismatch(&unrelated).is_none());
        // The certificate stays out of logs.
        assert!(!format!("{found:?}").contains("[1, 2, 3]"));
    }
}
