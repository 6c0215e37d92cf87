//! Stage one of the index parser: where the tokens are, found 64 bytes at a time.
//!
//! Input: the trace's bytes and an offset known to lie outside strings (an element's
//! start). Output, one window of a few KB at a time as the parser asks for more
//! ([`Tokens::next`]): the offset of every token start outside strings — the
//! structural characters `{ } [ ] : ,`, every unescaped quote (opening and closing:
//! the token after an opening quote is its closing quote), and the first byte of every
//! other run of bytes that are neither space nor structural (a number, a literal, or
//! junk) — and two lists of anomalies: backslashes and control characters inside
//! strings ([`Tokens::clean_until`]), and bytes ≥ 0x80 ([`Tokens::ascii`]).
//!
//! Each 64-byte chunk is classified into bitmasks (AVX2 when the CPU has it, else a
//! table per byte), then in-string bits come from a prefix XOR of the quote bits, with
//! escaped quotes removed first; state carries from chunk to chunk. This file checks
//! nothing: the grammar between tokens is [`super::index_parser`]'s job, and where an
//! anomaly lies the element is left to the byte-at-a-time parser. After such an
//! element the stream is restarted past it ([`Tokens::restart`]), since what a
//! tolerant parser skipped need not pair its quotes the way this index does.

/// Bytes indexed per window once the stream runs freely.
const WINDOW: usize = 16 << 10;
/// The first window after a start or restart; each fill doubles it up to [`WINDOW`].
/// A restart follows an element the byte-at-a-time parser read, and the next element
/// may be one too: small first windows keep the indexing it throws away small.
const FIRST_WINDOW: usize = 512;
/// Token offsets are `u32` from the window's base: a window never spans more.
const MAX_SPAN: usize = u32::MAX as usize - 2 * WINDOW;

// Byte classes of the nibble tables and the scalar table.
const SPACE: u8 = 1; // ' '
const WS_CTL: u8 = 1 << 1; // '\t' '\n' '\r'
const COMMA: u8 = 1 << 2;
const COLON: u8 = 1 << 3;
const BRACKET: u8 = 1 << 4; // { } [ ]
const QUOTE: u8 = 1 << 5;
// Scalar table only.
const SUSPECT: u8 = 1 << 6; // below 0x20, 0x80 and above, or a backslash

const OP: u8 = COMMA | COLON | BRACKET;

/// Every byte's classes, for the scalar path.
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            b' ' => SPACE,
            b'\t' | b'\n' | b'\r' => WS_CTL | SUSPECT,
            b',' => COMMA,
            b':' => COLON,
            b'{' | b'}' | b'[' | b']' => BRACKET,
            b'"' => QUOTE,
            b'\\' | 0..=0x1f | 0x80..=0xff => SUSPECT,
            _ => 0,
        };
        b += 1;
    }
    t
};

/// The classes of one 64-byte chunk, one bit per byte (bit i: byte i).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Classes {
    /// `{ } [ ] : ,`
    op: u64,
    /// Structural, white space or a quote: every byte that is not part of a scalar
    /// (outside strings).
    sow: u64,
    quote: u64,
    /// Below 0x20 (white space included), 0x80 and above, or a backslash: the bytes
    /// [`Tokens`] looks at one by one when they are not white space.
    suspect: u64,
}

/// The classes of 64 bytes, one at a time.
fn classes_scalar(chunk: &[u8; 64]) -> Classes {
    let mut c = Classes::default();
    for (i, &b) in chunk.iter().enumerate() {
        let k = CLASS[b as usize];
        let bit = |m: u8| u64::from(k & m != 0) << i;
        c.op |= bit(OP);
        c.sow |= bit(!SUSPECT);
        c.quote |= bit(QUOTE);
        c.suspect |= bit(SUSPECT);
    }
    c
}

