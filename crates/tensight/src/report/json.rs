//! JSON report. This module doc is the schema; `schema_version` changes its major
//! number when a field is removed or changes meaning, its minor number when fields
//! are added.
//!
//! ```text
//! {
//!   "schema_version": "1.7",
//!   "tensight_version": "0.1.0",
//!   "input": str,                              // path as given
//!   "bundle": {                                // since 1.1; null unless a bundle was read
//!     "dir": str, "format_version": str,       // the manifest of `tensight run`
//!     "tensight_version", "python_version", "torch_version", "cuda_version": str|null,
//!     "device": { "name": str, "total_memory_bytes": int|null,
//!                 "capability": [int, int]|null, "multi_processor_count": int|null } | null,
//!     "command": [str], "cwd": str|null,
//!     "step_detection": "optimizer"|"forward"|"loop"|"whole_program"|null,
//!     "step_loop": str|null,                   // since 1.6: `bench.py(12) in main`
//!     "warmup_steps", "steps_requested", "steps_recorded": int|null,
//!     "options": {...},                        // collector options, as written
//!     "program": { "status": "completed"|"crashed"|"running"|str,
//!                  "exit_code": int|null, "error": str|null },
//!     "files": { "trace", "detail", "execution_trace", "ncu": str|null },  // relative
//!                                              // to dir; detail since 1.6
//!     "timing": { "step_ms_unprofiled": [float], "step_ms_profiled": [float],
//!                 "step_ms_unprofiled_gpu": [float] },  // _gpu since 1.3
//!     "hardware": { "status": "recorded"|"skipped"|"failed", "reason": str|null,
//!                   "step", "kernels": int|null, "launches": str|null,  // since 1.5
//!                   "op_calls", "op_repeats": int|null, "wall_s": float|null } | null
//!   } | null,
//!   "detail": { "step": str,                   // since 1.6; null without a detail step:
//!               "steps_carried", "steps": int, // its stacks, shapes and allocator
//!               "ops_matched_pct": float,      // events carried to the timed steps
//!               "frames", "shapes", "memory_events": int } | null,
//!   "execution_trace": { "source": str, "schema": str,   // since 1.1; null without one
//!                        "nodes": int, "linked": int,   // nodes linked to a Kineto op
//!                        "tensors": int } | null,       // tensor arguments recorded
//!   "hardware": { "source": str, "rows": int,     // since 1.5; null without ncu data
//!                 "signatures": int,             // distinct (kernel, grid, block) rows
//!                 "aligned_step": str|null, "step_kernels": int,
//!                 "rows_matched", "rows_unmatched": int,
//!                 "trace_kernels": int, "kernels_with_counters": int,
//!                 "by_signature": int,           // counters from a same-signature row,
//!                 "by_signature_other_shapes": int } | null,  // of it: op shapes differ
//!   "trace": { "json_bytes": int, "schema_version": int|null, "trace_name": str|null,
//!              "rocm": bool, "record_shapes": bool|null, "with_stack": bool|null,
//!              "profile_memory": bool|null, "cuda_runtime_version": int|null },
//!   "device": { "name": str, "num_sms": int, "memory_bytes": int,
//!               "ceilings": {fp32_tflops, tf32_tflops, bf16_tflops, fp16_tflops,
//!                            fp8_tflops|null, mem_bw_gbs, source}|null } | null,
//!   "distributed": { "backend", "rank", "world_size", "nccl_version" } | null,
//!   "summary": { "steps": int, "step_source": str,
//!                "step_time_ms": float,        // mean step wall time
//!                "step_time_median_ms": float, "total_time_ms": float,
//!                "gpu_busy_pct": float,        // union of GPU activity / wall time
//!                "gpu_busy_ms_per_step": float,
//!                "gpu_idle_ms_per_step": { "total", "cpu", "sync", "transfer", "data_loader" },
//!                "kernels": int,               // kernels starting inside the steps
//!                "kernels_per_step": float,
//!                "h2d_count": int, "h2d_bytes": int, "h2d_pageable": int,
//!                "d2h_count": int, "d2h_bytes": int, "d2h_pageable": int,
//!                "d2d_count": int, "d2d_bytes": int, "syncs": int },
//!   "steps": [ { "name", "start_ms" (from the first step), "dur_ms", "gpu_busy_ms",
//!                "gpu_busy_pct", "kernels", "kernel_ms", "h2d_count", "h2d_bytes",
//!                "d2h_count", "d2h_bytes", "memsets",
//!                "gpu_idle_ms": { "total", "cpu", "sync", "transfer", "data_loader" } } ],
//!   "kernels": { "count", "total_ms", "median_us", "under_10us_pct",
//!                "under_10us_time_pct", "distinct",
//!                "histogram": [ { "label", "count", "total_ms" } ],
//!                "top": [ { "name", "class", "count", "total_ms", "pct", "op" } ] },
//!   "top_ops_gpu": [ { "name", "count", "gpu_ms", "cpu_ms" } ],
//!   "top_ops_cpu": [ { "name", "count", "gpu_ms", "cpu_ms" } ],
//!   "syncs": [ { "api", "op", "source", "step", "dur_ms", "gpu_idle_after_ms" } ],
//!   "held_back": [ { "what": str,              // since 1.6: host-caused GPU idle by
//!                    "ms_per_step": float } ],   // what held the next launch back
//!   "syncs_outside": [ { "api", "op", "source",  // since 1.6: the program's syncs
//!                        "position": "before"|"after",  // outside every step's host
//!                        "dur_ms" } ],          // range (timing code, loop edges)
//!   "compute": { "shapes_recorded", "flops", "flop_op_bytes", "total_bytes",
//!                "flop_kernel_ms", "low_precision_flops_pct", "dominant_dtype",
//!                "modelled": true },
//!   "roofline": { "peak_tflops", "bandwidth_gbs", "ceilings_source",
//!                 "ridge_flop_per_byte", "intensity_flop_per_byte", "bound",
//!                 "achieved_tflops", "attainable_tflops", "pct_of_attainable",
//!                 "bandwidth_util_pct", "compute_util_pct" } | null,
//!   "tensors": {                               // since 1.2; null without an execution trace
//!     "modelled": bool,                        // true: no kernel had hardware counters
//!     "window": str,                           // what was attributed (the ET step)
//!     "tensors", "base_tensors", "views": int, // the tensor forest
//!     "storage_splits": int,                   // reused storage ids split into lifetimes
//!     "untracked": int,                        // tensors no recorded op made, on a live base
//!     "attributed_ops": int, "attributed_ms", "unattributed_ms": float,
//!     "bytes": int, "wasted_bytes": int,       // modelled; wasted = excess 32-B sectors
//!     "kernels", "measured_kernels": int,      // since 1.4: kernels attributed, with counters
//!     "measured_bytes", "measured_excess_bytes": float, // since 1.4: ncu sectors × 32 B
//!     "by_traffic": [ Tensor ],                // top 10 base tensors by subtree bytes
//!     "by_wasted": [ Tensor ] } | null,        // top 10 by subtree excess (measured
//!                                              // where measured, else modelled)
//!   "diagnosis": {
//!     "primary_bottleneck": Finding | null,    // largest estimated saving
//!     "bottlenecks": [ Finding ],              // largest saving first
//!     "skipped_rules": [ { "code", "reason" } ],
//!     "unprofiled": {                          // since 1.3; null: savings on the profiled
//!       "profiled_step_ms": float,             // timeline (the profiler slowed the step
//!       "unprofiled_step_ms": float,           // < 1.15×, measured or calibrated)
//!       "source": "cuda_events"|"host_clock"   // how the warm-up steps were timed, or
//!         |"calibration",                      // a plain trace's replay without the
//!                                              // profiler's calibrated cost (2026-12)
//!       "scale": float,                        // every saving_ms was multiplied by it
//!       "host_idle_cap_ms": float } | null,    // L001/C001/S001 capped at this
//!     "deflation": {                           // since 1.6; null: no unprofiled timing
//!       "profiled_step_ms", "unprofiled_step_ms": float,  // or no slowdown; the
//!       "source": str, "events_per_step",      // replayed findings are simulated
//!       "per_event_ns": float } | null,        // without the profiler's cost; source
//!                                              // as unprofiled's, or "host_pace" (1.7:
//!                                              // a GPU-paced step whose host the
//!                                              // profiler slowed; see analysis::inflation)
//!     "all_fixes": {                           // since 1.6; null: fewer than two simulated
//!       "saving_ms", "saving_pct": float,      // every simulated fix at once (the causal
//!       "findings": [str],                     // model's replay), the codes combined,
//!       "not_simulated": int } | null },       // findings whose saving is not replayed
//!   "import": { "warnings": [str],
//!               "counters": [ { "name", "severity", "description", "count" } ] }
//! }
//! Finding = { "code", "rule", "category", "title", "message", "severity",
//!             "saving_ms", "saving_pct", "estimate",
//!             "marginal_ms"?,                   // since 1.6: saving once the larger
//!                                               // simulated findings are fixed
//!             "evidence": [ { "label", "value" } ], "explanation",
//!             "fixes": [str], "locations": [ { "op"?, "kernel"?, "tensor"?, "source"? } ] }
//! Tensor = { "tensor_id", "storage_id": int, "device", "dtype": str, "shape", "strides": [int],
//!            "offset", "numel": int,
//!            "layout": "contiguous"|"channels_last"|"transposed"|"strided"|"expanded"
//!                      |"overlapping"|"unknown",
//!            "relation": "base"|"view"|"alias"|"untracked",
//!            "created_by": { "op": str, "et_node": int, "source": str|null } | null,
//!            "first_use", "last_use": int,      // execution-trace node ids
//!            "traffic": Traffic,                // through this tensor
//!            "subtree": Traffic,                // through it and its views
//!            "views": [ Tensor ] }
//! Traffic = { "accesses", "bytes", "ideal_bytes", "wasted_bytes": int, "time_ms": float,
//!             "measured_accesses": int,                      // since 1.4 (hardware pass)
//!             "measured_bytes", "measured_excess_bytes": float,
//!             "efficiency": float|null,          // ideal / measured sectors, 0..1
//!             "long_scoreboard_share": float|null } // of the warp cycles of its kernels
//! ```
//!
//! Since 1.7, a multi-rank input (`tensight analyze DIR` over the ranks of one job,
//! `tensight merge SUMMARIES`) gives another top-level shape, with the same
//! `schema_version`, `tensight_version` and `input`, told apart by its `ranks` key:
//!
//! ```text
//! {
//!   "schema_version": "1.7", "tensight_version": str, "input": str,
//!   "ranks": {
//!     "world_size": int,                       // stated by the traces, else ranks read
//!     "steps": int,                            // compared: the fewest any rank has
//!     "job_step_ms": float,                    // mean of the slowest rank's step
//!     "slowest_rank": int,                     // the most own work per step
//!     "median_own_ms": float,                  // median rank's own work per step
//!     "focus_rank": int,                       // whose own findings are listed
//!     "per_rank": [ {                          // by rank; per step, means
//!       "rank": int, "source": str, "steps": int,
//!       "step_ms", "busy_pct", "compute_ms", "comm_ms", "comm_pct",
//!       "exposed_comm_ms",                     // communication with no compute under it
//!       "wait_ms",                             // communication beyond the fastest rank's
//!       "own_ms": float,                       // step less waiting
//!       "top_causes": [ { "code", "title": str, "saving_ms": float } ],
//!       "findings": [ Finding ] } ],           // its own diagnosis ([] after merge)
//!     "slowest_excess": [ { "part": "host_gaps"|"compute"|"data_loader"|"sync"
//!                                   |"transfer",
//!                           "label": str, "rank_ms", "others_ms": float } ],
//!     "collectives": { "matched", "unmatched", "host": int,   // host: run by gloo
//!                      "total_ms", "transfer_ms", "wait_ms": float,  // per step, all ranks
//!                      "top": [ { "name", "group", "dtype": str, "bytes": int|null,
//!                                 "host": bool,
//!                                 "per_step", "transfer_ms", "wait_ms": float } ] },
//!     "warnings": [str] },                     // ranks left out, counts that differ
//!   "diagnosis": {
//!     "primary_bottleneck": Finding | null,    // the cross-rank finding saving most
//!     "bottlenecks": [ Finding ],              // cross-rank (category "distributed")
//!     "all_fixes_ms": float | null }           // every replayed cross-rank fix at once
//! }
//! ```

