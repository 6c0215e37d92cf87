//! Analyses: from a [`crate::model::Profile`] to measured metrics per step.
//!
//! Inputs: a finished Profile. Outputs: [`RunMetrics`] (timeline, kernels, ops,
//! transfers, syncs, FLOPs and roofline) that rules and reports read. Everything here
//! is computed from the trace; where a number is modelled rather than measured
//! (FLOPs, minimum bytes, ceilings from a datasheet) the field's doc says so.
//! Totals cover the analysed steps; "per step" figures are totals over the step count.

pub mod devices;
pub mod efficiency;
pub mod flops;
pub mod forest;
pub mod gemm;
pub mod held_back;
pub mod host_code;
pub mod host_work;
pub mod inflation;
pub mod kernels;
pub mod migration;
pub mod op_roofline;
pub mod ranks;

pub mod simulate;
pub mod step_view;
pub mod timeline;
pub mod transfers;
pub mod views;

use crate::model::{GpuKind, OpKind, Profile};
use serde::Serialize;
use std::collections::HashMap;
pub use timeline::{IdleBreakdown, StepMetrics, SyncPoint, Timeline, TransferStats};

/// Everything measured about the analysed steps.
#[derive(Debug, Clone, Serialize)]
pub struct RunMetrics {
    /// The GPU the run used most, when the trace names one.
    pub device: Option<DeviceSummary>,
    /// Headline figures.
    pub summary: Summary,
    /// Per-step timeline and sync points.
    pub timeline: Timeline,
    /// Kernel statistics over the steps.
    pub kernels: KernelStats,
    /// Top ops by GPU time (kernels attributed to their outermost op), descending.
    pub top_ops_gpu: Vec<OpTime>,
    /// Top ops by host time (outermost ops), descending.
    pub top_ops_cpu: Vec<OpTime>,
    /// FLOPs and bytes modelled from op shapes.
    pub compute: ComputeStats,
    /// The roofline position of the workload, when the device is known.
    pub roofline: Option<Roofline>,
    /// The tensor forest of the execution trace with modelled traffic per tensor
    /// (`None` without an execution trace).
    pub tensors: Option<forest::Forest>,
    /// What held the GPU back: host-caused idle by what the host was doing before the
    /// launch that ended it, largest first.
    pub held_back: Vec<held_back::HeldBack>,
    /// Each FLOP-counted op name on the roofline (modelled FLOPs and bytes, its kernels'
    /// time), largest kernel time first: the points of the HTML report's roofline plot.
    pub roofline_points: Vec<op_roofline::RooflinePoint>,
    /// The median step laid out as lanes (host threads, syncs, GPU streams, idle gaps):
    /// the HTML report's timeline. `None` without steps.
    pub step_view: Option<step_view::StepView>,
}

impl RunMetrics {
    /// The device's memory bandwidth, GB/s (bytes per ns), when its ceilings are known.
    pub fn mem_bw_gbs(&self) -> Option<f64> {
        self.device
            .as_ref()
            .and_then(|d| d.ceilings)
            .map(|c| c.mem_bw_gbs)
            .filter(|&b| b > 0.0)
    }

    /// The kernels of the steps grouped by the op `owner` picks for their launching op
    /// (its index, e.g. the scatter or sort op above it), each group in time order.
    pub(crate) fn step_kernels_by(
        &self,
        p: &Profile,
        owner: impl Fn(u32) -> Option<u32>,
    ) -> std::collections::BTreeMap<u32, Vec<u32>> {
        let mut out: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        for &gi in &self.timeline.gpu_in_steps {
            let g = &p.gpu[gi as usize];
            if let Some(o) = g.op.filter(|_| g.is_kernel()).and_then(&owner) {
                out.entry(o).or_default().push(gi);
            }
        }
        out
    }
}

/// The device and its ceilings.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceSummary {
    /// Name from `deviceProperties`.
    pub name: String,
    /// Streaming multiprocessors.
    pub num_sms: u32,
    /// Global memory, bytes.
    pub memory_bytes: u64,
    /// Ceilings used for the roofline (measured where available, else datasheet).
    pub ceilings: Option<devices::Ceilings>,
}

