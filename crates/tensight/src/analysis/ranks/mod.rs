//! Cross-rank analysis: many ranks of one distributed job, compared.
//!
//! Input: one [`RankSummary`] per rank ([`summary::summarize`] of each rank's profile, or
//! read back from Parquet). Output: [`RanksAnalysis`]: per-rank headline figures, each
//! collective instance matched across ranks and split into transfer and waiting, and
//! the job's step model the distributed rules replay their fixes on ([`JobModel`]).
//! It reads summaries only, so `analyze DIR` and `merge SUMMARIES` agree by
//! construction. It does not name problems: the `P` rules in [`crate::rules`] do.
//!
//! The model. For rank r and step s, `dur[r][s]` is the step's wall time and
//! `wait[r][s]` the sum over the step's collectives k of `dur[r][k] - min_r' dur[r'][k]`:
//! the time its communication kernels ran beyond the fastest rank's, i.e. waited for
//! the slowest to arrive (the minimum is the estimate of pure transfer). A rank's own
//! work is `own[r][s] = dur[r][s] - wait[r][s]`, and the job's step is modelled as
//! `max_r own[r][s]`: in a synchronous job every rank finishes the step when the slowest
//! has done its own work. A fix changes some `own` values; its saving is the mean over
//! steps of the modelled step before less after.

pub mod summary;

use serde::Serialize;
pub use summary::{CollectiveCall, HostFrame, RankStep, RankSummary, TopCause, SUMMARY_VERSION};

/// The job's ranks compared.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RanksAnalysis {
    /// World size: the one the traces state, else the ranks read.
    pub world_size: u32,
    /// Steps compared: the fewest any rank has.
    pub steps: usize,
    /// The job's step time, ms: mean over the compared steps of the slowest rank's.
    pub job_step_ms: f64,
    /// Per rank, by rank.
    pub ranks: Vec<RankRow>,
    /// Collective instances matched on every rank.
    pub collectives: CollectiveSplit,
    /// The rank doing the most own work per step (the one the others wait for).
    pub slowest_rank: u32,
    /// Median over ranks of the own work per step, ms.
    pub median_own_ms: f64,
    /// What set the slowest rank apart from the others, largest first.
    pub slowest_excess: Vec<Excess>,
    /// The program's own function the slowest rank spends the most extra host time in,
    /// when stacks were recorded and it holds a share of the skew
    /// ([`FRAME_SHARE_OF_SKEW`]).
    pub slowest_frame: Option<FrameExcess>,
    /// What did not line up (ranks with different step counts, collectives that do
    /// not match, world size not met): shown in the report, never silently dropped.
    pub warnings: Vec<String>,
    /// The job's step model.
    #[serde(skip)]
    pub model: JobModel,
}

/// One rank's headline figures (per step, means over the compared steps).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RankRow {
    /// Rank.
    pub rank: u32,
    /// Input it was read from.
    pub source: String,
    /// Steps the rank has (the comparison uses the common ones).
    pub steps: usize,
    /// Step time, ms.
    pub step_ms: f64,
    /// GPU busy share of the step, %.
    pub busy_pct: f64,
    /// Compute (non-communication GPU) time, ms.
    pub compute_ms: f64,
    /// Communication kernel time, ms.
    pub comm_ms: f64,
    /// Of the step, %.
    pub comm_pct: f64,
    /// Communication no compute ran under, ms.
    pub exposed_comm_ms: f64,
    /// Communication spent waiting for slower ranks, ms.
    pub wait_ms: f64,
    /// Own work (step less waiting), ms.
    pub own_ms: f64,
    /// The rank's own largest findings.
    pub top_causes: Vec<TopCause>,
}

/// Collective time split into transfer and waiting, over the matched instances.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CollectiveSplit {
    /// Instances matched on every rank.
    pub matched: usize,
    /// Instances left out (missing on a rank, or a different collective there).
    pub unmatched: usize,
    /// Of the matched, those run on the host (gloo's `gloo:` ranges), not by kernels.
    pub host: usize,
    /// Communication kernel time per step, summed over ranks, ms.
    pub total_ms: f64,
    /// Of which transfer (every rank's kernel at the fastest rank's duration), ms.
    pub transfer_ms: f64,
    /// Of which waiting for the slowest rank, ms.
    pub wait_ms: f64,
    /// The collectives with the most waiting, largest first (at most 5).
    pub top: Vec<CollectiveRow>,
}

