//! Annotated trace: the original Kineto trace with tensight's findings added as events,
//! for ui.perfetto.dev and chrome://tracing (Chrome trace-event JSON).
//!
//! Input: a [`Report`] and the bytes of the trace it was read from (plain JSON or gzip;
//! for a bundle, its `files.trace`). Output: JSON written to a [`Write`] as it goes.
//!
//! **Every original event is kept** because the original bytes are copied through, not
//! re-emitted from the model: the model keeps only what diagnosis needs (no flow
//! events, no counters, only some `args`), so re-emitting would lose what Perfetto
//! shows. The trace's top-level object is copied byte for byte, with one member
//! inserted first (`"tensight": {"annotation_version", "tensight_version", "input",
//! "findings"}`, ignored by trace viewers; it marks the file as tensight's output) and
//! tensight's events appended at the end of its `traceEvents` array. A bare event array
//! (`[...]`, which the reader also accepts) is wrapped in `{"traceEvents": [...]}`. An
//! annotated trace annotated again loses its earlier annotation (header and events), so
//! tracks are never doubled.
//!
//! The added events all have `"cat": "tensight"` ([`TENSIGHT_CATEGORY`]), so tensight's
//! reader counts them (`tensight_event`) and skips them: an annotated trace loads back
//! with the same model, hence the same diagnosis (for a bare trace; a bundle's
//! annotated trace is its timed steps' trace only, without the manifest's timing, the
//! detail step, the execution trace and the hardware pass). They live in one added
//! process, "tensight findings", under an unused pid:
//!
//! - track `steps`: an `X` slice per analysed step (args: wall time, GPU busy, kernels,
//!   GPU idle by cause);
//! - track `GPU idle by cause`: an `X` slice per idle gap inside the steps, named by its
//!   main cause (`idle: sync`, `idle: cpu`, `idle: transfer`, `idle: data_loader`, so
//!   each cause gets its own colour in Perfetto; chrome://tracing gets a `cname`), with
//!   the breakdown in args;
//! - one track per finding, largest saving first (`#1 S001 Host sync inside the step`):
//!   per step, an `X` slice from the first to the last op or kernel the finding names
//!   in that step (the whole step when it names none that the trace holds), args: code,
//!   rule, title, severity, estimated saving, estimate, message, fixes (coloured by
//!   severity in chrome://tracing);
//! - an instant event (`i`, thread scope) on each op's and kernel's own track at every
//!   occurrence a finding names (at most [`MAX_MARKS`] per finding);
//! - flow arrows (`s` in the finding's slice, `f` with `bp: "e"` at the op or kernel)
//!   from each step's finding slice to the first occurrences it names in that step (at
//!   most [`MAX_FLOWS_PER_STEP`] per step).
//!
//! Kernels are placed on `pid` = device, `tid` = stream, where Kineto writes them.

use super::Report;
use crate::error::{Error, Result};
use crate::read::kineto::TENSIGHT_CATEGORY;
use crate::read::scan;
use crate::rules::Finding;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// Version of the `tensight` member and of the events' layout described above.
pub const ANNOTATION_VERSION: &str = "1.0";

/// Most instant events marking one finding's ops and kernels.
pub const MAX_MARKS: usize = 2000;

/// Most flow arrows from one finding's slice in one step.
pub const MAX_FLOWS_PER_STEP: usize = 16;

/// First flow id: far above Kineto's correlation ids, below 2^53 (exact in JavaScript).
const FLOW_ID_BASE: u64 = 0x7e5_0000_0000;

/// Write the annotated trace of `report` read from the trace file `trace` (plain or
/// gzip) to `out`.
pub fn write_file(report: &Report, trace: &Path, out: &mut dyn Write) -> Result<()> {
    let (bytes, info) = crate::read::source::open(trace)?;
    if let Some(e) = info.gzip_truncated {
        return Err(Error::new(format!(
            "failed to annotate {}: the gzip stream ends early ({e})",
            crate::text::shown(&trace.display().to_string())
        )));
    }
    write_json(report, &bytes, out)
}

/// [`write_file`] for trace bytes held in memory (plain JSON or gzip).
pub fn write_bytes(report: &Report, bytes: &[u8], out: &mut dyn Write) -> Result<()> {
    match crate::read::gunzipped("trace", bytes) {
        Some(inflated) => write_json(report, &inflated?, out),
        None => write_json(report, bytes, out),
    }
}

