//! V002 repeated-materialization: the same view of one base tensor is copied into a new
//! tensor (`.contiguous()`, `.clone()`, a copying `.reshape()`/`.to()`) several times in a
//! step while the base does not change: every copy after the first is redundant.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::views::{self, Churn};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "V002",
    name: "repeated-materialization",
    category: Category::Views,
    status: Status::Preview,
    since: "0.2.0",
    needs_gpu: true,
    doc: r#"## What it detects
The same view of one base tensor (same base, shape, strides and offset) copied into a new
tensor two or more times in one step, with no write to the base in between:
`x.transpose(1, 2).contiguous()` in each of several heads, `.clone()` or `.float()` of a
weight in every call, a `reshape` that has to copy, repeated. Found on the tensor forest
of the step the execution trace recorded (`tensight run` records one).

## Why it costs time
Each copy reads the view (across its strides when it is transposed) and writes a new
tensor: a full pass over memory, often the slowest kind, and an allocation that stays
alive until its reader is done. When the base has not changed, every copy after the first
makes the same bytes again.

## Example
Four heads each call `feats.transpose(1, 2).contiguous()` on a 256 MiB feature map: four
transposing copies per step where one would do.

## Fix
```python
# before
for head in heads:
    out = out + head(feats.transpose(1, 2).contiguous())
# after: copy once, share the result
ft = feats.transpose(1, 2).contiguous()
for head in heads:
    out = out + head(ft)
```
Or let the consumers take the view as it is (matmul, `F.linear` and many ops accept
strided operands), or keep the tensor in the layout its readers need.

## Thresholds
Fires when the redundant copies take at least 20 µs of kernel time per step. The saving
is that kernel time: the copies after the first of each group.

## References
- PyTorch: `Tensor.contiguous`, `Tensor.clone`, `torch.reshape` (returns a view when it
  can, a copy when it must).
"#,
};

/// Redundant copy time from which a group is reported, ns.
const MIN_REDUNDANT_NS: i64 = 20_000;

fn check(ctx: &Context) -> Vec<Finding> {
    let Some(f) = ctx.metrics.tensors.as_ref() else {
        return Vec::new();
    };
    views::copy_churn(ctx.profile, f)
        .into_iter()
        .filter(|c| c.redundant_ns() >= MIN_REDUNDANT_NS)
        .map(|c| finding(ctx, f, &c))
        .collect()
}

fn finding(ctx: &Context, f: &crate::analysis::forest::Forest, c: &Churn) -> Finding {
    let p = ctx.profile;
    let first = &c.copies[0];
    let src = &f.nodes[first.source as usize];
    let base = &f.nodes[src.root as usize];
    let result = &f.nodes[first.result as usize];
    let n = c.copies.len();
    let saving_ms = c.redundant_ns() as f64 / 1e6;
    let op_name = result
        .created_by
        .as_ref()
        .map_or("a copy".to_string(), |k| format!("`{}`", k.name));
    let mut evidence = vec![
        ev("base tensor", base.describe()),
        ev(
            "view copied",
            if src.parent.is_some() {
                format!("{} ({})", src.describe(), src.made_by())
            } else {
                "the base itself".into()
            },
        ),
        ev(
            "copies in the step",
            format!("{n}, each {}", fmt_bytes(result.bytes() as f64)),
        ),
        ev("base written between copies", "no"),
    ];
    let mut locations = Vec::new();
    for (i, k) in c.copies.iter().enumerate() {
        let r = &f.nodes[k.result as usize];
        evidence.push(ev(
            format!("copy {}", i + 1),
            format!(
                "{}, {} of kernel time{}",
                r.made_by(),
                fmt_ms(k.gpu_ns as f64 / 1e6),
                if i == 0 { "" } else { " (redundant)" }
            ),
        ));
        if let Some(op) = k.op {
            let mut l = op_location(p, op);
            l.tensor = Some(src.describe());
            if !locations
                .iter()
                .any(|x: &super::Location| x.source == l.source && x.op == l.op)
            {
                locations.push(l);
            }
        }
    }
    Draft {
        change: None,
        title: format!("The same view of one tensor is copied {n} times per step"),
        message: format!(
            "{} of base {} is materialized by {op_name} {n} times in the step with no write to the base in between; {} redundant copies take {} of kernel time",
            src.describe(),
            base.describe(),
            n - 1,
            fmt_ms(saving_ms)
        ),
        saving_ms,
        estimate: "kernel time of every copy after the first of the same view, in the step the execution trace recorded".into(),
        evidence,
        explanation: "Each copy reads the whole view and writes a new tensor, a full pass over memory; the base did not change between the copies, so they all produce the same values.".into(),
        fixes: vec![
            "Make the copy once and pass it to every reader (hoist `.contiguous()` / `.clone()` / `.to()` out of the per-call code).".into(),
            "Or let the readers take the view as it is: matmul, `F.linear` and most elementwise ops accept strided operands.".into(),
            "Or keep the base in the layout its readers need, so no copy is made at all.".into(),
        ],
        locations,
    }
    .finish(&META, ctx)
}
