//! Rules: from measured metrics to findings ranked by estimated saving.
//!
//! One rule = one file named after what it observes, top to bottom: its [`RuleMeta`]
//! (code, name, category, status, since, documentation with fixed sections), then the
//! check, then private helpers. [`REGISTRY`] is the one registration table; codes are
//! never reused. A [`Finding`] states a measured fact with numbers, an estimated
//! saving in ms per step (and how it was estimated), a severity derived from that
//! saving's share of the step (never set by hand), evidence, an explanation, fixes and
//! locations. The primary bottleneck is the finding with the largest saving.

mod allocator_churn;
mod channels_first_convolutions;
mod collective_wait;
mod compute_imbalance;
mod contended_scatter;
mod copy_churn;
mod copy_compute_overlap;
mod cpu_heavy_ops;
mod cpu_preprocessing;
mod data_loader_wait;
mod device_ping_pong;
mod elementwise_chains;
mod exposed_communication;
mod fp32_gemm_without_tensor_cores;
mod full_sort_for_top_k;
mod host_sync_in_step;
mod kernel_diversity;
mod late_gpu_migration;
mod launch_bound;
mod low_l2_hit_rate;
mod materialised_attention;
mod memory_near_capacity;
mod misaligned_gemm_shapes;
mod no_autocast;
mod non_contiguous_view_access;
mod occupancy_limited;
mod pageable_memcpy;
mod roofline_position;
mod small_grids;
mod straggler_rank;
mod transposed_chain;
mod uncoalesced_global_access;
mod unused_parameter_gradients;

use crate::analysis::RunMetrics;
use crate::model::Profile;
use serde::Serialize;

/// Rule category (the letter of its code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// R: roofline (informational).
    Roofline,
    /// L: kernel launch.
    Launch,
    /// S: synchronization.
    Sync,
    /// C: CPU residency.
    CpuResidency,
    /// D: data pipeline.
    DataPipeline,
    /// O: occupancy.
    Occupancy,
    /// M: memory hierarchy.
    MemoryHierarchy,
    /// T: tensor cores.
    TensorCores,
    /// G: graph / fusion.
    Fusion,
    /// V: tensor views and layout.
    Views,
    /// A: memory capacity and allocator.
    Allocator,
    /// W: wasted work: computation whose result nothing uses.
    WastedWork,
    /// P: between the ranks of a distributed job (parallelism); found only when many
    /// ranks are analysed together.
    Distributed,
}

impl Category {
    /// Upper-case label for reports (`CPU_RESIDENCY`).
    pub fn label(self) -> &'static str {
        match self {
            Category::Roofline => "ROOFLINE",
            Category::Launch => "KERNEL_LAUNCH",
            Category::Sync => "SYNCHRONIZATION",
            Category::CpuResidency => "CPU_RESIDENCY",
            Category::DataPipeline => "DATA_PIPELINE",
            Category::Occupancy => "OCCUPANCY",
            Category::MemoryHierarchy => "MEMORY_HIERARCHY",
            Category::TensorCores => "TENSOR_CORES",
            Category::Fusion => "FUSION",
            Category::Views => "TENSOR_VIEWS",
            Category::Allocator => "MEMORY_CAPACITY",
            Category::WastedWork => "WASTED_WORK",
            Category::Distributed => "DISTRIBUTED",
        }
    }
}

/// Lifecycle of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// New; may change.
    Preview,
    /// Settled.
    Stable,
    /// Kept for compatibility; will go.
    Deprecated,
}

/// A rule's identity and documentation.
#[derive(Debug, Serialize)]
pub struct RuleMeta {
    /// Code: category letter + number (`S001`). Never reused.
    pub code: &'static str,
    /// kebab-case name saying what it observes (`host-sync-in-step`).
    pub name: &'static str,
    /// Category.
    pub category: Category,
    /// Lifecycle.
    pub status: Status,
    /// Version that introduced it.
    pub since: &'static str,
    /// Needs GPU activity in the trace (skipped, and said so, on CPU-only traces).
    pub needs_gpu: bool,
    /// Markdown with the sections, in order: What it detects, Why it costs time,
    /// Example, Fix, Thresholds, References.
    pub doc: &'static str,
}

