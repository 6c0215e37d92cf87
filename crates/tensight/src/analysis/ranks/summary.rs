//! One rank's summary: what the cross-rank step needs from a rank, and nothing else.
//!
//! Input: a finished [`Profile`], its [`RunMetrics`] and the top findings of its own
//! diagnosis. Output: a [`RankSummary`] (per-step composition, every collective
//! instance with its time and size, the top causes): small, flat, and what
//! `tensight summarize` writes as Parquet, so the cross-rank step runs the same from a
//! folder of traces or from summaries. It does not compare ranks ([`super::compare`]).

use crate::analysis::simulate::merge_intervals;
use crate::analysis::timeline::{overlap, IdleBreakdown, StepMetrics, Timeline};
use crate::analysis::RunMetrics;
use crate::model::{CpuOp, GpuActivity, Profile};
use serde::{Deserialize, Serialize};

/// Version of the summary's layout (and of its Parquet schema): `MAJOR.MINOR`. A reader
/// refuses another major version.
pub const SUMMARY_VERSION: &str = "1.2";

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
    /// Communication kernels and host-side collectives inside the analysed steps, in
    /// start order within each step.
    pub collectives: Vec<CollectiveCall>,
    /// The rank's own largest findings (at most [`TOP_CAUSES`]), largest saving first.
    pub top_causes: Vec<TopCause>,
    /// The program's own Python functions the rank spent the most host time in, over the
    /// analysed steps (at most [`HOST_FRAMES`]), largest first: what tells a host-bound
    /// straggler's extra work apart. Empty without recorded stacks. (Version 1.2.)
    #[serde(default)]
    pub host_frames: Vec<HostFrame>,
}

/// Host frames kept per rank.
pub const HOST_FRAMES: usize = 32;

/// Time in one of the program's own Python functions (a user frame: not torch's, a
/// library's or the interpreter's), summed over the rank's analysed steps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HostFrame {
    /// The frame as Kineto names it (`train.py(42): augment`).
    pub name: String,
    /// Its time inside the analysed steps, inclusive of what it calls, a recursive
    /// call counted once (ns).
    pub dur_ns: i64,
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
    /// Sum of the communication kernels' and host collectives' durations (ns): transfer
    /// plus waiting.
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
    /// GPU idle inside communication: a host-side collective's range (ns). The four
    /// idle parts above leave it out. (Version 1.1; 0 in summaries of 1.0.)
    #[serde(default)]
    pub idle_comm_ns: i64,
}

/// One communication kernel or host-side collective: an instance of a collective on this
/// rank.
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
    /// Duration (ns) of the kernel, or of the host collective's range: transfer plus
    /// waiting for the other ranks.
    pub dur_ns: i64,
    /// Of which no compute kernel ran under it (ns); 0 in a trace with no GPU activity.
    pub exposed_ns: i64,
    /// Its start, from the step's start (ns): when known (version 1.1), the waiting of
    /// collectives in flight together is counted once.
    #[serde(default)]
    pub start_ns: Option<i64>,
    /// Run on the host (a `gloo:` range), not by a kernel. (Version 1.1.)
    #[serde(default)]
    pub host: bool,
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

/// A communication event of one rank: a communication kernel, or a host-side collective
/// (its `gloo:` range, [`Profile::host_collectives`]).
struct Comm<'a> {
    ts_ns: i64,
    end_ns: i64,
    name: String,
    args: Option<&'a crate::model::Collective>,
    host: bool,
}

/// The name of a host collective's range as a collective (`gloo:all_reduce` →
/// `allreduce`, the name NCCL's kernels give).
fn host_collective_name(range: &str) -> String {
    range
        .strip_prefix(crate::model::HOST_COLLECTIVE_PREFIX)
        .unwrap_or(range)
        .replace('_', "")
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
    let host_comm: Vec<&CpuOp> = p
        .host_collectives()
        .iter()
        .filter_map(|&i| p.ops.get(i as usize))
        .collect();
    let t = &m.timeline;
    for (i, s) in t.steps.iter().enumerate() {
        let (lo, hi) = (s.start_ns, s.start_ns + s.dur_ns);
        let in_step: Vec<&GpuActivity> = p
            .gpu
            .iter()
            .filter(|g| g.ts_ns >= lo && g.ts_ns < hi)
            .collect();
        let is_comm = |g: &GpuActivity| is_communication(g) || p.in_host_collective(g);
        let compute = merge_intervals(
            in_step
                .iter()
                .filter(|g| !is_comm(g))
                .map(|g| (g.ts_ns, g.end_ns().min(hi)))
                .collect(),
        );
        let mut comm: Vec<Comm> = in_step
            .iter()
            .filter(|g| is_communication(g))
            .map(|g| Comm {
                ts_ns: g.ts_ns,
                end_ns: g.end_ns(),
                name: collective_name(g),
                args: g.collective.as_deref(),
                host: false,
            })
            .collect();
        // In start order: those of the step are a run.
        let from = host_comm.partition_point(|o| o.ts_ns < lo);
        comm.extend(
            host_comm[from..]
                .iter()
                .take_while(|o| o.ts_ns < hi)
                .map(|o| Comm {
                    ts_ns: o.ts_ns,
                    end_ns: o.end_ns(),
                    name: host_collective_name(&o.name),
                    args: None,
                    host: true,
                }),
        );
        comm.sort_by_key(|c| c.ts_ns);
        let comm_union = merge_intervals(comm.iter().map(|c| (c.ts_ns, c.end_ns)).collect());
        let (idle, idle_comm_ns) = idle_outside(t, s, &comm_union);
        let mut step = RankStep {
            step: i as u32,
            dur_ns: s.dur_ns,
            gpu_busy_ns: s.gpu_busy_ns,
            compute_ns: compute.iter().map(|r| r.1 - r.0).sum(),
            idle_cpu_ns: idle.cpu_ns,
            idle_sync_ns: idle.sync_ns,
            idle_data_loader_ns: idle.data_loader_ns,
            idle_transfer_ns: idle.transfer_ns,
            idle_comm_ns,
            ..Default::default()
        };
        // With no GPU activity at all there is no compute to overlap: none is claimed.
        let exposed_of = |a: i64, b: i64| {
            if p.gpu.is_empty() {
                0
            } else {
                ((b - a) - overlap(&compute, a, b)).max(0)
            }
        };
        let mut seq_of: Vec<(String, u32)> = Vec::new();
        for c in &comm {
            step.comm_ns += c.end_ns - c.ts_ns;
            let exposed = exposed_of(c.ts_ns, c.end_ns);
            collectives.push(call(c, i as u32, lo, exposed, &mut seq_of));
        }
        step.exposed_comm_ns = comm_union.iter().map(|&(a, b)| exposed_of(a, b)).sum();
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
        host_frames: host_frames(p, t),
    }
}

