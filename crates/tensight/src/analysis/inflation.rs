//! The profiler's own cost, modelled once: the host timeline as it would run without the
//! profiler, for the diagnosis to simulate every fix on.
//!
//! The profiler costs the host a few microseconds for each event it records (an op's
//! callbacks, a Python call with stacks, a CUDA runtime call through CUPTI), so under it
//! a busy host runs its steps slower and every host gap is wider. `tensight run` times
//! its warm-up steps without the profiler (CUDA events at the step boundaries; the host
//! clock without a GPU). When the recorded steps are at least [`MIN_INFLATION`]× that
//! unprofiled step, the difference is spread evenly over the host events of the steps:
//! each event costs (profiled − unprofiled) / events per step, and [`Deflation::change`]
//! removes that much host time at every event. Replayed with it, the steps last about
//! as long as the unprofiled ones (the GPU's own time is untouched: a GPU-bound step
//! stays as it is), and a fix is judged on the timeline the program really has.
//!
//! A step the GPU paces under the profiler and without it is not slowed, yet its host
//! can be: in the warm-up the host ran ahead (its clock well under the CUDA events'
//! step), under the profiler it kept pace with the GPU. [`host_pace`] removes that
//! difference from the host events the same way, so a fix that shortens the GPU's work
//! is not capped by a host that only the profiler made slow.
//!
//! A plain trace carries no unprofiled timing. Its host is deflated by a calibration
//! instead ([`calibrated`]): what one recorded host event (an op, a runtime call, a
//! Python call) costs the host under the profiler options the trace shows (shapes, stacks,
//! an execution trace beside it), measured on an H200 by `scripts/h200/plain_calibration.py` on host-bound
//! programs of its own ([`CALIBRATION`]). That is an assumption about this trace's
//! machine, and the report says so; the unprofiled step is then the replayed one.

use super::simulate::{self, Change};
use crate::model::{Profile, RuntimeKind};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Deflate only when the profiled step is at least this many times the unprofiled one
/// (below it, run-to-run noise).
pub const MIN_INFLATION: f64 = 1.15;

/// The profiler's cost in the recorded steps.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Deflation {
    /// Mean profiled step, ms.
    pub profiled_step_ms: f64,
    /// Median unprofiled warm-up step, ms.
    pub unprofiled_step_ms: f64,
    /// `cuda_events` or `host_clock` (then at least the GPU busy time per step),
    /// `calibration` (a plain trace: the unprofiled step is the replay without the
    /// calibrated cost), or `host_pace` (a step the profiler did not slow, whose host it
    /// did: [`host_pace`]).
    pub source: &'static str,
    /// Host events the profiler recorded per step (ops, Python calls, runtime calls).
    pub events_per_step: f64,
    /// What each cost the host, ns.
    pub per_event_ns: f64,
    /// The removal of that cost, for the simulator.
    #[serde(skip)]
    pub change: Change,
    /// What replaying `change` saves over the analysed steps, ns, when that replay was
    /// run already ([`calibrated`] needs it for the unprofiled step): the diagnosis uses
    /// it instead of replaying the same change again.
    #[serde(skip)]
    pub saved_ns: Option<i64>,
    /// `host_pace` only: the host's work per step without the profiler and under it, ms.
    #[serde(skip)]
    pub host_ms: Option<(f64, f64)>,
}

/// The unprofiled step of `p`'s bundle, ms, and how it was timed (`cuda_events` or
/// `host_clock`), when the profiler slowed the steps down (`profiled_step_ms` at least
/// [`MIN_INFLATION`]× it).
pub fn unprofiled_step(
    p: &Profile,
    profiled_step_ms: f64,
    gpu_busy_ms: f64,
) -> Option<(f64, &'static str)> {
    let (u, source) = unprofiled_timing(p, gpu_busy_ms)?;
    (profiled_step_ms >= MIN_INFLATION * u).then_some((u, source))
}

