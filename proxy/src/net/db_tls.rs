//! TLS to the state store's database, with libpq's `sslmode` meanings (SPEC §10): what a
//! PostgreSQL user expects from the same URL in `psql`.
//!
//! | sslmode | encrypted | chain checked | host name checked |
//! |---|---|---|---|
//! | `disable` | no | – | – |
//! | `allow`, `prefer` | if the server offers it | only with `sslrootcert` | no |
//! | `require` | yes | only with `sslrootcert` (as libpq) | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::identity::verify_chain;
use super::tls::{load_certs, load_key, provider, root_store, system_roots, TlsError};

pub use palisade_store::postgres::{Roots, Verify};

/// The rustls client configuration for `verify`, with an optional client certificate
/// (`sslcert`/`sslkey`): the store's [`palisade_store::postgres::ClientTls`].
pub fn client_config(
    verify: Verify,
    roots: Option<Roots<'_>>,
    client: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, String> {
    build(verify, roots, client).map_err(|e| e.to_string())
}

fn build(
    verify: Verify,
    roots: Option<Roots<'_>>,
    client: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Nothing => Arc::new(Unverified),
        Verify::Chain | Verify::Full => {
            let roots = match roots {
                Some(Roots::File(path)) => root_store(path)?,
                Some(Roots::System) => system_roots(),
                None => {
                    return Err(TlsError::Rustls(
                        "sslmode verify-ca and verify-full need sslrootcert".into(),
                    ))
                }
            };
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?;
            if verify == Verify::Full {
                webpki
            } else {
                Arc::new(AnyName(webpki))
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| TlsError::Rustls(e.to_string())),
    }
}

/// `verify-ca`: webpki's checks but the host name's.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        verify_chain(&self.0, end_entity, intermediates, server_name, ocsp, now)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer`/`require` without roots: encrypted, the peer not authenticated (libpq's meaning).
/// The handshake's signatures are still checked, so the session key is the peer's.
#[derive(Debug)]
struct Unverified;

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
