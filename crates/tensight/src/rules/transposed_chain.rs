//! V003 transposed-elementwise-chain: a transposed view enters a chain of elementwise ops
//! that mix it with contiguous tensors; its layout passes from op to op and each op walks
//! one operand across its strides.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::forest::Forest;
use crate::analysis::views::{self, Bandwidth, Chain};
use crate::model::Profile;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "V003",
    name: "transposed-elementwise-chain",
    category: Category::Views,
    status: Status::Preview,
    since: "0.2.0",
    needs_gpu: true,
    doc: r#"## What it detects
A transposed view (`x.t()`, `transpose`, `permute`) that feeds two or more elementwise
ops which mix it with contiguous tensors, in the step the execution trace recorded
(`tensight run` records one). Needs the execution trace; uses the hardware pass's
measured sectors when there is one, else the kernels' own times.

## Why it costs time
PyTorch's elementwise kernels walk memory in the order of their output, and a fresh
output takes the layout of the first operand. `x.t() * a` therefore writes a transposed
result and reads `a` across its strides; `(x.t() * a) + b` does the same to `b`, and so
on down the chain: the transposed layout spreads, and every op that meets a contiguous
operand moves up to 8× the sectors for it (fp32). One `.contiguous()` where the chain
starts costs a single transposing copy and makes every later op dense.

## Example
`y = (h.t() * a + b).relu() - c` on 8192×8192 fp32 tensors: three of the four ops read
one operand across a stride of 8192 elements; each runs about 2.5× as long as its dense
twin.

## Fix
```python
# before
ht = h.t()
y = torch.relu(ht * a + b) - c
# after: materialize once where the chain starts
ht = h.t().contiguous()
y = torch.relu(ht * a + b) - c
# better, when you own the producer: compute h in the layout the chain needs,
# or fuse the chain (torch.compile) so it reads each operand once
```

## Thresholds
Fires when at least two ops reached by the view's layout walk an operand across its
strides and the estimated saving is at least 20 µs per step. Each op's excess time is
measured (kernel time × (1 − ideal / measured sectors)) with a hardware pass, else its
kernel time minus its dense bytes at the bandwidth the run's own dense elementwise ops
reached (the datasheet bandwidth × 0.85 when the run has none). The saving is their sum
less one materializing copy: 2 × the view's bytes at that bandwidth plus one strided
operand's excess.

## References
- PyTorch: `TensorIterator` output memory format (it follows the inputs' strides).
- CUDA C++ Best Practices Guide, "Coalesced access to global memory".
"#,
};

/// Saving from which a chain is reported, ns.
const MIN_SAVING_NS: f64 = 20_000.0;

/// The chains worth reporting and the reference bandwidth they were measured against
/// (also read by V001, which leaves their kernels to this rule).
pub(crate) struct Chains {
    pub chains: Vec<Chain>,
    pub bandwidth: Option<Bandwidth>,
}

impl Chains {
    pub(crate) fn of(ctx: &Context) -> Self {
        let Some(f) = ctx.metrics.tensors.as_ref() else {
            return Chains {
                chains: Vec::new(),
                bandwidth: None,
            };
        };
        let datasheet = ctx
            .metrics
            .device
            .as_ref()
            .and_then(|d| d.ceilings.as_ref())
            .map(|c| c.mem_bw_gbs);
        let bandwidth = views::reference_bandwidth(f, datasheet);
        let chains = views::transposed_chains(f, bandwidth, 2)
            .into_iter()
            .filter(|c| c.saving_ns() >= MIN_SAVING_NS)
            .collect();
        Chains { chains, bandwidth }
    }
}

fn check(ctx: &Context) -> Vec<Finding> {
    let Some(f) = ctx.metrics.tensors.as_ref() else {
        return Vec::new();
    };
    let c = ctx.chains();
    // One finding per cause: the chains of views made by the same op on the same line
    // with the same layout (a view made in every layer, or every iteration), their
    // savings added; no op is in two chains (see `transposed_chains`).
    let mut groups: std::collections::BTreeMap<(String, String), Vec<&Chain>> =
        std::collections::BTreeMap::new();
    for chain in &c.chains {
        let v = &f.nodes[chain.view as usize];
        groups
            .entry((v.made_by(), v.describe()))
            .or_default()
            .push(chain);
    }
    groups
        .into_values()
        .map(|mut list| {
            list.sort_by(|a, b| b.saving_ns().total_cmp(&a.saving_ns()));
            let mut fd = finding(ctx, ctx.profile, f, list[0], c.bandwidth);
            if list.len() > 1 {
                let total: f64 = list.iter().map(|c| c.saving_ns()).sum::<f64>() / 1e6;
                fd.evidence.push(ev(
                    "views like it (same op, line and layout)",
                    format!("{} per step, {} in all", list.len(), fmt_ms(total)),
                ));
                fd.message = fd.message.replace(
                    &format!("saves an estimated {}", fmt_ms(fd.saving_ms)),
                    &format!(
                        "saves an estimated {} over the {} views made the same way per step ({} for this one)",
                        fmt_ms(total),
                        list.len(),
                        fmt_ms(fd.saving_ms)
                    ),
                );
                fd.set_saving(total, ctx.step_ms());
            }
            fd
        })
        .collect()
}

