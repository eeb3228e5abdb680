//! Secrets on a terminated connection: each request head judged and written out anew, the
//! placeholder swapped for the value only in the one place allowed for the decided host,
//! and any placeholder elsewhere refused as an exfiltration attempt; bodies scanned for a
//! placeholder, responses for the value.
//!
//! Pure: bytes in, a verdict out; [`crate::terminate`] feeds it. No backend claims
//! [`Capability::secrets`](sandbox_core::Capability::secrets) yet (the run's bundle is not
//! inside the sandbox yet), so no sandboxed run reaches this code until one does.
//!
//! # Why each refusal
//!
//! - A placeholder anywhere but the allowed place (another host, another header, the
//!   target, a body, plain HTTP) would be harmless by itself, since only the allowed place
//!   is rewritten; it is refused and named anyway, because it is the command trying to send
//!   the credential somewhere else, and the person running it should see that.
//! - Conflicting framing (`Content-Length` with `Transfer-Encoding`, two lengths, an
//!   encoding other than `chunked`) is how a second request is smuggled past a judge that
//!   reads the first; the proxy frames every body itself, so it refuses what it would
//!   have to guess.
//! - An absolute-form target for another host, a `Host` header for another host: the
//!   upstream is the decided host, and a request that says otherwise is fronting.
//! - `CONNECT` inside a terminated connection would open a tunnel the proxy cannot see;
//!   an upgrade other than `websocket` (`h2c`) would carry requests it cannot judge.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use sandbox_core::{Placement, ResolvedSecret};

/// The most header fields one request may have; more is refused rather than grown into.
pub const MAX_HEADERS: usize = 100;

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The secret's placeholder was seen where its value may not go.
    #[error("secret {secret} sent to {host} in {place}: refused as an exfiltration attempt")]
    Exfiltration {
        /// The secret's name (never its value or placeholder).
        secret: String,
        /// The decided host.
        host: String,
        /// Where it was seen (`header x-debug`, `the body`, `the request target`).
        place: String,
    },
    /// The request is malformed or ambiguous.
    #[error("request refused: {0}")]
    Malformed(String),
}

/// How the body that follows a judged head is framed; the proxy re-frames it the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked.
    Chunked,
}

/// A head that passed: written out anew for the decided host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    /// The head to send upstream, ending in the empty line.
    pub head: Vec<u8>,
    /// How the body is framed.
    pub framing: Framing,
    /// The names of the secrets injected.
    pub injected: Vec<String>,
    /// A websocket upgrade (after it, frames are relayed uninspected).
    pub websocket: bool,
}