/// One kind of collective (name, group, size) over its matched instances.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CollectiveRow {
    /// `allreduce`.
    pub name: String,
    /// Process group.
    pub group: String,
    /// Element type.
    pub dtype: String,
    /// Message bytes, when known.
    pub bytes: Option<u64>,
    /// Run on the host (gloo), not by a kernel.
    pub host: bool,
    /// Instances per step.
    pub per_step: f64,
    /// Transfer time per step summed over ranks, ms.
    pub transfer_ms: f64,
    /// Waiting per step summed over ranks, ms.
    pub wait_ms: f64,
}

impl CollectiveRow {
    /// The kind as reports and findings name it: `allreduce 24.0 MiB Float (group 0)`,
    /// or `allreduce on the host (gloo)` for one gloo runs on the host.
    pub fn label(&self) -> String {
        if self.host {
            return format!("{} on the host (gloo)", self.name);
        }
        let size = self
            .bytes
            .map(|b| crate::rules::fmt_bytes(b as f64))
            .unwrap_or("?".into());
        format!("{} {size} {} (group {})", self.name, self.dtype, self.group)
    }
}

/// A part of the step where the slowest rank spends more than the others.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Excess {
    /// Key: `host_gaps`, `compute`, `data_loader`, `sync`, `transfer`.
    pub part: &'static str,
    /// What it is, for people.
    pub label: &'static str,
    /// The slowest rank's time per step, ms.
    pub rank_ms: f64,
    /// The median of the other ranks, ms.
    pub others_ms: f64,
}

/// A user function where the slowest rank spends more host time than the others.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FrameExcess {
    /// The frame (`train.py(42): augment`).
    pub name: String,
    /// The slowest rank's time in it per step, ms.
    pub rank_ms: f64,
    /// The median of the other ranks (0 where it is not among a rank's frames), ms.
    pub others_ms: f64,
}

/// Least share of the slowest rank's extra own work a function's extra time must be to
/// be named as where it goes.
pub const FRAME_SHARE_OF_SKEW: f64 = 0.3;

/// The job's step model: per rank, per compared step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobModel {
    /// Ranks, in the order of the rows.
    pub ranks: Vec<u32>,
    /// `own[r][s]`, ns.
    pub own: Vec<Vec<i64>>,
    /// `wait[r][s]`, ns.
    pub wait: Vec<Vec<i64>>,
    /// Compute time `compute[r][s]`, ns.
    pub compute: Vec<Vec<i64>>,
    /// Exposed transfer `exposed[r][s]`: per collective, the smaller of its exposed
    /// time and its transfer estimate, summed over the step and no more than the step's
    /// exposed communication or its compute, ns.
    pub exposed: Vec<Vec<i64>>,
    /// Measured job step `max_r dur[r][s]`, ns.
    pub measured: Vec<i64>,
}

/// A change to the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JobChange {
    /// The rank at this row index works at the median rank's pace.
    AtMedianPace(usize),
    /// The rank at this row index does this much less own work each step (ns): one
    /// cause of its excess removed.
    LessOwn(usize, i64),
    /// Every rank's compute is the mean over ranks (per step).
    BalancedCompute,
    /// Every rank's exposed transfer is hidden under compute.
    OverlappedComm,
}

