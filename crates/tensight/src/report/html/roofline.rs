//! The roofline plot as SVG: log–log, arithmetic intensity (FLOP/byte) against achieved
//! TFLOP/s; the memory roof (bandwidth × intensity) up to the ridge, the compute roof of
//! the dominant precision after it, the other precisions' roofs dashed; one dot per op
//! (area by GPU time, colour by the finding that names it) and a diamond for the whole
//! step. Every label goes through [`esc`]; the numbers come from the report.

use super::svg::{decade, esc, num, text, LogAxis};
use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 430.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 18.0;
const BOTTOM: f64 = 48.0;

/// One op on the plot.
pub struct Dot {
    /// Label beside the dot (short op name).
    pub label: String,
    /// FLOP per byte.
    pub intensity: f64,
    /// Achieved TFLOP/s.
    pub tflops: f64,
    /// Its share of the plotted ops' GPU time, 0–1 (sets the area).
    pub weight: f64,
    /// Fill colour (a CSS colour written by the renderer, never from a trace).
    pub colour: &'static str,
    /// Tooltip.
    pub title: String,
    /// Link to its row in the op table.
    pub href: Option<String>,
}

/// The ceilings drawn.
pub struct Roofs {
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// The compute roof of the dominant precision: (label, TFLOP/s).
    pub peak: (String, f64),
    /// Other precisions' roofs, dashed.
    pub others: Vec<(String, f64)>,
    /// `datasheet` or how they were measured.
    pub source: String,
}

/// The plot. `step`: the whole step's (intensity, TFLOP/s).
pub fn plot(dots: &[Dot], roofs: &Roofs, step: Option<(f64, f64)>) -> String {
    let bw_t = roofs.bandwidth_gbs / 1e3; // TFLOP/s per FLOP/byte
    let ridge = roofs.peak.1 / bw_t.max(1e-12);
    let xs = dots
        .iter()
        .map(|d| d.intensity)
        .chain(step.map(|s| s.0))
        .chain([ridge]);
    let (xlo, xhi) = bounds(xs);
    let top_peak = roofs
        .others
        .iter()
        .map(|o| o.1)
        .fold(roofs.peak.1, f64::max);
    let ys = dots.iter().map(|d| d.tflops).chain(step.map(|s| s.1));
    let (ylo, _) = bounds(ys.chain([top_peak]));
    let x = LogAxis::new(xlo / 3.0, xhi * 3.0, LEFT, W - RIGHT);
    let y = LogAxis::new(ylo / 3.0, top_peak * 2.0, H - BOTTOM, TOP);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="plot roofline" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="roofline plot">"#
    );
    grid(&mut s, &x, &y);
    roof_lines(&mut s, &x, &y, roofs, bw_t);
    let mut order: Vec<usize> = (0..dots.len()).collect();
    // Big dots first, so small ones stay visible on top.
    order.sort_by(|&a, &b| dots[b].weight.total_cmp(&dots[a].weight));
    for (rank, &i) in order.iter().enumerate() {
        let d = &dots[i];
        let (cx, cy) = (x.at(d.intensity), y.at(d.tflops));
        let r = 4.0 + 16.0 * d.weight.clamp(0.0, 1.0).sqrt();
        if let Some(h) = &d.href {
            let _ = write!(s, r##"<a href="{}">"##, esc(h));
        }
        let _ = write!(
            s,
            r#"<circle class="dot" cx="{}" cy="{}" r="{}" fill="{}"><title>{}</title></circle>"#,
            num(cx),
            num(cy),
            num(r),
            d.colour,
            esc(&d.title)
        );
        if d.href.is_some() {
            s.push_str("</a>");
        }
        if rank < 8 {
            text(
                &mut s,
                cx + r + 3.0,
                cy + 4.0,
                "dotlabel",
                "start",
                &d.label,
            );
        }
    }
    if let Some((ai, tf)) = step {
        let (cx, cy) = (x.at(ai), y.at(tf));
        let _ = write!(
            s,
            r#"<path class="step" d="M{} {}l7 7l-7 7l-7 -7z"><title>{}</title></path>"#,
            num(cx),
            num(cy - 7.0),
            esc(&format!(
                "whole step: {ai:.3} FLOP/byte, {tf:.2} TFLOP/s (modelled FLOPs over GPU busy time)"
            ))
        );
        text(
            &mut s,
            cx + 9.0,
            cy + 14.0,
            "dotlabel",
            "start",
            "whole step",
        );
    }
    s.push_str("</svg>");
    s
}

