//! Terminal report, in the seed's spirit: a header (input, and for a bundle the
//! program, how it ended, what was recorded, versions), executive summary, roofline, ranked
//! bottlenecks with evidence, explanation and fixes, the timeline, top kernels and ops,
//! then the top recommendations. Readable at 80 columns; ANSI colour only when
//! [`RenderOptions::color`] is set (the CLI decides: a TTY, `NO_COLOR` unset).

use super::{RenderOptions, Report};
use crate::model::{BundleDevice, BundleInfo};
use crate::rules::{fmt_bytes, fmt_ms, Category, Finding, Severity};
use owo_colors::OwoColorize;
use std::fmt::Write;

/// Render the report as text.
pub fn render(r: &Report, o: RenderOptions) -> String {
    let w = o.width.clamp(60, 120);
    let mut out = String::new();
    let t = Term { color: o.color, w };
    header(&mut out, r, &t);
    summary(&mut out, r, &t);
    roofline(&mut out, r, &t);
    bottlenecks(&mut out, r, &t);
    timeline(&mut out, r, &t);
    kernels(&mut out, r, &t);
    tensors(&mut out, r, &t);
    recommendations(&mut out, r, &t);
    import(&mut out, r, &t);
    fit(&out, t.w, t.color)
}

/// The last line of defence over the whole text: every line cut to the width (with `…`)
/// and any control character the renderer did not write itself escaped
/// ([`crate::text::terminal_safe`]). On a report built from cleaned names both are no-ops.
/// The CLI runs its own texts (`tensight rules`, the demo's closing lines) through it too.
pub fn fit(out: &str, w: usize, color: bool) -> String {
    let safe = crate::text::terminal_safe(out, color);
    if !color && safe.lines().all(|l| l.chars().count() <= w) {
        return safe.into_owned();
    }
    let mut fitted = String::with_capacity(safe.len());
    for line in safe.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        // Colour sequences take no columns: only plain text is measured and cut.
        if color || body.chars().count() <= w {
            fitted.push_str(body);
        } else {
            fitted.push_str(&crate::text::shown_to(body, w));
        }
        fitted.push_str(nl);
    }
    fitted
}

struct Term {
    color: bool,
    w: usize,
}

impl Term {
    fn bold(&self, s: &str) -> String {
        if self.color {
            s.bold().to_string()
        } else {
            s.to_string()
        }
    }
    fn dim(&self, s: &str) -> String {
        if self.color {
            s.dimmed().to_string()
        } else {
            s.to_string()
        }
    }
    fn sev(&self, sev: Severity, s: &str) -> String {
        if !self.color {
            return s.to_string();
        }
        match sev {
            Severity::Critical => s.red().bold().to_string(),
            Severity::Severe => s.bright_red().to_string(),
            Severity::Moderate => s.yellow().to_string(),
            Severity::Low => s.cyan().to_string(),
            Severity::Info => s.dimmed().to_string(),
        }
    }
    fn section(&self, out: &mut String, title: &str) {
        let _ = writeln!(out, "\n{}", self.bold(title));
        let _ = writeln!(out, "{}", "─".repeat(self.w));
    }
}

fn marker(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "●●●",
        Severity::Severe => "●● ",
        Severity::Moderate => "●  ",
        Severity::Low => "○  ",
        Severity::Info => "·  ",
    }
}

/// Word-wrap `text` to `width` columns, each line prefixed by `indent`; a line that
/// starts with a bullet (`• `) continues under the bullet's text.
fn wrap(text: &str, width: usize, indent: &str) -> String {
    wrap_hanging(text, width, indent, indent)
}

/// As [`wrap`], the first line of each paragraph prefixed by `first` and the lines that
/// continue it by `rest` (a label's value continuing under itself). A word longer than a
/// line (a path, a kernel name) is cut across lines; past two lines it is cut short with
/// an ellipsis.
pub fn wrap_hanging(text: &str, width: usize, first: &str, rest: &str) -> String {
    let mut out = String::new();
    for para in text.split('\n') {
        let hang = if para.starts_with("• ") { "  " } else { "" };
        let mut line = String::new();
        let mut on_first = true;
        let avail = |on_first: bool| {
            let (indent, lead) = if on_first {
                (first, 0)
            } else {
                (rest, hang.len())
            };
            width.saturating_sub(indent.chars().count() + lead).max(20)
        };
        let mut flush = |line: &mut String, on_first: &mut bool| {
            let (indent, pre) = if *on_first { (first, "") } else { (rest, hang) };
            let _ = writeln!(out, "{indent}{pre}{line}");
            line.clear();
            *on_first = false;
        };
        for word in para.split_whitespace() {
            // A word (a name, a path) takes at most two lines: longer ones are cut with
            // an ellipsis, so one hostile 10 MB name cannot fill the report.
            let cap = 2 * width.max(20);
            let mut word: Vec<char> = word.chars().take(cap + 1).collect();
            if word.len() > cap {
                word.truncate(cap - 1);
                word.push('…');
            }
            loop {
                let room = avail(on_first);
                let used = line.chars().count();
                if used > 0 && used + 1 + word.len() > room {
                    flush(&mut line, &mut on_first);
                    continue;
                }
                if used > 0 {
                    line.push(' ');
                }
                let fits = room.saturating_sub(line.chars().count()).max(1);
                if word.len() <= fits {
                    line.extend(word.iter());
                    break;
                }
                line.extend(word.drain(..fits));
                flush(&mut line, &mut on_first);
            }
        }
        flush(&mut line, &mut on_first);
    }
    out
}

