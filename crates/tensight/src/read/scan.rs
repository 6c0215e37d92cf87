//! A cheap JSON tokenizer: finds value boundaries without building anything.
//!
//! It knows strings (with escapes) and bracket depth, nothing else: enough to walk the
//! top-level object of a trace, skip values it does not need, find where an event that
//! the event parser refused ends, and cut an array into one byte range per element;
//! [`find_string_special`] is the event parser's SIMD string scan. Running off the end
//! of the buffer is reported as [`Truncated`] with the offset of the value that could
//! not be completed, so a trace cut short by a killed profiler still yields every
//! whole event before the cut. It does not validate JSON: the event parser does that,
//! per event.

use memchr::{memchr2, memchr3};

/// The input ended inside the value that starts at this byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated(pub usize);

/// Index of the first non-whitespace byte at or after `pos` (or `buf.len()`).
#[inline]
pub fn skip_ws(buf: &[u8], mut pos: usize) -> usize {
    while pos < buf.len() && matches!(buf[pos], b' ' | b'\n' | b'\r' | b'\t') {
        pos += 1;
    }
    pos
}

/// Index of the first byte at or after `pos` that ends a run of plain string content:
/// a quote, a backslash or a control character (below 0x20, which JSON forbids raw in
/// strings); `buf.len()` if none. Sixteen bytes at a time with SSE2 on x86-64.
#[inline]
pub fn find_string_special(buf: &[u8], pos: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let mut i = pos;
        // SAFETY: SSE2 is part of the x86-64 baseline; every load reads 16 bytes that
        // lie inside `buf` (i + 16 <= len), unaligned loads are allowed.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let ctl = _mm_set1_epi8(0x1f);
            while i + 16 <= buf.len() {
                let v = _mm_loadu_si128(buf.as_ptr().add(i) as *const __m128i);
                let q = _mm_cmpeq_epi8(v, quote);
                let b = _mm_cmpeq_epi8(v, backslash);
                // v <= 0x1f (unsigned) exactly when min(v, 0x1f) == v.
                let c = _mm_cmpeq_epi8(_mm_min_epu8(v, ctl), v);
                let m = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, b), c));
                if m != 0 {
                    return i + m.trailing_zeros() as usize;
                }
                i += 16;
            }
        }
        find_string_special_scalar(buf, i)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        find_string_special_scalar(buf, pos)
    }
}

#[inline]
fn find_string_special_scalar(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() {
        let c = buf[i];
        if c == b'"' || c == b'\\' || c < 0x20 {
            return i;
        }
        i += 1;
    }
    buf.len()
}

/// `pos` is at an opening quote; returns the index just past the closing quote.
#[inline]
pub fn string_end(buf: &[u8], pos: usize) -> Result<usize, Truncated> {
    let mut i = pos + 1;
    loop {
        match memchr2(b'"', b'\\', &buf[i.min(buf.len())..]) {
            None => return Err(Truncated(pos)),
            Some(k) => {
                let at = i + k;
                if buf[at] == b'\\' {
                    i = at + 2;
                } else {
                    return Ok(at + 1);
                }
            }
        }
    }
}

/// `pos` is at the first byte of a value; returns the index just past it.
pub fn value_end(buf: &[u8], pos: usize) -> Result<usize, Truncated> {
    let Some(&c) = buf.get(pos) else {
        return Err(Truncated(pos));
    };
    match c {
        b'"' => string_end(buf, pos),
        b'{' => container_end(buf, pos, b'{', b'}'),
        b'[' => container_end(buf, pos, b'[', b']'),
        _ => {
            let mut i = pos;
            while i < buf.len()
                && !matches!(buf[i], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            {
                i += 1;
            }
            if i == buf.len() {
                Err(Truncated(pos))
            } else {
                Ok(i)
            }
        }
    }
}

/// Balanced `open`/`close` scan. Valid JSON nests both bracket kinds properly, so
/// counting only one kind finds the right end.
fn container_end(buf: &[u8], pos: usize, open: u8, close: u8) -> Result<usize, Truncated> {
    let mut depth = 0usize;
    let mut i = pos;
    loop {
        let Some(k) = memchr3(b'"', open, close, &buf[i.min(buf.len())..]) else {
            return Err(Truncated(pos));
        };
        let at = i + k;
        let b = buf[at];
        if b == b'"' {
            i = string_end(buf, at).map_err(|_| Truncated(pos))?;
        } else if b == open {
            depth += 1;
            i = at + 1;
        } else {
            depth -= 1;
            i = at + 1;
            if depth == 0 {
                return Ok(i);
            }
        }
    }
}

/// One member of an object: the key's raw bytes (without quotes) and the value's range.
pub struct Member<'a> {
    /// Key text as written (escapes not decoded).
    pub key: &'a [u8],
    /// Offset of the value's first byte.
    pub start: usize,
    /// Offset just past the value.
    pub end: usize,
}

