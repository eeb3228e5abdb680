//! The request rewriter (`inject::judge_request`) and the rules judge
//! (`terminate::judge_rules`) over generated heads, many of them hostile: neither panics,
//! and what passes is a head the proxy would itself pass unchanged (a fixed point), framed
//! one way only, for the decided host, with the value only where it is allowed and the
//! canonical path that was matched. `cargo xtask fuzz` runs this with many cases.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use proptest::prelude::*;
use sandbox_core::policy::{canonical_path, RequestRule};
use sandbox_core::{Placement, ResolvedSecret, Secret};
use sandbox_proxy::inject::judge_request;
use sandbox_proxy::terminate::judge_rules;

const PH: &str = "sandbox-placeholder-0123456789abcdef0123456789abcdef";
const VALUE: &str = "ghp_realvalue123";

fn secrets() -> Vec<ResolvedSecret> {
    vec![ResolvedSecret {
        name: "GH_TOKEN".into(),
        value: Secret::new(VALUE.as_bytes().to_vec()),
        hosts: vec!["api.test".into()],
        placement: Placement::Authorization,
        placeholder: PH.into(),
    }]
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_owned()),
        Just("POST".to_owned()),
        Just("CONNECT".to_owned()),
        Just("get".to_owned()),
        "[A-Z]{1,8}",
    ]
}

fn target() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just(";".to_owned()),
        Just("%2e".to_owned()),
        Just("%2f".to_owned()),
        Just("%25".to_owned()),
        Just("%3b".to_owned()),
        Just("?".to_owned()),
        Just("#".to_owned()),
        Just("&".to_owned()),
        Just("=".to_owned()),
        Just(PH.to_owned()),
        Just("https://api.test".to_owned()),
        Just("https://evil.test".to_owned()),
        "[a-z0-9*~]{1,5}",
    ];
    proptest::collection::vec(piece, 0..10).prop_map(|v| format!("/{}", v.concat()))
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Host: api.test".to_owned()),
        Just("Host: evil.test".to_owned()),
        Just("Content-Length: 5".to_owned()),
        Just("Content-Length: 6".to_owned()),
        Just("Content-Length: +5".to_owned()),
        Just("Transfer-Encoding: chunked".to_owned()),
        Just("Transfer-Encoding: gzip, chunked".to_owned()),
        Just("Upgrade: websocket".to_owned()),
        Just("Upgrade: h2c".to_owned()),
        Just("Connection: Upgrade".to_owned()),
        Just(format!("Authorization: Bearer {PH}")),
        Just(format!("X-Debug: {PH}")),
        Just("Proxy-Authorization: Basic eA==".to_owned()),
        Just(" folded".to_owned()),
        Just("Bad Name: x".to_owned()),
        "[A-Za-z-]{1,10}: [ -~]{0,12}",
    ]
}

fn head() -> impl Strategy<Value = String> {
    (
        method(),
        target(),
        prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0")],
        proptest::collection::vec(field(), 0..8),
    )
        .prop_map(|(m, t, v, fields)| {
            let mut h = format!("{m} {t} {v}\r\n");
            for f in fields {
                h.push_str(&f);
                h.push_str("\r\n");
            }
            h.push_str("\r\n");
            h
        })
}

proptest! {
    #[test]
    fn what_passes_is_a_fixed_point_for_the_decided_host(head in head()) {
        let rules: Vec<RequestRule> = ["GET,POST https://api.test/**", "GET https://api.test/a/*/b"]
            .iter()
            .map(|r| r.parse().unwrap())
            .collect();
        let Ok(j) = judge_request(&secrets(), "api.test", 443, true, head.as_bytes()) else {
            return Ok(());
        };
        let out = String::from_utf8(j.head.clone()).unwrap();
        // Parsed whole, one Host and it is the decided one, framed one way at most.
        let mut fields = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut fields);
        prop_assert_eq!(req.parse(&j.head), Ok(httparse::Status::Complete(j.head.len())));
        let hosts: Vec<_> = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host")).collect();
        prop_assert_eq!(hosts.len(), 1);
        prop_assert_eq!(hosts[0].value, b"api.test");
        let framing = req.headers.iter().filter(|h| {
            h.name.eq_ignore_ascii_case("content-length")
                || h.name.eq_ignore_ascii_case("transfer-encoding")
        });
        prop_assert!(framing.count() <= 1, "{}", out);
        prop_assert!(!out.contains(PH), "{}", out);
        prop_assert!(!out.to_ascii_lowercase().contains("proxy-authorization"), "{}", out);
        for line in out.lines().filter(|l| l.contains(VALUE)) {
            prop_assert!(line.starts_with("Authorization: "), "{}", out);
        }
        // Judged again, it passes unchanged.
        let again = judge_request(&secrets(), "api.test", 443, true, &j.head).unwrap();
        prop_assert_eq!(&again.head, &j.head);
        // The rules: what passes goes upstream as the canonical path that matched.
        let method = req.method.unwrap();
        let target = req.path.unwrap();
        if let Ok(v) = judge_rules(&rules, "api.test", method, target) {
            let path = v.target.split('?').next().unwrap();
            let canon = canonical_path(path.as_bytes()).unwrap();
            prop_assert_eq!(canon.as_str(), v.path.as_str());
            prop_assert_eq!(canon.wire(), path);
            prop_assert!(rules.iter().any(|r| r.as_str() == v.rule && r.allows(method, &canon)));
        }
    }
}