/// The step time of `p`'s bundle without the profiler, ms (the median of the warm-up
/// steps), and how it was timed (`cuda_events` or `host_clock`), whatever the
/// profiler's slowdown; `None` without a bundle's timing.
pub fn unprofiled_timing(p: &Profile, gpu_busy_ms: f64) -> Option<(f64, &'static str)> {
    let t = &p.bundle.as_ref()?.timing;
    let (u, source) = match super::median_ms(&t.step_ms_unprofiled_gpu) {
        Some(u) => (u, "cuda_events"),
        // The host clock of a GPU-bound program measures how fast the host queues work,
        // not the step: the step is at least the GPU's busy time.
        None => (
            super::median_ms(&t.step_ms_unprofiled)?.max(gpu_busy_ms),
            "host_clock",
        ),
    };
    (u > 0.0).then_some((u, source))
}

/// The profiler's cost in `p`'s analysed steps, when a bundle timed them unprofiled and
/// the profiler slowed them down.
pub fn of(p: &Profile, profiled_step_ms: f64, gpu_busy_ms: f64) -> Option<Deflation> {
    let Some((u, source)) = unprofiled_step(p, profiled_step_ms, gpu_busy_ms) else {
        return host_pace(p, profiled_step_ms);
    };
    let at = host_events(p)?;
    let n = p.steps.len().max(1) as f64;
    let events_per_step = at.len() as f64 / n;
    let change = |cost: f64| spread(&at, cost);
    let replayed_ms =
        |c: &Change| profiled_step_ms - simulate::saving_ns(p, c).max(0) as f64 / 1e6 / n;
    // Spread evenly, the slowdown is this much per event; but where the GPU or a sync is
    // on the critical path for part of the step, removing host time saves less than its
    // length, so the replay stays above the unprofiled step. The cost is then the
    // smallest one whose replay reaches it (bisection), up to MAX_SPREAD times the even
    // share (a replay that cannot reach it is bound by the GPU: more changes nothing).
    let even = (profiled_step_ms - u) * 1e6 / events_per_step;
    let mut best = change(even);
    let mut per_event_ns = even;
    let reached = |ms: f64| ms <= u * (1.0 + REACH_TOLERANCE);
    if !reached(replayed_ms(&best)) {
        let (mut lo, mut hi) = (even, even * MAX_SPREAD);
        let top = change(hi);
        if reached(replayed_ms(&top)) {
            for _ in 0..BISECTIONS {
                let mid = 0.5 * (lo + hi);
                if reached(replayed_ms(&change(mid))) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            per_event_ns = hi;
            best = change(hi);
        } else {
            per_event_ns = hi;
            best = top;
        }
    }
    let saved_ns = simulate::saving_ns(p, &best);
    Some(Deflation {
        profiled_step_ms,
        unprofiled_step_ms: u,
        source,
        events_per_step,
        per_event_ns,
        change: best,
        saved_ns: Some(saved_ns),
        host_ms: None,
    })
}

/// The profiler's cost on the host of a step it did not slow down (the GPU sets the
/// pace both ways): in the warm-up the host ran ahead of the GPU (its clock at most
/// 1 / [`MIN_INFLATION`] of the CUDA events' step), so its clock there is its own work
/// per step; under the profiler the same work took at least [`MIN_INFLATION`]× that
/// (each step's host range less its blocking syncs). Left in, that cost makes the host
/// look as slow as the GPU, and a fix that shortens the GPU's work looks capped by the
/// host. The difference is spread evenly over the host events, as [`of`] does.
fn host_pace(p: &Profile, profiled_step_ms: f64) -> Option<Deflation> {
    let t = &p.bundle.as_ref()?.timing;
    let gpu = super::median_ms(&t.step_ms_unprofiled_gpu)?;
    let host = super::median_ms(&t.step_ms_unprofiled)?;
    let work = profiled_host_work_ms(p)?;
    if !(host > 0.0 && host * MIN_INFLATION <= gpu && host * MIN_INFLATION <= work) {
        return None;
    }
    let at = host_events(p)?;
    let events_per_step = at.len() as f64 / p.steps.len().max(1) as f64;
    let per_event_ns = (work - host) * 1e6 / events_per_step;
    let change = spread(&at, per_event_ns);
    let saved_ns = simulate::saving_ns(p, &change);
    Some(Deflation {
        profiled_step_ms,
        unprofiled_step_ms: gpu,
        source: "host_pace",
        events_per_step,
        per_event_ns,
        change,
        saved_ns: Some(saved_ns),
        host_ms: Some((host, work)),
    })
}

/// The host's work per analysed step under the profiler, ms: each step's host range less
/// the time its blocking syncs waited (the mean over steps).
fn profiled_host_work_ms(p: &Profile) -> Option<f64> {
    let (first, last) = (p.steps.first()?, p.steps.last()?);
    let ranges: i64 = p
        .steps
        .iter()
        .map(|s| (s.cpu_end_ns - s.host_start_ns).max(0))
        .sum();
    let waits: i64 = p
        .runtime
        .iter()
        .filter(|r| r.kind == RuntimeKind::Sync)
        .filter(|r| r.ts_ns >= first.host_start_ns && r.ts_ns < last.cpu_end_ns)
        .map(|r| r.dur_ns)
        .sum();
    let ms = (ranges - waits) as f64 / 1e6 / p.steps.len() as f64;
    (ms > 0.0).then_some(ms)
}

/// How far above the unprofiled step a deflated replay may stay and count as reaching
/// it (share).
const REACH_TOLERANCE: f64 = 0.01;
/// The largest per-event cost tried, as a multiple of the even share.
const MAX_SPREAD: f64 = 4.0;
/// Bisection steps for the per-event cost.
const BISECTIONS: usize = 12;

/// The removal of `cost_ns` (rounded to whole ns) of host time at each event of `at`.
fn spread(at: &[i64], cost_ns: f64) -> Change {
    let cost = cost_ns.round() as i64;
    Change {
        host_points: at.iter().map(|&t| (t, cost)).collect(),
        ..Default::default()
    }
}

/// When the profiler recorded a host event (an op, a Python call, a runtime call) inside
/// the analysed steps, sorted; `None` when there is none.
fn host_events(p: &Profile) -> Option<Vec<i64>> {
    let (first, last) = (p.steps.first()?, p.steps.last()?);
    let inside = |t: i64| t >= first.start_ns && t < last.end_ns;
    let mut at: Vec<i64> = p
        .ops
        .iter()
        .map(|o| o.ts_ns)
        .chain(p.python_frames.iter().map(|f| f.ts_ns))
        .chain(p.runtime.iter().map(|r| r.ts_ns))
        .filter(|&t| inside(t))
        .collect();
    at.sort_unstable();
    (!at.is_empty()).then_some(at)
}

/// The calibration's file: what `scripts/h200/plain_calibration.py` measured.
pub const CALIBRATION: &str = include_str!("profiler_cost_h200.json");

/// The per-event costs of [`CALIBRATION`], ns (medians over its workloads), by the
/// profiler options of the trace: every host event (an op, a runtime call, a Python call)
/// costs the same, as [`of`] spreads a bundle's measured cost.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
pub struct Costs {
    /// CPU+CUDA activities only.
    pub activities: f64,
    /// With `record_shapes`.
    pub shapes: f64,
    /// With `with_stack`.
    pub stack: f64,
    /// With both.
    #[serde(rename = "shapes+stack")]
    pub shapes_stack: f64,
    /// With both and an execution trace recorded over the same steps.
    #[serde(rename = "shapes+stack+et")]
    pub shapes_stack_et: f64,
}

impl Costs {
    /// The cost of one event in a trace recorded with these options.
    pub fn per_event(&self, shapes: bool, stack: bool, et: bool) -> f64 {
        match (shapes, stack) {
            (true, true) if et => self.shapes_stack_et,
            (true, true) => self.shapes_stack,
            (false, true) => self.stack,
            (true, false) => self.shapes,
            (false, false) => self.activities,
        }
    }
}

#[derive(Deserialize)]
struct CalibrationFile {
    costs_ns: Costs,
    context: CalibrationContext,
}

/// Where and with what the calibration was measured.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CalibrationContext {
    /// The GPU.
    pub gpu: String,
    /// torch's version.
    pub torch: String,
    /// When.
    pub date: String,
}

