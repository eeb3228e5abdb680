//! The one table of addresses the egress proxy refuses: what a name allowed by a wildcard
//! may never resolve into, and what an IP literal may name only when the caller's own rule
//! names that range (`127.0.0.0/8:8080`, `169.254.169.254`), never through a wider one
//! (`0.0.0.0/0`, `::/0`).
//!
//! Why one table: the host's own services (loopback), the cloud metadata services (which
//! hand out credentials to whoever asks from the machine) and the addresses the kernel
//! treats as "this host" are reachable from the proxy, which runs on the host. An allowed
//! wildcard whose DNS an attacker controls, or a broad CIDR, would otherwise be a way into
//! them. The check written once here is what the proxy, its tests and the docs read.
//!
//! # Forms
//!
//! An IPv4 address travels inside IPv6 in several forms, each refused like the address it
//! carries ([`EMBEDDINGS`]): IPv4-mapped (`::ffff:127.0.0.1`, the same socket as the IPv4
//! address on Linux), IPv4-compatible (`::127.0.0.1`, deprecated, still routed by some
//! stacks), and NAT64 (`64:ff9b::7f00:1`), which a NAT64 gateway turns back into the IPv4
//! address. The local-use NAT64 prefix `64:ff9b:1::/48` (RFC 8215) is refused whole: where
//! the IPv4 address sits in it is the network operator's choice (any RFC 6052 layout), so
//! the proxy cannot tell which address one of its addresses carries.
//!
//! IPv4-mapped addresses are first made IPv4 ([`canonical`]) wherever the allowlist judges,
//! so an IPv6 network pattern (even `::/0`) never covers an IPv4 address in mapped form.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a refused range is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `0.0.0.0/8`: "this network", which Linux connects to the host itself.
    ThisNetwork,
    /// `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`: the host's own services.
    Loopback,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// A cloud's metadata or host service, which answers credentials to the machine.
    Metadata(&'static str),
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `64:ff9b:1::/48`: NAT64 in a layout of the network's own.
    LocalNat64,
}

impl Kind {
    /// True for the kinds that stand for the host itself (where the proxy listens).
    pub fn is_host(self) -> bool {
        matches!(self, Self::ThisNetwork | Self::Unspecified | Self::Loopback)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ThisNetwork => f.write_str("this-network (0.0.0.0/8)"),
            Self::Unspecified => f.write_str("unspecified"),
            Self::Loopback => f.write_str("loopback"),
            Self::LinkLocal => f.write_str("link-local"),
            Self::Metadata(which) => write!(f, "cloud metadata ({which})"),
            Self::Multicast => f.write_str("multicast"),
            Self::Broadcast => f.write_str("broadcast"),
            Self::LocalNat64 => f.write_str("local-use NAT64 (64:ff9b:1::/48)"),
        }
    }
}

/// One row of the table: a network and what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// The network's address, its host bits zero.
    pub net: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// What it is.
    pub kind: Kind,
}

const fn v4(a: [u8; 4], prefix: u8, kind: Kind) -> Range {
    Range {
        net: IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
        prefix,
        kind,
    }
}

const fn v6(s: [u16; 8], prefix: u8, kind: Kind) -> Range {
    Range {
        net: IpAddr::V6(Ipv6Addr::new(
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
        )),
        prefix,
        kind,
    }
}

/// The refused ranges, most specific first: the first row holding an address names it (a
/// metadata address is named as such, not as link-local), and is the range a caller's rule
/// must lie within to allow it.
pub const REFUSED: &[Range] = &[
    v4(
        [169, 254, 169, 254],
        32,
        Kind::Metadata("AWS, GCP, Azure, OCI, OpenStack"),
    ),
    v4(
        [169, 254, 170, 2],
        32,
        Kind::Metadata("AWS ECS task credentials"),
    ),
    v4([168, 63, 129, 16], 32, Kind::Metadata("Azure WireServer")),
    v4([100, 100, 100, 200], 32, Kind::Metadata("Alibaba Cloud")),
    v6(
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254],
        128,
        Kind::Metadata("AWS IPv6"),
    ),
    v4([0, 0, 0, 0], 8, Kind::ThisNetwork),
    v4([127, 0, 0, 0], 8, Kind::Loopback),
    v4([169, 254, 0, 0], 16, Kind::LinkLocal),
    v4([224, 0, 0, 0], 4, Kind::Multicast),
    v4([255, 255, 255, 255], 32, Kind::Broadcast),
    v6([0; 8], 128, Kind::Unspecified),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, Kind::Loopback),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Kind::LinkLocal),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Kind::Multicast),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Kind::LocalNat64),
];

