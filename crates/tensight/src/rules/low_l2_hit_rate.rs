//! M002 low-l2-hit-rate: a kernel reads several times its inputs' bytes from DRAM
//! because L2 hits rarely: data it re-reads (GEMM/conv tiles, gathers) is evicted
//! before reuse.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::efficiency;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "M002",
    name: "low-l2-hit-rate",
    category: Category::MemoryHierarchy,
    status: Status::Preview,
    since: "0.2.0",
    needs_gpu: true,
    doc: r#"## What it detects
Kernels with an L2 hit rate under 50% (`lts__t_sector_hit_rate.pct`) that read from DRAM
at least twice the bytes of their op's input tensors (shapes from `record_shapes=True`):
data is fetched again because L2 lost it between uses. A streaming kernel that reads each
byte once has a low hit rate too, and is not reported. Needs a hardware pass and recorded
shapes.

## Why it costs time
DRAM bandwidth is a fraction of L2's. A kernel that re-reads its inputs from DRAM is
bound by traffic it would not need if the reused tiles stayed in L2.

## Example
A large GEMM whose tiles are scheduled so that the same rows of A are fetched by blocks
far apart in time, or an embedding gather over a table larger than L2 with random
indices: 20% hits, DRAM reads 3× the tensors' size.

## Fix
Let the library pick a better tiling (cuBLAS/cuDNN heuristics: `torch.backends.cudnn.benchmark = True`),
use lower precision (bf16 halves the bytes), reorder work so reuse is close in time
(sort gather indices, block the loop), or for persistent data set an L2 access policy
window (`cudaStreamSetAttribute` with `accessPolicyWindow`).

## Thresholds
L2 hit rate < 50%, DRAM read ≥ 2× the op's input bytes, kernel ≥ 1% of the step.
Estimated saving: kernel time × memory throughput share of peak × (1 − input bytes /
DRAM read bytes): the part of its memory time spent re-reading.

## References
- Nsight Compute Kernel Profiling Guide, "Memory Workload Analysis" (L2 hit rate).
- CUDA C++ Programming Guide, "L2 cache set-aside for persisting accesses".
"#,
};

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let Some(hw) = &p.hardware else {
        return Vec::new();
    };
    let step_ns = ctx.step_ms() * 1e6;
    let mut out = Vec::new();
    for a in efficiency::applied_rows(p, ctx.steps()) {
        let k = &hw.kernels[a.row];
        let (Some(hit), Some(dram)) = (k.l2_hit_pct, k.dram_read_bytes) else {
            continue;
        };
        let Some(input) = a.op.and_then(|o| efficiency::input_bytes(p, o)) else {
            continue;
        };
        if hit >= 50.0 || dram < 2.0 * input || a.time_per_step_ns < 0.01 * step_ns {
            continue;
        }
        let mem = k.memory_throughput_pct.unwrap_or(100.0).clamp(0.0, 100.0) / 100.0;
        let saving_ms = a.time_per_step_ns * mem * (1.0 - input / dram) / 1e6;
        let key = crate::model::hardware::kernel_key(&k.name);
        let mut loc = a.op.map(|o| op_location(p, o)).unwrap_or_default();
        loc.kernel = Some(k.name.clone());
        out.push(
            Draft {
                change: None,
                title: format!("{key} re-reads its inputs from DRAM (L2 hit rate {hit:.0}%)"),
                message: format!(
                    "{key} hits L2 on {hit:.0}% of sectors and reads {} from DRAM for {} of inputs ({:.1}×), an estimated {} per step",
                    fmt_bytes(dram),
                    fmt_bytes(input),
                    dram / input,
                    fmt_ms(saving_ms)
                ),
                saving_ms,
                estimate: "kernel time × memory throughput share of peak × (1 − input bytes / DRAM read bytes) per step".into(),
                evidence: vec![
                    ev("kernel", k.name.clone()),
                    ev("L2 hit rate", format!("{hit:.1}%")),
                    ev("DRAM read per launch", fmt_bytes(dram)),
                    ev("op input bytes", fmt_bytes(input)),
                    ev("memory throughput", format!("{:.0}% of peak", mem * 100.0)),
                    ev("kernel time per step", fmt_ms(a.time_per_step_ns / 1e6)),
                ]
                .into_iter()
                .chain(super::stall_evidence(k))
                .collect(),
                explanation: "The kernel reads its inputs from DRAM several times over: data it reuses is evicted from L2 before the next use, and DRAM bandwidth bounds it.".into(),
                fixes: vec![
                    "Let cuDNN/cuBLAS choose better tilings (`torch.backends.cudnn.benchmark = True`) or use bf16 to halve the bytes.".into(),
                    "Bring reuse closer in time: sort gather indices, block loops so a tile is used while it is in L2.".into(),
                    "For data reused across kernels, set an L2 persisting access policy window.".into(),
                ],
                locations: vec![loc],
            }
            .finish(&META, ctx),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::testing::{codes, TraceBuilder};
    use serde_json::json;

    const CSV: &str = "\"ID\",\"Kernel Name\",\"Grid Size\",\"Block Size\",\"gpu__time_duration.sum\",\"dram__bytes_read.sum\",\"lts__t_sector_hit_rate.pct\",\"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed\"\n\"\",\"\",\"\",\"\",\"ns\",\"byte\",\"%\",\"%\"\n\"0\",\"gemm_kernel\",\"(64, 1, 1)\",\"(256, 1, 1)\",\"3,000,000\",\"HIT_BYTES\",\"HIT\",\"90\"\n";

    fn report(hit: &str, dram: &str) -> crate::report::Report {
        let mut b = TraceBuilder::new();
        b.step(1, 0.0, 4_000.0);
        let mm = b.op_with(
            "aten::mm",
            10.0,
            50.0,
            json!({"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["float", "float"]}),
        );
        b.kernel(
            "gemm_kernel",
            mm,
            20.0,
            30.0,
            3_000.0,
            [64, 1, 1],
            [256, 1, 1],
        );
        b.report_with_ncu(
            CSV.replace("HIT_BYTES", dram)
                .replace("\"HIT\"", &format!("\"{hit}\""))
                .as_bytes(),
        )
    }

    #[test]
    fn fires_on_rereads_with_low_hit_rate() {
        // Inputs 128 MiB; DRAM reads 512 MiB at 20% L2 hits.
        let r = report("20", "536,870,912");
        assert!(codes(&r).contains(&"M002"), "{:?}", codes(&r));
    }

    #[test]
    fn silent_on_streaming_reads() {
        let r = report("20", "134,217,728");
        assert!(!codes(&r).contains(&"M002"), "{:?}", codes(&r));
        let r = report("80", "536,870,912");
        assert!(!codes(&r).contains(&"M002"), "{:?}", codes(&r));
    }
}
