//! P004 compute-imbalance: the ranks' GPUs do different amounts of compute per step.

use super::{ev, fmt_ms, Category, Draft, Finding, RankRule, RanksContext, RuleMeta, Status};
use crate::analysis::ranks::{JobChange, RanksAnalysis};

/// Registration.
pub const RULE: RankRule = RankRule {
    meta: &META,
    check,
    change,
};

static META: RuleMeta = RuleMeta {
    code: "P004",
    name: "compute-imbalance",
    category: Category::Distributed,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Uneven compute between ranks: the GPU time of compute kernels and copies (the union,
communication left out) per step, when the busiest rank's exceeds the mean rank's by
at least 5% of the job's step.

## Why it costs time
In data- or pipeline-parallel training each step ends in a collective that waits for
every rank, so the rank with the most compute sets the pace and the others idle in
their collectives. Causes: uneven batches (variable sequence lengths, the last partial
batch), uneven pipeline stages or expert routing (MoE), or a slower GPU.

## Example
Rank 1 runs 48 ms of compute kernels per step, the mean rank 40 ms: the others wait
about 8 ms per step in the gradient all-reduce.

## Fix
```python
# before: random sequence lengths per rank
loader = DataLoader(ds, batch_size=32, sampler=DistributedSampler(ds))
# after: batches of similar total tokens on every rank
loader = DataLoader(ds, batch_sampler=TokenBudgetSampler(ds, max_tokens=16384))
```
For pipelines, rebalance the layers per stage; for MoE, add a load-balancing loss or
raise the capacity factor.

## Thresholds
Reported when the busiest rank's compute exceeds the mean by 5% of the job's step. The
saving is the job step model replayed with every rank's compute at the mean rank's in
each step (the excess removed from its own work).

## References
- PyTorch `DistributedSampler` docs; Megatron-LM notes on pipeline stage balance.
- HolisticTraceAnalysis, "Temporal breakdown" across ranks.
"#,
};

/// Smallest imbalance reported, % of the job step.
const MIN_SHARE_PCT: f64 = 5.0;

/// Every rank's compute at the mean.
fn change(_: &RanksAnalysis) -> Option<JobChange> {
    Some(JobChange::BalancedCompute)
}

fn check(ctx: &RanksContext) -> Vec<Finding> {
    let a = ctx.analysis;
    let step = ctx.step_ms();
    if a.ranks.len() < 2 || step <= 0.0 {
        return Vec::new();
    }
    let mean = a.ranks.iter().map(|r| r.compute_ms).sum::<f64>() / a.ranks.len() as f64;
    let Some(top) = a
        .ranks
        .iter()
        .max_by(|x, y| x.compute_ms.total_cmp(&y.compute_ms))
    else {
        return Vec::new();
    };
    let least = a
        .ranks
        .iter()
        .map(|r| r.compute_ms)
        .fold(f64::INFINITY, f64::min);
    let excess = top.compute_ms - mean;
    if 100.0 * excess / step < MIN_SHARE_PCT {
        return Vec::new();
    }
    let draft = Draft {
        title: format!("Compute is unbalanced: rank {} does the most", top.rank),
        message: format!(
            "rank {} runs {} of compute per step, {} more than the mean rank ({})",
            top.rank,
            fmt_ms(top.compute_ms),
            fmt_ms(excess),
            fmt_ms(mean)
        ),
        saving_ms: a.model.saving_ms(&[], JobChange::BalancedCompute),
        estimate: "job step model replayed with every rank's compute at the mean rank's".into(),
        evidence: vec![
            ev("compute per step, busiest rank", fmt_ms(top.compute_ms)),
            ev("compute per step, mean rank", fmt_ms(mean)),
            ev("compute per step, least busy rank", fmt_ms(least)),
        ],
        explanation: "Every step ends in a collective that waits for all ranks, so the \
                      rank with the most compute sets the step and the others idle."
            .into(),
        fixes: vec![
            "Give every rank the same work per step (token-budget batching, equal \
             pipeline stages, MoE load balancing)"
                .into(),
        ],
        locations: Vec::new(),
        change: None,
    };
    vec![draft.finish_ranks(&META, ctx)]
}
