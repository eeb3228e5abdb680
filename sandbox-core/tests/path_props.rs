//! The path canonicaliser over arbitrary input, with the oracle the fuzz target uses
//! (`common/path.rs`); `cargo xtask fuzz` runs this with many cases.

#[path = "common/path.rs"]
mod oracle;

use proptest::prelude::*;

/// Bytes drawn mostly from what paths are made of, so the interesting forms (`%2e%2e`,
/// `..;`, `//`) come up often, with any byte now and then.
fn pathish() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"/".to_vec()),
        Just(b".".to_vec()),
        Just(b"..".to_vec()),
        Just(b"%".to_vec()),
        Just(b"%2e".to_vec()),
        Just(b"%2E".to_vec()),
        Just(b"%2f".to_vec()),
        Just(b"%25".to_vec()),
        Just(b"%3b".to_vec()),
        Just(b"%5c".to_vec()),
        Just(b"%c3%a9".to_vec()),
        Just(b"%ff".to_vec()),
        Just(b"%20".to_vec()),
        Just(b";".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"#".to_vec()),
        Just(b"?".to_vec()),
        "[a-zA-Z0-9_~*+:@!-]{1,4}".prop_map(String::into_bytes),
        any::<u8>().prop_map(|b| vec![b]),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| {
        let mut out = b"/".to_vec();
        out.extend(v.into_iter().flatten());
        out
    })
}

proptest! {
    #[test]
    fn a_canonical_path_is_a_fixed_point_without_dots_doubled_slashes_or_semicolons(
        raw in pathish()
    ) {
        if let Some(v) = oracle::violation(&raw) {
            prop_assert!(false, "{:?}: {}", String::from_utf8_lossy(&raw), v);
        }
    }

    #[test]
    fn any_bytes_at_all_are_answered_without_a_panic(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Some(v) = oracle::violation(&raw) {
            prop_assert!(false, "{:?}: {}", String::from_utf8_lossy(&raw), v);
        }
    }
}
