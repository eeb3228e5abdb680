//! What the proxy's integration tests share: an HTTPS server's TLS under an authority made
//! for the test (what a caller's `--upstream-ca` names).

#![allow(dead_code, clippy::unwrap_used)] // each test target uses part of it

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// An acceptor whose certificate names `names`, signed by a test authority made here, and
/// that authority's certificate (DER, and PEM for a client's `--cacert`). The authority has a name of its own: OpenSSL takes a leaf
/// whose issuer is its own subject (rcgen's default for both) for a self-signed one.
pub fn test_tls(names: &[&str]) -> (tokio_rustls::TlsAcceptor, CertificateDer<'static>, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "proxy test authority");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca.der().clone(),
        ca.pem(),
    )
}
