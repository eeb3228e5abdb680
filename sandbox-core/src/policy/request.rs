//! Request rules (`--allow-request 'GET,HEAD https://api.github.com/repos/o/r/**'`) and the
//! path canonicaliser they are matched against.
//!
//! Here rather than in the proxy because [`Plan::new`](crate::Plan::new) must refuse a bad
//! rule before anything runs, and both are pure functions worth testing (and fuzzing)
//! alone. The proxy that applies them is `sandbox-proxy`.
//!
//! # One reading of a path, or none
//!
//! A path allowlist is only as strong as the agreement between what the judge matched and
//! what the server serves. Servers disagree on `;` (matrix parameters: `/allowed/..;/admin`
//! is `/admin` to Tomcat, OpenShell CVE-2026-100971), on `%2F` (a slash or a character), on
//! `\` (a slash on some), on `%252e` (decoded once or twice). [`canonical_path`] therefore
//! decodes once, resolves `.` and `..`, folds `//`, and **refuses** every form on which
//! servers disagree instead of choosing a reading; the upstream then receives the
//! canonical path that was matched ([`CanonicalPath::wire`]), not the client's spelling.

use std::fmt;
use std::str::FromStr;

use super::allowlist::normalize_name;

/// Why a path was refused: each a form that servers read in more than one way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    /// Not an origin-form path (`/...`).
    #[error("a path that does not start with `/`")]
    NotAbsolute,
    /// `;`, raw or encoded: a matrix parameter to some servers, a character to others.
    #[error("a `;` in the path (read as a parameter by some servers)")]
    Semicolon,
    /// `#`: a fragment is never sent by a correct client.
    #[error("a fragment (`#`) in the request target")]
    Fragment,
    /// `%2F`: a slash to some servers, a character to others.
    #[error("an encoded slash (`%2F`) in the path")]
    EncodedSlash,
    /// `\` or `%5C`: a slash to some servers.
    #[error("a backslash in the path")]
    Backslash,
    /// `%25`: decoded once here, twice by some servers.
    #[error("an encoded `%` (`%25`, a double encoding) in the path")]
    DoubleEncoding,
    /// `%00` or a raw NUL.
    #[error("a NUL in the path")]
    Nul,
    /// A control character, a space or a byte outside ASCII not percent-encoded, or a
    /// control character encoded.
    #[error("a byte in the path that is not URL text")]
    BadByte,
    /// `%` not followed by two hex digits.
    #[error("a `%` not followed by two hex digits")]
    BadEscape,
    /// `..` above `/`.
    #[error("a `..` above the root")]
    AboveRoot,
    /// The decoded path is not UTF-8.
    #[error("a path that is not UTF-8 once decoded")]
    NotUtf8,
    /// A `?` left in what should be the path alone.
    #[error("a `?` in the path")]
    Query,
}

/// A path decoded once, its dot segments resolved and `//` folded; none of the refused
/// forms in it. Starts with `/`; ends with `/` only when the path named a directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CanonicalPath(String);