/// The classes of the 64 bytes at `p`, 32 at a time: structural characters, white
/// space and quotes from two 16-entry tables looked up by each byte's low and high
/// nibble (a byte is in a class when both lookups have the class's bit), the rest by
/// comparison.
///
/// # Safety
/// The CPU must have AVX2, and `p..p + 64` must be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn classes_avx2(p: *const u8) -> Classes {
    use std::arch::x86_64::*;
    const S: i8 = SPACE as i8;
    const W: i8 = WS_CTL as i8;
    const CM: i8 = COMMA as i8;
    const CL: i8 = COLON as i8;
    const B: i8 = BRACKET as i8;
    const Q: i8 = QUOTE as i8;
    // By low nibble: 0 ' ', 2 '"', 9 '\t', a '\n' ':', b '[' '{', c ',', d '\r' ']' '}'.
    #[rustfmt::skip]
    let lo_tab = _mm256_setr_epi8(
        S, 0, Q, 0, 0, 0, 0, 0, 0, W, W | CL, B, CM, W | B, 0, 0,
        S, 0, Q, 0, 0, 0, 0, 0, 0, W, W | CL, B, CM, W | B, 0, 0,
    );
    // By high nibble: 0 controls, 2 ' ' '"' ',', 3 ':', 5 '[' ']', 7 '{' '}'.
    #[rustfmt::skip]
    let hi_tab = _mm256_setr_epi8(
        W, 0, S | CM | Q, CL, 0, B, 0, B, 0, 0, 0, 0, 0, 0, 0, 0,
        W, 0, S | CM | Q, CL, 0, B, 0, B, 0, 0, 0, 0, 0, 0, 0, 0,
    );
    let nibble = _mm256_set1_epi8(0x0f);
    let op_bits = _mm256_set1_epi8(OP as i8);
    let zero = _mm256_setzero_si256();
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let space = _mm256_set1_epi8(0x20);
    let mut c = Classes::default();
    for half in 0..2 {
        // SAFETY: the caller guarantees 64 readable bytes at p; unaligned loads are fine.
        let v = unsafe { _mm256_loadu_si256(p.add(32 * half) as *const __m256i) };
        let lo = _mm256_shuffle_epi8(lo_tab, _mm256_and_si256(v, nibble));
        let hi = _mm256_shuffle_epi8(hi_tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
        let class = _mm256_and_si256(lo, hi);
        let shift = 32 * half;
        // One bit per byte, placed in this half's 32 bits.
        macro_rules! mask {
            ($m:expr) => {
                u64::from(_mm256_movemask_epi8($m) as u32) << shift
            };
        }
        let half_bits = 0xffff_ffffu64 << shift;
        c.op |= !mask!(_mm256_cmpeq_epi8(_mm256_and_si256(class, op_bits), zero)) & half_bits;
        c.sow |= !mask!(_mm256_cmpeq_epi8(class, zero)) & half_bits;
        c.quote |= mask!(_mm256_cmpeq_epi8(v, quote));
        // Signed, bytes of 0x80 and above are negative: below 0x20 as well.
        let low_or_high = _mm256_cmpgt_epi8(space, v);
        c.suspect |= mask!(_mm256_or_si256(
            low_or_high,
            _mm256_cmpeq_epi8(v, backslash)
        ));
    }
    c
}

/// XOR of every bit with all the bits below it: 1 from an opening quote up to (not
/// including) its closing quote.
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// The bytes escaped by a backslash: each one after an odd run of backslashes.
/// `carry` says the chunk's first byte is escaped, and is set when its last byte
/// escapes the next chunk's first. Backslashes are rare: a loop over them.
fn escaped(backslash: u64, carry: &mut bool) -> u64 {
    let mut escaped = u64::from(*carry);
    *carry = false;
    // An escaped backslash escapes nothing.
    let mut bs = backslash & !escaped;
    while bs != 0 {
        let i = bs.trailing_zeros();
        bs &= bs - 1;
        if i == 63 {
            *carry = true;
        } else {
            let next = 1u64 << (i + 1);
            escaped |= next;
            bs &= !next;
        }
    }
    escaped
}

/// What carries from one chunk to the next.
#[derive(Clone, Copy, Default)]
struct Carry {
    /// All ones when the previous chunk ended inside a string.
    in_string: u64,
    /// The next chunk's first byte is escaped.
    escaped: bool,
    /// The previous chunk ended in a run of scalar bytes.
    other: bool,
}

