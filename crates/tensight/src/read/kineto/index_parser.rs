//! Stage two of the index parser: one event read from the token stream.
//!
//! Input: the trace's bytes and a [`Window`] of the token stream whose first token is
//! an event's `{`. Output: the same borrowed [`RawEvent`] that [`super::event_parser`]
//! (and so serde) builds from that event, the offset just past its `}`, and how many
//! tokens it used; or [`Miss::More`] when the event runs past the window. It walks
//! tokens, not bytes: a string ends at the last quote before the next token, white
//! space between tokens is never looked at, and a skipped string costs one token
//! whatever its length. It checks the grammar between tokens
//! (members, commas, colons, brackets), number grammar, literals, and that nothing
//! follows a scalar but white space or a token; the index says whether any string of
//! the event holds an escape or a control character, and which bytes are not ASCII.
//!
//! It answers [`Fallback`] for everything else, and the caller gives the event to the
//! byte-at-a-time parser, which decides (and hands what it does not handle to serde):
//! escapes anywhere in the event, numbers with more than 18 digits or an exponent
//! where a number is kept, non-ASCII keys, nesting deeper than 64, repeated fields, and
//! anything invalid. So an event it accepts reads exactly as it did before.

use super::event_parser::MAX_DEPTH;
use super::fields::{args_field, event_field, Fallback, Values, R};
use super::numbers::{self, Number};
use super::raw::{plain_us_to_ns, Id, Micros, Num, NumVisitor, RawArgs, RawEvent};
use super::structural::Window;
use std::borrow::Cow;

/// Bytes that may follow a scalar: white space, a structural character or a quote.
/// Anything else continues it (`12ab`, `nullx`), which makes it invalid.
const ENDS_SCALAR: [bool; 256] = {
    let mut t = [false; 256];
    let ends = b" \t\n\r,:[]{}\"";
    let mut i = 0;
    while i < ends.len() {
        t[ends[i] as usize] = true;
        i += 1;
    }
    t
};

/// Why the index parser did not read an event.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Miss {
    /// The event runs past the window: index more and try again.
    More,
    /// Not an ordinary event: the byte-at-a-time parser decides.
    Fallback,
}

/// Read the event whose `{` is the window's first token into `ev` (which must be
/// `RawEvent::default()`). Returns the offset just past its `}` and the number of
/// tokens it used; on a miss, `ev` holds a partial event.
#[inline]
pub(super) fn parse_event_into<'a>(
    w: &Window<'_>,
    buf: &'a [u8],
    ev: &mut RawEvent<'a>,
) -> Result<(usize, usize), Miss> {
    let mut p = Parser {
        b: buf,
        base: w.base,
        toks: w.toks,
        at: 0,
        w,
        v: 0,
        short: false,
    };
    let miss = |p: &Parser| if p.short { Miss::More } else { Miss::Fallback };
    let open = match p.tok() {
        Ok(o) if buf[o] == b'{' => o,
        _ => return Err(miss(&p)),
    };
    let mut seen = 0u32;
    let end = match p.members(|p, key| event_field(p, key, ev, &mut seen)) {
        Ok(e) => e,
        Err(Fallback) => return Err(miss(&p)),
    };
    if !w.clean(open, end) {
        return Err(Miss::Fallback);
    }
    Ok((end, p.at))
}

struct Parser<'a, 'w> {
    b: &'a [u8],
    base: usize,
    toks: &'w [u32],
    /// Next token.
    at: usize,
    w: &'w Window<'w>,
    /// Offset of the current value's first byte (a token).
    v: usize,
    /// The window ran out of tokens.
    short: bool,
}

