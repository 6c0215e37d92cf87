//! HTML report: one self-contained page (styles and the few lines of script inline, no
//! font, image or script fetched) with the summary, a roofline plot, the timeline of
//! the median step, the findings with their evidence, estimate and fixes, the tensor
//! forest, and sortable kernel, op and step tables.
//!
//! Input: a [`Report`]. Output: HTML text. The page is a minijinja template
//! (`templates/report.html` over `templates/base.html`, built in with `include_str!`)
//! rendered with HTML auto-escaping on, so every string taken from a trace (op, kernel,
//! thread and tensor names, source lines, the manifest's command) is escaped by the
//! template engine. The two plots are SVG written here ([`roofline`], [`timeline`])
//! with every text passed through [`svg::esc`]; they are the only markup the template
//! takes unescaped. No data goes into a script: the script only sorts table rows that
//! are already on the page.
//! Rendering computes no metric: the numbers are the report's (the plots' points come
//! from [`crate::analysis::op_roofline`] and [`crate::analysis::step_view`]).
//!
//! Links: each finding's locations point (by anchor) at the op's and kernel's table
//! rows, the tensor's node in the forest and the source line's entry, and those point
//! back at the findings that name them.
//!
//! The page of `tensight diff --format html` ([`render_diff`], [`diff`]) is made the
//! same way: `templates/diff.html` extends the `templates/base.html` that
//! `report.html` extends (head, policy, stylesheet, header, footer, table sorter), and
//! its two bar charts are SVG from [`bars`].

mod bars;
mod diff;
mod ranks;
mod roofline;
mod svg;
mod tables;
mod timeline;

use super::Report;
use crate::rules::{fmt_bytes, fmt_ms, Finding};
use minijinja::{context, AutoEscape, Environment, Value};
use serde::Serialize;
use tables::Links;

/// The pages' templates: `base.html` holds what every page shares (the head, the
/// Content-Security-Policy, the stylesheet, the header, the footer and the table
/// sorter); `report.html` (one run) and `diff.html` (two runs compared, [`diff`]) extend
/// it.
const TEMPLATES: [(&str, &str); 3] = [
    ("base.html", include_str!("templates/base.html")),
    ("report.html", include_str!("templates/report.html")),
    ("diff.html", include_str!("templates/diff.html")),
];

/// Finding colours in the plots and the findings list, by the finding's rank.
const PALETTE: [&str; 8] = [
    "#d62728", "#ff7f0e", "#9467bd", "#2ca02c", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
];
/// Colour of a plotted op no finding names.
const NO_FINDING: &str = "#7f8c9a";

/// Render the report as one HTML page.
pub fn render(r: &Report) -> String {
    render_with(r, None)
}

/// Render a comparison of two runs (`tensight diff --format html`) as one page: the
/// step before and after, the findings resolved, new, changed and unchanged, and the
/// kernels and ops that changed most ([`diff`]).
pub fn render_diff(c: &crate::compare::Comparison) -> String {
    diff::render(c)
}

/// Render a multi-rank report: the focus rank's own page with a Ranks section (the
/// per-rank table, the straggler, the collectives' transfer/wait split and the
/// cross-rank findings) after the summary. Without per-rank reports (merged from
/// summaries) there is no page to put it on: a short page says so.
pub fn render_ranks(r: &super::RanksReport) -> String {
    match r.focus() {
        Some(focus) => render_with(focus, Some(r)),
        None => {
            failed("a report merged from summaries has no per-rank page: use --format text or json")
        }
    }
}

/// Render template `name` with `ctx`, HTML auto-escaping on for every template; a page
/// saying why when the template fails.
fn page(name: &str, ctx: Value) -> String {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    for (n, t) in TEMPLATES {
        if let Err(e) = env.add_template(n, t) {
            return failed(&e.to_string());
        }
    }
    match env.get_template(name).and_then(|t| t.render(ctx)) {
        Ok(s) => s,
        Err(e) => failed(&e.to_string()),
    }
}