impl JobModel {
    /// Modelled job step per step (ns) after `changes`.
    pub fn steps_ns(&self, changes: &[JobChange]) -> Vec<i64> {
        let n = self.measured.len();
        let mut own = self.own.clone();
        for c in changes {
            for s in 0..n {
                match *c {
                    JobChange::AtMedianPace(r) => {
                        let mut col: Vec<i64> = self.own.iter().map(|o| o[s]).collect();
                        own[r][s] = own[r][s].min(median(&mut col));
                    }
                    JobChange::LessOwn(r, ns) => own[r][s] = (own[r][s] - ns).max(0),
                    JobChange::BalancedCompute => {
                        let mean = self.compute.iter().map(|c| c[s]).sum::<i64>()
                            / self.compute.len().max(1) as i64;
                        for (r, o) in own.iter_mut().enumerate() {
                            o[s] -= (self.compute[r][s] - mean).max(0);
                        }
                    }
                    JobChange::OverlappedComm => {
                        for (r, o) in own.iter_mut().enumerate() {
                            o[s] -= self.exposed[r][s];
                        }
                    }
                }
            }
        }
        (0..n)
            .map(|s| own.iter().map(|o| o[s]).max().unwrap_or(0))
            .collect()
    }

    /// Mean modelled job step after `changes`, ms.
    pub fn job_ms(&self, changes: &[JobChange]) -> f64 {
        mean_ms(&self.steps_ns(changes))
    }

    /// Saving of `change` on top of `base`, ms per step.
    pub fn saving_ms(&self, base: &[JobChange], change: JobChange) -> f64 {
        let mut with = base.to_vec();
        with.push(change);
        (self.job_ms(base) - self.job_ms(&with)).max(0.0)
    }

    /// Mean of measured job step less modelled job step, ms: waiting even the slowest
    /// rank did (the slowest moved from collective to collective).
    pub fn residual_wait_ms(&self) -> f64 {
        let modelled = self.steps_ns(&[]);
        let d: Vec<i64> = self
            .measured
            .iter()
            .zip(&modelled)
            .map(|(m, o)| (m - o).max(0))
            .collect();
        mean_ms(&d)
    }
}

fn mean_ms(v: &[i64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<i64>() as f64 / v.len() as f64 / 1e6
    }
}

fn median(v: &mut [i64]) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

fn median_f(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[(v.len() - 1) / 2]
}

/// Compare `ranks` (at least one; sorted by rank here). `world_size` is what the input
/// stated (a multi-rank bundle's manifest), if anything.
pub fn compare(mut ranks: Vec<RankSummary>, world_size: Option<u32>) -> RanksAnalysis {
    ranks.sort_by_key(|r| r.rank);
    let mut warnings = Vec::new();
    let steps = ranks.iter().map(|r| r.steps.len()).min().unwrap_or(0);
    let most = ranks.iter().map(|r| r.steps.len()).max().unwrap_or(0);
    if most != steps {
        let counts: Vec<String> = ranks
            .iter()
            .map(|r| format!("rank {}: {}", r.rank, r.steps.len()))
            .collect();
        warnings.push(format!(
            "the ranks have different step counts ({}): compared the first {steps}",
            counts.join(", ")
        ));
    }
    let world = world_of(&ranks, world_size, &mut warnings);
    let matched = match_collectives(&ranks, steps, &mut warnings);
    let model = model_of(&ranks, steps, &matched);
    let rows = rows_of(&ranks, steps, &model);
    let slowest = (0..rows.len())
        .max_by(|&a, &b| rows[a].own_ms.total_cmp(&rows[b].own_ms).then(b.cmp(&a)))
        .unwrap_or(0);
    let mut owns: Vec<f64> = rows.iter().map(|r| r.own_ms).collect();
    let median_own_ms = median_f(&mut owns);
    let slowest_excess = excess_of(&ranks, steps, slowest);
    let skew_ms = rows.get(slowest).map_or(0.0, |r| r.own_ms) - median_own_ms;
    let slowest_frame = frame_excess(&ranks, slowest, skew_ms);
    RanksAnalysis {
        world_size: world,
        steps,
        job_step_ms: mean_ms(&model.measured),
        slowest_rank: rows.get(slowest).map_or(0, |r| r.rank),
        median_own_ms,
        slowest_excess,
        slowest_frame,
        collectives: split_of(&ranks, steps, &matched),
        ranks: rows,
        warnings,
        model,
    }
}

