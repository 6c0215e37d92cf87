//! Kineto (PyTorch profiler) Chrome-trace JSON reader.
//!
//! Input: the bytes of a trace (`{"traceEvents": [...], "deviceProperties": ...}` or a
//! bare event array). Output: an unfinished [`Profile`] whose lists are already in the
//! order [`crate::model::finish`] sorts them in (it then sorts nothing, and links).
//!
//! The top-level object is walked with the tokenizer in [`super::scan`]. The event
//! array is cut into blocks of a few MB parsed in parallel, each guessing where its
//! first event starts; the guesses are checked in file order, so the result is the one
//! a sequential pass gives ([`read_event_array`]). Events are parsed into borrowed
//! structs holding only the fields diagnosis needs, by a hand-written parser
//! ([`super::kineto_event`]) that hands anything unusual to serde, which decides. Each
//! block sorts its lists; they are merged into the profile (stable, so equal keys keep
//! file order). No document tree is ever built, and the bytes of parsed blocks can be
//! dropped from memory as the read goes ([`read_releasing`]). Events that cannot be
//! used are counted in [`ImportCounters`], never silently dropped. A trace cut short
//! keeps every whole event before the cut and reports the byte offset.

use super::kineto_event;
use super::scan::{self, Truncated};
use crate::model::{
    classify_runtime, parse_memcpy_name, CounterSeverity, CpuOp, DeviceProps, DistributedInfo,
    GpuActivity, GpuAnnotation, GpuKind, GpuSync, ImportCounters, LaunchInfo, MemoryEvent, Name,
    OpKind, Process, Profile, PyFrame, RuntimeCall, RuntimeKind, Thread,
};
use crate::text;
use rayon::prelude::*;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};

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
    read_blocks(buf, release, BLOCK_BYTES, profile, warnings)
}

/// [`read_releasing`] with blocks of `block_bytes` (tests use tiny blocks).
fn read_blocks(
    buf: &[u8],
    release: &(dyn Fn(usize, usize) + Sync),
    block_bytes: usize,
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
            let (c, end) = read_event_array(buf, start, release, block_bytes, &names);
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
                    let (c, end) = read_event_array(buf, m.start, release, block_bytes, &names);
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
    read_top_level(&top, profile);

    // Each block's lists are sorted in the order model::finish wants; merging them
    // (in parallel across lists) builds each list once, sorted, and frees every
    // block's part as soon as it is used up.
    let mut op_runs = Vec::new();
    let mut frame_runs = Vec::new();
    let mut gpu_runs = Vec::with_capacity(chunks.len());
    let mut ann_runs = Vec::with_capacity(chunks.len());
    let mut sync_runs = Vec::with_capacity(chunks.len());
    let mut rt_runs = Vec::with_capacity(chunks.len());
    let mut mem_runs = Vec::with_capacity(chunks.len());
    let mut procs: HashMap<i64, Process> = HashMap::new();
    let tensight_events = |p: &Profile| {
        p.counters
            .counters
            .iter()
            .find(|c| c.name == "tensight_event")
            .map_or(0, |c| c.count)
    };
    let annotations_before = tensight_events(profile);
    for c in chunks {
        op_runs.extend(c.ops.0.into_iter().map(|(_, v)| v));
        frame_runs.extend(c.frames.0.into_iter().map(|(_, v)| v));
        gpu_runs.push(c.gpu);
        ann_runs.push(c.gpu_annotations);
        sync_runs.push(c.gpu_syncs);
        rt_runs.push(c.runtime);
        mem_runs.push(c.memory);
        profile.threads.extend(c.threads);
        profile.counters.merge(c.counters);
        for (pid, name, labels) in c.procs {
            let e = procs.entry(pid).or_insert(Process {
                pid,
                name: String::new(),
                labels: String::new(),
            });
            if let Some(n) = name {
                e.name = n;
            }
            if let Some(l) = labels {
                e.labels = l;
            }
        }
        profile.meta.rocm |= c.rocm;
    }
    let annotations = tensight_events(profile) - annotations_before;
    if annotations > 0 {
        warnings.push(format!(
            "this trace was annotated by `tensight analyze --format perfetto`: its {annotations} added events (findings, steps, idle gaps) are for trace viewers and were not analysed"
        ));
    }
    // Two halves of about equal size: ops (the biggest list), and the rest.
    let ((ops, frames), (gpu, runtime, ann, syncs, memory)) = rayon::join(
        || {
            (
                merge_runs(op_runs, op_key),
                merge_runs(frame_runs, frame_key),
            )
        },
        || {
            (
                merge_runs(gpu_runs, gpu_key),
                merge_runs(rt_runs, runtime_key),
                merge_runs(ann_runs, |a: &GpuAnnotation| a.ts_ns),
                merge_runs(sync_runs, |a: &GpuSync| a.ts_ns),
                merge_runs(mem_runs, |m: &MemoryEvent| m.ts_ns),
            )
        },
    );
    append(&mut profile.ops, ops);
    append(&mut profile.python_frames, frames);
    append(&mut profile.gpu, gpu);
    append(&mut profile.gpu_annotations, ann);
    append(&mut profile.gpu_syncs, syncs);
    append(&mut profile.runtime, runtime);
    append(&mut profile.memory, memory);
    let mut procs: Vec<Process> = procs.into_values().collect();
    procs.sort_by_key(|p| p.pid);
    profile.processes = procs;
    profile.threads.sort_by_key(|t| (t.pid, t.tid));
    profile.threads.dedup_by_key(|t| (t.pid, t.tid));
    Ok(())
}

