//! Host ↔ device transfers inside the steps: GPU → CPU → GPU round trips of the same
//! bytes. What C002 reports and C004 leaves to it; no findings here.

use super::host_work::blocked_window;
use super::Timeline;
use crate::model::{CopyDir, CpuOp, Profile};

/// Copies of this many bytes or fewer are scalar reads (S001's).
pub(crate) const SCALAR_BYTES: u64 = 64;

/// A GPU → CPU → GPU round trip.
pub(crate) struct RoundTrip {
    /// The device-to-host copy (index into `gpu`).
    pub d2h: u32,
    /// The host-to-device copy of the same bytes.
    pub h2d: u32,
    /// Host-side window: from the DtoH call's start to the end of the HtoD copy.
    pub window: (i64, i64),
}

/// Every round trip inside the steps. Shared with C004, which leaves the host work
/// inside these windows to this rule.
pub(crate) fn round_trips(p: &Profile, timeline: &Timeline) -> Vec<RoundTrip> {
    let mut out = Vec::new();
    for s in &p.steps {
        let copies = step_copies(p, timeline, s.start_ns, s.end_ns);
        let mut used = vec![false; copies.len()];
        for (i, &di) in copies.iter().enumerate() {
            let d = &p.gpu[di as usize];
            if d.copy_dir() != Some(CopyDir::DtoH) || d.bytes.is_none_or(|b| b <= SCALAR_BYTES) {
                continue;
            }
            let back = copies.iter().enumerate().skip(i + 1).find(|&(j, &hi)| {
                let h = &p.gpu[hi as usize];
                !used[j]
                    && h.copy_dir() == Some(CopyDir::HtoD)
                    && h.bytes == d.bytes
                    && h.ts_ns >= d.end_ns()
            });
            let Some((j, &hi)) = back else { continue };
            used[j] = true;
            let h = &p.gpu[hi as usize];
            let start = d
                .runtime
                .and_then(|r| p.runtime.get(r as usize))
                .map_or(d.ts_ns, |r| r.ts_ns.min(d.ts_ns));
            let end = h
                .runtime
                .and_then(|r| blocked_window(p, r))
                .map_or(h.end_ns(), |w| w.1.max(h.end_ns()));
            out.push(RoundTrip {
                d2h: di,
                h2d: hi,
                window: (start, end),
            });
        }
    }
    out
}

/// HtoD/DtoH copies that start in [lo, hi), in time order; not the staging copies of a
/// host-side collective (gloo on GPU tensors), which are its transfer.
pub(crate) fn step_copies(p: &Profile, timeline: &Timeline, lo: i64, hi: i64) -> Vec<u32> {
    let all = &timeline.gpu_in_steps;
    let from = all.partition_point(|&gi| p.gpu.get(gi as usize).is_some_and(|g| g.ts_ns < lo));
    all[from..]
        .iter()
        .copied()
        .take_while(|&gi| p.gpu.get(gi as usize).is_some_and(|g| g.ts_ns < hi))
        .filter(|&gi| {
            p.gpu.get(gi as usize).is_some_and(|g| {
                g.ts_ns >= lo
                    && g.ts_ns < hi
                    && matches!(g.copy_dir(), Some(CopyDir::HtoD | CopyDir::DtoH))
                    && !p.in_host_collective(g)
            })
        })
        .collect()
}

/// Ops that move a tensor to another device.
const COPY_OPS: &[&str] = &["aten::to", "aten::_to_copy", "aten::copy_"];

/// Each top-level copy op (`.to()`, `.cuda()`, `copy_`) whose host → device memcpy runs
/// in the steps, once, with the first such memcpy (index into `gpu`), in time order.
pub(crate) fn h2d_copy_ops<'a>(
    p: &'a Profile,
    timeline: &'a Timeline,
) -> impl Iterator<Item = (u32, u32, &'a CpuOp)> + 'a {
    let mut seen = std::collections::HashSet::new();
    timeline.gpu_in_steps.iter().filter_map(move |&gi| {
        let g = p.gpu.get(gi as usize)?;
        if g.copy_dir() != Some(CopyDir::HtoD) {
            return None;
        }
        let copy = p.top_level_op(g.op?);
        let c = p.ops.get(copy as usize)?;
        (COPY_OPS.contains(&&*c.name) && seen.insert(copy)).then_some((gi, copy, c))
    })
}

/// Copies smaller than this say little about the link's bandwidth (latency dominates).
const BANDWIDTH_MIN_BYTES: u64 = 1 << 20;

/// Host ↔ device bandwidth of a pinned copy, GB/s, and where the figure comes from: the
/// median of this trace's pinned copies of 1 MiB or more, else the PCIe link of the
/// GPU's generation at 80% of its datasheet rate (x16: Gen5 from compute capability 9,
/// Gen4 from 8, else Gen3), an assumption the estimate names.
pub(crate) fn pinned_copy_gbs(p: &Profile) -> (f64, &'static str) {
    use crate::model::{GpuKind, MemKind};
    let mut bw: Vec<f64> = p
        .gpu
        .iter()
        .filter(|g| {
            matches!(g.kind, GpuKind::Memcpy { src, dst, .. }
                if (src == MemKind::Pinned || dst == MemKind::Pinned)
                    && src != MemKind::Pageable && dst != MemKind::Pageable)
                && matches!(g.copy_dir(), Some(CopyDir::HtoD | CopyDir::DtoH))
                && g.bytes.is_some_and(|b| b >= BANDWIDTH_MIN_BYTES)
                && g.dur_ns > 0
        })
        .map(|g| g.bytes.unwrap_or(0) as f64 / g.dur_ns as f64)
        .collect();
    if !bw.is_empty() {
        bw.sort_by(f64::total_cmp);
        return (bw[bw.len() / 2], "the median of this trace's pinned copies");
    }
    let major = p.main_device().map_or(0, |d| d.compute_major);
    let gen_gbs = match major {
        m if m >= 9 => 64.0,
        8 => 32.0,
        _ => 16.0,
    };
    (
        0.8 * gen_gbs,
        "80% of the PCIe x16 rate of the GPU's generation (assumed)",
    )
}