/// Write the annotated trace from the original trace's JSON text `json`.
pub fn write_json(report: &Report, json: &[u8], out: &mut dyn Write) -> Result<()> {
    let io = |e: std::io::Error| Error::new(format!("failed to write the annotated trace: {e}"));
    let broken = |at: usize| {
        Error::new(format!(
            "failed to annotate {}: its JSON ends early or is broken at byte {at}",
            crate::text::shown(&report.input)
        ))
        .with_hint("annotate a trace that `tensight analyze` reads whole (no truncation warning)")
    };
    let start = scan::skip_ws(json, 0);
    let header = header(report);
    let events = events(report);
    match json.get(start) {
        Some(b'{') => {
            let array = events_array(json, start).map_err(|scan::Truncated(at)| broken(at))?;
            let Some((open, close)) = array else {
                return Err(Error::new(format!(
                    "failed to annotate {}: no \"traceEvents\" array",
                    crate::text::shown(&report.input)
                )));
            };
            out.write_all(b"{").map_err(io)?;
            out.write_all(header.as_bytes()).map_err(io)?;
            out.write_all(b",").map_err(io)?;
            match earlier_annotation(json, start) {
                // An annotated trace annotated again: its earlier header and events
                // are left out, so the tracks are not doubled.
                Some(rest) => {
                    out.write_all(&json[rest..open + 1]).map_err(io)?;
                    let kept = copy_without_ours(json, open, close, out).map_err(io)?;
                    write_events(out, &events, kept).map_err(io)?;
                }
                None => {
                    out.write_all(&json[start + 1..close]).map_err(io)?;
                    write_events(out, &events, has_elements(json, open, close)).map_err(io)?;
                }
            }
            out.write_all(&json[close..]).map_err(io)?;
        }
        Some(b'[') => {
            let end = scan::value_end(json, start).map_err(|scan::Truncated(at)| broken(at))?;
            let close = end - 1;
            out.write_all(b"{").map_err(io)?;
            out.write_all(header.as_bytes()).map_err(io)?;
            out.write_all(b",\"traceEvents\":").map_err(io)?;
            out.write_all(&json[start..close]).map_err(io)?;
            write_events(out, &events, has_elements(json, start, close)).map_err(io)?;
            out.write_all(b"]}\n").map_err(io)?;
        }
        _ => {
            return Err(Error::new(format!(
                "failed to annotate {}: not JSON",
                crate::text::shown(&report.input)
            )))
        }
    }
    out.flush().map_err(io)
}

/// The `tensight` member written first in the top-level object.
fn header(r: &Report) -> String {
    let v = json!({
        "annotation_version": ANNOTATION_VERSION,
        "tensight_version": env!("CARGO_PKG_VERSION"),
        "input": r.input,
        "findings": r.diagnosis.findings.len(),
    });
    format!("\"tensight\": {v}")
}

/// Offsets of the `[` and `]` of the top-level `traceEvents` array.
fn events_array(
    json: &[u8],
    start: usize,
) -> std::result::Result<Option<(usize, usize)>, scan::Truncated> {
    let mut found = None;
    scan::walk_object(json, start, |m| {
        if m.key == b"traceEvents" && json.get(m.start) == Some(&b'[') {
            let end = scan::value_end(json, m.start);
            if let Ok(e) = end {
                found = Some((m.start, e - 1));
            }
            return Some(end);
        }
        None
    })?;
    Ok(found)
}

/// When the object at `start` opens with an earlier annotation's `"tensight"` member
/// (this writer's output), the offset of the member after it.
fn earlier_annotation(json: &[u8], start: usize) -> Option<usize> {
    let key = scan::skip_ws(json, start + 1);
    let rest = json.get(key..)?;
    if !rest.starts_with(b"\"tensight\"") {
        return None;
    }
    let colon = scan::skip_ws(json, key + "\"tensight\"".len());
    if json.get(colon) != Some(&b':') {
        return None;
    }
    let end = scan::value_end(json, scan::skip_ws(json, colon + 1)).ok()?;
    let comma = scan::skip_ws(json, end);
    (json.get(comma) == Some(&b',')).then(|| scan::skip_ws(json, comma + 1))
}