fn read_top_level(top: &[(String, &[u8])], p: &mut Profile) {
    use serde_json::Value;
    for (key, raw) in top {
        let Ok(v) = serde_json::from_slice::<Value>(raw) else {
            p.counters.add(
                "bad_top_level_field",
                CounterSeverity::Info,
                "top-level fields that are not valid JSON; ignored",
                1,
            );
            continue;
        };
        let as_bool = |v: &Value| v.as_bool().or_else(|| v.as_i64().map(|i| i != 0));
        match key.as_str() {
            "schemaVersion" => p.meta.schema_version = v.as_i64(),
            "traceName" => p.meta.trace_name = v.as_str().map(text::cleaned),
            "cuda_runtime_version" => p.meta.cuda_runtime_version = v.as_i64(),
            "cuda_driver_version" => p.meta.cuda_driver_version = v.as_i64(),
            "hip_runtime_version" => {
                p.meta.hip_runtime_version = v.as_i64();
                p.meta.rocm = true;
            }
            "roctracer_version" | "hip_driver_version" => p.meta.rocm = true,
            "record_shapes" => p.meta.record_shapes = as_bool(&v),
            "with_stack" => p.meta.with_stack = as_bool(&v),
            "profile_memory" => p.meta.profile_memory = as_bool(&v),
            "with_flops" => p.meta.with_flops = as_bool(&v),
            "with_modules" => p.meta.with_modules = as_bool(&v),
            "deviceProperties" => {
                if let Some(arr) = v.as_array() {
                    p.meta.devices = arr.iter().filter_map(device_props).collect();
                }
            }
            "distributedInfo" => {
                p.meta.distributed = Some(DistributedInfo {
                    backend: v.get("backend").and_then(Value::as_str).map(text::cleaned),
                    rank: v.get("rank").and_then(Value::as_i64),
                    world_size: v.get("world_size").and_then(Value::as_i64),
                    nccl_version: v
                        .get("nccl_version")
                        .and_then(Value::as_str)
                        .map(text::cleaned),
                })
            }
            _ => {}
        }
    }
}

fn device_props(v: &serde_json::Value) -> Option<DeviceProps> {
    let u = |k: &str| v.get(k).and_then(|x| x.as_u64());
    let i = |k: &str| v.get(k).and_then(|x| x.as_i64());
    Some(DeviceProps {
        id: i("id")?,
        name: text::cleaned(v.get("name").and_then(|x| x.as_str()).unwrap_or("")),
        total_global_mem_bytes: u("totalGlobalMem").unwrap_or(0),
        compute_major: i("computeMajor").unwrap_or(0),
        compute_minor: i("computeMinor").unwrap_or(0),
        num_sms: u("numSms").unwrap_or(0) as u32,
        max_threads_per_sm: u("maxThreadsPerMultiprocessor").unwrap_or(0) as u32,
        regs_per_sm: u("regsPerMultiprocessor").unwrap_or(0) as u32,
        shared_mem_per_sm_bytes: u("sharedMemPerMultiprocessor").unwrap_or(0),
        warp_size: u("warpSize").unwrap_or(32) as u32,
    })
}

// ---------------------------------------------------------------------------------
// Per-event parsing

/// A number that may be written as a JSON number or a numeric string.
#[derive(Clone, Copy, Debug)]
pub(super) struct Num(pub(super) f64);

/// A pid/tid: a number, or a label (Kineto writes "Spans", "Traces", ROCm "0x0").
#[derive(Clone, Copy, Debug)]
pub(super) enum Id {
    Int(i64),
    Label,
}

pub(super) struct NumVisitor;
impl Visitor<'_> for NumVisitor {
    type Value = Option<f64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v as f64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v as f64))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let t = v.trim();
        if let Some(h) = t.strip_prefix("0x") {
            return Ok(i64::from_str_radix(h, 16).ok().map(|x| x as f64));
        }
        Ok(t.parse::<f64>().ok())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(v as i64 as f64))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A time as Kineto writes it (microseconds, often with a 3-digit fraction), kept as
/// exact integer nanoseconds: the decimal text is converted digit by digit, since an
/// f64 of an epoch timestamp in µs (~1.7e15) is off by up to ~128 ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Micros(pub(super) Option<i64>);

impl Micros {
    /// From the JSON text of a number (or a quoted number).
    pub(super) fn from_text(text: &str) -> Micros {
        let t = text.trim().trim_matches('"').trim();
        Micros(decimal_us_to_ns(t))
    }
    fn get(self) -> Option<i64> {
        self.0
    }
}

/// `"1712195495519689.125"` µs → 1712195495519689125 ns, exactly (half-up rounding
/// past the third decimal); exponents and other spellings go through f64.
pub(super) fn decimal_us_to_ns(t: &str) -> Option<i64> {
    if let Some(ns) = plain_us_to_ns(t.as_bytes()) {
        return Some(ns);
    }
    let v: f64 = t.parse().ok()?;
    v.is_finite().then(|| (v * 1000.0).round() as i64)
}

/// The exact conversion of a plain number (`-?digits(.digits)?`, at most 16 integer
/// digits), straight from its bytes; `None` for anything else (the caller then takes
/// the general path through f64).
#[inline]
pub(super) fn plain_us_to_ns(b: &[u8]) -> Option<i64> {
    let (neg, b) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let mut i = 0;
    let mut int: i64 = 0;
    while let Some(&c @ b'0'..=b'9') = b.get(i) {
        if i == 16 {
            return None;
        }
        int = int * 10 + (c - b'0') as i64;
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut ns = int.checked_mul(1000)?;
    if i < b.len() {
        if b[i] != b'.' {
            return None;
        }
        let fb = &b[i + 1..];
        if !fb.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut scale = 100;
        for k in 0..3 {
            if let Some(&d) = fb.get(k) {
                ns += (d - b'0') as i64 * scale;
            }
            scale /= 10;
        }
        if fb.get(3).is_some_and(|&d| d >= b'5') {
            ns += 1;
        }
    }
    Some(if neg { -ns } else { ns })
}

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        Ok(match raw.get() {
            "null" | "true" | "false" => Micros(None),
            t => Micros::from_text(t),
        })
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(NumVisitor)? {
            Some(v) => Ok(Num(v)),
            None => Ok(Num(f64::NAN)),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an id")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id::Int(v as i64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
                Ok(Id::Int(v as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(v.trim().parse::<i64>().map(Id::Int).unwrap_or(Id::Label))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Id, E> {
                Ok(Id::Label)
            }
        }
        d.deserialize_any(V)
    }
}

impl Num {
    fn get(self) -> Option<f64> {
        self.0.is_finite().then_some(self.0)
    }
    fn int(self) -> Option<i64> {
        self.get().map(|v| v as i64)
    }
}

#[derive(Deserialize, Default, Debug)]
pub(super) struct RawEvent<'a> {
    #[serde(borrow, default)]
    pub(super) ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) pid: Option<Id>,
    #[serde(default)]
    pub(super) tid: Option<Id>,
    #[serde(default)]
    pub(super) ts: Option<Micros>,
    #[serde(default)]
    pub(super) dur: Option<Micros>,
    #[serde(borrow, default)]
    pub(super) args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default, Debug)]
