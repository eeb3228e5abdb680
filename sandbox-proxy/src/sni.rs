//! The server name of a TLS ClientHello, read from the first bytes of a tunnel the proxy
//! does not terminate, so a tunnel to an allowed name cannot carry TLS for another one
//! (domain fronting: `CONNECT allowed.example` with `SNI evil.example` reaches evil's
//! site on a shared front).
//!
//! A small parser of our own rather than a TLS library's: it reads only the record layer,
//! the ClientHello's fixed fields and its extension list, is bounded ([`MAX_HELLO`]), never
//! allocates more than it was given, and is a pure function of its input (fuzzed by
//! `cargo xtask fuzz`). Anything that starts as TLS and does not parse is refused, never
//! passed: a parser difference between us and the server is the bypass this stops.
//!
//! What it cannot see: with TLS terminated nowhere, the `Host` of the requests inside a
//! matching tunnel is the server's to check.

/// The most bytes of handshake records a ClientHello may take; one larger is refused.
/// Real ones (post-quantum key shares included) are under 2 KiB; the record layer allows
/// 16 KiB per record, and a hello may span records.
pub const MAX_HELLO: usize = 1 << 16;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
/// `encrypted_client_hello` (RFC 9849): the real server name is encrypted.
const EXT_ECH: u16 = 0xfe0d;
/// The draft `encrypted_server_name` (ESNI) before it.
const EXT_ESNI: u16 = 0xffce;
const NAME_TYPE_HOST: u8 = 0;

/// What the first bytes of a tunnel are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not a TLS handshake record: not TLS.
    NotTls,
    /// A TLS handshake so far: more bytes are needed.
    Incomplete,
    /// A whole ClientHello.
    ClientHello {
        /// Its `server_name` (`host_name`), as sent.
        server_name: Option<String>,
        /// Whether it carries an encrypted ClientHello (or the draft ESNI).
        ech: bool,
    },
    /// Starts as TLS, and is not a well-formed ClientHello (or is larger than
    /// [`MAX_HELLO`]): why.
    Malformed(&'static str),
}

/// A cursor over bytes that never reads past their end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }
    /// A vector with a one- or two-byte length.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// Judge the first bytes of a tunnel.