/// The bytes of a chunk that are neither white space, structural, nor plain ASCII
/// text: backslashes, bytes ≥ 0x80 and other control characters, sorted by kind.
#[cold]
fn odd_bytes(chunk: &[u8; 64], mut weird: u64) -> (u64, u64, u64) {
    let (mut backslash, mut high, mut ctrl) = (0, 0, 0);
    while weird != 0 {
        let i = weird.trailing_zeros();
        let bit = 1u64 << i;
        weird &= weird - 1;
        match chunk[i as usize] {
            b'\\' => backslash |= bit,
            0x80.. => high |= bit,
            _ => ctrl |= bit,
        }
    }
    (backslash, high, ctrl)
}

/// One chunk's tokens (bit per token start) and anomalies, with the carried state.
#[derive(Clone, Copy)]
struct ChunkOut {
    tokens: u64,
    hard: u64,
    high: u64,
}

/// Tokens and anomalies of a chunk from its classes (`bytes` for the rare bytes).
#[inline(always)]
fn chunk_bits(c: Classes, bytes: &[u8; 64], carry: &mut Carry) -> ChunkOut {
    // Suspect bytes other than white space: backslash, other controls, non-ASCII.
    let weird = c.suspect & !c.sow;
    let (mut quotes, mut hard, mut high) = (c.quote, 0, 0);
    if weird != 0 || carry.escaped {
        let (backslash, h, ctrl) = odd_bytes(bytes, weird);
        quotes &= !escaped(backslash, &mut carry.escaped);
        // A backslash anywhere, and controls (outside strings too: those are junk).
        hard = backslash | ctrl;
        high = h;
    }
    let in_string = prefix_xor(quotes) ^ carry.in_string;
    carry.in_string = ((in_string as i64) >> 63) as u64;
    // Tab, newline, carriage return inside a string.
    hard |= c.suspect & c.sow & in_string;
    let other = !(c.sow | in_string);
    let starts = other & !((other << 1) | u64::from(carry.other));
    carry.other = other >> 63 != 0;
    // Opening quotes only (the in-string bit is set on them, not on closing ones).
    let tokens = (c.op & !in_string) | (quotes & in_string) | starts;
    ChunkOut { tokens, hard, high }
}

/// Write the offsets `off + i` of the bits of `tokens` at `dst[0..]`: four at a time,
/// so up to three more slots are written than there are bits.
#[inline(always)]
fn flatten(dst: &mut [u32; 64 + 3], tokens: u64, off: u32) -> usize {
    let n = tokens.count_ones() as usize;
    let mut bits = tokens;
    let mut k = 0;
    while k < n {
        for _ in 0..4 {
            dst[k] = off + bits.trailing_zeros();
            bits &= bits.wrapping_sub(1);
            k += 1;
        }
    }
    n
}

/// Push `at + i` for every bit i of `bits`.
fn push_bits(out: &mut Vec<usize>, mut bits: u64, at: usize) {
    while bits != 0 {
        out.push(at + bits.trailing_zeros() as usize);
        bits &= bits - 1;
    }
}

/// The indexed tokens from the stream's cursor to the end of the indexed window, for
/// the parser to walk without touching the stream ([`Tokens::window`]).
pub(super) struct Window<'w> {
    /// Offset that token offsets are relative to.
    pub(super) base: usize,
    /// Token offsets, relative to `base`.
    pub(super) toks: &'w [u32],
    /// Backslashes, controls in strings and junk controls, absolute and in order
    /// (only from the window's start: earlier ones are gone).
    pub(super) hard: &'w [usize],
    /// Bytes ≥ 0x80, absolute and in order (likewise).
    pub(super) high: &'w [usize],
}

impl Window<'_> {
    /// No hard anomaly in `s..e`.
    #[inline]
    pub(super) fn clean(&self, s: usize, e: usize) -> bool {
        none_in(self.hard, s, e)
    }

    /// `s..e` is all ASCII.
    #[inline]
    pub(super) fn ascii(&self, s: usize, e: usize) -> bool {
        none_in(self.high, s, e)
    }
}

/// No element of the sorted `list` in `s..e`.
#[inline]
fn none_in(list: &[usize], s: usize, e: usize) -> bool {
    if list.is_empty() {
        return true;
    }
    let k = list.partition_point(|&a| a < s);
    match list.get(k) {
        Some(&a) => a >= e,
        None => true,
    }
}