impl<'a> Parser<'a, '_> {
    /// The next token's offset.
    #[inline]
    fn tok(&mut self) -> R<usize> {
        let p = self.peek()?;
        self.at += 1;
        Ok(p)
    }

    /// The next token's offset, not consumed.
    #[inline]
    fn peek(&mut self) -> R<usize> {
        match self.toks.get(self.at) {
            Some(&t) => Ok(self.base + t as usize),
            None => {
                self.short = true;
                Err(Fallback)
            }
        }
    }

    /// The byte at a token's offset (always inside the buffer).
    #[inline]
    fn at(&self, i: usize) -> u8 {
        self.b[i]
    }

    /// The closing quote of the string before the token at `next`: the last byte
    /// before it that is not white space (nothing but white space may follow a
    /// string's closing quote before the next token, or that would be a token).
    #[inline]
    fn close_quote(&self, next: usize) -> usize {
        let mut e = next - 1;
        while matches!(self.b[e], b' ' | b'\n' | b'\r' | b'\t') {
            e -= 1;
        }
        debug_assert_eq!(self.b[e], b'"');
        e
    }

    /// Walk the members of an object whose `{` was the last token: `f` gets each key
    /// with `v` at the value's first token and must consume the value. Returns the
    /// offset past the `}`.
    #[inline]
    fn members(&mut self, mut f: impl FnMut(&mut Self, &'a [u8]) -> R<()>) -> R<usize> {
        let mut k = self.tok()?;
        if self.at(k) == b'}' {
            return Ok(k + 1);
        }
        loop {
            if self.at(k) != b'"' {
                return Err(Fallback);
            }
            let colon = self.tok()?;
            if self.at(colon) != b':' {
                return Err(Fallback);
            }
            let close = self.close_quote(colon);
            // Keys with non-ASCII bytes go to serde, which decodes and validates them
            // before matching field names.
            if !self.w.ascii(k + 1, close) {
                return Err(Fallback);
            }
            let key = &self.b[k + 1..close];
            self.v = self.tok()?;
            f(self, key)?;
            let sep = self.tok()?;
            match self.at(sep) {
                b',' => k = self.tok()?,
                b'}' => return Ok(sep + 1),
                _ => return Err(Fallback),
            }
        }
    }

    /// A scalar ended at `e`: the next byte must not continue it.
    #[inline]
    fn scalar_end(&self, e: usize) -> R<usize> {
        match self.b.get(e) {
            Some(&c) if ENDS_SCALAR[c as usize] => Ok(e),
            _ => Err(Fallback),
        }
    }

    /// The literal `lit` at `v`; the offset past it.
    #[inline]
    fn literal(&self, lit: &[u8]) -> R<usize> {
        if self.b[self.v..].starts_with(lit) {
            self.scalar_end(self.v + lit.len())
        } else {
            Err(Fallback)
        }
    }

    /// `buf[s..e]` as text: no check when the index saw no byte ≥ 0x80 there.
    #[inline]
    fn text(&self, s: usize, e: usize) -> R<&'a str> {
        let bytes = &self.b[s..e];
        if self.w.ascii(s, e) {
            debug_assert!(bytes.is_ascii());
            // SAFETY: the index found no byte >= 0x80 in this range, so it is ASCII,
            // which is valid UTF-8.
            Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
        } else {
            std::str::from_utf8(bytes).map_err(|_| Fallback)
        }
    }

    /// The string at `v`, which ends before the next token.
    #[inline]
    fn str(&mut self) -> R<&'a str> {
        if self.at(self.v) != b'"' {
            return Err(Fallback);
        }
        let next = self.peek()?;
        let close = self.close_quote(next);
        self.text(self.v + 1, close)
    }

    /// The number at `v`, checked to end there.
    #[inline]
    fn number(&mut self) -> R<Number> {
        let (n, e) = numbers::number(self.b, self.v)?;
        self.scalar_end(e)?;
        Ok(n)
    }

    /// Skip the value at `v`, checking it like serde's `IgnoredAny`; the offset past it.
    fn skip_at(&mut self, v: usize, depth: u32) -> R<usize> {
        match self.at(v) {
            b'"' => {
                let next = self.peek()?;
                Ok(self.close_quote(next) + 1)
            }
            b'{' => {
                if depth >= MAX_DEPTH {
                    return Err(Fallback);
                }
                let mut k = self.tok()?;
                if self.at(k) == b'}' {
                    return Ok(k + 1);
                }
                loop {
                    if self.at(k) != b'"' {
                        return Err(Fallback);
                    }
                    let colon = self.tok()?;
                    if self.at(colon) != b':' {
                        return Err(Fallback);
                    }
                    let value = self.tok()?;
                    self.skip_at(value, depth + 1)?;
                    let sep = self.tok()?;
                    match self.at(sep) {
                        b',' => k = self.tok()?,
                        b'}' => return Ok(sep + 1),
                        _ => return Err(Fallback),
                    }
                }
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return Err(Fallback);
                }
                let mut k = self.tok()?;
                if self.at(k) == b']' {
                    return Ok(k + 1);
                }
                loop {
                    self.skip_at(k, depth + 1)?;
                    let sep = self.tok()?;
                    match self.at(sep) {
                        b',' => k = self.tok()?,
                        b']' => return Ok(sep + 1),
                        _ => return Err(Fallback),
                    }
                }
            }
            b't' | b'f' | b'n' => {
                self.v = v;
                match self.at(v) {
                    b't' => self.literal(b"true"),
                    b'f' => self.literal(b"false"),
                    _ => self.literal(b"null"),
                }
            }
            _ => {
                let e = numbers::skip_number(self.b, v)?;
                self.scalar_end(e)
            }
        }
    }
}

