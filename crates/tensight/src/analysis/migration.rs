//! Late GPU migrations: a tensor created on the CPU by a factory op (`torch.randn`,
//! `zeros`, `arange`, ...) and copied to the GPU right after, where it could have been
//! created directly. The detection C003 reports and C004 leaves to it; no findings here.

use super::flops::Dtype;
use super::host_work::{
    blocked_window, concrete_size, first_input_dtype, first_input_shape, idle_overlap,
    is_top_level, not_computing, numel, Launched,
};
use super::Timeline;
use crate::model::{CpuOp, OpKind, Profile};

/// Longest gap between the factory op's end and the copy op's start (ns).
pub(crate) const MAX_GAP_NS: i64 = 1_000_000;
/// Longest gap when shapes were not recorded and only adjacency can match them (ns).
pub(crate) const ADJACENT_NS: i64 = 100_000;
/// Host cost of a GPU factory op when the trace shows none to measure (ns).
pub(crate) const GPU_FACTORY_DEFAULT_NS: i64 = 20_000;

/// Ops that create a tensor (on whatever device they are told).
const FACTORIES: &[&str] = &[
    "aten::randn",
    "aten::rand",
    "aten::randint",
    "aten::randperm",
    "aten::zeros",
    "aten::ones",
    "aten::full",
    "aten::empty",
    "aten::arange",
    "aten::linspace",
    "aten::logspace",
    "aten::eye",
    "aten::tensor",
    "aten::scalar_tensor",
    "aten::normal",
    "aten::bernoulli",
    "aten::randn_like",
    "aten::rand_like",
    "aten::randint_like",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::full_like",
    "aten::empty_like",
    "aten::normal_",
    "aten::uniform_",
    "aten::fill_",
    "aten::zero_",
    "aten::random_",
    "aten::bernoulli_",
    "aten::exponential_",
];

/// One CPU-created tensor copied to the GPU.
pub(crate) struct Migration {
    /// The factory op (index into `ops`); for an in-place initialiser, the last op.
    pub factory: u32,
    /// Earlier factory ops of the same tensor (`torch.empty(n)` before `.uniform_()`).
    pub chain: Vec<u32>,
    /// The copy op (top level).
    pub copy: u32,
    /// The memcpy (index into `gpu`).
    pub memcpy: u32,
    /// Shape, when recorded.
    pub shape: Option<Vec<i64>>,
    /// Element type, when known.
    pub dtype: Option<Dtype>,
    /// Host time of the factory ops, ns.
    pub factory_ns: i64,
    /// Host time of the copy op, ns.
    pub copy_ns: i64,
    /// Of which in the memcpy call and the sync after it, ns.
    pub copy_blocked_ns: i64,
    /// GPU-idle part of the factory and copy host time, ns.
    pub idle_ns: i64,
    /// True when matched by adjacency only (no shapes recorded).
    pub by_adjacency: bool,
}

/// Every late migration inside the steps, in time order. Shared with C004, which leaves
/// these factory ops to this rule.
pub(crate) fn find(p: &Profile, timeline: &Timeline, launched: &Launched) -> Vec<Migration> {
    let gaps = &timeline.idle_gaps;
    let mut out = Vec::new();
    for (gi, copy, c) in super::transfers::h2d_copy_ops(p, timeline) {
        let Some(m) = match_factory(p, launched, copy, gi) else {
            continue;
        };
        let mut m = m;
        let f_ranges: Vec<(i64, i64)> = std::iter::once(m.factory)
            .chain(m.chain.iter().copied())
            .map(|i| (p.ops[i as usize].ts_ns, p.ops[i as usize].end_ns()))
            .collect();
        m.idle_ns = f_ranges
            .iter()
            .map(|&(a, b)| idle_overlap(gaps, a, b))
            .sum::<i64>()
            + not_computing(p, gaps, c.ts_ns, c.end_ns(), &[gi]);
        out.push(m);
    }
    out
}

/// A factory op that may have made the copied tensor.
struct Candidate {
    factory: u32,
    shape: Option<Vec<i64>>,
    dtype: Option<Dtype>,
    by_adjacency: bool,
}