/// Shorten long names (C++ kernel signatures) to `max` characters.
pub(crate) fn short(name: &str, max: usize) -> String {
    // Drop the argument list of a C++ signature first.
    let cleaned = name.replace("(anonymous namespace)::", "");
    let mut s = cleaned.as_str();
    if let Some(i) = s.find('(') {
        if i > 10 {
            s = &s[..i];
        }
    }
    let s = s.strip_prefix("void ").unwrap_or(s);
    cut(s, max)
}

fn header(out: &mut String, r: &Report, t: &Term) {
    let inner = t.w - 2;
    let title = "GPU PERFORMANCE DIAGNOSIS REPORT";
    let pad = inner.saturating_sub(title.len());
    let _ = writeln!(out, "╔{}╗", "═".repeat(inner));
    let _ = writeln!(
        out,
        "║{}{}{}║",
        " ".repeat(pad / 2),
        t.bold(title),
        " ".repeat(pad - pad / 2)
    );
    let _ = writeln!(out, "╚{}╝", "═".repeat(inner));
    let m = &r.profile.meta;
    let bundle = r.profile.bundle.as_ref();
    if bundle.is_some() {
        let _ = writeln!(
            out,
            "{} {} (trace: {} of JSON)",
            t.dim("bundle"),
            shown(&r.input),
            fmt_bytes(m.json_bytes as f64)
        );
    } else {
        let text = format!(
            "{} ({} of JSON)",
            shown(&r.input),
            fmt_bytes(m.json_bytes as f64)
        );
        labelled(out, t, "trace", &text);
    }
    if let Some(b) = bundle {
        bundle_lines(out, r, b, t);
    }
    let dev = match &r.metrics.device {
        Some(d) if !d.name.is_empty() => format!(
            "{} · {} SMs · {}",
            d.name,
            d.num_sms,
            fmt_bytes(d.memory_bytes as f64)
        ),
        Some(_) => "unnamed GPU".into(),
        None => match bundle.and_then(|b| b.device.as_ref()) {
            Some(d) => bundle_device(d),
            None if r.profile.has_gpu() => "GPU not described in the trace".into(),
            None => "none (CPU-only trace)".into(),
        },
    };
    labelled(out, t, "device", &dev);
    if let Some(b) = bundle {
        versions_line(out, b, t);
    }
    if let Some(d) = &m.distributed {
        if let (Some(rank), Some(ws)) = (d.rank, d.world_size) {
            let backend = d.backend.as_deref().unwrap_or("?");
            labelled(out, t, "dist", &format!("rank {rank} of {ws} ({backend})"));
        }
    }
    if let Some(d) = &r.profile.detail {
        let text = if d.steps_carried == 0 {
            format!(
                "{}: its ops did not align with any timed step's, so those have no stacks or shapes",
                d.step
            )
        } else {
            format!(
                "stacks, shapes and allocator events of {} carried to {} of {} timed steps ({:.0}% of ops aligned)",
                d.step, d.steps_carried, d.steps, d.ops_matched_pct
            )
        };
        labelled(out, t, "detail", &text);
    }
    let s = &r.metrics.summary;
    labelled(
        out,
        t,
        "steps",
        &format!("{} analysed: {}", s.steps, s.step_source),
    );
    if let Some(et) = &r.profile.execution_trace {
        let text = format!(
            "{} tensor arguments of {} ops linked from the execution trace ({} nodes)",
            et.tensor_count(),
            et.linked,
            et.nodes.len()
        );
        labelled(out, t, "tensor", &text);
    }
    let pass = r.profile.bundle.as_ref().and_then(|b| b.hardware.as_ref());
    match (&r.profile.hardware, pass) {
        // The manifest's record describes the bundle's own pass, not a CSV from `--ncu`.
        (Some(hw), _) => labelled(
            out,
            t,
            "ncu",
            &hardware_coverage(hw, pass.filter(|_| hw.from_bundle)),
        ),
        (None, Some(p)) if p.status != "recorded" => labelled(
            out,
            t,
            "ncu",
            &format!(
                "hardware pass {}: {}",
                p.status,
                p.reason.as_deref().unwrap_or("no reason recorded")
            ),
        ),
        _ => {}
    }
}

/// The header's `ncu` line: what the hardware pass profiled, what skipping repeated op
/// calls saved, and what got counters.
fn hardware_coverage(
    hw: &crate::model::hardware::Hardware,
    pass: Option<&crate::model::BundleHardware>,
) -> String {
    let a = &hw.alignment;
    let rows = hw.kernels.len();
    let mut text = String::new();
    if let Some(p) = pass {
        let wall = p
            .wall_s
            .map(|w| format!(" in {w:.0} s"))
            .unwrap_or_default();
        let _ = write!(text, "{rows} launches profiled{wall}");
        if let (Some(calls), Some(rep)) = (p.op_calls, p.op_repeats) {
            let saved = a.trace_kernels.saturating_sub(a.matched);
            let _ = write!(
                text,
                ", {rep} of {calls} op calls skipped as repeats of an earlier one"
            );
            if let (Some(w), true) = (p.wall_s, saved > 0 && rows > 0) {
                let per = w / rows as f64;
                let _ = write!(
                    text,
                    " ({saved} launch{} not profiled: up to ~{:.0} s saved at this pass's {per:.2} s per profiled launch, estimated)",
                    if saved == 1 { "" } else { "es" },
                    saved as f64 * per
                );
            }
        }
        text.push_str("; ");
    }
    let placed = match &a.step {
        Some(s) => format!(
            "{} of {rows} rows aligned with {s}'s {} kernels",
            a.matched, a.trace_kernels
        ),
        None => format!("{} of {rows} rows aligned with the trace", a.matched),
    };
    let shared = match (a.applied_by_signature, a.applied_other_shapes) {
        (0, _) => String::new(),
        (n, 0) => format!(" ({n} from a profiled launch of the same kernel on the same shapes)"),
        (n, o) => format!(
            " ({n} from a profiled launch of the same kernel, grid and block; {o} of them \
             on other shapes, an approximation)"
        ),
    };
    let _ = write!(
        text,
        "{placed}; {} of {} traced kernels have counters{shared}",
        a.with_counters, a.all_trace_kernels
    );
    if rows > 0 && a.matched * 2 < rows {
        text.push_str(
            ". Most rows match no kernel of this trace: was the CSV recorded from another program?",
        );
    }
    text
}

