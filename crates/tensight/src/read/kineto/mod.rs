//! Kineto (PyTorch profiler) Chrome-trace JSON reader.
//!
//! Input: the bytes of a trace (`{"traceEvents": [...], "deviceProperties": ...}` or a
//! bare event array). Output: an unfinished [`Profile`] whose lists are already in the
//! order [`crate::model::finish`] sorts them in (it then sorts nothing, and links).
//!
//! The top-level object is walked with the tokenizer in [`super::scan`]. The event
//! array is cut into blocks of a few MB parsed in parallel, each guessing where its
//! first event starts; the guesses are checked in file order, so the result is the one
//! a sequential pass gives ([`blocks`]). Events are read in two stages, in the manner
//! of simdjson: a structural index finds every token outside strings 64 bytes at a
//! time ([`structural`]), and a parser walks those tokens into borrowed structs
//! holding only the fields diagnosis needs ([`index_parser`], [`raw`]). An event the
//! index parser does not handle (escapes, odd numbers, anything invalid) goes to the
//! byte-at-a-time parser ([`event_parser`]), which hands what it does not handle to
//! serde, which decides: each path accepts only what serde accepts, with the same
//! values. Each event becomes a model struct in its block's [`chunk::Chunk`]
//! ([`to_model`], where every field of the trace is mapped), with names interned once
//! per read ([`intern`]). Each block sorts its lists; they are merged into the profile ([`merge`]: stable, so equal
//! keys keep file order). No document tree is ever built, and the bytes of parsed
//! blocks can be dropped from memory as the read goes ([`read_releasing`]). Events
//! that cannot be used are counted in [`ImportCounters`](crate::model::ImportCounters),
//! never silently dropped. A trace cut short keeps every whole event before the cut
//! and reports the byte offset.
//!
//! Files, one job each: [`blocks`] (cutting the event array into blocks, parsed in
//! parallel), [`structural`] (the token index), [`index_parser`] (one event's tokens
//! to a [`raw::RawEvent`]), [`event_parser`] (the same from bytes), [`fields`] (the
//! key table both use), [`numbers`] (JSON numbers as serde reads them), [`raw`]
//! (those borrowed event types and their number conversions), [`intern`] (names and
//! kept strings), [`to_model`] (a raw event to model structs), [`chunk`] (one block's
//! lists, sorted), [`merge`] (the blocks' lists into the profile), [`top_level`] (the
//! fields around `traceEvents`).

mod blocks;
mod chunk;
mod event_parser;
mod fields;
mod index_parser;
mod intern;
mod merge;
mod numbers;
mod raw;
mod structural;
#[cfg(test)]
mod tests;
mod to_model;
mod top_level;

use super::scan::{self, Truncated};
use crate::model::{CounterSeverity, Profile};
use blocks::Parse;
use chunk::Chunk;
use intern::SharedNames;

/// The category of the events tensight writes into an annotated trace
/// (`analyze --format perfetto`); the reader counts them as `tensight_event` and skips
/// them, so an annotated trace diagnoses like the original.
pub const TENSIGHT_CATEGORY: &str = "tensight";

/// Input bytes per parallel work item.
const BLOCK_BYTES: usize = 4 << 20;

/// Why a buffer could not be read as a Kineto trace at all.
#[derive(Debug)]
pub enum NotATrace {
    /// The first byte is not `{` or `[`.
    NotJson,
    /// An object without `traceEvents`; the keys seen are listed.
    NoTraceEvents(Vec<String>),
    /// A PyTorch execution trace (has `nodes` and `schema`).
    ExecutionTrace(String),
    /// Broken before any event could be found.
    Broken(usize),
}

/// Read a Kineto trace from `buf`. `warnings` receives human-readable notes
/// (truncation) that the caller shows on stderr and in the report.
pub fn read(
    buf: &[u8],
    profile: &mut Profile,
    warnings: &mut Vec<String>,
) -> Result<(), NotATrace> {
    read_releasing(buf, &|_, _| {}, profile, warnings)
}

/// [`read`], calling `release(start, end)` once the bytes in that range have been
/// parsed (the caller may drop them from memory: [`super::source::Bytes::release`]).
/// Bytes may still be read again after their release (rarely: a block whose start was
/// guessed wrong, the top-level fields after the events), so releasing must not
/// destroy them.
pub fn read_releasing(
    buf: &[u8],
    release: &(dyn Fn(usize, usize) + Sync),
    profile: &mut Profile,
    warnings: &mut Vec<String>,
) -> Result<(), NotATrace> {
    read_blocks(buf, release, BLOCK_BYTES, Parse::Indexed, profile, warnings)
}

/// [`read_releasing`] with blocks of `block_bytes` (tests use tiny blocks), events read
/// by `parse`.
fn read_blocks(
    buf: &[u8],
    release: &(dyn Fn(usize, usize) + Sync),
    block_bytes: usize,
    parse: Parse,
    profile: &mut Profile,
    warnings: &mut Vec<String>,
) -> Result<(), NotATrace> {
    let start = scan::skip_ws(buf, 0);
    let names = SharedNames::default();
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut top: Vec<(String, &[u8])> = Vec::new();
    let mut truncated: Option<usize> = None;
    match buf.get(start) {
        Some(b'[') => {
            let (c, end) =
                blocks::read_event_array(buf, start, release, block_bytes, parse, &names);
            chunks.extend(c);
            if let Err(Truncated(at)) = end {
                truncated = Some(at);
            }
        }
        Some(b'{') => {
            let mut saw_events = false;
            let mut keys = Vec::new();
            let walked = scan::walk_object(buf, start, |m| {
                let key = String::from_utf8_lossy(m.key).into_owned();
                if key == "traceEvents" && buf.get(m.start) == Some(&b'[') {
                    saw_events = true;
                    keys.push(key);
                    let (c, end) =
                        blocks::read_event_array(buf, m.start, release, block_bytes, parse, &names);
                    chunks.extend(c);
                    return Some(end);
                }
                let end = scan::value_end(buf, m.start);
                if let Ok(end) = end {
                    top.push((key.clone(), &buf[m.start..end]));
                }
                keys.push(key);
                Some(end)
            });
            if let Err(Truncated(at)) = walked {
                truncated = Some(at);
            }
            if !saw_events {
                if keys.iter().any(|k| k == "nodes") && keys.iter().any(|k| k == "schema") {
                    let schema = top
                        .iter()
                        .find(|(k, _)| k == "schema")
                        .and_then(|(_, v)| serde_json::from_slice::<String>(v).ok())
                        .unwrap_or_default();
                    return Err(NotATrace::ExecutionTrace(schema));
                }
                if let Some(at) = truncated {
                    if keys.is_empty() {
                        return Err(NotATrace::Broken(at));
                    }
                }
                return Err(NotATrace::NoTraceEvents(keys));
            }
        }
        _ => return Err(NotATrace::NotJson),
    }
    if let Some(at) = truncated {
        let n_events_before_cut: usize = chunks.iter().map(|c| c.elements).sum();
        warnings.push(format!(
            "the trace is truncated at byte {at} of {}: read the {} whole events before it",
            buf.len(),
            n_events_before_cut
        ));
        profile.counters.add(
            "truncated_trace",
            CounterSeverity::DataLoss,
            "the trace ends mid-way (profiler killed while writing?); events after the cut are missing",
            1,
        );
    }
    top_level::read_top_level(&top, profile);

    merge::into_profile(chunks, profile, warnings);
    Ok(())
}
