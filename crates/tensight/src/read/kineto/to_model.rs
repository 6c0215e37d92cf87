//! Event → model: one raw event into the model structs of its block.
//!
//! Input: a [`RawEvent`] (borrowed fields of one trace event). Output: a [`CpuOp`],
//! [`PyFrame`], [`GpuActivity`], [`RuntimeCall`], ... pushed to the block's [`Chunk`],
//! or a named import counter when the event is skipped. This is where each trace
//! field (`args` included) is mapped to a model field; parsing and scheduling are
//! elsewhere.

use super::chunk::Chunk;
use super::intern::{kept, raw_box, Interner};
use super::raw::{Id, Micros, Num, RawArgs, RawEvent};
use super::scan;
use super::TENSIGHT_CATEGORY;
use crate::model::{
    classify_runtime, parse_memcpy_name, CounterSeverity, CpuOp, GpuActivity, GpuAnnotation,
    GpuKind, GpuSync, LaunchInfo, MemoryEvent, Name, OpKind, PyFrame, RuntimeCall, RuntimeKind,
    Thread,
};

const MALFORMED: &str = "events without a usable pid, tid, ts or dur; skipped";

pub(super) fn add_event<'a>(ev: &RawEvent<'a>, c: &mut Chunk, names: &mut Interner<'a, '_>) {
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

fn add_metadata(ev: &RawEvent, c: &mut Chunk) {
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

fn add_memory(ev: &RawEvent, c: &mut Chunk) {
    let (Some(ts), Some(a)) = (ev.ts.and_then(Micros::get), ev.args.as_ref()) else {
        c.counters
            .add("malformed_event", CounterSeverity::DataLoss, MALFORMED, 1);
        return;
    };
    if !crate::read::limits::time_ok(ts, 0) {
        let (name, what) = crate::read::limits::TIME_OUT_OF_RANGE;
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

fn add_complete<'a>(ev: &RawEvent<'a>, c: &mut Chunk, names: &mut Interner<'a, '_>) {
    let cat = ev.cat.as_deref().unwrap_or("");
    // Categories as written are lower case but for a few writers ("Kernel"): those
    // are lower-cased on the stack (they are short; this runs for every event).
    let mut lower = [0u8; 32];
    let long;
    let cat_l: &str = if !cat.bytes().any(|b| b.is_ascii_uppercase()) {
        cat
    } else if cat.len() <= lower.len() {
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
    if !crate::read::limits::time_ok(ts, dur_ns) {
        let (name, what) = crate::read::limits::TIME_OUT_OF_RANGE;
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
            let span = Span {
                name,
                pid,
                tid,
                ts_ns,
                dur_ns,
                ext,
            };
            add_op(span, kind, args, c);
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
            let span = Span {
                name,
                pid,
                tid,
                ts_ns,
                dur_ns,
                ext,
            };
            add_gpu(span, cat_l, corr, args, c)
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

/// What every complete event has: its interned name, thread and time.
struct Span {
    name: Name,
    pid: i64,
    tid: i64,
    ts_ns: i64,
    dur_ns: i64,
    /// `args["External id"]`.
    ext: Option<i64>,
}

/// A CPU op or user annotation (`cpu_op`, `operator`, `user_annotation`).
fn add_op(span: Span, kind: OpKind, args: &RawArgs, c: &mut Chunk) {
    let Span {
        name,
        pid,
        tid,
        ts_ns,
        dur_ns,
        ext,
    } = span;
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

/// A GPU activity: a kernel, memcpy or memset.
fn add_gpu(span: Span, cat_l: &str, corr: Option<i64>, args: &RawArgs, c: &mut Chunk) {
    let Span {
        name,
        pid,
        tid,
        ts_ns,
        dur_ns,
        ext,
    } = span;
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
