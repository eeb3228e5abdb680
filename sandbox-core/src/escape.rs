//! Text that came from the command (file names, paths, host names, diff lines), made safe
//! to print on a terminal.
//!
//! A command controls the names of the files it writes and the lines in them. Printed raw,
//! an escape sequence in either moves the cursor, erases the lines above it (a planted
//! `.git/hooks/pre-commit` hidden from a change set's review) or prints lines that were
//! never there; a bidirectional override reorders what a reader sees. [`escape`] renders
//! every such byte visibly, so what a person reads is what the command wrote.
//!
//! The rendering is one-to-one (two different inputs never look the same), so a name the
//! command chose cannot pass for another:
//!
//! | input | shown as |
//! |---|---|
//! | `\` | `\\` |
//! | tab, newline, carriage return | `\t`, `\n`, `\r` |
//! | any other C0 byte, DEL (`0x00`–`0x1f`, `0x7f`), ESC included | `\xNN` (`\x1b`) |
//! | a byte that is not part of valid UTF-8 (always `0x80` or more) | `\xNN` |
//! | a C1 control (U+0080–U+009F), a bidirectional control, a line or paragraph separator | `\u{NNNN}` |
//! | anything else | itself |
//!
//! Only what is printed on a terminal goes through here: a patch file, JSON, and output
//! that is not a terminal keep the bytes as the command wrote them.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` as it may be shown on a terminal: every control byte, invalid UTF-8 byte and
/// character that changes how the rest of a line is displayed rendered as a visible escape
/// (see the [module](self) for the table). Borrowed when nothing needed escaping.
pub fn escape(text: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(text) {
        if !s.chars().any(needs_escape) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(text.len() + 8);
    for chunk in text.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c);
        }
        for b in chunk.invalid() {
            // Infallible: writing to a String.
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// Characters shown as an escape rather than as themselves.
fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_control() || is_format_hazard(c)
}

/// Characters that are not controls to Unicode but change how the text around them is
/// laid out: the bidirectional embeddings, overrides and isolates ("Trojan Source"), the
/// marks, and the line and paragraph separators.
fn is_format_hazard(c: char) -> bool {
    matches!(
        c,
        '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}'
    )
}

fn push_char(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        // Infallible: writing to a String.
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The inverse of [`escape`], to show that no two inputs render alike.
    fn unescape(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\\' {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            match chars.next().expect("a lone backslash") {
                '\\' => out.push(b'\\'),
                't' => out.push(b'\t'),
                'n' => out.push(b'\n'),
                'r' => out.push(b'\r'),
                'x' => {
                    let hex: String = chars.by_ref().take(2).collect();
                    out.push(u8::from_str_radix(&hex, 16).expect("two hex digits"));
                }
                'u' => {
                    assert_eq!(chars.next(), Some('{'));
                    let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    let c = char::from_u32(u32::from_str_radix(&hex, 16).expect("hex"))
                        .expect("a char");
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                other => panic!("unknown escape \\{other}"),
            }
        }
        out
    }

    /// A byte a terminal acts on: C0, DEL, or the lead of a C1 control in UTF-8 (`0xc2`
    /// followed by `0x80`–`0x9f`); a lone `0x80`–`0x9f` byte is a C1 control to a terminal
    /// in an 8-bit mode.
    fn has_control(s: &str) -> bool {
        let b = s.as_bytes();
        b.iter().any(|&x| x < 0x20 || x == 0x7f)
            || s.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c))
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(
            escape(b"src/main.rs"),
            Cow::Borrowed("src/main.rs")
        ));
        assert_eq!(escape("héllo wörld ✓".as_bytes()), "héllo wörld ✓");
    }

    #[test]
    fn escape_sequences_are_shown_not_obeyed() {
        assert_eq!(
            escape(b"a\x1b[2K\x1b[1Ab"),
            "a\\x1b[2K\\x1b[1Ab",
            "erase-line and cursor-up"
        );
        assert_eq!(escape(b"\x1b]0;title\x07"), "\\x1b]0;title\\x07");
        assert_eq!(escape(b"x\ty\nz\r"), "x\\ty\\nz\\r");
        assert_eq!(escape(b"\x00\x7f"), "\\x00\\x7f");
    }

    #[test]
    fn c1_controls_bidi_and_invalid_utf8_are_shown() {
        // U+009B is the one-character CSI.
        assert_eq!(escape("a\u{9b}2K".as_bytes()), "a\\u{009b}2K");
        assert_eq!(escape("\u{202e}cod.exe".as_bytes()), "\\u{202e}cod.exe");
        assert_eq!(
            escape("\u{2066}x\u{2069}".as_bytes()),
            "\\u{2066}x\\u{2069}"
        );
        // A lone 0x9b byte is CSI to an 8-bit terminal; here it is invalid UTF-8.
        assert_eq!(escape(b"a\x9b2K\xff"), "a\\x9b2K\\xff");
    }

    #[test]
    fn a_backslash_is_doubled_so_an_escape_cannot_be_forged() {
        // A name that spells an escape renders apart from the byte it spells.
        assert_eq!(escape(b"\\x1b"), "\\\\x1b");
        assert_ne!(escape(b"\\x1b"), escape(b"\x1b"));
        assert_ne!(escape(b"\\x9b"), escape(b"\x9b"));
        assert_ne!(escape("\u{9b}".as_bytes()), escape(b"\x9b"));
    }

    proptest! {
        #[test]
        fn the_output_never_holds_a_control_byte(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let out = escape(&bytes);
            prop_assert!(!has_control(&out), "{:?} -> {:?}", bytes, out);
            prop_assert!(!out.chars().any(is_format_hazard));
        }

        #[test]
        fn the_output_says_exactly_what_the_input_was(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            prop_assert_eq!(unescape(&escape(&bytes)), bytes);
        }

        #[test]
        fn text_with_controls_and_escapes_round_trips(s in "[a-z\\\\\u{1b}\u{9b}\u{202e}\t\n\\[]{0,64}") {
            let out = escape(s.as_bytes());
            prop_assert!(!has_control(&out));
            prop_assert_eq!(unescape(&out), s.as_bytes().to_vec());
        }
    }
}
