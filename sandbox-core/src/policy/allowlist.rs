//! The egress allowlist of network mode `proxy`: which hosts the proxy may connect a command
//! to, as pure data and one decision function.
//!
//! Here rather than in the proxy crate because [`Plan::new`](crate::Plan::new) must refuse a
//! malformed pattern before anything runs, and the decision is a pure function worth
//! testing alone. The proxy that applies it is `sandbox-proxy`.
//!
//! # Patterns
//!
//! | written                   | matches                                                   |
//! |---------------------------|-----------------------------------------------------------|
//! | `crates.io`               | exactly that name, ports 80 and 443                       |
//! | `*.githubusercontent.com` | any subdomain (not the bare name), ports 80 and 443       |
//! | `crates.io:8443`          | that name, port 8443 only                                 |
//! | `192.0.2.7`, `[::1]:8080` | that IP literal (a name never matches it)                 |
//! | `10.1.0.0/16`             | IP literals in that network                               |
//!
//! Names are compared case-insensitively, without a trailing dot. An IP literal in a request
//! is matched only by IP and CIDR patterns: a name pattern never covers an address, so an
//! allowed name cannot be used to reach an arbitrary address.
//!
//! IP literals and networks are judged in canonical form ([`canonical`]): an IPv4-mapped
//! IPv6 address is its IPv4 address, so an IPv6 network (even `::/0`) never covers an IPv4
//! address written in mapped form, and `::ffff:127.0.0.1` is judged as `127.0.0.1`.
//!
//! What a name resolves to, and what an IP literal names, is judged against the one table
//! of refused addresses ([`refused`](mod@super::refused): loopback, link-local, the cloud
//! metadata addresses, and their IPv6 forms) by [`Allowlist::check_resolved`]: a wildcard
//! never reaches them; a CIDR or IP rule only when it lies within the refused range itself
//! (`127.0.0.0/8:8080` names loopback, `0.0.0.0/0` does not); an exact name may, since the
//! caller named that host and its address is theirs to choose (a test resolver stands
//! servers on loopback that way).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use super::refused::{canonical, mask, refused};

/// The ports a pattern without `:port` allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What a pattern names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostMatch {
    /// Exactly this name (lowercase, no trailing dot).
    Exact(String),
    /// Any name ending in `.` + this suffix (lowercase): subdomains only.
    Subdomains(String),
    /// IP literals in this network (`prefix` bits of `addr`).
    Network {
        /// The network's address, its host bits zero.
        addr: IpAddr,
        /// The prefix length.
        prefix: u8,
    },
}

/// One allowlist entry, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    /// What it names.
    pub host: HostMatch,
    /// The one port it allows, or `None` for [`DEFAULT_PORTS`].
    pub port: Option<u16>,
    text: String,
}

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("host pattern `{pattern}`: {reason}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong, with what would be right.
    pub reason: String,
}

impl HostPattern {
    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for HostPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

fn valid_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// A DNS name in the form hosts are written (letters, digits, `-`, `_`; dots between labels).
/// Returns it lowercase without a trailing dot.
pub fn normalize_name(name: &str) -> Option<String> {
    let n = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if n.is_empty() || n.len() > 253 || !n.split('.').all(valid_label) {
        return None;
    }
    // All-numeric labels at the end look like an IP address written wrongly (`1.2.3`):
    // refused rather than treated as a name.
    if n.split('.')
        .next_back()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some(n)
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        _ => Err(format!("port `{s}` is not a number from 1 to 65535")),
    }
}

