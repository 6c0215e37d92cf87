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
//! A plain trace carries no unprofiled timing: its host is not deflated (a per-option
//! calibration measured on the GPU is to come), and the report says so.

use super::simulate::Change;
use crate::model::Profile;
use serde::Serialize;

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
    /// `cuda_events` or `host_clock` (then at least the GPU busy time per step).
    pub source: &'static str,
    /// Host events the profiler recorded per step (ops, Python calls, runtime calls).
    pub events_per_step: f64,
    /// What each cost the host, ns.
    pub per_event_ns: f64,
    /// The removal of that cost, for the simulator.
    #[serde(skip)]
    pub change: Change,
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
    let (u, source) = unprofiled_step(p, profiled_step_ms, gpu_busy_ms)?;
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
    if at.is_empty() {
        return None;
    }
    at.sort_unstable();
    let n = p.steps.len().max(1) as f64;
    let events_per_step = at.len() as f64 / n;
    let per_event_ns = (profiled_step_ms - u) * 1e6 / events_per_step;
    let cost = per_event_ns.round() as i64;
    Some(Deflation {
        profiled_step_ms,
        unprofiled_step_ms: u,
        source,
        events_per_step,
        per_event_ns,
        change: Change {
            host_points: at.into_iter().map(|t| (t, cost)).collect(),
            ..Default::default()
        },
    })
}