use super::{RanksReport, Report};
use serde_json::{json, Value};

/// Version of the schema above.
pub const SCHEMA_VERSION: &str = "1.7";

/// The report as a JSON value.
pub fn to_value(r: &Report) -> Value {
    serde_json::to_value(Whole::of(r)).unwrap_or(Value::Null)
}

/// The report's object: every field but the two that grow with the trace (a row per step
/// and per sync) as a `Value` tree, those two as typed rows serialized in place. The
/// same JSON as one tree, without building the tree's largest part (a 17 k-step trace's
/// rows were 10 MB of `Value`s).
struct Whole<'a> {
    head: serde_json::Map<String, Value>,
    steps: Vec<StepRow<'a>>,
    syncs: Vec<SyncRow<'a>>,
}

impl<'a> Whole<'a> {
    fn of(r: &'a Report) -> Whole<'a> {
        let m = &r.metrics;
        let first = m.timeline.steps.first().map_or(0, |x| x.start_ns);
        let head = match head(r) {
            Value::Object(o) => o,
            _ => serde_json::Map::new(),
        };
        let steps = m
            .timeline
            .steps
            .iter()
            .map(|st| StepRow {
                name: &st.name,
                start_ms: ms(st.start_ns - first),
                dur_ms: ms(st.dur_ns),
                gpu_busy_ms: ms(st.gpu_busy_ns),
                gpu_busy_pct: if st.dur_ns > 0 {
                    100.0 * st.gpu_busy_ns as f64 / st.dur_ns as f64
                } else {
                    0.0
                },
                kernels: st.kernels,
                kernel_ms: ms(st.kernel_ns),
                h2d_count: st.h2d.count,
                h2d_bytes: st.h2d.bytes,
                d2h_count: st.d2h.count,
                d2h_bytes: st.d2h.bytes,
                memsets: st.memsets,
                gpu_idle_ms: IdleRow::of(&st.idle),
            })
            .collect();
        let syncs = m
            .timeline
            .syncs
            .iter()
            .map(|sp| SyncRow {
                api: &sp.api,
                op: sp.op.map(|o| r.op_name(o)),
                source: sp.op.and_then(|o| r.op_source(o)),
                step: sp.step,
                dur_ms: ms(sp.dur_ns),
                gpu_idle_after_ms: ms(sp.gpu_idle_after_ns),
            })
            .collect();
        Whole { head, steps, syncs }
    }
}

impl serde::Serialize for Whole<'_> {
    /// Keys in sorted order, as a `Value` object writes them.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut keys: Vec<&str> = self.head.keys().map(String::as_str).collect();
        keys.extend(["steps", "syncs"]);
        keys.sort_unstable();
        let mut map = s.serialize_map(Some(keys.len()))?;
        for k in keys {
            match k {
                "steps" => map.serialize_entry(k, &self.steps)?,
                "syncs" => map.serialize_entry(k, &self.syncs)?,
                _ => map.serialize_entry(k, &self.head[k])?,
            }
        }
        map.end()
    }
}