/// Headline figures of the analysed steps.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Steps analysed.
    pub steps: usize,
    /// How they were found.
    pub step_source: String,
    /// Mean step wall time, ms: the denominator of every "% of step".
    pub step_time_ms: f64,
    /// Median step wall time, ms.
    pub step_time_median_ms: f64,
    /// Sum of step wall times, ms.
    pub total_time_ms: f64,
    /// GPU busy (union of activity) over wall time, %.
    pub gpu_busy_pct: f64,
    /// GPU busy per step, ms (mean).
    pub gpu_busy_ms_per_step: f64,
    /// GPU idle per step, ms (mean), by cause.
    pub idle_ms_per_step: IdleMs,
    /// Kernels in the analysed steps.
    pub kernels: u64,
    /// Kernels per step (mean).
    pub kernels_per_step: f64,
    /// Host-to-device copies.
    pub h2d: TransferStats,
    /// Device-to-host copies.
    pub d2h: TransferStats,
    /// Device-to-device copies.
    pub d2d: TransferStats,
    /// Host-blocking syncs in the steps.
    pub syncs: usize,
}

/// GPU idle per step by cause, ms.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct IdleMs {
    /// All idle.
    pub total: f64,
    /// Host not launching.
    pub cpu: f64,
    /// After a blocking sync.
    pub sync: f64,
    /// Host inside memcpy calls.
    pub transfer: f64,
    /// Host inside DataLoader `__next__`.
    pub data_loader: f64,
}

/// Kernel statistics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KernelStats {
    /// Kernels.
    pub count: u64,
    /// Sum of kernel durations, ns.
    pub total_ns: i64,
    /// Median kernel duration, ns.
    pub median_ns: i64,
    /// Duration histogram.
    pub histogram: Vec<Bucket>,
    /// Kernels shorter than 10 µs, % of count.
    pub under_10us_pct: f64,
    /// Time in kernels shorter than 10 µs, % of kernel time.
    pub under_10us_time_pct: f64,
    /// Distinct kernel names.
    pub distinct: usize,
    /// Top kernels by total time.
    pub top: Vec<KernelTime>,
}

/// One histogram bucket.
#[derive(Debug, Clone, Serialize)]
pub struct Bucket {
    /// Label (`<2µs`, `2-5µs`, ...).
    pub label: &'static str,
    /// Upper bound, ns (exclusive; `i64::MAX` for the last).
    pub upper_ns: i64,
    /// Kernels in the bucket.
    pub count: u64,
    /// Their total time, ns.
    pub total_ns: i64,
}

/// A kernel name's totals.
#[derive(Debug, Clone, Serialize)]
pub struct KernelTime {
    /// Kernel name.
    pub name: String,
    /// Launches.
    pub count: u64,
    /// Total time, ns.
    pub total_ns: i64,
    /// % of kernel time.
    pub pct: f64,
    /// Most common launching op (outermost), if linked.
    pub op: Option<String>,
    /// Kind by name.
    pub class: kernels::KernelClass,
}

/// An op name's totals.
#[derive(Debug, Clone, Serialize)]
pub struct OpTime {
    /// Op name.
    pub name: String,
    /// Occurrences.
    pub count: u64,
    /// GPU time of the work it launched, ns.
    pub gpu_ns: i64,
    /// Host time, ns.
    pub cpu_ns: i64,
}

/// FLOPs and bytes modelled from op shapes (`Input Dims`); not measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ComputeStats {
    /// True when the trace recorded shapes (`record_shapes=True`).
    pub shapes_recorded: bool,
    /// FLOPs of GEMM, convolution and attention ops in the steps.
    pub flops: f64,
    /// Minimum bytes those ops must move.
    pub flop_op_bytes: f64,
    /// Minimum bytes of all ops that launched GPU work (elementwise modelled).
    pub total_bytes: f64,
    /// GPU time of kernels launched by FLOP-counted ops, ns.
    pub flop_kernel_ns: i64,
    /// Share of FLOPs in fp16/bf16/fp8, %.
    pub low_precision_flops_pct: f64,
    /// Precision of most FLOPs (`f32`, `bf16`, ...).
    pub dominant_dtype: String,
}