/// The token stream of a buffer from a start offset, indexed window by window.
pub(super) struct Tokens<'a> {
    buf: &'a [u8],
    /// Token offsets relative to `base`; the first `len` are valid, the rest is room
    /// for the next chunk's writes.
    toks: Vec<u32>,
    len: usize,
    /// Next token to hand out.
    at: usize,
    base: usize,
    /// First byte not indexed yet.
    next: usize,
    carry: Carry,
    window: usize,
    hard: Vec<usize>,
    high: Vec<usize>,
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
}

impl<'a> Tokens<'a> {
    /// The tokens of `buf` from `start`, which must lie outside strings.
    pub(super) fn new(buf: &'a [u8], start: usize) -> Self {
        Tokens {
            buf,
            toks: Vec::new(),
            len: 0,
            at: 0,
            base: start,
            next: start,
            carry: Carry::default(),
            window: FIRST_WINDOW,
            hard: Vec::new(),
            high: Vec::new(),
            #[cfg(target_arch = "x86_64")]
            avx2: std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("popcnt")
                && std::is_x86_feature_detected!("bmi1"),
        }
    }

    /// [`Tokens::new`] that never uses SIMD (tests compare the two).
    #[cfg(test)]
    pub(super) fn scalar(buf: &'a [u8], start: usize) -> Self {
        #[allow(unused_mut)]
        let mut t = Tokens::new(buf, start);
        #[cfg(target_arch = "x86_64")]
        {
            t.avx2 = false;
        }
        t
    }

    /// Forget everything indexed and start again at `start` (outside strings).
    pub(super) fn restart(&mut self, start: usize) {
        self.len = 0;
        self.at = 0;
        self.base = start;
        self.next = start;
        self.carry = Carry::default();
        self.window = FIRST_WINDOW;
        self.hard.clear();
        self.high.clear();
    }

    /// The offset of the next token (consumed), or `None` at the end of the buffer.
    #[inline]
    pub(super) fn next(&mut self) -> Option<usize> {
        let p = self.peek()?;
        self.at += 1;
        Some(p)
    }

    /// The offset of the next token, not consumed.
    #[inline]
    pub(super) fn peek(&mut self) -> Option<usize> {
        if self.at == self.len && !self.more() {
            return None;
        }
        Some(self.base + self.toks[self.at] as usize)
    }