impl FromStr for HostPattern {
    type Err = PatternError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| PatternError {
            pattern: text.to_string(),
            reason,
        };
        if text.is_empty() {
            return Err(err("is empty; write a host name such as `crates.io`".into()));
        }
        if text.contains("://") {
            return Err(err(
                "is a URL; write the host name alone (`crates.io`, `crates.io:8443`)".into(),
            ));
        }
        // Split off a port: `[v6]:port`, `v4:port`, `name:port`; a bare IPv6 has several `:`.
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or_else(|| err("has `[` without `]`".into()))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| err(format!("unexpected `{p}` after `]`")))?,
                ),
            };
            (h, port)
        } else if text.matches(':').count() == 1 {
            let (h, p) = text.split_once(':').unwrap_or((text, ""));
            (h, Some(p))
        } else {
            (text, None)
        };
        let port = port.map(parse_port).transpose().map_err(err)?;
        if host.is_empty() {
            return Err(err("names no host".into()));
        }

        let matcher = if let Some((addr, bits)) = host.split_once('/') {
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| err(format!("`{addr}` is not an IP address")))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = bits
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| err(format!("prefix `/{bits}` is not from 0 to {max}")))?;
            if mask(addr, prefix) != addr {
                return Err(err(format!(
                    "`{host}` has host bits set; the network is `{}/{prefix}`",
                    mask(addr, prefix)
                )));
            }
            network(addr, prefix)
        } else if let Ok(addr) = host.parse::<IpAddr>() {
            let prefix = if addr.is_ipv4() { 32 } else { 128 };
            network(addr, prefix)
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let s = normalize_name(suffix)
                .ok_or_else(|| err(format!("`{suffix}` after `*.` is not a valid host name")))?;
            if !s.contains('.') {
                return Err(err(format!(
                    "`*.{s}` would allow every name under a top-level domain; name a domain \
                     (`*.example.com`)"
                )));
            }
            HostMatch::Subdomains(s)
        } else if host.contains('*') {
            return Err(err(
                "`*` is allowed only as a whole first label (`*.example.com`)".into(),
            ));
        } else {
            HostMatch::Exact(normalize_name(host).ok_or_else(|| {
                err(format!(
                    "`{host}` is not a valid host name, IP address or CIDR network"
                ))
            })?)
        };
        Ok(Self {
            host: matcher,
            port,
            text: text.to_string(),
        })
    }
}

/// A network pattern in canonical form: one inside the IPv4-mapped range
/// (`::ffff:10.0.0.0/104`) is the IPv4 network it maps, since targets are judged as IPv4.
fn network(addr: IpAddr, prefix: u8) -> HostMatch {
    match canonical(addr) {
        IpAddr::V4(v4) if addr.is_ipv6() && prefix >= 96 => HostMatch::Network {
            addr: IpAddr::V4(v4),
            prefix: prefix - 96,
        },
        _ => HostMatch::Network { addr, prefix },
    }
}

/// The destination a command asked for: a name or an IP literal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A host name (lowercase, no trailing dot).
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Target {
    /// Classify a host as written in a request; `None` when it is neither a valid name nor
    /// an IP literal (`[v6]` brackets are accepted). An IPv4-mapped literal is its IPv4
    /// address ([`canonical`]).
    pub fn parse(host: &str) -> Option<Self> {
        let h = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = h.parse::<IpAddr>() {
            return Some(Self::Ip(canonical(ip)));
        }
        normalize_name(h).map(Self::Name)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Self::Ip(a) => write!(f, "{a}"),
        }
    }
}

/// The proxy's decision on one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "decision", content = "rule")]
pub enum Decision {
    /// Allowed by this pattern (as written).
    Allowed(String),
    /// Denied, for this reason (`not in the allowlist`, `resolves to a loopback address`).
    Denied(String),
}

impl Decision {
    /// True when allowed.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed(_))
    }
}

/// The reason recorded when nothing matches.
pub const NOT_IN_ALLOWLIST: &str = "not in the allowlist";

/// A parsed allowlist.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Allowlist {
    patterns: Vec<HostPattern>,
}