/// Where the workload sits on the roofline.
#[derive(Debug, Clone, Serialize)]
pub struct Roofline {
    /// Peak compute used, TFLOP/s (for the dominant precision).
    pub peak_tflops: f64,
    /// Memory bandwidth used, GB/s.
    pub bandwidth_gbs: f64,
    /// Where the ceilings came from (datasheet or measured).
    pub ceilings_source: String,
    /// Ridge point: peak / bandwidth, FLOP per byte.
    pub ridge_flop_per_byte: f64,
    /// Arithmetic intensity of the step: FLOPs / modelled bytes.
    pub intensity_flop_per_byte: f64,
    /// `memory` or `compute`.
    pub bound: &'static str,
    /// Achieved FLOP rate over GPU busy time, TFLOP/s.
    pub achieved_tflops: f64,
    /// Attainable at this intensity: min(peak, intensity × bandwidth), TFLOP/s.
    pub attainable_tflops: f64,
    /// Achieved / attainable, %.
    pub pct_of_attainable: f64,
    /// Modelled bytes over GPU busy time / bandwidth, %.
    pub bandwidth_util_pct: f64,
    /// Achieved / peak compute, %.
    pub compute_util_pct: f64,
}

const BUCKETS: [(&str, i64); 8] = [
    ("<2µs", 2_000),
    ("2-5µs", 5_000),
    ("5-10µs", 10_000),
    ("10-20µs", 20_000),
    ("20-50µs", 50_000),
    ("50-100µs", 100_000),
    ("0.1-1ms", 1_000_000),
    (">1ms", i64::MAX),
];

/// Run every analysis.
pub fn analyze(p: &Profile) -> RunMetrics {
    let timeline = timeline::timeline(p);
    let n = timeline.steps.len().max(1) as f64;
    let ms = |ns: i64| ns as f64 / 1e6;

    let mut summary = Summary {
        steps: timeline.steps.len(),
        step_source: p.step_source.describe(),
        syncs: timeline.syncs.len(),
        ..Default::default()
    };
    let mut durs: Vec<i64> = timeline.steps.iter().map(|s| s.dur_ns).collect();
    let total: i64 = durs.iter().sum();
    let busy: i64 = timeline.steps.iter().map(|s| s.gpu_busy_ns).sum();
    let mut idle = IdleBreakdown::default();
    for s in &timeline.steps {
        summary.kernels += s.kernels;
        add_transfers(&mut summary.h2d, &s.h2d);
        add_transfers(&mut summary.d2h, &s.d2h);
        add_transfers(&mut summary.d2d, &s.d2d);
        idle.total_ns += s.idle.total_ns;
        idle.cpu_ns += s.idle.cpu_ns;
        idle.sync_ns += s.idle.sync_ns;
        idle.transfer_ns += s.idle.transfer_ns;
        idle.data_loader_ns += s.idle.data_loader_ns;
    }
    summary.step_time_median_ms = ms(median(&mut durs));
    summary.step_time_ms = ms(total) / n;
    summary.total_time_ms = ms(total);
    summary.gpu_busy_pct = if total > 0 {
        100.0 * busy as f64 / total as f64
    } else {
        0.0
    };
    summary.gpu_busy_ms_per_step = ms(busy) / n;
    summary.kernels_per_step = summary.kernels as f64 / n;
    summary.idle_ms_per_step = IdleMs {
        total: ms(idle.total_ns) / n,
        cpu: ms(idle.cpu_ns) / n,
        sync: ms(idle.sync_ns) / n,
        transfer: ms(idle.transfer_ns) / n,
        data_loader: ms(idle.data_loader_ns) / n,
    };

    // Independent reads of the model and the timeline: in parallel.
    let (
        ((kernels, tensors), ((top_ops_gpu, top_ops_cpu), (compute, roofline_points))),
        (held_back, step_view),
    ) = rayon::join(
        || {
            rayon::join(
                || rayon::join(|| kernel_stats(p, &timeline), || forest::build(p)),
                || {
                    rayon::join(
                        || op_times(p, &timeline),
                        || {
                            let (lo, hi) = window(p);
                            let ops = op_roofline::flop_ops(p, lo, hi);
                            let stats = compute_stats(p, &timeline, &ops);
                            (stats, op_roofline::points(p, &timeline, &ops))
                        },
                    )
                },
            )
        },
        || {
            rayon::join(
                || held_back::of(p, &timeline),
                || step_view::representative(p, &timeline),
            )
        },
    );
    let device = p.main_device().map(|d| DeviceSummary {
        name: d.name.clone(),
        num_sms: d.num_sms,
        memory_bytes: d.total_global_mem_bytes,
        ceilings: devices::measured(&d.name).or_else(|| devices::lookup_device(d)),
    });
    let roofline = device
        .as_ref()
        .and_then(|d| d.ceilings.as_ref())
        .and_then(|c| roofline(c, &compute, busy));

    RunMetrics {
        held_back,
        roofline_points,
        step_view,
        device,
        summary,
        timeline,
        kernels,
        top_ops_gpu,
        top_ops_cpu,
        compute,
        roofline,
        tensors,
    }
}

