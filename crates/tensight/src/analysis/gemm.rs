//! The float32 GEMM and convolution kernels of the steps, and what they would take at
//! other precisions: the one account of each kernel that T001 (TF32 time) and T003
//! (bf16 autocast, from the TF32 time) share. No findings, no thresholds of a rule.

use super::devices::Ceilings;
use super::flops::{op_cost, CostKind, Dtype, OpCost};
use super::kernels::{classify, is_fp32_simt_gemm, is_tf32_gemm, uses_tensor_cores, KernelClass};
use super::RunMetrics;
use crate::analysis::simulate::Durations;
use crate::model::Profile;
use std::collections::{BTreeMap, HashMap};

/// A kernel at this fraction of the FP32 peak or more is taken as fully compute-bound.
pub(crate) const COMPUTE_BOUND_EFF: f64 = 0.3;
/// No GEMM/conv kernel is modelled shorter than this (ns): launch, ramp-up and tail.
pub(crate) const MIN_KERNEL_NS: f64 = 2_000.0;

/// The ceilings for precision-to-precision speed-ups: datasheet peaks for every format
/// (a ratio of two peaks must come from one source: a measured bf16 rate against a
/// datasheet TF32 rate would understate the gain) with the bandwidth the analysis uses
/// (measured where available).
pub(crate) fn peaks(p: &Profile, metrics: &RunMetrics) -> Option<Ceilings> {
    let c = metrics.device.as_ref().and_then(|d| d.ceilings)?;
    let sheet = p
        .main_device()
        .and_then(crate::analysis::devices::lookup_device)
        .unwrap_or(c);
    Some(Ceilings {
        mem_bw_gbs: c.mem_bw_gbs,
        source: if c.source == sheet.source {
            c.source
        } else {
            "datasheet peaks; measured bandwidth"
        },
        ..sheet
    })
}

/// Matmul or convolution: the switches that enable TF32 differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum GemmKind {
    /// `aten::mm`, `addmm`, `bmm`, `linear`, `matmul` (cuBLAS).
    Matmul,
    /// Convolutions, forward and backward (cuDNN).
    Conv,
}

impl GemmKind {
    /// `matmul` or `convolution`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            GemmKind::Matmul => "matmul",
            GemmKind::Conv => "convolution",
        }
    }
}

/// One float32 GEMM or convolution kernel in the steps.
pub(crate) struct Fp32Kernel {
    /// Index into `Profile::gpu`.
    pub gpu: u32,
    /// The op it belongs to: the outermost op with a FLOP formula, else the launching op.
    pub op: Option<u32>,
    /// Matmul or convolution.
    pub kind: GemmKind,
    /// Already on tensor cores (TF32).
    pub tensor_cores: bool,
    /// Its share of the op's FLOPs (by time among the op's GEMM/conv kernels).
    pub flops: Option<f64>,
    /// Its share of the op's minimum bytes, in float32.
    pub bytes: Option<f64>,
    /// The op's cost, for locations.
    pub cost: Option<OpCost>,
}

/// Float32 GEMM and convolution kernels among `acts` (indices into `Profile::gpu`), in
/// order. A kernel counts when it is a GEMM/conv by name (or a SIMT FP32 GEMM) and its op's
/// main input is float32 or, without recorded shapes, its name says FP32 or TF32.
pub(crate) fn fp32_kernels(p: &Profile, acts: &[u32]) -> Vec<Fp32Kernel> {
    let mut costs: HashMap<u32, Option<OpCost>> = HashMap::new();
    let mut out: Vec<Fp32Kernel> = Vec::new();
    // Per costed op: total time of its GEMM/conv kernels, to split FLOPs by time.
    let mut op_time: Durations = Durations::default();
    for &gi in acts {
        let g = &p.gpu[gi as usize];
        if !g.is_kernel() {
            continue;
        }
        let class = classify(&g.name);
        let simt = is_fp32_simt_gemm(&g.name);
        if !(matches!(class, KernelClass::Gemm | KernelClass::Conv) || simt) {
            continue;
        }
        let costed = g.op.and_then(|o| costed_op(p, o, &mut costs));
        let (op, cost) = match costed {
            Some((o, c)) => (Some(o), Some(c)),
            None => (g.op, None),
        };
        let fp32 = match cost {
            Some(c) => c.dtype == Dtype::F32,
            None => simt || is_tf32_gemm(&g.name),
        };
        if !fp32 {
            continue;
        }
        let kind = match (cost.map(|c| c.kind), class) {
            (Some(CostKind::Conv), _) | (None, KernelClass::Conv) => GemmKind::Conv,
            _ => GemmKind::Matmul,
        };
        if let (Some(o), Some(_)) = (op, cost) {
            *op_time.entry(o).or_default() += g.dur_ns;
        }
        out.push(Fp32Kernel {
            gpu: gi,
            op,
            kind,
            tensor_cores: uses_tensor_cores(&g.name),
            flops: None,
            bytes: None,
            cost,
        });
    }
    for k in &mut out {
        let (Some(o), Some(c)) = (k.op, k.cost) else {
            continue;
        };
        let total = op_time.get(&o).copied().unwrap_or(0);
        if total > 0 {
            let share = p.gpu[k.gpu as usize].dur_ns as f64 / total as f64;
            k.flops = Some(c.flops * share);
            k.bytes = Some(c.min_bytes * share);
        }
    }
    out
}