/// The sections every rule's documentation has, in order.
pub const DOC_SECTIONS: [&str; 6] = [
    "## What it detects",
    "## Why it costs time",
    "## Example",
    "## Fix",
    "## Thresholds",
    "## References",
];

/// How much a finding costs, from its saving's share of the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Under 1% of the step, or informational.
    Info,
    /// 1–5%.
    Low,
    /// 5–15%.
    Moderate,
    /// 15–30%.
    Severe,
    /// 30% or more.
    Critical,
}

impl Severity {
    /// From a saving as % of step time.
    pub fn from_pct(pct: f64) -> Severity {
        if pct >= 30.0 {
            Severity::Critical
        } else if pct >= 15.0 {
            Severity::Severe
        } else if pct >= 5.0 {
            Severity::Moderate
        } else if pct >= 1.0 {
            Severity::Low
        } else {
            Severity::Info
        }
    }
    /// Upper-case label.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Low => "LOW",
            Severity::Moderate => "MODERATE",
            Severity::Severe => "SEVERE",
            Severity::Critical => "CRITICAL",
        }
    }
    /// Parse a `--fail-on` value.
    pub fn parse(s: &str) -> Option<Severity> {
        match s.to_ascii_lowercase().as_str() {
            "info" => Some(Severity::Info),
            "low" => Some(Severity::Low),
            "moderate" => Some(Severity::Moderate),
            "severe" => Some(Severity::Severe),
            "critical" => Some(Severity::Critical),
            _ => None,
        }
    }
}

/// Where in the program a finding points.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Location {
    /// Op name (`aten::_local_scalar_dense`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Kernel name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// Tensor or view description (shape, dtype, strides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// User source line (`train.py(42): step`), when stacks were recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// One piece of evidence: a label and a measured value.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Evidence {
    /// What was measured.
    pub label: String,
    /// The value, with units.
    pub value: String,
}

/// One diagnosed problem.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Rule code.
    pub code: &'static str,
    /// Rule name.
    pub rule: &'static str,
    /// Category.
    pub category: Category,
    /// Short title (`Host sync inside the step`).
    pub title: String,
    /// One sentence stating the measured fact, with numbers.
    pub message: String,
    /// Estimated saving if fixed, ms per step.
    pub saving_ms: f64,
    /// That saving as % of the mean step.
    pub saving_pct: f64,
    /// How the saving was estimated (always an estimate).
    pub estimate: String,
    /// Derived from `saving_pct`.
    pub severity: Severity,
    /// Measured values behind the finding.
    pub evidence: Vec<Evidence>,
    /// Why this costs time, in this run's terms.
    pub explanation: String,
    /// What to change, most effective first.
    pub fixes: Vec<String>,
    /// Where: ops, kernels, tensors, source lines.
    pub locations: Vec<Location>,
    /// What the fix changes in the causal model of the step (`None`: a rule whose saving
    /// is not simulated yet); the diagnosis combines these (all fixes, marginal savings).
    #[serde(skip)]
    pub change: Option<crate::analysis::simulate::Change>,
    /// The change `change` is measured on top of, when part of what it saves is another
    /// finding's (T003's bf16 from TF32, on top of T001's FP32 → TF32): the saving is the
    /// step with both less the step with this one alone.
    #[serde(skip)]
    pub after: Option<crate::analysis::simulate::Change>,
    /// Its saving after the findings with larger savings are fixed, ms per step (set by
    /// the diagnosis when this and a larger finding both have a change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marginal_ms: Option<f64>,
}