/// An IPv6 /96 that carries an IPv4 address in its last 32 bits; each address in it is
/// refused like the address it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embedding {
    /// The prefix (96 bits long).
    pub net: Ipv6Addr,
    /// Its name, as printed.
    pub form: &'static str,
}

/// The IPv6 forms of an IPv4 address.
pub const EMBEDDINGS: &[Embedding] = &[
    Embedding {
        net: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
        form: "IPv4-mapped",
    },
    Embedding {
        net: Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
        form: "IPv4-compatible",
    },
    Embedding {
        net: Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
        form: "NAT64",
    },
];

/// Why an address is refused: its row, the form it came in, and the range (in the
/// address's own family) a caller's rule must lie within to allow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// What the address is.
    pub kind: Kind,
    /// The IPv6 form an IPv4 address came in, if it did.
    pub form: Option<&'static str>,
    /// The network a rule must lie within to allow the address.
    pub net: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl Refused {
    /// Whether a rule for `net/prefix` names this range itself (lies within it), rather
    /// than covering it as part of something wider.
    pub fn named_by(&self, net: IpAddr, prefix: u8) -> bool {
        net.is_ipv4() == self.net.is_ipv4()
            && prefix >= self.prefix
            && mask(net, self.prefix) == self.net
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.form {
            Some(form) => write!(f, "the {form} form of a {} address", self.kind),
            None => write!(f, "a {} address", self.kind),
        }
    }
}

/// `addr` with its host bits past `prefix` cleared.
pub(crate) fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

fn within(addr: IpAddr, net: IpAddr, prefix: u8) -> bool {
    addr.is_ipv4() == net.is_ipv4() && mask(addr, prefix) == net
}

/// The address as the kernel will use it: an IPv4-mapped IPv6 address is its IPv4 address.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        a => a,
    }
}

fn row(addr: IpAddr) -> Option<&'static Range> {
    REFUSED.iter().find(|r| within(addr, r.net, r.prefix))
}

