//! The HTML page of `tensight diff --format html`: two runs compared on one
//! self-contained page, in the analyze report's stylesheet, header and table sorter
//! (`templates/diff.html` extends `templates/base.html`).
//!
//! Input: a [`Comparison`]. Output: HTML text. Sections: the step (the verdict, the
//! step table as the text diff has it, and a bar chart of the step before and after
//! split into GPU busy and idle, with the step without the profiler marked when both
//! sides timed it); the findings resolved, new, changed and unchanged (a bar chart of
//! each finding's saving before and after, and a sortable table with savings,
//! severities and the measured facts); sortable tables of the kernels and ops whose
//! time per step changed most. The figures and their wording are the text diff's
//! ([`crate::report::diff`]'s step rows, verdict and counts): nothing is computed here.
//! Every string from a trace is escaped by the template engine or, in the charts, by
//! [`super::svg::esc`].

use super::bars::{self, Bar, Group, Segment};
use super::{item, page, rule_about, tables::short_kernel, val, Item};
use crate::compare::{Comparison, FindingChange, FindingSide, NameChange, Side, Status};
use crate::report::diff::{counts, said, signed_ms, step_rows};
use crate::report::fmt_count;
use crate::rules::fmt_ms;
use minijinja::{context, Value};
use serde::Serialize;

/// Findings drawn in the savings chart (all are in the table).
const CHART_FINDINGS: usize = 12;

/// The comparison as one HTML page.
pub fn render(c: &Comparison) -> String {
    let steps: Vec<Value> = step_rows(c)
        .into_iter()
        .map(|r| {
            context! {
                label => r.label,
                before => r.before,
                after => r.after,
                change => r.change,
                ratio => r.ratio,
            }
        })
        .collect();
    let findings = findings(&c.findings);
    let ctx = context! {
        title => format!(
            "tensight diff: {} → {}",
            crate::text::cut(&c.before.input, 60),
            crate::text::cut(&c.after.input, 60)
        ),
        input => format!("{} → {}", c.before.input, c.after.input),
        version => env!("CARGO_PKG_VERSION"),
        header => val(header(c)),
        said => said(c),
        primary => primary(c),
        counts => counts(&c.findings),
        steps => steps,
        marked => c.unprofiled_step_time_ms.is_some(),
        step_chart => Value::from_safe_string(step_chart(c)),
        savings_chart => (!findings.is_empty())
            .then(|| Value::from_safe_string(savings_chart(&c.findings))),
        findings => val(findings),
        kernels => val(names(&c.kernels, true)),
        ops => val(names(&c.ops, false)),
    };
    page("diff.html", ctx)
}

/// `tests/x (3 steps from ProfilerStep#N annotations · NVIDIA H200)`.
fn side(s: &Side) -> String {
    let mut what = format!(
        "{} step{} {}",
        s.steps,
        if s.steps == 1 { "" } else { "s" },
        s.step_source
    );
    if let Some(d) = &s.device {
        what.push_str(&format!(" · {d}"));
    }
    format!("{} ({what})", s.input)
}

fn header(c: &Comparison) -> Vec<Item> {
    vec![
        item("before", side(&c.before)),
        item("after", side(&c.after)),
    ]
}

/// `V001 before → G001 after`.
fn primary(c: &Comparison) -> String {
    let p = |s: &Side| s.primary.unwrap_or("none");
    if c.before.primary == c.after.primary {
        format!("{} before and after", p(&c.before))
    } else {
        format!("{} before → {} after", p(&c.before), p(&c.after))
    }
}

/// The step before and after: GPU busy then idle per step, the step time (in the
/// trace) as the note, the step without the profiler as a mark.
fn step_chart(c: &Comparison) -> String {
    let bar = |label: &str, step: f64, busy: f64, idle: f64, unprofiled: Option<f64>| Bar {
        label: label.to_string(),
        segments: vec![
            Segment {
                class: "busy",
                ms: busy,
                title: format!("{label}: GPU busy {} per step", fmt_ms(busy)),
            },
            Segment {
                class: "idle",
                ms: idle,
                title: format!("{label}: GPU idle {} per step", fmt_ms(idle)),
            },
        ],
        note: format!("step {}", fmt_ms(step)),
        mark: unprofiled.map(|u| {
            (
                u,
                format!("{label}: step without the profiler {}", fmt_ms(u)),
            )
        }),
    };
    let u = c.unprofiled_step_time_ms.as_ref();
    let groups = [Group {
        label: "step".into(),
        title: "mean step in the trace: GPU busy and idle per step".into(),
        href: None,
        bars: vec![
            bar(
                "before",
                c.step_time_ms.before,
                c.gpu_busy_ms_per_step.before,
                c.gpu_idle_ms_per_step.before,
                u.map(|d| d.before),
            ),
            bar(
                "after",
                c.step_time_ms.after,
                c.gpu_busy_ms_per_step.after,
                c.gpu_idle_ms_per_step.after,
                u.map(|d| d.after),
            ),
        ],
    }];
    bars::plot("bars steps", "the step before and after", &groups)
}

/// `262.3 µs (19.8%)`, or `-`.
fn saving(s: &Option<FindingSide>) -> String {
    s.as_ref().map_or("-".to_string(), saving_of)
}

