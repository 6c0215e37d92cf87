//! G001 elementwise-chains: runs of memory-bound kernels, one per op, that a compiler
//! would fuse into one pass.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::kernels::{classify, KernelClass};
use crate::analysis::simulate::{self, Change, Durations};
use crate::analysis::timeline::{gpu_range, overlap};
use crate::model::{OpKind, Profile, RuntimeKind};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "G001",
    name: "elementwise-chains",
    category: Category::Fusion,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Runs of at least 3 consecutive elementwise or reduction kernels on one stream within a
step, each launched by its own op in sequence: `x * 0.5`, `x + 1`, `torch.tanh(...)`,
a hand-written GELU or normalisation. Each kernel reads its input from memory and
writes its output back.

## Why it costs time
An elementwise kernel is memory-bound: its time is the bytes it moves. A chain of n
such kernels moves the data n times, where one fused kernel would read the inputs once
and write the result once. Each kernel also costs the host a dispatch and a launch, and
when the host is the bottleneck, the GPU waits between them.

## Example
`0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x**3)))` on a [8192, 4096]
float32 tensor runs 9 kernels of ~70 µs; `F.gelu(x, approximate="tanh")` runs one of
67 µs (measured on an H200: 0.72 ms → 0.07 ms; the estimate from the trace of the
chain was 0.61 ms).

## Fix
```python
# before: one kernel per op
y = 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
# after: a fused op, or let the compiler fuse the chain
y = torch.nn.functional.gelu(x, approximate="tanh")
model = torch.compile(model)                       # fuses elementwise chains generally
torch._foreach_mul_(params, 0.9)                   # lists of tensors: foreach ops
```

## Thresholds
A chain is at least 3 (`MIN_CHAIN`) consecutive kernels on one stream, each classified
elementwise or reduction by name, of any length (a pass over gigabytes costs
milliseconds, and fusing removes whole passes of those too), each linked to the op that
launched it, with no copy or memset between them, no blocking sync and no
idle gap over 500 µs (`MAX_GAP_NS`) between two of them. Reported when the saving is at
least 1% of the step (`MIN_SAVING_PCT`). Estimate per chain: the kernels' time less the
longest kernel (a fused pass moves at least what the largest of them moves): the replay
of the trace keeps the longest kernel and removes the others with their launch gaps, so
only time on the GPU's critical path counts. The host dispatch of the ops fusion removes
(each op's: the outermost op that launched only that kernel) is not cut, so on a
host-bound step the saving is a lower bound; the GPU idle between the chain's kernels, up
to that dispatch time (the same idle L001 counts), is given as evidence and in each
chain's "saves up to".

## References
- PyTorch docs: `torch.compile` and the "torch.compile tutorial" (operator fusion).
- PyTorch performance tuning guide: "Fuse pointwise operations".
"#,
};

