//! Two runs compared: before and after a change (`tensight diff BEFORE AFTER`).
//!
//! Input: two [`Report`]s, each the full diagnosis of one run. Output: a [`Comparison`]:
//! step time and GPU busy on both sides (and their ratio), the findings matched across
//! the two (resolved, new, changed, unchanged, with their savings), and the kernels and
//! ops whose time per step changed most. Pure: it reads the reports and computes; it
//! does not read files or format text ([`crate::report::diff`] renders it).
//!
//! Findings are matched by rule code, then within a code by title, then in rank
//! order. A matched pair is *changed* when its estimated saving moved by more than
//! [`CHANGED_MIN_MS`] and [`CHANGED_MIN_FRACTION`] of the larger of the two, or its
//! severity moved; *unchanged* otherwise. Kernel and op times are per step (each side's
//! total over its own step count), so runs of different lengths compare.

use crate::report::Report;
use crate::rules::{Finding, Severity};
use serde::Serialize;
use std::collections::HashMap;

/// A saving moving by less than this (ms per step) is no change.
pub const CHANGED_MIN_MS: f64 = 0.05;
/// A saving moving by less than this fraction of the larger side is no change.
pub const CHANGED_MIN_FRACTION: f64 = 0.10;
/// Kernels and ops listed, each (largest change first).
pub const TOP_CHANGES: usize = 10;

/// Before against after.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The run before the change.
    pub before: Side,
    /// The run after it.
    pub after: Side,
    /// Mean step wall time in the trace, ms.
    pub step_time_ms: Delta,
    /// Step time without the profiler (the bundles' warm-up timing), ms; `None` unless
    /// both sides are bundles that timed it.
    pub unprofiled_step_time_ms: Option<Delta>,
    /// GPU busy per step (union of GPU activity), ms.
    pub gpu_busy_ms_per_step: Delta,
    /// GPU busy over wall time, %.
    pub gpu_busy_pct: Delta,
    /// Kernels per step.
    pub kernels_per_step: Delta,
    /// GPU idle per step, ms.
    pub gpu_idle_ms_per_step: Delta,
    /// Every finding of either side: resolved and new first, then changed, then
    /// unchanged; within each, largest saving first.
    pub findings: Vec<FindingChange>,
    /// Kernel names whose time per step changed most (largest absolute change first).
    pub kernels: Vec<NameChange>,
    /// Outermost ops whose GPU time per step (of the kernels they launched) changed most.
    pub ops: Vec<NameChange>,
}

/// One side's identity and size.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// The input as given.
    pub input: String,
    /// Steps analysed.
    pub steps: usize,
    /// How they were found.
    pub step_source: String,
    /// GPU name, when the trace says.
    pub device: Option<String>,
    /// Findings.
    pub findings: usize,
    /// Code of the primary bottleneck.
    pub primary: Option<&'static str>,
}

/// A figure before and after.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Delta {
    /// Before.
    pub before: f64,
    /// After.
    pub after: f64,
    /// After − before.
    pub change: f64,
    /// After / before (`None` when before is 0).
    pub ratio: Option<f64>,
}

impl Delta {
    /// `before` → `after`.
    pub fn of(before: f64, after: f64) -> Delta {
        Delta {
            before,
            after,
            change: after - before,
            ratio: (before != 0.0).then(|| after / before),
        }
    }
}

/// What became of a finding.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Before only: the change fixed it.
    Resolved,
    /// After only: the change brought it (or made it visible).
    New,
    /// Both, with a different saving or severity.
    Changed,
    /// Both, the same within the thresholds.
    Unchanged,
}

impl Status {
    /// Lower-case label.
    pub fn label(self) -> &'static str {
        match self {
            Status::Resolved => "resolved",
            Status::New => "new",
            Status::Changed => "changed",
            Status::Unchanged => "unchanged",
        }
    }
}

/// A finding on one side.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FindingSide {
    /// Estimated saving, ms per step.
    pub saving_ms: f64,
    /// Of that side's step, %.
    pub saving_pct: f64,
    /// Severity.
    pub severity: Severity,
    /// The measured fact.
    pub message: String,
}