/// Walk the members of the object starting at `pos` (at `{`). Calls `f` for each
/// member; `f` may return `Some(end)` to say where the value really ended (when it
/// consumed a truncated value itself). Returns the offset past the closing brace.
pub fn walk_object<'a>(
    buf: &'a [u8],
    pos: usize,
    mut f: impl FnMut(&Member<'a>) -> Option<Result<usize, Truncated>>,
) -> Result<usize, Truncated> {
    let mut i = skip_ws(buf, pos + 1);
    if buf.get(i) == Some(&b'}') {
        return Ok(i + 1);
    }
    loop {
        if buf.get(i) != Some(&b'"') {
            return Err(Truncated(i));
        }
        let kend = string_end(buf, i)?;
        let key = &buf[i + 1..kend - 1];
        i = skip_ws(buf, kend);
        if buf.get(i) != Some(&b':') {
            return Err(Truncated(i));
        }
        i = skip_ws(buf, i + 1);
        let start = i;
        let end = match f(&Member { key, start, end: 0 }) {
            Some(r) => r?,
            None => value_end(buf, i)?,
        };
        i = skip_ws(buf, end);
        match buf.get(i) {
            Some(b',') => i = skip_ws(buf, i + 1),
            Some(b'}') => return Ok(i + 1),
            _ => return Err(Truncated(i)),
        }
    }
}

/// Cut the array starting at `pos` (at `[`) into element ranges, pushing each to
/// `out`. On truncation, the ranges before the cut are in `out`.
pub fn array_elements(
    buf: &[u8],
    pos: usize,
    out: &mut Vec<(usize, usize)>,
) -> Result<usize, Truncated> {
    let mut i = skip_ws(buf, pos + 1);
    if buf.get(i) == Some(&b']') {
        return Ok(i + 1);
    }
    loop {
        let start = i;
        let end = value_end(buf, start)?;
        out.push((start, end));
        i = skip_ws(buf, end);
        match buf.get(i) {
            Some(b',') => {
                i = skip_ws(buf, i + 1);
                // Tolerate a trailing comma before the closing bracket.
                if buf.get(i) == Some(&b']') {
                    return Ok(i + 1);
                }
            }
            Some(b']') => return Ok(i + 1),
            None => return Err(Truncated(i)),
            Some(_) => return Err(Truncated(i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_escapes() {
        let b = br#""a\"b\\" x"#;
        assert_eq!(string_end(b, 0), Ok(8));
        assert_eq!(string_end(br#""abc"#, 0), Err(Truncated(0)));
    }

    #[test]
    fn nested_values() {
        let b = br#"{"a": [1, {"b": "}"}], "c": 2}"#;
        assert_eq!(value_end(b, 0), Ok(b.len()));
        let mut keys = Vec::new();
        walk_object(b, 0, |m| {
            keys.push(String::from_utf8_lossy(m.key).to_string());
            None
        })
        .unwrap();
        assert_eq!(keys, ["a", "c"]);
    }

    #[test]
    fn array_cut_short() {
        let b = br#"[{"a":1}, {"b":2}, {"c":"#;
        let mut out = Vec::new();
        let r = array_elements(b, 0, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(r, Err(Truncated(19)));
    }

    #[test]
    fn string_specials_match_the_byte_loop() {
        // Every offset of inputs longer than one SIMD step, with the special byte at
        // every position, including none and the very end.
        for special in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
            for len in [0usize, 1, 15, 16, 17, 31, 32, 33, 70] {
                for at in 0..=len {
                    let mut b = vec![b'a'; len];
                    b.extend_from_slice(&[0x20, 0x7f, 0x80, 0xff]);
                    if at < len {
                        b[at] = special;
                    }
                    for pos in 0..=b.len() {
                        assert_eq!(
                            find_string_special(&b, pos),
                            find_string_special_scalar(&b, pos),
                            "special {special} at {at}, len {len}, from {pos}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn scalars() {
        assert_eq!(value_end(b"123,", 0), Ok(3));
        assert_eq!(value_end(b"true}", 0), Ok(4));
        assert_eq!(value_end(b"12", 0), Err(Truncated(0)));
    }
}
