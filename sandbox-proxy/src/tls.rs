//! The run's certificate authority, for the hosts whose TLS the proxy terminates (those
//! with secrets), and the TLS settings of both sides of a terminated connection.
//!
//! # Guarantees
//!
//! - The authority's key is made in memory for one run (ECDSA P-256) and dropped with it:
//!   it is never written to a disk and never enters the sandbox; only its certificate does.
//! - The authority is name-constrained to the run's terminated hosts, so even its key
//!   could sign for nothing else (clients that check name constraints refuse the rest).
//! - A leaf is made once per name and cached for the run.
//! - The server side answers only a `ClientHello` whose server name is exactly the host
//!   decided for the connection: no server name (a client reaching the host by address),
//!   or another name, ends the handshake. ALPN offers `http/1.1` only, since the request
//!   judge ([`crate::inject`]) reads HTTP/1.1 alone.
//! - The upstream side verifies the real server against Mozilla's roots
//!   (`webpki-roots`) plus the authorities the caller adds (`--upstream-ca`), and asks
//!   for `http/1.1` alone.
//!
//! - The command trusts the authority through one bundle ([`bundle_pem`]): certificates
//!   only, the host's roots first, the authority's certificate last.
//!
//! Used by the `CONNECT` relay for hosts with secrets ([`crate::terminate`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints, PKCS_ECDSA_P256_SHA256,
};
pub use rustls::pki_types::CertificateDer;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The one protocol both sides offer.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why the authority or a leaf could not be made, or a TLS setting built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Making a key or a certificate failed.
    #[error("cannot make the run's certificate authority or a certificate for {what}: {reason}")]
    Certificate {
        /// The authority, or a host name.
        what: String,
        /// The library's reason.
        reason: String,
    },
    /// A TLS setting could not be built.
    #[error("cannot build the proxy's TLS settings: {0}")]
    Config(#[from] rustls::Error),
}

fn cert_err(what: &str, e: impl std::fmt::Display) -> TlsError {
    TlsError::Certificate {
        what: what.to_owned(),
        reason: e.to_string(),
    }
}

/// A run's certificate authority and its cache of leaves.
pub struct RunAuthority {
    key: KeyPair,
    cert: rcgen::Certificate,
    hosts: Vec<String>,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for RunAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunAuthority")
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl RunAuthority {
    /// An authority for `hosts` (exact names, normalised), made now, in memory.
    pub fn new(hosts: &[String]) -> Result<Self, TlsError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|e| cert_err("the authority", e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "sandbox run authority (this run only)");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: hosts
                .iter()
                .map(|h| GeneralSubtree::DnsName(h.clone()))
                .collect(),
            excluded_subtrees: Vec::new(),
        });
        let cert = params
            .self_signed(&key)
            .map_err(|e| cert_err("the authority", e))?;
        Ok(Self {
            key,
            cert,
            hosts: hosts.to_vec(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The authority's certificate (public), in PEM: what goes into the run's bundle.
    pub fn ca_pem(&self) -> String {
        self.cert.pem()
    }

    /// The authority's certificate (public), in DER.
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// The leaf for `host` (one of the authority's hosts), made once and cached.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, TlsError> {
        if !self.hosts.iter().any(|h| h == host) {
            return Err(cert_err(host, "not a host with secrets in this run"));
        }
        let mut leaves = self
            .leaves
            .lock()
            .map_err(|_| cert_err(host, "the certificate cache was poisoned"))?;
        if let Some(k) = leaves.get(host) {
            return Ok(k.clone());
        }
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| cert_err(host, e))?;
        let mut params =
            CertificateParams::new(vec![host.to_owned()]).map_err(|e| cert_err(host, e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(|e| cert_err(host, e))?;
        let der_key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer =
            rustls::crypto::ring::sign::any_ecdsa_type(&der_key).map_err(|e| cert_err(host, e))?;
        let certified = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert.der().clone()],
            signer,
        ));
        leaves.insert(host.to_owned(), certified.clone());
        Ok(certified)
    }

    /// The server side for a connection decided for `host`: only a `ClientHello` naming
    /// exactly `host` gets a certificate.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let resolver = ExactName {
            host: host.to_owned(),
            key: self.leaf(host)?,
        };
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(Arc::new(config))
    }
}