fn world_of(ranks: &[RankSummary], stated: Option<u32>, warnings: &mut Vec<String>) -> u32 {
    let mut said: Vec<u32> = ranks.iter().filter_map(|r| r.world_size).collect();
    said.extend(stated);
    said.sort_unstable();
    said.dedup();
    if said.len() > 1 {
        let list: Vec<String> = said.iter().map(|w| w.to_string()).collect();
        warnings.push(format!(
            "the ranks disagree on the world size ({}): are they from one job?",
            list.join(", ")
        ));
    }
    let world = said.last().copied().unwrap_or(ranks.len() as u32);
    if world as usize > ranks.len() {
        warnings.push(format!(
            "world size {world} but {} ranks read: the other ranks are not compared",
            ranks.len()
        ));
    }
    world.max(ranks.len() as u32)
}

/// A collective instance matched on every rank: its call index on each rank (in rank
/// order) and the transfer estimate (the smallest duration), ns.
struct Matched {
    calls: Vec<usize>,
    transfer_ns: i64,
}

fn match_collectives(
    ranks: &[RankSummary],
    steps: usize,
    warnings: &mut Vec<String>,
) -> Vec<Matched> {
    use std::collections::BTreeMap;
    type Key<'a> = (u32, &'a str, u32);
    let mut by_key: BTreeMap<Key, Vec<Option<usize>>> = BTreeMap::new();
    for (ri, r) in ranks.iter().enumerate() {
        for (ci, c) in r.collectives.iter().enumerate() {
            if (c.step as usize) < steps {
                let e = by_key
                    .entry((c.step, c.group.as_str(), c.seq))
                    .or_insert_with(|| vec![None; ranks.len()]);
                e[ri] = Some(ci);
            }
        }
    }
    let mut out = Vec::new();
    let (mut missing, mut differ) = (0usize, 0usize);
    for calls in by_key.into_values() {
        let Some(calls) = calls.into_iter().collect::<Option<Vec<usize>>>() else {
            missing += 1;
            continue;
        };
        let first = &ranks[0].collectives[calls[0]];
        let same = calls.iter().enumerate().all(|(ri, &ci)| {
            let c = &ranks[ri].collectives[ci];
            c.name == first.name && c.nelems == first.nelems
        });
        if !same {
            differ += 1;
            continue;
        }
        let transfer_ns = calls
            .iter()
            .enumerate()
            .map(|(ri, &ci)| ranks[ri].collectives[ci].dur_ns)
            .min()
            .unwrap_or(0);
        out.push(Matched { calls, transfer_ns });
    }
    if missing > 0 && ranks.len() > 1 {
        warnings.push(format!(
            "{missing} collective instance(s) are not on every rank: left out of the transfer/wait split"
        ));
    }
    if differ > 0 {
        warnings.push(format!(
            "{differ} collective instance(s) differ between ranks (another collective or size at the same position): left out"
        ));
    }
    out
}

/// `wait[r][s]`: the time rank r's step s spent waiting in its matched collectives. A
/// collective waits first (for the last rank to join), then transfers: its waiting is
/// the start of its range, as long as its duration beyond the transfer estimate. The
/// waiting of collectives in flight together (gloo's worker threads, NCCL kernels on
/// several streams) is counted once: the union of those intervals, where every start
/// is known; else their sum (summaries of version 1.0).
fn waits(ranks: &[RankSummary], steps: usize, matched: &[Matched]) -> Vec<Vec<i64>> {
    // Per rank and step: each matched collective's (start, waiting).
    type Cell = Vec<(Option<i64>, i64)>;
    let mut cells: Vec<Vec<Cell>> = vec![vec![Vec::new(); steps]; ranks.len()];
    for m in matched {
        for (ri, &ci) in m.calls.iter().enumerate() {
            let c = &ranks[ri].collectives[ci];
            cells[ri][c.step as usize].push((c.start_ns, c.dur_ns - m.transfer_ns));
        }
    }
    let wait = |cell: Cell| -> i64 {
        match cell.iter().map(|&(a, w)| a.map(|a| (a, a + w))).collect() {
            Some(spans) => crate::analysis::simulate::merge_intervals(spans)
                .iter()
                .map(|(a, b)| b - a)
                .sum(),
            None => cell.iter().map(|&(_, w)| w).sum(),
        }
    };
    cells
        .into_iter()
        .map(|r| r.into_iter().map(wait).collect())
        .collect()
}