/// The user frames with the most time inside the analysed steps ([`HOST_FRAMES`] of
/// them): each frame's range clipped to the steps it overlaps, a frame inside another
/// of the same name (recursion) left to the outer one.
fn host_frames(p: &Profile, t: &Timeline) -> Vec<HostFrame> {
    let steps: Vec<(i64, i64)> = t
        .steps
        .iter()
        .map(|s| (s.start_ns, s.start_ns + s.dur_ns))
        .collect();
    let (Some(&(first, _)), Some(&(_, last))) = (steps.first(), steps.last()) else {
        return Vec::new();
    };
    let user = crate::model::user_frames(&p.python_frames);
    let frames = &p.python_frames;
    let mut by_name: rustc_hash::FxHashMap<&str, i64> = Default::default();
    for (i, f) in frames.iter().enumerate() {
        if !user[i] || f.end_ns() <= first || f.ts_ns >= last {
            continue;
        }
        let mut up = f.parent;
        let mut nested = false;
        while let Some(j) = up {
            let g = &frames[j as usize];
            if g.name == f.name {
                nested = true;
                break;
            }
            up = g.parent;
        }
        if nested {
            continue;
        }
        let inside = overlap(&steps, f.ts_ns, f.end_ns());
        if inside > 0 {
            *by_name.entry(&*f.name).or_default() += inside;
        }
    }
    let mut out: Vec<HostFrame> = by_name
        .into_iter()
        .map(|(name, dur_ns)| HostFrame {
            name: name.to_string(),
            dur_ns,
        })
        .collect();
    out.sort_by(|a, b| b.dur_ns.cmp(&a.dur_ns).then_with(|| a.name.cmp(&b.name)));
    out.truncate(HOST_FRAMES);
    out
}

/// The step's GPU idle by cause outside `comm` (sorted, disjoint), and the idle inside
/// it: a host collective waiting for another rank leaves the GPU idle, and that is the
/// other rank's doing, not this one's host time. Each idle gap's causes shrink in
/// proportion to the share of the gap under communication.
fn idle_outside(t: &Timeline, s: &StepMetrics, comm: &[(i64, i64)]) -> (IdleBreakdown, i64) {
    let mut idle = s.idle;
    if comm.is_empty() {
        return (idle, 0);
    }
    let (lo, hi) = (s.start_ns, s.start_ns + s.dur_ns);
    let mut inside = 0i64;
    // The gaps are in time order: those ending after the step's start, up to its end.
    let from = t.idle_gaps.partition_point(|&(_, g1)| g1 <= lo);
    let gaps = t.idle_gaps[from..].iter().zip(&t.gap_idle[from..]);
    for (&(g0, g1), by) in gaps.take_while(|((g0, _), _)| *g0 < hi) {
        let (a, b) = (g0.max(lo), g1.min(hi));
        if b <= a {
            continue;
        }
        let f = overlap(comm, a, b) as f64 / (g1 - g0).max(1) as f64;
        if f <= 0.0 {
            continue;
        }
        let cut = |ns: i64| (ns as f64 * f).round() as i64;
        let parts = [
            (&mut idle.cpu_ns, by.cpu_ns),
            (&mut idle.sync_ns, by.sync_ns),
            (&mut idle.transfer_ns, by.transfer_ns),
            (&mut idle.data_loader_ns, by.data_loader_ns),
        ];
        for (left, of_gap) in parts {
            let c = cut(of_gap).min(*left);
            *left -= c;
            inside += c;
        }
    }
    (idle, inside)
}

/// One communication event as a [`CollectiveCall`]; `seq_of` counts the step's
/// collectives per group so far.
fn call(
    c: &Comm,
    step: u32,
    step_start_ns: i64,
    exposed_ns: i64,
    seq_of: &mut Vec<(String, u32)>,
) -> CollectiveCall {
    let args = c.args;
    let group = args
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
        name: c.name.clone(),
        dtype: args.and_then(|c| c.dtype.clone()).unwrap_or_default(),
        nelems: args.and_then(|c| c.in_nelems.max(c.out_nelems)),
        bytes: args.and_then(|c| c.bytes()),
        group_size: args.and_then(|c| c.group_size),
        dur_ns: c.end_ns - c.ts_ns,
        exposed_ns,
        start_ns: Some(c.ts_ns - step_start_ns),
        host: c.host,
    }
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
}
