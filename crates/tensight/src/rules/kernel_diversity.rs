//! G002 kernel-diversity: a step made of many different kernels, each launched a few
//! times, or split into several compiled graphs: signs of a fragmented, unfused graph.
//! Informational: its cost is counted by L001 and G001.

use super::{
    ev, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status,
};
use crate::analysis::timeline::gpu_range;
use crate::model::{OpKind, Profile};
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "G002",
    name: "kernel-diversity",
    category: Category::Fusion,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Steps whose kernels are highly diverse: many distinct kernel names, a large share of
them launched only once or twice per step, i.e. every op of a long, irregular graph
running as its own kernel. Also steps split into several compiled regions
(`Torch-Compiled Region`, `CompiledFunction`, `## Call CompiledFxGraph` annotations):
graph breaks that leave eager ops between compiled graphs.

## Why it costs time
Diversity by itself costs nothing measurable: it is a symptom. A graph of many distinct
small ops pays one host dispatch and one memory round trip per op (launch overhead,
L001; unfused chains, G001), and graph breaks stop `torch.compile` from fusing across
them and from capturing the step as one CUDA graph. This rule points at the structure;
the savings are counted, once, by the rules that measure its cost.

## Example
A step of 300 kernels with 120 distinct names, 80 of them launched once per step; or a
compiled model whose step shows 6 `Torch-Compiled Region` ranges with eager kernels
between them.

## Fix
```python
# before: eager model with many small, different ops
out = model(x)
# after: compile it; find and remove graph breaks
model = torch.compile(model)
# TORCH_LOGS="graph_breaks" python train.py        # where and why the graph breaks
# torch._dynamo.explain(model)(x)                   # break count and reasons
```
Replace data-dependent Python control flow and `.item()`/`print` inside the model with
tensor ops so the whole step compiles as one graph.

## Thresholds
Reported when a step has at least 40 distinct kernel names (`MIN_DISTINCT`) and they
are at least a quarter of its kernels (`MIN_DISTINCT_RATIO`), or when a step holds at
least 3 compiled regions (`MIN_COMPILED_REGIONS`). Saving: none of its own (0 ms): the
time this structure costs is the launch-bound idle (L001) and unfused chains (G001),
reported there so it is not counted twice.

## References
- PyTorch docs: "torch.compile troubleshooting" (graph breaks, `torch._dynamo.explain`).
- PyTorch docs: "Understanding CUDA graph trees" (what breaks capture).
"#,
};