    /// The tokens indexed from the cursor on.
    #[inline]
    pub(super) fn window(&self) -> Window<'_> {
        Window {
            base: self.base,
            toks: &self.toks[self.at..self.len],
            hard: &self.hard,
            high: &self.high,
        }
    }

    /// Hand out `n` tokens of [`Tokens::window`].
    #[inline]
    pub(super) fn consume(&mut self, n: usize) {
        self.at += n;
    }

    /// Index another window, keeping the tokens not handed out yet; false when the
    /// buffer holds no more tokens (or the kept ones span too much).
    #[cold]
    pub(super) fn more(&mut self) -> bool {
        // Keep the unconsumed tokens, moved to the front and made relative to the
        // first of them; anomalies before it no longer matter.
        let new_base = match self.toks[self.at..self.len].first() {
            Some(&t) => self.base + t as usize,
            None => self.next,
        };
        let shift = (new_base - self.base) as u32;
        self.toks.copy_within(self.at..self.len, 0);
        self.len -= self.at;
        self.at = 0;
        for t in &mut self.toks[..self.len] {
            *t -= shift;
        }
        self.base = new_base;
        let keep = self.hard.partition_point(|&a| a < new_base);
        self.hard.drain(..keep);
        let keep = self.high.partition_point(|&a| a < new_base);
        self.high.drain(..keep);
        while self.next < self.buf.len() {
            if self.next - self.base > MAX_SPAN {
                return false;
            }
            let end = self.buf.len().min(self.next + self.window);
            self.window = (self.window * 2).min(WINDOW);
            // At most one token per byte, and room for the last chunk's writes.
            let room = self.len + (end - self.next) + 64 + 3;
            if self.toks.len() < room {
                self.toks.resize(room, 0);
            }
            let before = self.len;
            #[cfg(target_arch = "x86_64")]
            if self.avx2 {
                // SAFETY: AVX2, POPCNT and BMI1 were detected at run time.
                unsafe { self.index_avx2(end) };
            } else {
                self.index_scalar(end);
            }
            #[cfg(not(target_arch = "x86_64"))]
            self.index_scalar(end);
            if self.len > before {
                return true;
            }
        }
        false
    }

    /// Index the chunks from `next` to `end` with AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2, POPCNT and BMI1.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt,bmi1")]
    unsafe fn index_avx2(&mut self, end: usize) {
        let buf = self.buf;
        let mut carry = self.carry;
        let mut next = self.next;
        let mut len = self.len;
        let base = self.base;
        while next < end {
            let pad;
            let whole = buf
                .get(next..next + 64)
                .and_then(|c| <&[u8; 64]>::try_from(c).ok());
            let chunk = match whole {
                Some(c) if next + 64 <= end => c,
                _ => {
                    pad = padded(buf, next, end);
                    &pad
                }
            };
            // SAFETY: AVX2 is present (the caller's contract); the chunk has 64 bytes.
            let c = unsafe { classes_avx2(chunk.as_ptr()) };
            let out = chunk_bits(c, chunk, &mut carry);
            let Some(dst) = self.toks[len..].first_chunk_mut::<67>() else {
                unreachable!("more() makes room for every chunk of a window")
            };
            len += flatten(dst, out.tokens, (next - base) as u32);
            if out.hard | out.high != 0 {
                push_bits(&mut self.hard, out.hard, next);
                push_bits(&mut self.high, out.high, next);
            }
            next += 64;
        }
        self.carry = carry;
        self.next = next;
        self.len = len;
    }

    /// Index the chunks from `next` to `end` one byte at a time.
    fn index_scalar(&mut self, end: usize) {
        while self.next < end {
            let chunk = if self.next + 64 <= end {
                let mut a = [0u8; 64];
                a.copy_from_slice(&self.buf[self.next..self.next + 64]);
                a
            } else {
                padded(self.buf, self.next, end)
            };
            let c = classes_scalar(&chunk);
            let out = chunk_bits(c, &chunk, &mut self.carry);
            let len = self.len;
            let Some(dst) = self.toks[len..].first_chunk_mut::<67>() else {
                unreachable!("more() makes room for every chunk of a window")
            };
            self.len += flatten(dst, out.tokens, (self.next - self.base) as u32);
            push_bits(&mut self.hard, out.hard, self.next);
            push_bits(&mut self.high, out.high, self.next);
            self.next += 64;
        }
    }
}