fn saving_of(s: &FindingSide) -> String {
    format!("{} ({:.1}%)", fmt_ms(s.saving_ms), s.saving_pct)
}

/// Each finding's saving before and after (the largest [`CHART_FINDINGS`]).
fn savings_chart(f: &[FindingChange]) -> String {
    let mut shown: Vec<(usize, &FindingChange)> = f.iter().enumerate().collect();
    shown.sort_by(|a, b| b.1.largest_ms().total_cmp(&a.1.largest_ms()));
    shown.truncate(CHART_FINDINGS);
    shown.sort_by_key(|x| x.0);
    let groups: Vec<Group> = shown
        .into_iter()
        .map(|(i, x)| {
            let bar = |label: &str, class: &'static str, s: &Option<FindingSide>| {
                let ms = s.as_ref().map_or(0.0, |s| s.saving_ms);
                Bar {
                    label: label.to_string(),
                    segments: vec![Segment {
                        class,
                        ms,
                        title: format!("{} {label}: saving {}", x.code, saving(s)),
                    }],
                    note: match s {
                        Some(s) => format!(
                            "{} · {}",
                            fmt_ms(s.saving_ms),
                            s.severity.label().to_lowercase()
                        ),
                        None if label == "before" => "not found (new)".into(),
                        None => "not found (resolved)".into(),
                    },
                    mark: None,
                }
            };
            Group {
                label: x.code.to_string(),
                title: format!("{} {} ({})", x.code, x.title, x.status.label()),
                href: Some(format!("#finding-{i}")),
                bars: vec![
                    bar("before", "before", &x.before),
                    bar("after", "after", &x.after),
                ],
            }
        })
        .collect();
    bars::plot(
        "bars savings",
        "each finding's estimated saving per step, before and after",
        &groups,
    )
}

/// A finding's row.
#[derive(Serialize)]
struct FindingRow {
    anchor: String,
    status: &'static str,
    /// Sort key of the status (resolved first).
    rank: u8,
    code: &'static str,
    about: String,
    title: String,
    /// The measured facts: `[(side, message)]`, one per side that has the finding.
    messages: Vec<(&'static str, String)>,
    before: Option<SideCell>,
    after: Option<SideCell>,
    change_ms: f64,
    change: String,
}

/// A finding's saving and severity on one side.
#[derive(Serialize)]
struct SideCell {
    ms: f64,
    saving: String,
    severity: &'static str,
    sev: String,
}

fn cell(s: &Option<FindingSide>) -> Option<SideCell> {
    s.as_ref().map(|s| SideCell {
        ms: s.saving_ms,
        saving: saving_of(s),
        severity: s.severity.label(),
        sev: s.severity.label().to_lowercase(),
    })
}

fn findings(f: &[FindingChange]) -> Vec<FindingRow> {
    f.iter()
        .enumerate()
        .map(|(i, x)| {
            let ms = |s: &Option<FindingSide>| s.as_ref().map_or(0.0, |s| s.saving_ms);
            let change = ms(&x.after) - ms(&x.before);
            let mut messages = Vec::new();
            match (&x.before, &x.after) {
                (Some(b), Some(a)) if b.message != a.message => {
                    messages.push(("before", b.message.clone()));
                    messages.push(("after", a.message.clone()));
                }
                (_, Some(s)) | (Some(s), None) => messages.push(("", s.message.clone())),
                (None, None) => {}
            }
            FindingRow {
                anchor: format!("finding-{i}"),
                status: x.status.label(),
                rank: match x.status {
                    Status::Resolved => 0,
                    Status::New => 1,
                    Status::Changed => 2,
                    Status::Unchanged => 3,
                },
                code: x.code,
                about: rule_about(x.code),
                title: x.title.clone(),
                messages,
                before: cell(&x.before),
                after: cell(&x.after),
                change_ms: change,
                change: signed_ms(change),
            }
        })
        .collect()
}

/// A row of the kernel or op table.
#[derive(Serialize)]
struct NameRow {
    name: String,
    short: String,
    before_ms: f64,
    before: String,
    after_ms: f64,
    after: String,
    change_ms: f64,
    change: String,
    /// After / before; sorts as infinite when the name is new.
    ratio_v: String,
    ratio: String,
    count_before: f64,
    count_after: f64,
    counts: String,
}

fn names(v: &[NameChange], kernels: bool) -> Vec<NameRow> {
    v.iter()
        .map(|n| {
            let d = &n.ms_per_step;
            let k = &n.count_per_step;
            NameRow {
                name: n.name.clone(),
                short: if kernels {
                    short_kernel(&n.name)
                } else {
                    n.name.clone()
                },
                before_ms: d.before,
                before: fmt_ms(d.before),
                after_ms: d.after,
                after: fmt_ms(d.after),
                change_ms: d.change,
                change: signed_ms(d.change),
                ratio_v: d.ratio.map_or("Infinity".to_string(), |r| format!("{r}")),
                ratio: match d.ratio {
                    Some(r) if d.after == 0.0 && r == 0.0 => "gone".to_string(),
                    Some(r) => format!("{r:.2}×"),
                    None => "new".to_string(),
                },
                count_before: k.before,
                count_after: k.after,
                counts: format!("{} → {}", fmt_count(k.before), fmt_count(k.after)),
            }
        })
        .collect()
}
