//! One rank's summary: what the cross-rank step needs from a rank, and nothing else.
//!
//! Input: a finished [`Profile`], its [`RunMetrics`] and the top findings of its own
//! diagnosis. Output: a [`RankSummary`] (per-step composition, every collective
//! instance with its time and size, the top causes): small, flat, and what
//! `tensight summarize` writes as Parquet, so the cross-rank step runs the same from a
//! folder of traces or from summaries. It does not compare ranks ([`super::compare`]).

use crate::analysis::timeline::overlap;
use crate::analysis::RunMetrics;
use crate::model::{GpuActivity, Profile};
use serde::{Deserialize, Serialize};

/// Version of the summary's layout (and of its Parquet schema): `MAJOR.MINOR`. A reader
/// refuses another major version.
pub const SUMMARY_VERSION: &str = "1.0";

/// What the cross-rank step needs from one rank.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RankSummary {
    /// The rank (`distributedInfo.rank`, the `rank-N` of the file name, or the
    /// multi-rank bundle's `ranks[].rank`).
    pub rank: u32,
    /// `distributedInfo.world_size`, when the trace says.
    pub world_size: Option<u32>,
    /// The input the rank was read from, as shown.
    pub source: String,
    /// The analysed steps, in order.
    pub steps: Vec<RankStep>,
    /// Communication kernels inside the analysed steps, in launch order.
    pub collectives: Vec<CollectiveCall>,
    /// The rank's own largest findings (at most [`TOP_CAUSES`]), largest saving first.
    pub top_causes: Vec<TopCause>,
}

/// Top causes kept per rank.
pub const TOP_CAUSES: usize = 3;

/// One step of one rank, by what filled it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct RankStep {
    /// Index among the rank's analysed steps (0-based).
    pub step: u32,
    /// Wall time of the step (ns).
    pub dur_ns: i64,
    /// Union of all GPU activity in the step (ns).
    pub gpu_busy_ns: i64,
    /// Union of the non-communication GPU activity (compute kernels, copies) (ns).
    pub compute_ns: i64,
    /// Sum of the communication kernels' durations (ns): transfer plus waiting.
    pub comm_ns: i64,
    /// Communication time no compute ran under (ns).
    pub exposed_comm_ns: i64,
    /// GPU idle while the host was not launching (host time between launches) (ns).
    pub idle_cpu_ns: i64,
    /// GPU idle after a host-blocking sync drained the queue (ns).
    pub idle_sync_ns: i64,
    /// GPU idle while the host was in DataLoader `__next__` (ns).
    pub idle_data_loader_ns: i64,
    /// GPU idle while the host was in memcpy calls (ns).
    pub idle_transfer_ns: i64,
}

/// One communication kernel: an instance of a collective on this rank.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CollectiveCall {
    /// Step it started in (index among the analysed steps).
    pub step: u32,
    /// Its position among the step's collectives of the same process group (0-based):
    /// with `step` and `group`, what matches it to the same instance on other ranks.
    pub seq: u32,
    /// Process group (`Process Group Name`; `?` when not recorded).
    pub group: String,
    /// Collective (`allreduce`), from `Collective name` or the kernel's name.
    pub name: String,
    /// Element type as recorded (`Float`); empty when not recorded.
    pub dtype: String,
    /// Elements of the larger message (in or out), when recorded.
    pub nelems: Option<u64>,
    /// Bytes of the larger message, when elements and dtype are known.
    pub bytes: Option<u64>,
    /// Ranks in the group, when recorded.
    pub group_size: Option<u32>,
    /// Kernel duration (ns): transfer plus waiting for the other ranks.
    pub dur_ns: i64,
    /// Of which no compute kernel ran under it (ns).
    pub exposed_ns: i64,
}

/// One of a rank's own findings, kept as a cause.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopCause {
    /// Rule code (`C001`).
    pub code: String,
    /// Title.
    pub title: String,
    /// Its saving on that rank, ms per step.
    pub saving_ms: f64,
}

/// True for a communication kernel: one whose args name a collective, or an NCCL/RCCL
/// kernel by name.
pub fn is_communication(g: &GpuActivity) -> bool {
    g.collective.is_some()
        || (g.is_kernel() && {
            let n = g.name.trim_start();
            n.starts_with("nccl") || n.starts_with("rccl")
        })
}

/// The collective a communication kernel ran, from its args or else its name
/// (`ncclKernel_AllReduce_RING_LL_Sum_float` → `allreduce`).
pub fn collective_name(g: &GpuActivity) -> String {
    if let Some(c) = &g.collective {
        return c.name.to_ascii_lowercase();
    }
    let n = g.name.trim_start();
    let rest = n
        .strip_prefix("ncclDevKernel_")
        .or_else(|| n.strip_prefix("ncclKernel_"))
        .unwrap_or(n);
    rest.split(['_', '('])
        .next()
        .unwrap_or(rest)
        .to_ascii_lowercase()
}

