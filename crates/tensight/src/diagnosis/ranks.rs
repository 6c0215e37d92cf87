//! The diagnosis of many ranks: every cross-rank rule run over the comparison, the
//! findings ranked by saving and combined on the job's step model.
//!
//! Input: a [`RanksAnalysis`]. Output: [`RanksDiagnosis`]. Like the per-rank diagnosis,
//! the findings whose fix is a change of the model are replayed one after another,
//! largest saving first, so each one's marginal saving leaves out what a larger one
//! already saves, and all of them at once give the job step with every fix.

use crate::analysis::ranks::{JobChange, RanksAnalysis};
use crate::rules::{Finding, RanksContext, RANK_REGISTRY};
use serde::Serialize;

/// The cross-rank findings.
#[derive(Debug, Clone, Serialize)]
pub struct RanksDiagnosis {
    /// Findings, largest saving first (ties by code).
    pub findings: Vec<Finding>,
    /// Every simulated fix at once: saving per job step, ms (`None` when fewer than
    /// two findings have one).
    pub all_fixes_ms: Option<f64>,
}

/// Run every cross-rank rule over `a`.
pub fn diagnose(a: &RanksAnalysis) -> RanksDiagnosis {
    let ctx = RanksContext { analysis: a };
    let mut found: Vec<(Finding, Option<JobChange>)> = RANK_REGISTRY
        .iter()
        .flat_map(|r| {
            let change = (r.change)(a);
            (r.check)(&ctx).into_iter().map(move |f| (f, change))
        })
        .collect();
    found.sort_by(|x, y| {
        y.0.saving_ms
            .total_cmp(&x.0.saving_ms)
            .then_with(|| x.0.code.cmp(y.0.code))
    });
    let mut base: Vec<JobChange> = Vec::new();
    for (f, change) in found.iter_mut() {
        if let Some(c) = change {
            if !base.is_empty() {
                f.marginal_ms = Some(a.model.saving_ms(&base, *c));
            }
            base.push(*c);
        }
    }
    let all_fixes_ms =
        (base.len() >= 2).then(|| (a.model.job_ms(&[]) - a.model.job_ms(&base)).max(0.0));
    let mut findings: Vec<Finding> = found.into_iter().map(|(f, _)| f).collect();
    super::sort(&mut findings);
    RanksDiagnosis {
        findings,
        all_fixes_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ranks::{compare, CollectiveCall, RankStep, RankSummary};

    /// One 16 ms step with two all-reduces: the rank `late` arrives 3 ms late at
    /// collective `late` (0 or 1) and waits 3 ms at the other.
    fn rank(r: u32, late: u32) -> RankSummary {
        let call = |seq: u32, dur_ns: i64| CollectiveCall {
            step: 0,
            seq,
            group: "0".into(),
            name: "allreduce".into(),
            dtype: "Float".into(),
            nelems: Some(1),
            bytes: Some(4),
            group_size: Some(2),
            dur_ns,
            exposed_ns: dur_ns,
            start_ns: None,
            host: false,
        };
        let durs = if late == 0 { [1, 4] } else { [4, 1] };
        RankSummary {
            rank: r,
            world_size: Some(2),
            source: String::new(),
            steps: vec![RankStep {
                step: 0,
                dur_ns: 16_000_000,
                compute_ns: 8_000_000,
                comm_ns: 5_000_000,
                ..Default::default()
            }],
            collectives: vec![call(0, durs[0] * 1_000_000), call(1, durs[1] * 1_000_000)],
            top_causes: Vec::new(),
            host_frames: Vec::new(),
        }
    }

    #[test]
    fn waiting_with_no_single_straggler_is_p002s() {
        // Rank 0 is late at the first all-reduce, rank 1 at the second: each waits 3 ms
        // for the other, so neither's own work (13 ms) explains the 16 ms step.
        let a = compare(vec![rank(0, 0), rank(1, 1)], None);
        let d = diagnose(&a);
        let codes: Vec<&str> = d.findings.iter().map(|f| f.code).collect();
        assert!(!codes.contains(&"P001"), "{codes:?}");
        let p002 = d.findings.iter().find(|f| f.code == "P002").expect("P002");
        assert!((p002.saving_ms - 3.0).abs() < 1e-9, "{}", p002.saving_ms);
        assert!((a.collectives.wait_ms - 6.0).abs() < 1e-9);
    }
}
