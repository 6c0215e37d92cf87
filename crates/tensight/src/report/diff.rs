//! `tensight diff`: a [`Comparison`] of two runs as text or JSON, and the step rows,
//! verdict and finding counts the HTML page ([`super::html::render_diff`]) shows in the
//! same words.
//!
//! Text: step figures before, after and the change; the findings resolved, new,
//! changed and unchanged with their savings; the kernels and ops whose time per step
//! changed most. Every line fits the width (60 to 120 columns); names from the traces go
//! through [`crate::text`] (escaped, cut with `…`). No colour.
//!
//! JSON: this doc is the schema; `schema_version` changes its major number when a field
//! is removed or changes meaning, its minor number when fields are added.
//!
//! ```text
//! {
//!   "schema_version": "1.0",
//!   "tensight_version": str,
//!   "kind": "diff",
//!   "before", "after": { "input": str, "steps": int, "step_source": str,
//!                        "device": str|null, "findings": int, "primary": str|null },
//!   "step_time_ms": Delta,                  // mean step wall time in the trace
//!   "unprofiled_step_time_ms": Delta|null,  // both bundles' warm-up timing, no profiler
//!   "gpu_busy_ms_per_step": Delta, "gpu_busy_pct": Delta,
//!   "gpu_idle_ms_per_step": Delta, "kernels_per_step": Delta,
//!   "findings": [ { "code": str, "title": str,
//!                   "status": "resolved"|"new"|"changed"|"unchanged",
//!                   "before", "after": { "saving_ms", "saving_pct": float,
//!                                        "severity": "info"|"low"|"moderate"|"severe"|"critical",
//!                                        "message": str } | null } ],
//!   "kernels": [ NameChange ],              // by kernel name, largest |change| first
//!   "ops": [ NameChange ]                   // outermost ops, GPU time of their kernels
//! }
//! Delta = { "before", "after", "change": float,   // change = after - before
//!           "ratio": float|null }                 // after / before; null when before is 0
//! NameChange = { "name": str, "ms_per_step": Delta, "count_per_step": Delta }
//! ```

use super::terminal::{fit, short, wrap_hanging};
use super::RenderOptions;
use crate::compare::{Comparison, Delta, FindingChange, NameChange, Status};
use crate::rules::fmt_ms;
use crate::text::shown_to;
use serde_json::{json, Value};
use std::fmt::Write;

/// Version of the schema above.
pub const SCHEMA_VERSION: &str = "1.0";

/// The comparison as a JSON value.
pub fn to_value(c: &Comparison) -> Value {
    let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("schema_version".into(), json!(SCHEMA_VERSION));
        m.insert("tensight_version".into(), json!(env!("CARGO_PKG_VERSION")));
        m.insert("kind".into(), json!("diff"));
    }
    v
}