pub fn parse(buf: &[u8]) -> Hello {
    match buf.first() {
        None => return Hello::Incomplete,
        Some(&CONTENT_HANDSHAKE) => {}
        Some(_) => return Hello::NotTls,
    }
    // The handshake message, gathered from as many handshake records as it spans.
    let mut handshake: Vec<u8> = Vec::new();
    let mut records = Cursor(buf);
    loop {
        let Some(header) = records.take(5) else {
            return Hello::Incomplete;
        };
        if header[0] != CONTENT_HANDSHAKE {
            return Hello::Malformed("a record other than a handshake inside the ClientHello");
        }
        // The record version's first byte is 3 in every SSL 3 / TLS version.
        if header[1] != 3 {
            return Hello::Malformed("not a TLS record version");
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 {
            return Hello::Malformed("an empty handshake record");
        }
        if handshake.len() + len > MAX_HELLO {
            return Hello::Malformed("the ClientHello is too large");
        }
        let Some(fragment) = records.take(len) else {
            return Hello::Incomplete;
        };
        handshake.extend_from_slice(fragment);
        let mut hs = Cursor(&handshake);
        let (Some(kind), Some(body_len)) = (hs.u8(), hs.u24()) else {
            continue;
        };
        if kind != HANDSHAKE_CLIENT_HELLO {
            return Hello::Malformed("the first handshake message is not a ClientHello");
        }
        if body_len + 4 > MAX_HELLO {
            return Hello::Malformed("the ClientHello is too large");
        }
        match hs.take(body_len) {
            Some(body) if hs.0.is_empty() => return client_hello(body),
            // Bytes after the ClientHello in its records: no client sends that.
            Some(_) => return Hello::Malformed("bytes after the ClientHello in its record"),
            None => continue,
        }
    }
}

fn client_hello(body: &[u8]) -> Hello {
    let mut c = Cursor(body);
    let fixed = (|| {
        c.take(2)?; // legacy_version
        c.take(32)?; // random
        let session = c.vec8()?;
        let suites = c.vec16()?;
        let compression = c.vec8()?;
        Some((session.len(), suites.len(), compression.len()))
    })();
    let Some((session, suites, compression)) = fixed else {
        return Hello::Malformed("the ClientHello is cut short");
    };
    if session > 32 || suites < 2 || suites % 2 != 0 || compression < 1 {
        return Hello::Malformed("the ClientHello's fixed fields are malformed");
    }
    if c.0.is_empty() {
        // No extensions at all (SSL 3 style): no server name.
        return Hello::ClientHello {
            server_name: None,
            ech: false,
        };
    }
    let Some(exts) = c.vec16() else {
        return Hello::Malformed("the extensions are cut short");
    };
    if !c.0.is_empty() {
        return Hello::Malformed("bytes after the extensions");
    }
    let mut exts = Cursor(exts);
    let mut seen: Vec<u16> = Vec::new();
    let mut server_name = None;
    let mut ech = false;
    while !exts.0.is_empty() {
        let (Some(kind), Some(data)) = (exts.u16(), exts.vec16()) else {
            return Hello::Malformed("an extension is cut short");
        };
        // RFC 8446 §4.2: at most one extension of each type. Two server names would let the
        // proxy read one and the server the other.
        if seen.contains(&kind) {
            return Hello::Malformed("an extension appears twice");
        }
        seen.push(kind);
        match kind {
            EXT_SERVER_NAME => match host_name(data) {
                Ok(name) => server_name = Some(name),
                Err(why) => return Hello::Malformed(why),
            },
            EXT_ECH | EXT_ESNI => ech = true,
            _ => {}
        }
    }
    Hello::ClientHello { server_name, ech }
}

/// The one `host_name` of a `server_name` extension (RFC 6066 §3).
fn host_name(data: &[u8]) -> Result<String, &'static str> {
    let mut c = Cursor(data);
    let Some(list) = c.vec16() else {
        return Err("the server name list is cut short");
    };
    if !c.0.is_empty() {
        return Err("bytes after the server name list");
    }
    let mut list = Cursor(list);
    let mut name = None;
    while !list.0.is_empty() {
        let (Some(kind), Some(value)) = (list.u8(), list.vec16()) else {
            return Err("a server name is cut short");
        };
        if kind != NAME_TYPE_HOST {
            return Err("a server name of an unknown type");
        }
        if name.is_some() {
            return Err("two host names in one server name list");
        }
        if value.is_empty() || !value.iter().all(|b| b.is_ascii_graphic()) {
            return Err("a host name that is not printable ASCII");
        }
        name = Some(String::from_utf8_lossy(value).into_owned());
    }
    name.ok_or("an empty server name list")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello with these extensions, in one record (or split into records of
    /// `split` bytes).
    fn hello(exts: &[(u16, Vec<u8>)], split: usize) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        let mut e = Vec::new();
        for (kind, data) in exts {
            e.extend_from_slice(&kind.to_be_bytes());
            e.extend_from_slice(&(data.len() as u16).to_be_bytes());
            e.extend_from_slice(data);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut hs = vec![HANDSHAKE_CLIENT_HELLO];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut out = Vec::new();
        for chunk in hs.chunks(split) {
            out.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    fn sni(names: &[&str]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(NAME_TYPE_HOST);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n.as_bytes());
        }
        let mut out = (list.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&list);
        out
    }

    fn named(n: &str) -> Hello {
        Hello::ClientHello {
            server_name: Some(n.into()),
            ech: false,
        }
    }

    #[test]
    fn a_server_name_is_read_in_one_record_or_many() {
        let h = hello(
            &[(10, vec![0, 2, 0, 29]), (0, sni(&["api.example.com"]))],
            1 << 14,
        );
        assert_eq!(parse(&h), named("api.example.com"));
        let h = hello(&[(0, sni(&["api.example.com"]))], 7);
        assert_eq!(parse(&h), named("api.example.com"));
    }

    #[test]
    fn every_prefix_of_a_hello_is_incomplete_never_judged() {
        let h = hello(&[(0, sni(&["a.example"]))], 20);
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Hello::Incomplete, "{n}");
        }
    }

    #[test]
    fn no_server_name_and_ech_are_told() {
        assert_eq!(
            parse(&hello(&[(10, vec![0, 2, 0, 29])], 1 << 14)),
            Hello::ClientHello {
                server_name: None,
                ech: false
            }
        );
        assert_eq!(
            parse(&hello(
                &[(0, sni(&["public.example"])), (EXT_ECH, vec![0; 40])],
                1 << 14
            )),
            Hello::ClientHello {
                server_name: Some("public.example".into()),
                ech: true
            }
        );
    }

    #[test]
    fn ambiguous_hellos_are_malformed() {
        for (what, h) in [
            (
                "two sni",
                hello(
                    &[(0, sni(&["a.example"])), (0, sni(&["b.example"]))],
                    1 << 14,
                ),
            ),
            (
                "two names",
                hello(&[(0, sni(&["a.example", "b.example"]))], 1 << 14),
            ),
            ("empty list", hello(&[(0, sni(&[]))], 1 << 14)),
            ("nul in name", hello(&[(0, sni(&["a\0.example"]))], 1 << 14)),
        ] {
            assert!(matches!(parse(&h), Hello::Malformed(_)), "{what}");
        }
        let mut trailing = hello(&[(0, sni(&["a.example"]))], 1 << 14);
        trailing[4] += 1;
        trailing.push(0);
        assert!(matches!(parse(&trailing), Hello::Malformed(_)));
        // An alert record where the rest of the hello should be.
        assert!(matches!(
            parse(&[CONTENT_HANDSHAKE, 3, 1, 0, 2, 1, 0, 21, 3, 1, 0, 1, 0]),
            Hello::Malformed(_)
        ));
        assert!(matches!(
            parse(&[CONTENT_HANDSHAKE, 3, 1, 0, 1, 2]),
            Hello::Incomplete
        ));
        assert!(matches!(
            parse(&[CONTENT_HANDSHAKE, 3, 1, 0, 4, 2, 0, 0, 0]),
            Hello::Malformed(_)
        ));
    }

    #[test]
    fn other_protocols_are_not_tls() {
        for first in [
            &b"SSH-2.0-OpenSSH"[..],
            b"GET / HTTP/1.1",
            &[0, 0, 0, 8, 4, 210],
        ] {
            assert_eq!(parse(first), Hello::NotTls);
        }
    }

    /// What the fuzz target checks, over every one-byte change and every cut of a real
    /// shape: no panic, and a verdict that more bytes never change.
    #[test]
    fn mutations_never_panic_and_verdicts_hold_with_more_bytes() {
        let h = hello(&[(10, vec![0, 2, 0, 29]), (0, sni(&["a.example"]))], 9);
        for i in 0..h.len() {
            for v in [0u8, 1, 2, 3, 0x16, 0x7f, 0x80, 0xff] {
                let mut m = h.clone();
                m[i] = v;
                for cut in [i, i + 1, m.len()] {
                    let judged = parse(&m[..cut]);
                    if judged != Hello::Incomplete {
                        assert_eq!(parse(&m), judged, "byte {i} = {v}, cut {cut}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_hello_larger_than_the_bound_is_refused_before_it_is_all_read() {
        let mut big = vec![
            CONTENT_HANDSHAKE,
            3,
            1,
            0x40,
            0,
            HANDSHAKE_CLIENT_HELLO,
            0x02,
            0,
            0,
        ];
        big.resize(5 + 0x4000, 0);
        assert!(matches!(parse(&big), Hello::Malformed(_)));
    }
}
