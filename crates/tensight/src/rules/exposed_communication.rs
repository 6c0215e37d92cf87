//! P003 exposed-communication: communication kernels run with no compute under them.

use super::{ev, fmt_ms, Category, Draft, Finding, RankRule, RanksContext, RuleMeta, Status};
use crate::analysis::ranks::{JobChange, RanksAnalysis};

/// Registration.
pub const RULE: RankRule = RankRule {
    meta: &META,
    check,
    change,
};

static META: RuleMeta = RuleMeta {
    code: "P003",
    name: "exposed-communication",
    category: Category::Distributed,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Communication kernel time (NCCL/RCCL) during which no compute kernel or copy ran on any
other stream of the same GPU: exposed communication, per step and rank. A collective
gloo runs on the host (its `gloo:all_reduce` range on a worker thread; on GPU tensors it
copies them to the host, reduces there and copies back) counts the same way: the GPU
computes nothing under it. Collectives in flight together are counted once.

## Why it costs time
DDP and FSDP overlap gradient communication with the backward pass: buckets are
all-reduced while later layers' gradients are still being computed. Communication
with nothing under it (the last bucket, a collective issued after backward, a
parameter all-gather before forward, or a bucket too large to start early) adds its
full time to the step.

## Example
Each step ends with `ncclKernel_AllReduce_RING_LL_Sum_float` running 2.6 ms on stream
40 after the last compute kernel on stream 7 finished.

## Fix
```python
# before: one large bucket, all-reduced after backward
model = DDP(model)
# after: smaller buckets start during backward; FSDP: prefetch the next all-gather
model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)
fsdp = FSDP(model, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            forward_prefetch=True, limit_all_gathers=True)
```
With gradient accumulation, skip the all-reduce of the intermediate micro-batches
(`with model.no_sync():`). Collectives on the host (gloo) of GPU tensors: use the NCCL
backend, which reduces on the GPU without the host copies:
```python
dist.init_process_group("nccl")              # or "cpu:gloo,cuda:nccl" for both kinds
```

## Thresholds
Reported when the saving is at least 1% of the job's step. The saving is the job step
model replayed with every rank's exposed transfer hidden (per collective, the smaller
of its exposed time and its transfer estimate; per step, no more than the rank's
exposed communication, counted once where collectives run together, nor than its
compute time, the most there is to hide it under): an upper bound, as that compute may
come before the data to send is ready.

## References
- PyTorch DDP notes, "Gradient bucketing" and `bucket_cap_mb`.
- PyTorch FSDP docs, `backward_prefetch`, `forward_prefetch`.
"#,
};

/// Smallest saving reported, % of the job step.
const MIN_SHARE_PCT: f64 = 1.0;

/// Every rank's exposed transfer hidden.
fn change(_: &RanksAnalysis) -> Option<JobChange> {
    Some(JobChange::OverlappedComm)
}

fn check(ctx: &RanksContext) -> Vec<Finding> {
    let a = ctx.analysis;
    let step = ctx.step_ms();
    let saving = a.model.saving_ms(&[], JobChange::OverlappedComm);
    if step <= 0.0 || 100.0 * saving / step < MIN_SHARE_PCT {
        return Vec::new();
    }
    let n = a.ranks.len().max(1) as f64;
    let exposed = a.ranks.iter().map(|r| r.exposed_comm_ms).sum::<f64>() / n;
    let comm = a.ranks.iter().map(|r| r.comm_ms).sum::<f64>() / n;
    let worst = a
        .ranks
        .iter()
        .max_by(|x, y| x.exposed_comm_ms.total_cmp(&y.exposed_comm_ms));
    let mut evidence = vec![
        ev("communication per step (mean rank)", fmt_ms(comm)),
        ev("of which exposed (no compute under it)", fmt_ms(exposed)),
    ];
    if let Some(w) = worst {
        evidence.push(ev(
            format!("most exposed: rank {}", w.rank),
            format!("{} of {}", fmt_ms(w.exposed_comm_ms), fmt_ms(w.comm_ms)),
        ));
    }
    let c = &a.collectives;
    let on_host = if c.host > 0 {
        evidence.push(ev(
            "collective instances run on the host (gloo)",
            format!("{} of {}", c.host, c.matched),
        ));
        format!(
            "; {} of the {} collective instances run on the host (gloo): GPU tensors go \
             to the host, are reduced by the CPU and come back",
            c.host, c.matched
        )
    } else {
        String::new()
    };
    let mut fixes = Vec::new();
    if c.host > 0 {
        fixes.push(
            "Use the NCCL backend for GPU tensors (`dist.init_process_group(\"nccl\")`, \
             or \"cpu:gloo,cuda:nccl\"): it reduces on the GPU, with no host copies"
                .into(),
        );
    }
    fixes.extend([
        "DDP: smaller gradient buckets (bucket_cap_mb) so all-reduces start during \
         backward"
            .into(),
        "FSDP: backward_prefetch=BACKWARD_PRE and forward_prefetch=True".into(),
        "Gradient accumulation: `with model.no_sync():` on the intermediate \
         micro-batches"
            .into(),
    ]);
    let draft = Draft {
        title: "Communication is not overlapped with compute".into(),
        message: format!(
            "{} of the {} of communication per step (mean over {} ranks) runs with no \
             compute under it{on_host}",
            fmt_ms(exposed),
            fmt_ms(comm),
            a.ranks.len()
        ),
        saving_ms: saving,
        estimate: "job step model replayed with every rank's exposed transfer hidden \
                   under compute: an upper bound"
            .into(),
        evidence,
        explanation: "Communication that starts after the compute it could hide under has \
                      finished adds its whole transfer time to the step."
            .into(),
        fixes,
        locations: Vec::new(),
        change: None,
    };
    vec![draft.finish_ranks(&META, ctx)]
}