pub(super) struct RawArgs<'a> {
    #[serde(rename = "External id", default)]
    pub(super) external_id: Option<Num>,
    #[serde(default)]
    pub(super) correlation: Option<Num>,
    #[serde(rename = "Record function id", default)]
    pub(super) rf_id: Option<Num>,
    #[serde(rename = "Sequence number", default)]
    pub(super) seq: Option<Num>,
    #[serde(default)]
    pub(super) device: Option<Num>,
    #[serde(default)]
    pub(super) stream: Option<Num>,
    #[serde(default)]
    pub(super) bytes: Option<Num>,
    #[serde(default)]
    pub(super) size: Option<Num>,
    #[serde(borrow, default)]
    pub(super) kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub(super) grid: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub(super) block: Option<&'a str>,
    #[serde(rename = "registers per thread", default)]
    pub(super) regs: Option<Num>,
    #[serde(rename = "shared memory", default)]
    pub(super) smem: Option<Num>,
    #[serde(rename = "blocks per SM", default)]
    pub(super) blocks_per_sm: Option<Num>,
    #[serde(rename = "warps per SM", default)]
    pub(super) warps_per_sm: Option<Num>,
    #[serde(rename = "est. achieved occupancy %", default)]
    pub(super) occupancy: Option<Num>,
    #[serde(rename = "Input Dims", borrow, default, deserialize_with = "raw_text")]
    pub(super) input_dims: Option<&'a str>,
    #[serde(rename = "Input type", borrow, default, deserialize_with = "raw_text")]
    pub(super) input_types: Option<&'a str>,
    #[serde(
        rename = "Input Strides",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) input_strides: Option<&'a str>,
    #[serde(
        rename = "Concrete Inputs",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) concrete_inputs: Option<&'a str>,
    #[serde(rename = "Call stack", borrow, default)]
    pub(super) call_stack: Option<Cow<'a, str>>,
    #[serde(rename = "Bytes", default)]
    pub(super) mem_bytes: Option<Num>,
    #[serde(rename = "Total Allocated", default)]
    pub(super) total_allocated: Option<Num>,
    #[serde(rename = "Total Reserved", default)]
    pub(super) total_reserved: Option<Num>,
    #[serde(rename = "Device Type", default)]
    pub(super) device_type: Option<Num>,
    #[serde(rename = "Device Id", default)]
    pub(super) device_id: Option<Num>,
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) labels: Option<Cow<'a, str>>,
    #[serde(
        rename = "Collective name",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) collective: Option<&'a str>,
    #[serde(rename = "In msg nelems", default)]
    pub(super) in_nelems: Option<Num>,
    #[serde(rename = "Out msg nelems", default)]
    pub(super) out_nelems: Option<Num>,
    #[serde(rename = "Group size", default)]
    pub(super) group_size: Option<Num>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub(super) dtype: Option<&'a str>,
    #[serde(
        rename = "Process Group Name",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub(super) pg_name: Option<&'a str>,
}

#[derive(Default)]
struct Chunk {
    /// Ops by thread: one list per (pid, tid), so the merge frees each as it is used.
    ops: ByThread<CpuOp>,
    /// Python frames by thread.
    frames: ByThread<PyFrame>,
    gpu: Vec<GpuActivity>,
    gpu_annotations: Vec<GpuAnnotation>,
    gpu_syncs: Vec<GpuSync>,
    runtime: Vec<RuntimeCall>,
    memory: Vec<MemoryEvent>,
    threads: Vec<Thread>,
    procs: Vec<(i64, Option<String>, Option<String>)>,
    counters: ImportCounters,
    rocm: bool,
    /// Array elements read (events, including those skipped).
    elements: usize,
}

/// Items grouped by thread (pid, tid), in first-seen order; few threads, so a list.
struct ByThread<T>(Vec<((i64, i64), Vec<T>)>);

impl<T> Default for ByThread<T> {
    fn default() -> Self {
        ByThread(Vec::new())
    }
}

impl<T> ByThread<T> {
    #[inline]
    fn push(&mut self, thread: (i64, i64), item: T) {
        // Events of one thread come in runs: try the last list first.
        if let Some((t, v)) = self.0.last_mut() {
            if *t == thread {
                v.push(item);
                return;
            }
        }
        match self.0.iter().position(|(t, _)| *t == thread) {
            Some(i) => {
                let g = self.0.remove(i);
                self.0.push(g);
            }
            None => self.0.push((thread, Vec::new())),
        }
        if let Some((_, v)) = self.0.last_mut() {
            v.push(item);
        }
    }
}

// The orders model::finish sorts the lists in. The reader sorts each block's lists
// this way and merges them, so finish's (stable) sorts find them sorted and only
// check. Keep in step with model/build.rs for speed; correctness does not depend on
// it (finish sorts anyway).
fn op_key(o: &CpuOp) -> (i64, i64, i64, i64, u8) {
    (o.pid, o.tid, o.ts_ns, -o.dur_ns, o.kind as u8)
}
fn frame_key(f: &PyFrame) -> (i64, i64, i64, i64) {
    (f.pid, f.tid, f.ts_ns, -f.dur_ns)
}
fn gpu_key(g: &GpuActivity) -> (i64, i64, i64) {
    (g.ts_ns, g.device, g.stream)
}
fn runtime_key(r: &RuntimeCall) -> (i64, i64) {
    (r.ts_ns, r.tid)
}