fn render_with(r: &Report, ranks: Option<&super::RanksReport>) -> String {
    let links = Links::of(r);
    let ranks_view = ranks.map(|x| val(ranks::view(x, &links)));
    let shown_input = ranks.map_or(r.input.as_str(), |x| x.input.as_str());
    let ctx = context! {
        title => format!("tensight report: {}", crate::text::cut(shown_input, 120)),
        ranks => ranks_view,
        input => r.input.as_str(),
        version => env!("CARGO_PKG_VERSION"),
        header => val(header(r)),
        summary => val(summary(r)),
        primary => val(primary(r)),
        roofline => roofline_section(r, &links),
        timeline => timeline_section(r),
        findings => val(findings(r, &links)),
        kernels => val(&links.kernels),
        ops => val(&links.ops),
        sources => val(&links.sources),
        steps => val(tables::steps(r)),
        forest => val(&links.forest),
        notes => val(notes(r)),
    };
    page("report.html", ctx)
}

/// A page saying the template failed (a bug, never the input's fault).
fn failed(why: &str) -> String {
    format!(
        "<!doctype html><meta charset=\"utf-8\"><title>tensight report</title>\
         <p>the HTML report could not be rendered: {}</p>\n",
        svg::esc(why)
    )
}

/// A serialisable value for the template.
fn val<T: Serialize>(x: T) -> Value {
    Value::from(minijinja::value::Serde(x))
}

/// A label and its value (text).
#[derive(Serialize)]
struct Item {
    label: &'static str,
    value: String,
}

fn item(label: &'static str, value: String) -> Item {
    Item { label, value }
}

/// The page's head lines: input, device, program, versions.
fn header(r: &Report) -> Vec<Item> {
    let mut v = Vec::new();
    let m = &r.profile.meta;
    v.push(item(
        if r.profile.bundle.is_some() {
            "bundle"
        } else {
            "trace"
        },
        format!("{} ({} of JSON)", r.input, fmt_bytes(m.json_bytes as f64)),
    ));
    let dev = match &r.metrics.device {
        Some(d) if !d.name.is_empty() => format!(
            "{} · {} SMs · {}",
            d.name,
            d.num_sms,
            fmt_bytes(d.memory_bytes as f64)
        ),
        Some(_) => "unnamed GPU".into(),
        None if r.profile.has_gpu() => "GPU not described in the trace".into(),
        None => "none (CPU-only trace)".into(),
    };
    v.push(item("device", dev));
    if let Some(b) = &r.profile.bundle {
        if !b.command.is_empty() {
            let cmd: Vec<String> = b
                .command
                .iter()
                .map(|a| super::terminal::shell_word(a))
                .collect();
            v.push(item("program", cmd.join(" ")));
        }
        let error = b
            .program
            .error
            .as_deref()
            .and_then(|e| e.lines().rev().map(str::trim).find(|l| !l.is_empty()));
        let status = match (b.program.status.as_str(), error) {
            ("completed", _) => "completed".to_string(),
            (s, Some(e)) => format!("{s}: {e} (the report covers what was recorded)"),
            (s, None) => format!("{s} (the report covers what was recorded)"),
        };
        v.push(item("status", status));
        let mut parts = Vec::new();
        if let Some(t) = &b.torch_version {
            parts.push(format!("torch {t}"));
        }
        if let Some(c) = &b.cuda_version {
            parts.push(format!("CUDA {c}"));
        }
        if let Some(p) = &b.python_version {
            parts.push(format!("Python {p}"));
        }
        if !parts.is_empty() {
            v.push(item("using", parts.join(" · ")));
        }
    }
    v
}