fn add_transfers(a: &mut TransferStats, b: &TransferStats) {
    a.count += b.count;
    a.bytes += b.bytes;
    a.dur_ns += b.dur_ns;
    a.pageable += b.pageable;
}

/// Median (upper middle for even counts); 0 for none.
/// Median of the finite, positive values (mean of the middle two for an even count);
/// `None` when there are none. For step times: a 0 or NaN is a missing timing.
pub fn median_ms(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Median of integer durations (mean of the middle two, rounded down); 0 when empty.
pub fn median(v: &mut [i64]) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

fn kernel_stats(p: &Profile, t: &Timeline) -> KernelStats {
    let mut ks = KernelStats {
        histogram: BUCKETS
            .iter()
            .map(|&(label, upper_ns)| Bucket {
                label,
                upper_ns,
                count: 0,
                total_ns: 0,
            })
            .collect(),
        ..Default::default()
    };
    // Fx hashing: names and op indices are hashed once per kernel; the result is
    // sorted, so the maps' order does not show.
    let mut by_name: rustc_hash::FxHashMap<&str, (u64, i64, rustc_hash::FxHashMap<u32, u64>)> =
        Default::default();
    let mut durs = Vec::new();
    let mut under = (0u64, 0i64);
    for &gi in &t.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        if g.kind != GpuKind::Kernel {
            continue;
        }
        ks.count += 1;
        ks.total_ns += g.dur_ns;
        durs.push(g.dur_ns);
        if g.dur_ns < 10_000 {
            under.0 += 1;
            under.1 += g.dur_ns;
        }
        if let Some(b) = ks.histogram.iter_mut().find(|b| g.dur_ns < b.upper_ns) {
            b.count += 1;
            b.total_ns += g.dur_ns;
        }
        let e = by_name.entry(&g.name).or_default();
        e.0 += 1;
        e.1 += g.dur_ns;
        if let Some(op) = g.op {
            *e.2.entry(p.top_level_op(op)).or_default() += 1;
        }
    }
    ks.median_ns = median(&mut durs);
    if ks.count > 0 {
        ks.under_10us_pct = 100.0 * under.0 as f64 / ks.count as f64;
    }
    if ks.total_ns > 0 {
        ks.under_10us_time_pct = 100.0 * under.1 as f64 / ks.total_ns as f64;
    }
    ks.distinct = by_name.len();
    let mut top: Vec<KernelTime> = by_name
        .into_iter()
        .map(|(name, (count, total_ns, ops))| KernelTime {
            name: name.to_string(),
            count,
            total_ns,
            pct: if ks.total_ns > 0 {
                100.0 * total_ns as f64 / ks.total_ns as f64
            } else {
                0.0
            },
            op: ops
                .into_iter()
                .max_by_key(|&(o, c)| (c, std::cmp::Reverse(o)))
                .map(|(o, _)| p.ops[o as usize].name.to_string()),
            class: kernels::classify(name),
        })
        .collect();
    top.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    top.truncate(15);
    ks.top = top;
    ks
}

fn op_times(p: &Profile, t: &Timeline) -> (Vec<OpTime>, Vec<OpTime>) {
    let mut gpu: HashMap<&str, (u64, i64)> = HashMap::new();
    let mut seen_launch: HashMap<u32, ()> = HashMap::new();
    for &gi in &t.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        if let Some(op) = g.op {
            let top = p.top_level_op(op);
            let e = gpu.entry(&p.ops[top as usize].name).or_default();
            e.1 += g.dur_ns;
            if seen_launch.insert(top, ()).is_none() {
                e.0 += 1;
            }
        }
    }
    let (lo, hi) = window(p);
    let mut cpu: HashMap<&str, (u64, i64)> = HashMap::new();
    for o in &p.ops {
        if o.kind != OpKind::Op || o.ts_ns < lo || o.ts_ns >= hi {
            continue;
        }
        let outermost = o
            .parent
            .is_none_or(|par| p.ops[par as usize].kind == OpKind::Annotation);
        if outermost {
            let e = cpu.entry(&o.name).or_default();
            e.0 += 1;
            e.1 += o.dur_ns;
        }
    }
    let mut g: Vec<OpTime> = gpu
        .iter()
        .map(|(&name, &(count, gpu_ns))| OpTime {
            name: name.to_string(),
            count,
            gpu_ns,
            cpu_ns: cpu.get(name).map_or(0, |c| c.1),
        })
        .collect();
    g.sort_by(|a, b| b.gpu_ns.cmp(&a.gpu_ns).then_with(|| a.name.cmp(&b.name)));
    g.truncate(15);
    let mut c: Vec<OpTime> = cpu
        .iter()
        .map(|(&name, &(count, cpu_ns))| OpTime {
            name: name.to_string(),
            count,
            gpu_ns: gpu.get(name).map_or(0, |g| g.1),
            cpu_ns,
        })
        .collect();
    c.sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then_with(|| a.name.cmp(&b.name)));
    c.truncate(15);
    (g, c)
}