/// A summary line: `key` in an 18-column field, then `text` wrapped under itself.
fn keyed(key: &str, text: &str, width: usize) -> String {
    wrap_hanging(text, width, &format!("{key:<18}"), &" ".repeat(18))
}

/// A header line: a dim six-column label, then `text` wrapped under itself.
fn labelled(out: &mut String, t: &Term, label: &str, text: &str) {
    let body = wrap(text, t.w.saturating_sub(7), "");
    for (i, line) in body.lines().enumerate() {
        if i == 0 {
            let _ = writeln!(out, "{} {line}", t.dim(&format!("{label:<6}")));
        } else {
            let _ = writeln!(out, "       {line}");
        }
    }
}

/// The program, how it ended and what was recorded, from a bundle's manifest.
fn bundle_lines(out: &mut String, r: &Report, b: &BundleInfo, t: &Term) {
    if !b.command.is_empty() {
        let cmd: Vec<String> = b.command.iter().map(|a| shell_word(a)).collect();
        let cmd = cmd.join(" ");
        labelled(out, t, "run", &cut(&cmd, 3 * t.w));
    }
    let partial = " — the report covers what was recorded";
    let status = match b.program.status.as_str() {
        "crashed" => match &b.program.error {
            Some(e) => format!("crashed: {}{partial}", cut(last_line(e), 300)),
            None => format!("crashed{partial}"),
        },
        "running" => format!("did not finish (killed?){partial}"),
        "completed" => match b.program.exit_code {
            Some(c) if c != 0 => format!("completed, exit code {c}"),
            _ => "completed".into(),
        },
        other => format!("{other}{partial}"),
    };
    let status = if t.color && b.program.status != "completed" {
        status.yellow().to_string()
    } else {
        status
    };
    labelled(out, t, "status", &status);
    if b.step_detection.as_deref() == Some("whole_program") {
        let asked = b
            .steps_requested
            .map(|n| format!(" ({n} steps requested)"))
            .unwrap_or_default();
        labelled(
            out,
            t,
            "record",
            &format!("the whole program as one window: no optimizer.step() or module forward calls found{asked}"),
        );
        timing_line(out, r, t);
        return;
    }
    let found = super::step_boundaries(b);
    let recorded = match (b.steps_recorded, b.steps_requested) {
        (Some(n), Some(req)) => format!("{n} of {req} requested steps"),
        (Some(n), None) => format!("{n} steps"),
        (None, Some(req)) => format!("? of {req} requested steps"),
        (None, None) => "steps".to_string(),
    };
    let warm = b
        .warmup_steps
        .map(|w| format!(" after {w} warm-up"))
        .unwrap_or_default();
    labelled(
        out,
        t,
        "record",
        &format!("{recorded}{warm}; step boundaries: {found}"),
    );
    timing_line(out, r, t);
}

/// Step time with and without the profiler ([`super::timing`]).
fn timing_line(out: &mut String, r: &Report, t: &Term) {
    if let Some((p, u, how)) = super::timing(r) {
        let ratio = if u > 0.0 {
            format!(": {:.2}×", p / u)
        } else {
            String::new()
        };
        labelled(
            out,
            t,
            "timing",
            &format!(
                "step {} under the profiler, {} without ({how}{ratio})",
                fmt_ms(p),
                fmt_ms(u)
            ),
        );
    }
}

/// torch, CUDA, Python and tensight versions from a bundle's manifest.
fn versions_line(out: &mut String, b: &BundleInfo, t: &Term) {
    let mut parts = Vec::new();
    if let Some(v) = &b.torch_version {
        parts.push(format!("torch {v}"));
    }
    parts.push(match &b.cuda_version {
        Some(v) => format!("CUDA {v}"),
        None => "no CUDA".to_string(),
    });
    if let Some(v) = &b.python_version {
        parts.push(format!("Python {v}"));
    }
    if let Some(v) = &b.tensight_version {
        parts.push(format!("tensight {v}"));
    }
    labelled(out, t, "using", &parts.join(" · "));
}

fn bundle_device(d: &BundleDevice) -> String {
    let mut s = if d.name.is_empty() {
        "unnamed GPU".to_string()
    } else {
        d.name.clone()
    };
    if let Some(n) = d.multi_processor_count {
        let _ = write!(s, " · {n} SMs");
    }
    if let Some(b) = d.total_memory_bytes {
        let _ = write!(s, " · {}", fmt_bytes(b as f64));
    }
    if let Some([ma, mi]) = d.capability {
        let _ = write!(s, " · sm_{ma}{mi}");
    }
    s
}