/// The summary: step time, GPU busy and idle, steps and how they were found.
fn summary(r: &Report) -> Vec<Item> {
    let s = &r.metrics.summary;
    let n = s.steps.max(1) as f64;
    let mut v = Vec::new();
    let median = if s.steps > 1 {
        format!(
            " (mean of {}; median {})",
            s.steps,
            fmt_ms(s.step_time_median_ms)
        )
    } else {
        String::new()
    };
    v.push(item(
        "Step time",
        format!("{}{median}", fmt_ms(s.step_time_ms)),
    ));
    if r.profile.has_gpu() {
        v.push(item(
            "GPU busy",
            format!(
                "{:.1}% ({} per step)",
                s.gpu_busy_pct,
                fmt_ms(s.gpu_busy_ms_per_step)
            ),
        ));
        let i = &s.idle_ms_per_step;
        let causes: Vec<String> = [
            ("host not launching", i.cpu),
            ("after syncs", i.sync),
            ("host in memcpy", i.transfer),
            ("host in the DataLoader", i.data_loader),
        ]
        .iter()
        .filter(|c| c.1 > 0.0)
        .map(|(what, ms)| format!("{what} {}", fmt_ms(*ms)))
        .collect();
        let by = if causes.is_empty() {
            String::new()
        } else {
            format!(": {}", causes.join(", "))
        };
        v.push(item(
            "GPU idle",
            format!("{} per step{by}", fmt_ms(i.total)),
        ));
        v.push(item(
            "Kernels",
            format!(
                "{:.0} per step ({} in all, {} distinct)",
                s.kernels_per_step, s.kernels, r.metrics.kernels.distinct
            ),
        ));
        if s.h2d.count + s.d2h.count > 0 {
            v.push(item(
                "Transfers",
                format!(
                    "H2D {:.1}/step ({}/step, {} pageable) · D2H {:.1}/step ({}/step)",
                    s.h2d.count as f64 / n,
                    fmt_bytes(s.h2d.bytes as f64 / n),
                    s.h2d.pageable,
                    s.d2h.count as f64 / n,
                    fmt_bytes(s.d2h.bytes as f64 / n)
                ),
            ));
        }
        v.push(item(
            "Host syncs",
            format!("{:.1} per step", s.syncs as f64 / n),
        ));
    } else {
        v.push(item("GPU", "no GPU activity in this trace".into()));
        if let Some(holds) = super::host_only_holds(r) {
            v.push(item("Trace holds", holds));
        }
    }
    v.push(item(
        "Steps",
        format!("{} analysed: {}", s.steps, s.step_source),
    ));
    if let Some(b) = &r.profile.bundle {
        v.push(item("Step boundaries", super::step_boundaries(b)));
        if let Some((p, u, how)) = super::timing(r) {
            v.push(item(
                "Under the profiler",
                format!("step {} profiled, {} without ({how})", fmt_ms(p), fmt_ms(u)),
            ));
        }
    }
    v
}

/// The primary bottleneck and all fixes together.
#[derive(Serialize)]
struct Primary {
    href: String,
    code: &'static str,
    title: String,
    severity: &'static str,
    saving: String,
    all_fixes: Option<String>,
}

fn primary(r: &Report) -> Option<Primary> {
    let code = r.diagnosis.primary?;
    let (i, f) = r
        .diagnosis
        .findings
        .iter()
        .enumerate()
        .find(|(_, f)| f.code == code)?;
    let all_fixes = r.diagnosis.all_fixes.as_ref().map(|a| {
        format!(
            "All fixes together: {} per step ({:.1}%), replaying {} findings at once",
            fmt_ms(a.saving_ms),
            a.saving_pct,
            a.findings.len()
        )
    });
    Some(Primary {
        href: format!("#finding-{i}"),
        code: f.code,
        title: f.title.clone(),
        severity: f.severity.label(),
        saving: format!("{} per step ({:.1}%)", fmt_ms(f.saving_ms), f.saving_pct),
        all_fixes,
    })
}

/// The colour of finding `i`.
fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// A legend entry.
#[derive(Serialize)]
struct Legend {
    colour: &'static str,
    text: String,
    href: Option<String>,
}

/// The roofline section: the plot, its facts and legend, or why there is none.
fn roofline_section(r: &Report, links: &Links) -> Value {
    let Some(rf) = &r.metrics.roofline else {
        return context! { missing => super::no_roofline(r) };
    };
    let (dots, legend) = dots(r, links);
    let svg = roofline::plot(
        &dots,
        &roofs(r, rf),
        Some((rf.intensity_flop_per_byte, rf.achieved_tflops)),
    );
    context! {
        svg => Value::from_safe_string(svg),
        facts => val(roofline_facts(r, rf)),
        legend => val(legend),
        points => dots.len(),
    }
}