/// A finding matched across the two runs.
#[derive(Debug, Clone, Serialize)]
pub struct FindingChange {
    /// Rule code.
    pub code: &'static str,
    /// Title (after's when on both sides).
    pub title: String,
    /// What became of it.
    pub status: Status,
    /// Before (`None`: new).
    pub before: Option<FindingSide>,
    /// After (`None`: resolved).
    pub after: Option<FindingSide>,
}

impl FindingChange {
    /// The larger of its two savings, ms per step (for ranking).
    pub fn largest_ms(&self) -> f64 {
        let s = |x: &Option<FindingSide>| x.as_ref().map_or(0.0, |f| f.saving_ms);
        s(&self.before).max(s(&self.after))
    }
}

/// A kernel or op name's time per step before and after.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NameChange {
    /// Kernel or op name.
    pub name: String,
    /// Time per step, ms.
    pub ms_per_step: Delta,
    /// Occurrences per step.
    pub count_per_step: Delta,
}

/// Compare two analysed runs.
pub fn compare(before: &Report, after: &Report) -> Comparison {
    let (sb, sa) = (&before.metrics.summary, &after.metrics.summary);
    let unprofiled = |r: &Report| {
        crate::analysis::inflation::unprofiled_timing(
            &r.profile,
            r.metrics.summary.gpu_busy_ms_per_step,
        )
        .map(|(u, _)| u)
    };
    Comparison {
        before: side(before),
        after: side(after),
        step_time_ms: Delta::of(sb.step_time_ms, sa.step_time_ms),
        unprofiled_step_time_ms: match (unprofiled(before), unprofiled(after)) {
            (Some(b), Some(a)) => Some(Delta::of(b, a)),
            _ => None,
        },
        gpu_busy_ms_per_step: Delta::of(sb.gpu_busy_ms_per_step, sa.gpu_busy_ms_per_step),
        gpu_busy_pct: Delta::of(sb.gpu_busy_pct, sa.gpu_busy_pct),
        kernels_per_step: Delta::of(sb.kernels_per_step, sa.kernels_per_step),
        gpu_idle_ms_per_step: Delta::of(sb.idle_ms_per_step.total, sa.idle_ms_per_step.total),
        findings: findings(&before.diagnosis.findings, &after.diagnosis.findings),
        kernels: changes(&kernel_times(before), &kernel_times(after)),
        ops: changes(&op_times(before), &op_times(after)),
    }
}

fn side(r: &Report) -> Side {
    Side {
        input: r.input.clone(),
        steps: r.metrics.summary.steps,
        step_source: r.metrics.summary.step_source.clone(),
        device: r.metrics.device.as_ref().map(|d| d.name.clone()),
        findings: r.diagnosis.findings.len(),
        primary: r.diagnosis.primary,
    }
}

fn finding_side(f: &Finding) -> FindingSide {
    FindingSide {
        saving_ms: f.saving_ms,
        saving_pct: f.saving_pct,
        severity: f.severity,
        message: f.message.clone(),
    }
}

/// Match the findings of the two sides (module doc) and say what became of each.
fn findings(before: &[Finding], after: &[Finding]) -> Vec<FindingChange> {
    let mut taken = vec![false; after.len()];
    let mut out = Vec::new();
    let mut pair = |b: Option<&Finding>, a: Option<&Finding>| {
        let (bs, as_) = (b.map(finding_side), a.map(finding_side));
        let status = match (&bs, &as_) {
            (Some(_), None) => Status::Resolved,
            (None, _) => Status::New,
            (Some(x), Some(y)) => {
                let moved = (y.saving_ms - x.saving_ms).abs();
                let larger = x.saving_ms.max(y.saving_ms);
                if x.severity != y.severity
                    || (moved > CHANGED_MIN_MS && moved > CHANGED_MIN_FRACTION * larger)
                {
                    Status::Changed
                } else {
                    Status::Unchanged
                }
            }
        };
        let Some(f) = a.or(b) else { return };
        out.push(FindingChange {
            code: f.code,
            title: f.title.clone(),
            status,
            before: bs,
            after: as_,
        });
    };
    // By code and title first, then by code in rank order.
    let mut left = Vec::new();
    for b in before {
        match (0..after.len())
            .find(|&i| !taken[i] && after[i].code == b.code && after[i].title == b.title)
        {
            Some(i) => {
                taken[i] = true;
                pair(Some(b), Some(&after[i]));
            }
            None => left.push(b),
        }
    }
    for b in left {
        match (0..after.len()).find(|&i| !taken[i] && after[i].code == b.code) {
            Some(i) => {
                taken[i] = true;
                pair(Some(b), Some(&after[i]));
            }
            None => pair(Some(b), None),
        }
    }
    for (i, a) in after.iter().enumerate() {
        if !taken[i] {
            pair(None, Some(a));
        }
    }
    out.sort_by(|x, y| {
        x.status
            .cmp(&y.status)
            .then_with(|| y.largest_ms().total_cmp(&x.largest_ms()))
            .then_with(|| x.code.cmp(y.code))
            .then_with(|| x.title.cmp(&y.title))
    });
    out
}