/// The bytes of `buf` from `from` to `end` (fewer than 64), padded with spaces.
fn padded(buf: &[u8], from: usize, end: usize) -> [u8; 64] {
    let mut a = [b' '; 64];
    let tail = &buf[from..end];
    a[..tail.len()].copy_from_slice(tail);
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Indexed = (Vec<usize>, Vec<usize>, Vec<usize>);

    /// Tokens, hard anomalies and high bytes by a byte-at-a-time reading of the
    /// rules in the module doc.
    fn reference(b: &[u8], start: usize) -> Indexed {
        let (mut toks, mut hard, mut high) = (Vec::new(), Vec::new(), Vec::new());
        let (mut in_string, mut escape_next, mut prev_other) = (false, false, false);
        for (i, &c) in b.iter().enumerate().skip(start) {
            let escaped = escape_next;
            escape_next = !escaped && c == b'\\';
            let quote = c == b'"' && !escaped;
            if quote {
                in_string = !in_string;
            }
            // The opening quote counts as inside, the closing one as outside.
            let inside = in_string;
            let op = matches!(c, b'{' | b'}' | b'[' | b']' | b':' | b',');
            let ws = matches!(c, b' ' | b'\t' | b'\n' | b'\r');
            let other = !op && !ws && c != b'"' && !inside;
            if (op && !inside) || (quote && inside) || (other && !prev_other) {
                toks.push(i);
            }
            prev_other = other;
            if c == b'\\' || (c < 0x20 && (!ws || inside)) {
                hard.push(i);
            }
            if c >= 0x80 {
                high.push(i);
            }
        }
        (toks, hard, high)
    }

    /// Everything a stream hands out, window by window.
    fn indexed(mut t: Tokens) -> Indexed {
        let (mut toks, mut hard, mut high) = (Vec::new(), Vec::new(), Vec::<usize>::new());
        let add = |out: &mut Vec<usize>, new: &[usize]| {
            let last = out.last().copied();
            out.extend(new.iter().filter(|&&a| last.is_none_or(|l| a > l)));
        };
        loop {
            let w = t.window();
            toks.extend(w.toks.iter().map(|&k| w.base + k as usize));
            add(&mut hard, w.hard);
            add(&mut high, w.high);
            let n = w.toks.len();
            t.consume(n);
            if !t.more() {
                // Anomalies after the last token (in no element) are still listed.
                add(&mut hard, &t.hard);
                add(&mut high, &t.high);
                return (toks, hard, high);
            }
        }
    }

    #[test]
    fn nibble_tables_classify_every_byte() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            for first in (0..256).step_by(64) {
                let mut chunk = [0u8; 64];
                for (i, b) in chunk.iter_mut().enumerate() {
                    *b = (first + i) as u8;
                }
                // SAFETY: AVX2 detected; the array has 64 bytes.
                let simd = unsafe { classes_avx2(chunk.as_ptr()) };
                assert_eq!(simd, classes_scalar(&chunk), "bytes from {first}");
            }
        }
    }

    #[test]
    fn escapes_and_strings() {
        let b = br#"{"a\"b": "c\\", "d": [1, tru, -2.5e3], "\\\"": 0}"#;
        assert_eq!(indexed(Tokens::new(b, 0)), reference(b, 0));
        let (toks, hard, _) = reference(b, 0);
        // { "a\"b : "c\\ , "d : [ 1 , tru , -2.5e3 ] , "\\\" : 0 }
        assert_eq!(toks.len(), 19);
        assert_eq!(hard.len(), 6);
    }

    fn json_ish() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"\"".to_vec()),
            Just(b"\\".to_vec()),
            Just(b"\\\\".to_vec()),
            Just(b"\\\"".to_vec()),
            Just(b"{\"k\": ".to_vec()),
            Just(b"[1, 2.5, -3e4]".to_vec()),
            Just(b"true".to_vec()),
            Just(b" \n\t\r".to_vec()),
            Just(b",:}]".to_vec()),
            Just("é€😀".as_bytes().to_vec()),
            Just(vec![0x01, 0x1f, 0x7f, 0xff]),
            "[a-z0-9 ]{0,70}".prop_map(String::into_bytes),
        ];
        proptest::collection::vec(piece, 0..60).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// SIMD and scalar indexing agree with the byte-at-a-time reference, from any
        /// start, across window and chunk edges.
        #[test]
        fn index_matches_the_reference(b in json_ish(), start in 0usize..40) {
            let start = start.min(b.len());
            let want = reference(&b, start);
            prop_assert_eq!(&indexed(Tokens::new(&b, start)), &want);
            prop_assert_eq!(&indexed(Tokens::scalar(&b, start)), &want);
        }

        /// A restart is a new stream from that offset; tokens kept across a refill
        /// keep their offsets.
        #[test]
        fn restart_is_a_fresh_start(b in json_ish(), cut in 0usize..2000, keep in 0usize..9) {
            let cut = cut.min(b.len());
            let mut t = Tokens::new(&b, 0);
            for _ in 0..7 {
                t.next();
            }
            t.restart(cut);
            let mut first = Vec::new();
            for _ in 0..keep {
                first.extend(t.next());
            }
            let (mut toks, hard, high) = indexed(t);
            first.append(&mut toks);
            let (want, want_hard, want_high) = reference(&b, cut);
            prop_assert_eq!(first, want);
            // Anomalies before the tokens handed out one by one may be gone.
            prop_assert!(want_hard.ends_with(&hard) && want_high.ends_with(&high));
        }
    }

    #[test]
    fn long_inputs_cross_windows() {
        let mut b = Vec::new();
        for i in 0..3000 {
            b.extend_from_slice(
                format!("{{\"name\": \"k{i}\\\"x\", \"ts\": {i}.5}},\n").as_bytes(),
            );
        }
        assert_eq!(indexed(Tokens::new(&b, 0)), reference(&b, 0));
        assert_eq!(indexed(Tokens::scalar(&b, 0)), reference(&b, 0));
    }
}