/// Kernels a chain needs.
const MIN_CHAIN: usize = 3;
/// An idle gap longer than this between two kernels ends the chain (ns).
const MAX_GAP_NS: i64 = 500_000;
/// Report when the saving is at least this share of the step (%).
const MIN_SAVING_PCT: f64 = 1.0;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let n = ctx.steps();
    let chains = chains(p, &m.timeline.idle_gaps);
    if chains.is_empty() || ctx.step_ms() <= 0.0 {
        return Vec::new();
    }
    let mut new_dur: Durations = Durations::default();
    let mut multi = FxHashMap::default();
    let mut by_sig: BTreeMap<Vec<String>, Sig> = BTreeMap::new();
    let (mut kernel_ns, mut gpu_saved_ns, mut idle_ns, mut kernels) = (0i64, 0i64, 0i64, 0usize);
    for c in &chains {
        let longest = c.kernels.iter().map(|&(_, d)| d).max().unwrap_or(0);
        let sum: i64 = c.kernels.iter().map(|&(_, d)| d).sum();
        // The longest kernel stands for the fused pass; the others go.
        let keep = c
            .kernels
            .iter()
            .position(|&(_, d)| d == longest)
            .unwrap_or(0);
        for (i, &(gi, _)) in c.kernels.iter().enumerate() {
            if i != keep {
                new_dur.insert(gi, 0);
            }
        }
        // The host work fusion removes: the dispatch of every op but the kept kernel's.
        let kept = dispatch_op(p, c.kernels[keep].0, &mut multi);
        let mut removed: Vec<u32> = c
            .kernels
            .iter()
            .filter_map(|&(gi, _)| dispatch_op(p, gi, &mut multi))
            .filter(|&o| Some(o) != kept)
            .collect();
        removed.sort_unstable();
        removed.dedup();
        let host_ns: i64 = removed
            .iter()
            .map(|&o| p.ops[o as usize].dur_ns.max(0))
            .sum();
        let chain_idle = c.idle_ns.min(host_ns);
        kernel_ns += sum;
        kernels += c.kernels.len();
        gpu_saved_ns += sum - longest;
        idle_ns += chain_idle;
        let sig: Vec<String> = c.kernels.iter().map(|&(gi, _)| op_name(p, gi)).collect();
        let e = by_sig.entry(sig).or_insert_with(|| Sig {
            first: c.kernels[0].0,
            count: 0,
            kernel_ns: 0,
            saved_ns: 0,
        });
        e.count += 1;
        e.kernel_ns += sum;
        e.saved_ns += sum - longest + chain_idle;
    }
    let change = Change::durations(new_dur);
    let replayed = simulate::saving_ns(p, &change);
    let saving_ms = replayed as f64 / 1e6 / n;
    if 100.0 * saving_ms / ctx.step_ms() < MIN_SAVING_PCT {
        return Vec::new();
    }
    let mut sigs: Vec<(Vec<String>, Sig)> = by_sig.into_iter().collect();
    sigs.sort_by(|a, b| b.1.saved_ns.cmp(&a.1.saved_ns).then_with(|| a.0.cmp(&b.0)));
    let (top_sig, _) = &sigs[0];

    let d = Draft {
        change: Some(change),
        title: "Chains of elementwise kernels could be fused".into(),
        message: format!(
            "{:.1} chains per step of ≥{MIN_CHAIN} back-to-back elementwise/reduction kernels ({:.0} kernels, {} of GPU time per step, GPU idle {} between them); the most costly: {}",
            chains.len() as f64 / n,
            kernels as f64 / n,
            fmt_ms(kernel_ns as f64 / 1e6 / n),
            fmt_ms(idle_ns as f64 / 1e6 / n),
            describe(top_sig)
        ),
        saving_ms,
        estimate: format!(
            "per chain, its kernel time less its longest kernel (one fused pass moves at least what the largest kernel moves; {} of GPU time per step), the removed kernels' launch gaps with them, replayed through the trace so only time on the GPU's critical path counts. The host dispatch a fused kernel no longer needs is not counted (GPU idle between the chained kernels: {} per step), so on a host-bound step this is a lower bound",
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n),
            fmt_ms(idle_ns as f64 / 1e6 / n)
        ),
        evidence: vec![
            ev("chains per step", format!("{:.1}", chains.len() as f64 / n)),
            ev("kernels in chains per step", format!("{:.0}", kernels as f64 / n)),
            ev("their GPU time per step", fmt_ms(kernel_ns as f64 / 1e6 / n)),
            ev("GPU time a fused pass saves per step", fmt_ms(gpu_saved_ns as f64 / 1e6 / n)),
            ev("step time saved per step (replayed)", fmt_ms(replayed as f64 / 1e6 / n)),
            ev("GPU idle between chained kernels per step", fmt_ms(idle_ns as f64 / 1e6 / n)),
            ev("distinct chains", sigs.len().to_string()),
        ],
        explanation: format!(
            "Each kernel in a chain reads its input from GPU memory and writes its result back, and each costs a host dispatch; fused, the chain reads once and writes once. Here {:.0} kernels per step form such chains.",
            kernels as f64 / n
        ),
        fixes: vec![
            "Compile the model (or the function holding the chain): `model = torch.compile(model)` fuses elementwise chains into single Triton kernels".into(),
            "Use fused ops instead of formulas: `F.gelu(x, approximate=\"tanh\")`, `F.silu`, `F.layer_norm`, `F.scaled_dot_product_attention`, `torch.addcmul`/`torch.lerp`".into(),
            "For per-parameter loops, use foreach ops (`torch._foreach_mul_`, `torch._foreach_add_`) or fused optimizers (`fused=True`)".into(),
        ],
        locations: sigs
            .iter()
            .take(5)
            .map(|(sig, s)| {
                let g = &p.gpu[s.first as usize];
                let mut loc = g.op.map(|o| op_location(p, p.top_level_op(o))).unwrap_or_default();
                loc.kernel = Some(g.name.to_string());
                loc.tensor = Some(format!(
                    "{} kernels: {}; {:.1}× per step, {} of kernels per step, saves up to ~{}",
                    sig.len(),
                    describe(sig),
                    s.count as f64 / n,
                    fmt_ms(s.kernel_ns as f64 / 1e6 / n),
                    fmt_ms(s.saved_ns as f64 / 1e6 / n)
                ));
                loc
            })
            .collect(),
    };
    vec![d.finish(&META, ctx)]
}