/// One row of `steps` (fields in key order: the JSON is the same as a `Value` object's).
#[derive(serde::Serialize)]
struct StepRow<'a> {
    d2h_bytes: u64,
    d2h_count: u64,
    dur_ms: f64,
    gpu_busy_ms: f64,
    gpu_busy_pct: f64,
    gpu_idle_ms: IdleRow,
    h2d_bytes: u64,
    h2d_count: u64,
    kernel_ms: f64,
    kernels: u64,
    memsets: u64,
    name: &'a str,
    start_ms: f64,
}

/// A step's idle parts, ms (fields in key order).
#[derive(serde::Serialize)]
struct IdleRow {
    cpu: f64,
    data_loader: f64,
    sync: f64,
    total: f64,
    transfer: f64,
}

impl IdleRow {
    fn of(i: &crate::analysis::IdleBreakdown) -> IdleRow {
        IdleRow {
            cpu: ms(i.cpu_ns),
            data_loader: ms(i.data_loader_ns),
            sync: ms(i.sync_ns),
            total: ms(i.total_ns),
            transfer: ms(i.transfer_ns),
        }
    }
}

/// One row of `syncs` (fields in key order).
#[derive(serde::Serialize)]
struct SyncRow<'a> {
    api: &'a str,
    dur_ms: f64,
    gpu_idle_after_ms: f64,
    op: Option<String>,
    source: Option<String>,
    step: usize,
}

