//! Certificates made for a test: a CA, server and client identities (rcgen).

use super::*;

// ---- certificates ------------------------------------------------------------------------

/// A test CA with a server certificate for `localhost`/127.0.0.1 and a client certificate.
/// Private keys are generated per test and written only to the test's temp directory.
pub struct Pki {
    pub dir: PathBuf,
    pub ca_pem: String,
    ca_cert: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "palisade test CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let pki = Pki {
            dir: dir.to_owned(),
            ca_pem: ca_cert.pem(),
            ca_cert,
            ca_key,
        };
        std::fs::write(pki.path("ca.pem"), &pki.ca_pem).unwrap();
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn issue(&self, cn: &str, server: bool) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let sans = if server {
            vec!["localhost".to_string(), "127.0.0.1".to_string()]
        } else {
            vec![]
        };
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost` carrying `spiffe` as a URI SAN (an X.509-SVID
    /// with a DNS name too), or no URI SAN at all.
    pub fn issue_spiffe(&self, spiffe: Option<&str>) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        if let Some(id) = spiffe {
            params
                .subject_alt_names
                .push(rcgen::SanType::URI(id.try_into().unwrap()));
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A client certificate (clientAuth) carrying `spiffe` as its one URI SAN: an X.509-SVID
    /// as SPIRE or a mesh issues it to a workload.
    pub fn issue_client_spiffe(&self, spiffe: &str) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::URI(spiffe.try_into().unwrap()));
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Issues a server certificate and writes it as `server.crt`/`server.key`.
    pub fn write_server(&self, cn: &str) -> Issued {
        let issued = self.issue(cn, true);
        std::fs::write(self.path("server.crt"), &issued.cert_pem).unwrap();
        std::fs::write(self.path("server.key"), &issued.key_pem).unwrap();
        issued
    }
}