/// One chain: its kernels (index into `Profile::gpu`, duration) and the GPU idle between
/// them (ns).
struct Chain {
    kernels: Vec<(u32, i64)>,
    idle_ns: i64,
}

/// Totals of one chain signature (the sequence of launching op names).
struct Sig {
    first: u32,
    count: u64,
    kernel_ns: i64,
    saved_ns: i64,
}

/// Chains of every step, stream by stream, in time order.
fn chains(p: &Profile, idle_gaps: &[(i64, i64)]) -> Vec<Chain> {
    let mut syncs: Vec<(i64, i64)> = p
        .runtime
        .iter()
        .filter(|r| r.kind == RuntimeKind::Sync)
        .map(|r| (r.ts_ns, r.end_ns()))
        .collect();
    syncs.sort_unstable();
    let mut out = Vec::new();
    for s in &p.steps {
        let (lo, hi) = gpu_range(p, s);
        let mut streams: BTreeMap<(i64, i64), Vec<u32>> = BTreeMap::new();
        for gi in lo as u32..hi as u32 {
            let g = &p.gpu[gi as usize];
            streams.entry((g.device, g.stream)).or_default().push(gi);
        }
        for acts in streams.values() {
            let mut cur: Vec<(u32, i64)> = Vec::new();
            let mut idle = 0i64;
            for &gi in acts {
                let g = &p.gpu[gi as usize];
                let fits = g.is_kernel()
                    && g.op.is_some()
                    && matches!(
                        classify(&g.name),
                        KernelClass::Elementwise | KernelClass::Reduction
                    );
                let joins = fits
                    && cur.last().is_some_and(|&(prev, _)| {
                        let pe = p.gpu[prev as usize].end_ns();
                        g.ts_ns - pe <= MAX_GAP_NS
                            && !crosses_sync(&syncs, launch_ns(p, prev), launch_ns(p, gi))
                    });
                if joins {
                    if let Some(&(prev, _)) = cur.last() {
                        idle += overlap(idle_gaps, p.gpu[prev as usize].end_ns(), g.ts_ns);
                    }
                    cur.push((gi, g.dur_ns));
                    continue;
                }
                flush(&mut cur, &mut idle, &mut out);
                if fits {
                    cur.push((gi, g.dur_ns));
                }
            }
            flush(&mut cur, &mut idle, &mut out);
        }
    }
    out
}

fn flush(cur: &mut Vec<(u32, i64)>, idle: &mut i64, out: &mut Vec<Chain>) {
    if cur.len() >= MIN_CHAIN {
        out.push(Chain {
            kernels: std::mem::take(cur),
            idle_ns: *idle,
        });
    }
    cur.clear();
    *idle = 0;
}

/// True when the host called a blocking sync between launching two kernels (at `lo` and
/// `hi`): the ops on either side cannot be fused.
fn crosses_sync(syncs: &[(i64, i64)], lo: i64, hi: i64) -> bool {
    let i = syncs.partition_point(|s| s.0 < hi);
    syncs[..i].last().is_some_and(|s| s.0 > lo)
}