impl Finding {
    /// Another saving (ms per step): its share of the `step_ms` step and severity with it.
    pub fn set_saving(&mut self, saving_ms: f64, step_ms: f64) {
        self.saving_ms = saving_ms.max(0.0);
        self.saving_pct = if step_ms > 0.0 {
            (100.0 * self.saving_ms / step_ms).min(100.0)
        } else {
            0.0
        };
        self.severity = Severity::from_pct(self.saving_pct);
    }
}

/// What a rule's check sees.
pub struct Context<'a> {
    /// The model.
    pub profile: &'a Profile,
    /// The measurements.
    pub metrics: &'a RunMetrics,
    /// GPU work per op, shared by the rules that need it (computed once, on first use).
    launched: std::sync::OnceLock<crate::analysis::host_work::Launched>,
    /// V003's transposed chains, read by V001 too (computed once, on first use).
    chains: std::sync::OnceLock<transposed_chain::Chains>,
    /// The profiler's cost in the steps and what removing it saves (ns), computed once:
    /// every replayed saving is measured on top of it.
    deflation: std::sync::OnceLock<(Option<crate::analysis::inflation::Deflation>, i64)>,
}

impl<'a> Context<'a> {
    /// The context of `profile` and its `metrics`.
    pub fn new(profile: &'a Profile, metrics: &'a RunMetrics) -> Self {
        Context {
            profile,
            metrics,
            launched: std::sync::OnceLock::new(),
            chains: std::sync::OnceLock::new(),
            deflation: std::sync::OnceLock::new(),
        }
    }
    /// The profiler's cost in the analysed steps ([`crate::analysis::inflation`]: the
    /// bundle's unprofiled timing, else the calibration for a plain trace), and what
    /// replaying its removal saves (ns); computed once.
    pub fn deflation(&self) -> (Option<&crate::analysis::inflation::Deflation>, i64) {
        use crate::analysis::{inflation, simulate};
        let (d, saved) = self.deflation.get_or_init(|| {
            let busy = self.metrics.summary.gpu_busy_ms_per_step;
            let d = inflation::of(self.profile, self.step_ms(), busy)
                .or_else(|| inflation::calibrated(self.profile, self.step_ms()));
            let saved = match &d {
                Some(d) => d
                    .saved_ns
                    .unwrap_or_else(|| simulate::saving_ns(self.profile, &d.change)),
                None => 0,
            };
            (d, saved)
        });
        (d.as_ref(), *saved)
    }
    /// What `change` saves per step (ms), replayed on the host timeline without the
    /// profiler's cost ([`Context::deflation`]): the program as it runs unprofiled, so
    /// a rule's threshold judges the fix where the program lives.
    pub fn replayed_ms(&self, change: &crate::analysis::simulate::Change) -> f64 {
        use crate::analysis::simulate::saving_ns;
        let saved = match self.deflation() {
            (Some(d), base_saved) => saving_ns(self.profile, &d.change.and(change)) - base_saved,
            (None, _) => saving_ns(self.profile, change),
        };
        saved.max(0) as f64 / 1e6 / self.steps()
    }
    /// [`transposed_chain::Chains::of`] this context, computed once.
    fn chains(&self) -> &transposed_chain::Chains {
        self.chains
            .get_or_init(|| transposed_chain::Chains::of(self))
    }
    /// [`crate::analysis::host_work::Launched::of`] the profile, computed once.
    fn launched(&self) -> &crate::analysis::host_work::Launched {
        self.launched
            .get_or_init(|| crate::analysis::host_work::Launched::of(self.profile))
    }
    /// Mean step time, ms (the denominator of every %).
    pub fn step_ms(&self) -> f64 {
        self.metrics.summary.step_time_ms
    }
    /// Number of steps (≥ 1).
    pub fn steps(&self) -> f64 {
        self.metrics.summary.steps.max(1) as f64
    }
}