/// The comparison as pretty-printed JSON text (with a final newline).
pub fn render_json(c: &Comparison) -> String {
    let mut s = serde_json::to_string_pretty(&to_value(c))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// The comparison as text for a terminal, within `o.width` columns.
pub fn render_text(c: &Comparison, o: RenderOptions) -> String {
    let w = o.width.clamp(60, 120);
    let mut out = String::new();
    let _ = writeln!(out, "TENSIGHT DIFF: before → after");
    for (label, s) in [("before", &c.before), ("after", &c.after)] {
        let what = format!(
            "{} ({} step{}{})",
            s.input,
            s.steps,
            if s.steps == 1 { "" } else { "s" },
            s.device
                .as_deref()
                .map(|d| format!(", {d}"))
                .unwrap_or_default()
        );
        out.push_str(&wrap_hanging(
            &crate::text::escaped(&what),
            w,
            &format!("{label:<7}"),
            "       ",
        ));
    }

    section(&mut out, "STEP", w);
    let _ = writeln!(
        out,
        "{:<19}{:>10}{:>10}{:>11}  ratio",
        "", "before", "after", "change"
    );
    for r in step_rows(c) {
        let _ = write!(
            out,
            "{:<19}{:>10}{:>10}{:>11}",
            r.label, r.before, r.after, r.change
        );
        match r.ratio {
            Some(x) => {
                let _ = writeln!(out, "  {x}");
            }
            None => out.push('\n'),
        }
    }
    out.push('\n');
    out.push_str(&wrap_hanging(&said(c), w, "", ""));

    findings(&mut out, &c.findings, w);
    names(
        &mut out,
        "KERNELS THAT CHANGED MOST (time per step)",
        &c.kernels,
        w,
    );
    names(
        &mut out,
        "OPS THAT CHANGED MOST (GPU time per step)",
        &c.ops,
        w,
    );
    fit(&out, w, false)
}

/// One row of the step table (text and HTML): the figure, its values and the change.
pub(crate) struct StepRow {
    /// What the row measures (`step (trace mean)`).
    pub label: &'static str,
    /// Before, formatted (`1.75 ms`, `68.3%`).
    pub before: String,
    /// After, formatted.
    pub after: String,
    /// After − before, signed (`-307.3 µs`, `-7.1 pts`).
    pub change: String,
    /// After / before (`0.82×`, `-` when before is 0); `None` for rows without one.
    pub ratio: Option<String>,
}

/// The step table: step time (in the trace, and without the profiler when both sides
/// timed it), GPU busy and idle per step, GPU busy %, kernels per step.
pub(crate) fn step_rows(c: &Comparison) -> Vec<StepRow> {
    let ms = |label, d: &Delta| StepRow {
        label,
        before: fmt_ms(d.before),
        after: fmt_ms(d.after),
        change: signed_ms(d.change),
        ratio: Some(d.ratio.map_or("-".to_string(), |r| format!("{r:.2}×"))),
    };
    let mut v = vec![ms("step (trace mean)", &c.step_time_ms)];
    if let Some(u) = &c.unprofiled_step_time_ms {
        v.push(ms("step (no profiler)", u));
    }
    v.push(ms("GPU busy per step", &c.gpu_busy_ms_per_step));
    v.push(ms("GPU idle per step", &c.gpu_idle_ms_per_step));
    let b = &c.gpu_busy_pct;
    v.push(StepRow {
        label: "GPU busy",
        before: format!("{:.1}%", b.before),
        after: format!("{:.1}%", b.after),
        change: format!("{:+.1} pts", b.change),
        ratio: None,
    });
    let k = &c.kernels_per_step;
    v.push(StepRow {
        label: "kernels per step",
        before: format!("{:.1}", k.before),
        after: format!("{:.1}", k.after),
        change: format!("{:+.1}", k.change),
        ratio: None,
    });
    v
}

/// The step's verdict: `Without the profiler the step is 1.38× faster (…); in the
/// trace, 1.21× faster (…).`
pub(crate) fn said(c: &Comparison) -> String {
    match &c.unprofiled_step_time_ms {
        Some(u) => format!(
            "Without the profiler the step is {}; in the trace, {}.",
            verdict(u),
            verdict(&c.step_time_ms)
        ),
        None => format!("The step is {}.", verdict(&c.step_time_ms)),
    }
}

/// `1 resolved · 0 new · 0 changed · 1 unchanged`.
pub(crate) fn counts(f: &[FindingChange]) -> String {
    let count = |s: Status| f.iter().filter(|x| x.status == s).count();
    format!(
        "{} resolved · {} new · {} changed · {} unchanged",
        count(Status::Resolved),
        count(Status::New),
        count(Status::Changed),
        count(Status::Unchanged)
    )
}

fn section(out: &mut String, title: &str, w: usize) {
    let _ = writeln!(out, "\n{}", crate::text::cut(title, w));
    let _ = writeln!(out, "{}", "─".repeat(w));
}

/// `1.21× faster (307.3 µs less per step)`.
fn verdict(d: &Delta) -> String {
    match d.ratio {
        Some(r) if r < 0.98 && r > 0.0 => format!(
            "{:.2}× faster ({} less per step)",
            1.0 / r,
            fmt_ms(-d.change)
        ),
        Some(r) if r > 1.02 => format!("{r:.2}× slower ({} more per step)", fmt_ms(d.change)),
        Some(_) => "about as fast (within 2%)".to_string(),
        None => "not comparable (the before run has no step time)".to_string(),
    }
}

/// `+1.2 µs`, `-307.3 µs`.
pub(crate) fn signed_ms(ms: f64) -> String {
    if ms >= 0.0 {
        format!("+{}", fmt_ms(ms))
    } else {
        format!("-{}", fmt_ms(-ms))
    }
}

fn findings(out: &mut String, f: &[FindingChange], w: usize) {
    section(out, &format!("FINDINGS  {}", counts(f)), w);
    if f.is_empty() {
        let _ = writeln!(out, "No findings on either side.");
        return;
    }
    for x in f {
        let saving = |s: &Option<crate::compare::FindingSide>| {
            s.as_ref().map_or("-".to_string(), |s| {
                format!(
                    "~{}/step ({})",
                    fmt_ms(s.saving_ms),
                    s.severity.label().to_lowercase()
                )
            })
        };
        let what = match x.status {
            Status::Resolved => format!("estimated saving was {}", saving(&x.before)),
            Status::New => format!("estimated saving {}", saving(&x.after)),
            Status::Changed | Status::Unchanged => format!(
                "estimated saving {} → {}",
                saving(&x.before),
                saving(&x.after)
            ),
        };
        let head = format!("{:<10}{} ", x.status.label(), x.code);
        let text = format!("{}: {what}", crate::text::escaped(&x.title));
        out.push_str(&wrap_hanging(
            &text,
            w,
            &head,
            &" ".repeat(head.chars().count()),
        ));
    }
}

fn names(out: &mut String, title: &str, v: &[NameChange], w: usize) {
    section(out, title, w);
    if v.is_empty() {
        let _ = writeln!(out, "No time per step changed by 0.5 µs or more.");
        return;
    }
    let _ = writeln!(out, "{:>10}{:>10}{:>11}  name", "before", "after", "change");
    let room = w.saturating_sub(33).max(10);
    for n in v {
        let d = &n.ms_per_step;
        // A long name (a C++ kernel signature) takes two lines, the second cut with `…`.
        let name: Vec<char> = crate::text::escaped(&short(&n.name, 2 * room))
            .chars()
            .collect();
        let (first, rest) = name.split_at(name.len().min(room));
        let _ = writeln!(
            out,
            "{:>10}{:>10}{:>11}  {}",
            fmt_ms(d.before),
            fmt_ms(d.after),
            signed_ms(d.change),
            first.iter().collect::<String>()
        );
        if !rest.is_empty() {
            let rest: String = rest.iter().collect();
            let _ = writeln!(out, "{:33}{}", "", shown_to(&rest, room));
        }
    }
}
