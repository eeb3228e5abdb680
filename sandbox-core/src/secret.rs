//! Secrets the command uses without ever holding them.
//!
//! A run with secrets gives the command, in place of each secret's value, a placeholder made
//! for the run; the proxy (network mode `proxy`) swaps the placeholder for the value in one
//! place of requests to the secret's hosts only, on connections whose TLS it terminates. The
//! value itself stays in the host process: it is read here, before anything runs, into a
//! [`Secret`] that cannot be printed, serialised or logged, and is never put in the
//! command's environment, argv, files or the outcome.
//!
//! # What is checked before anything runs
//!
//! [`SecretSpec::resolve`] refuses a missing variable, an unreadable file, an empty value, a
//! value holding CR, LF or NUL (it could split a header), and a host that is not an exact
//! name (a wildcard or an address would let the value go where nobody named). Its errors
//! name the secret and its source, never the value.
//!
//! # What cannot be injected
//!
//! A secret that signs requests rather than travelling in them (AWS SigV4, HMAC request
//! signing) needs the value where the request is built, inside the sandbox: a placeholder
//! cannot stand in for it, and nothing here pretends otherwise.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::policy::normalize_name;

/// The longest value a secret may hold: far more than any token or key, small enough that a
/// file named by mistake (a log, an image) is refused rather than read into memory.
pub const MAX_SECRET_LEN: usize = 64 << 10;

/// The prefix of every placeholder. It names what it is, so a person who finds one in a log
/// or an error knows it is not a credential, and it matches no token format a scanner or a
/// server would take for a real one.
pub const PLACEHOLDER_PREFIX: &str = "sandbox-placeholder-";

/// The variables a run with secrets sets to its certificate bundle (so that tools trust the
/// run's authority on the hosts whose TLS the proxy terminates). A caller's value for one
/// of them would make those tools fail on those hosts, or trust something else, so it is
/// refused in a run with secrets.
pub const CA_BUNDLE_VARS: [&str; 7] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "PIP_CERT",
];

/// A secret's value. It has no `Serialize`, and its `Debug` and `Display` print only that
/// it is redacted, so a plan, an error or a log line that holds one never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wrap a value (checked by [`SecretSpec::resolve`], not here).
    pub fn new(value: Vec<u8>) -> Self {
        Self(value)
    }

    /// The value, for the one place that injects it (the proxy's rewriter).
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// The caller's environment variable of this name.
    Env(String),
    /// This file (one trailing newline stripped).
    File(PathBuf),
}

/// Where in a request to one of its hosts the value may go. Nowhere else: never a body,
/// never `Proxy-Authorization`, never plain HTTP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// The `Authorization` header (for `Basic`, inside the decoded credentials).
    #[default]
    Authorization,
    /// This header (lowercase).
    Header(String),
    /// This query parameter of the request target.
    Query(String),
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Authorization => f.write_str("header authorization"),
            Self::Header(h) => write!(f, "header {h}"),
            Self::Query(q) => write!(f, "query parameter {q}"),
        }
    }
}

/// A secret as the caller names it (`--secret NAME@HOST`), before its value is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretSpec {
    /// The variable the command sees the placeholder in.
    pub name: String,
    /// Where the value is read from.
    pub source: SecretSource,
    /// The hosts it may be sent to: exact names.
    pub hosts: Vec<String>,
    /// Where in a request it goes.
    pub placement: Placement,
}

/// A secret read and checked for a run: its value, and the placeholder the command gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedSecret {
    /// The variable name (also the name the record uses).
    pub name: String,
    /// The value; never enters the sandbox.
    pub value: Secret,
    /// The hosts, normalised exact names (lowercase, no trailing dot).
    pub hosts: Vec<String>,
    /// Where in a request it goes.
    pub placement: Placement,
    /// What the command gets in place of the value: unique to the run and the secret.
    pub placeholder: String,
}

/// Why a secret was refused. Never holds the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("secret `{name}`: {reason}")]
pub struct SecretError {
    /// The secret's name as written.
    pub name: String,
    /// What is wrong, with what would be right.
    pub reason: String,
}

