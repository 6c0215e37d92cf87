//! Cutting the event array into blocks, parsed in parallel.
//!
//! Input: the trace's bytes and the offset of the event array's `[`. Output: one
//! [`Chunk`] per block, in file order, each with its lists sorted, and where the array
//! ended (or where the input was cut short). The result is the one a sequential pass
//! gives, whatever the blocks' guessed starts were ([`read_event_array`]). One
//! element's bytes go to [`super::event_parser`] (or serde) and then to
//! [`super::to_model`]; this file only schedules and checks.

use super::chunk::Chunk;
use super::event_parser;
use super::index_parser::{self, Miss};
use super::intern::{Interner, SharedNames};
use super::raw::RawEvent;
use super::scan::{self, Truncated};
use super::structural::Tokens;
use super::to_model::add_event;
use crate::model::CounterSeverity;
use rayon::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The next element starts here, at or past the run's limit.
    Next(usize),
    /// The array closed; the offset just past its `]`.
    End(usize),
    /// The input ended (or broke) inside the value at this offset.
    Truncated(usize),
}

/// Which parser reads the events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Parse {
    /// The structural index ([`super::structural`], [`super::index_parser`]), then
    /// the byte-at-a-time parser for what it leaves.
    Indexed,
    /// The byte-at-a-time parser only (tests compare the two).
    #[cfg_attr(not(test), allow(dead_code))]
    Bytewise,
}

/// What one block's task produced.
struct Block {
    chunk: Chunk,
    /// Where its run began (`None`: no element start found in the block).
    start: Option<usize>,
    stop: Stop,
}

/// Read the elements of the event array at `pos` (at `[`) into chunks, in file order.
///
/// The array is cut into blocks of `block_bytes`, parsed in parallel. Block 0
/// starts at the first element; every other block guesses where its first element
/// starts (see [`element_start`]) and parses every element that starts before the
/// next block. The guesses are then checked in file order: a block is kept only if it
/// began exactly where the previous block's last element ended, else it is parsed
/// again from there. The result is the same as one sequential pass (the rule below)
/// whatever the guesses were; they only decide how much runs in parallel.
///
/// The sequential rule (what [`scan::array_elements`] does): elements separated by
/// commas (a trailing comma before `]` is tolerated); an element that does not parse
/// is counted and skipped by bracket matching; the input ending inside an element, or
/// anything but `,` / `]` after one, stops the read as truncated there.
pub(super) fn read_event_array(
    buf: &[u8],
    pos: usize,
    release: &(dyn Fn(usize, usize) + Sync),
    block_bytes: usize,
    parse: Parse,
    names: &SharedNames,
) -> (Vec<Chunk>, Result<usize, Truncated>) {
    let first = scan::skip_ws(buf, pos + 1);
    if buf.get(first) == Some(&b']') {
        return (Vec::new(), Ok(first + 1));
    }
    let n_blocks = (buf.len().saturating_sub(first) / block_bytes).max(1);
    let limit = |k: usize| {
        if k + 1 >= n_blocks {
            usize::MAX
        } else {
            first + (k + 1) * block_bytes
        }
    };
    let blocks: Vec<Block> = (0..n_blocks)
        .into_par_iter()
        .map(|k| {
            let from = first + k * block_bytes;
            let start = if k == 0 {
                Some(first)
            } else {
                element_start(buf, from, limit(k))
            };
            let mut chunk = Chunk::default();
            let stop = match start {
                Some(s) => run_elements(buf, s, limit(k), parse, &mut chunk, names),
                None => Stop::Next(usize::MAX),
            };
            chunk.sort_lists();
            release(from, limit(k).min(buf.len()));
            Block { chunk, start, stop }
        })
        .collect();

    let mut chunks = Vec::with_capacity(blocks.len());
    let mut stop = Stop::Next(first);
    for (k, block) in blocks.into_iter().enumerate() {
        let Stop::Next(next) = stop else {
            break; // the array ended in an earlier block; later guesses are not events
        };
        if next >= limit(k) {
            continue; // an element spanning this whole block: nothing starts here
        }
        if block.start == Some(next) {
            chunks.push(block.chunk);
            stop = block.stop;
        } else {
            drop(block);
            let mut chunk = Chunk::default();
            stop = run_elements(buf, next, limit(k), parse, &mut chunk, names);
            chunk.sort_lists();
            chunks.push(chunk);
        }
    }
    let end = match stop {
        Stop::End(e) => Ok(e),
        Stop::Truncated(at) => Err(Truncated(at)),
        Stop::Next(at) => Err(Truncated(at)), // unreachable: the last limit is usize::MAX
    };
    (chunks, end)
}