impl Chunk {
    /// Sort every list of a finished block (stable: equal keys keep file order).
    fn sort_lists(&mut self) {
        for (_, v) in &mut self.ops.0 {
            sort_by_key(v, op_key);
        }
        for (_, v) in &mut self.frames.0 {
            sort_by_key(v, frame_key);
        }
        sort_by_key(&mut self.gpu, gpu_key);
        sort_by_key(&mut self.runtime, runtime_key);
        sort_by_key(&mut self.gpu_annotations, |a| a.ts_ns);
        sort_by_key(&mut self.gpu_syncs, |a| a.ts_ns);
        sort_by_key(&mut self.memory, |m| m.ts_ns);
    }
}

/// Stable sort, skipped (with its scratch allocation) when already sorted.
fn sort_by_key<T, K: Ord>(v: &mut [T], key: impl Fn(&T) -> K) {
    if !v.is_sorted_by_key(&key) {
        v.sort_by_key(key);
    }
}

/// Merge sorted runs, given in file order, into one sorted list. Stable: equal keys
/// come out in run order, so the result equals a stable sort of the runs'
/// concatenation. A run's memory is freed as soon as it is used up. Runs are
/// usually consecutive stretches of time: a run whose rest comes before all others
/// is copied whole, and while one run stays ahead its items are taken one comparison
/// each, without touching the heap.
fn merge_runs<T, K: Ord + Copy>(runs: Vec<Vec<T>>, key: impl Fn(&T) -> K) -> Vec<T> {
    let total = runs.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut runs: Vec<std::vec::IntoIter<T>> = runs.into_iter().map(Vec::into_iter).collect();
    let mut heap = BinaryHeap::with_capacity(runs.len());
    for (r, it) in runs.iter().enumerate() {
        if let Some(x) = it.as_slice().first() {
            heap.push(Reverse((key(x), r)));
        }
    }
    while let Some(Reverse((_, r))) = heap.pop() {
        let it = &mut runs[r];
        // The whole rest of the run comes before every other run: one copy.
        let ahead = match (it.as_slice().last(), heap.peek()) {
            (Some(last), Some(Reverse(top))) => (key(last), r) < *top,
            _ => true,
        };
        if ahead {
            out.extend(std::mem::take(it));
            continue;
        }
        while let Some(x) = it.next() {
            out.push(x);
            let Some(next) = it.as_slice().first() else {
                break;
            };
            let k = (key(next), r);
            if let Some(Reverse(top)) = heap.peek() {
                if k > *top {
                    heap.push(Reverse(k));
                    break;
                }
            }
        }
        if it.as_slice().is_empty() {
            *it = Vec::new().into_iter(); // free the run now
        }
    }
    out
}

/// `dst.extend(v)`, without the copy when `dst` is empty.
fn append<T>(dst: &mut Vec<T>, v: Vec<T>) {
    if dst.is_empty() {
        *dst = v;
    } else {
        dst.extend(v);
    }
}

/// `RawValue` fields kept as their raw text.
fn raw_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de str>, D::Error> {
    Ok(Option::<&'de RawValue>::deserialize(d)?.map(RawValue::get))
}

/// Names shared by all blocks of one read: each distinct name is allocated once, as
/// [`text::clean`] leaves it (control characters escaped, cut at the string cap).
#[derive(Default)]
struct SharedNames(Mutex<NameSet>);

#[derive(Default)]
struct NameSet {
    /// Names kept as written.
    clean: HashSet<Name, FxBuild>,
    /// Names [`text::clean`] changed, by what the trace wrote, with what it changed.
    changed: HashMap<Box<str>, (Name, text::Cleaned), FxBuild>,
}

impl SharedNames {
    fn get(&self, s: &str) -> (Name, text::Cleaned) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = set.clean.get(s) {
            return (n.clone(), text::Cleaned::default());
        }
        if let Some(n) = set.changed.get(s) {
            return n.clone();
        }
        let (c, what) = text::clean(s);
        let n: Name = Arc::from(&*c);
        if c == s {
            set.clean.insert(n.clone());
        } else if !what.cut {
            // Keyed by what the trace wrote; a string over the cap is not kept as a key
            // (that would copy all of it): it is cleaned again when seen again.
            set.changed.insert(Box::from(s), (n.clone(), what));
        }
        (n, what)
    }
}

/// Count what [`text::clean`] changed in one string (per event, so the counts do not
/// depend on how the events were cut into blocks).
fn count_cleaned(what: text::Cleaned, counters: &mut ImportCounters) {
    if what.escaped {
        counters.add(ESCAPED.0, CounterSeverity::Info, ESCAPED.1, 1);
    }
    if what.cut {
        counters.add(LONG.0, CounterSeverity::DataLoss, LONG.1, 1);
    }
}

/// Counter for strings holding control or bidirectional characters.
pub(crate) const ESCAPED: (&str, &str) = (
    "escaped_string",
    "names holding control characters or bidirectional overrides; kept with those written as \\u{..}",
);
/// Counter for strings over the length cap.
pub(crate) const LONG: (&str, &str) = ("long_string", "strings longer than 64 KiB; cut (with …)");

/// A string from the trace as the model keeps it ([`text::clean`]), counted when changed.
fn kept(s: &str, counters: &mut ImportCounters) -> String {
    let (c, what) = text::clean(s);
    count_cleaned(what, counters);
    c.into_owned()
}

/// A block's name cache, keyed by the bytes in the trace (no allocation per event);
/// misses go to the shared set.
struct Interner<'a, 's> {
    local: HashMap<&'a str, (Name, text::Cleaned), FxBuild>,
    shared: &'s SharedNames,
}

impl<'a, 's> Interner<'a, 's> {
    fn new(shared: &'s SharedNames) -> Self {
        Interner {
            local: HashMap::default(),
            shared,
        }
    }

    /// The interned name; what cleaning changed is counted in `counters`.
    fn get(&mut self, s: &Option<Cow<'a, str>>, counters: &mut ImportCounters) -> Name {
        let (n, what) = match s {
            Some(Cow::Borrowed(b)) => match self.local.get(b) {
                Some(hit) => hit.clone(),
                None => {
                    let hit = self.shared.get(b);
                    self.local.insert(b, hit.clone());
                    hit
                }
            },
            Some(Cow::Owned(o)) => self.shared.get(o),
            None => return self.get(&Some(Cow::Borrowed("")), counters),
        };
        if what != text::Cleaned::default() {
            count_cleaned(what, counters);
        }
        n
    }
}

