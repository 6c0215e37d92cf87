//! A horizontal bar chart as SVG: groups of bars on one millisecond axis, each bar a row
//! of stacked segments coloured by CSS class, with a label on the left, a note on the
//! right, tooltips, and an optional dashed mark across a bar. The diff page draws the
//! step before and after with it, and each finding's saving before and after. Every text
//! goes through [`esc`]; nothing here knows a metric.

use super::svg::{esc, linear_ticks, ms_tick, num, text};
use std::fmt::Write;

/// Width of the chart, px.
const W: f64 = 760.0;
/// Room for the group labels on the left.
const LABEL: f64 = 78.0;
/// Room for a bar's own label (`before`), between the group label and the bar.
const BAR_LABEL: f64 = 52.0;
/// Room for the notes on the right.
const NOTE: f64 = 230.0;
/// Height of one bar.
const BAR: f64 = 16.0;
/// Space between the bars of a group.
const GAP: f64 = 3.0;
/// Space between groups.
const GROUP_GAP: f64 = 10.0;
const TOP: f64 = 8.0;
const AXIS: f64 = 28.0;

/// A part of a bar.
pub struct Segment {
    /// CSS class (the stylesheet colours it).
    pub class: &'static str,
    /// Length, ms.
    pub ms: f64,
    /// Tooltip.
    pub title: String,
}

/// One bar: stacked segments, a short label before it inside the group (`before`), a
/// note after it, and optionally a dashed mark at a value (with its tooltip).
pub struct Bar {
    /// Written just left of the bar (small).
    pub label: String,
    /// Its segments, left to right.
    pub segments: Vec<Segment>,
    /// Written right of the chart's longest bar.
    pub note: String,
    /// A dashed mark across the bar at this many ms, with its tooltip.
    pub mark: Option<(f64, String)>,
}

/// A labelled group of bars (one figure, before and after).
pub struct Group {
    /// Written on the left (cut to fit).
    pub label: String,
    /// Its tooltip.
    pub title: String,
    /// A link for the label (an anchor on the page).
    pub href: Option<String>,
    /// The bars.
    pub bars: Vec<Bar>,
}

/// The chart of `groups`, with the CSS class `plot {class}` and `aria` as its label.
pub fn plot(class: &str, aria: &str, groups: &[Group]) -> String {
    let plot_h: f64 = groups
        .iter()
        .map(|g| GROUP_GAP + g.bars.len() as f64 * (BAR + GAP) - GAP)
        .sum();
    let bottom = TOP + plot_h;
    let h = bottom + AXIS;
    let max = groups
        .iter()
        .flat_map(|g| &g.bars)
        .map(|b| {
            let len: f64 = b.segments.iter().map(|s| s.ms.max(0.0)).sum();
            len.max(b.mark.as_ref().map_or(0.0, |m| m.0))
        })
        .fold(0.0, f64::max);
    let x0 = LABEL + BAR_LABEL;
    let x1 = W - NOTE;
    let px = |ms: f64| {
        let f = if max > 0.0 {
            (ms / max).clamp(0.0, 1.0)
        } else {
            0.0
        };
        x0 + f * (x1 - x0)
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="plot {}" viewBox="0 0 {W} {}" width="{W}" height="{}" role="img" aria-label="{}">"#,
        esc(class),
        num(h),
        num(h),
        esc(aria)
    );
    for t in linear_ticks(max, 6.0) {
        let x = px(t);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>"#,
            num(x),
            num(TOP),
            num(bottom)
        );
        text(&mut s, x, bottom + 16.0, "tick", "middle", &ms_tick(t));
    }
    let mut y = TOP;
    for g in groups {
        y += GROUP_GAP / 2.0;
        let gh = g.bars.len() as f64 * (BAR + GAP) - GAP;
        let label = crate::text::cut(&g.label, 12);
        let _ = write!(s, "<g><title>{}</title>", esc(&g.title));
        match &g.href {
            Some(href) => {
                let _ = write!(s, r#"<a href="{}">"#, esc(href));
                text(&mut s, 6.0, y + gh / 2.0 + 4.0, "group", "start", &label);
                s.push_str("</a>");
            }
            None => text(&mut s, 6.0, y + gh / 2.0 + 4.0, "group", "start", &label),
        }
        s.push_str("</g>");
        for b in &g.bars {
            text(&mut s, x0 - 6.0, y + BAR - 4.0, "tick", "end", &b.label);
            let mut at = 0.0;
            for seg in &b.segments {
                let (a, z) = (px(at), px(at + seg.ms.max(0.0)));
                let _ = write!(
                    s,
                    r#"<rect class="bar {}" x="{}" y="{}" width="{}" height="{BAR}"><title>{}</title></rect>"#,
                    esc(seg.class),
                    num(a),
                    num(y),
                    num(z - a),
                    esc(&seg.title)
                );
                at += seg.ms.max(0.0);
            }
            if let Some((ms, title)) = &b.mark {
                let x = px(*ms);
                let _ = write!(
                    s,
                    r#"<line class="mark" x1="{0}" y1="{1}" x2="{0}" y2="{2}"><title>{3}</title></line>"#,
                    num(x),
                    num(y - 2.0),
                    num(y + BAR + 2.0),
                    esc(title)
                );
            }
            text(&mut s, x1 + 8.0, y + BAR - 4.0, "note", "start", &b.note);
            y += BAR + GAP;
        }
        y += GROUP_GAP / 2.0 - GAP;
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_longest_and_escape_every_text() {
        let bar = |ms: f64| Bar {
            label: "before".into(),
            segments: vec![Segment {
                class: "busy",
                ms,
                title: "<b>".into(),
            }],
            note: "a & b".into(),
            mark: None,
        };
        let svg = plot(
            "steps",
            "x",
            &[Group {
                label: "<script>".into(),
                title: "t".into(),
                href: Some("#finding-0".into()),
                bars: vec![bar(2.0), bar(1.0)],
            }],
        );
        assert!(svg.contains(r#"width="400""#), "{svg}");
        assert!(svg.contains(r#"width="200""#), "{svg}");
        assert!(svg.contains("&lt;script&gt;") && svg.contains("a &amp; b"));
        assert!(!svg.contains("<script>") && !svg.contains("<b>"));
        assert!(svg.contains(r##"<a href="#finding-0">"##));
    }
}
