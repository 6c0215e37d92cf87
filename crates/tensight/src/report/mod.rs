//! Reports: the diagnosis of one run, rendered for a person or a program.
//!
//! Input: a [`Report`] (the profile's facts, the metrics, the diagnosis, the import
//! warnings and counters). Output: text. One file per format: [`terminal`] (colour
//! only when asked; readable at 80 columns), [`json`] (documented, versioned schema),
//! [`html`] (one self-contained page with SVG plots and sortable tables), [`perfetto`]
//! (the original trace annotated with the findings) and [`diff`] (two runs compared,
//! [`crate::compare`]; as a page by [`html::render_diff`]). Rendering never computes
//! metrics; it only formats them. Output is deterministic: no wall-clock time, sorted
//! collections.

pub mod diff;
pub mod forest;
pub mod html;
pub mod json;
pub mod perfetto;
pub mod terminal;

use crate::analysis::RunMetrics;
use crate::diagnosis::Diagnosis;
use crate::model::{BundleInfo, Profile};

/// Everything a renderer needs.
pub struct Report {
    /// The model of the run.
    pub profile: Profile,
    /// Measurements.
    pub metrics: RunMetrics,
    /// Findings.
    pub diagnosis: Diagnosis,
    /// Reader warnings (truncation and the like).
    pub warnings: Vec<String>,
    /// Display name of the input (the path as given, or `demo: ...`).
    pub input: String,
}

/// Many ranks of one job: the cross-rank comparison and findings, and each rank's own
/// report when the ranks were read from traces (empty when merged from summaries).
pub struct RanksReport {
    /// Display name of the input (the folder, or the summaries merged).
    pub input: String,
    /// Each rank's summary, by rank.
    pub summaries: Vec<crate::analysis::ranks::RankSummary>,
    /// The comparison.
    pub analysis: crate::analysis::ranks::RanksAnalysis,
    /// The cross-rank findings.
    pub diagnosis: crate::diagnosis::ranks::RanksDiagnosis,
    /// Each rank's own report, by rank (empty after `tensight merge`).
    pub per_rank: Vec<Report>,
    /// The rank whose own findings are shown beside the cross-rank ones: the slowest
    /// (the straggler sets the job's pace, so its findings are the ones that pay).
    pub focus_rank: u32,
    /// What went wrong reading ranks (a rank left out) and what did not line up.
    pub warnings: Vec<String>,
}

impl RanksReport {
    /// The focus rank's own report, when the ranks were read from traces.
    pub fn focus(&self) -> Option<&Report> {
        let i = self
            .summaries
            .iter()
            .position(|s| s.rank == self.focus_rank)?;
        self.per_rank.get(i)
    }
}

/// Options for rendering.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions {
    /// Use ANSI colours.
    pub color: bool,
    /// Terminal width to wrap at (min 60).
    pub width: usize,
}

impl Report {
    /// Name of op `idx`.
    pub fn op_name(&self, idx: u32) -> String {
        self.profile
            .ops
            .get(idx as usize)
            .map(|o| o.name.to_string())
            .unwrap_or_default()
    }
    /// User source line of op `idx`, when stacks were recorded.
    pub fn op_source(&self, idx: u32) -> Option<String> {
        self.profile.user_frame(idx).map(|f| f.name.to_string())
    }
}

/// How the collector found a bundle's step boundaries (`optimizer.step() calls`, `the loop
/// at train.py(12) in main`), for the text and HTML reports.
pub(crate) fn step_boundaries(b: &BundleInfo) -> String {
    match b.step_detection.as_deref() {
        Some("optimizer") => "optimizer.step() calls".to_string(),
        Some("forward") => "top-level module forward calls".to_string(),
        Some("loop") => match &b.step_loop {
            Some(l) => format!("the loop at {l}"),
            None => "a loop of the program".to_string(),
        },
        Some("whole_program") => "none: the whole program as one window".to_string(),
        Some(other) => other.to_string(),
        None => "not stated".to_string(),
    }
}

