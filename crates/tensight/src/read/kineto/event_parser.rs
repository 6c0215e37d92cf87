//! A hand-written parser for one Kineto event object, byte by byte: what reads the
//! events the index parser ([`super::index_parser`]) leaves, before serde.
//!
//! Input: the bytes of a trace and the offset of an event's `{`. Output: the same
//! borrowed [`RawEvent`] that serde would build from that event, and the offset just
//! past its `}`. It validates what it skips as strictly as `serde_json` does (string
//! escapes and control characters, number grammar, literals, commas and colons), so
//! an event it accepts is one serde accepts, with the same field values: numbers are
//! converted with `serde_json`'s own (non-`float_roundtrip`) arithmetic.
//!
//! It deliberately does not handle the rare cases: escapes in keys or in the strings
//! it keeps, numbers with more than 18 digits or an exponent, nesting deeper than 64,
//! duplicate fields, and anything invalid. For those it answers [`Fallback`] and the
//! caller parses the event with serde, which decides. So behaviour is serde's; only
//! the common case is faster (no visitor machinery, SIMD string scanning).

use super::fields::{args_field, event_field, Fallback, Values, R};
use super::numbers::{self, Number};
use super::raw::{plain_us_to_ns, Id, Micros, Num, NumVisitor, RawArgs, RawEvent};
use super::scan::find_string_special;
use std::borrow::Cow;

/// Deepest nesting the fast path follows (serde_json's own limit is 128).
pub(super) const MAX_DEPTH: u32 = 64;

/// Parse the event object starting at `pos` (at `{`). Returns it and the offset just
/// past its closing brace.
#[cfg_attr(not(test), allow(dead_code))]
pub fn parse_event(buf: &[u8], pos: usize) -> R<(RawEvent<'_>, usize)> {
    let mut ev = RawEvent::default();
    let end = parse_event_into(buf, pos, &mut ev)?;
    Ok((ev, end))
}

/// [`parse_event`] into `ev` (which must be `RawEvent::default()`), so the large event
/// is built in place instead of being moved through every `?`. Returns the offset just
/// past the closing brace; on error `ev` holds a partial event.
#[inline]
pub fn parse_event_into<'a>(buf: &'a [u8], pos: usize, ev: &mut RawEvent<'a>) -> R<usize> {
    let mut p = Parser { b: buf, i: pos };
    let mut seen = 0u32;
    p.members(|p, key| event_field(p, key, ev, &mut seen))?;
    Ok(p.i)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.i += 1;
        }
    }

    #[inline]
    fn expect(&mut self, c: u8) -> R<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(Fallback)
        }
    }

    /// Walk an object's members: `f` gets each key (raw bytes, no escapes) with the
    /// parser at the value's first byte and must consume the value.
    #[inline]
    fn members(&mut self, mut f: impl FnMut(&mut Self, &'a [u8]) -> R<()>) -> R<()> {
        self.expect(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            let key = self.key()?;
            self.ws();
            self.expect(b':')?;
            self.ws();
            f(self, key)?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(Fallback),
            }
        }
    }

    /// A key: its raw bytes. Keys with escapes or non-ASCII bytes go to serde (which
    /// decodes and validates them before matching field names).
    #[inline]
    fn key(&mut self) -> R<&'a [u8]> {
        self.expect(b'"')?;
        let s = self.i;
        let e = find_string_special(self.b, s);
        if self.b.get(e) != Some(&b'"') {
            return Err(Fallback);
        }
        let k = &self.b[s..e];
        if !k.is_ascii() {
            return Err(Fallback);
        }
        self.i = e + 1;
        Ok(k)
    }

    #[inline]
    fn literal(&mut self, lit: &[u8]) -> R<()> {
        if self.b[self.i..].starts_with(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(Fallback)
        }
    }

    /// A string without escapes, borrowed and UTF-8 checked.
    #[inline]
    fn str(&mut self) -> R<&'a str> {
        self.expect(b'"')?;
        let s = self.i;
        let e = find_string_special(self.b, s);
        if self.b.get(e) != Some(&b'"') {
            return Err(Fallback);
        }
        self.i = e + 1;
        std::str::from_utf8(&self.b[s..e]).map_err(|_| Fallback)
    }

    #[inline]
    fn number(&mut self) -> R<Number> {
        let (n, end) = numbers::number(self.b, self.i)?;
        self.i = end;
        Ok(n)
    }

    #[inline]
    fn skip_number(&mut self) -> R<()> {
        self.i = numbers::skip_number(self.b, self.i)?;
        Ok(())
    }

    /// Skip one value, validating it like serde's `IgnoredAny`.
    fn skip_value(&mut self, depth: u32) -> R<()> {
        match self.peek() {
            Some(b'"') => self.skip_str(),
            Some(b'{') => {
                if depth >= MAX_DEPTH {
                    return Err(Fallback);
                }
                self.i += 1;
                self.ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    if self.peek() != Some(b'"') {
                        return Err(Fallback);
                    }
                    self.skip_str()?;
                    self.ws();
                    self.expect(b':')?;
                    self.ws();
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => {
                            self.i += 1;
                            self.ws();
                        }
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(());
                        }
                        _ => return Err(Fallback),
                    }
                }
            }
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return Err(Fallback);
                }
                self.i += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => {
                            self.i += 1;
                            self.ws();
                        }
                        Some(b']') => {
                            self.i += 1;
                            return Ok(());
                        }
                        _ => return Err(Fallback),
                    }
                }
            }
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            _ => self.skip_number(),
        }
    }

    /// Skip a string, checking escapes and control characters (not UTF-8: serde
    /// does not check the strings it ignores either).
    fn skip_str(&mut self) -> R<()> {
        self.i += 1;
        loop {
            let e = find_string_special(self.b, self.i);
            match self.b.get(e) {
                Some(b'"') => {
                    self.i = e + 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.i = e + 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.b.get(self.i + 1..self.i + 5).ok_or(Fallback)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return Err(Fallback);
                            }
                            self.i += 5;
                        }
                        _ => return Err(Fallback),
                    }
                }
                _ => return Err(Fallback),
            }
        }
    }
}