/// The calibration, parsed once (it is compiled in: a parse error is a build defect, and a
/// test parses it).
pub fn calibration() -> Option<&'static (Costs, CalibrationContext)> {
    static C: OnceLock<Option<(Costs, CalibrationContext)>> = OnceLock::new();
    C.get_or_init(|| {
        serde_json::from_str::<CalibrationFile>(CALIBRATION)
            .ok()
            .map(|f| (f.costs_ns, f.context))
    })
    .as_ref()
}

/// The profiler's cost in a plain trace's analysed steps (no bundle: nothing timed them
/// without the profiler), from [`calibration`]: each recorded op, runtime call and Python
/// call costs what the options the trace shows cost (shapes on its ops, Python frames,
/// an execution trace given with it). The unprofiled step is the step replayed without
/// that cost; `None` when that is less than [`MIN_INFLATION`]× faster (a GPU-bound step).
pub fn calibrated(p: &Profile, profiled_step_ms: f64) -> Option<Deflation> {
    if p.bundle.is_some() {
        return None;
    }
    let (costs, _) = calibration()?;
    let at = host_events(p)?;
    let (first, last) = (p.steps.first()?, p.steps.last()?);
    let inside = |t: i64| t >= first.start_ns && t < last.end_ns;
    let shapes = p
        .ops
        .iter()
        .any(|o| inside(o.ts_ns) && o.input_dims.is_some());
    let stack = p.python_frames.iter().any(|f| inside(f.ts_ns));
    let cost = costs
        .per_event(shapes, stack, p.execution_trace.is_some())
        .max(0.0)
        .round() as i64;
    let n = p.steps.len().max(1) as f64;
    let events_per_step = at.len() as f64 / n;
    let per_event_ns = cost as f64;
    let change = spread(&at, per_event_ns);
    let saved_ns = simulate::saving_ns(p, &change);
    let u = profiled_step_ms - saved_ns.max(0) as f64 / 1e6 / n;
    (u > 0.0 && profiled_step_ms >= MIN_INFLATION * u).then_some(Deflation {
        profiled_step_ms,
        unprofiled_step_ms: u,
        source: "calibration",
        events_per_step,
        per_event_ns,
        change,
        saved_ns: Some(saved_ns),
        host_ms: None,
    })
}