fn err(name: &str, reason: impl Into<String>) -> SecretError {
    SecretError {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

fn valid_var_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// An HTTP field name (RFC 9110 `token`).
fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// Headers the value may never go into: the proxy's own, and those that frame or route
/// the request (the proxy writes them itself).
const FORBIDDEN_HEADERS: [&str; 9] = [
    "proxy-authorization",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
];

impl SecretSpec {
    /// Parse the command line's form: `NAME[=file:PATH]@HOST[,HOST...][:header=X|:query=P]`.
    /// The hosts follow the last `@`, so a path may hold one.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let Some((left, right)) = text.rsplit_once('@') else {
            return Err(err(
                text,
                "needs its hosts: write NAME@HOST[,HOST...] (the value comes from the \
                 variable NAME) or NAME=file:PATH@HOST",
            ));
        };
        let (name, source) = match left.split_once('=') {
            None => (left, SecretSource::Env(left.to_owned())),
            Some((name, src)) => match src.strip_prefix("file:") {
                Some(path) if !path.is_empty() => (name, SecretSource::File(path.into())),
                _ => {
                    return Err(err(
                        name,
                        format!(
                            "source `{src}` is not `file:PATH`; the value comes from the \
                             variable {name} (write {name}@HOST) or from a file \
                             ({name}=file:PATH@HOST)"
                        ),
                    ))
                }
            },
        };
        let (hosts, placement) = match right.split_once(':') {
            None => (right, Placement::Authorization),
            Some((hosts, place)) => (hosts, parse_placement(name, place)?),
        };
        Ok(Self {
            name: name.to_owned(),
            source,
            hosts: hosts.split(',').map(str::to_owned).collect(),
            placement,
        })
    }

    /// Check the name, hosts and placement, read the value, check it and make a
    /// placeholder. Reads the caller's environment or one file; touches nothing else.
    pub fn resolve(&self) -> Result<ResolvedSecret, SecretError> {
        let name = &self.name;
        if !valid_var_name(name) {
            return Err(err(
                name,
                "is not a variable name (letters, digits and `_`, not starting with a digit)",
            ));
        }
        if self.hosts.is_empty() || self.hosts.iter().any(String::is_empty) {
            return Err(err(name, "names no host: write NAME@HOST[,HOST...]"));
        }
        let mut hosts = Vec::new();
        for h in &self.hosts {
            let Some(n) = normalize_name(h) else {
                return Err(err(
                    name,
                    format!(
                        "host `{h}` is not an exact name (no wildcard, address or port): the \
                         value goes only to hosts named one by one"
                    ),
                ));
            };
            if !hosts.contains(&n) {
                hosts.push(n);
            }
        }
        check_placement(name, &self.placement)?;
        let mut value = match &self.source {
            SecretSource::Env(var) => std::env::var_os(var)
                .ok_or_else(|| {
                    err(
                        name,
                        format!(
                            "the variable {var} is not set in the caller's environment; set \
                             it, or read the value from a file ({name}=file:PATH@HOST)"
                        ),
                    )
                })?
                .into_encoded_bytes(),
            SecretSource::File(path) => read_capped(path).map_err(|e| {
                err(
                    name,
                    format!(
                        "cannot read the file {}: {e}; name a readable file",
                        path.display()
                    ),
                )
            })?,
        };
        if matches!(self.source, SecretSource::File(_)) && value.last() == Some(&b'\n') {
            value.pop();
        }
        if value.is_empty() {
            return Err(err(name, "the value is empty"));
        }
        if value.len() > MAX_SECRET_LEN {
            return Err(err(
                name,
                format!("the value is longer than {MAX_SECRET_LEN} bytes"),
            ));
        }
        if value.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(err(
                name,
                "the value holds a CR, LF or NUL byte, which could split the request it goes \
                 into; strip it (a file may end in one newline, no more)",
            ));
        }
        if value.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
            return Err(err(
                name,
                "the value holds a control character, which no header may carry",
            ));
        }
        Ok(ResolvedSecret {
            name: name.clone(),
            value: Secret::new(value),
            hosts,
            placement: self.placement.clone(),
            placeholder: placeholder().map_err(|e| {
                err(
                    name,
                    format!("cannot make a placeholder (the kernel's random source): {e}"),
                )
            })?,
        })
    }
}