/// Smallest and largest positive finite value (1 and 10 when there is none).
fn bounds(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for x in v.filter(|x| x.is_finite() && *x > 0.0) {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if hi <= 0.0 {
        (1.0, 10.0)
    } else {
        (lo, hi)
    }
}

fn grid(s: &mut String, x: &LogAxis, y: &LogAxis) {
    let (x0, x1) = (x.at(x.range().0), x.at(x.range().1));
    let (y0, y1) = (y.at(y.range().0), y.at(y.range().1));
    for d in x.d0..=x.d1 {
        let px = x.at(10f64.powi(d));
        let _ = write!(
            s,
            r#"<line class="grid" x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>"#,
            num(px),
            num(y0),
            num(y1)
        );
        text(s, px, y0 + 16.0, "tick", "middle", &decade(d));
    }
    for d in y.d0..=y.d1 {
        let py = y.at(10f64.powi(d));
        let _ = write!(
            s,
            r#"<line class="grid" x1="{0}" y1="{1}" x2="{2}" y2="{1}"/>"#,
            num(x0),
            num(py),
            num(x1)
        );
        text(s, x0 - 6.0, py + 4.0, "tick", "end", &decade(d));
    }
    let mid = (x0 + x1) / 2.0;
    text(
        s,
        mid,
        H - 8.0,
        "axis",
        "middle",
        "arithmetic intensity (FLOP/byte, modelled)",
    );
    let _ = write!(
        s,
        r#"<text class="axis" transform="translate(16 {}) rotate(-90)" text-anchor="middle">achieved TFLOP/s</text>"#,
        num((y0 + y1) / 2.0)
    );
}

fn roof_lines(s: &mut String, x: &LogAxis, y: &LogAxis, roofs: &Roofs, bw_t: f64) {
    let (xmin, xmax) = x.range();
    let (ymin, _) = y.range();
    let peak = roofs.peak.1;
    let ridge = peak / bw_t.max(1e-12);
    // The memory roof starts where it enters the plot.
    let start = xmin.max(ymin / bw_t.max(1e-12));
    let _ = write!(
        s,
        r#"<polyline class="roof" points="{},{} {},{} {},{}"/>"#,
        num(x.at(start)),
        num(y.at(start * bw_t)),
        num(x.at(ridge)),
        num(y.at(peak)),
        num(x.at(xmax)),
        num(y.at(peak))
    );
    // The memory roof's label runs along it, the compute roof's sits just after the ridge.
    let (ax, ay) = (x.at(start), y.at(start * bw_t));
    let (bx, by) = (x.at(ridge), y.at(peak));
    let angle = (by - ay).atan2(bx - ax).to_degrees();
    let (lx, ly) = (ax + 0.08 * (bx - ax), ay + 0.08 * (by - ay));
    let _ = write!(
        s,
        r#"<text class="roofl" transform="translate({} {}) rotate({})" text-anchor="start">{}</text>"#,
        num(lx),
        num(ly - 6.0),
        num(angle),
        esc(&format!("{:.0} GB/s", roofs.bandwidth_gbs))
    );
    let source = format!("ceilings: {}", roofs.source);
    text(
        s,
        x.at(xmin) + 6.0,
        y.at(y.range().1) + 14.0,
        "roofo",
        "start",
        &source,
    );
    let peak_label = format!("{} {:.0} TFLOP/s", roofs.peak.0, peak);
    text(s, x.at(xmax) - 4.0, by + 15.0, "roofl", "end", &peak_label);
    // Highest roof first; a label too close to the one above it moves down.
    let mut others: Vec<&(String, f64)> = roofs.others.iter().collect();
    others.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut last_y = f64::NEG_INFINITY;
    for (label, p) in others {
        let r = p / bw_t.max(1e-12);
        let _ = write!(
            s,
            r#"<line class="roof other" x1="{0}" y1="{2}" x2="{1}" y2="{2}"/>"#,
            num(x.at(r)),
            num(x.at(xmax)),
            num(y.at(*p))
        );
        let ly = (y.at(*p) + 4.0).max(last_y + 11.0);
        last_y = ly;
        let l = format!("{label} {p:.0}");
        text(s, x.at(r) - 4.0, ly, "roofo", "end", &l);
    }
}