/// The last non-empty line (a traceback ends with the exception).
fn last_line(s: &str) -> &str {
    s.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

use crate::text::cut;
pub use crate::text::shown;

/// An argument as a POSIX shell would need it written.
pub fn shell_word(a: &str) -> String {
    let plain = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

fn summary(out: &mut String, r: &Report, t: &Term) {
    t.section(out, "EXECUTIVE SUMMARY");
    let s = &r.metrics.summary;
    let primary = r
        .diagnosis
        .primary
        .and_then(|c| r.diagnosis.findings.iter().find(|f| f.code == c));
    match primary {
        Some(f) => {
            let head = wrap(&format!("Primary bottleneck: {}", f.title), t.w, "");
            let _ = write!(
                out,
                "{}",
                if t.color {
                    head.replacen(&f.title, &t.bold(&f.title), 1)
                } else {
                    head
                }
            );
            let _ = writeln!(
                out,
                "Severity: {}   Category: {}   Code: {}",
                t.sev(f.severity, f.severity.label()),
                f.category.label(),
                f.code
            );
            let step = if r.diagnosis.unprofiled.is_some() {
                "unprofiled step"
            } else {
                "step"
            };
            let _ = writeln!(
                out,
                "Estimated saving: {} per step ({:.1}% of the {step})",
                fmt_ms(f.saving_ms),
                f.saving_pct
            );
            if let Some(u) = &r.diagnosis.unprofiled {
                let how = match &r.diagnosis.deflation {
                    Some(d) => format!(
                        "findings the model replays are replayed without its cost ({:.1} µs per recorded event), the others scaled by {:.2}",
                        d.per_event_ns / 1e3,
                        u.scale
                    ),
                    None => format!("so each is scaled by {:.2}", u.scale),
                };
                let against = match &r.diagnosis.deflation {
                    Some(d) if d.source == "calibration" => {
                        format!("replayed without {}", d.provenance())
                    }
                    _ => "in the warm-up without it".to_string(),
                };
                let note = format!(
                    "Savings are in unprofiled time: the profiler slowed the step {:.2}× \
                     ({} against {} {against}); {how}.",
                    1.0 / u.scale,
                    fmt_ms(u.profiled_step_ms),
                    fmt_ms(u.unprofiled_step_ms),
                );
                let _ = write!(out, "{}", t.dim(&wrap(&note, t.w, "")));
            }
            if let Some(a) = &r.diagnosis.all_fixes {
                let left = if a.not_simulated > 0 {
                    format!(
                        "; {} more finding{} not replayed",
                        a.not_simulated,
                        if a.not_simulated == 1 { "" } else { "s" }
                    )
                } else {
                    String::new()
                };
                let mut codes: Vec<&str> = Vec::new();
                for c in &a.findings {
                    if !codes.contains(c) {
                        codes.push(c);
                    }
                }
                let text = format!(
                    "All fixes together: {} per step ({:.1}%), replaying {} findings ({}) at once{left}",
                    fmt_ms(a.saving_ms),
                    a.saving_pct,
                    a.findings.len(),
                    codes.join(", ")
                );
                out.push_str(&wrap(&text, t.w, ""));
            }
        }
        None => {
            let _ = writeln!(
                out,
                "Primary bottleneck: none found by the rules that could run"
            );
        }
    }
    let _ = writeln!(out);
    let n_note = if s.steps > 1 {
        format!(
            " (mean of {}; median {})",
            s.steps,
            fmt_ms(s.step_time_median_ms)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "Step time:        {}{}",
        fmt_ms(s.step_time_ms),
        n_note
    );
    if r.profile.has_gpu() {
        let _ = writeln!(out, "GPU utilization:  {:.1}% busy", s.gpu_busy_pct);
        let _ = writeln!(
            out,
            "GPU busy:         {} per step",
            fmt_ms(s.gpu_busy_ms_per_step)
        );
        let i = &s.idle_ms_per_step;
        let _ = writeln!(out, "GPU idle:         {} per step", fmt_ms(i.total));
        let parts = [
            ("host not launching", i.cpu),
            ("after syncs", i.sync),
            ("in transfers", i.transfer),
            ("loading data", i.data_loader),
        ];
        for (label, v) in parts {
            if v > 0.0 {
                let _ = writeln!(out, "  └─ {label:<19} {}", fmt_ms(v));
            }
            if label == "host not launching" && v > 0.0 {
                for h in r
                    .metrics
                    .held_back
                    .iter()
                    .filter(|h| h.ms_per_step >= 0.01 * v)
                {
                    let line = format!("held back by {} ({})", h.what, fmt_ms(h.ms_per_step));
                    out.push_str(&wrap(&cut(&line, 2 * t.w), t.w, "       "));
                }
            }
        }
        let _ = writeln!(
            out,
            "Kernels:          {:.0} per step, median {:.1} µs, {:.0}% under 10 µs",
            s.kernels_per_step,
            r.metrics.kernels.median_ns as f64 / 1e3,
            r.metrics.kernels.under_10us_pct
        );
        let n = s.steps.max(1) as f64;
        if s.h2d.count + s.d2h.count > 0 {
            let text = format!(
                "H2D {:.1}/step ({}/step, {} pageable) · D2H {:.1}/step ({}/step)",
                s.h2d.count as f64 / n,
                fmt_bytes(s.h2d.bytes as f64 / n),
                s.h2d.pageable,
                s.d2h.count as f64 / n,
                fmt_bytes(s.d2h.bytes as f64 / n)
            );
            out.push_str(&keyed("Transfers:", &text, t.w));
        }
        let outside = r.metrics.timeline.syncs_outside.len();
        let _ = writeln!(
            out,
            "Host syncs:       {:.1} per step{}",
            s.syncs as f64 / n,
            if outside > 0 {
                format!(" · {outside} outside the steps (not per step)")
            } else {
                String::new()
            }
        );
    } else {
        let _ = writeln!(
            out,
            "GPU:              no GPU activity in this trace; GPU rules skipped"
        );
        if let Some(holds) = super::host_only_holds(r) {
            out.push_str(&keyed("Trace holds:", &holds, t.w));
        }
    }
}

fn roofline(out: &mut String, r: &Report, t: &Term) {
    let Some(rf) = &r.metrics.roofline else {
        if r.profile.has_gpu() {
            t.section(out, "ROOFLINE ANALYSIS");
            let why = super::no_roofline(r);
            let _ = writeln!(out, "Not available: {why}.");
        }
        return;
    };
    t.section(out, "ROOFLINE ANALYSIS");
    let _ = writeln!(out, "Bottleneck type: {}-BOUND", rf.bound.to_uppercase());
    let _ = writeln!(
        out,
        "  └─ Arithmetic intensity: {:.3} FLOP/byte (modelled)",
        rf.intensity_flop_per_byte
    );
    let _ = writeln!(
        out,
        "  └─ Ridge point:          {:.3} FLOP/byte",
        rf.ridge_flop_per_byte
    );
    let _ = writeln!(
        out,
        "  └─ Achieved:             {:.2} TFLOP/s = {:.1}% of attainable ({:.2})",
        rf.achieved_tflops, rf.pct_of_attainable, rf.attainable_tflops
    );
    let text = format!(
        "{:.0} TFLOP/s {}, {:.0} GB/s ({})",
        rf.peak_tflops, r.metrics.compute.dominant_dtype, rf.bandwidth_gbs, rf.ceilings_source
    );
    out.push_str(&wrap_hanging(
        &text,
        t.w,
        "  └─ Ceilings:             ",
        &" ".repeat(26),
    ));
}

fn bottlenecks(out: &mut String, r: &Report, t: &Term) {
    t.section(out, "DETECTED BOTTLENECKS");
    let list: Vec<&Finding> = r
        .diagnosis
        .findings
        .iter()
        .filter(|f| f.category != Category::Roofline)
        .collect();
    if list.is_empty() {
        let _ = writeln!(out, "No bottleneck found by the rules that could run.");
    }
    for (i, f) in list.iter().enumerate() {
        finding(out, i, f, None, t);
    }
}

/// One finding of the DETECTED BOTTLENECKS list (numbered `i + 1`); `rank` says whose
/// it is in a multi-rank report.
fn finding(out: &mut String, i: usize, f: &Finding, rank: Option<u32>, t: &Term) {
    {
        let _ = writeln!(out);
        let head = wrap(
            &format!(
                "{}. {} {} [{}]",
                i + 1,
                marker(f.severity),
                f.title,
                f.severity.label()
            ),
            t.w,
            "",
        );
        let head = if t.color {
            head.replacen(
                marker(f.severity),
                &t.sev(f.severity, marker(f.severity)),
                1,
            )
            .replacen(&f.title, &t.bold(&f.title), 1)
        } else {
            head
        };
        out.push_str(&head);
        let whose = rank.map(|r| format!("rank {r} · ")).unwrap_or_default();
        let line = format!(
            "{whose}{} {} · {} · saves ~{} per step ({:.1}%)",
            f.code,
            f.rule,
            f.category.label(),
            fmt_ms(f.saving_ms),
            f.saving_pct
        );
        out.push_str(&wrap(&line, t.w, "   "));
        if let Some(m) = f
            .marginal_ms
            .filter(|m| (m - f.saving_ms).abs() > 0.05 * f.saving_ms)
        {
            let why = if m < f.saving_ms {
                "they explain some of the same time"
            } else {
                "what held the step back before is gone then"
            };
            out.push_str(&wrap(
                &format!(
                    "Once the findings above it are fixed: saves ~{} per step ({why})",
                    fmt_ms(m)
                ),
                t.w,
                "   ",
            ));
        }
        out.push_str(&wrap(&f.message, t.w, "   "));
        let _ = writeln!(out, "   Evidence:");
        for e in &f.evidence {
            out.push_str(&wrap(&format!("• {}: {}", e.label, e.value), t.w, "     "));
        }
        let _ = writeln!(out, "   Explanation:");
        out.push_str(&wrap(&f.explanation, t.w, "     "));
        if !f.locations.is_empty() {
            let _ = writeln!(out, "   Where:");
            for l in f.locations.iter().take(5) {
                let mut parts = Vec::new();
                if let Some(s) = &l.source {
                    parts.push(s.clone());
                }
                if let Some(op) = &l.op {
                    parts.push(format!("op {op}"));
                }
                if let Some(k) = &l.kernel {
                    parts.push(format!("kernel {}", short(k, 60)));
                }
                if let Some(x) = &l.tensor {
                    parts.push(format!("tensor {x}"));
                }
                out.push_str(&wrap(&format!("• {}", parts.join(" · ")), t.w, "     "));
            }
        }
        let estimate = wrap_hanging(&format!("Estimate: {}", f.estimate), t.w, "   ", "     ");
        out.push_str(&t.dim(&estimate));
    }
}

fn timeline(out: &mut String, r: &Report, t: &Term) {
    let steps = &r.metrics.timeline.steps;
    if steps.is_empty() || !r.profile.has_gpu() {
        return;
    }
    t.section(out, "STEPS");
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>7} {:>8} {:>10} {:>10} {:>10}",
        "step", "wall", "busy", "kernels", "idle cpu", "idle sync", "H2D"
    );
    let ms = |ns: i64| fmt_ms(ns as f64 / 1e6);
    for s in steps.iter().take(12) {
        let busy = if s.dur_ns > 0 {
            100.0 * s.gpu_busy_ns as f64 / s.dur_ns as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "{:<16} {:>10} {:>6.1}% {:>8} {:>10} {:>10} {:>10}",
            short(&s.name, 16),
            ms(s.dur_ns),
            busy,
            s.kernels,
            ms(s.idle.cpu_ns),
            ms(s.idle.sync_ns),
            fmt_bytes(s.h2d.bytes as f64)
        );
    }
    if steps.len() > 12 {
        let _ = writeln!(out, "… {} more steps (see --format json)", steps.len() - 12);
    }
}

fn kernels(out: &mut String, r: &Report, t: &Term) {
    let k = &r.metrics.kernels;
    if k.count == 0 {
        host_ops(out, r, t);
        return;
    }
    t.section(out, "TOP KERNELS");
    let name_w = t.w.saturating_sub(28);
    for kt in k.top.iter().take(8) {
        let _ = writeln!(
            out,
            "{:>5.1}% {:>10} {:>6}× {}",
            kt.pct,
            fmt_ms(kt.total_ns as f64 / 1e6),
            kt.count,
            short(&kt.name, name_w)
        );
    }
    let ops = &r.metrics.top_ops_gpu;
    if !ops.is_empty() {
        t.section(out, "TOP OPS BY GPU TIME");
        for o in ops.iter().take(8) {
            let _ = writeln!(
                out,
                "{:>10} gpu {:>10} cpu {:>6}× {}",
                fmt_ms(o.gpu_ns as f64 / 1e6),
                fmt_ms(o.cpu_ns as f64 / 1e6),
                o.count,
                short(&o.name, t.w.saturating_sub(40))
            );
        }
    }
    let hist: Vec<String> = k
        .histogram
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| format!("{} {}", b.label, b.count))
        .collect();
    out.push('\n');
    out.push_str(&keyed("Kernel durations:", &hist.join(" · "), t.w));
}