fn parse_placement(name: &str, place: &str) -> Result<Placement, SecretError> {
    let placement = match place.split_once('=') {
        Some(("header", h)) => Placement::Header(h.to_ascii_lowercase()),
        Some(("query", q)) => Placement::Query(q.to_owned()),
        _ => {
            return Err(err(
                name,
                format!(
                    "`:{place}` is neither `:header=NAME` nor `:query=PARAM` (a host takes no \
                     port here: the value goes over HTTPS on 443)"
                ),
            ))
        }
    };
    Ok(placement)
}

fn check_placement(name: &str, placement: &Placement) -> Result<(), SecretError> {
    match placement {
        Placement::Authorization => Ok(()),
        Placement::Header(h) => {
            if !valid_token(h) {
                Err(err(name, format!("`{h}` is not a header name")))
            } else if FORBIDDEN_HEADERS.contains(&h.as_str()) {
                Err(err(
                    name,
                    format!("the value cannot go into `{h}`: the proxy writes that header itself"),
                ))
            } else {
                Ok(())
            }
        }
        Placement::Query(q) => {
            if q.is_empty()
                || !q
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"-._~".contains(&c))
            {
                Err(err(
                    name,
                    format!("`{q}` is not a plain query parameter name (letters, digits, `-._~`)"),
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Read at most one byte more than [`MAX_SECRET_LEN`], so a huge file costs no memory.
fn read_capped(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut v = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_SECRET_LEN as u64 + 2)
        .read_to_end(&mut v)?;
    Ok(v)
}

/// 128 random bits after [`PLACEHOLDER_PREFIX`], in lowercase hex: unique to the run and
/// the secret, and not guessable by the command, so that a placeholder the proxy sees is
/// this run's.
fn placeholder() -> std::io::Result<String> {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        filled +=
            rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty())?;
    }
    let mut s = String::from(PLACEHOLDER_PREFIX);
    for b in buf {
        s.push_str(&format!("{b:02x}"));
    }
    Ok(s)
}

/// The largest `--upstream-ca` file read: a bundle of a few hundred authorities, no more.
pub const MAX_UPSTREAM_CA_LEN: u64 = 4 << 20;

/// An authority the caller adds for verifying the real servers behind terminated hosts
/// (`--upstream-ca FILE`: a corporate proxy's, a test's). Read and checked before anything
/// runs; its certificates also go into the run's bundle, so the command's tools trust it
/// on the hosts they reach through a plain tunnel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamCa {
    /// The file as named.
    pub path: PathBuf,
    /// Its certificates, DER, in file order (at least one).
    pub certs: Vec<Vec<u8>>,
}

impl UpstreamCa {
    /// Read `path`: PEM holding one or more `CERTIFICATE` sections and nothing else
    /// (a private key there is a mistake this refuses rather than carries).
    pub fn read(path: &Path) -> Result<Self, String> {
        use rustls_pki_types::pem::{PemObject, SectionKind};
        use std::io::Read;
        let shown = path.display();
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_UPSTREAM_CA_LEN + 1).read_to_end(&mut bytes))
            .map_err(|e| format!("cannot read {shown}: {e}; name a readable PEM file"))?;
        if bytes.len() as u64 > MAX_UPSTREAM_CA_LEN {
            return Err(format!(
                "{shown} is larger than {MAX_UPSTREAM_CA_LEN} bytes; name a file of PEM \
                 certificates"
            ));
        }
        let mut certs = Vec::new();
        for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(&bytes) {
            match section {
                Ok((SectionKind::Certificate, der)) => certs.push(der),
                Ok((kind, _)) => {
                    return Err(format!(
                        "{shown} holds a {kind:?} section; it must hold certificates only \
                         (`-----BEGIN CERTIFICATE-----`)"
                    ))
                }
                Err(e) => return Err(format!("{shown} is not valid PEM ({e})")),
            }
        }
        if certs.is_empty() {
            return Err(format!(
                "{shown} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)"
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            certs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_secret(content: &[u8], hosts: &str) -> (tempfile::TempDir, SecretSpec) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tok");
        std::fs::write(&p, content).unwrap();
        let spec = SecretSpec::parse(&format!("TOK=file:{}@{hosts}", p.display())).unwrap();
        (d, spec)
    }

    #[test]
    fn the_command_line_form_parses_every_part() {
        let s = SecretSpec::parse("GH_TOKEN@api.github.com,github.com").unwrap();
        assert_eq!(s.name, "GH_TOKEN");
        assert_eq!(s.source, SecretSource::Env("GH_TOKEN".into()));
        assert_eq!(s.hosts, ["api.github.com", "github.com"]);
        assert_eq!(s.placement, Placement::Authorization);
        let s = SecretSpec::parse("K=file:/a@b/k@x.org:header=X-Api-Key").unwrap();
        assert_eq!(s.source, SecretSource::File("/a@b/k".into()));
        assert_eq!(s.hosts, ["x.org"]);
        assert_eq!(s.placement, Placement::Header("x-api-key".into()));
        let s = SecretSpec::parse("K@x.org:query=token").unwrap();
        assert_eq!(s.placement, Placement::Query("token".into()));
        for bad in [
            "K",
            "K=env:X@x.org",
            "K=file:@x.org",
            "K@x.org:443",
            "K@x.org:body=a",
        ] {
            assert!(SecretSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_value_loses_one_trailing_newline_and_gets_a_fresh_placeholder() {
        let (_d, spec) = file_secret(b"ghp_value\n", "Example.ORG.");
        let a = spec.resolve().unwrap();
        assert_eq!(a.value.expose(), b"ghp_value");
        assert_eq!(a.hosts, ["example.org"]);
        assert!(a.placeholder.starts_with(PLACEHOLDER_PREFIX));
        assert_eq!(a.placeholder.len(), PLACEHOLDER_PREFIX.len() + 32);
        assert!(!a.placeholder.contains("ghp_value"));
        let b = spec.resolve().unwrap();
        assert_ne!(a.placeholder, b.placeholder, "unique to each run");
    }

    #[test]
    fn bad_values_and_hosts_are_refused_without_showing_the_value() {
        for (content, why) in [
            (&b""[..], "empty"),
            (b"\n", "empty"),
            (b"hun\nter-value", "CR, LF or NUL"),
            (b"hunter-value\n\n", "CR, LF or NUL"),
            (b"hunter\r-value", "CR, LF or NUL"),
            (b"hunter\0-value", "CR, LF or NUL"),
            (b"hunter\x1b-value", "control character"),
        ] {
            let (_d, spec) = file_secret(content, "x.org");
            let e = spec.resolve().unwrap_err().to_string();
            assert!(e.contains(why), "{content:?}: {e}");
            assert!(!e.contains("hun"), "the value leaked into: {e}");
        }
        let (_d, big) = file_secret(&vec![b'a'; MAX_SECRET_LEN + 1], "x.org");
        assert!(big.resolve().unwrap_err().to_string().contains("longer"));
        for host in ["*.x.org", "10.0.0.1", "[::1]", "x.org:8443", "x..org", ""] {
            let (_d, spec) = file_secret(b"v", "x.org");
            let spec = SecretSpec {
                hosts: vec![host.into()],
                ..spec
            };
            let e = spec.resolve().unwrap_err().to_string();
            assert!(
                e.contains("exact name") || e.contains("names no host"),
                "{host}: {e}"
            );
        }
        let missing = SecretSpec::parse("SANDBOX_TEST_SURELY_UNSET_VAR@x.org").unwrap();
        let e = missing.resolve().unwrap_err().to_string();
        assert!(e.contains("is not set"), "{e}");
        let nofile = SecretSpec::parse("K=file:/nonexistent/tok@x.org").unwrap();
        let e = nofile.resolve().unwrap_err().to_string();
        assert!(e.contains("cannot read the file /nonexistent/tok"), "{e}");
        let bad_name = SecretSpec::parse("1K=file:/x@x.org").unwrap();
        assert!(bad_name
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("variable name"));
    }

    #[test]
    fn framing_and_proxy_headers_cannot_carry_a_value() {
        for h in [
            "proxy-authorization",
            "Host",
            "content-length",
            "transfer-encoding",
            "x y",
        ] {
            let (_d, spec) = file_secret(b"v", &format!("x.org:header={h}"));
            assert!(spec.resolve().is_err(), "{h}");
        }
        let (_d, spec) = file_secret(b"v", "x.org:query=a&b");
        assert!(spec.resolve().is_err());
    }

    #[test]
    fn a_secret_never_prints_its_value() {
        let (_d, spec) = file_secret(b"hunter2-value", "x.org");
        let r = spec.resolve().unwrap();
        assert_eq!(format!("{}", r.value), "<redacted>");
        let dbg = format!("{r:?}");
        assert!(!dbg.contains("hunter2"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
    }
}
