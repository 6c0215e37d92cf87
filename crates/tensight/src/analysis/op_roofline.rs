//! Roofline points: where each FLOP-counted op (by name) sits on the roofline.
//!
//! Input: a Profile and its timeline. Output: one [`RooflinePoint`] per op name that has a
//! FLOP formula (`aten::addmm`, `aten::convolution`, ...): its modelled FLOPs and bytes
//! over the analysed steps and the GPU time of the kernels it launched, so a plot can put
//! it at (FLOPs / byte, FLOPs / second). The same ops [`super::ComputeStats`] counts
//! (an op with a formula whose ancestors have none), so the points add up to the step's
//! totals. Modelled, not measured: FLOPs and bytes come from shapes. Ops without a
//! formula have no FLOPs and no point.

use super::flops::{self, OpCost};
use super::timeline::Timeline;
use crate::model::{OpKind, Profile};
use serde::Serialize;
use std::collections::HashMap;

/// Most points kept (largest GPU time first).
const MAX_POINTS: usize = 24;

/// One op name on the roofline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RooflinePoint {
    /// Op name (`aten::addmm`).
    pub name: String,
    /// Calls in the steps.
    pub count: u64,
    /// Modelled FLOPs of those calls.
    pub flops: f64,
    /// Modelled minimum bytes of those calls.
    pub bytes: f64,
    /// GPU time of the kernels they launched, ns.
    pub kernel_ns: i64,
    /// Precision of most of its FLOPs (`f32`, `bf16`).
    pub dtype: String,
}

impl RooflinePoint {
    /// Arithmetic intensity, FLOP per byte.
    pub fn intensity(&self) -> f64 {
        if self.bytes > 0.0 {
            self.flops / self.bytes
        } else {
            0.0
        }
    }
    /// Achieved rate over its kernels' time, TFLOP/s.
    pub fn tflops(&self) -> f64 {
        if self.kernel_ns > 0 {
            self.flops / self.kernel_ns as f64 / 1e3
        } else {
            0.0
        }
    }
}

/// Ops in the window `[lo, hi)` that have a FLOP formula and whose ancestors are not
/// counted (each GEMM once), with their modelled cost.
pub fn flop_ops(p: &Profile, lo: i64, hi: i64) -> Vec<(u32, OpCost)> {
    let mut counted = vec![false; p.ops.len()];
    let mut out = Vec::new();
    for (i, o) in p.ops.iter().enumerate() {
        if o.kind != OpKind::Op || o.ts_ns < lo || o.ts_ns >= hi || !flops::has_formula(&o.name) {
            continue;
        }
        if p.op_ancestors(i as u32)
            .skip(1)
            .any(|a| counted[a as usize])
        {
            continue;
        }
        if let Some(c) = flops::op_cost(o) {
            counted[i] = true;
            out.push((i as u32, c));
        }
    }
    out
}

/// The roofline points of the analysed steps (`ops`: their [`flop_ops`]), largest kernel
/// time first.
pub fn points(p: &Profile, t: &Timeline, ops: &[(u32, OpCost)]) -> Vec<RooflinePoint> {
    let cost: HashMap<u32, usize> = ops.iter().enumerate().map(|(k, &(i, _))| (i, k)).collect();
    let mut kernel_ns = vec![0i64; ops.len()];
    for &gi in &t.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        let Some(op) = g.op.filter(|_| g.is_kernel()) else {
            continue;
        };
        if let Some(k) = p.op_ancestors(op).find_map(|a| cost.get(&a)) {
            kernel_ns[*k] += g.dur_ns;
        }
    }
    let mut by_name: HashMap<&str, (RooflinePoint, HashMap<String, f64>)> = HashMap::new();
    for (k, (i, c)) in ops.iter().enumerate() {
        let name: &str = &p.ops[*i as usize].name;
        let (pt, dtypes) = by_name.entry(name).or_insert_with(|| {
            let pt = RooflinePoint {
                name: name.to_string(),
                count: 0,
                flops: 0.0,
                bytes: 0.0,
                kernel_ns: 0,
                dtype: String::new(),
            };
            (pt, HashMap::new())
        });
        pt.count += 1;
        pt.flops += c.flops;
        pt.bytes += c.min_bytes;
        pt.kernel_ns += kernel_ns[k];
        *dtypes
            .entry(format!("{:?}", c.dtype).to_lowercase())
            .or_default() += c.flops;
    }
    let mut out: Vec<RooflinePoint> = by_name
        .into_values()
        .map(|(mut pt, dtypes)| {
            pt.dtype = dominant(dtypes);
            pt
        })
        .filter(|pt| pt.kernel_ns > 0 && pt.flops > 0.0 && pt.bytes > 0.0)
        .collect();
    out.sort_by(|a, b| {
        b.kernel_ns
            .cmp(&a.kernel_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    out.truncate(MAX_POINTS);
    out
}

/// The key with the largest value (ties: the smallest key).
pub(crate) fn dominant(by: HashMap<String, f64>) -> String {
    by.into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map(|(d, _)| d)
        .unwrap_or_default()
}