/// A trace without GPU activity: its outermost ops by host time.
fn host_ops(out: &mut String, r: &Report, t: &Term) {
    let ops = &r.metrics.top_ops_cpu;
    if ops.is_empty() || r.profile.has_gpu() {
        return;
    }
    t.section(out, "TOP OPS BY HOST TIME");
    let n = r.metrics.summary.steps.max(1) as f64;
    for o in ops.iter().take(8) {
        let _ = writeln!(
            out,
            "{:>10} {:>6}× per step  {}",
            fmt_ms(o.cpu_ns as f64 / 1e6 / n),
            super::fmt_count(o.count as f64 / n),
            short(&o.name, t.w.saturating_sub(28))
        );
    }
}

/// A tree's excess traffic worth listing under "By wasted traffic", as a share of its traffic.
const WASTE_SHARE: f64 = 0.05;

/// Base tensors by modelled traffic and by wasted traffic, with their view trees.
fn tensors(out: &mut String, r: &Report, t: &Term) {
    let Some(f) = &r.metrics.tensors else {
        return;
    };
    t.section(out, "TENSORS");
    let a = &f.attribution;
    let how = if a.measured_kernels > 0 {
        format!(
            " Measured by the hardware pass for {} of {} kernels: {} of global sectors, {} \
             beyond the ideal for their access width; each tensor's share follows the model. \
             `measured` lines give a tensor's access efficiency (ideal / measured sectors) \
             and the share of its kernels' warp cycles spent waiting on global memory.",
            a.measured_kernels,
            a.kernels,
            fmt_bytes(a.measured_bytes),
            fmt_bytes(a.measured_excess_bytes)
        )
    } else {
        " No hardware pass: bytes are modelled, not measured (`tensight run --hardware` \
         measures them)."
            .to_string()
    };
    out.push_str(&wrap(
        &format!(
            "{} tensors ({} base, {} views) in the execution trace. Over {}: {} moved by {} \
             ops as modelled from shapes and strides, {} of it excess sectors of \
             non-contiguous access; {} of kernel time split by bytes.{how}",
            f.nodes.len(),
            f.roots.len(),
            f.views(),
            a.window,
            fmt_bytes(a.bytes as f64),
            a.ops,
            fmt_bytes(a.wasted_bytes as f64),
            fmt_ms(a.attributed_ns as f64 / 1e6)
        ),
        t.w,
        "",
    ));
    let opts = super::forest::TreeOptions {
        width: t.w,
        with_traffic_only: true,
        max_children: 4,
    };
    let by_traffic = f.top_roots(|x| x.bytes, 3);
    // Waste worth a look: at least WASTE_SHARE of the tree's traffic and 1 MiB; a few
    // sectors of partial use at the edges of contiguous tensors are not a lead.
    let worth = |root: &u32| {
        let sub = &f.nodes[*root as usize].subtree;
        let moved = if sub.measured_accesses > 0 {
            sub.measured_bytes
        } else {
            sub.bytes as f64
        };
        sub.excess_bytes() >= (WASTE_SHARE * moved).max(1024.0 * 1024.0)
    };
    let any_waste = f.top_roots(|x| x.excess_bytes() as u64, 1);
    let by_waste: Vec<u32> = f
        .top_roots(|x| x.excess_bytes() as u64, 64)
        .into_iter()
        .filter(worth)
        .take(3)
        .collect();
    for (title, list) in [
        ("By traffic", &by_traffic),
        ("By wasted traffic", &by_waste),
    ] {
        if list.is_empty() {
            if title == "By wasted traffic" {
                if let Some(&top) = any_waste.first() {
                    let sub = &f.nodes[top as usize].subtree;
                    let _ = writeln!(
                        out,
                        "\n{}: none over {:.0}% of a tree's traffic (the most: {} in #{}'s tree)",
                        t.bold(title),
                        WASTE_SHARE * 100.0,
                        fmt_bytes(sub.excess_bytes()),
                        f.nodes[top as usize].tensor_id
                    );
                }
            }
            continue;
        }
        let _ = writeln!(out, "\n{}:", t.bold(title));
        for &root in list.iter() {
            let sub = &f.nodes[root as usize].subtree;
            let moved = if sub.measured_accesses > 0 {
                format!(
                    "{} measured through the tree ({} excess)",
                    fmt_bytes(sub.measured_bytes),
                    fmt_bytes(sub.measured_excess_bytes)
                )
            } else {
                format!(
                    "{} through the tree ({} wasted)",
                    fmt_bytes(sub.bytes as f64),
                    fmt_bytes(sub.wasted_bytes as f64)
                )
            };
            let _ = writeln!(
                out,
                "{}",
                t.dim(&format!("{moved}, {}", fmt_ms(sub.time_ns / 1e6)))
            );
            super::forest::tree(out, f, root, opts);
        }
    }
    if by_traffic.is_empty() {
        let _ = writeln!(
            out,
            "No GPU work of the execution trace's ops to attribute."
        );
    }
    let _ = writeln!(
        out,
        "{}",
        t.dim("`tensight analyze PATH --forest` prints every tree (`--forest=dot`: Graphviz).")
    );
}