/// The factory op whose output copy op `copy` moves with memcpy `gi`, if any.
fn match_factory(p: &Profile, launched: &Launched, copy: u32, gi: u32) -> Option<Migration> {
    let c = p.ops.get(copy as usize)?;
    let g = p.gpu.get(gi as usize)?;
    let copy_dtype = first_input_dtype(c);
    let copy_shape = first_input_shape(c);
    // Walk back over the ops of the same thread (sorted by start) to the top-level ops
    // that ended shortly before the copy began; the nearest one that matches wins.
    let mut best: Option<Candidate> = None;
    let mut nearest = true;
    let mut j = copy as usize;
    while j > 0 {
        j -= 1;
        let o = &p.ops[j];
        if o.pid != c.pid || o.tid != c.tid {
            break;
        }
        if o.kind != OpKind::Op || o.end_ns() > c.ts_ns || !is_top_level(p, j as u32) {
            continue;
        }
        if o.end_ns() < c.ts_ns - MAX_GAP_NS {
            break;
        }
        let adjacent = std::mem::take(&mut nearest);
        if !FACTORIES.contains(&&*o.name) || !launched.host_only(j as u32) {
            continue;
        }
        let shape = factory_shape(o).or_else(|| copy_shape.clone());
        let dtype = if o.name.ends_with('_') {
            first_input_dtype(o).or(copy_dtype)
        } else {
            copy_dtype.or_else(|| default_dtype(&o.name))
        };
        match (&shape, dtype, g.bytes) {
            (Some(s), Some(d), Some(b)) => {
                if numel(s).saturating_mul(d.itemsize() as u64) == b {
                    best = Some(Candidate {
                        factory: j as u32,
                        shape: shape.clone(),
                        dtype: Some(d),
                        by_adjacency: false,
                    });
                    break;
                }
            }
            _ => {
                if adjacent && c.ts_ns - o.end_ns() <= ADJACENT_NS {
                    best = Some(Candidate {
                        factory: j as u32,
                        shape: shape.clone(),
                        dtype,
                        by_adjacency: true,
                    });
                    break;
                }
            }
        }
    }
    let Candidate {
        factory,
        shape,
        dtype,
        by_adjacency,
    } = best?;
    let chain = init_chain(p, launched, factory);
    let f = &p.ops[factory as usize];
    let factory_ns = f.dur_ns + chain.iter().map(|&i| p.ops[i as usize].dur_ns).sum::<i64>();
    Some(Migration {
        factory,
        chain,
        copy,
        memcpy: gi,
        shape,
        dtype,
        factory_ns,
        copy_ns: c.dur_ns,
        copy_blocked_ns: g
            .runtime
            .and_then(|r| blocked_window(p, r))
            .map_or(0, |(a, b)| b - a),
        idle_ns: 0,
        by_adjacency,
    })
}

/// For an in-place initialiser (`uniform_`), the factory ops just before it that made the
/// tensor (`empty`), same thread, same size.
fn init_chain(p: &Profile, launched: &Launched, factory: u32) -> Vec<u32> {
    let f = &p.ops[factory as usize];
    if !f.name.ends_with('_') {
        return Vec::new();
    }
    let want = first_input_shape(f).map(|s| numel(&s));
    let mut out = Vec::new();
    let mut j = factory as usize;
    let mut start = f.ts_ns;
    while j > 0 && out.len() < 3 {
        j -= 1;
        let o = &p.ops[j];
        if o.pid != f.pid || o.tid != f.tid {
            break;
        }
        if !is_top_level(p, j as u32) || o.kind != OpKind::Op {
            continue;
        }
        if o.end_ns() < start - MAX_GAP_NS
            || !FACTORIES.contains(&&*o.name)
            || !launched.host_only(j as u32)
        {
            break;
        }
        let n = factory_shape(o).map(|s| numel(&s));
        if want.is_some() && n.is_some() && n != want {
            break;
        }
        out.push(j as u32);
        start = o.ts_ns;
    }
    out
}

/// Shape of a factory's output from its arguments: the input tensor for in-place and
/// `*_like` ops, the size list in `Concrete Inputs` otherwise.
fn factory_shape(o: &CpuOp) -> Option<Vec<i64>> {
    if o.name.ends_with('_') || o.name.ends_with("_like") {
        return first_input_shape(o);
    }
    concrete_size(o)
}

/// PyTorch's default dtype of a factory op when none is given.
fn default_dtype(name: &str) -> Option<Dtype> {
    match name {
        "aten::randint" | "aten::randperm" => Some(Dtype::I64),
        "aten::arange" | "aten::tensor" | "aten::scalar_tensor" => None,
        _ => Some(Dtype::F32),
    }
}

/// Host cost of creating a tensor on the GPU: the median host time of top-level factory
/// ops in this trace that launched GPU work, or the default.
pub(crate) fn gpu_factory_cost_ns(p: &Profile, launched: &Launched) -> (i64, usize) {
    let mut v: Vec<i64> = p
        .ops
        .iter()
        .enumerate()
        .filter(|(i, o)| {
            o.kind == OpKind::Op
                && FACTORIES.contains(&&*o.name)
                && !o.name.ends_with('_')
                && !launched.host_only(*i as u32)
                && is_top_level(p, *i as u32)
        })
        .map(|(_, o)| o.dur_ns)
        .collect();
    if v.is_empty() {
        return (GPU_FACTORY_DEFAULT_NS, 0);
    }
    let n = v.len();
    (crate::analysis::median(&mut v), n)
}