/// A finding under construction: rules fill the facts, [`Draft::finish`] derives
/// the percentage and severity so no rule sets them by hand.
pub struct Draft {
    /// Title.
    pub title: String,
    /// Measured fact.
    pub message: String,
    /// Estimated saving, ms per step.
    pub saving_ms: f64,
    /// How the saving was estimated.
    pub estimate: String,
    /// Evidence.
    pub evidence: Vec<Evidence>,
    /// Explanation.
    pub explanation: String,
    /// Fixes.
    pub fixes: Vec<String>,
    /// Locations.
    pub locations: Vec<Location>,
    /// What the fix changes in the causal model of the step. With one, the saving is the
    /// replayed window before minus after it ([`crate::analysis::simulate`]), whatever
    /// `saving_ms` says.
    pub change: Option<crate::analysis::simulate::Change>,
}

impl Draft {
    /// Turn into a finding of `meta`, with % and severity from `ctx`'s step time.
    pub fn finish(self, meta: &RuleMeta, ctx: &Context) -> Finding {
        self.finish_after(meta, ctx, None)
    }

    /// As [`Draft::finish`], the change's saving measured on top of `after` (another
    /// finding's change): the replayed step with `after` less that with both.
    pub fn finish_after(
        self,
        meta: &RuleMeta,
        ctx: &Context,
        after: Option<crate::analysis::simulate::Change>,
    ) -> Finding {
        use crate::analysis::simulate::{saving_ns, Change};
        let step = ctx.step_ms();
        let saving_ms = match &self.change {
            Some(c) => {
                let base = after.clone().unwrap_or_default();
                let on_base = if base == Change::default() {
                    0
                } else {
                    saving_ns(ctx.profile, &base)
                };
                (saving_ns(ctx.profile, &base.and(c)) - on_base) as f64 / 1e6 / ctx.steps()
            }
            None => self.saving_ms,
        }
        .max(0.0);
        let saving_pct = if step > 0.0 {
            (100.0 * saving_ms / step).min(100.0)
        } else {
            0.0
        };
        Finding {
            code: meta.code,
            rule: meta.name,
            category: meta.category,
            title: self.title,
            message: self.message,
            saving_ms,
            saving_pct,
            estimate: self.estimate,
            severity: Severity::from_pct(saving_pct),
            evidence: self.evidence,
            explanation: self.explanation,
            fixes: self.fixes,
            locations: self.locations,
            change: self.change,
            after,
            marginal_ms: None,
        }
    }
}

/// Shorthand for an evidence row.
pub fn ev(label: impl Into<String>, value: impl Into<String>) -> Evidence {
    Evidence {
        label: label.into(),
        value: value.into(),
    }
}

/// The evidence row "warp stalls": the largest shares of the warps' cycles by state
/// (ncu's stall reasons), with what the first means; `None` without the breakdown.
pub(crate) fn stall_evidence(k: &crate::model::hardware::HwKernel) -> Option<Evidence> {
    // `selected` is the issuing state, not a stall.
    let shares: Vec<(&str, f64)> = k
        .stall_shares()
        .into_iter()
        .filter(|s| s.0 != "selected")
        .collect();
    let top: Vec<String> = shares
        .iter()
        .filter(|s| s.1 >= 0.03)
        .take(3)
        .map(|(key, share)| format!("{} {:.0}%", key.replace('_', " "), share * 100.0))
        .collect();
    let (first, _) = shares.first()?;
    let meaning = crate::model::hardware::STALL_REASONS
        .iter()
        .find(|r| r.0 == *first)
        .map_or("", |r| r.1);
    Some(ev(
        "warp stalls (share of warp cycles)",
        format!(
            "{} ({}: {meaning})",
            top.join(", "),
            first.replace('_', " ")
        ),
    ))
}

/// A rule: metadata and a check.
pub struct Rule {
    /// Identity and documentation.
    pub meta: &'static RuleMeta,
    /// The check: zero or more findings.
    pub check: fn(&Context) -> Vec<Finding>,
}

