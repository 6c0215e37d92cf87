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
