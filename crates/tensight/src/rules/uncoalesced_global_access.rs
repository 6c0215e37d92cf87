//! M001 uncoalesced-global-access: a kernel's global loads or stores touch more 32-byte
//! sectors per request than its access width needs, measured by Nsight Compute, and no
//! non-contiguous view input explains it (that case is V001).

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::efficiency;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "M001",
    name: "uncoalesced-global-access",
    category: Category::MemoryHierarchy,
    status: Status::Preview,
    since: "0.2.0",
    needs_gpu: true,
    doc: r#"## What it detects
Kernels whose global memory requests are not coalesced: Nsight Compute counts at least
twice the 32-byte sectors (loads + stores) that requests of the kernel's access width
would need (ideal sectors per request = bytes per thread access: 4 for fp32 scalars, 16
for `float4`; for kernels whose width the name does not tell, 16, so only traffic no
width explains counts). When the launching op reads a non-contiguous view, V001 reports
it instead. Needs a hardware pass (`tensight run --hardware` or `analyze --ncu FILE`).

## Why it costs time
Memory moves in 32-byte sectors. Threads of a warp that read addresses far apart make
the hardware fetch one sector per thread and use a few bytes of each: the kernel moves
several times the bytes it needs, and memory-bound kernels run that much longer.

## Example
A gather/scatter (`index_select`, embedding backward), a custom CUDA or Triton kernel
indexing `x[i * stride]` by thread, or a reduction over the wrong dimension: 24–32 sectors
per request where 4 would do.

## Fix
Make consecutive threads touch consecutive addresses: reduce over the contiguous
dimension (transpose once so it is), sort indices before a gather, use
`torch.compile` (it picks coalesced loops), or in a custom kernel map `threadIdx.x` to the
fastest-varying index and load through shared memory for transposes.

## Thresholds
Measured sectors ≥ 2× ideal and at least 1 MiB excess per launch. Estimated saving per
step: kernel time × (1 − ideal / measured sectors), assuming the kernel is bound by the
sectors it moves.

## References
- CUDA C++ Best Practices Guide, "Coalesced access to global memory".
- Nsight Compute Kernel Profiling Guide, "Memory Workload Analysis".
"#,
};

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    efficiency::attributed(p, ctx.steps(), crate::analysis::efficiency::MIN_FACTOR)
        .into_iter()
        .filter(|a| {
            a.view.is_none()
                && a.eff.excess_bytes >= crate::analysis::efficiency::MIN_EXCESS_BYTES
        })
        .map(|a| {
            let e = &a.eff;
            let mut loc = a.op.map(|o| op_location(p, o)).unwrap_or_default();
            loc.kernel = Some(e.name.clone());
            let cost_ms = a.cost_ns() / 1e6;
            let key = crate::model::hardware::kernel_key(&e.name);
            Draft {
                change: None,
                title: format!("Uncoalesced global memory access in {key}"),
                message: format!(
                    "{key} moves {:.1}× the sectors its {:.0}-byte accesses need (loads {} / stores {} sectors per request, ideal {:.0}; {} excess), an estimated {} per step",
                    e.excess_factor,
                    e.access_bytes,
                    opt(e.ld_sectors_per_request),
                    opt(e.st_sectors_per_request),
                    e.ideal_sectors_per_request,
                    fmt_bytes(e.excess_bytes),
                    fmt_ms(cost_ms)
                ),
                saving_ms: cost_ms,
                estimate: "kernel time × (1 − ideal / measured sectors) per step".into(),
                evidence: vec![
                    ev("kernel", e.name.clone()),
                    ev("load sectors per request", opt(e.ld_sectors_per_request)),
                    ev("store sectors per request", opt(e.st_sectors_per_request)),
                    ev("ideal sectors per request", format!("{:.0}", e.ideal_sectors_per_request)),
                    ev("excess traffic per launch", fmt_bytes(e.excess_bytes)),
                    ev("kernel time per step", fmt_ms(a.time_per_step_ns / 1e6)),
                    ev("long-scoreboard stall (cycles per warp)", opt(e.long_scoreboard_stall)),
                ].into_iter().chain(p.hardware.as_ref().and_then(|hw| hw.kernels.get(e.row)).and_then(super::stall_evidence)).collect(),
                explanation: "Threads of a warp touch addresses far apart, so each request fetches many 32-byte sectors and uses a few bytes of each; the kernel waits on that traffic.".into(),
                fixes: vec![
                    "Make consecutive threads read consecutive addresses: reduce or iterate over the contiguous dimension (transpose once beforehand if needed).".into(),
                    "Sort or bucket indices before gathers/scatters; try torch.compile, which generates coalesced loops.".into(),
                    "In a custom kernel, map threadIdx.x to the fastest-varying index and stage transposes through shared memory.".into(),
                ],
                locations: vec![loc],
            }
            .finish(&META, ctx)
        })
        .collect()
}

fn opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "–".into())
}

#[cfg(test)]
mod tests {
    use crate::rules::non_contiguous_view_access::tests::{probe_trace, PROBE_NCU};
    use crate::testing::codes;
    use serde_json::json;

    #[test]
    fn fires_when_no_view_explains_it() {
        // The same copy kernel, but its op records no shapes: M001, not V001.
        let mut b = probe_trace(false);
        let c = b.op_with("aten::index_select", 310.0, 20.0, json!({}));
        b.kernel("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<float>>(int, float)", c, 312.0, 200.0, 125.2, [65536, 1, 1], [128, 1, 1]);
        let r = b.report_with_ncu(PROBE_NCU);
        assert!(codes(&r).contains(&"M001"), "{:?}", codes(&r));
        assert!(!codes(&r).contains(&"V001"), "{:?}", codes(&r));
    }

    #[test]
    fn silent_on_coalesced_kernels() {
        let r = probe_trace(false).report_with_ncu(PROBE_NCU);
        assert!(!codes(&r).contains(&"M001"), "{:?}", codes(&r));
    }
}