/// Every rule, in code order. The one registration table.
pub static REGISTRY: &[Rule] = &[
    roofline_position::RULE,
    launch_bound::RULE,
    host_sync_in_step::RULE,
    cpu_heavy_ops::RULE,
    device_ping_pong::RULE,
    late_gpu_migration::RULE,
    cpu_preprocessing::RULE,
    pageable_memcpy::RULE,
    copy_compute_overlap::RULE,
    data_loader_wait::RULE,
    small_grids::RULE,
    fp32_gemm_without_tensor_cores::RULE,
    misaligned_gemm_shapes::RULE,
    no_autocast::RULE,
    elementwise_chains::RULE,
    uncoalesced_global_access::RULE,
    low_l2_hit_rate::RULE,
    occupancy_limited::RULE,
    materialised_attention::RULE,
    contended_scatter::RULE,
    full_sort_for_top_k::RULE,
    unused_parameter_gradients::RULE,
    non_contiguous_view_access::RULE,
    copy_churn::RULE,
    transposed_chain::RULE,
    channels_first_convolutions::RULE,
    kernel_diversity::RULE,
    memory_near_capacity::RULE,
    allocator_churn::RULE,
];

/// What a cross-rank rule's check sees: the ranks of one job compared.
pub struct RanksContext<'a> {
    /// The comparison, with the job's step model.
    pub analysis: &'a crate::analysis::ranks::RanksAnalysis,
}

impl RanksContext<'_> {
    /// The job's step time, ms (the denominator of every %).
    pub fn step_ms(&self) -> f64 {
        self.analysis.job_step_ms
    }
}

/// A cross-rank rule: metadata and a check over many ranks.
pub struct RankRule {
    /// Identity and documentation.
    pub meta: &'static RuleMeta,
    /// The check: zero or more findings.
    pub check: fn(&RanksContext) -> Vec<Finding>,
    /// What its fix changes in the job's step model (`None`: not simulated); the
    /// diagnosis combines these (marginal savings, all fixes at once).
    pub change:
        fn(&crate::analysis::ranks::RanksAnalysis) -> Option<crate::analysis::ranks::JobChange>,
}

/// Every cross-rank rule (category P), in code order: run only when many ranks of a
/// job are analysed together (`tensight analyze DIR`, `tensight merge`).
pub static RANK_REGISTRY: &[RankRule] = &[
    straggler_rank::RULE,
    collective_wait::RULE,
    exposed_communication::RULE,
    compute_imbalance::RULE,
];

/// Every rule's metadata: the per-rank rules, then the cross-rank ones.
pub fn all_meta() -> impl Iterator<Item = &'static RuleMeta> {
    REGISTRY
        .iter()
        .map(|r| r.meta)
        .chain(RANK_REGISTRY.iter().map(|r| r.meta))
}

/// Look any rule (per-rank or cross-rank) up by code (case-insensitive) or name.
pub fn find_meta(code_or_name: &str) -> Option<&'static RuleMeta> {
    all_meta().find(|m| m.code.eq_ignore_ascii_case(code_or_name) || m.name == code_or_name)
}

impl Draft {
    /// Turn into a finding of the cross-rank rule `meta`, with % and severity from the
    /// job's step time. The saving is `saving_ms` (the rule replays its change on the
    /// job's step model).
    pub fn finish_ranks(self, meta: &RuleMeta, ctx: &RanksContext) -> Finding {
        let mut f = Finding {
            code: meta.code,
            rule: meta.name,
            category: meta.category,
            title: self.title,
            message: self.message,
            saving_ms: 0.0,
            saving_pct: 0.0,
            estimate: self.estimate,
            severity: Severity::Info,
            evidence: self.evidence,
            explanation: self.explanation,
            fixes: self.fixes,
            locations: self.locations,
            change: None,
            after: None,
            marginal_ms: None,
        };
        f.set_saving(self.saving_ms, ctx.step_ms());
        f
    }
}