fn finding(ctx: &Context, p: &Profile, f: &Forest, c: &Chain, bw: Option<Bandwidth>) -> Finding {
    let v = &f.nodes[c.view as usize];
    let view = v.describe();
    let saving_ms = c.saving_ns() / 1e6;
    let measured = c.ops.iter().all(|o| o.measured);
    let mut evidence = vec![
        ev("view", view.clone()),
        ev("created by", v.made_by()),
        ev(
            "ops its layout reached",
            format!(
                "{} ({} walk an operand across its strides)",
                c.reached,
                c.ops.len()
            ),
        ),
    ];
    let mut locations = Vec::new();
    if let Some(op) = v.created_by.as_ref().and_then(|c| c.op) {
        let mut l = op_location(p, op);
        l.tensor = Some(view.clone());
        locations.push(l);
    }
    for o in &c.ops {
        let a = &f.ops[o.op];
        let strided: Vec<String> = o
            .strided
            .iter()
            .map(|&t| f.nodes[t as usize].describe())
            .collect();
        let line =
            a.op.and_then(|op| p.user_frame(op))
                .map(|fr| format!(" at {}", fr.name))
                .unwrap_or_default();
        evidence.push(ev(
            format!("{}{line}", a.name),
            format!(
                "{} of kernel time, {} of it excess ({}); across strides: {}",
                fmt_ms(o.gpu_ns / 1e6),
                fmt_ms(o.excess_ns / 1e6),
                if o.measured {
                    "measured sectors"
                } else {
                    "beyond its dense bytes"
                },
                strided.join(", ")
            ),
        ));
        if let Some(op) = a.op {
            let mut l = op_location(p, op);
            l.tensor = strided.first().cloned();
            locations.push(l);
        }
    }
    evidence.push(ev(
        "reference bandwidth",
        match bw {
            Some(b) if b.ops > 0 => format!(
                "{:.0} GB/s, reached by {} dense elementwise ops of this step",
                b.bytes_per_ns, b.ops
            ),
            Some(b) => format!(
                "{:.0} GB/s, assumed (0.85 × the datasheet; no dense op of this step to measure)",
                b.bytes_per_ns
            ),
            None => "unknown (no device ceilings, no dense op to measure)".into(),
        },
    ));
    evidence.push(ev(
        "one `.contiguous()` of the view (estimated)",
        fmt_ms(c.copy_ns / 1e6),
    ));
    Draft {
        change: None,
        title: format!(
            "A transposed view spreads its layout through {} elementwise ops",
            c.reached
        ),
        message: format!(
            "{view}, made by {}, reaches {} elementwise ops; {} of them walk an operand across its strides, {} of kernel time per step; one `.contiguous()` where the chain starts (~{}) saves an estimated {}",
            v.made_by(),
            c.reached,
            c.ops.len(),
            fmt_ms(c.excess_ns() / 1e6),
            fmt_ms(c.copy_ns / 1e6),
            fmt_ms(saving_ms)
        ),
        saving_ms,
        estimate: format!(
            "Σ over the chain's ops of their excess time ({}) − one materializing copy (2 × view bytes at the reference bandwidth + one strided operand's excess), in the step the execution trace recorded",
            if measured {
                "kernel time × (1 − ideal / measured sectors)"
            } else {
                "kernel time − dense bytes / reference bandwidth"
            }
        ),
        evidence,
        explanation: "Elementwise kernels walk memory in the order of their output, and a fresh output takes the first operand's layout: the transposed view hands its layout to every result, and each op that meets a contiguous operand reads that operand a stride apart, moving a whole 32-byte sector for every 4-byte value.".into(),
        fixes: vec![
            "Materialize the view once where the chain starts: `ht = h.t().contiguous()`; every later op then runs dense.".into(),
            "Better, when you own the producer: compute the tensor in the layout the chain consumes, so no transpose is needed.".into(),
            "Or fuse the chain (`torch.compile`), so each operand is read once in one kernel.".into(),
        ],
        locations,
    }
    .finish(&META, ctx)
}