/// One of the events this writer adds (it writes them all with this opening).
fn is_ours(event: &[u8]) -> bool {
    let head = &event[..event.len().min(48)];
    head.starts_with(b"{\"ph\": \"")
        && memchr::memmem::find(head, b"\"cat\": \"tensight\"").is_some()
}

/// Copy the elements of the array between `open` and `close` that are not ours, comma
/// separated; returns whether any was written.
fn copy_without_ours(
    json: &[u8],
    open: usize,
    close: usize,
    out: &mut dyn Write,
) -> std::io::Result<bool> {
    let mut wrote = false;
    let mut i = scan::skip_ws(json, open + 1);
    while i < close {
        let Ok(end) = scan::value_end(json, i) else {
            break;
        };
        let end = end.min(close);
        if !is_ours(&json[i..end]) {
            out.write_all(if wrote { b",\n" } else { b"\n" })?;
            out.write_all(&json[i..end])?;
            wrote = true;
        }
        i = scan::skip_ws(json, end);
        if json.get(i) == Some(&b',') {
            i = scan::skip_ws(json, i + 1);
        }
    }
    Ok(wrote)
}

/// Whether ours, appended before `close`, need a comma: the array opened at `open` holds
/// an element and does not end with a comma already (the reader tolerates one).
fn has_elements(json: &[u8], open: usize, close: usize) -> bool {
    let i = scan::skip_ws(json, open + 1);
    let last = json[open + 1..close]
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
        .map(|k| json[open + 1 + k]);
    i < close && json[i] != b']' && last != Some(b',')
}