fn recommendations(out: &mut String, r: &Report, t: &Term) {
    let urgent: Vec<&Finding> = r
        .diagnosis
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Moderate && !f.fixes.is_empty())
        .take(5)
        .collect();
    let rest: Vec<&Finding> = r
        .diagnosis
        .findings
        .iter()
        .filter(|f| f.severity < Severity::Moderate && !f.fixes.is_empty())
        .take(3)
        .collect();
    if urgent.is_empty() && rest.is_empty() {
        return;
    }
    t.section(out, "TOP RECOMMENDATIONS");
    for (label, list) in [("Immediate actions", &urgent), ("Also worth doing", &rest)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{label}:");
        for f in list.iter() {
            let head = format!(
                "For {} ({}, ~{}/step):",
                f.title,
                f.code,
                fmt_ms(f.saving_ms)
            );
            out.push('\n');
            out.push_str(&wrap_hanging(&head, t.w, "  ", "    "));
            for fix in &f.fixes {
                out.push_str(&wrap(&format!("• {fix}"), t.w, "    "));
            }
        }
        let _ = writeln!(out);
    }
}

fn import(out: &mut String, r: &Report, t: &Term) {
    let loss: Vec<_> = r
        .profile
        .counters
        .counters
        .iter()
        .filter(|c| c.severity == crate::model::CounterSeverity::DataLoss)
        .collect();
    let skipped = &r.diagnosis.skipped;
    if r.warnings.is_empty() && loss.is_empty() && skipped.is_empty() {
        return;
    }
    t.section(out, "NOTES");
    for w in &r.warnings {
        out.push_str(&wrap(&format!("warning: {w}"), t.w, ""));
    }
    for c in loss {
        out.push_str(&wrap(
            &format!("import: {} {} ({})", c.count, c.name, c.description),
            t.w,
            "",
        ));
    }
    let mut reasons: Vec<&str> = Vec::new();
    for s in skipped {
        if !reasons.contains(&s.reason.as_str()) {
            reasons.push(&s.reason);
        }
    }
    for reason in reasons {
        let codes: Vec<&str> = skipped
            .iter()
            .filter(|s| s.reason == reason)
            .map(|s| s.code)
            .collect();
        out.push_str(&wrap(
            &format!("skipped rules ({reason}): {}", codes.join(", ")),
            t.w,
            "",
        ));
    }
}