fn model_of(ranks: &[RankSummary], steps: usize, matched: &[Matched]) -> JobModel {
    let n = ranks.len();
    let wait = waits(ranks, steps, matched);
    let mut exposed = vec![vec![0i64; steps]; n];
    for m in matched {
        for (ri, &ci) in m.calls.iter().enumerate() {
            let c = &ranks[ri].collectives[ci];
            exposed[ri][c.step as usize] += c.exposed_ns.min(m.transfer_ns);
        }
    }
    // Collectives in flight together are exposed together: no more than the step's
    // exposed communication (a union) can be hidden, and no more than the compute there
    // is to hide it under.
    for (ri, r) in ranks.iter().enumerate() {
        for (s, e) in exposed[ri].iter_mut().enumerate() {
            *e = (*e)
                .min(r.steps[s].exposed_comm_ns)
                .min(r.steps[s].compute_ns);
        }
    }
    let own: Vec<Vec<i64>> = ranks
        .iter()
        .enumerate()
        .map(|(ri, r)| {
            (0..steps)
                .map(|s| r.steps[s].dur_ns - wait[ri][s])
                .collect()
        })
        .collect();
    let compute = ranks
        .iter()
        .map(|r| (0..steps).map(|s| r.steps[s].compute_ns).collect())
        .collect();
    let measured = (0..steps)
        .map(|s| ranks.iter().map(|r| r.steps[s].dur_ns).max().unwrap_or(0))
        .collect();
    JobModel {
        ranks: ranks.iter().map(|r| r.rank).collect(),
        own,
        wait,
        compute,
        exposed,
        measured,
    }
}

fn rows_of(ranks: &[RankSummary], steps: usize, model: &JobModel) -> Vec<RankRow> {
    let per = |ns: i64| ns as f64 / 1e6 / steps.max(1) as f64;
    ranks
        .iter()
        .enumerate()
        .map(|(ri, r)| {
            let s = &r.steps[..steps];
            let dur: i64 = s.iter().map(|x| x.dur_ns).sum();
            let pct = |ns: i64| {
                if dur > 0 {
                    100.0 * ns as f64 / dur as f64
                } else {
                    0.0
                }
            };
            let busy: i64 = s.iter().map(|x| x.gpu_busy_ns).sum();
            let comm: i64 = s.iter().map(|x| x.comm_ns).sum();
            let own: i64 = model.own[ri].iter().sum();
            let wait: i64 = model.wait[ri].iter().sum();
            RankRow {
                rank: r.rank,
                source: r.source.clone(),
                steps: r.steps.len(),
                step_ms: per(dur),
                busy_pct: pct(busy),
                compute_ms: per(s.iter().map(|x| x.compute_ns).sum()),
                comm_ms: per(comm),
                comm_pct: pct(comm),
                exposed_comm_ms: per(s.iter().map(|x| x.exposed_comm_ns).sum()),
                wait_ms: per(wait),
                own_ms: per(own),
                top_causes: r.top_causes.clone(),
            }
        })
        .collect()
}

/// The parts of the step, as (key, label, value of a step).
type Part = (&'static str, &'static str, fn(&RankStep) -> i64);

const PARTS: [Part; 5] = [
    ("host_gaps", "host time between launches (GPU idle)", |s| {
        s.idle_cpu_ns
    }),
    ("compute", "compute kernel time", |s| s.compute_ns),
    ("data_loader", "waiting for the DataLoader", |s| {
        s.idle_data_loader_ns
    }),
    ("sync", "GPU idle after host syncs", |s| s.idle_sync_ns),
    ("transfer", "host copies (memcpy calls)", |s| {
        s.idle_transfer_ns
    }),
];