impl Deflation {
    /// Where the unprofiled step comes from, for a sentence of the report.
    pub fn provenance(&self) -> String {
        match (self.source, calibration()) {
            ("calibration", Some((_, c))) => format!(
                "the profiler's cost per recorded event as measured on an {} with torch {} \
                 ({}), an assumption for this trace: nothing timed its steps without the profiler",
                c.gpu, c.torch, c.date
            ),
            ("host_pace", _) => {
                let (host, work) = self.host_ms.unwrap_or_default();
                format!(
                    "the host's own pace in the warm-up, timed without it ({} of host work a \
                     step against {} under it; the GPU set the step's pace both ways)",
                    crate::rules::fmt_ms(host),
                    crate::rules::fmt_ms(work)
                )
            }
            (how, _) => format!(
                "the warm-up steps timed without it by {}",
                if how == "cuda_events" {
                    "CUDA events"
                } else {
                    "the host clock"
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calibration_parses_and_its_costs_are_positive() {
        let (c, ctx) = calibration().expect("profiler_cost_h200.json parses");
        for x in [
            c.activities,
            c.shapes,
            c.stack,
            c.shapes_stack,
            c.shapes_stack_et,
        ] {
            assert!(x.is_finite() && x > 0.0 && x < 50_000.0, "{c:?}");
        }
        assert!(ctx.gpu.contains("H200"), "{ctx:?}");
    }
}