impl<'a> Values<'a> for Parser<'a> {
    #[inline]
    fn null(&mut self) -> R<bool> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    #[inline]
    fn opt_str(&mut self) -> R<Option<Cow<'a, str>>> {
        if self.null()? {
            return Ok(None);
        }
        Ok(Some(Cow::Borrowed(self.str()?)))
    }

    fn opt_raw(&mut self) -> R<Option<&'a str>> {
        if self.null()? {
            return Ok(None);
        }
        let s = self.i;
        self.skip_value(0)?;
        std::str::from_utf8(&self.b[s..self.i])
            .map(Some)
            .map_err(|_| Fallback)
    }

    /// A time in µs as exact nanoseconds ([`Micros`]), from the number's own text.
    fn opt_micros(&mut self) -> R<Option<Micros>> {
        match self.peek() {
            Some(b'n') => {
                self.literal(b"null")?;
                Ok(None)
            }
            Some(b'"') => Ok(Some(Micros::from_text(self.str()?))),
            Some(b't' | b'f') => Err(Fallback),
            _ => {
                let s = self.i;
                self.skip_number()?;
                if let Some(ns) = plain_us_to_ns(&self.b[s..self.i]) {
                    return Ok(Some(Micros(Some(ns))));
                }
                let t = std::str::from_utf8(&self.b[s..self.i]).map_err(|_| Fallback)?;
                Ok(Some(Micros::from_text(t)))
            }
        }
    }

    fn opt_num(&mut self) -> R<Option<Num>> {
        use serde::de::Visitor;
        let v: Option<f64> = match self.peek() {
            Some(b'n') => {
                self.literal(b"null")?;
                return Ok(None);
            }
            Some(b'"') => {
                let s = self.str()?;
                NumVisitor
                    .visit_str::<serde::de::value::Error>(s)
                    .map_err(|_| Fallback)?
            }
            Some(b't') => {
                self.literal(b"true")?;
                Some(1.0)
            }
            Some(b'f') => {
                self.literal(b"false")?;
                Some(0.0)
            }
            _ => Some(match self.number()? {
                Number::U64(v) => v as f64,
                Number::I64(v) => v as f64,
                Number::F64(v) => v,
            }),
        };
        Ok(Some(match v {
            Some(v) => Num(v),
            None => Num(f64::NAN),
        }))
    }

    fn opt_id(&mut self) -> R<Option<Id>> {
        match self.peek() {
            Some(b'n') => {
                self.literal(b"null")?;
                Ok(None)
            }
            Some(b'"') => {
                let s = self.str()?;
                Ok(Some(
                    s.trim().parse::<i64>().map(Id::Int).unwrap_or(Id::Label),
                ))
            }
            _ => Ok(Some(Id::Int(match self.number()? {
                Number::U64(v) => v as i64,
                Number::I64(v) => v,
                Number::F64(v) => v as i64,
            }))),
        }
    }

    #[inline]
    fn skip(&mut self) -> R<()> {
        self.skip_value(0)
    }

    fn args(&mut self, a: &mut RawArgs<'a>) -> R<()> {
        let mut seen = 0u64;
        self.members(|p, key| args_field(p, key, a, &mut seen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain path against an independent exact reference: the decimal text split
    /// and read as i128 (half-up rounding past the third decimal).
    #[test]
    fn plain_micros_are_exact() {
        fn reference(c: &str) -> Option<i64> {
            let (neg, body) = c.strip_prefix('-').map_or((false, c), |b| (true, b));
            let (int, frac) = body.split_once('.').unwrap_or((body, ""));
            let padded = format!("{frac:0<4}");
            let mut ns = int.parse::<i128>().ok()? * 1000 + padded[..3].parse::<i128>().ok()?;
            ns += i128::from(padded.as_bytes()[3] >= b'5');
            i64::try_from(if neg { -ns } else { ns }).ok()
        }
        let cases = [
            "0",
            "-0",
            "7",
            "-7",
            "0.5",
            "-0.0005",
            "1712195495519689.125",
            "1712195495519689.1255",
            "1712195495519689.1254999",
            "9999999999999999.9999",
            "9223372036854775",
            "9223372036854776",
            "12345678901234567",
            "-12.5",
            "75.851852",
            "3.1",
            "3.12",
            "1e5",
            "1.5E-3",
        ];
        for c in cases {
            let plain = plain_us_to_ns(c.as_bytes());
            if plain.is_some() {
                assert_eq!(plain, reference(c), "{c}");
            } else {
                let int = c.trim_start_matches('-').split('.').next().unwrap_or("");
                assert!(c.contains(['e', 'E']) || int.len() >= 16, "{c} fell back");
            }
        }
    }
}

#[cfg(test)]
mod agree_with_serde {
    use super::super::scan;
    use super::super::tests::TRACE;
    use super::*;

    /// Every element of the array starting at `pos`, as (start, end).
    fn elements(buf: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let Some(at) = memchr::memmem::find(buf, b"\"traceEvents\"") else {
            return out;
        };
        let Some(open) = buf[at..].iter().position(|&c| c == b'[') else {
            return out;
        };
        let _ = scan::array_elements(buf, at + open, &mut out);
        out
    }

    /// Where the fast path accepts an event, serde accepts it too and builds the
    /// same thing, ending at the same byte; on the test trace and on variants of
    /// each event with one byte deleted, doubled or replaced.
    #[test]
    fn fast_path_agrees_with_serde() {
        let buf = TRACE.as_bytes();
        let mut fast = 0;
        let mut variants = 0;
        for (s, e) in elements(buf) {
            let ev = &buf[s..e];
            let mut cases = vec![ev.to_vec()];
            for i in 0..ev.len() {
                let mut del = ev.to_vec();
                del.remove(i);
                let mut dup = ev.to_vec();
                dup.insert(i, ev[i]);
                cases.push(del);
                cases.push(dup);
                for c in [b'"', b'\\', b'0', b'-', b'.', b'e', b'\n', b'}', 0xff, 0x01] {
                    let mut rep = ev.to_vec();
                    rep[i] = c;
                    cases.push(rep);
                }
            }
            for case in cases {
                variants += 1;
                let ours = if case.first() == Some(&b'{') {
                    parse_event(&case, 0).ok()
                } else {
                    None
                };
                let Some((ours, end)) = ours else {
                    continue;
                };
                fast += 1;
                let theirs_end =
                    scan::value_end(&case, 0).expect("the fast path read a whole value");
                assert_eq!(end, theirs_end, "{}", String::from_utf8_lossy(&case));
                let theirs: RawEvent = serde_json::from_slice(&case[..end]).unwrap_or_else(|e| {
                    panic!(
                        "serde refuses what the fast path took ({e}): {}",
                        String::from_utf8_lossy(&case)
                    )
                });
                assert_eq!(
                    format!("{ours:?}"),
                    format!("{theirs:?}"),
                    "{}",
                    String::from_utf8_lossy(&case)
                );
            }
        }
        assert!(
            fast > variants / 4,
            "the fast path took {fast} of {variants}"
        );
    }
}
