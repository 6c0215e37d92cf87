//! The one sanitizer for text that came from someone else's file.
//!
//! Names in a trace, an execution trace, an Nsight Compute CSV or a bundle manifest are
//! written by other programs and sometimes by other people. Before such a string can
//! reach a terminal, a text file, a DOT graph or stderr it goes through [`escaped`]:
//! control characters (ESC, BEL, CR, LF, the C1 range, ...), bidirectional overrides and
//! isolates (U+202A..U+202E, U+2066..U+2069, U+200E/F, U+061C) and the Unicode line and
//! paragraph separators are written as `\u{..}` escapes, so input cannot move the cursor,
//! retitle the window, forge lines or reorder what is shown. [`shown`] and [`shown_to`]
//! also cut a long name with an ellipsis to a width.
//!
//! The readers apply [`clean`] (escape, and cut at [`MAX_STRING_BYTES`]) once, as they
//! build the model, so no later stage sees a raw control character or an unbounded
//! string; the renderers call [`shown_to`] to fit a name to their width and
//! [`terminal_safe`] over whole texts as a last line of defence (it is a no-op on clean
//! text). It does not quote for a shell or for DOT: those have their own escaping on
//! top of this one.

use std::borrow::Cow;
use std::fmt::Write;

/// Longest string a reader keeps from its input, in bytes (64 KiB); longer ones are cut
/// (at a character boundary) and counted as `long_string`. Kernel signatures run to a few
/// KB, `Input Dims` of a concatenation of hundreds of tensors to tens of KB.
pub const MAX_STRING_BYTES: usize = 64 << 10;

/// Longest name [`shown`] prints, in characters.
pub const SHOWN_MAX: usize = 160;

/// True for the characters [`escaped`] rewrites.
#[inline]
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// Cheap byte test: false when `s` certainly holds no character [`is_unsafe`] matches
/// (no byte below 0x20, no DEL, and none of the lead bytes of C1 controls, U+061C or the
/// U+20xx marks).
#[inline]
fn maybe_unsafe(s: &str) -> bool {
    s.bytes()
        .any(|b| b < 0x20 || b == 0x7f || b == 0xc2 || b == 0xd8 || b == 0xe2)
}

/// `s` with every character [`is_unsafe`] matches written as a `\u{..}` escape;
/// borrowed when there is none (the common case).
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !maybe_unsafe(s) || !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_unsafe(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// What [`clean`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Control or bidirectional characters were escaped.
    pub escaped: bool,
    /// The string was longer than [`MAX_STRING_BYTES`] and was cut.
    pub cut: bool,
}

/// A string as a reader keeps it: cut at [`MAX_STRING_BYTES`] (with `…`), then
/// [`escaped`]. Borrowed when nothing changed.
pub fn clean(s: &str) -> (Cow<'_, str>, Cleaned) {
    let mut what = Cleaned::default();
    let cut: &str = if s.len() > MAX_STRING_BYTES {
        what.cut = true;
        let mut end = MAX_STRING_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        &s[..end]
    } else {
        s
    };
    let out = match escaped(cut) {
        Cow::Borrowed(b) if what.cut => Cow::Owned(format!("{b}…")),
        Cow::Borrowed(b) => Cow::Borrowed(b),
        Cow::Owned(mut o) => {
            what.escaped = true;
            if what.cut {
                o.push('…');
            }
            Cow::Owned(o)
        }
    };
    (out, what)
}

/// [`clean`] into an owned string, discarding what changed.
pub fn cleaned(s: &str) -> String {
    clean(s).0.into_owned()
}

/// `s` (a name from a trace or a manifest) safe to print on a terminal ([`escaped`]),
/// cut with an ellipsis past [`SHOWN_MAX`] characters.
pub fn shown(s: &str) -> String {
    shown_to(s, SHOWN_MAX)
}

/// `s` [`escaped`] and cut to at most `max` characters (at least 1), the last of them
/// `…` when cut.
pub fn shown_to(s: &str, max: usize) -> String {
    cut(&escaped(s), max.max(1))
}

/// `s` cut to at most `max` characters, the last of them `…` when cut (no escaping:
/// for text that is safe already).
pub fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some(_) => {
            let end = s
                .char_indices()
                .nth(max.saturating_sub(1))
                .map_or(s.len(), |(i, _)| i);
            format!("{}…", &s[..end])
        }
    }
}