impl<'a> Values<'a> for Parser<'a, '_> {
    #[inline]
    fn null(&mut self) -> R<bool> {
        if self.at(self.v) == b'n' {
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

    fn opt_id(&mut self) -> R<Option<Id>> {
        match self.at(self.v) {
            b'n' => {
                self.literal(b"null")?;
                Ok(None)
            }
            b'"' => {
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
    fn opt_micros(&mut self) -> R<Option<Micros>> {
        match self.at(self.v) {
            b'n' => {
                self.literal(b"null")?;
                Ok(None)
            }
            b'"' => Ok(Some(Micros::from_text(self.str()?))),
            b't' | b'f' => Err(Fallback),
            _ => {
                if let Some((ns, e)) = numbers::plain_micros(self.b, self.v) {
                    self.scalar_end(e)?;
                    return Ok(Some(Micros(Some(ns))));
                }
                let e = self.scalar_end(numbers::skip_number(self.b, self.v)?)?;
                if let Some(ns) = plain_us_to_ns(&self.b[self.v..e]) {
                    return Ok(Some(Micros(Some(ns))));
                }
                let t = std::str::from_utf8(&self.b[self.v..e]).map_err(|_| Fallback)?;
                Ok(Some(Micros::from_text(t)))
            }
        }
    }

    fn opt_num(&mut self) -> R<Option<Num>> {
        use serde::de::Visitor;
        let v: Option<f64> = match self.at(self.v) {
            b'n' => {
                self.literal(b"null")?;
                return Ok(None);
            }
            b'"' => {
                let s = self.str()?;
                NumVisitor
                    .visit_str::<serde::de::value::Error>(s)
                    .map_err(|_| Fallback)?
            }
            b't' => {
                self.literal(b"true")?;
                Some(1.0)
            }
            b'f' => {
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

    fn opt_raw(&mut self) -> R<Option<&'a str>> {
        if self.null()? {
            return Ok(None);
        }
        let s = self.v;
        let e = self.skip_at(s, 0)?;
        self.text(s, e).map(Some)
    }

    #[inline]
    fn skip(&mut self) -> R<()> {
        self.skip_at(self.v, 0).map(|_| ())
    }

    fn args(&mut self, a: &mut RawArgs<'a>) -> R<()> {
        if self.at(self.v) != b'{' {
            return Err(Fallback);
        }
        let mut seen = 0u64;
        self.members(|p, key| args_field(p, key, a, &mut seen))
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::super::event_parser;
    use super::super::scan;
    use super::super::structural::Tokens;
    use super::super::tests::gen;
    use super::*;
    use proptest::prelude::*;

    /// The index parser on `b` (an event at offset 0), growing the window as it asks.
    fn indexed(b: &[u8]) -> Option<(RawEvent<'_>, usize)> {
        let mut t = Tokens::new(b, 0);
        loop {
            let mut ev = RawEvent::default();
            match parse_event_into(&t.window(), b, &mut ev) {
                Ok((end, _)) => return Some((ev, end)),
                Err(Miss::More) if t.more() => continue,
                Err(_) => return None,
            }
        }
    }

    /// The three parsers on one event. Where the index parser takes it, the
    /// byte-at-a-time parser and serde take it too and build the same event, ending
    /// at the same byte. Returns whether the index parser took it.
    fn agree(b: &[u8]) -> Result<bool, TestCaseError> {
        let Some((ours, end)) = indexed(b) else {
            return Ok(false);
        };
        let Ok((bytewise, bend)) = event_parser::parse_event(b, 0) else {
            return Err(TestCaseError::fail(format!(
                "the byte parser refuses what the index took: {}",
                String::from_utf8_lossy(b)
            )));
        };
        prop_assert_eq!(end, bend);
        prop_assert_eq!(format!("{ours:?}"), format!("{bytewise:?}"));
        prop_assert_eq!(scan::value_end(b, 0), Ok(end));
        let theirs: RawEvent = serde_json::from_slice(&b[..end]).map_err(|e| {
            TestCaseError::fail(format!(
                "serde refuses ({e}): {}",
                String::from_utf8_lossy(b)
            ))
        })?;
        prop_assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
        Ok(true)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Generated events: plain, with escapes, unicode, nested args, odd numbers,
        /// repeated fields, cut short or with a byte replaced.
        #[test]
        fn index_parser_agrees_with_bytewise_and_serde(b in gen::event_bytes()) {
            agree(&b)?;
        }

        /// Any value where an event's field goes.
        #[test]
        fn any_value_in_any_field(
            key in prop_oneof![Just("ph"), Just("name"), Just("pid"), Just("ts"),
                Just("args"), Just("other")],
            v in gen::value(4),
        ) {
            agree(format!("{{\"{key}\": {v}, \"cat\": \"cpu_op\"}}").as_bytes())?;
        }
    }

    /// The test trace and every one-byte variant of each event (deleted, doubled,
    /// replaced), as the byte parser's own test does; every variant without a backslash
    /// that the byte parser takes, the index parser takes too.
    #[test]
    fn variants_of_the_test_trace() {
        let buf = super::super::tests::TRACE.as_bytes();
        let mut spans = Vec::new();
        let at = memchr::memmem::find(buf, b"\"traceEvents\"").unwrap_or(0);
        let open = at + buf[at..].iter().position(|&c| c == b'[').unwrap_or(0);
        let _ = scan::array_elements(buf, open, &mut spans);
        // Among variants without a backslash (escapes are the byte parser's), those
        // both parsers take.
        let (mut taken, mut bytewise) = (0, 0);
        for (s, e) in spans {
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
                let took = agree(&case).unwrap_or_else(|e| panic!("{e}"));
                if !case.contains(&b'\\') && event_parser::parse_event(&case, 0).is_ok() {
                    bytewise += 1;
                    taken += usize::from(took);
                }
            }
        }
        assert!(
            taken == bytewise,
            "the index parser took {taken} of the {bytewise} the byte parser took"
        );
    }
}