/// The roofline's dots, coloured by the finding that names each op, and their legend.
fn dots(r: &Report, links: &Links) -> (Vec<roofline::Dot>, Vec<Legend>) {
    let pts = &r.metrics.roofline_points;
    let total: i64 = pts.iter().map(|p| p.kernel_ns).sum::<i64>().max(1);
    let mut legend: Vec<Legend> = Vec::new();
    let dots: Vec<roofline::Dot> = pts
        .iter()
        .map(|p| {
            let by = links.finding_of_op(&p.name);
            let colour = by.map_or(NO_FINDING, colour);
            if let Some(i) = by {
                let f = &r.diagnosis.findings[i];
                if !legend.iter().any(|l| l.colour == colour) {
                    legend.push(Legend {
                        colour,
                        text: format!("{} {}", f.code, f.title),
                        href: Some(format!("#finding-{i}")),
                    });
                }
            }
            roofline::Dot {
                label: crate::text::cut(p.name.strip_prefix("aten::").unwrap_or(&p.name), 22),
                intensity: p.intensity(),
                tflops: p.tflops(),
                weight: p.kernel_ns as f64 / total as f64,
                colour,
                title: format!(
                    "{} ×{} ({}): {:.1} FLOP/byte, {:.2} TFLOP/s over {} of kernels",
                    p.name,
                    p.count,
                    p.dtype,
                    p.intensity(),
                    p.tflops(),
                    fmt_ms(p.kernel_ns as f64 / 1e6)
                ),
                href: links.op_href(&p.name),
            }
        })
        .collect();
    if dots.iter().any(|d| d.colour == NO_FINDING) {
        legend.push(Legend {
            colour: NO_FINDING,
            text: "named by no finding".into(),
            href: None,
        });
    }
    (dots, legend)
}

/// The roofline's side panel.
fn roofline_facts(r: &Report, rf: &crate::analysis::Roofline) -> Vec<Item> {
    vec![
        item("Bound", format!("{}-bound (modelled)", rf.bound)),
        item(
            "Intensity",
            format!(
                "{:.3} FLOP/byte; ridge {:.3}",
                rf.intensity_flop_per_byte, rf.ridge_flop_per_byte
            ),
        ),
        item(
            "Achieved",
            format!(
                "{:.2} TFLOP/s = {:.1}% of attainable ({:.2})",
                rf.achieved_tflops, rf.pct_of_attainable, rf.attainable_tflops
            ),
        ),
        item(
            "Ceilings",
            format!(
                "{:.0} TFLOP/s {}, {:.0} GB/s ({})",
                rf.peak_tflops,
                r.metrics.compute.dominant_dtype,
                rf.bandwidth_gbs,
                rf.ceilings_source
            ),
        ),
    ]
}

/// The roofs: the dominant precision's solid, the others (distinct peaks) dashed.
fn roofs(r: &Report, rf: &crate::analysis::Roofline) -> roofline::Roofs {
    let dtype = r.metrics.compute.dominant_dtype.clone();
    let mut others: Vec<(String, f64)> = Vec::new();
    if let Some(c) = r.metrics.device.as_ref().and_then(|d| d.ceilings.as_ref()) {
        let all = [
            ("fp32", Some(c.fp32_tflops)),
            ("tf32", Some(c.tf32_tflops)),
            ("bf16", Some(c.bf16_tflops)),
            ("fp16", Some(c.fp16_tflops)),
            ("fp8", c.fp8_tflops),
        ];
        for (name, peak) in all {
            let Some(p) = peak.filter(|p| *p > 0.0 && (p - rf.peak_tflops).abs() > 0.5) else {
                continue;
            };
            match others.iter_mut().find(|o| (o.1 - p).abs() < 0.5) {
                Some(o) => o.0 = format!("{}/{name}", o.0),
                None => others.push((name.to_string(), p)),
            }
        }
    }
    roofline::Roofs {
        bandwidth_gbs: rf.bandwidth_gbs,
        peak: (
            if dtype.is_empty() {
                "peak".into()
            } else {
                dtype
            },
            rf.peak_tflops,
        ),
        others,
        source: rf.ceilings_source.clone(),
    }
}