/// Rows of the RANKS table shown before "… more" (the slowest first past this).
const RANK_ROWS: usize = 16;

/// Render a multi-rank report as text: a header, the RANKS section (per-rank step
/// time, GPU busy, communication, exposed communication, waiting, own work; the
/// straggler and the collectives' transfer/wait split), then the cross-rank findings
/// ranked together with the slowest rank's own findings (the straggler sets the job's
/// pace, so its findings are the ones that shorten the job), then warnings.
pub fn render_ranks(r: &super::RanksReport, o: RenderOptions) -> String {
    let w = o.width.clamp(60, 120);
    let t = Term { color: o.color, w };
    let mut out = String::new();
    let a = &r.analysis;
    let inner = t.w - 2;
    let title = "GPU PERFORMANCE DIAGNOSIS REPORT · RANKS";
    let pad = inner.saturating_sub(title.chars().count());
    let _ = writeln!(out, "╔{}╗", "═".repeat(inner));
    let _ = writeln!(
        out,
        "║{}{}{}║",
        " ".repeat(pad / 2),
        t.bold(title),
        " ".repeat(pad - pad / 2)
    );
    let _ = writeln!(out, "╚{}╝", "═".repeat(inner));
    labelled(&mut out, &t, "input ", &shown(&r.input));
    labelled(
        &mut out,
        &t,
        "ranks ",
        &format!("{} read of world size {}", a.ranks.len(), a.world_size),
    );
    labelled(
        &mut out,
        &t,
        "steps ",
        &format!(
            "{} compared; job step {} (the slowest rank's, mean)",
            a.steps,
            fmt_ms(a.job_step_ms)
        ),
    );
    ranks_table(&mut out, r, &t);
    ranks_findings(&mut out, r, &t);
    if !r.warnings.is_empty() {
        t.section(&mut out, "WARNINGS");
        for wn in &r.warnings {
            out.push_str(&wrap(&format!("• {wn}"), t.w, ""));
        }
    }
    fit(&out, t.w, t.color)
}