/// Judge one request head (`head`, up to and including the empty line) sent to `host`
/// (decided by the proxy: the `CONNECT` target or the terminated name) on port `port`;
/// `tls` is whether the connection is terminated TLS (a value never goes over plain HTTP).
pub fn judge_request(
    secrets: &[ResolvedSecret],
    host: &str,
    port: u16,
    tls: bool,
    head: &[u8],
) -> Result<Judged, Refusal> {
    let bad = |s: &str| Refusal::Malformed(s.to_owned());
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    // httparse refuses obsolete line folding in requests, bare CR and invalid names.
    match req.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        Ok(httparse::Status::Complete(_)) => return Err(bad("bytes after the head")),
        Ok(httparse::Status::Partial) => return Err(bad("an incomplete head")),
        Err(e) => return Err(Refusal::Malformed(format!("a malformed head ({e})"))),
    }
    let method = req.method.unwrap_or_default();
    let target = req.path.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err(bad("CONNECT inside a terminated connection"));
    }
    if req.version != Some(1) {
        return Err(bad("not HTTP/1.1"));
    }
    let scheme = if tls { "https://" } else { "http://" };
    let origin = if target.starts_with('/') {
        target.to_owned()
    } else if let Some(rest) = strip_prefix_ci(target, scheme) {
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if !same_authority(authority, host, port, tls) {
            return Err(bad("an absolute-form target for another host"));
        }
        if path.is_empty() {
            "/".to_owned()
        } else {
            path.to_owned()
        }
    } else {
        return Err(bad("a target that is neither a path nor this host's URL"));
    };

    let mut injected: Vec<String> = Vec::new();
    let mut out_headers: Vec<(String, Vec<u8>)> = Vec::new();
    let (mut length, mut chunked, mut saw_te, mut hosts) = (None::<u64>, false, false, 0);
    let mut websocket = false;
    for f in req.headers.iter() {
        let name = f.name.to_ascii_lowercase();
        let value = f.value;
        match name.as_str() {
            "host" => {
                hosts += 1;
                let v = std::str::from_utf8(value).map_err(|_| bad("a Host that is not text"))?;
                if hosts > 1 || !same_authority(v.trim(), host, port, tls) {
                    return Err(bad("a Host header for another host (fronting)"));
                }
                continue;
            }
            "content-length" => {
                let v = std::str::from_utf8(value)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| bad("a Content-Length that is not a number"))?;
                if length.is_some_and(|l| l != v) {
                    return Err(bad("two different Content-Length values"));
                }
                length = Some(v);
                continue;
            }
            "transfer-encoding" => {
                if saw_te || !value.eq_ignore_ascii_case(b"chunked") {
                    return Err(bad("a Transfer-Encoding other than one `chunked`"));
                }
                saw_te = true;
                chunked = true;
                continue;
            }
            "upgrade" => {
                if !value.eq_ignore_ascii_case(b"websocket") {
                    return Err(bad("an upgrade other than websocket (h2c is refused)"));
                }
                websocket = true;
            }
            // The proxy's own credentials are never forwarded, nor filled.
            "proxy-authorization" | "proxy-connection" => continue,
            _ => {}
        }
        let value = rewrite_field(secrets, host, tls, &name, value, &mut injected)?;
        out_headers.push((f.name.to_owned(), value));
    }
    if length.is_some() && chunked {
        return Err(bad("both Content-Length and Transfer-Encoding"));
    }
    let origin = rewrite_target(secrets, host, tls, &origin, &mut injected)?;

    let mut out = Vec::with_capacity(head.len() + 64);
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(origin.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(authority_of(host, port, tls).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (n, v) in &out_headers {
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    let framing = match (length, chunked) {
        (Some(l), _) => {
            out.extend_from_slice(format!("Content-Length: {l}\r\n").as_bytes());
            Framing::Length(l)
        }
        (None, true) => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            Framing::Chunked
        }
        (None, false) => Framing::None,
    };
    out.extend_from_slice(b"\r\n");
    Ok(Judged {
        head: out,
        framing,
        injected,
        websocket,
    })
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

fn default_port(tls: bool) -> u16 {
    if tls {
        443
    } else {
        80
    }
}

fn authority_of(host: &str, port: u16, tls: bool) -> String {
    if port == default_port(tls) {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    }
}

/// `authority` names exactly `host:port` (the port may be left out when it is the
/// scheme's default; the name compares without case and a trailing dot).
fn same_authority(authority: &str, host: &str, port: u16, tls: bool) -> bool {
    let (name, p) = match authority.rsplit_once(':') {
        Some((n, p)) if !n.contains(':') => match p.parse::<u16>() {
            Ok(p) => (n, p),
            Err(_) => return false,
        },
        Some(_) => return false,
        None => (authority, default_port(tls)),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    p == port && name.eq_ignore_ascii_case(host)
}

/// The secret allowed in field `name` of a request to `host`, if any.
fn allowed_in_header<'a>(
    s: &'a ResolvedSecret,
    host: &str,
    tls: bool,
    name: &str,
) -> Option<&'a ResolvedSecret> {
    let place_ok = match &s.placement {
        Placement::Authorization => name == "authorization",
        Placement::Header(h) => name == h,
        Placement::Query(_) => false,
    };
    (tls && place_ok && s.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))).then_some(s)
}

/// One header value with placeholders swapped where allowed; a placeholder anywhere else
/// (also inside `Basic` credentials, decoded) is refused.
fn rewrite_field(
    secrets: &[ResolvedSecret],
    host: &str,
    tls: bool,
    name: &str,
    value: &[u8],
    injected: &mut Vec<String>,
) -> Result<Vec<u8>, Refusal> {
    let refuse = |s: &ResolvedSecret| Refusal::Exfiltration {
        secret: s.name.clone(),
        host: host.to_owned(),
        place: format!("header {name}"),
    };
    let mut value = value.to_vec();
    // Basic credentials are base64: decoded, rewritten as bytes, encoded again.
    if name == "authorization" && value.len() > 6 && value[..6].eq_ignore_ascii_case(b"basic ") {
        if let Ok(mut creds) = STANDARD.decode(value[6..].trim_ascii()) {
            let mut changed = false;
            for s in secrets {
                if find(&creds, s.placeholder.as_bytes()).is_some() {
                    let s = allowed_in_header(s, host, tls, name).ok_or_else(|| refuse(s))?;
                    creds = replace(&creds, s.placeholder.as_bytes(), s.value.expose());
                    note(injected, &s.name);
                    changed = true;
                }
            }
            if changed {
                let mut v = b"Basic ".to_vec();
                v.extend_from_slice(STANDARD.encode(&creds).as_bytes());
                value = v;
            }
        }
    }
    for s in secrets {
        if find(&value, s.placeholder.as_bytes()).is_some() {
            let s = allowed_in_header(s, host, tls, name).ok_or_else(|| refuse(s))?;
            value = replace(&value, s.placeholder.as_bytes(), s.value.expose());
            note(injected, &s.name);
        }
    }
    Ok(value)
}