fn excess_of(ranks: &[RankSummary], steps: usize, slowest: usize) -> Vec<Excess> {
    if ranks.len() < 2 || steps == 0 {
        return Vec::new();
    }
    let per = |r: &RankSummary, f: fn(&RankStep) -> i64| {
        r.steps[..steps].iter().map(f).sum::<i64>() as f64 / 1e6 / steps as f64
    };
    // With no GPU activity in any rank's steps (a CPU job), host time is just that.
    let no_gpu = ranks
        .iter()
        .all(|r| r.steps[..steps].iter().all(|s| s.gpu_busy_ns == 0));
    let mut out: Vec<Excess> = PARTS
        .iter()
        .map(|&(part, label, f)| {
            let label = if no_gpu && part == "host_gaps" {
                "host time (no GPU work in the trace)"
            } else {
                label
            };
            let mut others: Vec<f64> = ranks
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != slowest)
                .map(|(_, r)| per(r, f))
                .collect();
            Excess {
                part,
                label,
                rank_ms: per(&ranks[slowest], f),
                others_ms: median_f(&mut others),
            }
        })
        .filter(|e| e.rank_ms > e.others_ms)
        .collect();
    out.sort_by(|a, b| (b.rank_ms - b.others_ms).total_cmp(&(a.rank_ms - a.others_ms)));
    out
}

/// The user function with the most extra time on rank `slowest` against the median of
/// the others, when that is at least [`FRAME_SHARE_OF_SKEW`] of `skew_ms`. Functions
/// nest (a training step's function holds its augmentation's), so of those within 10%
/// of the largest excess the one with the least time is named: the innermost, where
/// the extra work is.
fn frame_excess(ranks: &[RankSummary], slowest: usize, skew_ms: f64) -> Option<FrameExcess> {
    let r = ranks.get(slowest)?;
    if ranks.len() < 2 || r.host_frames.is_empty() || skew_ms <= 0.0 {
        return None;
    }
    let per = |x: &RankSummary, ns: i64| ns as f64 / 1e6 / x.steps.len().max(1) as f64;
    let found: Vec<FrameExcess> = r
        .host_frames
        .iter()
        .map(|f| {
            let mut others: Vec<f64> = ranks
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != slowest)
                .map(|(_, o)| {
                    o.host_frames
                        .iter()
                        .find(|g| g.name == f.name)
                        .map_or(0.0, |g| per(o, g.dur_ns))
                })
                .collect();
            FrameExcess {
                name: f.name.clone(),
                rank_ms: per(r, f.dur_ns),
                others_ms: median_f(&mut others),
            }
        })
        .collect();
    let extra = |f: &FrameExcess| f.rank_ms - f.others_ms;
    let most = found.iter().map(extra).fold(0.0, f64::max);
    if most < FRAME_SHARE_OF_SKEW * skew_ms {
        return None;
    }
    found
        .into_iter()
        .filter(|f| extra(f) >= 0.9 * most)
        .min_by(|a, b| a.rank_ms.total_cmp(&b.rank_ms))
}