fn ranks_table(out: &mut String, r: &super::RanksReport, t: &Term) {
    let a = &r.analysis;
    t.section(out, "RANKS");
    let _ = writeln!(
        out,
        "{:>5} {:>10} {:>6} {:>6} {:>10} {:>10} {:>10}",
        "rank", "step", "busy", "comm", "exposed", "waiting", "own work"
    );
    let mut rows: Vec<&crate::analysis::ranks::RankRow> = a.ranks.iter().collect();
    if rows.len() > RANK_ROWS {
        rows.sort_by(|x, y| y.own_ms.total_cmp(&x.own_ms).then(x.rank.cmp(&y.rank)));
    }
    for row in rows.iter().take(RANK_ROWS) {
        let mark = if row.rank == a.slowest_rank {
            " ◀"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:>5} {:>10} {:>5.0}% {:>5.0}% {:>10} {:>10} {:>10}{mark}",
            row.rank,
            fmt_ms(row.step_ms),
            row.busy_pct,
            row.comm_pct,
            fmt_ms(row.exposed_comm_ms),
            fmt_ms(row.wait_ms),
            fmt_ms(row.own_ms)
        );
    }
    if rows.len() > RANK_ROWS {
        let _ = writeln!(
            out,
            "  … {} more ranks (the slowest shown; all in --format json)",
            rows.len() - RANK_ROWS
        );
    }
    let _ = writeln!(
        out,
        "{}",
        t.dim("per step; waiting: communication beyond the fastest rank's instance")
    );
    let mut line = format!(
        "Slowest rank: {} ({} of own work per step; median rank {})",
        a.slowest_rank,
        fmt_ms(
            a.ranks
                .iter()
                .find(|x| x.rank == a.slowest_rank)
                .map_or(0.0, |x| x.own_ms)
        ),
        fmt_ms(a.median_own_ms)
    );
    if let Some(e) = a.slowest_excess.first() {
        line += &format!(
            "; most of the difference: {} {} vs {}",
            e.label,
            fmt_ms(e.rank_ms),
            fmt_ms(e.others_ms)
        );
    }
    if let Some(f) = &a.slowest_frame {
        line += &format!(
            "; in the program's own code: {} {} vs {}",
            f.name,
            fmt_ms(f.rank_ms),
            fmt_ms(f.others_ms)
        );
    }
    out.push_str(&wrap(&line, t.w, ""));
    let c = &a.collectives;
    out.push_str(&wrap(
        &format!(
            "Collectives: {} instances matched on every rank; per step over all ranks {} \
             = {} transfer + {} waiting",
            c.matched,
            fmt_ms(c.total_ms),
            fmt_ms(c.transfer_ms),
            fmt_ms(c.wait_ms)
        ),
        t.w,
        "",
    ));
    for k in &c.top {
        out.push_str(&wrap(
            &format!(
                "• {}, {:.1}× per step: {} transfer, {} waiting",
                k.label(),
                k.per_step,
                fmt_ms(k.transfer_ms),
                fmt_ms(k.wait_ms)
            ),
            t.w,
            "  ",
        ));
    }
}

fn ranks_findings(out: &mut String, r: &super::RanksReport, t: &Term) {
    let focus = r.focus();
    let title = match focus {
        Some(_) => format!(
            "DETECTED BOTTLENECKS (cross-rank, and rank {}'s own)",
            r.focus_rank
        ),
        None => "DETECTED BOTTLENECKS (cross-rank)".to_string(),
    };
    t.section(out, &title);
    let mut list: Vec<(&Finding, Option<u32>)> =
        r.diagnosis.findings.iter().map(|f| (f, None)).collect();
    if let Some(f) = focus {
        list.extend(
            f.diagnosis
                .findings
                .iter()
                .filter(|x| x.category != Category::Roofline)
                .map(|x| (x, Some(r.focus_rank))),
        );
    }
    list.sort_by(|x, y| {
        y.0.saving_ms
            .total_cmp(&x.0.saving_ms)
            .then(x.1.cmp(&y.1))
            .then(x.0.code.cmp(y.0.code))
    });
    if list.is_empty() {
        let _ = writeln!(out, "No bottleneck found.");
    }
    for (i, (f, rank)) in list.iter().enumerate() {
        finding(out, i, f, *rank, t);
    }
    if let Some(ms) = r.diagnosis.all_fixes_ms {
        let _ = writeln!(out);
        out.push_str(&wrap(
            &format!(
                "All cross-rank fixes together: {} per job step (replayed at once on the \
                 job's step model)",
                fmt_ms(ms)
            ),
            t.w,
            "",
        ));
    }
    if focus.is_none() {
        for row in &r.analysis.ranks {
            if let Some(c) = row.top_causes.first() {
                out.push_str(&wrap(
                    &format!(
                        "• rank {}'s own top finding: {} {} ({} per step)",
                        row.rank,
                        c.code,
                        c.title,
                        fmt_ms(c.saving_ms)
                    ),
                    t.w,
                    "",
                ));
            }
        }
    }
}
