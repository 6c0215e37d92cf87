//! M003 occupancy-limited: registers or shared memory per block cap how many warps an
//! SM holds, and the kernel, far from any throughput ceiling, lacks the warps to hide
//! memory latency.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::efficiency;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "M003",
    name: "occupancy-limited",
    category: Category::MemoryHierarchy,
    status: Status::Preview,
    since: "0.2.0",
    needs_gpu: true,
    doc: r#"## What it detects
Kernels whose theoretical occupancy is under 50% because registers per thread or shared
memory per block (`launch__occupancy_limit_registers` / `_shared_mem`) allow fewer blocks
per SM than the warp and block slots do, while neither SM nor memory throughput reaches 60%
of peak: too few warps to hide latency. Needs a hardware pass.

## Why it costs time
An SM hides memory latency by switching between resident warps. When each thread holds
many registers, or each block a lot of shared memory, few warps fit; while they wait on
memory the SM idles, and the kernel runs below both its compute and bandwidth ceilings.

## Example
A custom or Triton kernel using 128 registers per thread with 256-thread blocks: 2 blocks
per SM, 25% theoretical occupancy, 30% of memory bandwidth.

## Fix
Cap registers (`__launch_bounds__`, `-maxrregcount`; in Triton fewer `num_warps`/smaller
`BLOCK` sizes, or more `num_stages` only if shared memory allows), use smaller tiles or
fewer pipeline stages to cut shared memory per block, or let `torch.compile`
(`mode="max-autotune"`) pick a configuration.

## Thresholds
Theoretical occupancy < 50%, the binding limit is registers or shared memory, SM and
memory throughput < 60% of peak, kernel ≥ 1% of the step. Estimated saving: throughput
taken to scale with occupancy up to 80% of peak: time × (1 − tp / min(tp × occupancy
without the limit / theoretical occupancy, 80%)), at most half the kernel time.

## References
- CUDA C++ Best Practices Guide, "Occupancy" and "Register pressure".
- Nsight Compute Kernel Profiling Guide, "Occupancy" (launch__occupancy_limit_*).
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
        let (Some(theo), Some(lr), Some(ls), Some(lw)) = (
            k.theoretical_occupancy_pct,
            k.occupancy_limit_registers,
            k.occupancy_limit_shared_mem,
            k.occupancy_limit_warps,
        ) else {
            continue;
        };
        let lb = k.occupancy_limit_blocks.unwrap_or(f64::MAX);
        let binding = lr.min(ls);
        let free = lw.min(lb);
        let tp = k
            .sm_throughput_pct
            .unwrap_or(0.0)
            .max(k.memory_throughput_pct.unwrap_or(0.0));
        if theo >= 50.0 || binding >= free || binding <= 0.0 || tp >= 60.0 || tp <= 0.0 {
            continue;
        }
        if a.time_per_step_ns < 0.01 * step_ns {
            continue;
        }
        let by = if lr <= ls {
            "registers"
        } else {
            "shared memory"
        };
        let other = if lr <= ls { ls.min(free) } else { lr.min(free) };
        let unlimited = (theo * other / binding).min(100.0);
        let new_tp = (tp * unlimited / theo).min(80.0);
        let frac = if new_tp > tp {
            (1.0 - tp / new_tp).min(0.5)
        } else {
            0.0
        };
        if frac <= 0.0 {
            continue;
        }
        let saving_ms = a.time_per_step_ns * frac / 1e6;
        let key = crate::model::hardware::kernel_key(&k.name);
        let mut loc = a.op.map(|o| op_location(p, o)).unwrap_or_default();
        loc.kernel = Some(k.name.clone());
        let res = match by {
            "registers" => format!(
                "{:.0} registers per thread",
                k.registers_per_thread.unwrap_or(0.0)
            ),
            _ => format!(
                "{:.0} bytes of shared memory per block",
                k.shared_mem_per_block.unwrap_or(0.0)
            ),
        };
        out.push(
            Draft {
                change: None,
                title: format!("{key} is occupancy-limited by {by}"),
                message: format!(
                    "{key} uses {res}: {binding:.0} blocks per SM fit ({theo:.0}% theoretical occupancy, {} achieved) and it reaches {tp:.0}% of peak throughput; an estimated {} per step",
                    k.achieved_occupancy_pct.map(|a| format!("{a:.0}%")).unwrap_or_else(|| "–".into()),
                    fmt_ms(saving_ms)
                ),
                saving_ms,
                estimate: "throughput scaled with occupancy up to 80% of peak, at most half the kernel time".into(),
                evidence: vec![
                    ev("kernel", k.name.clone()),
                    ev("limiting resource", res.clone()),
                    ev("blocks per SM (registers / shared memory / warps)", format!("{lr:.0} / {ls:.0} / {lw:.0}")),
                    ev("theoretical occupancy", format!("{theo:.0}%")),
                    ev("occupancy without this limit", format!("{unlimited:.0}%")),
                    ev("SM / memory throughput", format!("{:.0}% / {:.0}% of peak", k.sm_throughput_pct.unwrap_or(0.0), k.memory_throughput_pct.unwrap_or(0.0))),
                    ev("kernel time per step", fmt_ms(a.time_per_step_ns / 1e6)),
                ]
                .into_iter()
                .chain(super::stall_evidence(k))
                .collect(),
                explanation: format!("Each SM holds only {binding:.0} blocks of this kernel because of its {by}; with so few warps, the SM has nothing to switch to while they wait on memory, and the kernel stays below both ceilings."),
                fixes: vec![
                    "Cap registers (`__launch_bounds__`, `-maxrregcount`) or, in Triton, lower `num_warps`/`BLOCK` sizes.".into(),
                    "Use smaller tiles or fewer pipeline stages to cut shared memory per block.".into(),
                    "Let torch.compile(mode=\"max-autotune\") pick a configuration.".into(),
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
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    fn report(lim_regs: &str) -> crate::report::Report {
        let csv = format!("\"ID\",\"Kernel Name\",\"Grid Size\",\"Block Size\",\"gpu__time_duration.sum\",\"sm__maximum_warps_per_active_cycle_pct\",\"launch__occupancy_limit_registers\",\"launch__occupancy_limit_shared_mem\",\"launch__occupancy_limit_warps\",\"launch__occupancy_limit_blocks\",\"launch__registers_per_thread\",\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed\",\"sm__warps_active.avg.pct_of_peak_sustained_active\"\n\"0\",\"my_kernel\",\"(1024, 1, 1)\",\"(256, 1, 1)\",\"3,000,000\",\"{}\",\"{lim_regs}\",\"32\",\"8\",\"32\",\"128\",\"20\",\"30\",\"24\"\n", if lim_regs == "2" { "25" } else { "100" });
        let mut b = TraceBuilder::new();
        b.step(1, 0.0, 4_000.0);
        let o = b.op("aten::my_op", 10.0, 50.0);
        b.kernel(
            "my_kernel",
            o,
            20.0,
            30.0,
            3_000.0,
            [1024, 1, 1],
            [256, 1, 1],
        );
        b.report_with_ncu(csv.as_bytes())
    }

    #[test]
    fn fires_when_registers_limit_occupancy() {
        let r = report("2");
        let f = finding(&r, "M003");
        assert!(f.title.contains("registers"), "{}", f.title);
        assert!(f.saving_ms > 0.0);
    }

    #[test]
    fn silent_at_full_occupancy() {
        let r = report("8");
        assert!(!codes(&r).contains(&"M003"), "{:?}", codes(&r));
    }
}
