//! JSON numbers read straight from their bytes, the way `serde_json` reads them.
//!
//! Input: the trace's bytes and the offset of a number's first byte. Output: the
//! number classified and converted as `serde_json` does without its `float_roundtrip`
//! feature ([`number`]), only its grammar checked ([`skip_number`]), or a time in µs
//! as exact nanoseconds ([`plain_micros`]); each with the offset just past the number.
//! What they do not handle (more than 18 significant digits, exponents, bad grammar)
//! is a [`Fallback`], and the caller leaves the event to the general parser. Both event
//! parsers use these ([`super::event_parser`], [`super::index_parser`]); nothing here
//! knows about events or whitespace.

use super::fields::{Fallback, R};

/// Exact powers of ten (every one up to 1e22 is representable).
const POW10: [f64; 19] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18,
];

/// A JSON number as `serde_json` classifies it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Number {
    U64(u64),
    I64(i64),
    F64(f64),
}

/// How many of the eight bytes at `i` are ASCII digits before the first that is
/// not; `None` when fewer than eight bytes remain (the caller goes byte by byte).
#[inline]
fn leading_digits8(b: &[u8], i: usize) -> Option<usize> {
    let w = u64::from_le_bytes(*b.get(i..)?.first_chunk::<8>()?);
    // Each digit byte becomes its value 0..=9; any other byte becomes 10 or more.
    let y = w ^ 0x3030_3030_3030_3030;
    // Bit 7 of each byte set where the byte is not a digit: its low seven bits reach
    // 10 (adding 0x76 carries into bit 7; no byte overflows into the next), or its
    // own bit 7 is set.
    let not_digit =
        (((y & 0x7f7f_7f7f_7f7f_7f7f) + 0x7676_7676_7676_7676) | y) & 0x8080_8080_8080_8080;
    Some((not_digit.trailing_zeros() / 8) as usize)
}

/// The end of the run of ASCII digits at `i`.
#[inline]
fn digits_end(b: &[u8], mut i: usize) -> usize {
    loop {
        match leading_digits8(b, i) {
            Some(8) => i += 8,
            Some(n) => return i + n,
            None => {
                while let Some(b'0'..=b'9') = b.get(i) {
                    i += 1;
                }
                return i;
            }
        }
    }
}

/// The number at `i`, converted exactly as `serde_json` does: the digits as a u64
/// significand divided by a power of ten. Long numbers and exponents fall back.
/// Returns it and the offset just past it. (Byte by byte: the numbers it converts are
/// short, and eight-at-a-time runs cost more there.)
#[inline]
pub(super) fn number(b: &[u8], mut i: usize) -> R<(Number, usize)> {
    let neg = b.get(i) == Some(&b'-');
    if neg {
        i += 1;
    }
    let mut sig: u64;
    let mut digits = 0u32;
    match b.get(i) {
        Some(b'0') => {
            sig = 0;
            i += 1;
            if let Some(b'0'..=b'9') = b.get(i) {
                return Err(Fallback);
            }
        }
        Some(&c @ b'1'..=b'9') => {
            sig = (c - b'0') as u64;
            digits = 1;
            i += 1;
            while let Some(&c @ b'0'..=b'9') = b.get(i) {
                sig = sig * 10 + (c - b'0') as u64;
                digits += 1;
                i += 1;
                if digits > 18 {
                    return Err(Fallback);
                }
            }
        }
        _ => return Err(Fallback),
    }
    let mut frac = 0usize;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&c @ b'0'..=b'9') = b.get(i) {
            sig = sig * 10 + (c - b'0') as u64;
            frac += 1;
            i += 1;
            if digits as usize + frac > 18 {
                return Err(Fallback);
            }
        }
        if frac == 0 {
            return Err(Fallback);
        }
    }
    if let Some(b'e' | b'E') = b.get(i) {
        return Err(Fallback);
    }
    if frac > 0 {
        let f = sig as f64 / POW10[frac];
        return Ok((Number::F64(if neg { -f } else { f }), i));
    }
    if !neg {
        return Ok((Number::U64(sig), i));
    }
    let n = (sig as i64).wrapping_neg();
    Ok((
        if n >= 0 {
            Number::F64(-(sig as f64))
        } else {
            Number::I64(n)
        },
        i,
    ))
}

/// Skip the number at `i`, checking its grammar (any length); the offset past it.
#[inline]
pub(super) fn skip_number(b: &[u8], mut i: usize) -> R<usize> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => {
            i += 1;
            if let Some(b'0'..=b'9') = b.get(i) {
                return Err(Fallback);
            }
        }
        Some(b'1'..=b'9') => i = digits_end(b, i + 1),
        _ => return Err(Fallback),
    }
    if b.get(i) == Some(&b'.') {
        let s = i + 1;
        i = digits_end(b, s);
        if i == s {
            return Err(Fallback);
        }
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let s = i;
        i = digits_end(b, s);
        if i == s {
            return Err(Fallback);
        }
    }
    Ok(i)
}

