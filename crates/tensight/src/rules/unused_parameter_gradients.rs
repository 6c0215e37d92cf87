//! W001 unused-parameter-gradients: backward computes gradients for parameters that
//! nothing reads (frozen by leaving them out of the optimizer instead of turning their
//! `requires_grad` off).

use super::{ev, fmt_ms, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status};
use crate::analysis::simulate::{Change, Durations};
use crate::model::{EtNode, Profile};
use std::collections::HashMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "W001",
    name: "unused-parameter-gradients",
    category: Category::WastedWork,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Parameters whose gradient backward computes and accumulates every step (an
`AccumulateGrad` in the autograd graph) but that no later op reads: no optimizer step,
clipping or logging takes that gradient. The usual cause is a part of the model meant
to stay frozen (a pretrained backbone under a linear probe, the base weights under
adapters) that was left out of the optimizer but kept `requires_grad=True`.

## Why it costs time
Autograd follows `requires_grad`, not the optimizer. For every such parameter it saves
the forward activations, computes the weight gradient (a GEMM as large as the forward
one) and, to reach parameters further back, the gradient of every activation in
between. When the trainable part sits at the end of the network (a head), the whole
backward through the frozen part, often two thirds of the step, is thrown away.

## Example
A ViT-S/16 linear probe: the optimizer holds the head's 2 tensors, the backbone's 150
still require grad; the backward runs through all 12 blocks every step, then the 150
gradients are reset by `zero_grad()` unread.

## Fix
```python
# before: frozen by leaving it out of the optimizer
opt = torch.optim.AdamW(model.head.parameters(), lr=1e-3)
# after: frozen for autograd too
model.backbone.requires_grad_(False)
opt = torch.optim.AdamW(model.head.parameters(), lr=1e-3)
# and, if the backbone's activations are not needed either:
with torch.no_grad():
    feats = model.backbone(x)
logits = model.head(feats)
```

## Thresholds
Needs an execution trace (every `tensight run` bundle has one; a plain trace with
`--et`): a gradient counts as read when an op outside the backward (an optimizer step,
`clip_grad_norm_`, your own code) takes its storage as input after the accumulation.
Reported when at least
one gradient is read (there is an update step) and some are not, and when the backward
after the last read gradient's `AccumulateGrad` saves at least 1% of the step
(`MIN_SAVING_PCT`). Estimate: that part of the backward (its kernels and its host time
on the autograd thread, while the step waits for it) replayed away. Weight gradients of
unread parameters computed before that point (frozen layers between trainable ones)
are not counted: a lower bound there.

## References
- PyTorch docs: "Excluding subgraphs from backward" (autograd mechanics,
  `requires_grad`), `torch.nn.Module.requires_grad_`.
"#,
};

/// Report when the saving is at least this share of the step (%).
const MIN_SAVING_PCT: f64 = 1.0;
const ACCUMULATE: &str = "torch::autograd::AccumulateGrad";
const EVALUATE: &str = "autograd::engine::evaluate_function: ";