/// FxHash (rustc's hasher): names are hashed once per event, SipHash costs too much.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

const FX_K: u64 = 0x517c_c1b7_2722_0a95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// A raw JSON value (`Input Dims` and the like) as kept: cut at the string cap (a cut
/// value no longer parses, which its readers tolerate). Raw JSON holds no control
/// characters but the whitespace between tokens (inside strings they are escaped), so
/// nothing else is rewritten here.
fn raw_box(r: Option<&str>, counters: &mut ImportCounters) -> Option<Box<str>> {
    r.map(|r| {
        if r.len() <= text::MAX_STRING_BYTES {
            Box::from(r)
        } else {
            count_cleaned(
                text::Cleaned {
                    escaped: false,
                    cut: true,
                },
                counters,
            );
            let mut end = text::MAX_STRING_BYTES;
            while !r.is_char_boundary(end) {
                end -= 1;
            }
            Box::from(&r[..end])
        }
    })
}

// ---------------------------------------------------------------------------------
// Cutting the event array into blocks, parsed in parallel

/// Where a run over the event array's elements stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The next element starts here, at or past the run's limit.
    Next(usize),
    /// The array closed; the offset just past its `]`.
    End(usize),
    /// The input ended (or broke) inside the value at this offset.
    Truncated(usize),
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
fn read_event_array(
    buf: &[u8],
    pos: usize,
    release: &(dyn Fn(usize, usize) + Sync),
    block_bytes: usize,
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
                Some(s) => run_elements(buf, s, limit(k), &mut chunk, names),
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
            stop = run_elements(buf, next, limit(k), &mut chunk, names);
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
/// before `limit`.
fn run_elements(
    buf: &[u8],
    mut i: usize,
    limit: usize,
    c: &mut Chunk,
    shared: &SharedNames,
) -> Stop {
    let mut names = Interner::new(shared);
    loop {
        if i >= limit {
            return Stop::Next(i);
        }
        let end = match parse_element(buf, i, c, &mut names) {
            Ok(e) => e,
            Err(Truncated(at)) => return Stop::Truncated(at),
        };
        i = scan::skip_ws(buf, end);
        match buf.get(i) {
            Some(b',') => {
                i = scan::skip_ws(buf, i + 1);
                // Tolerate a trailing comma before the closing bracket.
                if buf.get(i) == Some(&b']') {
                    return Stop::End(i + 1);
                }
            }
            Some(b']') => return Stop::End(i + 1),
            _ => return Stop::Truncated(i),
        }
    }
}

/// Parse the element at `start` into `c`; returns the offset past it. The fast
/// parser handles ordinary events; anything else is cut by bracket matching and
/// given to serde, which decides (and may count it as unparseable).
fn parse_element<'a>(
    buf: &'a [u8],
    start: usize,
    c: &mut Chunk,
    names: &mut Interner<'a, '_>,
) -> Result<usize, Truncated> {
    if buf.get(start) == Some(&b'{') {
        let mut ev = RawEvent::default();
        if let Ok(end) = kineto_event::parse_event_into(buf, start, &mut ev) {
            c.elements += 1;
            add_event(ev, c, names);
            return Ok(end);
        }
    }
    let end = scan::value_end(buf, start)?;
    c.elements += 1;
    match serde_json::from_slice::<RawEvent>(&buf[start..end]) {
        Ok(ev) => add_event(ev, c, names),
        Err(_) => c.counters.add(
            "unparseable_event",
            CounterSeverity::DataLoss,
            "events that are not valid JSON objects of the Chrome trace format; skipped",
            1,
        ),
    }
    Ok(end)
}

const MALFORMED: &str = "events without a usable pid, tid, ts or dur; skipped";

fn add_event<'a>(ev: RawEvent<'a>, c: &mut Chunk, names: &mut Interner<'a, '_>) {
    if ev.cat.as_deref() == Some(TENSIGHT_CATEGORY) {
        // tensight's own annotations (`analyze --format perfetto`): counted, so a
        // read-back shows them, and never analysed, so its diagnosis is the original's.
        c.counters.add(
            "tensight_event",
            CounterSeverity::Info,
            "events tensight added to an annotated trace (`analyze --format perfetto`): findings, steps, idle gaps; shown, not analysed",
            1,
        );
        return;
    }
    let ph = ev.ph.as_deref().unwrap_or("");
    match ph {
        "X" => add_complete(ev, c, names),
        "M" => add_metadata(ev, c),
        "i" | "I" => {
            if ev.name.as_deref() == Some("[memory]") {
                add_memory(ev, c);
            } else {
                c.counters.add(
                    "instant_event",
                    CounterSeverity::Info,
                    "instant events other than allocator records (e.g. profiler iteration marks); not used",
                    1,
                );
            }
        }
        "s" | "f" | "t" => c.counters.add(
            "flow_event",
            CounterSeverity::Info,
            "flow arrows (ac2g, fwdbwd); the same links are taken from correlation and External ids",
            1,
        ),
        _ => c.counters.add(
            "unsupported_phase",
            CounterSeverity::DataLoss,
            "events with a phase other than X, M, i, s, f, t (Kineto writes only those); skipped",
            1,
        ),
    }
}

fn add_metadata(ev: RawEvent, c: &mut Chunk) {
    let Some(Id::Int(pid)) = ev.pid else {
        return;
    };
    let arg_name = ev
        .args
        .as_ref()
        .and_then(|a| a.name.as_deref())
        .map(|s| kept(s, &mut c.counters));
    match ev.name.as_deref() {
        Some("process_name") => c.procs.push((pid, arg_name, None)),
        Some("process_labels") => {
            let l = ev
                .args
                .as_ref()
                .and_then(|a| a.labels.as_deref())
                .map(|s| kept(s, &mut c.counters));
            c.procs.push((pid, None, l))
        }
        Some("thread_name") => {
            if let (Some(Id::Int(tid)), Some(name)) = (ev.tid, arg_name) {
                c.threads.push(Thread { pid, tid, name });
            }
        }
        _ => {}
    }
}

