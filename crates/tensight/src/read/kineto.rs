//! Kineto (PyTorch profiler) Chrome-trace JSON reader.
//!
//! Input: the bytes of a trace (`{"traceEvents": [...], "deviceProperties": ...}` or a
//! bare event array). Output: an unfinished [`Profile`] (events pushed in file order;
//! [`crate::model::finish`] sorts and links them).
//!
//! The top-level object is walked with the tokenizer in [`super::scan`]; the event array
//! is cut into per-event byte ranges, which are parsed in parallel chunks with serde
//! into borrowed structs (only the fields diagnosis needs; the rest is skipped) and
//! merged in file order. No document tree is ever built. Events that cannot be used
//! are counted in [`ImportCounters`], never silently dropped. A trace cut short keeps
//! every whole event before the cut and reports the byte offset.

use super::scan::{self, Truncated};
use crate::model::{
    classify_runtime, parse_memcpy_name, CounterSeverity, CpuOp, DeviceProps, DistributedInfo,
    GpuActivity, GpuAnnotation, GpuKind, GpuSync, ImportCounters, LaunchInfo, MemoryEvent, Name,
    OpKind, Process, Profile, PyFrame, RuntimeCall, RuntimeKind, Thread,
};
use rayon::prelude::*;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Events parsed per parallel work item.
const CHUNK_EVENTS: usize = 8192;

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
    let start = scan::skip_ws(buf, 0);
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut top: Vec<(String, &[u8])> = Vec::new();
    let mut truncated: Option<usize> = None;
    match buf.get(start) {
        Some(b'[') => {
            if let Err(Truncated(at)) = scan::array_elements(buf, start, &mut ranges) {
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
                    return Some(scan::array_elements(buf, m.start, &mut ranges));
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
        warnings.push(format!(
            "the trace is truncated at byte {at} of {}: read the {} whole events before it",
            buf.len(),
            ranges.len()
        ));
        profile.counters.add(
            "truncated_trace",
            CounterSeverity::DataLoss,
            "the trace ends mid-way (profiler killed while writing?); events after the cut are missing",
            1,
        );
    }
    read_top_level(&top, profile);

    let chunks: Vec<Chunk> = ranges
        .par_chunks(CHUNK_EVENTS)
        .map(|c| parse_chunk(buf, c))
        .collect();
    let mut procs: HashMap<i64, Process> = HashMap::new();
    for c in chunks {
        profile.ops.extend(c.ops);
        profile.python_frames.extend(c.frames);
        profile.gpu.extend(c.gpu);
        profile.gpu_annotations.extend(c.gpu_annotations);
        profile.gpu_syncs.extend(c.gpu_syncs);
        profile.runtime.extend(c.runtime);
        profile.memory.extend(c.memory);
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
            "traceName" => p.meta.trace_name = v.as_str().map(str::to_string),
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
                    backend: v.get("backend").and_then(Value::as_str).map(str::to_string),
                    rank: v.get("rank").and_then(Value::as_i64),
                    world_size: v.get("world_size").and_then(Value::as_i64),
                    nccl_version: v
                        .get("nccl_version")
                        .and_then(Value::as_str)
                        .map(str::to_string),
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
        name: v
            .get("name")
            .and_then(|x| x.as_str())
            .unwrap_or("")
            .to_string(),
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
struct Num(f64);

/// A pid/tid: a number, or a label (Kineto writes "Spans", "Traces", ROCm "0x0").
#[derive(Clone, Copy, Debug)]
enum Id {
    Int(i64),
    Label,
}

struct NumVisitor;
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

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    pid: Option<Id>,
    #[serde(default)]
    tid: Option<Id>,
    #[serde(default)]
    ts: Option<Num>,
    #[serde(default)]
    dur: Option<Num>,
    #[serde(borrow, default)]
    args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(rename = "External id", default)]
    external_id: Option<Num>,
    #[serde(default)]
    correlation: Option<Num>,
    #[serde(rename = "Record function id", default)]
    rf_id: Option<Num>,
    #[serde(rename = "Sequence number", default)]
    seq: Option<Num>,
    #[serde(default)]
    device: Option<Num>,
    #[serde(default)]
    stream: Option<Num>,
    #[serde(default)]
    bytes: Option<Num>,
    #[serde(default)]
    size: Option<Num>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    grid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    block: Option<&'a RawValue>,
    #[serde(rename = "registers per thread", default)]
    regs: Option<Num>,
    #[serde(rename = "shared memory", default)]
    smem: Option<Num>,
    #[serde(rename = "blocks per SM", default)]
    blocks_per_sm: Option<Num>,
    #[serde(rename = "warps per SM", default)]
    warps_per_sm: Option<Num>,
    #[serde(rename = "est. achieved occupancy %", default)]
    occupancy: Option<Num>,
    #[serde(rename = "Input Dims", borrow, default)]
    input_dims: Option<&'a RawValue>,
    #[serde(rename = "Input type", borrow, default)]
    input_types: Option<&'a RawValue>,
    #[serde(rename = "Input Strides", borrow, default)]
    input_strides: Option<&'a RawValue>,
    #[serde(rename = "Concrete Inputs", borrow, default)]
    concrete_inputs: Option<&'a RawValue>,
    #[serde(rename = "Call stack", borrow, default)]
    call_stack: Option<Cow<'a, str>>,
    #[serde(rename = "Bytes", default)]
    mem_bytes: Option<Num>,
    #[serde(rename = "Total Allocated", default)]
    total_allocated: Option<Num>,
    #[serde(rename = "Total Reserved", default)]
    total_reserved: Option<Num>,
    #[serde(rename = "Device Type", default)]
    device_type: Option<Num>,
    #[serde(rename = "Device Id", default)]
    device_id: Option<Num>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    labels: Option<Cow<'a, str>>,
}

#[derive(Default)]
struct Chunk {
    ops: Vec<CpuOp>,
    frames: Vec<PyFrame>,
    gpu: Vec<GpuActivity>,
    gpu_annotations: Vec<GpuAnnotation>,
    gpu_syncs: Vec<GpuSync>,
    runtime: Vec<RuntimeCall>,
    memory: Vec<MemoryEvent>,
    threads: Vec<Thread>,
    procs: Vec<(i64, Option<String>, Option<String>)>,
    counters: ImportCounters,
    rocm: bool,
}

#[derive(Default)]
struct Interner(HashMap<String, Name>);

impl Interner {
    fn get(&mut self, s: &str) -> Name {
        if let Some(n) = self.0.get(s) {
            return n.clone();
        }
        let n: Name = Arc::from(s);
        self.0.insert(s.to_string(), n.clone());
        n
    }
}

fn us_to_ns(us: f64) -> i64 {
    (us * 1000.0).round() as i64
}

fn raw_box(r: Option<&RawValue>) -> Option<Box<str>> {
    r.map(|r| Box::from(r.get()))
}

fn parse_chunk(buf: &[u8], ranges: &[(usize, usize)]) -> Chunk {
    let mut c = Chunk::default();
    let mut names = Interner::default();
    for &(s, e) in ranges {
        match serde_json::from_slice::<RawEvent>(&buf[s..e]) {
            Ok(ev) => add_event(ev, &mut c, &mut names),
            Err(_) => c.counters.add(
                "unparseable_event",
                CounterSeverity::DataLoss,
                "events that are not valid JSON objects of the Chrome trace format; skipped",
                1,
            ),
        }
    }
    c
}

const MALFORMED: &str = "events without a usable pid, tid, ts or dur; skipped";

fn add_event(ev: RawEvent, c: &mut Chunk, names: &mut Interner) {
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
        .map(str::to_string);
    match ev.name.as_deref() {
        Some("process_name") => c.procs.push((pid, arg_name, None)),
        Some("process_labels") => {
            let l = ev
                .args
                .as_ref()
                .and_then(|a| a.labels.as_deref())
                .map(str::to_string);
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
    let (Some(ts), Some(a)) = (ev.ts.and_then(Num::get), ev.args.as_ref()) else {
        c.counters
            .add("malformed_event", CounterSeverity::DataLoss, MALFORMED, 1);
        return;
    };
    let tid = match ev.tid {
        Some(Id::Int(t)) => t,
        _ => 0,
    };
    c.memory.push(MemoryEvent {
        ts_ns: us_to_ns(ts),
        bytes: a.mem_bytes.and_then(Num::int).unwrap_or(0),
        total_allocated_bytes: a.total_allocated.and_then(Num::int),
        total_reserved_bytes: a.total_reserved.and_then(Num::int),
        device_type: a.device_type.and_then(Num::int).unwrap_or(0),
        device_id: a.device_id.and_then(Num::int).unwrap_or(0),
        tid,
    });
}

fn add_complete(ev: RawEvent, c: &mut Chunk, names: &mut Interner) {
    let cat = ev.cat.as_deref().unwrap_or("");
    let cat_l = cat.to_ascii_lowercase();
    if cat_l == "trace" {
        return; // the profiler's own span
    }
    let (Some(Id::Int(pid)), Some(Id::Int(tid)), Some(ts)) =
        (ev.pid, ev.tid, ev.ts.and_then(Num::get))
    else {
        c.counters
            .add("malformed_event", CounterSeverity::DataLoss, MALFORMED, 1);
        return;
    };
    let mut dur = ev.dur.and_then(Num::get).unwrap_or(0.0);
    if dur < 0.0 {
        c.counters.add(
            "negative_duration",
            CounterSeverity::DataLoss,
            "events with a negative duration; treated as zero-length",
            1,
        );
        dur = 0.0;
    }
    let ts_ns = us_to_ns(ts);
    let dur_ns = us_to_ns(dur);
    let name = names.get(ev.name.as_deref().unwrap_or(""));
    let args = ev.args.unwrap_or_default();
    let ext = args.external_id.and_then(Num::int);
    let corr = args.correlation.and_then(Num::int);
    match cat_l.as_str() {
        "cpu_op" | "operator" | "user_annotation" => {
            let kind = if cat_l == "user_annotation" {
                OpKind::Annotation
            } else {
                OpKind::Op
            };
            c.ops.push(CpuOp {
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
                input_dims: raw_box(args.input_dims),
                input_types: raw_box(args.input_types),
                input_strides: raw_box(args.input_strides),
                concrete_inputs: raw_box(args.concrete_inputs),
                call_stack: args
                    .call_stack
                    .filter(|s| !s.is_empty())
                    .map(|s| Box::from(s.as_ref())),
            })
        }
        "python_function" => c.frames.push(PyFrame {
            name,
            pid,
            tid,
            ts_ns,
            dur_ns,
            parent: None,
            depth: 0,
        }),
        "kernel" | "gpu_memcpy" | "memcpy" | "gpu_memset" | "memset" => {
            let device = args.device.and_then(Num::int).unwrap_or(pid);
            let stream = args.stream.and_then(Num::int).unwrap_or(tid);
            let kind = match cat_l.as_str() {
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
fn dims3(v: Option<&RawValue>) -> [u32; 3] {
    let mut out = [1u32; 3];
    if let Some(v) = v.and_then(|r| serde_json::from_str::<Vec<Num>>(r.get()).ok()) {
        for (o, n) in out.iter_mut().zip(v) {
            *o = n.int().unwrap_or(1).clamp(0, u32::MAX as i64) as u32;
        }
    }
    out
}
