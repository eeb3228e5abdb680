//! The request-path canonicaliser of request rules over arbitrary bytes: it never panics,
//! and an accepted path is canonical (no dot segment, no `//`, no `;`) and reads back as
//! itself from the form sent upstream. The oracle is shared with the property test
//! `sandbox-core/tests/path_props.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../sandbox-core/tests/common/path.rs"]
mod oracle;

fuzz_target!(|raw: &[u8]| {
    if let Some(v) = oracle::violation(raw) {
        panic!("{:?}: {v}", String::from_utf8_lossy(raw));
    }
});