/// When the host launched activity `gi`: its runtime call's start, else its own start.
fn launch_ns(p: &Profile, gi: u32) -> i64 {
    let g = &p.gpu[gi as usize];
    g.runtime
        .and_then(|r| p.runtime.get(r as usize))
        .map_or(g.ts_ns, |r| r.ts_ns)
}

/// The op whose host time is the dispatch of kernel `gi` alone: the outermost op above
/// its launching op that launched nothing else (counted by launch calls on its thread).
/// `multi` memoises, per op, whether it launched more than one thing.
fn dispatch_op(p: &Profile, gi: u32, multi: &mut FxHashMap<u32, bool>) -> Option<u32> {
    let op = p.gpu[gi as usize].op?;
    let mut best = op;
    for a in p.op_ancestors(op) {
        let o = &p.ops[a as usize];
        if o.kind != OpKind::Op
            || *multi
                .entry(a)
                .or_insert_with(|| launches_in(p, o.tid, o.ts_ns, o.end_ns()) > 1)
        {
            break;
        }
        best = a;
    }
    Some(best)
}

/// Launch-type runtime calls on thread `tid` starting in [lo, hi), counted up to 2.
fn launches_in(p: &Profile, tid: i64, lo: i64, hi: i64) -> usize {
    let from = p.runtime.partition_point(|r| r.ts_ns < lo);
    p.runtime[from..]
        .iter()
        .take_while(|r| r.ts_ns < hi)
        .filter(|r| {
            r.tid == tid
                && matches!(
                    r.kind,
                    RuntimeKind::Launch | RuntimeKind::Memcpy | RuntimeKind::Memset
                )
        })
        .take(2)
        .count()
}

/// The name of the op that launched activity `gi`.
fn op_name(p: &Profile, gi: u32) -> String {
    p.gpu[gi as usize]
        .op
        .map(|o| p.ops[o as usize].name.to_string())
        .unwrap_or_else(|| "?".into())
}

/// `aten::mul → aten::add → aten::tanh …` (at most 6 names).
fn describe(sig: &[String]) -> String {
    let mut s: Vec<&str> = sig.iter().take(6).map(String::as_str).collect();
    if sig.len() > 6 {
        s.push("…");
    }
    s.join(" → ")
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    const EW: &str =
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>";

    /// Three GPU-bound steps: `ops` elementwise ops of 70 µs each, queued back to back,
    /// then a sync that waits for them.
    fn trace(ops: &[&str]) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 2_000.0 * s as f64;
            b.step(s + 1, t0, 2_000.0);
            let mut start = t0 + 30.0;
            for (i, name) in ops.iter().enumerate() {
                let t = t0 + 10.0 + 5.0 * i as f64;
                let op = b.op(name, t, 4.0);
                let kernel = if name.contains("mm") {
                    "ampere_sgemm_128x64_nn"
                } else {
                    EW
                };
                b.kernel(kernel, op, t + 1.0, start, 70.0, [4096, 1, 1], [128, 1, 1]);
                start += 71.0;
            }
            b.runtime("cudaDeviceSynchronize", t0 + 60.0, start - t0 - 55.0, None);
        }
        b
    }

    #[test]
    fn fires_on_a_chain_of_elementwise_ops() {
        let r = trace(&["aten::mul", "aten::add", "aten::tanh", "aten::mul"]).report();
        let f = finding(&r, "G001");
        // 4 kernels of 70 µs fused into one pass of 70 µs: 210 µs, plus the 3 × 1 µs of
        // GPU idle between them.
        assert!(
            (f.saving_ms - 0.213).abs() < 0.002,
            "saving {}",
            f.saving_ms
        );
        assert!(
            f.message.contains("aten::mul → aten::add → aten::tanh"),
            "{}",
            f.message
        );
    }

    #[test]
    fn silent_when_a_gemm_breaks_the_chain() {
        let r = trace(&[
            "aten::mul",
            "aten::add",
            "aten::mm",
            "aten::tanh",
            "aten::mul",
        ])
        .report();
        assert!(!codes(&r).contains(&"G001"));
    }
}
