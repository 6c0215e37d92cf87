//! P001 straggler-rank: one rank does more work per step than the others, and every
//! collective waits for it.

use super::{ev, fmt_ms, Category, Draft, Finding, RankRule, RanksContext, RuleMeta, Status};
use crate::analysis::ranks::{JobChange, RanksAnalysis};

/// Registration.
pub const RULE: RankRule = RankRule {
    meta: &META,
    check,
    change,
};

static META: RuleMeta = RuleMeta {
    code: "P001",
    name: "straggler-rank",
    category: Category::Distributed,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
In a job analysed rank by rank (`tensight analyze DIR`, `tensight merge`), the rank whose
own work per step (its step time less the time its collectives waited for others) is
the largest, when it is ahead of the median rank by at least 5% of the job's step. It
names what set the rank apart: its step composition against the median of the others
(host time between launches, compute kernel time, DataLoader waits, syncs, copies), and
its own largest findings. When stacks were recorded (`tensight run` records them in its
detail step), it also names the program's own function where the rank spends the most
extra host time, if that is at least 30% of the skew: the innermost of the nested
functions that carry it.

## Why it costs time
A synchronous collective (the gradient all-reduce of DDP, FSDP's all-gathers) finishes
on every rank only when the last rank has joined it. Every other rank's NCCL kernel
runs, spinning, until the straggler arrives: the whole job runs at the pace of its
slowest rank, and the faster ranks' GPUs wait.

## Example
Rank 3 spends 21 ms per step with the GPU idle between launches against 4 ms on the
others; the others' `ncclKernel_AllReduce_RING_LL_Sum_float` kernels last 19 ms where
rank 3's lasts 2 ms.

## Fix
Remove what slows that rank: the cause named in the finding is its largest excess. A
host-bound straggler often does extra work on its own (logging, checkpointing or
evaluation on rank 0 inside the step; a slower CPU or noisy neighbour on its node; its
DataLoader sharing cores):
```python
# before: rank 0 logs (and syncs) every step
if rank == 0:
    print(loss.item())
# after: log every N steps, without a host sync on the critical path
if rank == 0 and step % 100 == 0:
    print(loss.detach().cpu().item())
```
Otherwise balance the data (same sequence lengths per rank), pin workers to their
NUMA node, or move the rank off a slow node.

## Thresholds
Reported when the slowest rank's own work exceeds the median rank's by 5% of the job's
step. The saving is the job's step model replayed with that rank's own function removed when
one is named (its excess time over the others' median, taken off the rank's own work
each step), else with the rank at the median rank's pace (each step: its own work no
more than the median's); the others stop waiting.

## References
- PyTorch DDP design notes ("Internal Design": gradient buckets and all-reduce).
- HolisticTraceAnalysis, "Temporal breakdown" and "Comm-comp overlap" analyses.
"#,
};

/// Smallest skew reported, % of the job step.
const MIN_SKEW_PCT: f64 = 5.0;

/// The fix: with the rank's own function named, that function's excess over the others'
/// median taken off its own work each step (the rest of the skew, other causes and the
/// profiler's cost on the busier rank, stays); else the rank at the median rank's pace.
fn change(a: &RanksAnalysis) -> Option<JobChange> {
    let row = a.ranks.iter().position(|r| r.rank == a.slowest_rank)?;
    Some(match &a.slowest_frame {
        Some(f) => JobChange::LessOwn(
            row,
            ((f.rank_ms - f.others_ms).max(0.0) * 1e6).round() as i64,
        ),
        None => JobChange::AtMedianPace(row),
    })
}

fn check(ctx: &RanksContext) -> Vec<Finding> {
    let a = ctx.analysis;
    let step = ctx.step_ms();
    let Some(row) = a.ranks.iter().find(|r| r.rank == a.slowest_rank) else {
        return Vec::new();
    };
    let skew = row.own_ms - a.median_own_ms;
    if a.ranks.len() < 2 || step <= 0.0 || 100.0 * skew / step < MIN_SKEW_PCT {
        return Vec::new();
    }
    let Some(c) = change(a) else {
        return Vec::new();
    };
    let row_index = a
        .ranks
        .iter()
        .position(|r| r.rank == a.slowest_rank)
        .unwrap_or(0);
    let balanced = a.model.saving_ms(&[], JobChange::AtMedianPace(row_index));
    let saving = a.model.saving_ms(&[], c).min(balanced);
    let frame = a.slowest_frame.as_ref();
    let cause = a.slowest_excess.first();
    let mut because = match cause {
        Some(e) => format!(
            "; its largest excess is {}: {} per step against {} on the others",
            e.label,
            fmt_ms(e.rank_ms),
            fmt_ms(e.others_ms)
        ),
        None => String::new(),
    };
    if let Some(f) = frame {
        because += &format!(
            ", {} of it in `{}` ({} on the others)",
            fmt_ms(f.rank_ms),
            f.name,
            fmt_ms(f.others_ms)
        );
    }
    let mut evidence = vec![
        ev("job step (slowest rank)", fmt_ms(step)),
        ev(
            format!("rank {} own work per step", row.rank),
            fmt_ms(row.own_ms),
        ),
        ev("median rank's own work per step", fmt_ms(a.median_own_ms)),
    ];
    for e in a.slowest_excess.iter().take(3) {
        evidence.push(ev(
            e.label,
            format!(
                "{} vs {} (others' median)",
                fmt_ms(e.rank_ms),
                fmt_ms(e.others_ms)
            ),
        ));
    }
    if let Some(f) = frame {
        evidence.push(ev(
            format!("rank {}'s own code with the most extra time", row.rank),
            format!(
                "{}: {} vs {} (others' median)",
                f.name,
                fmt_ms(f.rank_ms),
                fmt_ms(f.others_ms)
            ),
        ));
    }
    if let Some(t) = row.top_causes.first() {
        evidence.push(ev(
            format!("rank {}'s own top finding", row.rank),
            format!("{} {} ({} per step)", t.code, t.title, fmt_ms(t.saving_ms)),
        ));
    }
    let draft = Draft {
        title: format!(
            "Rank {} is the straggler every collective waits for",
            row.rank
        ),
        message: format!(
            "rank {} does {} of own work per step, {} more than the median rank{because}",
            row.rank,
            fmt_ms(row.own_ms),
            fmt_ms(skew)
        ),
        saving_ms: saving,
        estimate: match frame {
            Some(f) => format!(
                "job step model replayed with rank {} doing {} less own work per step (the excess of `{}` over the others' median); at the median rank's pace it would save {}",
                row.rank,
                fmt_ms(f.rank_ms - f.others_ms),
                f.name,
                fmt_ms(balanced)
            ),
            None => format!(
                "job step model replayed with rank {} at the median rank's pace",
                row.rank
            ),
        },
        evidence,
        explanation: format!(
            "Collectives finish when the last rank joins them. The other ranks' \
             communication kernels run on, waiting, until rank {} arrives, so the job \
             steps at its pace.",
            row.rank
        ),
        fixes: vec![
            match frame {
                Some(f) => format!(
                    "Look at `{}`: rank {} spends {} more per step there than the others; \
                     do that work on every rank alike, outside the step, or off the \
                     training thread",
                    f.name,
                    row.rank,
                    fmt_ms(f.rank_ms - f.others_ms)
                ),
                None => format!(
                    "Find what rank {} does that the others do not (run `tensight analyze` \
                     on its trace alone): extra logging, evaluation or checkpointing inside \
                     the step, a busier host",
                    row.rank
                ),
            },
            "Balance the work per rank (same batch and sequence lengths) and the CPU \
             cores each rank's process and DataLoader get"
                .into(),
        ],
        locations: frame
            .map(|f| super::Location {
                source: Some(f.name.clone()),
                ..Default::default()
            })
            .into_iter()
            .collect(),
        change: None,
    };
    vec![draft.finish_ranks(&META, ctx)]
}