fn split_of(ranks: &[RankSummary], steps: usize, matched: &[Matched]) -> CollectiveSplit {
    let per = |ns: i64| ns as f64 / 1e6 / steps.max(1) as f64;
    let mut split = CollectiveSplit {
        matched: matched.len(),
        unmatched: ranks
            .iter()
            .map(|r| {
                r.collectives
                    .iter()
                    .filter(|c| (c.step as usize) < steps)
                    .count()
            })
            .max()
            .unwrap_or(0)
            .saturating_sub(matched.len()),
        ..Default::default()
    };
    let mut kinds: Vec<(CollectiveRow, i64, i64, usize)> = Vec::new();
    for m in matched {
        let first = &ranks[0].collectives[m.calls[0]];
        split.host += first.host as usize;
        let total: i64 = m
            .calls
            .iter()
            .enumerate()
            .map(|(ri, &ci)| ranks[ri].collectives[ci].dur_ns)
            .sum();
        let transfer = m.transfer_ns * ranks.len() as i64;
        split.total_ms += per(total);
        split.transfer_ms += per(transfer);
        split.wait_ms += per(total - transfer);
        let same = |k: &CollectiveRow| {
            k.name == first.name
                && k.group == first.group
                && k.bytes == first.bytes
                && k.host == first.host
        };
        match kinds.iter_mut().find(|k| same(&k.0)) {
            Some(k) => {
                k.1 += transfer;
                k.2 += total - transfer;
                k.3 += 1;
            }
            None => kinds.push((
                CollectiveRow {
                    name: first.name.clone(),
                    group: first.group.clone(),
                    dtype: first.dtype.clone(),
                    bytes: first.bytes,
                    host: first.host,
                    per_step: 0.0,
                    transfer_ms: 0.0,
                    wait_ms: 0.0,
                },
                transfer,
                total - transfer,
                1,
            )),
        }
    }
    kinds.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)));
    split.top = kinds
        .into_iter()
        .take(5)
        .map(|(mut row, t, w, n)| {
            row.transfer_ms = per(t);
            row.wait_ms = per(w);
            row.per_step = n as f64 / steps.max(1) as f64;
            row
        })
        .collect();
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: u32, host_ns: i64, comm_ns: i64) -> RankSummary {
        let step = |i: u32| RankStep {
            step: i,
            dur_ns: 10_000_000 + host_ns + comm_ns,
            gpu_busy_ns: 8_000_000 + comm_ns,
            compute_ns: 8_000_000,
            comm_ns,
            exposed_comm_ns: comm_ns,
            idle_cpu_ns: 2_000_000 + host_ns,
            ..Default::default()
        };
        let call = |i: u32| CollectiveCall {
            step: i,
            seq: 0,
            group: "0".into(),
            name: "allreduce".into(),
            dtype: "Float".into(),
            nelems: Some(1024),
            bytes: Some(4096),
            group_size: Some(4),
            dur_ns: comm_ns,
            exposed_ns: comm_ns,
            start_ns: None,
            host: false,
        };
        RankSummary {
            rank,
            world_size: Some(4),
            source: format!("rank{rank}"),
            steps: (0..3).map(step).collect(),
            collectives: (0..3).map(call).collect(),
            top_causes: Vec::new(),
            host_frames: Vec::new(),
        }
    }

    #[test]
    fn a_straggler_is_the_rank_the_others_wait_for() {
        // Rank 2 spends 5 ms more on the host; the others wait for it in the allreduce
        // (their kernels run 1 + 5 ms, rank 2's only the 1 ms transfer).
        let ranks = vec![
            rank(0, 0, 6_000_000),
            rank(1, 0, 6_000_000),
            rank(2, 5_000_000, 1_000_000),
            rank(3, 0, 6_000_000),
        ];
        let a = compare(ranks, None);
        assert_eq!(a.slowest_rank, 2);
        assert_eq!(a.world_size, 4);
        assert!((a.job_step_ms - 16.0).abs() < 1e-9);
        assert!((a.ranks[0].wait_ms - 5.0).abs() < 1e-9);
        assert!((a.collectives.transfer_ms - 4.0).abs() < 1e-9);
        assert!((a.collectives.wait_ms - 15.0).abs() < 1e-9);
        assert_eq!(a.slowest_excess[0].part, "host_gaps");
        // At the median pace (11 ms of own work) the job step is 11 ms: 5 ms saved.
        let saving = a.model.saving_ms(&[], JobChange::AtMedianPace(2));
        assert!((saving - 5.0).abs() < 1e-9, "{saving}");
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    }

    /// A 20 ms step with two all-reduces on the host (gloo's two worker threads), each
    /// given as (start, duration) in ms; `compute` ms of GPU compute.
    fn host_rank(rank: u32, calls: [(i64, i64); 2], starts: bool, compute: i64) -> RankSummary {
        let ms = 1_000_000;
        let call = |seq: u32, (a, d): (i64, i64)| CollectiveCall {
            step: 0,
            seq,
            group: "?".into(),
            name: "allreduce".into(),
            dtype: String::new(),
            nelems: None,
            bytes: None,
            group_size: None,
            dur_ns: d * ms,
            exposed_ns: d * ms,
            start_ns: starts.then_some(a * ms),
            host: true,
        };
        RankSummary {
            rank,
            world_size: Some(2),
            source: String::new(),
            steps: vec![RankStep {
                step: 0,
                dur_ns: 20 * ms,
                compute_ns: compute * ms,
                comm_ns: (calls[0].1 + calls[1].1) * ms,
                exposed_comm_ns: 10 * ms,
                ..Default::default()
            }],
            collectives: vec![call(0, calls[0]), call(1, calls[1])],
            top_causes: Vec::new(),
            host_frames: Vec::new(),
        }
    }

    #[test]
    fn waiting_in_collectives_in_flight_together_counts_once() {
        // Rank 0 starts both all-reduces early (at 2 and 3 ms) and waits in both for
        // rank 1, which joins them at 10 ms: 8 ms of waiting, not 8 + 7.
        let early = [(2, 10), (3, 9)];
        let late = [(10, 2), (10, 2)];
        let a = compare(
            vec![host_rank(0, early, true, 4), host_rank(1, late, true, 4)],
            None,
        );
        assert_eq!(a.collectives.host, 2);
        assert!(
            (a.ranks[0].wait_ms - 8.0).abs() < 1e-9,
            "{}",
            a.ranks[0].wait_ms
        );
        assert!((a.ranks[0].own_ms - 12.0).abs() < 1e-9);
        assert_eq!(a.slowest_rank, 1);
        // Without the starts (a summary of version 1.0) the waits add up.
        let a = compare(
            vec![host_rank(0, early, false, 4), host_rank(1, late, false, 4)],
            None,
        );
        assert!(
            (a.ranks[0].wait_ms - 15.0).abs() < 1e-9,
            "{}",
            a.ranks[0].wait_ms
        );
    }

    #[test]
    fn no_more_communication_is_hidden_than_there_is_compute_to_hide_it_under() {
        // Both ranks' 10 ms of exposed communication, 4 ms (then 12 ms) of compute.
        let same = [(2, 6), (3, 6)];
        let job = |compute| {
            let a = compare(
                vec![
                    host_rank(0, same, true, compute),
                    host_rank(1, same, true, compute),
                ],
                None,
            );
            a.model.saving_ms(&[], JobChange::OverlappedComm)
        };
        assert!((job(4) - 4.0).abs() < 1e-9, "{}", job(4));
        assert!((job(12) - 10.0).abs() < 1e-9, "{}", job(12));
    }

    #[test]
    fn different_step_counts_and_world_sizes_are_warned_about() {
        let mut short = rank(1, 0, 1_000_000);
        short.steps.truncate(2);
        short.world_size = Some(8);
        let a = compare(vec![rank(0, 0, 1_000_000), short], None);
        assert_eq!(a.steps, 2);
        assert!(a
            .warnings
            .iter()
            .any(|w| w.contains("different step counts")));
        assert!(a
            .warnings
            .iter()
            .any(|w| w.contains("disagree on the world size")));
        assert!(a.warnings.iter().any(|w| w.contains("2 ranks read")));
    }

    #[test]
    fn the_straggler_s_extra_work_is_named_in_its_innermost_function() {
        let frame = |name: &str, ms: i64| HostFrame {
            name: name.into(),
            dur_ns: ms * 3_000_000, // over the 3 steps
        };
        let mut ranks = vec![
            rank(0, 0, 6_000_000),
            rank(1, 0, 6_000_000),
            rank(2, 5_000_000, 1_000_000),
        ];
        // Every rank runs train_step (nested in main); rank 2's also calls augment (its
        // extra 5 ms, inside train_step, so train_step has 5 ms more there too).
        for (i, r) in ranks.iter_mut().enumerate() {
            let extra = if i == 2 { 5 } else { 0 };
            r.host_frames = vec![
                frame("train.py(1): main", 16),
                frame("train.py(9): train_step", 10 + extra),
            ];
            if i == 2 {
                r.host_frames.push(frame("train.py(30): augment", 5));
            }
        }
        let a = compare(ranks.clone(), None);
        let f = a.slowest_frame.expect("a frame");
        assert_eq!(f.name, "train.py(30): augment");
        assert!(
            (f.rank_ms - 5.0).abs() < 1e-9 && f.others_ms == 0.0,
            "{f:?}"
        );
        // A function holding less than 30% of the skew is not named.
        for r in ranks.iter_mut() {
            r.host_frames.retain(|f| f.name.ends_with("main"));
        }
        ranks[2].host_frames.push(frame("train.py(30): augment", 1));
        assert_eq!(compare(ranks, None).slowest_frame, None);
    }
}
