//! The per-step timeline as SVG: one row per lane of [`StepView`] (host threads, host
//! syncs, GPU streams, GPU idle), a bar per span coloured by its kind (idle gaps by
//! their cause), a tooltip with its name and duration, and a millisecond axis. Every
//! name goes through [`esc`].

use super::svg::{esc, linear_ticks, ms_tick, num, text};
use crate::analysis::step_view::{LaneKind, SpanKind, StepView};
use crate::rules::fmt_ms;
use std::fmt::Write;

const W: f64 = 1180.0;
const LABEL: f64 = 190.0;
const RIGHT: f64 = 16.0;
const ROW: f64 = 22.0;
const TOP: f64 = 8.0;
const AXIS: f64 = 30.0;

/// The CSS class of a span kind (the stylesheet colours it) and its legend text.
pub fn class(k: SpanKind) -> (&'static str, &'static str) {
    match k {
        SpanKind::Op => ("op", "host op"),
        SpanKind::Sync => ("sync", "host blocked in a sync"),
        SpanKind::Kernel => ("kernel", "kernel"),
        SpanKind::CopyH2d => ("h2d", "copy host→device"),
        SpanKind::CopyD2h => ("d2h", "copy device→host"),
        SpanKind::CopyD2d => ("d2d", "copy device→device"),
        SpanKind::Memset => ("memset", "memset"),
        SpanKind::IdleCpu => ("idle-cpu", "GPU idle: host not launching"),
        SpanKind::IdleSync => ("idle-sync", "GPU idle: drained by a sync"),
        SpanKind::IdleTransfer => ("idle-transfer", "GPU idle: host in memcpy"),
        SpanKind::IdleDataLoader => ("idle-data", "GPU idle: host in the DataLoader"),
    }
}

/// Every span kind, in legend order.
pub const KINDS: [SpanKind; 11] = [
    SpanKind::Op,
    SpanKind::Sync,
    SpanKind::Kernel,
    SpanKind::CopyH2d,
    SpanKind::CopyD2h,
    SpanKind::CopyD2d,
    SpanKind::Memset,
    SpanKind::IdleCpu,
    SpanKind::IdleSync,
    SpanKind::IdleTransfer,
    SpanKind::IdleDataLoader,
];

/// The plot of `v`.
pub fn plot(v: &StepView) -> String {
    let rows = v.lanes.len() as f64;
    let h = TOP + rows * ROW + AXIS;
    let span_ns = v.dur_ns.max(1) as f64;
    let px = |ns: i64| LABEL + (ns as f64 / span_ns).clamp(0.0, 1.0) * (W - LABEL - RIGHT);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="plot timeline" viewBox="0 0 {W} {}" width="{W}" height="{}" role="img" aria-label="timeline of one step">"#,
        num(h),
        num(h)
    );
    ticks(&mut s, v.dur_ns, TOP + rows * ROW, &px);
    for (i, lane) in v.lanes.iter().enumerate() {
        let y = TOP + i as f64 * ROW;
        let band = if i % 2 == 0 { "band" } else { "band odd" };
        let _ = write!(
            s,
            r#"<rect class="{band}" x="0" y="{}" width="{W}" height="{ROW}"/>"#,
            num(y)
        );
        let lclass = match lane.kind {
            LaneKind::Host | LaneKind::Syncs => "lane host",
            LaneKind::Stream => "lane gpu",
            LaneKind::Idle => "lane idle",
        };
        let label = crate::text::cut(&lane.label, 30);
        text(&mut s, 6.0, y + 15.0, lclass, "start", &label);
        for sp in &lane.spans {
            let x0 = px(sp.start_ns);
            let x1 = px(sp.start_ns + sp.dur_ns).max(x0 + 0.6);
            let (c, what) = class(sp.kind);
            let tip = format!(
                "{} — {} at +{} ({what})",
                sp.name,
                fmt_ms(sp.dur_ns as f64 / 1e6),
                fmt_ms(sp.start_ns as f64 / 1e6)
            );
            let _ = write!(
                s,
                r#"<rect class="span {c}" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>"#,
                num(x0),
                num(y + 3.0),
                num(x1 - x0),
                num(ROW - 6.0),
                esc(&tip)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// A tick every 1, 2 or 5 × 10ⁿ ms, about eight across.
fn ticks(s: &mut String, dur_ns: i64, bottom: f64, px: &dyn Fn(i64) -> f64) {
    for t in linear_ticks(dur_ns.max(1) as f64 / 1e6, 8.0) {
        let x = px((t * 1e6) as i64);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>"#,
            num(x),
            num(TOP),
            num(bottom)
        );
        // The last label ends at the axis's end instead of running past it.
        let anchor = if x > W - RIGHT - 30.0 {
            "end"
        } else {
            "middle"
        };
        text(s, x, bottom + 16.0, "tick", anchor, &ms_tick(t));
    }
}