/// Answers only the one server name a connection was decided for.
#[derive(Debug)]
struct ExactName {
    host: String,
    key: Arc<CertifiedKey>,
}

impl ResolvesServerCert for ExactName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // No server name (reached by address) or another name: no certificate, and the
        // handshake ends. rustls has already lowercased the name and refused an IP literal
        // as a server name.
        let name = hello.server_name()?;
        name.eq_ignore_ascii_case(&self.host)
            .then(|| self.key.clone())
    }
}

/// The crypto of both sides: `ring`. rustls marks its `ring` provider deprecated because
/// it offers no post-quantum key exchange; the alternative (aws-lc-rs) needs a much heavier
/// C build. A terminated connection therefore negotiates classical key exchange on both
/// hops, which the docs say; switching is this one function.
#[allow(deprecated)]
fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The upstream side: Mozilla's roots plus `extra` (the caller's `--upstream-ca`), ALPN
/// `http/1.1` alone.
pub fn upstream_config(
    extra: &[CertificateDer<'static>],
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for c in extra {
        roots.add(c.clone())?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// The run's certificate bundle, the one file the command's tools read to trust the
/// run's authority: the certificates of `host_roots` (the host's bundle: as it is when
/// every PEM section in it is a certificate, else its certificates alone, so no key can
/// come along), then `extra` (the caller's `--upstream-ca`), then the authority's
/// certificate, each written from its DER.
pub fn bundle_pem(
    host_roots: &[u8],
    extra: &[CertificateDer<'_>],
    authority: &RunAuthority,
) -> String {
    use rustls::pki_types::pem::PemObject;
    let mut out = String::new();
    let only_certificates = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("-----BEGIN"))
            .all(|l| l.trim_end() == "-----BEGIN CERTIFICATE-----")
    };
    match std::str::from_utf8(host_roots) {
        // Every section a certificate (the usual host bundle): taken as it is, which
        // spares every run the decoding of a few hundred certificates.
        Ok(text) if only_certificates(text) => {
            out.push_str(text);
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
        }
        // Anything else in it (a key by mistake): its certificates alone, written anew. A
        // section the parser cannot read is skipped, not fatal: the host's tools already
        // live with that file, and the run's authority is what matters here.
        _ => {
            for cert in CertificateDer::pem_slice_iter(host_roots).flatten() {
                push_pem(&mut out, &cert);
            }
        }
    }
    for cert in extra {
        push_pem(&mut out, cert);
    }
    push_pem(&mut out, &authority.ca_der());
    out
}

fn push_pem(out: &mut String, der: &[u8]) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        // Base64 is ASCII.
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn client(ca: CertificateDer<'static>, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        Arc::new(c)
    }

    /// A handshake over an in-memory pipe: the client asks for `sni`, the server was
    /// decided for `host`. The ALPN the client ended with, or the server's error (judged
    /// on the server's side, so a client's own name check cannot make a case pass).
    async fn handshake(
        auth: &RunAuthority,
        host: &str,
        sni: ServerName<'static>,
        alpn: &[&[u8]],
    ) -> Result<Option<Vec<u8>>, String> {
        let (c, s) = tokio::io::duplex(64 << 10);
        let acceptor = tokio_rustls::TlsAcceptor::from(auth.server_config(host).unwrap());
        let server = tokio::spawn(async move {
            let mut tls = acceptor.accept(s).await.map_err(|e| e.to_string())?;
            let mut buf = [0u8; 5];
            tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
            tls.write_all(&buf).await.map_err(|e| e.to_string())?;
            tls.flush().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(())
        });
        let connector = tokio_rustls::TlsConnector::from(client(auth.ca_der(), alpn));
        let res = async {
            let mut tls = connector.connect(sni, c).await.map_err(|e| e.to_string())?;
            tls.write_all(b"hello").await.map_err(|e| e.to_string())?;
            let mut buf = [0u8; 5];
            tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
            assert_eq!(&buf, b"hello");
            Ok::<_, String>(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
        }
        .await;
        server.await.unwrap()?;
        res.map_err(|e| format!("the server accepted, the client failed: {e}"))
    }

    fn name(s: &str) -> ServerName<'static> {
        ServerName::try_from(s.to_owned()).unwrap()
    }

    #[tokio::test]
    async fn the_decided_host_is_served_over_http1_under_the_runs_authority() {
        let auth = RunAuthority::new(&["api.test".into(), "git.test".into()]).unwrap();
        let alpn = handshake(&auth, "api.test", name("api.test"), &[b"h2", ALPN_HTTP1])
            .await
            .unwrap();
        assert_eq!(alpn.as_deref(), Some(ALPN_HTTP1));
        assert!(auth.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        // Cached: the same leaf for the same name.
        assert!(Arc::ptr_eq(
            &auth.leaf("api.test").unwrap(),
            &auth.leaf("api.test").unwrap()
        ));
        assert!(auth.leaf("other.test").is_err());
    }

    #[tokio::test]
    async fn another_server_name_or_an_address_gets_no_certificate() {
        let auth = RunAuthority::new(&["api.test".into(), "git.test".into()]).unwrap();
        // A name the run has a leaf for, on a connection decided for another host.
        let e = handshake(&auth, "api.test", name("git.test"), &[ALPN_HTTP1])
            .await
            .unwrap_err();
        assert!(e.contains("no server certificate"), "{e}");
        // Reached by address: the client sends no server name.
        let e = handshake(&auth, "api.test", name("127.0.0.1"), &[ALPN_HTTP1])
            .await
            .unwrap_err();
        assert!(e.contains("no server certificate"), "{e}");
    }

    #[tokio::test]
    async fn a_client_that_offers_only_h2_is_refused() {
        let auth = RunAuthority::new(&["api.test".into()]).unwrap();
        let e = handshake(&auth, "api.test", name("api.test"), &[b"h2"])
            .await
            .unwrap_err();
        assert!(
            e.to_lowercase().contains("protocol") || e.contains("alpn"),
            "{e}"
        );
    }

    #[test]
    fn the_bundle_holds_certificates_only_and_ends_with_the_runs_authority() {
        use rustls::pki_types::pem::{PemObject, SectionKind};
        let auth = RunAuthority::new(&["api.test".into()]).unwrap();
        let other = RunAuthority::new(&["x.test".into()]).unwrap();
        // A host bundle with a key in it by mistake, and a line of noise.
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let plain = format!("# roots\n{}", other.ca_pem());
        let pem = bundle_pem(plain.as_bytes(), &[], &auth);
        assert!(
            pem.starts_with(&plain),
            "a bundle of certificates is taken as it is"
        );
        let host = format!("# roots\n{}{}", other.ca_pem(), key.serialize_pem());
        let extra = RunAuthority::new(&["y.test".into()]).unwrap();
        let pem = bundle_pem(host.as_bytes(), &[extra.ca_der()], &auth);
        let sections: Vec<(SectionKind, Vec<u8>)> =
            <(SectionKind, Vec<u8>)>::pem_slice_iter(pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        assert!(sections.iter().all(|(k, _)| *k == SectionKind::Certificate));
        let ders: Vec<&[u8]> = sections.iter().map(|(_, d)| d.as_slice()).collect();
        assert_eq!(
            ders,
            [
                other.ca_der().as_ref(),
                extra.ca_der().as_ref(),
                auth.ca_der().as_ref()
            ]
        );
        assert!(!pem.contains("PRIVATE KEY"));
    }

    #[test]
    fn the_upstream_side_takes_the_callers_authority() {
        let auth = RunAuthority::new(&["api.test".into()]).unwrap();
        let c = upstream_config(&[auth.ca_der()]).unwrap();
        assert_eq!(c.alpn_protocols, [ALPN_HTTP1.to_vec()]);
    }
}
