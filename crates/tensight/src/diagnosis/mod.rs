//! The diagnosis: every rule run over the analysed profile, the findings ranked by
//! saving and put into unprofiled time ([`unprofiled`]). Reads rules (the registry and
//! their findings); the report reads it.
//!
//! Findings whose fix is a [`Change`] of the causal model are also combined: all of them
//! at once (the step with every fix applied) and, largest saving first, each one after
//! the larger ones are fixed (its marginal saving), so findings that explain the same
//! idle time are not counted twice and the marginals never sum past the step.

mod merge;
pub mod ranks;
pub mod unprofiled;

use crate::analysis::inflation::Deflation;
use crate::analysis::simulate::{self, Change};
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
    /// The profiler's cost the simulated findings were replayed without (`None`: no
    /// unprofiled timing, or the profiler did not slow the steps).
    pub deflation: Option<Deflation>,
    /// Every simulated fix at once (`None` when fewer than two findings have one).
    pub all_fixes: Option<AllFixes>,
}

/// The step with every simulated fix applied.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AllFixes {
    /// Saving per step, ms (in unprofiled time when the findings are).
    pub saving_ms: f64,
    /// Of the step, %.
    pub saving_pct: f64,
    /// The findings combined (codes, largest saving first).
    pub findings: Vec<&'static str>,
    /// Findings left out: their saving is not simulated.
    pub not_simulated: usize,
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
    let findings: Vec<Finding> = REGISTRY
        .par_iter()
        .filter(|r| runs(r.meta))
        .flat_map_iter(|r| {
            let _p = crate::phases::start_detail("rule", r.meta.code);
            (r.check)(ctx)
        })
        .collect();
    let after = crate::phases::start("after the rules");
    let mut findings = merge::same_cause(ctx, findings);
    let busy = ctx.metrics.summary.gpu_busy_ms_per_step;
    // The profiler's own cost, removed once: the simulated findings are replayed on the
    // deflated host timeline, the others scaled to the unprofiled step.
    let (deflation, base_saved) = ctx.deflation();
    let deflation: Option<Deflation> = deflation.cloned();
    let base = deflation
        .as_ref()
        .map(|d| d.change.clone())
        .unwrap_or_default();
    if let Some(d) = &deflation {
        // One or two replays per finding, each independent of the others.
        findings
            .par_iter_mut()
            .for_each(|f| resimulate(ctx, f, d, &base, base_saved));
    }
    sort(&mut findings);
    let all_fixes = combine(ctx, &mut findings, &base, base_saved, deflation.as_ref());
    let unprofiled = unprofiled::of(ctx.profile, ctx.step_ms(), busy, deflation.as_ref());
    if let Some(u) = &unprofiled {
        unprofiled::apply(&mut findings, u, deflation.is_some());
    }
    sort(&mut findings);
    let primary = findings
        .iter()
        .find(|f| f.saving_ms > 0.0 && f.category != Category::Roofline)
        .map(|f| f.code);
    drop(after);
    Diagnosis {
        findings,
        primary,
        skipped,
        unprofiled,
        deflation,
        all_fixes,
    }
}

/// A simulated finding's saving replayed on the deflated host timeline: the step as the
/// program runs without the profiler.
fn resimulate(ctx: &Context, f: &mut Finding, d: &Deflation, base: &Change, base_saved: i64) {
    let Some(c) = f.change.as_ref().filter(|c| !c.is_empty()) else {
        return;
    };
    let profiled = f.saving_ms;
    let (base, base_saved) = match &f.after {
        Some(a) => {
            let b = base.and(a);
            let s = simulate::saving_ns(ctx.profile, &b);
            (b, s)
        }
        None => (base.clone(), base_saved),
    };
    let saved = simulate::saving_ns(ctx.profile, &base.and(c)) - base_saved;
    let saving = saved.max(0) as f64 / 1e6 / ctx.steps();
    f.saving_ms = saving;
    f.saving_pct = (100.0 * saving / d.unprofiled_step_ms.max(1e-9)).min(100.0);
    f.severity = crate::rules::Severity::from_pct(f.saving_pct);
    f.message = unprofiled::restate(&f.message, profiled, saving);
    if !f.estimate.ends_with('.') {
        f.estimate.push('.');
    }
    // A host-pace deflation leaves the step as it was (the GPU's): its figures are the
    // host's, which the provenance gives.
    let steps = if d.source == "host_pace" {
        String::new()
    } else {
        format!(
            ": {} against {} profiled",
            crate::rules::fmt_ms(d.unprofiled_step_ms),
            crate::rules::fmt_ms(d.profiled_step_ms)
        )
    };
    f.estimate.push_str(&format!(
        " Replayed on the host timeline without the profiler's cost ({:.1} µs per recorded event, from {}{steps}; {} under the profiler).",
        d.per_event_ns / 1e3,
        d.provenance(),
        crate::rules::fmt_ms(profiled)
    ));
}

pub(crate) fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        b.saving_ms
            .total_cmp(&a.saving_ms)
            .then_with(|| a.code.cmp(b.code))
            .then_with(|| a.title.cmp(&b.title))
    });
}

/// The simulated findings (sorted, largest saving first) one after another, on top of
/// `base` (the profiler's cost removed, when known): each one's marginal saving, and all
/// of them at once.
fn combine(
    ctx: &Context,
    findings: &mut [Finding],
    base: &Change,
    base_saved: i64,
    deflation: Option<&Deflation>,
) -> Option<AllFixes> {
    let simulated: Vec<usize> = (0..findings.len())
        .filter(|&i| findings[i].change.as_ref().is_some_and(|c| !c.is_empty()))
        .filter(|&i| findings[i].saving_ms > 0.0)
        .collect();
    if simulated.len() < 2 {
        return None;
    }
    let n = ctx.steps();
    let mut so_far = base.clone();
    let mut saved_before = base_saved;
    let mut codes = Vec::new();
    for &i in &simulated {
        let Some(c) = findings[i].change.as_ref() else {
            continue;
        };
        // A change measured on top of another (T003 after TF32) adds, here too, only what
        // goes beyond it: the part before it is another finding's to claim.
        let from = match &findings[i].after {
            Some(a) => simulate::saving_ns(ctx.profile, &so_far.and(a)).max(saved_before),
            None => saved_before,
        };
        so_far = so_far.and(c);
        let saved = simulate::saving_ns(ctx.profile, &so_far);
        findings[i].marginal_ms = Some((saved - from).max(0) as f64 / 1e6 / n);
        saved_before = saved.max(saved_before);
        codes.push(findings[i].code);
    }
    let saving_ms = (saved_before - base_saved).max(0) as f64 / 1e6 / n;
    let step = deflation.map_or(ctx.step_ms(), |d| d.unprofiled_step_ms);
    Some(AllFixes {
        saving_ms,
        saving_pct: if step > 0.0 {
            (100.0 * saving_ms / step).min(100.0)
        } else {
            0.0
        },
        findings: codes,
        not_simulated: findings
            .iter()
            .filter(|f| f.saving_ms > 0.0 && f.change.is_none() && f.category != Category::Roofline)
            .count(),
    })
}