/// Nanoseconds as milliseconds, the JSON report's unit.
fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// Every field of the report but `steps` and `syncs` ([`Whole`]).
fn head(r: &Report) -> Value {
    let m = &r.metrics;
    let s = &m.summary;
    let primary = r
        .diagnosis
        .primary
        .and_then(|c| r.diagnosis.findings.iter().find(|f| f.code == c));
    json!({
        "schema_version": SCHEMA_VERSION,
        "tensight_version": env!("CARGO_PKG_VERSION"),
        "input": r.input,
        "bundle": r.profile.bundle,
        "detail": r.profile.detail,
        "execution_trace": r.profile.execution_trace.as_ref().map(|et| json!({
            "source": et.source,
            "schema": et.schema,
            "nodes": et.nodes.len(),
            "linked": et.linked,
            "tensors": et.tensor_count(),
        })),
        "hardware": r.profile.hardware.as_ref().map(|hw| {
            let a = &hw.alignment;
            json!({
                "source": hw.source,
                "rows": hw.kernels.len(),
                "signatures": hw.signatures,
                "aligned_step": a.step,
                "step_kernels": a.trace_kernels,
                "rows_matched": a.matched,
                "rows_unmatched": a.unmatched_rows,
                "trace_kernels": a.all_trace_kernels,
                "kernels_with_counters": a.with_counters,
                "by_signature": a.applied_by_signature,
                "by_signature_other_shapes": a.applied_other_shapes,
            })
        }),
        "trace": {
            "json_bytes": r.profile.meta.json_bytes,
            "schema_version": r.profile.meta.schema_version,
            "trace_name": r.profile.meta.trace_name,
            "rocm": r.profile.meta.rocm,
            "record_shapes": r.profile.meta.record_shapes,
            "with_stack": r.profile.meta.with_stack,
            "profile_memory": r.profile.meta.profile_memory,
            "cuda_runtime_version": r.profile.meta.cuda_runtime_version,
        },
        "device": m.device,
        "distributed": r.profile.meta.distributed,
        "summary": {
            "steps": s.steps,
            "step_source": s.step_source,
            "step_time_ms": s.step_time_ms,
            "step_time_median_ms": s.step_time_median_ms,
            "total_time_ms": s.total_time_ms,
            "gpu_busy_pct": s.gpu_busy_pct,
            "gpu_busy_ms_per_step": s.gpu_busy_ms_per_step,
            "gpu_idle_ms_per_step": s.idle_ms_per_step,
            "kernels": s.kernels,
            "kernels_per_step": s.kernels_per_step,
            "h2d_count": s.h2d.count, "h2d_bytes": s.h2d.bytes, "h2d_pageable": s.h2d.pageable,
            "d2h_count": s.d2h.count, "d2h_bytes": s.d2h.bytes, "d2h_pageable": s.d2h.pageable,
            "d2d_count": s.d2d.count, "d2d_bytes": s.d2d.bytes,
            "syncs": s.syncs,
        },
        "kernels": {
            "count": m.kernels.count,
            "total_ms": ms(m.kernels.total_ns),
            "median_us": m.kernels.median_ns as f64 / 1e3,
            "under_10us_pct": m.kernels.under_10us_pct,
            "under_10us_time_pct": m.kernels.under_10us_time_pct,
            "distinct": m.kernels.distinct,
            "histogram": m.kernels.histogram.iter().map(|b| json!({
                "label": b.label, "count": b.count, "total_ms": ms(b.total_ns)})).collect::<Vec<_>>(),
            "top": m.kernels.top.iter().map(|k| json!({
                "name": k.name, "class": k.class, "count": k.count,
                "total_ms": ms(k.total_ns), "pct": k.pct, "op": k.op})).collect::<Vec<_>>(),
        },
        "top_ops_gpu": op_rows(&m.top_ops_gpu),
        "top_ops_cpu": op_rows(&m.top_ops_cpu),
        "held_back": m.held_back,
        "syncs_outside": m.timeline.syncs_outside.iter().map(|sp| json!({
            "api": sp.api,
            "op": sp.op.map(|o| r.op_name(o)),
            "source": sp.op.and_then(|o| r.op_source(o)),
            "position": sp.position,
            "dur_ms": ms(sp.dur_ns),
        })).collect::<Vec<_>>(),
        "compute": {
            "shapes_recorded": m.compute.shapes_recorded,
            "flops": m.compute.flops,
            "flop_op_bytes": m.compute.flop_op_bytes,
            "total_bytes": m.compute.total_bytes,
            "flop_kernel_ms": ms(m.compute.flop_kernel_ns),
            "low_precision_flops_pct": m.compute.low_precision_flops_pct,
            "dominant_dtype": m.compute.dominant_dtype,
            "modelled": true,
        },
        "roofline": m.roofline,
        "tensors": m.tensors.as_ref().map(|f| super::forest::summary_json(f, 10)),
        "diagnosis": {
            "primary_bottleneck": primary,
            "bottlenecks": r.diagnosis.findings,
            "skipped_rules": r.diagnosis.skipped,
            "unprofiled": r.diagnosis.unprofiled,
            "deflation": r.diagnosis.deflation,
            "all_fixes": r.diagnosis.all_fixes,
        },
        "import": {
            "warnings": r.warnings,
            "counters": r.profile.counters.counters,
        },
    })
}