/// The target with a placeholder swapped only as the whole value of the secret's query
/// parameter, percent-encoded; anywhere else in the target it is refused.
fn rewrite_target(
    secrets: &[ResolvedSecret],
    host: &str,
    tls: bool,
    target: &str,
    injected: &mut Vec<String>,
) -> Result<String, Refusal> {
    let Some(first) = secrets.iter().find(|s| target.contains(&s.placeholder)) else {
        return Ok(target.to_owned());
    };
    let refuse = |s: &ResolvedSecret| Refusal::Exfiltration {
        secret: s.name.clone(),
        host: host.to_owned(),
        place: "the request target".into(),
    };
    let Some((path, query)) = target.split_once('?') else {
        return Err(refuse(first));
    };
    if let Some(s) = secrets.iter().find(|s| path.contains(&s.placeholder)) {
        return Err(refuse(s));
    }
    if query.contains('#') {
        return Err(refuse(first));
    }
    let mut params = Vec::new();
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let mut pair = pair.to_owned();
        if let Some(s) = secrets.iter().find(|s| pair.contains(&s.placeholder)) {
            let allowed = tls
                && v == s.placeholder
                && matches!(&s.placement, Placement::Query(q) if q == k)
                && s.hosts.iter().any(|h| h.eq_ignore_ascii_case(host));
            if !allowed {
                return Err(refuse(s));
            }
            pair = format!("{k}={}", percent_encode(s.value.expose()));
            note(injected, &s.name);
        }
        params.push(pair);
    }
    Ok(format!("{path}?{}", params.join("&")))
}