/// The summary of one rank: `rank` as the caller found it, `top` its largest findings
/// as (code, title, saving ms).
pub fn summarize(
    p: &Profile,
    m: &RunMetrics,
    rank: u32,
    source: &str,
    top: Vec<TopCause>,
) -> RankSummary {
    let mut steps = Vec::with_capacity(m.timeline.steps.len());
    let mut collectives = Vec::new();
    for (i, s) in m.timeline.steps.iter().enumerate() {
        let (lo, hi) = (s.start_ns, s.start_ns + s.dur_ns);
        let in_step: Vec<&GpuActivity> = p
            .gpu
            .iter()
            .filter(|g| g.ts_ns >= lo && g.ts_ns < hi)
            .collect();
        let compute = union(
            in_step
                .iter()
                .filter(|g| !is_communication(g))
                .map(|g| (g.ts_ns, g.end_ns().min(hi))),
        );
        let mut step = RankStep {
            step: i as u32,
            dur_ns: s.dur_ns,
            gpu_busy_ns: s.gpu_busy_ns,
            compute_ns: compute.iter().map(|r| r.1 - r.0).sum(),
            idle_cpu_ns: s.idle.cpu_ns,
            idle_sync_ns: s.idle.sync_ns,
            idle_data_loader_ns: s.idle.data_loader_ns,
            idle_transfer_ns: s.idle.transfer_ns,
            ..Default::default()
        };
        let comm: Vec<&GpuActivity> = in_step
            .into_iter()
            .filter(|g| is_communication(g))
            .collect();
        let mut seq_of: Vec<(String, u32)> = Vec::new();
        for g in &comm {
            let exposed = g.dur_ns - overlap(&compute, g.ts_ns, g.end_ns());
            step.comm_ns += g.dur_ns;
            collectives.push(call(g, i as u32, exposed.max(0), &mut seq_of));
        }
        step.exposed_comm_ns = union(comm.iter().map(|g| (g.ts_ns, g.end_ns())))
            .iter()
            .map(|&(a, b)| (b - a) - overlap(&compute, a, b))
            .sum::<i64>()
            .max(0);
        steps.push(step);
    }
    RankSummary {
        rank,
        world_size: p
            .meta
            .distributed
            .as_ref()
            .and_then(|d| d.world_size)
            .filter(|&w| w > 0)
            .map(|w| w.min(u32::MAX as i64) as u32),
        source: source.to_string(),
        steps,
        collectives,
        top_causes: top.into_iter().take(TOP_CAUSES).collect(),
    }
}

/// One communication kernel as a [`CollectiveCall`]; `seq_of` counts the step's
/// collectives per group so far.
fn call(
    g: &GpuActivity,
    step: u32,
    exposed_ns: i64,
    seq_of: &mut Vec<(String, u32)>,
) -> CollectiveCall {
    let c = g.collective.as_deref();
    let group = c
        .and_then(|c| c.group.clone())
        .unwrap_or_else(|| "?".to_string());
    let seq = match seq_of.iter_mut().find(|(grp, _)| *grp == group) {
        Some((_, n)) => {
            *n += 1;
            *n
        }
        None => {
            seq_of.push((group.clone(), 0));
            0
        }
    };
    CollectiveCall {
        step,
        seq,
        group,
        name: collective_name(g),
        dtype: c.and_then(|c| c.dtype.clone()).unwrap_or_default(),
        nelems: c.and_then(|c| c.in_nelems.max(c.out_nelems)),
        bytes: c.and_then(|c| c.bytes()),
        group_size: c.and_then(|c| c.group_size),
        dur_ns: g.dur_ns,
        exposed_ns,
    }
}

/// Sorted, disjoint union of `ranges` (empty ones dropped).
fn union(ranges: impl Iterator<Item = (i64, i64)>) -> Vec<(i64, i64)> {
    let mut v: Vec<(i64, i64)> = ranges.filter(|r| r.1 > r.0).collect();
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_kernel_names_give_the_collective() {
        let mut g = GpuActivity {
            kind: crate::model::GpuKind::Kernel,
            name: "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)".into(),
            device: 0,
            stream: 7,
            ts_ns: 0,
            dur_ns: 10,
            correlation: None,
            external_id: None,
            bytes: None,
            launch: None,
            collective: None,
            op: None,
            runtime: None,
        };
        assert!(is_communication(&g));
        assert_eq!(collective_name(&g), "allreduce");
        g.name = "ncclDevKernel_AllGather_RING_LL".into();
        assert_eq!(collective_name(&g), "allgather");
        g.name = "volta_sgemm_128x64_nn".into();
        assert!(!is_communication(&g));
    }

    #[test]
    fn union_merges_overlaps() {
        assert_eq!(
            union([(5, 9), (0, 3), (2, 4), (9, 9)].into_iter()),
            vec![(0, 4), (5, 9)]
        );
    }
}
