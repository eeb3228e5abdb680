//! The oracle for the path canonicaliser, shared by the property test (`path_props`) and
//! the `cargo fuzz` target `canonical_path` (which includes this file by path): whatever the
//! input, the canonicaliser does not panic, and a path it accepts is in canonical form and
//! reads back as itself from what is sent upstream.

use sandbox_core::policy::canonical_path;

/// What is wrong with the canonicaliser's answer for `raw`, if anything.
pub fn violation(raw: &[u8]) -> Option<String> {
    let Ok(c) = canonical_path(raw) else {
        return None;
    };
    let s = c.as_str();
    if !s.starts_with('/') {
        return Some(format!("{s:?} does not start with `/`"));
    }
    if s.contains("//") {
        return Some(format!("{s:?} holds `//`"));
    }
    if s[1..].split('/').any(|seg| seg == "." || seg == "..") {
        return Some(format!("{s:?} holds a dot segment"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| matches!(c, ';' | '\\' | '\0' | '%') || c.is_control())
    {
        return Some(format!("{s:?} holds {c:?}"));
    }
    let wire = c.wire();
    if !wire.bytes().all(|b| b.is_ascii_graphic()) || wire.contains(['?', '#', ';', '\\']) {
        return Some(format!(
            "the wire form {wire:?} of {s:?} is not plain path text"
        ));
    }
    match canonical_path(wire.as_bytes()) {
        Ok(again) if again == c => {}
        other => return Some(format!("{wire:?} (from {s:?}) reads back as {other:?}")),
    }
    match canonical_path(s.as_bytes()) {
        // The decoded text itself is canonical too when it is plain URL text.
        Ok(again) if again != c => Some(format!("{s:?} is not a fixed point: {again:?}")),
        _ => None,
    }
}
