//! P002 collective-wait: the ranks' communication kernels spend much of their time
//! waiting for the slowest rank rather than transferring.

use super::{ev, fmt_ms, Category, Draft, Finding, RankRule, RanksContext, RuleMeta, Status};
use crate::analysis::ranks::{JobChange, RanksAnalysis};

/// Registration.
pub const RULE: RankRule = RankRule {
    meta: &META,
    check,
    change,
};

static META: RuleMeta = RuleMeta {
    code: "P002",
    name: "collective-wait",
    category: Category::Distributed,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Collective time split into transfer and waiting. Each collective instance (the k-th
collective of a process group in a step) is matched across ranks; the shortest of its
kernels, the one on the rank that arrived last, is the estimate of the pure transfer,
and every other rank's excess over it is time spent waiting for that rank. Reported
when waiting is at least 20% of all communication kernel time.

## Why it costs time
An NCCL kernel starts on a rank as soon as that rank launches it, and spins until every
rank of the group has joined: on the early ranks it occupies the GPU (and often blocks
compute behind it on the same stream) without moving data. Waiting is skew made
visible; where it stays even on the slowest rank, the slowest rank changes from
collective to collective (jitter: OS noise, uneven data, a slow link).

## Example
`allreduce` of 7.5 MiB (Float, group 0): 4 ranks × 2.1 ms of transfer and 18.7 ms of
waiting per step.

## Fix
Remove the skew that causes the waiting: see P001 (a consistent straggler) and P004
(uneven compute). For jitter, keep ranks in step between collectives:
```python
# before: rank-dependent work between collectives
loss = model(batch); loss.backward()
# after: equal shapes per rank (pad or bucket by length) and no rank-local
# host work (logging, .item()) between forward and the gradient all-reduce
```
Pin processes and DataLoader workers to their NUMA node (`numactl`, `taskset`) to cut
OS noise.

## Thresholds
Reported when waiting is at least 20% of the communication kernel time. The saving is
only the waiting the job step model cannot put on one rank: the measured job step less
the modelled one (`max` over ranks of the step less its waiting), which is what remains
after every rank's own work is done; the waiting a straggler causes is P001's saving.

## References
- NCCL documentation, "Collective operations" (every rank must call the collective).
- HolisticTraceAnalysis, "Communication computation overlap" and "Straggler" notes.
"#,
};

/// Smallest waiting share reported, % of communication time.
const MIN_WAIT_PCT: f64 = 20.0;

/// Not a change of the model: the waiting that remains is measured, not replayed.
fn change(_: &RanksAnalysis) -> Option<JobChange> {
    None
}

fn check(ctx: &RanksContext) -> Vec<Finding> {
    let a = ctx.analysis;
    let c = &a.collectives;
    if a.ranks.len() < 2 || c.total_ms <= 0.0 || 100.0 * c.wait_ms / c.total_ms < MIN_WAIT_PCT {
        return Vec::new();
    }
    let share = 100.0 * c.wait_ms / c.total_ms;
    let ranks = a.ranks.len() as f64;
    let mut evidence = vec![
        ev("collective instances matched", c.matched.to_string()),
        ev(
            "communication per step, all ranks",
            format!(
                "{} = {} transfer + {} waiting",
                fmt_ms(c.total_ms),
                fmt_ms(c.transfer_ms),
                fmt_ms(c.wait_ms)
            ),
        ),
        ev("waiting per rank per step", fmt_ms(c.wait_ms / ranks)),
    ];
    for k in c.top.iter().take(3) {
        evidence.push(ev(
            k.label(),
            format!(
                "{:.1}× per step: {} transfer, {} waiting",
                k.per_step,
                fmt_ms(k.transfer_ms),
                fmt_ms(k.wait_ms)
            ),
        ));
    }
    let draft = Draft {
        title: "Collectives wait for the slowest rank".into(),
        message: format!(
            "{share:.0}% of the communication kernel time ({} of {} per step over {} \
             ranks) is waiting for the slowest rank, {} is transfer",
            fmt_ms(c.wait_ms),
            fmt_ms(c.total_ms),
            a.ranks.len(),
            fmt_ms(c.transfer_ms)
        ),
        saving_ms: a.model.residual_wait_ms(),
        estimate: "measured job step less the modelled one: the waiting no single rank's \
                   own work explains (the straggler's share is P001's)"
            .into(),
        evidence,
        explanation: "A collective's kernel runs on each rank from its launch until the \
                      last rank joins; the shortest instance across ranks is the transfer, \
                      the rest is waiting."
            .into(),
        fixes: vec![
            "Remove the skew that makes ranks arrive apart (P001, P004)".into(),
            "Keep rank-local host work (logging, .item(), evaluation) out of the span \
             between backward and the gradient all-reduce"
                .into(),
        ],
        locations: Vec::new(),
        change: None,
    };
    vec![draft.finish_ranks(&META, ctx)]
}