/// Guess where the first element starting at or after `from` begins (before `limit`).
///
/// A raw newline cannot occur inside a JSON string, so just after one we know we
/// are outside strings; from there strings are skipped properly, and the first `{`
/// whose previous non-space byte is `,` or `[` is taken: in Kineto's layout only an
/// event starts that way (nested objects follow a `:`). Minified input without
/// newlines gets no guess, and is read sequentially.
fn element_start(buf: &[u8], from: usize, limit: usize) -> Option<usize> {
    let end = limit.min(buf.len());
    let back = from.saturating_sub(256);
    if back >= end {
        return None;
    }
    let mut i = back + memchr::memchr(b'\n', &buf[back..end])? + 1;
    while i < end {
        let at = i + memchr::memchr2(b'"', b'{', &buf[i..end])?;
        if buf[at] == b'"' {
            i = scan::string_end(buf, at).ok()?;
            continue;
        }
        if at >= from {
            let before = buf[..at]
                .iter()
                .rposition(|c| !matches!(c, b' ' | b'\n' | b'\r' | b'\t'));
            if let Some(b) = before {
                if matches!(buf[b], b',' | b'[') {
                    return Some(at);
                }
            }
        }
        i = at + 1;
    }
    None
}

/// The sequential rule over elements from `i` (an element start) while elements start
/// before `limit`. Elements are found through the structural index ([`Tokens`]): the
/// token after an element is the first byte past it that is not white space.
fn run_elements(
    buf: &[u8],
    mut i: usize,
    limit: usize,
    parse: Parse,
    c: &mut Chunk,
    shared: &SharedNames,
) -> Stop {
    let mut names = Interner::new(shared);
    let mut tokens = Tokens::new(buf, i);
    loop {
        if i >= limit {
            return Stop::Next(i);
        }
        let end = match parse_element(buf, i, &mut tokens, parse, c, &mut names) {
            Ok(e) => e,
            Err(Truncated(at)) => return Stop::Truncated(at),
        };
        // The next token is the first byte past the element that is not white space.
        debug_assert_eq!(
            tokens.peek().unwrap_or(buf.len()),
            scan::skip_ws(buf, end),
            "element ending at {end}"
        );
        match tokens.next() {
            Some(comma) if buf[comma] == b',' => match tokens.peek() {
                // Tolerate a trailing comma before the closing bracket.
                Some(close) if buf[close] == b']' => return Stop::End(close + 1),
                Some(next) => i = next,
                None => i = buf.len(),
            },
            Some(close) if buf[close] == b']' => return Stop::End(close + 1),
            Some(other) => return Stop::Truncated(other),
            None => return Stop::Truncated(buf.len()),
        }
    }
}

/// Parse the element at `start` (the next token) into `c`; returns the offset past
/// it. The index parser reads ordinary events; anything else goes to the
/// byte-at-a-time parser, then (cut by bracket matching) to serde, which decides (and
/// may count it as unparseable), and the index restarts past the element.
fn parse_element<'a>(
    buf: &'a [u8],
    start: usize,
    tokens: &mut Tokens<'a>,
    parse: Parse,
    c: &mut Chunk,
    names: &mut Interner<'a, '_>,
) -> Result<usize, Truncated> {
    if parse == Parse::Indexed && buf.get(start) == Some(&b'{') {
        loop {
            let mut ev = RawEvent::default();
            match index_parser::parse_event_into(&tokens.window(), buf, &mut ev) {
                Ok((end, used)) => {
                    tokens.consume(used);
                    c.elements += 1;
                    add_event(&ev, c, names);
                    return Ok(end);
                }
                Err(Miss::More) if tokens.more() => continue,
                Err(_) => break,
            }
        }
    }
    let end = parse_element_bytewise(buf, start, c, names)?;
    tokens.restart(end);
    Ok(end)
}

/// [`parse_element`] without the index: the byte-at-a-time parser, then serde.
fn parse_element_bytewise<'a>(
    buf: &'a [u8],
    start: usize,
    c: &mut Chunk,
    names: &mut Interner<'a, '_>,
) -> Result<usize, Truncated> {
    if buf.get(start) == Some(&b'{') {
        let mut ev = RawEvent::default();
        if let Ok(end) = event_parser::parse_event_into(buf, start, &mut ev) {
            c.elements += 1;
            add_event(&ev, c, names);
            return Ok(end);
        }
    }
    let end = scan::value_end(buf, start)?;
    c.elements += 1;
    match serde_json::from_slice::<RawEvent>(&buf[start..end]) {
        Ok(ev) => add_event(&ev, c, names),
        Err(_) => c.counters.add(
            "unparseable_event",
            CounterSeverity::DataLoss,
            "events that are not valid JSON objects of the Chrome trace format; skipped",
            1,
        ),
    }
    Ok(end)
}