impl CanonicalPath {
    /// The decoded text (what rules are matched against and the record keeps).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path as sent upstream: the decoded text with every byte outside the
    /// characters a path segment may hold percent-encoded. [`canonical_path`] of it gives
    /// this path back (a fixed point), so the upstream reads what was matched.
    pub fn wire(&self) -> String {
        let mut out = String::with_capacity(self.0.len());
        for &b in self.0.as_bytes() {
            if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,=:@".contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

impl fmt::Display for CanonicalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Canonicalise the path of a request target (the part before `?`), or refuse it.
pub fn canonical_path(raw: &[u8]) -> Result<CanonicalPath, PathRefusal> {
    if raw.first() != Some(&b'/') {
        return Err(PathRefusal::NotAbsolute);
    }
    let mut decoded = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        let byte = match b {
            b'%' => {
                let (Some(h), Some(l)) = (
                    raw.get(i + 1).copied().and_then(hex),
                    raw.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(PathRefusal::BadEscape);
                };
                i += 2;
                match h << 4 | l {
                    b'/' => return Err(PathRefusal::EncodedSlash),
                    b'%' => return Err(PathRefusal::DoubleEncoding),
                    d => d,
                }
            }
            b'#' => return Err(PathRefusal::Fragment),
            b'?' => return Err(PathRefusal::Query),
            0 => return Err(PathRefusal::Nul),
            b if b <= b' ' || b >= 0x7f => return Err(PathRefusal::BadByte),
            b => b,
        };
        match byte {
            b';' => return Err(PathRefusal::Semicolon),
            b'\\' => return Err(PathRefusal::Backslash),
            0 => return Err(PathRefusal::Nul),
            c if c < b' ' || c == 0x7f => return Err(PathRefusal::BadByte),
            _ => decoded.push(byte),
        }
        i += 1;
    }
    let text = String::from_utf8(decoded).map_err(|_| PathRefusal::NotUtf8)?;
    let mut segments: Vec<&str> = Vec::new();
    let mut directory = false;
    for seg in text[1..].split('/') {
        directory = true;
        match seg {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathRefusal::AboveRoot);
                }
            }
            s => {
                segments.push(s);
                directory = false;
            }
        }
    }
    let mut out = String::with_capacity(text.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() || directory {
        out.push('/');
    }
    Ok(CanonicalPath(out))
}

/// The methods a rule may name. `CONNECT` is never a request on a terminated connection,
/// and `TRACE` echoes the request (its credentials) back.
pub const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// The longest path pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Why a rule was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The text is not `METHODS URL`.
    #[error("`{0}` is not `METHOD[,METHOD] https://HOST/PATH-PATTERN`")]
    Shape(String),
    /// A method outside [`METHODS`].
    #[error(
        "unknown method `{0}` (one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, in capitals)"
    )]
    Method(String),
    /// Not `https://`: plain HTTP is never terminated, so a rule could not be enforced.
    #[error("`{0}` is not an https:// URL (rules are enforced on terminated TLS only)")]
    NotHttps(String),
    /// The host is not one exact name.
    #[error("`{0}` is not an exact host name (no wildcard, IP address or port)")]
    Host(String),
    /// The path pattern is malformed.
    #[error("path pattern `{pattern}`: {why}")]
    Pattern {
        /// The pattern as written.
        pattern: String,
        /// What is wrong with it.
        why: String,
    },
}

/// One segment of a path pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    /// `**`: any number of whole segments, none included.
    Any,
    /// Text in which `*` matches any run of characters within the segment.
    Glob(String),
}

/// A rule: these methods on this host, on paths matching this pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRule {
    /// The methods, in capitals.
    pub methods: Vec<String>,
    /// The host, lowercase, no trailing dot.
    pub host: String,
    pattern: Vec<Seg>,
    text: String,
}

impl RequestRule {
    /// The rule as written (normalised), for the record.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `method` on `path` is allowed by this rule (the host is the caller's to
    /// check: rules are looked up by host).
    pub fn allows(&self, method: &str, path: &CanonicalPath) -> bool {
        self.methods.iter().any(|m| m == method) && self.matches(path)
    }

    /// Whether `path` matches the pattern.
    pub fn matches(&self, path: &CanonicalPath) -> bool {
        let segs: Vec<&str> = path.as_str()[1..].split('/').collect();
        // Star-only globbing, greedy with one backtrack point: linear in practice, never
        // exponential, for `**` over segments as for `*` within one.
        let (p, s) = (&self.pattern, &segs);
        let (mut pi, mut si) = (0, 0);
        let mut back: Option<(usize, usize)> = None;
        while si < s.len() {
            match p.get(pi) {
                Some(Seg::Any) => {
                    back = Some((pi, si));
                    pi += 1;
                }
                Some(Seg::Glob(g)) if glob(g, s[si]) => {
                    pi += 1;
                    si += 1;
                }
                _ => match back {
                    Some((bp, bs)) => {
                        pi = bp + 1;
                        si = bs + 1;
                        back = Some((bp, bs + 1));
                    }
                    None => return false,
                },
            }
        }
        p[pi..].iter().all(|x| *x == Seg::Any)
    }
}

