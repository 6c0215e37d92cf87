//! Writing SVG from Rust: one escaping function every text goes through, and the axis
//! arithmetic the plots share. Nothing here knows a metric.

use std::fmt::Write;

/// `s` safe inside SVG/HTML text and double-quoted attributes: `&<>"'` as entities, and
/// control characters (which XML forbids) dropped.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// A coordinate or length for an attribute: finite, two decimals.
pub fn num(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// `<text>` at (x, y) with the given class and anchor.
pub fn text(out: &mut String, x: f64, y: f64, class: &str, anchor: &str, body: &str) {
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" class="{class}" text-anchor="{anchor}">{}</text>"#,
        num(x),
        num(y),
        esc(body)
    );
}

/// Ticks of a linear axis from 0 through `max`, every 1, 2 or 5 × 10ⁿ, about `about`
/// of them.
pub fn linear_ticks(max: f64, about: f64) -> Vec<f64> {
    let raw = max / about;
    if !(raw.is_finite() && raw > 0.0) {
        return vec![0.0];
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&st| st >= raw)
        .unwrap_or(10.0 * mag);
    let mut out = Vec::new();
    let mut t = 0.0;
    while t <= max + 1e-9 {
        out.push(t);
        t += step;
    }
    out
}

/// A tick label of a time in ms: `0`, `250 µs`, `1.5 ms`.
pub fn ms_tick(t: f64) -> String {
    if t == 0.0 {
        "0".to_string()
    } else if t >= 1.0 - 1e-9 {
        format!("{} ms", num(t))
    } else {
        format!("{:.0} µs", t * 1e3)
    }
}

/// A log10 axis over whole decades covering `[lo, hi]` (both > 0), mapped to pixels
/// `[p0, p1]`.
#[derive(Debug, Clone, Copy)]
pub struct LogAxis {
    /// First decade (exponent).
    pub d0: i32,
    /// Last decade (exponent).
    pub d1: i32,
    p0: f64,
    p1: f64,
}

impl LogAxis {
    /// The decades around `[lo, hi]`.
    pub fn new(lo: f64, hi: f64, p0: f64, p1: f64) -> LogAxis {
        let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1e-3 };
        let hi = if hi.is_finite() && hi > lo {
            hi
        } else {
            lo * 10.0
        };
        let d0 = lo.log10().floor() as i32;
        let mut d1 = hi.log10().ceil() as i32;
        if d1 <= d0 {
            d1 = d0 + 1;
        }
        LogAxis { d0, d1, p0, p1 }
    }
    /// Pixel of `v` (clamped to the axis).
    pub fn at(&self, v: f64) -> f64 {
        let l = if v > 0.0 && v.is_finite() {
            v.log10()
        } else {
            self.d0 as f64
        };
        let f = ((l - self.d0 as f64) / (self.d1 - self.d0) as f64).clamp(0.0, 1.0);
        self.p0 + f * (self.p1 - self.p0)
    }
    /// The smallest and largest value on the axis.
    pub fn range(&self) -> (f64, f64) {
        (10f64.powi(self.d0), 10f64.powi(self.d1))
    }
}

/// `10⁻³`-style label of a decade, written plainly (`0.001`, `1`, `1000`, `1e6`).
pub fn decade(d: i32) -> String {
    match d {
        -3..=-1 => format!("{}", 10f64.powi(d)),
        0..=4 => format!("{}", 10i64.pow(d as u32)),
        _ => format!("1e{d}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_leaves_no_markup_and_no_controls() {
        let s = esc("<img src=x onerror='a(1)'>&\"\u{1b}[31m");
        assert_eq!(s, "&lt;img src=x onerror=&#39;a(1)&#39;&gt;&amp;&quot;[31m");
    }

    #[test]
    fn linear_ticks_step_by_one_two_or_five() {
        let t =
            |max, about| -> Vec<String> { linear_ticks(max, about).into_iter().map(num).collect() };
        assert_eq!(t(1.75, 8.0), ["0", "0.5", "1", "1.5"]);
        assert_eq!(
            t(1.5, 8.0),
            ["0", "0.2", "0.4", "0.6", "0.8", "1", "1.2", "1.4"]
        );
        assert_eq!(linear_ticks(30.0, 6.0).len(), 7, "every 5: 0 to 30");
        assert_eq!(linear_ticks(0.0, 8.0), [0.0]);
        let labels: Vec<String> = [0.0, 0.25, 1.5].into_iter().map(ms_tick).collect();
        assert_eq!(labels, ["0", "250 µs", "1.5 ms"]);
    }

    #[test]
    fn log_axis_maps_decades_to_pixels() {
        let a = LogAxis::new(0.5, 50.0, 0.0, 300.0);
        assert_eq!((a.d0, a.d1), (-1, 2));
        assert_eq!(num(a.at(1.0)), "100");
        assert_eq!(num(a.at(1e9)), "300");
        assert_eq!(decade(-2), "0.01");
        assert_eq!(decade(6), "1e6");
    }
}