fn add_memory(ev: RawEvent, c: &mut Chunk) {
    let (Some(ts), Some(a)) = (ev.ts.and_then(Micros::get), ev.args.as_ref()) else {
        c.counters
            .add("malformed_event", CounterSeverity::DataLoss, MALFORMED, 1);
        return;
    };
    if !super::limits::time_ok(ts, 0) {
        let (name, what) = super::limits::TIME_OUT_OF_RANGE;
        c.counters.add(name, CounterSeverity::DataLoss, what, 1);
        return;
    }
    let tid = match ev.tid {
        Some(Id::Int(t)) => t,
        _ => 0,
    };
    c.memory.push(MemoryEvent {
        ts_ns: ts,
        bytes: a.mem_bytes.and_then(Num::int).unwrap_or(0),
        total_allocated_bytes: a.total_allocated.and_then(Num::int),
        total_reserved_bytes: a.total_reserved.and_then(Num::int),
        device_type: a.device_type.and_then(Num::int).unwrap_or(0),
        device_id: a.device_id.and_then(Num::int).unwrap_or(0),
        tid,
    });
}

fn add_complete<'a>(ev: RawEvent<'a>, c: &mut Chunk, names: &mut Interner<'a, '_>) {
    let cat = ev.cat.as_deref().unwrap_or("");
    // Lower-cased on the stack: categories are short, and this runs for every event.
    let mut lower = [0u8; 32];
    let long;
    let cat_l: &str = if cat.len() <= lower.len() {
        let l = &mut lower[..cat.len()];
        l.copy_from_slice(cat.as_bytes());
        l.make_ascii_lowercase();
        // Lower-casing ASCII bytes keeps UTF-8 valid.
        std::str::from_utf8(l).unwrap_or_default()
    } else {
        long = cat.to_ascii_lowercase();
        &long
    };
    if cat_l == "trace" {
        return; // the profiler's own span
    }
    let (Some(Id::Int(pid)), Some(Id::Int(tid)), Some(ts)) =
        (ev.pid, ev.tid, ev.ts.and_then(Micros::get))
    else {
        c.counters
            .add("malformed_event", CounterSeverity::DataLoss, MALFORMED, 1);
        return;
    };
    let mut dur_ns = ev.dur.and_then(Micros::get).unwrap_or(0);
    if !super::limits::time_ok(ts, dur_ns) {
        let (name, what) = super::limits::TIME_OUT_OF_RANGE;
        c.counters.add(name, CounterSeverity::DataLoss, what, 1);
        return;
    }
    if dur_ns < 0 {
        c.counters.add(
            "negative_duration",
            CounterSeverity::DataLoss,
            "events with a negative duration; treated as zero-length",
            1,
        );
        dur_ns = 0;
    }
    let ts_ns = ts;
    let name = names.get(&ev.name, &mut c.counters);
    // Borrowed, not moved out: the args are large and most events have them.
    let no_args;
    let args = match &ev.args {
        Some(a) => a,
        None => {
            no_args = RawArgs::default();
            &no_args
        }
    };
    let ext = args.external_id.and_then(Num::int);
    let corr = args.correlation.and_then(Num::int);
    match cat_l {
        "cpu_op" | "operator" | "user_annotation" => {
            let kind = if cat_l == "user_annotation" {
                OpKind::Annotation
            } else {
                OpKind::Op
            };
            c.ops.push(
                (pid, tid),
                CpuOp {
                    name,
                    kind,
                    pid,
                    tid,
                    ts_ns,
                    dur_ns,
                    external_id: ext,
                    rf_id: args.rf_id.and_then(Num::int),
                    seq: args.seq.and_then(Num::int),
                    parent: None,
                    depth: 0,
                    py_frame: None,
                    input_dims: raw_box(args.input_dims, &mut c.counters),
                    input_types: raw_box(args.input_types, &mut c.counters),
                    input_strides: raw_box(args.input_strides, &mut c.counters),
                    concrete_inputs: raw_box(args.concrete_inputs, &mut c.counters),
                    call_stack: args
                        .call_stack
                        .as_deref()
                        .filter(|s| !s.is_empty())
                        .map(|s| kept(s, &mut c.counters).into_boxed_str()),
                },
            )
        }
        "python_function" => c.frames.push(
            (pid, tid),
            PyFrame {
                name,
                pid,
                tid,
                ts_ns,
                dur_ns,
                parent: None,
                depth: 0,
            },
        ),
        "kernel" | "gpu_memcpy" | "memcpy" | "gpu_memset" | "memset" => {
            let device = args.device.and_then(Num::int).unwrap_or(pid);
            let stream = args.stream.and_then(Num::int).unwrap_or(tid);
            let kind = match cat_l {
                "kernel" => GpuKind::Kernel,
                "gpu_memset" | "memset" => GpuKind::Memset,
                _ => {
                    let (dir, src, dst) = parse_memcpy_name(&name, args.kind.as_deref());
                    GpuKind::Memcpy { dir, src, dst }
                }
            };
            let launch = (kind == GpuKind::Kernel).then(|| LaunchInfo {
                grid: dims3(args.grid),
                block: dims3(args.block),
                registers_per_thread: args.regs.and_then(Num::int).map(|v| v as u32),
                shared_mem_bytes: args.smem.and_then(Num::int).map(|v| v as u64),
                blocks_per_sm: args.blocks_per_sm.and_then(Num::get).map(|v| v as f32),
                warps_per_sm: args.warps_per_sm.and_then(Num::get).map(|v| v as f32),
                est_occupancy_pct: args.occupancy.and_then(Num::get).map(|v| v as f32),
            });
            let bytes = args
                .bytes
                .and_then(Num::int)
                .or_else(|| args.size.and_then(Num::int))
                .map(|b| b.max(0) as u64);
            c.gpu.push(GpuActivity {
                kind,
                name,
                device,
                stream,
                ts_ns,
                dur_ns,
                correlation: corr,
                external_id: ext,
                bytes,
                launch,
                collective: args.collective.map(|c| {
                    Box::new(crate::model::Collective::from_args(
                        c,
                        args.in_nelems.and_then(Num::int),
                        args.out_nelems.and_then(Num::int),
                        args.group_size.and_then(Num::int),
                        args.dtype,
                        args.pg_name,
                    ))
                }),
                op: None,
                runtime: None,
            })
        }
        "gpu_user_annotation" => c.gpu_annotations.push(GpuAnnotation {
            name,
            device: args.device.and_then(Num::int).unwrap_or(pid),
            stream: args.stream.and_then(Num::int).unwrap_or(tid),
            ts_ns,
            dur_ns,
            external_id: ext,
        }),
        "cuda_sync" => c.gpu_syncs.push(GpuSync {
            name,
            device: args.device.and_then(Num::int).unwrap_or(pid),
            stream: args.stream.and_then(Num::int).unwrap_or(tid),
            ts_ns,
            dur_ns,
            correlation: corr,
        }),
        "cuda_runtime" | "cuda_driver" | "runtime" | "hip_runtime" => {
            if name.starts_with("hip") {
                c.rocm = true;
            }
            let kind: RuntimeKind = classify_runtime(&name);
            c.runtime.push(RuntimeCall {
                name,
                kind,
                pid,
                tid,
                ts_ns,
                dur_ns,
                correlation: corr,
                external_id: ext,
                op: None,
                gpu: None,
            })
        }
        "overhead" => c.counters.add(
            "profiler_overhead",
            CounterSeverity::Info,
            "profiler overhead ranges (buffer requests); not part of the program",
            1,
        ),
        _ => c.counters.add(
            "unknown_category",
            CounterSeverity::Info,
            "complete events of a category tensight does not model; skipped",
            1,
        ),
    }
}