/// Why `addr` is refused, or `None` when it is not in the table (in any form).
pub fn refused(addr: IpAddr) -> Option<Refused> {
    if let Some(r) = row(addr) {
        return Some(Refused {
            kind: r.kind,
            form: None,
            net: r.net,
            prefix: r.prefix,
        });
    }
    let IpAddr::V6(a) = addr else {
        return None;
    };
    for e in EMBEDDINGS {
        if !within(addr, IpAddr::V6(e.net), 96) {
            continue;
        }
        let o = a.octets();
        let carried = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
        if let Some(r) = row(IpAddr::V4(carried)) {
            let net = match r.net {
                IpAddr::V4(n) => u128::from(e.net) | u128::from(u32::from(n)),
                IpAddr::V6(_) => u128::from(a),
            };
            return Some(Refused {
                kind: r.kind,
                form: Some(e.form),
                net: IpAddr::V6(net.into()),
                prefix: 96 + r.prefix,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address inside `r`: its first, its last, and one in the middle.
    fn samples(r: &Range) -> Vec<IpAddr> {
        match r.net {
            IpAddr::V4(n) => {
                let base = u32::from(n);
                let span = u32::MAX.checked_shr(u32::from(r.prefix)).unwrap_or(0);
                vec![base, base | span, base | (span / 2)]
                    .into_iter()
                    .map(|b| IpAddr::V4(b.into()))
                    .collect()
            }
            IpAddr::V6(n) => {
                let base = u128::from(n);
                let span = u128::MAX.checked_shr(u32::from(r.prefix)).unwrap_or(0);
                vec![base, base | span, base | (span / 2)]
                    .into_iter()
                    .map(|b| IpAddr::V6(b.into()))
                    .collect()
            }
        }
    }

    fn in_form(v4: Ipv4Addr, e: &Embedding) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(e.net) | u128::from(u32::from(v4)))
    }

    #[test]
    fn every_row_is_refused_at_its_edges_and_named() {
        for r in REFUSED {
            for a in samples(r) {
                let got = refused(a).unwrap_or_else(|| panic!("{a} in {:?}", r));
                assert_eq!(got.form, None, "{a}");
                // A more specific row may name it first (a metadata address in link-local).
                let first = REFUSED.iter().find(|x| within(a, x.net, x.prefix)).unwrap();
                assert_eq!(got.kind, first.kind, "{a}");
            }
        }
    }

    #[test]
    fn every_ipv4_row_is_refused_in_every_ipv6_form() {
        for r in REFUSED.iter().filter(|r| r.net.is_ipv4()) {
            for a in samples(r) {
                let IpAddr::V4(a) = a else { unreachable!() };
                for e in EMBEDDINGS {
                    let six = in_form(a, e);
                    let got = refused(IpAddr::V6(six))
                        .unwrap_or_else(|| panic!("{six} ({} of {a})", e.form));
                    // `::` and `::1` are IPv4-compatible forms too, named by their own rows.
                    if row(IpAddr::V6(six)).is_some() {
                        continue;
                    }
                    assert_eq!(got.form, Some(e.form), "{six}");
                    assert_eq!(got.kind, refused(IpAddr::V4(a)).unwrap().kind, "{six}");
                    assert!(got.named_by(IpAddr::V6(six), 128), "{six}");
                }
            }
        }
    }

    #[test]
    fn the_rows_named_by_the_audit_are_all_there() {
        for (a, kind) in [
            ("0.0.0.0", "this-network"),
            ("0.1.2.3", "this-network"),
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("169.254.169.254", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("100.100.100.200", "metadata"),
            ("168.63.129.16", "metadata"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::ffff:127.0.0.1", "IPv4-mapped form of a loopback"),
            ("::127.0.0.1", "IPv4-compatible form of a loopback"),
            ("::ffff:169.254.169.254", "mapped form of a cloud metadata"),
            ("64:ff9b::127.0.0.1", "NAT64 form of a loopback"),
            ("64:ff9b::a9fe:a9fe", "NAT64 form of a cloud metadata"),
            ("64:ff9b:1::7f00:1", "local-use NAT64"),
            ("64:ff9b:1:7f00:0:1::", "local-use NAT64"),
            ("64:ff9b:1:ffff::", "local-use NAT64"),
            ("64:ff9b::0.0.0.0", "NAT64 form of a this-network"),
        ] {
            let ip: IpAddr = a.parse().unwrap();
            let got = refused(ip).unwrap_or_else(|| panic!("{a}"));
            assert!(got.to_string().contains(kind), "{a}: {got}");
        }
    }

    #[test]
    fn ordinary_addresses_pass_in_every_form() {
        for a in [
            "192.0.2.1",
            "10.0.0.1",
            "100.100.100.201",
            "169.253.255.255",
            "2001:db8::1",
            "fd00:ec2::253",
            "fec0::1",
            "64:ff9b::192.0.2.1",
            "::ffff:192.0.2.1",
            "64:ff9b:2::7f00:1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(refused(ip), None, "{a}");
        }
    }

    #[test]
    fn mapped_addresses_become_ipv4_and_others_stay() {
        let c = |s: &str| canonical(s.parse().unwrap()).to_string();
        assert_eq!(c("::ffff:127.0.0.1"), "127.0.0.1");
        assert_eq!(c("::127.0.0.1"), "::7f00:1");
        assert_eq!(c("64:ff9b::7f00:1"), "64:ff9b::7f00:1");
        assert_eq!(c("10.0.0.1"), "10.0.0.1");
    }

    #[test]
    fn a_rule_names_a_range_only_from_within_it() {
        let lo = refused("127.0.0.1".parse().unwrap()).unwrap();
        assert!(lo.named_by("127.0.0.0".parse().unwrap(), 8));
        assert!(lo.named_by("127.0.0.1".parse().unwrap(), 32));
        assert!(!lo.named_by("0.0.0.0".parse().unwrap(), 0));
        assert!(!lo.named_by("::".parse().unwrap(), 0));
        let md = refused("169.254.169.254".parse().unwrap()).unwrap();
        assert!(!md.named_by("169.254.0.0".parse().unwrap(), 16));
        assert!(md.named_by("169.254.169.254".parse().unwrap(), 32));
        let nat = refused("64:ff9b::7f00:1".parse().unwrap()).unwrap();
        assert!(nat.named_by("64:ff9b::7f00:0".parse().unwrap(), 104));
        assert!(!nat.named_by("64:ff9b::".parse().unwrap(), 96));
    }
}