/// A whole text (a report, a message) with every unsafe character escaped except the
/// line feeds that separate its lines, and, when `keep_sgr` is set, the colour
/// sequences (`ESC [ digits;... m`) the renderer wrote itself. On text whose names went
/// through [`clean`] this changes nothing.
pub fn terminal_safe(text: &str, keep_sgr: bool) -> Cow<'_, str> {
    if !maybe_unsafe(text) {
        return Cow::Borrowed(text);
    }
    let needs = {
        let mut rest = text;
        let mut bad = false;
        while let Some((i, c)) = rest
            .char_indices()
            .find(|&(_, c)| is_unsafe(c) && c != '\n')
        {
            if keep_sgr && c == '\u{1b}' {
                if let Some(n) = sgr_len(&rest[i..]) {
                    rest = &rest[i + n..];
                    continue;
                }
            }
            bad = true;
            break;
        }
        bad
    };
    if !needs {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '\u{1b}' && keep_sgr {
            if let Some(n) = sgr_len(rest) {
                out.push_str(&rest[..n]);
                rest = &rest[n..];
                continue;
            }
        }
        if is_unsafe(c) && c != '\n' {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

/// A byte count for a message: `8.0 GiB`, `512 B` (binary units).
pub fn fmt_size(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Length of a Select Graphic Rendition sequence at the start of `s`, if one is there.
fn sgr_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.len() < 3 || b[0] != 0x1b || b[1] != b'[' {
        return None;
    }
    let mut i = 2;
    while i < b.len() && i < 32 && (b[i].is_ascii_digit() || b[i] == b';') {
        i += 1;
    }
    (b.get(i) == Some(&b'm')).then_some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_ends_long_text_with_an_ellipsis() {
        assert_eq!(cut("gemm", 4), "gemm");
        assert_eq!(cut("gemm_kernel", 5), "gemm…");
        assert_eq!(cut("µs×µs", 3), "µs…");
        assert_eq!(cut("ab", 0), "…");
    }

    #[test]
    fn shown_escapes_what_would_drive_the_terminal_and_cuts_long_names() {
        assert_eq!(shown("aten::mm"), "aten::mm");
        assert_eq!(
            shown("a\u{1b}[2Jb\rc\nd\u{7}"),
            "a\\u{1b}[2Jb\\u{d}c\\u{a}d\\u{7}"
        );
        assert_eq!(shown("x\u{202e}gpj.exe"), "x\\u{202e}gpj.exe");
        assert_eq!(shown("a\u{9b}31m\u{2028}b"), "a\\u{9b}31m\\u{2028}b");
        let long = "é".repeat(1000);
        let s = shown(&long);
        assert_eq!(s.chars().count(), 160);
        assert!(s.ends_with('…'));
        assert_eq!(shown_to("abcdef", 4), "abc…");
        assert_eq!(shown_to("abcd", 4), "abcd");
        // Non-ASCII that is not a control stays as it is.
        assert_eq!(shown("café ∑ 日本"), "café ∑ 日本");
    }

    #[test]
    fn clean_cuts_at_the_byte_cap_on_a_character_boundary() {
        let long = "é".repeat(MAX_STRING_BYTES);
        let (c, what) = clean(&long);
        assert!(what.cut && !what.escaped);
        assert!(c.len() <= MAX_STRING_BYTES + '…'.len_utf8());
        assert!(c.ends_with('…'));
        let (c, what) = clean("ok\u{1b}]0;title\u{7}");
        assert_eq!(c, "ok\\u{1b}]0;title\\u{7}");
        assert!(what.escaped && !what.cut);
        assert!(matches!(clean("plain").0, Cow::Borrowed(_)));
    }

    #[test]
    fn terminal_safe_keeps_lines_and_own_colours_only() {
        assert_eq!(terminal_safe("a\nb", false), "a\nb");
        assert_eq!(
            terminal_safe("\u{1b}[1mx\u{1b}[0m", true),
            "\u{1b}[1mx\u{1b}[0m"
        );
        assert_eq!(terminal_safe("\u{1b}[1mx", false), "\\u{1b}[1mx");
        assert_eq!(
            terminal_safe("\u{1b}]0;pwn\u{7}\r", true),
            "\\u{1b}]0;pwn\\u{7}\\u{d}"
        );
    }
}