/// The execution trace's `AccumulateGrad` nodes linked to ops, in time order, each with
/// whether an op outside the backward reads the gradient it stores, and its size.
fn accumulations(p: &Profile) -> Vec<(u32, bool, u64, Vec<i64>)> {
    let Some(et) = p.execution_trace.as_ref() else {
        return Vec::new();
    };
    let by_id: HashMap<i64, &EtNode> = et.nodes.iter().map(|n| (n.id, n)).collect();
    let in_backward = |n: &EtNode| {
        let mut cur = Some(n);
        while let Some(x) = cur {
            if x.name.starts_with(EVALUATE) || &*x.name == ACCUMULATE {
                return true;
            }
            cur = x.parent.and_then(|id| by_id.get(&id).copied());
        }
        false
    };
    // The last node outside the backward that read each storage (node ids follow the
    // order of execution; a storage id can come back for a later allocation, so only a
    // read after the accumulation counts).
    let mut last_read: HashMap<u64, i64> = HashMap::new();
    for n in et.nodes.iter().filter(|n| !in_backward(n)) {
        for t in &n.inputs {
            let e = last_read.entry(t.storage_id).or_insert(n.id);
            *e = (*e).max(n.id);
        }
    }
    let mut out: Vec<(u32, bool, u64, Vec<i64>)> = et
        .nodes
        .iter()
        .filter(|n| &*n.name == ACCUMULATE)
        .filter_map(|n| {
            let g = n.inputs.first()?;
            let read = last_read.get(&g.storage_id).is_some_and(|&r| r > n.id);
            Some((n.op?, read, g.numel, g.shape.clone()))
        })
        .collect();
    out.sort_by_key(|x| p.ops[x.0 as usize].ts_ns);
    out
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let acc = accumulations(p);
    let used = acc.iter().filter(|a| a.1).count();
    if used == 0 || used == acc.len() {
        return Vec::new();
    }
    // The template: read or not, by position among one step's AccumulateGrad calls.
    let per_step: Vec<Vec<u32>> = p
        .steps
        .iter()
        .map(|s| {
            let (a, b) = (s.host_start_ns, s.cpu_end_ns.max(s.host_start_ns));
            (0..p.ops.len() as u32)
                .filter(|&i| {
                    let o = &p.ops[i as usize];
                    &*o.name == ACCUMULATE && o.ts_ns >= a && o.ts_ns < b
                })
                .collect()
        })
        .collect();
    let n = per_step.first().map_or(0, Vec::len);
    if n == 0 || !acc.len().is_multiple_of(n) {
        return Vec::new();
    }
    let template: Vec<bool> = acc[..n].iter().map(|a| a.1).collect();
    let read_per_step = template.iter().filter(|&&r| r).count();
    let Some(last_read) = template.iter().rposition(|&r| r) else {
        return Vec::new();
    };
    if last_read + 1 == n {
        return Vec::new(); // nothing of the backward comes after the last read gradient
    }
    // Per step: the autograd thread's time after the last read gradient's accumulation,
    // to the end of the last accumulation; the kernels its ops launched then go too.
    let mut cuts = Vec::new();
    let mut durations: Durations = Durations::default();
    let (mut tail_ns, mut tail_kernel_ns, mut tail_kernels) = (0i64, 0i64, 0usize);
    for ops in per_step.iter().filter(|ops| ops.len() == n) {
        let outer = |o: u32| {
            let x = &p.ops[o as usize];
            x.parent
                .filter(|&q| p.ops[q as usize].name.starts_with(EVALUATE))
                .map_or(x.end_ns(), |q| p.ops[q as usize].end_ns())
        };
        let (from, to) = (outer(ops[last_read]), outer(ops[n - 1]));
        let tid = p.ops[ops[n - 1] as usize].tid;
        if to <= from {
            continue;
        }
        cuts.push((from, to));
        tail_ns += to - from;
        for (gi, g) in p.gpu.iter().enumerate() {
            let Some(o) = g.op else { continue };
            let op = &p.ops[o as usize];
            if op.tid == tid && op.ts_ns > from && op.ts_ns <= to {
                durations.insert(gi as u32, 0);
                tail_kernel_ns += g.dur_ns;
                tail_kernels += 1;
            }
        }
    }
    if cuts.is_empty() {
        return Vec::new();
    }
    let steps = cuts.len() as f64;
    let change = Change {
        durations,
        host_cuts: cuts,
        ..Default::default()
    };
    let saving_ms = ctx.replayed_ms(&change);
    if 100.0 * saving_ms / ctx.step_ms().max(1e-9) < MIN_SAVING_PCT {
        return Vec::new();
    }
    let unread: Vec<&(u32, bool, u64, Vec<i64>)> = acc[..n].iter().filter(|a| !a.1).collect();
    let unread_numel: u64 = unread.iter().map(|a| a.2).sum();
    let mut shapes: Vec<(Vec<i64>, usize)> = Vec::new();
    for a in &unread {
        match shapes.iter_mut().find(|s| s.0 == a.3) {
            Some(s) => s.1 += 1,
            None => shapes.push((a.3.clone(), 1)),
        }
    }
    shapes.sort_by_key(|s| std::cmp::Reverse(s.1));
    let shape_list = shapes
        .iter()
        .take(4)
        .map(|(s, k)| format!("{s:?} ×{k}"))
        .collect::<Vec<_>>()
        .join(", ");
    let d = Draft {
        change: Some(change),
        title: "Backward computes gradients that nothing reads".into(),
        message: format!(
            "{} of the {n} parameters that receive a gradient each step are never read by an optimizer or any other op ({:.1}M elements); the backward after the last read gradient takes {} of host time and {} of kernels per step",
            unread.len(),
            unread_numel as f64 / 1e6,
            fmt_ms(tail_ns as f64 / 1e6 / steps),
            fmt_ms(tail_kernel_ns as f64 / 1e6 / steps),
        ),
        saving_ms,
        estimate: "the backward after the last read gradient's accumulation replayed away: its kernels removed and its time on the autograd thread cut (the step waits for it); weight gradients of unread parameters computed earlier are not counted (a lower bound)".into(),
        evidence: vec![
            ev("parameters receiving a gradient per step", n.to_string()),
            ev("gradients read (optimizer, clipping, other code)", read_per_step.to_string()),
            ev("gradients never read", format!("{} ({:.1}M elements)", unread.len(), unread_numel as f64 / 1e6)),
            ev("their shapes", shape_list.clone()),
            ev(
                "backward after the last read gradient, per step",
                format!(
                    "{} host, {:.0} kernels, {} of kernel time",
                    fmt_ms(tail_ns as f64 / 1e6 / steps),
                    tail_kernels as f64 / steps,
                    fmt_ms(tail_kernel_ns as f64 / 1e6 / steps)
                ),
            ),
            ev("step time saved per step (replayed)", fmt_ms(saving_ms)),
        ],
        explanation: format!(
            "Autograd computes a gradient for every tensor that requires one, whether or not an optimizer holds it. Here {} parameters still require gradients that nothing reads: the backward keeps going through the layers that hold them (and the forward keeps their activations for it) only to have `zero_grad()` discard the result.",
            unread.len()
        ),
        fixes: vec![
            "Freeze what the optimizer leaves out for autograd too: `module.requires_grad_(False)` (or `p.requires_grad = False` for each frozen parameter)".into(),
            "Run a frozen feature extractor under `torch.no_grad()` (or `torch.inference_mode()`) so its activations are not kept for backward".into(),
            "If the gradients are wanted (to train those parameters later), add the parameters to the optimizer instead".into(),
        ],
        locations: vec![Location {
            op: Some(ACCUMULATE.to_string()),
            tensor: Some(format!("gradients never read: {shape_list}")),
            ..Default::default()
        }],
    };
    vec![d.finish(&META, ctx)]
}