/// The analysed window: first step start to last step end.
pub fn window(p: &Profile) -> (i64, i64) {
    match (p.steps.first(), p.steps.last()) {
        (Some(a), Some(b)) => (a.start_ns, b.end_ns),
        _ => (p.meta.start_ns, p.meta.end_ns),
    }
}

fn compute_stats(p: &Profile, t: &Timeline, ops: &[(u32, flops::OpCost)]) -> ComputeStats {
    let mut cs = ComputeStats {
        shapes_recorded: p.ops.iter().any(|o| o.input_dims.is_some()),
        ..Default::default()
    };
    // Ops with a FLOP formula whose ancestors have none (count each GEMM once).
    let mut counted = vec![false; p.ops.len()];
    let mut by_dtype: HashMap<String, f64> = HashMap::new();
    let mut low = 0.0;
    for &(i, c) in ops {
        counted[i as usize] = true;
        cs.flops += c.flops;
        cs.flop_op_bytes += c.min_bytes;
        *by_dtype
            .entry(format!("{:?}", c.dtype).to_lowercase())
            .or_default() += c.flops;
        if c.dtype.is_low_precision() {
            low += c.flops;
        }
    }
    // Bytes of every op that launched GPU work: formula ops counted above, others modelled.
    let mut launched: HashMap<u32, ()> = HashMap::new();
    for &gi in &t.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        let Some(op) = g.op else { continue };
        if let Some(a) = p.op_ancestors(op).find(|&a| counted[a as usize]) {
            if g.is_kernel() {
                cs.flop_kernel_ns += g.dur_ns;
            }
            let _ = a;
            continue;
        }
        if launched.insert(op, ()).is_none() {
            cs.total_bytes += flops::min_bytes_elementwise(&p.ops[op as usize]).unwrap_or(0.0);
        }
    }
    cs.total_bytes += cs.flop_op_bytes;
    if cs.flops > 0.0 {
        cs.low_precision_flops_pct = 100.0 * low / cs.flops;
        cs.dominant_dtype = op_roofline::dominant(by_dtype);
    }
    cs
}

fn roofline(c: &devices::Ceilings, cs: &ComputeStats, busy_ns: i64) -> Option<Roofline> {
    if cs.flops <= 0.0 || cs.total_bytes <= 0.0 || busy_ns <= 0 {
        return None;
    }
    let peak = match cs.dominant_dtype.as_str() {
        "bf16" => c.bf16_tflops,
        "f16" => c.fp16_tflops,
        "f8" => c.fp8_tflops.unwrap_or(c.bf16_tflops),
        _ => c.fp32_tflops,
    };
    let bw = c.mem_bw_gbs;
    let ridge = peak * 1e12 / (bw * 1e9);
    let ai = cs.flops / cs.total_bytes;
    let secs = busy_ns as f64 / 1e9;
    let achieved = cs.flops / secs / 1e12;
    let attainable = peak.min(ai * bw * 1e9 / 1e12);
    Some(Roofline {
        peak_tflops: peak,
        bandwidth_gbs: bw,
        ceilings_source: c.source.to_string(),
        ridge_flop_per_byte: ridge,
        intensity_flop_per_byte: ai,
        bound: if ai < ridge { "memory" } else { "compute" },
        achieved_tflops: achieved,
        attainable_tflops: attainable,
        pct_of_attainable: if attainable > 0.0 {
            100.0 * achieved / attainable
        } else {
            0.0
        },
        bandwidth_util_pct: 100.0 * (cs.total_bytes / secs) / (bw * 1e9),
        compute_util_pct: 100.0 * achieved / peak,
    })
}
