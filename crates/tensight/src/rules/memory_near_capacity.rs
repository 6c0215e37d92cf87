//! A001 memory-near-capacity: the caching allocator's peak reaches 90% or more of the
//! GPU's memory.

use super::{
    ev, fmt_bytes, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::model::{MemoryEvent, Profile, RuntimeKind};
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "A001",
    name: "memory-near-capacity",
    category: Category::Allocator,
    status: Status::Preview,
    since: "0.1.0",
    // Memory events and device properties are recorded without GPU activity too.
    needs_gpu: false,
    doc: r#"## What it detects
The peak of PyTorch's caching allocator on a GPU, from the `[memory]` events recorded
with `profile_memory=True`: `Total Allocated` (bytes in live tensors) and
`Total Reserved` (bytes the allocator holds from CUDA, live or cached), against the
device's `totalGlobalMem` from `deviceProperties`. The op running at the peak is named.

## Why it costs time
Near capacity nothing is slow yet, but the run is one larger batch, longer sequence or
fragmentation spike away from an out-of-memory error. Before failing, the allocator
frees its cached blocks (`cudaFree`, which synchronizes the device) and retries
`cudaMalloc`, stalling the step; A002 reports that time when it happens. So this
finding is a risk, not a measured cost: its saving is 0 and its severity INFO.

## Example
`[memory]` events show `Total Reserved` rising to 131 GiB on an H200 whose
`totalGlobalMem` is 139.8 GiB (94%), peaking inside `aten::convolution_backward`.

## Fix
```python
# before
out = model(x)                       # fp32 activations kept for backward
# after: less activation memory
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)                   # half-size activations
# or recompute activations in backward
out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
# fragmentation (reserved >> allocated):
#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
```
Also: a smaller per-step batch with gradient accumulation; `optimizer.zero_grad(set_to_none=True)`;
`del` large temporaries before backward.

## Thresholds
Reported when the peak reserved (or, if not recorded, allocated) bytes reach 90% of the
device's memory. The saving is 0: capacity is a risk, not a time cost.

## References
- PyTorch docs, "CUDA semantics: Memory management" and `torch.cuda.memory_stats`.
- PyTorch docs, "Understanding CUDA Memory Usage" (memory snapshots).
"#,
};

/// Peak share of device memory that triggers the finding, %.
const NEAR_CAPACITY_PCT: f64 = 90.0;