/// `*` in `pat` matches any run of characters (none included) of `text`.
fn glob(pat: &str, text: &str) -> bool {
    let (p, t) = (pat.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            back = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((bp, bt)) = back {
            pi = bp + 1;
            ti = bt + 1;
            back = Some((bp, bt + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn pattern(text: &str) -> Result<Vec<Seg>, RuleError> {
    let err = |why: &str| RuleError::Pattern {
        pattern: text.to_owned(),
        why: why.to_owned(),
    };
    if text.len() > MAX_PATTERN_LEN {
        return Err(err("longer than 1024 bytes"));
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err(err("it must start with `/`"));
    };
    if let Some(c) = text
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || "%;?#\\".contains(*c))
    {
        return Err(err(&format!(
            "`{}` has no place in a pattern (write the decoded path; `;`, `?`, `#`, `\\` \
             and encodings are refused in requests anyway)",
            c.escape_default()
        )));
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let last = parts.len() - 1;
    let mut segs = Vec::with_capacity(parts.len());
    for (i, s) in parts.into_iter().enumerate() {
        match s {
            "" if i == last => segs.push(Seg::Glob(String::new())),
            "" => return Err(err("an empty segment (`//`)")),
            "." | ".." => return Err(err("a `.` or `..` segment")),
            "**" => segs.push(Seg::Any),
            s if s.contains("**") => return Err(err("`**` must be a whole segment")),
            s => segs.push(Seg::Glob(s.to_owned())),
        }
    }
    if segs.iter().filter(|s| **s == Seg::Any).count() > 4 {
        return Err(err("more than four `**`"));
    }
    Ok(segs)
}

impl FromStr for RequestRule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut words = s.split_whitespace();
        let (Some(methods), Some(url), None) = (words.next(), words.next(), words.next()) else {
            return Err(RuleError::Shape(s.to_owned()));
        };
        let mut ms: Vec<String> = Vec::new();
        for m in methods.split(',') {
            if !METHODS.contains(&m) {
                return Err(RuleError::Method(m.to_owned()));
            }
            if !ms.iter().any(|x| x == m) {
                ms.push(m.to_owned());
            }
        }
        let Some(rest) = url.strip_prefix("https://") else {
            return Err(RuleError::NotHttps(url.to_owned()));
        };
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let name = normalize_name(host)
            .filter(|n| !n.contains('*') && n.parse::<std::net::IpAddr>().is_err())
            .ok_or_else(|| RuleError::Host(host.to_owned()))?;
        let path = if path.is_empty() { "/" } else { path };
        let pattern = pattern(path)?;
        Ok(Self {
            text: format!("{} https://{name}{path}", ms.join(",")),
            methods: ms,
            host: name,
            pattern,
        })
    }
}

impl fmt::Display for RequestRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        canonical_path(raw.as_bytes())
            .unwrap_or_else(|e| panic!("{raw}: {e}"))
            .0
    }

    fn no(raw: &str, why: PathRefusal) {
        assert_eq!(canonical_path(raw.as_bytes()), Err(why), "{raw}");
    }

    #[test]
    fn a_path_is_decoded_once_and_its_dots_and_doubled_slashes_resolved() {
        for (raw, want) in [
            ("/", "/"),
            ("/a", "/a"),
            ("/a/", "/a/"),
            ("/a//b", "/a/b"),
            ("//", "/"),
            ("///a///", "/a/"),
            ("/a/./b", "/a/b"),
            ("/a/.", "/a/"),
            ("/a/b/..", "/a/"),
            ("/a/b/../c", "/a/c"),
            ("/a/../..x", "/..x"),
            ("/a/...", "/a/..."),
            ("/a/%2e%2E/b", "/b"),
            ("/a/%2e/b", "/a/b"),
            ("/%41%62", "/Ab"),
            ("/caf%C3%A9", "/café"),
            ("/a%20b", "/a b"),
            ("/a%3Fb", "/a?b"),
            ("/a%23b", "/a#b"),
            ("/x/*/y", "/x/*/y"),
            ("/..a/b", "/..a/b"),
        ] {
            assert_eq!(ok(raw), want, "{raw}");
        }
    }

    #[test]
    fn every_ambiguous_form_is_refused_never_guessed() {
        use PathRefusal::*;
        for (raw, why) in [
            ("", NotAbsolute),
            ("a/b", NotAbsolute),
            ("*", NotAbsolute),
            ("https://x/a", NotAbsolute),
            ("/allowed/..;/admin", Semicolon),
            ("/allowed;/admin", Semicolon),
            ("/a;jsessionid=1", Semicolon),
            ("/a%3b/b", Semicolon),
            ("/a%3B/b", Semicolon),
            ("/a#frag", Fragment),
            ("/a%2Fb", EncodedSlash),
            ("/a%2fb", EncodedSlash),
            ("/a%5Cb", Backslash),
            ("/a%5cb", Backslash),
            ("/a\\b", Backslash),
            ("/a/..\\admin", Backslash),
            ("/a%252e%252e/b", DoubleEncoding),
            ("/a%25", DoubleEncoding),
            ("/a%00b", Nul),
            ("/a\0b", Nul),
            ("/a%0Ab", BadByte),
            ("/a%7fb", BadByte),
            ("/a b", BadByte),
            ("/a\tb", BadByte),
            ("/a%", BadEscape),
            ("/a%2", BadEscape),
            ("/a%zz", BadEscape),
            ("/a%+1", BadEscape),
            ("/..", AboveRoot),
            ("/a/../..", AboveRoot),
            ("/a/../../b", AboveRoot),
            ("/%2e%2e/etc", AboveRoot),
            ("/a%FF", NotUtf8),
            ("/a%C3", NotUtf8),
            ("/a?b", Query),
        ] {
            no(raw, why);
        }
        // A raw byte outside ASCII is not URL text (a client encodes it).
        assert_eq!(canonical_path(b"/caf\xc3\xa9"), Err(PathRefusal::BadByte));
    }

    #[test]
    fn the_wire_form_reads_back_as_the_same_path() {
        for raw in [
            "/a%20b/",
            "/caf%C3%A9",
            "/a%3Fb%23c",
            "/x/(y)+z:@!",
            "/~u/_-.",
        ] {
            let c = canonical_path(raw.as_bytes()).unwrap();
            let again = canonical_path(c.wire().as_bytes()).unwrap();
            assert_eq!(again, c, "{raw} -> {}", c.wire());
        }
        assert_eq!(ok("/a%20b").as_str(), "/a b");
        assert_eq!(canonical_path(b"/a%20b%3F").unwrap().wire(), "/a%20b%3F");
    }

    fn rule(s: &str) -> RequestRule {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn path(s: &str) -> CanonicalPath {
        canonical_path(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_rule_allows_its_methods_on_matching_paths_only() {
        let r = rule("GET,HEAD https://API.GitHub.com./repos/*/issues");
        assert_eq!(r.host, "api.github.com");
        assert_eq!(r.as_str(), "GET,HEAD https://api.github.com/repos/*/issues");
        assert!(r.allows("GET", &path("/repos/o/issues")));
        assert!(r.allows("HEAD", &path("/repos/o/issues")));
        assert!(!r.allows("POST", &path("/repos/o/issues")));
        assert!(!r.allows("get", &path("/repos/o/issues")));
        assert!(!r.allows("GET", &path("/repos/o/r/issues")));
        assert!(!r.allows("GET", &path("/repos/o/issues/1")));
        assert!(!r.allows("GET", &path("/repos/o/issues/")));
        assert!(!r.allows("GET", &path("/admin")));
    }

    #[test]
    fn one_star_stays_in_a_segment_two_cross_them() {
        let r = rule("GET https://h.test/a/**");
        for p in ["/a", "/a/", "/a/b", "/a/b/c/d"] {
            assert!(r.matches(&path(p)), "{p}");
        }
        for p in ["/", "/ab", "/b/a"] {
            assert!(!r.matches(&path(p)), "{p}");
        }
        let r = rule("GET https://h.test/a/**/z");
        for p in ["/a/z", "/a/b/z", "/a/b/c/z", "/a/z/z"] {
            assert!(r.matches(&path(p)), "{p}");
        }
        for p in ["/a/z/y", "/a", "/z"] {
            assert!(!r.matches(&path(p)), "{p}");
        }
        let r = rule("GET https://h.test/v*/x*y.json");
        assert!(r.matches(&path("/v1/xy.json")));
        assert!(r.matches(&path("/v22/xaaay.json")));
        assert!(!r.matches(&path("/v1/a/xy.json")));
        assert!(!r.matches(&path("/w1/xy.json")));
        let r = rule("GET https://h.test/");
        assert!(r.matches(&path("/")));
        assert!(!r.matches(&path("/a")));
        let r = rule("GET https://h.test");
        assert!(r.matches(&path("/")));
        let r = rule("GET https://h.test/**");
        assert!(r.matches(&path("/")) && r.matches(&path("/a/b/")));
        let r = rule("GET https://h.test/d/");
        assert!(r.matches(&path("/d/")) && !r.matches(&path("/d")));
    }

    #[test]
    fn the_dot_dot_semicolon_bypass_cannot_reach_a_path_the_rule_does_not_name() {
        let r = rule("GET https://h.test/allowed/**");
        assert!(canonical_path(b"/allowed/..;/admin").is_err());
        assert!(canonical_path(b"/allowed/%2e%2e%3b/admin").is_err());
        // Resolved dots are judged where they land.
        assert!(!r.matches(&path("/allowed/../admin")));
        assert!(!r.matches(&path("/allowed/%2e%2e/admin")));
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        let bad = |s: &str| s.parse::<RequestRule>().unwrap_err();
        assert!(matches!(bad("GET"), RuleError::Shape(_)));
        assert!(matches!(bad("GET https://h/ x"), RuleError::Shape(_)));
        assert_eq!(bad("get https://h.test/"), RuleError::Method("get".into()));
        assert_eq!(
            bad("GET,BREW https://h.test/"),
            RuleError::Method("BREW".into())
        );
        assert_eq!(
            bad("CONNECT https://h.test/"),
            RuleError::Method("CONNECT".into())
        );
        assert_eq!(
            bad("TRACE https://h.test/"),
            RuleError::Method("TRACE".into())
        );
        assert!(matches!(bad("GET http://h.test/"), RuleError::NotHttps(_)));
        assert!(matches!(bad("GET h.test/"), RuleError::NotHttps(_)));
        for host in [
            "*.h.test",
            "1.2.3.4",
            "h.test:8443",
            "[::1]",
            "",
            "a..b",
            "user@h.test",
        ] {
            assert!(
                matches!(bad(&format!("GET https://{host}/")), RuleError::Host(_)),
                "{host}"
            );
        }
        for p in [
            "/a//b",
            "/a/../b",
            "/./a",
            "/a;b",
            "/a%2Fb",
            "/a?x",
            "/a#x",
            "/a\\b",
            "/a**/b",
            "/***",
            "/**/**/**/**/**",
        ] {
            assert!(
                matches!(
                    bad(&format!("GET https://h.test{p}")),
                    RuleError::Pattern { .. }
                ),
                "{p}"
            );
        }
    }

    #[test]
    fn matching_a_hostile_path_stays_cheap() {
        let r = rule("GET https://h.test/**/a*a*a*a*b/**/c/**/d");
        let long = format!("/{}", ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"; 200].join("/"));
        assert!(!r.matches(&path(&long)));
    }
}