impl Allowlist {
    /// Parse every pattern; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, PatternError> {
        Ok(Self {
            patterns: patterns
                .iter()
                .map(|p| p.as_ref().parse())
                .collect::<Result<_, _>>()?,
        })
    }

    /// The patterns.
    pub fn patterns(&self) -> &[HostPattern] {
        &self.patterns
    }

    /// True when no pattern is given.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The first pattern that allows `target:port`, before any name is resolved.
    pub fn check(&self, target: &Target, port: u16) -> Option<&HostPattern> {
        self.patterns.iter().find(|p| {
            p.allows_port(port)
                && match (&p.host, target) {
                    (HostMatch::Exact(n), Target::Name(t)) => n == t,
                    (HostMatch::Subdomains(s), Target::Name(t)) => t
                        .strip_suffix(s.as_str())
                        .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                    (HostMatch::Network { addr, prefix }, Target::Ip(ip)) => {
                        addr.is_ipv4() == ip.is_ipv4() && mask(*ip, *prefix) == *addr
                    }
                    _ => false,
                }
        })
    }

    /// Whether a target allowed by `rule` may be connected at `addr` (what a name resolved
    /// to, or the literal itself), judged against the table of refused addresses
    /// ([`refused`](mod@super::refused)): never for a wildcard, for a network rule only
    /// when it lies within the refused range, always for an exact name. `None` when it
    /// may; otherwise the reason.
    pub fn check_resolved(rule: &HostPattern, addr: IpAddr) -> Option<String> {
        let addr = canonical(addr);
        let why = refused(addr)?;
        match &rule.host {
            HostMatch::Exact(_) => None,
            HostMatch::Subdomains(_) => Some(format!(
                "resolves to {why} ({addr}), which a wildcard never allows"
            )),
            HostMatch::Network { addr: net, prefix } if why.named_by(*net, *prefix) => None,
            HostMatch::Network { .. } => Some(format!(
                "{addr} is {why}; only a rule within {}/{} allows it",
                why.net, why.prefix
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> Allowlist {
        Allowlist::parse(p).unwrap()
    }
    fn name(n: &str) -> Target {
        Target::parse(n).unwrap()
    }

    #[test]
    fn exact_names_match_themselves_on_80_and_443_only() {
        let l = list(&["crates.io"]);
        assert!(l.check(&name("crates.io"), 443).is_some());
        assert!(l.check(&name("CRATES.IO."), 80).is_some());
        assert!(l.check(&name("crates.io"), 22).is_none());
        assert!(l.check(&name("static.crates.io"), 443).is_none());
        assert!(l.check(&name("evilcrates.io"), 443).is_none());
    }

    #[test]
    fn wildcards_match_subdomains_not_the_bare_name_nor_lookalikes() {
        let l = list(&["*.githubusercontent.com"]);
        assert!(l.check(&name("raw.githubusercontent.com"), 443).is_some());
        assert!(l.check(&name("a.b.githubusercontent.com"), 443).is_some());
        assert!(l.check(&name("githubusercontent.com"), 443).is_none());
        assert!(l.check(&name("evilgithubusercontent.com"), 443).is_none());
    }

    #[test]
    fn an_explicit_port_replaces_the_defaults() {
        let l = list(&["example.com:8443"]);
        assert!(l.check(&name("example.com"), 8443).is_some());
        assert!(l.check(&name("example.com"), 443).is_none());
    }

    #[test]
    fn ip_literals_match_only_ip_and_cidr_patterns() {
        let l = list(&["127.0.0.0/8", "example.com", "[::1]:8080"]);
        assert!(l.check(&name("127.0.0.5"), 80).is_some());
        assert!(l.check(&name("128.0.0.1"), 80).is_none());
        assert!(l.check(&name("[::1]"), 8080).is_some());
        assert!(l.check(&name("::1"), 80).is_none());
        let names_only = list(&["example.com", "*.example.com"]);
        assert!(names_only.check(&name("93.184.216.34"), 443).is_none());
    }

    #[test]
    fn malformed_patterns_are_refused_with_the_reason() {
        for (bad, why) in [
            ("", "empty"),
            ("https://crates.io", "URL"),
            ("crates.io:0", "1 to 65535"),
            ("crates.io:70000", "1 to 65535"),
            ("crates.io:http", "1 to 65535"),
            ("*.com", "top-level"),
            ("foo.*.com", "whole first label"),
            ("*", "whole first label"),
            ("exa mple.com", "not a valid host name"),
            ("10.0.0.1/8", "host bits"),
            ("10.0.0.0/33", "prefix"),
            ("1.2.3", "not a valid host name"),
            ("[::1", "without `]`"),
        ] {
            let e = bad.parse::<HostPattern>().unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
            assert_eq!(e.pattern, bad);
        }
    }

    #[test]
    fn a_wildcard_is_never_rebound_to_the_host_but_an_exact_name_may_be() {
        let wild: HostPattern = "*.example.com".parse().unwrap();
        let exact: HostPattern = "db.internal".parse().unwrap();
        for a in [
            "127.0.0.1",
            "169.254.169.254",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "fe80::1",
            "fd00:ec2::254",
            "64:ff9b::7f00:1",
            "::127.0.0.1",
        ] {
            let a: IpAddr = a.parse().unwrap();
            assert!(Allowlist::check_resolved(&wild, a).is_some(), "{a}");
            assert!(Allowlist::check_resolved(&exact, a).is_none(), "{a}");
        }
        assert!(Allowlist::check_resolved(&wild, "192.0.2.1".parse().unwrap()).is_none());
    }

    #[test]
    fn an_ipv6_network_never_covers_a_mapped_ipv4_address() {
        let l = list(&["::/0", "2001:db8::/32"]);
        for a in [
            "[::ffff:127.0.0.1]",
            "[::ffff:10.0.0.1]",
            "::ffff:169.254.169.254",
        ] {
            assert!(matches!(name(a), Target::Ip(IpAddr::V4(_))), "{a}");
            assert!(l.check(&name(a), 443).is_none(), "{a}");
        }
        assert!(l.check(&name("[2001:db8::1]"), 443).is_some());
        // Written as a mapped network, a pattern is the IPv4 network.
        let mapped = list(&["::ffff:10.0.0.0/104"]);
        assert!(mapped.check(&name("10.1.2.3"), 443).is_some());
        assert!(mapped.check(&name("[::ffff:10.1.2.3]"), 443).is_some());
        assert!(mapped.check(&name("11.0.0.1"), 443).is_none());
    }

    #[test]
    fn a_literal_in_the_table_needs_a_rule_within_its_range() {
        let judged = |rule: &str, a: &str| {
            let rule: HostPattern = rule.parse().unwrap();
            Allowlist::check_resolved(&rule, a.parse().unwrap())
        };
        assert_eq!(judged("127.0.0.0/8", "127.0.0.1"), None);
        assert_eq!(judged("127.0.0.1:8080", "127.0.0.1"), None);
        assert_eq!(judged("[::1]:8080", "::1"), None);
        assert_eq!(judged("169.254.169.254", "169.254.169.254"), None);
        for (rule, a) in [
            ("0.0.0.0/0", "127.0.0.1"),
            ("0.0.0.0/0", "169.254.169.254"),
            ("169.254.0.0/16", "169.254.169.254"),
            ("::/0", "::1"),
            ("::/0", "fd00:ec2::254"),
            ("::/0", "64:ff9b::7f00:1"),
            ("::/0", "::127.0.0.1"),
            ("64:ff9b::/96", "64:ff9b::a9fe:a9fe"),
            ("fd00::/8", "fd00:ec2::254"),
        ] {
            let why = judged(rule, a).unwrap_or_else(|| panic!("{rule} allowed {a}"));
            assert!(why.contains("only a rule within"), "{why}");
        }
        assert_eq!(judged("0.0.0.0/0", "192.0.2.1"), None);
    }
}