#[derive(Default)]
struct Peak {
    allocated: i64,
    reserved: i64,
    at: Option<usize>,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let mut peaks: BTreeMap<i64, Peak> = BTreeMap::new();
    for (i, m) in p.memory.iter().enumerate() {
        if !m.is_gpu() {
            continue;
        }
        let e = peaks.entry(m.device_id).or_default();
        let used = m
            .total_reserved_bytes
            .or(m.total_allocated_bytes)
            .unwrap_or(0);
        let best = e.reserved.max(e.allocated);
        e.allocated = e.allocated.max(m.total_allocated_bytes.unwrap_or(0));
        e.reserved = e.reserved.max(m.total_reserved_bytes.unwrap_or(0));
        if used > best {
            e.at = Some(i);
        }
    }
    let mut out = Vec::new();
    for (dev, peak) in peaks {
        let Some(props) = p.meta.devices.iter().find(|d| d.id == dev) else {
            continue;
        };
        let cap = props.total_global_mem_bytes as f64;
        if cap <= 0.0 {
            continue;
        }
        let used = peak.reserved.max(peak.allocated) as f64;
        let pct = 100.0 * used / cap;
        if pct < NEAR_CAPACITY_PCT {
            continue;
        }
        let (mallocs, frees) = allocator_calls(p);
        let loc = peak
            .at
            .and_then(|i| p.memory.get(i))
            .and_then(|m| op_at(p, m))
            .map(|o| op_location(p, o))
            .unwrap_or_default();
        let at = loc
            .op
            .as_ref()
            .map(|o| format!(", peaking in `{o}`"))
            .unwrap_or_default();
        let d = Draft {
            change: None,
            title: format!("GPU {dev} memory is {pct:.0}% full"),
            message: format!(
                "The caching allocator reserves up to {} of {} on GPU {dev} ({pct:.1}%; {} allocated in tensors){at}",
                fmt_bytes(peak.reserved as f64),
                fmt_bytes(cap),
                fmt_bytes(peak.allocated as f64),
            ),
            saving_ms: 0.0,
            estimate: "0: memory near capacity is a risk of out-of-memory errors and allocator retries, not a measured time cost; A002 reports the time of any cudaMalloc/cudaFree calls in the steps".into(),
            evidence: vec![
                ev("device memory", fmt_bytes(cap)),
                ev("peak reserved", format!("{} ({:.1}%)", fmt_bytes(peak.reserved as f64), 100.0 * peak.reserved as f64 / cap)),
                ev("peak allocated", format!("{} ({:.1}%)", fmt_bytes(peak.allocated as f64), 100.0 * peak.allocated as f64 / cap)),
                ev("headroom", fmt_bytes((cap - used).max(0.0))),
                ev("cudaMalloc / cudaFree calls in the steps", format!("{mallocs} / {frees}")),
            ],
            explanation: format!(
                "With {} left, a larger batch or a fragmentation spike makes the allocator free its cache (cudaFree synchronizes the device) and retry, or fail with out-of-memory.{}",
                fmt_bytes((cap - used).max(0.0)),
                if frees > 0 {
                    " The trace already shows cudaFree calls inside the steps (see A002)."
                } else {
                    ""
                }
            ),
            fixes: vec![
                "Cut activation memory: `torch.autocast('cuda', dtype=torch.bfloat16)` or activation checkpointing (`torch.utils.checkpoint`)".into(),
                "If reserved is much larger than allocated, reduce fragmentation: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`".into(),
                "Lower the per-step batch and accumulate gradients over several steps".into(),
            ],
            locations: vec![loc],
        };
        out.push(d.finish(&META, ctx));
    }
    out
}

/// cudaMalloc-like and cudaFree-like calls inside the steps.
fn allocator_calls(p: &Profile) -> (usize, usize) {
    let inside = |t: i64| {
        let i = p.steps.partition_point(|s| s.start_ns <= t);
        i > 0 && t < p.steps[i - 1].end_ns
    };
    let count = |k: RuntimeKind| {
        p.runtime
            .iter()
            .filter(|r| r.kind == k && inside(r.ts_ns))
            .count()
    };
    (count(RuntimeKind::Malloc), count(RuntimeKind::Free))
}

/// The innermost op running on the event's thread at its time.
fn op_at(p: &Profile, m: &MemoryEvent) -> Option<u32> {
    p.ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.tid == m.tid && o.ts_ns <= m.ts_ns && m.ts_ns < o.end_ns())
        .max_by_key(|(i, o)| (o.depth, *i))
        .map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// A step whose allocator reserves `reserved_gib` of the H200's 139.8 GiB.
    fn trace(reserved_gib: f64) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        let gib = (1u64 << 30) as f64;
        for s in 0..2 {
            let t0 = 1_000.0 * s as f64;
            b.step(s + 1, t0, 1_000.0);
            let mm = b.op("aten::mm", t0 + 10.0, 50.0);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm,
                t0 + 20.0,
                t0 + 30.0,
                500.0,
                [64, 1, 1],
                [256, 1, 1],
            );
            b.memory(
                t0 + 15.0,
                1 << 30,
                (reserved_gib * gib * 0.9) as i64,
                (reserved_gib * gib) as i64,
            );
        }
        b
    }

    #[test]
    fn fires_near_capacity() {
        let r = trace(131.0).report();
        let f = finding(&r, "A001");
        assert_eq!(f.saving_ms, 0.0);
        assert_eq!(f.severity, crate::rules::Severity::Info);
        assert!(f.title.contains("94%"), "{}", f.title);
        assert_eq!(f.locations[0].op.as_deref(), Some("aten::mm"));
    }

    #[test]
    fn silent_with_headroom() {
        assert!(!codes(&trace(60.0).report()).contains(&"A001"));
    }
}