fn percent_encode(v: &[u8]) -> String {
    let mut s = String::with_capacity(v.len() * 3);
    for &b in v {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

fn note(injected: &mut Vec<String>, name: &str) {
    if !injected.iter().any(|n| n == name) {
        injected.push(name.to_owned());
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut rest = hay;
    while let Some(i) = find(rest, from) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(to);
        rest = &rest[i + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Looks for any of a set of byte strings across a stream cut into chunks at any place: a
/// request body for placeholders, a response for the values. One matching automaton per
/// string (Knuth–Morris–Pratt), fed byte by byte, so each chunk costs its length once per
/// string, memory is bounded by the strings whatever the stream, and what could still
/// begin a match is known exactly ([`StreamScanner::holds_back`]).
#[derive(Debug)]
pub struct StreamScanner {
    needles: Vec<Needle>,
}

#[derive(Debug)]
struct Needle {
    name: String,
    bytes: Vec<u8>,
    /// `fail[i]`: the longest proper prefix of `bytes[..=i]` that is also its suffix.
    fail: Vec<usize>,
    /// How many bytes of `bytes` the stream's end matches.
    state: usize,
}

impl Needle {
    fn new(name: String, bytes: Vec<u8>) -> Self {
        let mut fail = vec![0; bytes.len()];
        let mut k = 0;
        for i in 1..bytes.len() {
            while k > 0 && bytes[i] != bytes[k] {
                k = fail[k - 1];
            }
            if bytes[i] == bytes[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Self {
            name,
            bytes,
            fail,
            state: 0,
        }
    }

    /// Advance over `b`; true when the string ends here.
    fn step(&mut self, b: u8) -> bool {
        while self.state > 0 && b != self.bytes[self.state] {
            self.state = self.fail[self.state - 1];
        }
        if b == self.bytes[self.state] {
            self.state += 1;
        }
        if self.state == self.bytes.len() {
            self.state = self.fail[self.state - 1];
            return true;
        }
        false
    }
}

impl StreamScanner {
    /// A scanner for request bodies: every secret's placeholder.
    pub fn placeholders(secrets: &[ResolvedSecret]) -> Self {
        Self::new(
            secrets
                .iter()
                .map(|s| (s.name.clone(), s.placeholder.as_bytes().to_vec()))
                .collect(),
        )
    }

    /// A scanner for responses: every secret's value, plain and in base64 (standard and
    /// URL-safe) at each of the three alignments, so an endpoint that echoes the request
    /// (headers, or `Basic` credentials) cannot hand it back.
    pub fn values(secrets: &[ResolvedSecret]) -> Self {
        let mut needles = Vec::new();
        for s in secrets {
            let v = s.value.expose();
            needles.push((s.name.clone(), v.to_vec()));
            for skip in 0..3usize {
                // The bytes from `skip` in whole groups of three encode to the same
                // characters wherever the value sits in a longer encoded text, once the
                // text's groups line up with `skip`.
                let body = &v[skip.min(v.len())..];
                let whole = &body[..body.len() / 3 * 3];
                // Fewer than 12 characters would match unrelated text too often.
                if whole.len() >= 9 {
                    needles.push((s.name.clone(), STANDARD.encode(whole).into_bytes()));
                    needles.push((s.name.clone(), URL_SAFE_NO_PAD.encode(whole).into_bytes()));
                }
            }
        }
        Self::new(needles)
    }

    fn new(needles: Vec<(String, Vec<u8>)>) -> Self {
        Self {
            needles: needles
                .into_iter()
                .filter(|(_, n)| !n.is_empty())
                .map(|(name, n)| Needle::new(name, n))
                .collect(),
        }
    }

    /// How many of the last bytes fed could still begin a match (the longest end of the
    /// stream that is the start of a string looked for): a relay holds exactly those back
    /// until the next chunk, so no part of a value passes before it is seen whole, and
    /// nothing else waits (a small websocket frame is not delayed for want of more bytes).
    pub fn holds_back(&self) -> usize {
        self.needles.iter().map(|n| n.state).max().unwrap_or(0)
    }

    /// Feed the next chunk; the name of the first secret found, if any.
    pub fn feed(&mut self, chunk: &[u8]) -> Option<&str> {
        for &b in chunk {
            let mut hit = None;
            for (i, n) in self.needles.iter_mut().enumerate() {
                if n.step(b) && hit.is_none() {
                    hit = Some(i);
                }
            }
            if let Some(i) = hit {
                return Some(self.needles[i].name.as_str());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{Placement, Secret};

    const PH: &str = "sandbox-placeholder-00112233445566778899aabbccddeeff";
    const KEY_PH: &str = "sandbox-placeholder-ffeeddccbbaa99887766554433221100";

    fn secrets() -> Vec<ResolvedSecret> {
        vec![
            ResolvedSecret {
                name: "GH_TOKEN".into(),
                value: Secret::new(b"ghp_realvalue123".to_vec()),
                hosts: vec!["api.github.com".into()],
                placement: Placement::Authorization,
                placeholder: PH.into(),
            },
            ResolvedSecret {
                name: "API_KEY".into(),
                value: Secret::new(b"key/with+odd chars".to_vec()),
                hosts: vec!["api.example.com".into()],
                placement: Placement::Query("key".into()),
                placeholder: KEY_PH.into(),
            },
        ]
    }

    fn judge(host: &str, tls: bool, head: &str) -> Result<Judged, Refusal> {
        judge_request(&secrets(), host, 443, tls, head.as_bytes())
    }

    fn exfil(r: Result<Judged, Refusal>, secret: &str, place: &str) {
        match r {
            Err(Refusal::Exfiltration {
                secret: s,
                place: p,
                ..
            }) => {
                assert_eq!(s, secret);
                assert_eq!(p, place);
            }
            other => panic!("not refused as exfiltration: {other:?}"),
        }
    }

    fn malformed(r: Result<Judged, Refusal>, why: &str) {
        match r {
            Err(Refusal::Malformed(m)) => assert!(m.contains(why), "{why}: {m}"),
            other => panic!("not refused ({why}): {other:?}"),
        }
    }

    #[test]
    fn the_placeholder_becomes_the_value_in_the_allowed_header_only() {
        let j = judge(
            "api.github.com",
            true,
            &format!(
                "GET /user HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer {PH}\r\n\r\n"
            ),
        )
        .unwrap();
        let head = String::from_utf8(j.head).unwrap();
        assert_eq!(
            head,
            "GET /user HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer ghp_realvalue123\r\n\r\n"
        );
        assert_eq!(j.injected, ["GH_TOKEN"]);
        assert_eq!(j.framing, Framing::None);
    }

    #[test]
    fn basic_credentials_are_decoded_rewritten_and_encoded_again() {
        let creds = STANDARD.encode(format!("x-access-token:{PH}"));
        let j = judge(
            "api.github.com",
            true,
            &format!("GET / HTTP/1.1\r\nAuthorization: Basic {creds}\r\n\r\n"),
        )
        .unwrap();
        let want = STANDARD.encode("x-access-token:ghp_realvalue123");
        assert!(String::from_utf8(j.head)
            .unwrap()
            .contains(&format!("Basic {want}\r\n")));
        // The same, to a host the secret is not for, is refused.
        exfil(
            judge(
                "gist.github.com",
                true,
                &format!("GET / HTTP/1.1\r\nAuthorization: Basic {creds}\r\n\r\n"),
            ),
            "GH_TOKEN",
            "header authorization",
        );
    }

    #[test]
    fn the_placeholder_elsewhere_is_refused_by_the_secrets_name() {
        let auth = format!("Authorization: Bearer {PH}\r\n");
        exfil(
            judge(
                "gist.github.com",
                true,
                &format!("GET / HTTP/1.1\r\n{auth}\r\n"),
            ),
            "GH_TOKEN",
            "header authorization",
        );
        exfil(
            judge(
                "api.github.com",
                true,
                &format!("GET / HTTP/1.1\r\nX-Debug: {PH}\r\n\r\n"),
            ),
            "GH_TOKEN",
            "header x-debug",
        );
        exfil(
            judge(
                "api.github.com",
                false,
                &format!("GET / HTTP/1.1\r\n{auth}\r\n"),
            ),
            "GH_TOKEN",
            "header authorization",
        );
        exfil(
            judge(
                "api.github.com",
                true,
                &format!("GET /x?t={PH} HTTP/1.1\r\n\r\n"),
            ),
            "GH_TOKEN",
            "the request target",
        );
        exfil(
            judge(
                "api.github.com",
                true,
                &format!("GET / HTTP/1.1\r\nProxy-Authorization: x\r\nCookie: a={PH}\r\n\r\n"),
            ),
            "GH_TOKEN",
            "header cookie",
        );
    }

    #[test]
    fn a_query_secret_goes_only_into_its_parameter_percent_encoded() {
        let j = judge(
            "api.example.com",
            true,
            &format!("GET /v1/x?a=1&key={KEY_PH} HTTP/1.1\r\n\r\n"),
        )
        .unwrap();
        assert!(String::from_utf8(j.head)
            .unwrap()
            .starts_with("GET /v1/x?a=1&key=key%2Fwith%2Bodd%20chars HTTP/1.1\r\n"));
        exfil(
            judge(
                "api.example.com",
                true,
                &format!("GET /v1/x?other={KEY_PH} HTTP/1.1\r\n\r\n"),
            ),
            "API_KEY",
            "the request target",
        );
        exfil(
            judge(
                "api.example.com",
                true,
                &format!("GET /{KEY_PH}?key=1 HTTP/1.1\r\n\r\n"),
            ),
            "API_KEY",
            "the request target",
        );
        exfil(
            judge(
                "api.example.com",
                true,
                &format!("GET / HTTP/1.1\r\nAuthorization: {KEY_PH}\r\n\r\n"),
            ),
            "API_KEY",
            "header authorization",
        );
    }

    #[test]
    fn fronting_smuggling_and_tunnels_are_refused() {
        let h = "api.github.com";
        malformed(
            judge(h, true, "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n"),
            "fronting",
        );
        malformed(
            judge(
                h,
                true,
                "GET / HTTP/1.1\r\nHost: api.github.com\r\nHost: api.github.com\r\n\r\n",
            ),
            "fronting",
        );
        malformed(
            judge(h, true, "GET https://evil.example/ HTTP/1.1\r\n\r\n"),
            "another host",
        );
        malformed(
            judge(
                h,
                true,
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            ),
            "both Content-Length",
        );
        malformed(
            judge(
                h,
                true,
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            ),
            "two different",
        );
        malformed(
            judge(
                h,
                true,
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            ),
            "Transfer-Encoding",
        );
        malformed(
            judge(h, true, "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n"),
            "not a number",
        );
        malformed(
            judge(h, true, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n"),
            "CONNECT",
        );
        malformed(
            judge(
                h,
                true,
                "GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
            ),
            "h2c",
        );
        malformed(
            judge(h, true, "GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n"),
            "malformed",
        );
        malformed(
            judge(h, true, "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"),
            "after the head",
        );
        malformed(judge(h, true, "GET / HTTP/1.0\r\n\r\n"), "HTTP/1.1");
    }

    #[test]
    fn a_passing_head_is_written_for_the_decided_host() {
        let j = judge(
            "api.github.com",
            true,
            "POST https://API.github.com/repos HTTP/1.1\r\nProxy-Authorization: Basic eA==\r\nTransfer-Encoding: chunked\r\nUpgrade: websocket\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(j.head).unwrap(),
            "POST /repos HTTP/1.1\r\nHost: api.github.com\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        assert_eq!(j.framing, Framing::Chunked);
        assert!(j.websocket);
        let j = judge_request(
            &secrets(),
            "x.org",
            8443,
            true,
            b"PUT / HTTP/1.1\r\nHost: x.org:8443\r\ncontent-length: 3\r\n\r\n",
        )
        .unwrap();
        assert_eq!(j.framing, Framing::Length(3));
        assert!(String::from_utf8(j.head)
            .unwrap()
            .contains("Host: x.org:8443\r\n"));
    }

    #[test]
    fn a_placeholder_is_found_in_a_body_cut_anywhere() {
        let body = format!("{{\"note\":\"{PH}\"}}");
        for cut in 0..body.len() {
            let mut sc = StreamScanner::placeholders(&secrets());
            let a = sc.feed(&body.as_bytes()[..cut]).map(str::to_owned);
            let b = sc.feed(&body.as_bytes()[cut..]).map(str::to_owned);
            assert_eq!(a.or(b).as_deref(), Some("GH_TOKEN"), "cut at {cut}");
        }
        let mut sc = StreamScanner::placeholders(&secrets());
        assert_eq!(sc.feed(b"nothing to see here"), None);
    }

    /// What is held back is exactly what could begin a value: nothing after unrelated
    /// bytes, the started part after a value's first bytes, and a value cut anywhere is
    /// never passed in part before it is caught.
    #[test]
    fn only_what_could_begin_a_value_is_held_back() {
        let v = "ghp_realvalue123";
        let mut sc = StreamScanner::values(&secrets());
        assert_eq!(sc.feed(b"frame-bytes"), None);
        assert_eq!(sc.holds_back(), 0);
        assert_eq!(sc.feed(b"x ghp_real"), None);
        assert_eq!(sc.holds_back(), "ghp_real".len());
        assert_eq!(sc.feed(b"ly not"), None);
        assert_eq!(sc.holds_back(), 0);
        // A value cut at every place: the bytes passed on (all but those held back) never
        // hold any part of it before the scanner names it.
        let text = format!("abc gh gghp_{v} tail");
        for cut in 0..text.len() {
            let mut sc = StreamScanner::values(&secrets());
            let first = &text.as_bytes()[..cut];
            if sc.feed(first).is_none() {
                let passed = &first[..first.len() - sc.holds_back()];
                assert!(
                    !String::from_utf8_lossy(passed).contains("ghp_r"),
                    "cut at {cut}: {:?} passed",
                    String::from_utf8_lossy(passed)
                );
                assert_eq!(
                    sc.feed(&text.as_bytes()[cut..]),
                    Some("GH_TOKEN"),
                    "cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn a_response_echoing_the_value_is_caught_plain_and_in_base64() {
        let v = "ghp_realvalue123";
        let texts = [
            format!("{{\"headers\":{{\"Authorization\":\"Bearer {v}\"}}}}"),
            format!("Basic {}", STANDARD.encode(format!("x-access-token:{v}"))),
            format!("Basic {}", STANDARD.encode(format!("u:{v}"))),
            format!("Basic {}", STANDARD.encode(format!("ab:{v}"))),
            URL_SAFE_NO_PAD.encode(format!("abc{v}xyz")),
        ];
        for t in &texts {
            for cut in [0, t.len() / 2, t.len()] {
                let mut sc = StreamScanner::values(&secrets());
                let a = sc.feed(&t.as_bytes()[..cut]).map(str::to_owned);
                let b = sc.feed(&t.as_bytes()[cut..]).map(str::to_owned);
                assert_eq!(a.or(b).as_deref(), Some("GH_TOKEN"), "{t} cut at {cut}");
            }
        }
        let mut sc = StreamScanner::values(&secrets());
        assert_eq!(
            sc.feed(format!("{{\"auth\":\"Bearer {PH}\"}}").as_bytes()),
            None
        );
    }
}