/// Look a rule up by code (case-insensitive) or name.
pub fn find(code_or_name: &str) -> Option<&'static Rule> {
    REGISTRY
        .iter()
        .find(|r| r.meta.code.eq_ignore_ascii_case(code_or_name) || r.meta.name == code_or_name)
}

/// Codes of the rules that read Nsight Compute counters: without a hardware pass
/// they are skipped, and said so, rather than run.
pub const NEEDS_HARDWARE: [&str; 3] = ["M001", "M002", "M003"];

/// Whether rule `meta` reads hardware counters ([`NEEDS_HARDWARE`]).
pub fn needs_hardware(meta: &RuleMeta) -> bool {
    NEEDS_HARDWARE.contains(&meta.code)
}

/// Format ms with sensible precision.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{:.1} µs", ms * 1000.0)
    }
}

/// Format bytes with binary units.
pub fn fmt_bytes(b: f64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Location of a group of GEMM/conv kernels (T001, T003): op, kernel, shapes and time
/// per step (`n` steps).
pub(crate) fn gemm_location(p: &Profile, g: &crate::analysis::gemm::Group, n: f64) -> Location {
    let mut loc = g.op.map(|o| op_location(p, o)).unwrap_or_default();
    if loc.op.is_none() && !g.op_name.is_empty() {
        loc.op = Some(g.op_name.clone());
    }
    loc.kernel = Some(g.kernel.clone());
    let time = format!(
        "{:.0}× per step, {} per step, saves ~{} of GPU time",
        g.count as f64 / n,
        fmt_ms(g.dur_ns as f64 / 1e6 / n),
        fmt_ms(g.saved_ns as f64 / 1e6 / n)
    );
    loc.tensor = Some(match &g.shape {
        Some(s) => format!("{s}; {time}"),
        None => time,
    });
    loc
}

/// Location of op `idx`: its name and, with stacks, the user's source line.
pub fn op_location(p: &Profile, idx: u32) -> Location {
    Location {
        op: Some(p.ops[idx as usize].name.to_string()),
        source: p.user_frame(idx).map(|f| f.name.to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_documented_and_unique() {
        let mut codes = std::collections::HashSet::new();
        for meta in all_meta() {
            let r = Rule {
                meta,
                check: |_| Vec::new(),
            };
            assert!(codes.insert(r.meta.code), "duplicate code {}", r.meta.code);
            let mut at = 0;
            for s in DOC_SECTIONS {
                let pos = r.meta.doc[at..].find(s).unwrap_or_else(|| {
                    panic!(
                        "{} lacks section {s:?} (or it is out of order)",
                        r.meta.code
                    )
                });
                at += pos + s.len();
            }
            let letter = r.meta.code.chars().next().unwrap_or(' ');
            let expect = match r.meta.category {
                Category::Roofline => 'R',
                Category::Launch => 'L',
                Category::Sync => 'S',
                Category::CpuResidency => 'C',
                Category::DataPipeline => 'D',
                Category::Occupancy => 'O',
                Category::MemoryHierarchy => 'M',
                Category::TensorCores => 'T',
                Category::Fusion => 'G',
                Category::Views => 'V',
                Category::Allocator => 'A',
                Category::WastedWork => 'W',
                Category::Distributed => 'P',
            };
            assert_eq!(
                letter, expect,
                "{} has the wrong letter for its category",
                r.meta.code
            );
            assert!(
                r.meta
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-' || c.is_ascii_digit()),
                "{} name must be kebab-case",
                r.meta.code
            );
        }
    }

    #[test]
    fn severity_follows_share() {
        assert_eq!(Severity::from_pct(45.0), Severity::Critical);
        assert_eq!(Severity::from_pct(20.0), Severity::Severe);
        assert_eq!(Severity::from_pct(7.0), Severity::Moderate);
        assert_eq!(Severity::from_pct(2.0), Severity::Low);
        assert_eq!(Severity::from_pct(0.5), Severity::Info);
    }
}