/// Per name: (time ms per step, occurrences per step).
type PerStep = HashMap<String, (f64, f64)>;

fn steps(r: &Report) -> f64 {
    (r.metrics.summary.steps as f64).max(1.0)
}

/// Kernel time per step by kernel name, over the analysed steps.
fn kernel_times(r: &Report) -> PerStep {
    let p = &r.profile;
    let n = steps(r);
    let mut out: PerStep = HashMap::new();
    for &gi in &r.metrics.timeline.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        if g.is_kernel() {
            let e = out.entry(g.name.to_string()).or_default();
            e.0 += g.dur_ns as f64 / 1e6 / n;
            e.1 += 1.0 / n;
        }
    }
    out
}

/// GPU time per step of the work each outermost op launched, by op name (work that
/// only an annotation encloses is left out: its name changes every step).
fn op_times(r: &Report) -> PerStep {
    let p = &r.profile;
    let n = steps(r);
    let mut out: PerStep = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for &gi in &r.metrics.timeline.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        let Some(op) = g.op else { continue };
        let top = p.top_level_op(op);
        // Work launched under an annotation only (a `ProfilerStep#N`) has no op.
        if p.ops[top as usize].kind != crate::model::OpKind::Op {
            continue;
        }
        let e = out.entry(p.ops[top as usize].name.to_string()).or_default();
        e.0 += g.dur_ns as f64 / 1e6 / n;
        if seen.insert(top) {
            e.1 += 1.0 / n;
        }
    }
    out
}

/// The [`TOP_CHANGES`] names whose time per step moved most.
fn changes(before: &PerStep, after: &PerStep) -> Vec<NameChange> {
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let mut out: Vec<NameChange> = names
        .into_iter()
        .map(|n| {
            let (bt, bc) = before.get(n).copied().unwrap_or_default();
            let (at, ac) = after.get(n).copied().unwrap_or_default();
            NameChange {
                name: n.clone(),
                ms_per_step: Delta::of(bt, at),
                count_per_step: Delta::of(bc, ac),
            }
        })
        .filter(|c| c.ms_per_step.change.abs() >= 0.0005)
        .collect();
    out.sort_by(|x, y| {
        y.ms_per_step
            .change
            .abs()
            .total_cmp(&x.ms_per_step.change.abs())
            .then_with(|| x.name.cmp(&y.name))
    });
    out.truncate(TOP_CHANGES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_ratio_is_after_over_before() {
        let d = Delta::of(4.0, 3.0);
        assert_eq!(d.change, -1.0);
        assert_eq!(d.ratio, Some(0.75));
        assert_eq!(Delta::of(0.0, 1.0).ratio, None);
    }

    #[test]
    fn names_rank_by_absolute_change_per_step() {
        let b: PerStep = [("a".into(), (1.0, 1.0)), ("b".into(), (0.2, 1.0))].into();
        let a: PerStep = [("b".into(), (0.9, 1.0)), ("c".into(), (0.5, 2.0))].into();
        let c = changes(&b, &a);
        let names: Vec<&str> = c.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(c[0].ms_per_step.after, 0.0);
    }
}