/// A time in µs at `i` in the plain form Kineto writes (`-?digits(.digits)?`, at most
/// 16 integer digits, no exponent), as exact nanoseconds: what
/// [`super::raw::plain_us_to_ns`] gives for the same text, read in the same pass
/// that checks the grammar. `None` for any other text, valid or not: the caller then
/// checks it with [`skip_number`] and converts it the general way.
#[inline]
pub(super) fn plain_micros(b: &[u8], mut i: usize) -> Option<(i64, usize)> {
    let neg = b.get(i) == Some(&b'-');
    if neg {
        i += 1;
    }
    let s = i;
    let mut int: i64 = 0;
    while let Some(&c @ b'0'..=b'9') = b.get(i) {
        int = int * 10 + (c - b'0') as i64;
        i += 1;
        if i - s > 16 {
            return None;
        }
    }
    // No digits, or a leading zero followed by more (not JSON).
    if i == s || (b[s] == b'0' && i - s > 1) {
        return None;
    }
    let mut ns = int.checked_mul(1000)?;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let f = i;
        let mut scale = 100;
        while let Some(&d @ b'0'..=b'9') = b.get(i) {
            let k = i - f;
            if k < 3 {
                ns += (d - b'0') as i64 * scale;
                scale /= 10;
            } else if k == 3 && d >= b'5' {
                ns += 1;
            }
            i += 1;
        }
        if i == f {
            return None;
        }
    }
    if let Some(b'e' | b'E') = b.get(i) {
        return None;
    }
    Some((if neg { -ns } else { ns }, i))
}

#[cfg(test)]
mod tests {
    use super::super::raw::plain_us_to_ns;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numbers_match_serde() {
        let cases = [
            "0",
            "-0",
            "7",
            "-7",
            "4458676522709.059",
            "1711964646000000000",
            "0.000123",
            "-12.5",
            "75.851852",
            "123456789012345678",
            "9223372036854775807",
        ];
        for c in cases {
            let ours = number(c.as_bytes(), 0).map(|(n, _)| n);
            let theirs: serde_json::Number = serde_json::from_str(c).unwrap();
            match ours {
                Ok(Number::U64(v)) => assert_eq!(Some(v), theirs.as_u64(), "{c}"),
                Ok(Number::I64(v)) => assert_eq!(Some(v), theirs.as_i64(), "{c}"),
                Ok(Number::F64(v)) => {
                    assert!(theirs.is_f64(), "{c}");
                    assert_eq!(v.to_bits(), theirs.as_f64().unwrap().to_bits(), "{c}")
                }
                Err(Fallback) => assert!(c.len() > 18, "{c} fell back"),
            }
        }
        for bad in ["01", "1.", "-", "+1", ".5", "1e5"] {
            assert_eq!(number(bad.as_bytes(), 0), Err(Fallback), "{bad}");
        }
    }

    proptest! {
        /// The eight-at-a-time digit runs are the byte loop's, at every offset.
        #[test]
        fn digit_runs_match_a_byte_loop(s in "[0-9]{0,30}[^0-9]?[0-9]{0,10}") {
            let b = s.as_bytes();
            for i in 0..=b.len() {
                let run = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                prop_assert_eq!(digits_end(b, i), i + run);
            }
        }

        /// Numbers as serde reads them (or a fallback for what it reads otherwise).
        #[test]
        fn numbers_are_serdes(s in "-?(0|[1-9][0-9]{0,19})(\\.[0-9]{1,20})?([eE][0-9])?[,} ]?") {
            let b = s.as_bytes();
            if let Ok((n, e)) = number(b, 0) {
                let theirs: serde_json::Number = serde_json::from_slice(&b[..e]).unwrap();
                match n {
                    Number::U64(v) => prop_assert_eq!(Some(v), theirs.as_u64()),
                    Number::I64(v) => prop_assert_eq!(Some(v), theirs.as_i64()),
                    Number::F64(v) => prop_assert_eq!(Some(v.to_bits()), theirs.as_f64().map(f64::to_bits)),
                }
                prop_assert_eq!(skip_number(b, 0), Ok(e));
            }
        }

        /// The one-pass reading of a plain time is the two-pass one: the grammar of
        /// [`skip_number`], then [`plain_us_to_ns`] on the number's text.
        #[test]
        fn plain_micros_is_skip_then_convert(s in "-?[0-9]{0,19}(\\.[0-9]{0,6})?([eE][-+]?[0-9]{0,2})?[,} x.]?") {
            let b = s.as_bytes();
            let two = skip_number(b, 0).ok().and_then(|e| Some((plain_us_to_ns(&b[..e])?, e)));
            if let Some(one) = plain_micros(b, 0) {
                prop_assert_eq!(Some(one), two, "{}", s);
            } else if let Some((_, e)) = two {
                // Declined only where the plain path is not the whole story: long or
                // exponent numbers (converted the general way by the caller).
                let int = s.trim_start_matches('-').split(['.', 'e', 'E']).next().unwrap_or("");
                prop_assert!(int.len() > 15 || s[..e].contains(['e', 'E']), "{}", s);
            }
        }
    }
}
