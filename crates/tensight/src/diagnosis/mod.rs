//! The diagnosis: every rule run over the analysed profile, the findings ranked by
//! saving and put into unprofiled time ([`unprofiled`]). Reads rules (the registry and
//! their findings); the report reads it.

pub mod unprofiled;

use crate::rules::{needs_hardware, Category, Context, Finding, RuleMeta, REGISTRY};
use serde::Serialize;

/// The result of running every rule.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    /// Findings, largest saving first (ties by code).
    pub findings: Vec<Finding>,
    /// Code of the finding with the largest saving, if any saves time.
    pub primary: Option<&'static str>,
    /// Rules that could not run on this trace, with the reason.
    pub skipped: Vec<SkippedRule>,
    /// How savings were put into unprofiled time ([`unprofiled`]); `None`: they are on
    /// the profiled timeline (no timing in the bundle, or the profiler did not slow it).
    pub unprofiled: Option<unprofiled::Unprofiled>,
}

/// A rule that did not run.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedRule {
    /// Rule code.
    pub code: &'static str,
    /// Why.
    pub reason: String,
}

/// Run every rule and rank the findings.
pub fn diagnose(ctx: &Context) -> Diagnosis {
    use rayon::prelude::*;
    let has_gpu = ctx.profile.has_gpu();
    let has_hw = ctx.profile.hardware.is_some();
    let runs = |m: &RuleMeta| (!m.needs_gpu || has_gpu) && (has_hw || !needs_hardware(m));
    let skipped: Vec<SkippedRule> = REGISTRY
        .iter()
        .filter(|r| !runs(r.meta))
        .map(|r| SkippedRule {
            code: r.meta.code,
            reason: if r.meta.needs_gpu && !has_gpu {
                "the trace has no GPU activity".into()
            } else {
                "needs a hardware pass, from `tensight run --hardware` or `analyze --ncu FILE`"
                    .into()
            },
        })
        .collect();
    // Rules are independent reads of the same model: run them in parallel; the sort
    // below makes the order deterministic.
    let mut findings: Vec<Finding> = REGISTRY
        .par_iter()
        .filter(|r| runs(r.meta))
        .flat_map_iter(|r| (r.check)(ctx))
        .collect();
    let unprofiled = unprofiled::of(
        ctx.profile,
        ctx.step_ms(),
        ctx.metrics.summary.gpu_busy_ms_per_step,
    );
    if let Some(u) = &unprofiled {
        unprofiled::apply(&mut findings, u);
    }
    findings.sort_by(|a, b| {
        b.saving_ms
            .total_cmp(&a.saving_ms)
            .then_with(|| a.code.cmp(b.code))
            .then_with(|| a.title.cmp(&b.title))
    });
    let primary = findings
        .iter()
        .find(|f| f.saving_ms > 0.0 && f.category != Category::Roofline)
        .map(|f| f.code);
    Diagnosis {
        findings,
        primary,
        skipped,
        unprofiled,
    }
}