/// What a trace without GPU activity holds instead, per step (one wording for every
/// format): `"host events only, per step: 108 op calls, 2 annotations (most: …), 198
/// Python frames on 1 thread; no kernels, copies or GPU syncs (…)"`. `None` when the
/// trace has GPU activity.
pub(crate) fn host_only_holds(r: &Report) -> Option<String> {
    use crate::model::OpKind;
    let p = &r.profile;
    if p.has_gpu() {
        return None;
    }
    let (lo, hi) = crate::analysis::window(p);
    let n = p.steps.len().max(1) as f64;
    let inside = |ts: i64| ts >= lo && ts < hi;
    let events: Vec<&crate::model::CpuOp> = p
        .ops
        .iter()
        .filter(|o| inside(o.ts_ns) && !o.name.starts_with("ProfilerStep#"))
        .collect();
    let threads: std::collections::BTreeSet<(i64, i64)> =
        events.iter().map(|o| (o.pid, o.tid)).collect();
    let ops = events.iter().filter(|o| o.kind == OpKind::Op).count();
    let mut names: std::collections::BTreeMap<&str, usize> = Default::default();
    for o in events.iter().filter(|o| o.kind == OpKind::Annotation) {
        *names.entry(&o.name).or_default() += 1;
    }
    let annotations: usize = names.values().sum();
    let frames = p.python_frames.iter().filter(|f| inside(f.ts_ns)).count();
    let mut parts = vec![format!("{} op calls", fmt_count(ops as f64 / n))];
    if let Some((name, k)) = names.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))) {
        parts.push(format!(
            "{} annotations (most: {name} ×{})",
            fmt_count(annotations as f64 / n),
            fmt_count(*k as f64 / n)
        ));
    }
    if frames > 0 {
        parts.push(format!("{} Python frames", fmt_count(frames as f64 / n)));
    }
    Some(format!(
        "host events only, per step: {} on {} thread{}; no kernels, copies or GPU syncs \
         (record with CUDA activity to analyse the GPU)",
        parts.join(", "),
        threads.len(),
        if threads.len() == 1 { "" } else { "s" }
    ))
}

/// A per-step count: whole when it is one, else one decimal.
pub(crate) fn fmt_count(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{:.0}", x.round())
    } else {
        format!("{x:.1}")
    }
}

/// Why there is no roofline (one wording for every format).
pub(crate) fn no_roofline(r: &Report) -> &'static str {
    if !r.profile.has_gpu() {
        "no GPU activity in this trace"
    } else if !r.metrics.compute.shapes_recorded {
        "no shapes recorded (profile with record_shapes=True)"
    } else if r
        .metrics
        .device
        .as_ref()
        .and_then(|d| d.ceilings.as_ref())
        .is_none()
    {
        "device ceilings unknown for this GPU"
    } else {
        "no GEMM, convolution or attention ops with shapes in the steps"
    }
}

/// The step with and without the profiler, one pair for every place a report shows it:
/// the diagnosis's (the analysed steps' mean against the unprofiled warm-up step, what
/// its savings were scaled with) when it put savings into unprofiled time, else the
/// collector's medians (of its CUDA events, else of its host clock). Profiled ms,
/// unprofiled ms, how.
pub(crate) fn timing(r: &Report) -> Option<(f64, f64, &'static str)> {
    if let Some(u) = r
        .diagnosis
        .unprofiled
        .as_ref()
        .filter(|u| u.source != "calibration")
    {
        return Some((
            u.profiled_step_ms,
            u.unprofiled_step_ms,
            "the analysed steps' mean, the warm-up's median",
        ));
    }
    let b = r.profile.bundle.as_ref()?;
    let p = crate::analysis::median_ms(&b.timing.step_ms_profiled)?;
    // CUDA events time the step; the host clock of a GPU-bound program only times how
    // fast the host queued its work (a pricer queueing 16 ms of kernels in 11 ms).
    match crate::analysis::median_ms(&b.timing.step_ms_unprofiled_gpu) {
        Some(u) => Some((p, u, "medians, CUDA events")),
        None => Some((
            p,
            crate::analysis::median_ms(&b.timing.step_ms_unprofiled)?,
            "medians",
        )),
    }
}
