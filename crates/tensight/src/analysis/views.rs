//! Layout patterns across ops, found on the tensor forest ([`crate::analysis::forest`]):
//!
//! - **Transposed chains** (rule V003): a transposed view enters elementwise ops that mix
//!   it with contiguous tensors. PyTorch's elementwise kernels walk in the memory order of
//!   their output, which follows the first operand, so the transposed layout passes from
//!   op to op and every op that meets a contiguous operand reads or writes one operand
//!   across its strides.
//! - **Copy churn** (rule V002): the same view of one base tensor materialized again and
//!   again (`.contiguous()`, `.clone()`, a copying `.reshape()` or `.to()`) while the base
//!   does not change in between: every copy after the first is redundant.
//!
//! Both read one step: the one the execution trace recorded.

use super::forest::{Forest, Layout, OpAccess, TensorNode};
use crate::model::Profile;
use std::collections::HashMap;

/// Dense elementwise work from which an op calibrates the achieved bandwidth: 64 MiB.
const CALIBRATION_BYTES: u64 = 64 << 20;

/// Bandwidth the run's own dense elementwise kernels reached, bytes per ns (GB/s), and how
/// it was found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    /// Bytes per ns.
    pub bytes_per_ns: f64,
    /// Ops it was measured on (0: the datasheet figure × 0.85 was assumed).
    pub ops: usize,
}

/// The achieved bandwidth of the dense, non-GEMM ops of the forest that move at least
/// 64 MiB (their dense bytes over their kernel time, summed), else `datasheet_gbs` × 0.85.
pub fn reference_bandwidth(f: &Forest, datasheet_gbs: Option<f64>) -> Option<Bandwidth> {
    let (mut bytes, mut ns, mut n) = (0u64, 0i64, 0usize);
    for o in &f.ops {
        let ideal = o.ideal_bytes();
        if o.natively_strided || o.gpu_ns <= 0 || ideal < CALIBRATION_BYTES {
            continue;
        }
        if o.wasted_bytes() > 0
            || o.measured_excess_bytes
                .is_some_and(|e| e > 0.05 * ideal as f64)
        {
            continue;
        }
        bytes = bytes.saturating_add(ideal);
        ns += o.gpu_ns;
        n += 1;
    }
    if n > 0 && ns > 0 {
        return Some(Bandwidth {
            bytes_per_ns: bytes as f64 / ns as f64,
            ops: n,
        });
    }
    datasheet_gbs.filter(|g| *g > 0.0).map(|g| Bandwidth {
        bytes_per_ns: 0.85 * g,
        ops: 0,
    })
}

/// One op of a transposed chain that pays for the mixed layouts.
#[derive(Debug, Clone)]
pub struct ChainOp {
    /// Index into [`Forest::ops`].
    pub op: usize,
    /// Tensors it walks across their strides (indices into [`Forest::nodes`]).
    pub strided: Vec<u32>,
    /// Kernel time, ns.
    pub gpu_ns: f64,
    /// Time the strided access costs, ns: measured sectors when the hardware pass has
    /// them, else kernel time beyond what its dense bytes need at the reference bandwidth.
    pub excess_ns: f64,
    /// True when `excess_ns` comes from measured sectors.
    pub measured: bool,
}

/// A transposed view and the elementwise ops its layout reaches.
#[derive(Debug, Clone)]
pub struct Chain {
    /// The view (index into [`Forest::nodes`]).
    pub view: u32,
    /// Ops that pay, in order.
    pub ops: Vec<ChainOp>,
    /// Ops its layout passed through (the paying ones included).
    pub reached: usize,
    /// Estimated cost of materializing the view once (`.contiguous()`), ns.
    pub copy_ns: f64,
}

impl Chain {
    /// Time the strided ops lose, ns.
    pub fn excess_ns(&self) -> f64 {
        self.ops.iter().map(|o| o.excess_ns).sum()
    }

    /// What materializing the view once saves, ns (≥ 0).
    pub fn saving_ns(&self) -> f64 {
        (self.excess_ns() - self.copy_ns).max(0.0)
    }
}

fn excess_of(o: &OpAccess, bw: Option<Bandwidth>) -> Option<(f64, bool)> {
    if let (Some(m), Some(x)) = (o.measured_bytes, o.measured_excess_bytes) {
        if m > 0.0 {
            return Some((o.gpu_ns as f64 * (x / m).clamp(0.0, 1.0), true));
        }
    }
    let bw = bw?;
    let dense = o.ideal_bytes() as f64 / bw.bytes_per_ns;
    Some(((o.gpu_ns as f64 - dense).max(0.0), false))
}

