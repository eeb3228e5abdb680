//! The proxy's TLS ClientHello reader over arbitrary bytes: it never panics, never reads
//! past its input, and a judged input keeps its verdict whatever follows it (the proxy
//! judges as bytes arrive, so a verdict must not depend on where a read ended).

#![no_main]

use libfuzzer_sys::fuzz_target;

// The reader is std-only: included by path, so this build does not pull in the proxy's
// TLS stack.
#[path = "../../sandbox-proxy/src/sni.rs"]
#[allow(dead_code)]
mod sni;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let (head, _) = data.split_at(split);
    let judged = sni::parse(head);
    if judged != sni::Hello::Incomplete {
        assert_eq!(sni::parse(data), judged, "a verdict changed with more bytes");
    }
});