/// `[x, y, z]` launch dimensions; anything else (Inductor writes `"grid(100,)"` on its
/// ops) reads as 1×1×1.
fn dims3(v: Option<&str>) -> [u32; 3] {
    let mut out = [1u32; 3];
    let Some(raw) = v else {
        return out;
    };
    let clamp = |n: Num| n.int().unwrap_or(1).clamp(0, u32::MAX as i64) as u32;
    if let Some((vals, n)) = small_uint_list(raw.as_bytes()) {
        for (o, &v) in out.iter_mut().zip(&vals[..n]) {
            *o = clamp(Num(v as f64));
        }
    } else if let Ok(v) = serde_json::from_str::<Vec<Num>>(raw) {
        for (o, n) in out.iter_mut().zip(v) {
            *o = clamp(n);
        }
    }
    out
}

/// The common case of [`dims3`] without serde: `[` up to three plain unsigned
/// integers `]` (no sign, fraction, exponent or leading zero; at most 18 digits).
fn small_uint_list(b: &[u8]) -> Option<([u64; 3], usize)> {
    let mut vals = [0u64; 3];
    let mut n = 0;
    let mut i = scan::skip_ws(b, 0);
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i = scan::skip_ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return (scan::skip_ws(b, i + 1) == b.len()).then_some((vals, 0));
    }
    loop {
        let s = i;
        let mut v = 0u64;
        while let Some(&c @ b'0'..=b'9') = b.get(i) {
            v = v * 10 + (c - b'0') as u64;
            i += 1;
            if i - s > 18 {
                return None;
            }
        }
        if i == s || (b[s] == b'0' && i - s > 1) || n == 3 {
            return None;
        }
        vals[n] = v;
        n += 1;
        i = scan::skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i = scan::skip_ws(b, i + 1),
            Some(b']') => return (scan::skip_ws(b, i + 1) == b.len()).then_some((vals, n)),
            _ => return None,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A small Kineto trace touching every path of the event parser: metadata, ops
    /// with shapes, Python frames, kernels, memcpys, runtime calls, flows, allocator
    /// records, escapes, numbers as strings, nulls, nested unknown fields.
    pub(crate) const TRACE: &str = r#"{
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85000000000, "numSms": 132}],
  "traceEvents": [
  {"name": "process_name", "ph": "M", "ts": 1, "pid": 7, "tid": 0, "args": {"name": "python3"}},
  {"name": "thread_name", "ph": "M", "ts": 1, "pid": 7, "tid": 8, "args": {"name": "main \"thread\""}},
  {
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 8,
    "ts": 1700000000000.125, "dur": 900.5,
    "args": {"External id": 1, "Record function id": 10, "Ev Idx": 0}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8,
    "ts": 1700000000010.250, "dur": 20,
    "args": {"External id": 2, "Sequence number": 5, "Input Dims": [[64, 128], [128, 256]],
      "Input type": ["float", "float"], "Input Strides": [[128, 1], [256, 1]],
      "Concrete Inputs": ["", "{\"a\": [1, 2]}"], "nested": {"x": [true, false, null, -1.5e-3]},
      "objects": [
        {"a": 1},
        {"b": [{"c": 2}, {"d": "\n,{"}]}
      ]}
  },
  {
    "ph": "X", "cat": "python_function", "name": "train.py(40): step\ttab", "pid": 7, "tid": 8,
    "ts": "1700000000001", "dur": "899.0", "args": {"Python id": 3}
  },
  {
    "ph": "X", "cat": "Kernel", "name": "ampere_sgemm_\u0041", "pid": 0, "tid": 7,
    "ts": 1700000000040.5, "dur": 12.25,
    "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 99,
      "grid": [120, 1, 1], "block": [256, 1, 1], "registers per thread": 128,
      "shared memory": 49152, "blocks per SM": 0.909091, "warps per SM": 7.272727,
      "est. achieved occupancy %": 11}
  },
  {
    "ph": "X", "cat": "kernel", "name": "triton_poi", "pid": 0, "tid": 7,
    "ts": 1700000000060, "dur": 1,
    "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 100,
      "grid": "grid(100,)", "block": [128, 1, 1.5]}
  },
  {
    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 13,
    "ts": 1700000000005, "dur": 30, "args": {"device": 0, "stream": 13, "correlation": 98, "bytes": 1048576}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8,
    "ts": 1700000000012, "dur": 4, "args": {"External id": 2, "correlation": 99, "cbid": 211, "note": "caf\u00e9\u12ab"}
  },
  {"ph": "s", "id": 99, "pid": 7, "tid": 8, "ts": 1700000000012, "cat": "ac2g", "name": "ac2g"},
  {"ph": "f", "id": 99, "pid": 0, "tid": 7, "ts": 1700000000040.5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 8,
   "ts": 1700000000011, "args": {"Total Reserved": 2097152, "Total Allocated": 1024, "Bytes": 512,
   "Addr": 140000, "Device Type": 1, "Device Id": 0}},
  {"ph": "X", "cat": "cpu_op", "name": null, "pid": null, "tid": 8, "ts": 1, "dur": 1},
  {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 7, "tid": 8, "ts": -5, "dur": -1},
  {"ph": "X", "cat": "cpu_op", "name": "dup", "name": "dup", "pid": 7, "tid": 8, "ts": 2, "dur": 1},
  {"ph": "X", "cat": "cpu_op", "name": "big", "pid": 7, "tid": 8, "ts": 12345678901234567890, "dur": 1e2},
  {"ph": "X", "cat": "cpu_op", "name": "bad\u12", "pid": 7, "tid": 8, "ts": 3, "dur": 1},
  {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1, "dur": 1000},
  [1, 2],
  null,
  {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 1700000000070, "dur": 2, "args": {"correlation": 101, "stream": 7, "device": 0}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 1700000000040, "dur": 30, "args": {"External id": 1}},
  {"ph": "X", "cat": "overhead", "name": "Buffer Request", "pid": 7, "tid": 8, "ts": 4, "dur": 1},
  {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 7, "tid": 8, "ts": 1700000000010.250, "dur": 30, "args": {"External id": 3}}
  ],
  "traceName": "t.json",
  "displayTimeUnit": "ms"
}"#;

    fn read_with(buf: &[u8], block_bytes: usize) -> String {
        let mut p = Profile::default();
        let mut w = Vec::new();
        let r = read_blocks(buf, &|_, _| {}, block_bytes, &mut p, &mut w);
        format!("{r:?}\n{w:?}\n{p:?}")
    }

    /// Cutting the events into blocks, however small, gives exactly the result of one
    /// sequential pass: on the whole trace, on every prefix (truncation), with the
    /// newlines removed (no block guesses), and with bytes broken here and there.
    #[test]
    fn blocks_do_not_change_the_result() {
        let whole = TRACE.as_bytes().to_vec();
        let minified: Vec<u8> = whole.iter().copied().filter(|&c| c != b'\n').collect();
        let mut inputs = vec![whole.clone(), minified];
        for cut in (0..whole.len()).step_by(37) {
            inputs.push(whole[..cut].to_vec());
        }
        for (i, junk) in [b"\"", b"{", b"}", b"]", b",", b"\\"].iter().enumerate() {
            let at = 300 + i * 401;
            let mut v = whole.clone();
            v.splice(at..at, junk.iter().copied());
            inputs.push(v);
        }
        for input in &inputs {
            let one = read_with(input, usize::MAX);
            for block in [1, 2, 5, 13, 64, 333] {
                assert_eq!(
                    read_with(input, block),
                    one,
                    "block {block}, input of {} bytes",
                    input.len()
                );
            }
        }
    }

    #[test]
    fn trace_reads_as_expected() {
        let mut p = Profile::default();
        let mut w = Vec::new();
        read(TRACE.as_bytes(), &mut p, &mut w).unwrap();
        // "big" starts 1.2e19 µs after the epoch: out of range, counted, not kept.
        assert_eq!(p.ops.len(), 4, "{:?}", p.ops);
        assert_eq!(p.gpu.len(), 3);
        assert_eq!(p.gpu[0].launch, None); // the memcpy, first by time
        assert_eq!(p.gpu[1].launch.as_ref().unwrap().grid, [120, 1, 1]);
        assert_eq!(&*p.gpu[1].name, "ampere_sgemm_A");
        let triton = p.gpu[2].launch.as_ref().unwrap();
        assert_eq!((triton.grid, triton.block), ([1, 1, 1], [128, 1, 1]));
        assert_eq!(p.python_frames.len(), 1);
        // The JSON escape decodes to a tab, which the reader keeps escaped (text::clean).
        assert_eq!(&*p.python_frames[0].name, "train.py(40): step\\u{9}tab");
        assert_eq!(p.threads[0].name, "main \"thread\"");
        let mm = p.ops.iter().find(|o| &*o.name == "aten::mm").unwrap();
        assert_eq!(mm.input_dims.as_deref(), Some("[[64, 128], [128, 256]]"));
        assert_eq!(mm.ts_ns, 1_700_000_000_010_250);
        let count = |name: &str| {
            p.counters
                .counters
                .iter()
                .find(|c| c.name == name)
                .map_or(0, |c| c.count)
        };
        // A repeated field, a bad escape, an array and a null.
        assert_eq!(count("unparseable_event"), 4);
        assert_eq!(count("malformed_event"), 1);
        assert_eq!(count("negative_duration"), 1);
        assert_eq!(count("time_out_of_range"), 1);
        assert_eq!(count("escaped_string"), 1);
        assert_eq!(count("flow_event"), 2);
    }
}

#[cfg(test)]
mod micros_tests {
    use super::decimal_us_to_ns;

    #[test]
    fn exact_nanoseconds() {
        assert_eq!(
            decimal_us_to_ns("1712195495519689.125"),
            Some(1_712_195_495_519_689_125)
        );
        assert_eq!(
            decimal_us_to_ns("1661938466265032"),
            Some(1_661_938_466_265_032_000)
        );
        assert_eq!(
            decimal_us_to_ns("5089384261670.117"),
            Some(5_089_384_261_670_117)
        );
        assert_eq!(decimal_us_to_ns("0.7675"), Some(768));
        assert_eq!(decimal_us_to_ns("12.3"), Some(12_300));
        assert_eq!(decimal_us_to_ns("-3.5"), Some(-3_500));
        assert_eq!(decimal_us_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(decimal_us_to_ns("x"), None);
        assert_eq!(decimal_us_to_ns(""), None);
    }
}