fn op_rows(v: &[crate::analysis::OpTime]) -> Vec<Value> {
    v.iter()
        .map(|o| json!({"name": o.name, "count": o.count, "gpu_ms": o.gpu_ns as f64 / 1e6, "cpu_ms": o.cpu_ns as f64 / 1e6}))
        .collect()
}

/// The report as pretty-printed JSON text (with a final newline).
pub fn render(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(&Whole::of(r))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// The multi-rank report as a JSON value (the second shape above).
pub fn ranks_to_value(r: &RanksReport) -> Value {
    let a = &r.analysis;
    let per_rank: Vec<Value> = a
        .ranks
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut v = serde_json::to_value(row).unwrap_or(Value::Null);
            let findings = r
                .per_rank
                .get(i)
                .map(|rep| serde_json::to_value(&rep.diagnosis.findings).unwrap_or(Value::Null))
                .unwrap_or_else(|| json!([]));
            if let Value::Object(m) = &mut v {
                m.insert("findings".into(), findings);
            }
            v
        })
        .collect();
    json!({
        "schema_version": SCHEMA_VERSION,
        "tensight_version": env!("CARGO_PKG_VERSION"),
        "input": r.input,
        "ranks": {
            "world_size": a.world_size,
            "steps": a.steps,
            "job_step_ms": a.job_step_ms,
            "slowest_rank": a.slowest_rank,
            "median_own_ms": a.median_own_ms,
            "focus_rank": r.focus_rank,
            "per_rank": per_rank,
            "slowest_excess": a.slowest_excess,
            "collectives": a.collectives,
            "warnings": r.warnings,
        },
        "diagnosis": {
            "primary_bottleneck": r.diagnosis.findings.iter().find(|f| f.saving_ms > 0.0),
            "bottlenecks": r.diagnosis.findings,
            "all_fixes_ms": r.diagnosis.all_fixes_ms,
        },
    })
}

/// Render the multi-rank report as pretty JSON.
pub fn render_ranks(r: &RanksReport) -> String {
    let mut s = serde_json::to_string_pretty(&ranks_to_value(r))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