fn write_events(out: &mut dyn Write, events: &[String], after: bool) -> std::io::Result<()> {
    let mut first = !after;
    for e in events {
        if first {
            out.write_all(b"\n")?;
        } else {
            out.write_all(b",\n")?;
        }
        first = false;
        out.write_all(e.as_bytes())?;
    }
    if !events.is_empty() {
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// `ns` as Kineto's microseconds with three decimals, exactly (no float rounding).
fn us(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

/// One trace event as JSON text. `extra` is raw JSON members (`"s": "t"`), or empty.
#[allow(clippy::too_many_arguments)]
fn event(
    ph: &str,
    name: &str,
    pid: i64,
    tid: i64,
    ts_ns: i64,
    dur_ns: Option<i64>,
    extra: &str,
    args: Option<&Value>,
) -> String {
    let mut s = format!(
        "{{\"ph\": \"{ph}\", \"cat\": \"{TENSIGHT_CATEGORY}\", \"name\": {}, \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}",
        Value::from(name),
        us(ts_ns)
    );
    if let Some(d) = dur_ns {
        s.push_str(&format!(", \"dur\": {}", us(d.max(0))));
    }
    if !extra.is_empty() {
        s.push_str(", ");
        s.push_str(extra);
    }
    if let Some(a) = args {
        s.push_str(&format!(", \"args\": {a}"));
    }
    s.push('}');
    s
}

fn metadata(kind: &str, pid: i64, tid: i64, value: Value) -> String {
    let key = if kind.ends_with("sort_index") {
        "sort_index"
    } else {
        "name"
    };
    format!(
        "{{\"ph\": \"M\", \"cat\": \"{TENSIGHT_CATEGORY}\", \"name\": \"{kind}\", \"pid\": {pid}, \"tid\": {tid}, \"args\": {{\"{key}\": {value}}}}}"
    )
}

/// Where one occurrence of something a finding names ran: track and time.
#[derive(Clone, Copy)]
struct Place {
    pid: i64,
    tid: i64,
    ts_ns: i64,
    end_ns: i64,
}

const STEPS_TID: i64 = 1;
const IDLE_TID: i64 = 2;
const FIRST_FINDING_TID: i64 = 10;

/// Every event tensight adds, in order: metadata, steps, idle gaps, then per finding.
fn events(r: &Report) -> Vec<String> {
    let p = &r.profile;
    let m = &r.metrics;
    let pid = p
        .ops
        .iter()
        .map(|o| o.pid)
        .chain(p.runtime.iter().map(|o| o.pid))
        .chain(p.gpu.iter().map(|g| g.device))
        .chain(p.processes.iter().map(|x| x.pid))
        .chain(p.threads.iter().map(|x| x.pid))
        .max()
        .unwrap_or(0)
        .max(0)
        + 1;
    let ms = |ns: i64| ns as f64 / 1e6;
    let mut ev = vec![
        metadata("process_name", pid, 0, json!("tensight findings")),
        metadata("process_sort_index", pid, 0, json!(-1)),
        metadata("thread_name", pid, STEPS_TID, json!("steps")),
        metadata("thread_sort_index", pid, STEPS_TID, json!(0)),
        metadata("thread_name", pid, IDLE_TID, json!("GPU idle by cause")),
        metadata("thread_sort_index", pid, IDLE_TID, json!(1)),
    ];
    let idle_args = |i: &crate::analysis::IdleBreakdown| {
        json!({"total_ms": ms(i.total_ns), "cpu_ms": ms(i.cpu_ns), "sync_ms": ms(i.sync_ns),
               "transfer_ms": ms(i.transfer_ns), "data_loader_ms": ms(i.data_loader_ns)})
    };
    for st in &m.timeline.steps {
        let args = json!({
            "dur_ms": ms(st.dur_ns),
            "gpu_busy_ms": ms(st.gpu_busy_ns),
            "gpu_busy_pct": if st.dur_ns > 0 { 100.0 * st.gpu_busy_ns as f64 / st.dur_ns as f64 } else { 0.0 },
            "kernels": st.kernels,
            "gpu_idle": idle_args(&st.idle),
        });
        ev.push(event(
            "X",
            &st.name,
            pid,
            STEPS_TID,
            st.start_ns,
            Some(st.dur_ns),
            "",
            Some(&args),
        ));
    }
    for (i, &(a, b)) in m.timeline.idle_gaps.iter().enumerate() {
        let Some(idle) = m.timeline.gap_idle.get(i) else {
            break;
        };
        let cause = idle.main_cause();
        let colour = format!("\"cname\": \"{}\"", idle_colour(cause));
        ev.push(event(
            "X",
            &format!("idle: {cause}"),
            pid,
            IDLE_TID,
            a,
            Some(b - a),
            &colour,
            Some(&idle_args(idle)),
        ));
    }
    let mut flow_id = FLOW_ID_BASE;
    let places = places(r);
    for ((rank, f), places) in r.diagnosis.findings.iter().enumerate().zip(&places) {
        let tid = FIRST_FINDING_TID + rank as i64;
        let track = format!("#{} {} {}", rank + 1, f.code, f.title);
        ev.push(metadata("thread_name", pid, tid, json!(track)));
        ev.push(metadata(
            "thread_sort_index",
            pid,
            tid,
            json!(2 + rank as i64),
        ));
        finding_events(r, f, places, (pid, tid), &mut flow_id, &mut ev);
    }
    ev
}

/// chrome://tracing's colour (a reserved `cname`) for idle time of `cause` (Perfetto
/// colours by name, and each cause has its own name).
fn idle_colour(cause: &str) -> &'static str {
    match cause {
        "sync" => "terrible",
        "transfer" => "olive",
        "data_loader" => "yellow",
        _ => "bad",
    }
}

/// chrome://tracing's colour for a finding of severity `s`.
fn severity_colour(s: crate::rules::Severity) -> &'static str {
    use crate::rules::Severity::*;
    match s {
        Critical => "terrible",
        Severe => "bad",
        Moderate => "yellow",
        Low => "olive",
        Info => "grey",
    }
}

/// Per finding, the places in the analysed steps of the ops and kernels it names, by
/// time: one pass over the model for all findings.
fn places(r: &Report) -> Vec<Vec<Place>> {
    let p = &r.profile;
    let findings = &r.diagnosis.findings;
    let mut ops: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut kernels: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, f) in findings.iter().enumerate() {
        for l in &f.locations {
            if let Some(o) = l.op.as_deref() {
                ops.entry(o).or_default().push(i);
            }
            if let Some(k) = l.kernel.as_deref() {
                kernels.entry(k).or_default().push(i);
            }
        }
    }
    for v in ops.values_mut().chain(kernels.values_mut()) {
        v.dedup();
    }
    let (lo, hi) = match (p.steps.first(), p.steps.last()) {
        (Some(a), Some(b)) => (a.start_ns, b.end_ns),
        _ => (p.meta.start_ns, p.meta.end_ns),
    };
    let mut out = vec![Vec::new(); findings.len()];
    if !ops.is_empty() {
        for o in p.ops.iter().filter(|o| o.ts_ns >= lo && o.ts_ns < hi) {
            for &i in ops.get(&*o.name).into_iter().flatten() {
                out[i].push(Place {
                    pid: o.pid,
                    tid: o.tid,
                    ts_ns: o.ts_ns,
                    end_ns: o.end_ns(),
                });
            }
        }
    }
    if !kernels.is_empty() {
        for g in p.gpu.iter().filter(|g| g.ts_ns >= lo && g.ts_ns < hi) {
            for &i in kernels.get(&*g.name).into_iter().flatten() {
                out[i].push(Place {
                    pid: g.device,
                    tid: g.stream,
                    ts_ns: g.ts_ns,
                    end_ns: g.end_ns(),
                });
            }
        }
    }
    for v in &mut out {
        v.sort_by_key(|x| (x.ts_ns, x.pid, x.tid));
    }
    out
}

