//! Host ↔ device transfers inside the steps: GPU → CPU → GPU round trips of the same
//! bytes. What C002 reports and C004 leaves to it; no findings here.

use super::host_work::blocked_window;
use super::Timeline;
use crate::model::{CopyDir, Profile};

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

/// HtoD/DtoH copies that start in [lo, hi), in time order.
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
            })
        })
        .collect()
}