/// The outermost op above `op` (itself included) with a GEMM or convolution cost.
fn costed_op(
    p: &Profile,
    op: u32,
    cache: &mut HashMap<u32, Option<OpCost>>,
) -> Option<(u32, OpCost)> {
    let mut best = None;
    for a in p.op_ancestors(op) {
        let c = *cache
            .entry(a)
            .or_insert_with(|| p.ops.get(a as usize).and_then(op_cost));
        if let Some(c) = c.filter(|c| matches!(c.kind, CostKind::Gemm | CostKind::Conv)) {
            best = Some((a, c));
        }
    }
    best
}

/// The modelled TF32 time of an FP32 kernel (ns): its measured time when it already uses
/// tensor cores, else max(FLOPs / TF32 peak, bytes / bandwidth, 2 µs, time scaled by
/// FP32/TF32 on its compute-bound share), never more than its measured time.
pub(crate) fn tf32_ns(p: &Profile, k: &Fp32Kernel, c: &Ceilings) -> i64 {
    let dur = p.gpu[k.gpu as usize].dur_ns;
    if k.tensor_cores || dur <= 0 {
        return dur;
    }
    let t = speedup_time(
        dur as f64,
        k.flops,
        k.bytes,
        c.fp32_tflops,
        c.tf32_tflops,
        c.mem_bw_gbs,
    );
    t.round() as i64
}

/// Time (ns) of a kernel of `dur` ns moved from a peak of `from_tflops` to `to_tflops`:
/// the ratio applies to its compute-bound share (achieved rate / `COMPUTE_BOUND_EFF` of
/// the old peak, at most 1; 1 when FLOPs are unknown), floored by FLOPs at the new peak,
/// `bytes` at `bw_gbs` and `MIN_KERNEL_NS`, capped at `dur`.
pub(crate) fn speedup_time(
    dur: f64,
    flops: Option<f64>,
    bytes: Option<f64>,
    from_tflops: f64,
    to_tflops: f64,
    bw_gbs: f64,
) -> f64 {
    if dur <= 0.0 || to_tflops <= 0.0 || from_tflops <= 0.0 {
        return dur.max(0.0);
    }
    let share = match flops {
        Some(f) if f > 0.0 => ((f / dur / 1e3) / (from_tflops * COMPUTE_BOUND_EFF)).min(1.0),
        Some(_) => 0.0,
        None => 1.0,
    };
    let scaled = dur * (1.0 - share * (1.0 - from_tflops / to_tflops));
    let compute = flops.map_or(0.0, |f| f / (to_tflops * 1e3));
    let memory = bytes.map_or(0.0, |b| if bw_gbs > 0.0 { b / bw_gbs } else { 0.0 });
    scaled.max(compute).max(memory).max(MIN_KERNEL_NS).min(dur)
}

/// Kernels of one op name, kernel name and shape, for locations.
pub(crate) struct Group {
    /// The op (a representative).
    pub op: Option<u32>,
    /// Its name.
    pub op_name: String,
    /// The kernel.
    pub kernel: String,
    /// The op's input shapes.
    pub shape: Option<String>,
    /// Kernels in the group.
    pub count: u64,
    /// Their GPU time, ns.
    pub dur_ns: i64,
    /// GPU time the change saves, ns.
    pub saved_ns: i64,
}

/// Group kernels by (op name, kernel name, input shapes), largest GPU saving first.
pub(crate) fn group(p: &Profile, ks: &[&Fp32Kernel], new_dur: &Durations) -> Vec<Group> {
    let mut m: BTreeMap<(String, String, String), Group> = BTreeMap::new();
    for k in ks {
        let g = &p.gpu[k.gpu as usize];
        let op_name =
            k.op.map(|o| p.ops[o as usize].name.to_string())
                .unwrap_or_default();
        let shape = k.op.and_then(|o| shapes(p, o));
        let e = m
            .entry((
                op_name.clone(),
                g.name.to_string(),
                shape.clone().unwrap_or_default(),
            ))
            .or_insert_with(|| Group {
                op: k.op,
                op_name,
                kernel: g.name.to_string(),
                shape,
                count: 0,
                dur_ns: 0,
                saved_ns: 0,
            });
        e.count += 1;
        e.dur_ns += g.dur_ns;
        e.saved_ns += g.dur_ns - new_dur.get(&k.gpu).copied().unwrap_or(g.dur_ns);
    }
    let mut v: Vec<Group> = m.into_values().collect();
    v.sort_by(|a, b| {
        b.saved_ns
            .cmp(&a.saved_ns)
            .then_with(|| b.dur_ns.cmp(&a.dur_ns))
            .then_with(|| a.kernel.cmp(&b.kernel))
    });
    v
}

/// The tensor inputs of op `o` as recorded: `[32, 65536] × [65536, 10] float`.
pub(crate) fn shapes(p: &Profile, o: u32) -> Option<String> {
    let op = p.ops.get(o as usize)?;
    let dims = crate::analysis::flops::parse_dims(op.input_dims.as_deref()?);
    let types = op
        .input_types
        .as_deref()
        .map(crate::analysis::flops::parse_types)
        .unwrap_or_default();
    let parts: Vec<String> = dims
        .iter()
        .filter(|d| d.len() >= 2)
        .map(|d| format!("{d:?}"))
        .collect();
    if parts.is_empty() {
        return None;
    }
    let ty = types
        .iter()
        .find(|t| Dtype::from_kineto(t).is_some())
        .cloned()
        .unwrap_or_default();
    Some(format!("{} {ty}", parts.join(" × ")).trim().to_string())
}