/// The ops outside `skip` (indices into [`Forest::ops`]: the transposed chains' ops) that
/// walk an operand across its strides, and what that costs each (as for a chain's ops),
/// in execution-trace order.
pub fn strided_ops(
    f: &Forest,
    bw: Option<Bandwidth>,
    skip: &std::collections::HashSet<usize>,
) -> Vec<ChainOp> {
    f.ops
        .iter()
        .enumerate()
        .filter(|(oi, o)| !o.natively_strided && !skip.contains(oi))
        .filter_map(|(oi, o)| paying(oi, o, bw))
        .collect()
}

/// Op `oi` as one that pays for walking operands across their strides; `None` when it
/// walks none (or nothing can price it).
fn paying(oi: usize, o: &OpAccess, bw: Option<Bandwidth>) -> Option<ChainOp> {
    let strided: Vec<u32> = o
        .accesses
        .iter()
        .filter(|a| a.bytes > a.ideal)
        .map(|a| a.tensor)
        .collect();
    if strided.is_empty() {
        return None;
    }
    let (excess_ns, measured) = excess_of(o, bw)?;
    Some(ChainOp {
        op: oi,
        strided,
        gpu_ns: o.gpu_ns as f64,
        excess_ns,
        measured,
    })
}

/// Transposed views whose layout reaches elementwise ops that mix it with other layouts,
/// with at least `min_ops` paying ops; largest saving first, no op in two chains.
pub fn transposed_chains(f: &Forest, bw: Option<Bandwidth>, min_ops: usize) -> Vec<Chain> {
    let mut out = Vec::new();
    for (vi, v) in f.nodes.iter().enumerate() {
        if v.parent.is_none() || v.layout != Layout::Transposed || v.traffic.accesses == 0 {
            continue;
        }
        let mut carriers: Vec<u32> = vec![vi as u32];
        let mut ops = Vec::new();
        let mut reached = 0;
        for (oi, o) in f.ops.iter().enumerate() {
            if o.natively_strided
                || !o
                    .accesses
                    .iter()
                    .any(|a| !a.write && carriers.contains(&a.tensor))
            {
                continue;
            }
            reached += 1;
            if let Some(c) = paying(oi, o, bw) {
                ops.push(c);
            }
            for a in o.accesses.iter().filter(|a| a.write) {
                let t = &f.nodes[a.tensor as usize];
                if t.layout == Layout::Transposed && !carriers.contains(&a.tensor) {
                    carriers.push(a.tensor);
                }
            }
        }
        if ops.len() < min_ops {
            continue;
        }
        // The copy reads the view across its strides once and writes it densely: the
        // dense time of both plus one strided operand's excess (the chain's mean).
        let strided_operands: usize = ops.iter().map(|o| o.strided.len()).sum();
        let per_operand =
            ops.iter().map(|o| o.excess_ns).sum::<f64>() / strided_operands.max(1) as f64;
        let dense = bw.map_or(0.0, |b| 2.0 * v.bytes() as f64 / b.bytes_per_ns);
        out.push(Chain {
            view: vi as u32,
            ops,
            reached,
            copy_ns: dense + per_operand,
        });
    }
    out.sort_by(|a, b| b.saving_ns().total_cmp(&a.saving_ns()));
    // An op reached from two views counts once: for the chain that saves the most.
    let mut taken = std::collections::HashSet::new();
    out.retain(|c| {
        let fresh = c.ops.iter().all(|o| !taken.contains(&o.op));
        if fresh {
            taken.extend(c.ops.iter().map(|o| o.op));
        }
        fresh
    });
    out
}

/// Ops whose names make a new tensor from another's values (a materializing copy).
const MATERIALIZE: [&str; 8] = [
    "aten::contiguous",
    "aten::clone",
    "aten::reshape",
    "aten::to",
    "aten::_to_copy",
    "aten::flatten",
    "aten::_reshape_copy",
    "aten::copy",
];

/// One materializing copy.
#[derive(Debug, Clone)]
pub struct Copy {
    /// The new tensor (index into [`Forest::nodes`]).
    pub result: u32,
    /// The tensor it copied (index into [`Forest::nodes`]).
    pub source: u32,
    /// Execution-trace node id of the copying op.
    pub et_node: i64,
    /// Its Kineto op.
    pub op: Option<u32>,
    /// Kernel time of the copy, ns.
    pub gpu_ns: i64,
}