/// The timeline section: the plot of the median step and its legend.
fn timeline_section(r: &Report) -> Option<Value> {
    let v = r.metrics.step_view.as_ref()?;
    if !r.profile.has_gpu() {
        return None;
    }
    let legend: Vec<Value> = timeline::KINDS
        .iter()
        .filter(|k| {
            v.lanes
                .iter()
                .any(|l| l.spans.iter().any(|s| s.kind == **k))
        })
        .map(|&k| {
            let (class, text) = timeline::class(k);
            context! { class, text }
        })
        .collect();
    Some(context! {
        svg => Value::from_safe_string(timeline::plot(v)),
        name => v.name.as_str(),
        why => v.why.as_str(),
        dur => fmt_ms(v.dur_ns as f64 / 1e6),
        legend => legend,
    })
}

/// One finding on the page.
#[derive(Serialize)]
pub(super) struct FindingView {
    anchor: String,
    colour: &'static str,
    code: &'static str,
    rule: &'static str,
    /// The rule's documentation's first line (`tensight rules CODE` prints all of it).
    about: String,
    category: &'static str,
    title: String,
    severity: &'static str,
    sev: String,
    saving: String,
    marginal: Option<String>,
    message: String,
    evidence: Vec<(String, String)>,
    explanation: String,
    fixes: Vec<String>,
    estimate: String,
    locations: Vec<tables::LocationView>,
}

fn findings(r: &Report, links: &Links) -> Vec<FindingView> {
    finding_views(&r.diagnosis.findings, "finding", links)
}

/// Views of `list`, anchored `{prefix}-{i}`.
fn finding_views(list: &[Finding], prefix: &str, links: &Links) -> Vec<FindingView> {
    list.iter()
        .enumerate()
        .map(|(i, f): (usize, &Finding)| FindingView {
            anchor: format!("{prefix}-{i}"),
            colour: colour(i),
            code: f.code,
            rule: f.rule,
            about: rule_about(f.code),
            category: f.category.label(),
            title: f.title.clone(),
            severity: f.severity.label(),
            sev: f.severity.label().to_lowercase(),
            saving: format!(
                "saves ~{} per step ({:.1}%)",
                fmt_ms(f.saving_ms),
                f.saving_pct
            ),
            marginal: f
                .marginal_ms
                .filter(|m| (m - f.saving_ms).abs() > 0.05 * f.saving_ms)
                .map(|m| format!("once the findings above it are fixed: ~{}", fmt_ms(m))),
            message: f.message.clone(),
            evidence: f
                .evidence
                .iter()
                .map(|e| (e.label.clone(), e.value.clone()))
                .collect(),
            explanation: f.explanation.clone(),
            fixes: f.fixes.clone(),
            estimate: f.estimate.clone(),
            locations: f.locations.iter().map(|l| links.location(l)).collect(),
        })
        .collect()
}

/// The first paragraph of a rule's documentation (`tensight rules CODE` prints all of it).
fn rule_about(code: &str) -> String {
    let Some(meta) = crate::rules::find_meta(code) else {
        return String::new();
    };
    let para: Vec<&str> = meta
        .doc
        .lines()
        .map(str::trim)
        .skip_while(|l| l.starts_with('#') || l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    format!(
        "{} (`tensight rules {code}` says more)",
        crate::text::cut(&para.join(" "), 400)
    )
}

/// Warnings, lost events and skipped rules.
fn notes(r: &Report) -> Vec<String> {
    let mut v: Vec<String> = r.warnings.iter().map(|w| format!("warning: {w}")).collect();
    for c in &r.profile.counters.counters {
        if c.severity == crate::model::CounterSeverity::DataLoss {
            v.push(format!(
                "import: {} {} ({})",
                c.count, c.name, c.description
            ));
        }
    }
    let mut reasons: Vec<&str> = Vec::new();
    for s in &r.diagnosis.skipped {
        if !reasons.contains(&s.reason.as_str()) {
            reasons.push(&s.reason);
        }
    }
    for reason in reasons {
        let codes: Vec<&str> = r
            .diagnosis
            .skipped
            .iter()
            .filter(|s| s.reason == reason)
            .map(|s| s.code)
            .collect();
        v.push(format!("skipped rules ({reason}): {}", codes.join(", ")));
    }
    v
}