/// Distinct kernel names per step for the step to count as diverse.
const MIN_DISTINCT: f64 = 40.0;
/// Distinct names over kernels per step.
const MIN_DISTINCT_RATIO: f64 = 0.25;
/// Compiled regions per step that mean the graph breaks.
const MIN_COMPILED_REGIONS: f64 = 3.0;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let steps = p.steps.len().max(1) as f64;
    let (mut distinct, mut kernels, mut once) = (0usize, 0usize, 0usize);
    let mut one_off: BTreeMap<String, (u64, Option<u32>)> = BTreeMap::new();
    for s in &p.steps {
        let (lo, hi) = gpu_range(p, s);
        let mut names: rustc_hash::FxHashMap<&str, (u64, Option<u32>)> = Default::default();
        for g in p.gpu[lo..hi].iter().filter(|g| g.is_kernel()) {
            let e = names.entry(&g.name).or_insert((0, g.op));
            e.0 += 1;
            kernels += 1;
        }
        distinct += names.len();
        for (name, (c, op)) in names {
            if c <= 2 {
                once += 1;
                let e = one_off.entry(name.to_string()).or_insert((0, op));
                e.0 += 1;
            }
        }
    }
    let distinct_per_step = distinct as f64 / steps;
    let kernels_per_step = kernels as f64 / steps;
    let ratio = if kernels > 0 {
        distinct as f64 / kernels as f64
    } else {
        0.0
    };
    let regions = compiled_regions(p);
    let regions_per_step = regions.iter().map(|r| r.1).sum::<u64>() as f64 / steps;
    let diverse = distinct_per_step >= MIN_DISTINCT && ratio >= MIN_DISTINCT_RATIO;
    let broken = regions_per_step >= MIN_COMPILED_REGIONS;
    if !(diverse || broken) {
        return Vec::new();
    }
    let m = ctx.metrics;
    let message = if broken {
        format!(
            "each step runs {regions_per_step:.1} compiled regions with eager kernels between them, and {distinct_per_step:.0} distinct kernel names among {kernels_per_step:.0} kernels"
        )
    } else {
        format!(
            "each step runs {distinct_per_step:.0} distinct kernels among {kernels_per_step:.0} ({:.0}% distinct), {:.0} of them launched at most twice per step",
            100.0 * ratio,
            once as f64 / steps
        )
    };
    let mut evidence = vec![
        ev("kernels per step", format!("{kernels_per_step:.0}")),
        ev(
            "distinct kernel names per step",
            format!("{distinct_per_step:.0} ({:.0}% of kernels)", 100.0 * ratio),
        ),
        ev(
            "names launched at most twice per step",
            format!("{:.0}", once as f64 / steps),
        ),
        ev(
            "compiled regions per step",
            format!("{regions_per_step:.1}"),
        ),
        ev(
            "launch-bound idle per step (see L001)",
            fmt_ms(m.summary.idle_ms_per_step.cpu),
        ),
    ];
    if let Some((name, _)) = regions.first() {
        evidence.push(ev("compiled region", name.clone()));
    }
    let mut top: Vec<(String, (u64, Option<u32>))> = one_off.into_iter().collect();
    top.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
    let locations: Vec<Location> = top
        .into_iter()
        .take(5)
        .map(|(name, (_, op))| {
            let mut loc = op
                .map(|o| op_location(p, p.top_level_op(o)))
                .unwrap_or_default();
            loc.kernel = Some(name);
            loc
        })
        .collect();
    let d = Draft {
        change: None,
        title: if broken {
            "The compiled graph breaks into several regions".into()
        } else {
            "Many distinct kernels per step: a fragmented, unfused graph".into()
        },
        message,
        saving_ms: 0.0,
        estimate: "informational: no saving of its own; what fragmentation costs is the launch-bound idle (L001) and the unfused elementwise chains (G001), estimated there so it is not counted twice".into(),
        evidence,
        explanation: "A long graph of distinct small ops runs each op as its own kernel, paying a host dispatch and a memory round trip for each; graph breaks keep torch.compile from fusing across them and from capturing the step as one CUDA graph. The structure is the cause; L001 and G001 measure its cost.".into(),
        fixes: vec![
            "Compile the model: `model = torch.compile(model)`".into(),
            "Find graph breaks with `TORCH_LOGS=\"graph_breaks\"` or `torch._dynamo.explain(model)(x)`, and remove their causes (`.item()`, `print`, data-dependent Python control flow, unsupported ops)".into(),
            "Once the step is one graph, use `mode=\"reduce-overhead\"` to replay it as a CUDA graph".into(),
        ],
        locations,
    };
    vec![d.finish(&META, ctx)]
}

/// Compiled-region annotations in the steps, by name, with their count.
fn compiled_regions(p: &Profile) -> Vec<(String, u64)> {
    let (lo, hi) = crate::analysis::window(p);
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    for o in &p.ops {
        if o.kind != OpKind::Annotation || o.ts_ns < lo || o.ts_ns >= hi {
            continue;
        }
        let name: &str = &o.name;
        if name.starts_with("Torch-Compiled Region")
            || name.starts_with("CompiledFunction")
            || name.starts_with("## Call CompiledFxGraph")
        {
            *m.entry(name.to_string()).or_default() += 1;
        }
    }
    let mut v: Vec<(String, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Two steps of `kernels` kernels cycling through `distinct` names.
    fn trace(kernels: usize, distinct: usize) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..2 {
            let t0 = 10_000.0 * s as f64;
            b.step(s + 1, t0, 10_000.0);
            for k in 0..kernels {
                let t = t0 + 10.0 + 20.0 * k as f64;
                let op = b.op(&format!("aten::op{}", k % distinct), t, 5.0);
                b.kernel(
                    &format!("kernel_{}", k % distinct),
                    op,
                    t + 1.0,
                    t + 8.0,
                    5.0,
                    [256, 1, 1],
                    [128, 1, 1],
                );
            }
        }
        b
    }

    #[test]
    fn fires_informationally_on_a_fragmented_step() {
        let r = trace(100, 60).report();
        let f = finding(&r, "G002");
        assert_eq!(f.saving_ms, 0.0);
        assert!(
            f.message.contains("60 distinct kernels among 100"),
            "{}",
            f.message
        );
    }

    #[test]
    fn silent_on_a_repetitive_step() {
        // 100 kernels of 10 names: a regular network.
        assert!(!codes(&trace(100, 10).report()).contains(&"G002"));
    }
}
