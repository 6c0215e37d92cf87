//! Savings in unprofiled time.
//!
//! Every rule estimates on the profiled timeline, and the profiler slows the host: each
//! op it records costs microseconds of bookkeeping (stacks, shapes, allocator events),
//! so a program whose host is busy runs its steps up to 3× slower under it (measured on
//! an H200: `workloads/launch_bound.py` 6.8 ms a step unprofiled, 13.6 ms profiled).
//! Host-caused GPU idle grows with it, and a saving read off that timeline overstates
//! what the fix gives the program as it runs for real.
//!
//! `tensight run` times the warm-up steps without the profiler (CUDA events at the step
//! boundaries; the host clock where there is no GPU). When the profiled step is at least
//! [`crate::analysis::inflation::MIN_INFLATION`]× that, the findings the causal model
//! replays are replayed again on the host timeline without the profiler's cost
//! ([`crate::analysis::inflation`]); the others are scaled here by unprofiled / profiled
//! (the profiler inflated the whole step; the share of it a fix removes is kept), and
//! savings made of host-caused idle (rules in [`HOST_IDLE`]) are further capped at the
//! idle the unprofiled step can hold: unprofiled step − GPU busy time. A plain trace
//! carries no unprofiled timing: its unprofiled step is the replay without the
//! profiler's calibrated cost ([`crate::analysis::inflation::calibrated`]), an assumption
//! its report states.

use crate::analysis::inflation::Deflation;
use crate::model::Profile;
use crate::rules::{fmt_ms, Finding, Severity};
use serde::Serialize;

/// Rules whose saving is GPU idle while the host was not launching work.
pub const HOST_IDLE: &[&str] = &["L001", "C001", "S001"];

/// How the savings were put into unprofiled time.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unprofiled {
    /// Mean profiled step (the report's step time), ms.
    pub profiled_step_ms: f64,
    /// Median unprofiled warm-up step, ms.
    pub unprofiled_step_ms: f64,
    /// `cuda_events` or `host_clock` (then at least the GPU busy time per step), or
    /// `calibration` (a plain trace replayed without the profiler's calibrated cost).
    pub source: &'static str,
    /// unprofiled / profiled, the factor every saving was multiplied by.
    pub scale: f64,
    /// Cap on the savings of host-idle rules: unprofiled step − GPU busy, ms.
    pub host_idle_cap_ms: f64,
}

/// The unprofiled step of `profile`'s bundle, or of a plain trace's calibrated
/// `deflation`, when the profiler inflated the step.
pub fn of(
    profile: &Profile,
    profiled_step_ms: f64,
    gpu_busy_ms: f64,
    deflation: Option<&Deflation>,
) -> Option<Unprofiled> {
    let (u, source) =
        crate::analysis::inflation::unprofiled_step(profile, profiled_step_ms, gpu_busy_ms)
            .or_else(|| {
                deflation
                    .filter(|d| d.source == "calibration")
                    .map(|d| (d.unprofiled_step_ms, d.source))
            })?;
    Some(Unprofiled {
        profiled_step_ms,
        unprofiled_step_ms: u,
        source,
        scale: u / profiled_step_ms,
        host_idle_cap_ms: (u - gpu_busy_ms).max(0.0),
    })
}

/// Rescale `findings` to unprofiled time: saving, share of the (unprofiled) step,
/// severity, and a sentence in each estimate saying so. With `replayed`, the simulated
/// findings were replayed on the deflated timeline already and are left as they are.
pub fn apply(findings: &mut [Finding], u: &Unprofiled, replayed: bool) {
    let how = match u.source {
        "cuda_events" => "the warm-up steps, timed without it by CUDA events, took",
        "calibration" => "the step replayed without its calibrated cost (an assumption) takes",
        _ => "the warm-up steps, timed without it by the host clock, took",
    };
    let simulated = |f: &Finding| f.change.as_ref().is_some_and(|c| !c.is_empty());
    for f in findings
        .iter_mut()
        .filter(|f| f.saving_ms > 0.0 && !(replayed && simulated(f)))
    {
        let profiled = f.saving_ms;
        let mut saving = profiled * u.scale;
        let mut note = format!(
            " In unprofiled time: ×{:.2} ({} under the profiler; {how} {:.2} ms against \
             {:.2} ms profiled)",
            u.scale,
            fmt_ms(profiled),
            u.unprofiled_step_ms,
            u.profiled_step_ms
        );
        if HOST_IDLE.contains(&f.code) && saving > u.host_idle_cap_ms {
            saving = u.host_idle_cap_ms;
            note.push_str(&format!(
                ", at most the {} the unprofiled step leaves the GPU idle",
                fmt_ms(u.host_idle_cap_ms)
            ));
        }
        note.push('.');
        if !f.estimate.ends_with('.') {
            f.estimate.push('.');
        }
        f.estimate.push_str(&note);
        f.message = restate(&f.message, profiled, saving);
        if let Some(m) = &mut f.marginal_ms {
            *m = (*m * u.scale).min(saving);
        }
        f.saving_ms = saving;
        f.saving_pct = (100.0 * saving / u.unprofiled_step_ms).min(100.0);
        f.severity = Severity::from_pct(f.saving_pct);
    }
}

/// The message with the saving it states (`an estimated X`, `saves ~X`) put into
/// unprofiled time, so the message and the headline give one figure.
pub(crate) fn restate(message: &str, profiled: f64, saving: f64) -> String {
    let (from, to) = (fmt_ms(profiled), fmt_ms(saving));
    if from == to {
        return message.to_string();
    }
    message
        .replace(&format!("estimated {from}"), &format!("estimated {to}"))
        .replace(&format!("saves ~{from}"), &format!("saves ~{to}"))
}

#[cfg(test)]
mod tests {
    use super::restate;

    #[test]
    fn the_message_states_the_scaled_saving() {
        let m = "a view read across its strides (1.8 GiB excess); it costs an estimated 346.4 µs per step";
        assert_eq!(
            restate(m, 0.3464, 0.2607),
            "a view read across its strides (1.8 GiB excess); it costs an estimated 260.7 µs per step"
        );
        let m = "12× per step, 1.20 ms per step, saves ~600.0 µs of GPU time";
        assert!(restate(m, 0.6, 0.3).ends_with("saves ~300.0 µs of GPU time"));
        // Other figures, even equal ones, stay.
        assert_eq!(
            restate("kernel time 346.4 µs", 0.3464, 0.2607),
            "kernel time 346.4 µs"
        );
    }
}