fn finding_events(
    r: &Report,
    f: &Finding,
    places: &[Place],
    (pid, tid): (i64, i64),
    flow_id: &mut u64,
    ev: &mut Vec<String>,
) {
    let args = json!({
        "code": f.code,
        "rule": f.rule,
        "title": f.title,
        "severity": f.severity.label(),
        "saving_ms": f.saving_ms,
        "saving_pct": f.saving_pct,
        "estimate": f.estimate,
        "message": f.message,
        "fixes": f.fixes,
    });
    let name = format!("{} {}", f.code, f.title);
    let colour = format!("\"cname\": \"{}\"", severity_colour(f.severity));
    for (i, pl) in places.iter().take(MAX_MARKS).enumerate() {
        let mark = json!({"finding": f.code, "rank": i});
        ev.push(event(
            "i",
            &name,
            pl.pid,
            pl.tid,
            pl.ts_ns,
            None,
            "\"s\": \"t\"",
            Some(&mark),
        ));
    }
    let steps = &r.metrics.timeline.steps;
    for st in steps {
        let end = st.start_ns + st.dur_ns;
        let first = places.partition_point(|x| x.ts_ns < st.start_ns);
        let inside: Vec<&Place> = places[first..]
            .iter()
            .take_while(|x| x.ts_ns < end)
            .collect();
        let (a, b) = match (inside.first(), inside.iter().map(|x| x.end_ns).max()) {
            // Cut at the step's end: slices of one track must not overlap (a kernel
            // launched late in a step may end in the next).
            (Some(first), Some(last)) => (first.ts_ns, last.min(end).max(first.ts_ns + 1)),
            _ if places.is_empty() => (st.start_ns, end),
            _ => continue,
        };
        ev.push(event(
            "X",
            &name,
            pid,
            tid,
            a,
            Some(b - a),
            &colour,
            Some(&args),
        ));
        // Each arrow leaves from the middle of the slice (inside it whatever the order
        // a viewer gives events of equal time) and ends on the op or kernel it names.
        let from = a + (b - a) / 2;
        for target in inside.iter().take(MAX_FLOWS_PER_STEP) {
            let id = *flow_id;
            *flow_id += 1;
            ev.push(event(
                "s",
                f.code,
                pid,
                tid,
                from,
                None,
                &format!("\"id\": {id}"),
                None,
            ));
            ev.push(event(
                "f",
                f.code,
                target.pid,
                target.tid,
                target.ts_ns,
                None,
                &format!("\"id\": {id}, \"bp\": \"e\""),
                None,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_comma_is_not_doubled() {
        assert!(has_elements(b"[{}]", 0, 3));
        assert!(!has_elements(b"[{}, ]", 0, 5));
        assert!(!has_elements(b"[ ]", 0, 2));
    }

    #[test]
    fn microseconds_are_written_exactly() {
        assert_eq!(us(1_712_195_495_519_689_125), "1712195495519689.125");
        assert_eq!(us(5), "0.005");
        assert_eq!(us(-1500), "-1.500");
    }
}