/// Copies of one view of one base, made while the base did not change.
#[derive(Debug, Clone)]
pub struct Churn {
    /// The copies, in order; all but the first are redundant.
    pub copies: Vec<Copy>,
}

impl Churn {
    /// Kernel time of the redundant copies, ns.
    pub fn redundant_ns(&self) -> i64 {
        self.copies.iter().skip(1).map(|c| c.gpu_ns).sum()
    }
}

/// Groups of copies of the same view (same base, shape, strides, offset; same result
/// dtype and layout) with no write to the base between them; most redundant time first.
pub fn copy_churn(p: &Profile, f: &Forest) -> Vec<Churn> {
    let Some(et) = p.execution_trace.as_ref() else {
        return Vec::new();
    };
    let by_id: HashMap<i64, usize> = et
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id, i))
        .collect();
    let by_tensor: HashMap<(u64, u64), u32> = f
        .nodes
        .iter()
        .enumerate()
        .map(|(i, t)| ((t.tensor_id, t.storage_id), i as u32))
        .collect();
    // The ops that wrote each tensor, and writes per root (ET node ids).
    let mut writers: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut writes: HashMap<u32, Vec<i64>> = HashMap::new();
    for (oi, o) in f.ops.iter().enumerate() {
        for a in o.accesses.iter().filter(|a| a.write) {
            writers.entry(a.tensor).or_default().push(oi);
            let root = f.nodes[a.tensor as usize].root;
            writes.entry(root).or_default().push(o.et_node);
        }
    }
    // Inside the op `ancestor` (or it): its kernels are the copy's.
    let within = |mut id: i64, ancestor: i64| {
        for _ in 0..64 {
            if id == ancestor {
                return true;
            }
            match by_id.get(&id).and_then(|&i| et.nodes[i].parent) {
                Some(p) => id = p,
                None => return false,
            }
        }
        false
    };
    type Key = (u32, Vec<i64>, Vec<i64>, u64, String, Vec<i64>);
    let mut groups: HashMap<Key, Vec<Copy>> = HashMap::new();
    for (ri, r) in f.nodes.iter().enumerate() {
        let Some(c) = r
            .created_by
            .as_ref()
            .filter(|c| MATERIALIZE.contains(&&*c.name))
        else {
            continue;
        };
        if r.parent.is_some() {
            continue;
        }
        let Some(n) = by_id.get(&c.et_node).and_then(|&i| et.nodes.get(i)) else {
            continue;
        };
        let Some(&si) = n
            .inputs
            .iter()
            .find(|t| t.numel == r.numel && t.device == r.device)
            .and_then(|t| by_tensor.get(&(t.tensor_id, t.storage_id)))
        else {
            continue;
        };
        let s: &TensorNode = &f.nodes[si as usize];
        if s.root == ri as u32 {
            continue;
        }
        let gpu_ns: i64 = writers
            .get(&(ri as u32))
            .into_iter()
            .flatten()
            .map(|&oi| &f.ops[oi])
            .filter(|o| within(o.et_node, c.et_node))
            .map(|o| o.gpu_ns)
            .sum();
        if gpu_ns <= 0 {
            continue;
        }
        let key = (
            s.root,
            s.shape.clone(),
            s.strides.clone(),
            s.offset_elems,
            r.dtype.to_string(),
            r.strides.clone(),
        );
        groups.entry(key).or_default().push(Copy {
            result: ri as u32,
            source: si,
            et_node: c.et_node,
            op: c.op,
            gpu_ns,
        });
    }
    let mut out = Vec::new();
    for ((root, ..), mut copies) in groups {
        copies.sort_by_key(|c| c.et_node);
        let w = writes.get(&root).map(Vec::as_slice).unwrap_or(&[]);
        // Split where the base was written between two copies.
        let mut run: Vec<Copy> = Vec::new();
        for c in copies {
            let changed = run
                .last()
                .is_some_and(|l| w.iter().any(|&x| x > l.et_node && x < c.et_node));
            if changed {
                if run.len() > 1 {
                    out.push(Churn {
                        copies: std::mem::take(&mut run),
                    });
                }
                run.clear();
            }
            run.push(c);
        }
        if run.len() > 1 {
            out.push(Churn { copies: run });
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.redundant_ns()));
    out
}
