//! The tensor forest rendered: view trees as text (the report's TENSORS section and
//! `tensight analyze --forest`), as JSON values, and as Graphviz DOT (`--format dot`).
//! Rendering only: the forest and its modelled traffic come from
//! [`crate::analysis::forest`].

use crate::analysis::forest::{shape_text, Forest, Relation, TensorNode, Traffic};
use crate::rules::{fmt_bytes, fmt_ms};
use crate::text::cut;
use serde_json::{json, Value};
use std::fmt::Write;

/// How much of a tree to draw.
#[derive(Debug, Clone, Copy)]
pub struct TreeOptions {
    /// Wrap width (lines are cut with `…`).
    pub width: usize,
    /// Draw only tensors whose subtree has modelled traffic.
    pub with_traffic_only: bool,
    /// Children drawn per tensor before `… N more`.
    pub max_children: usize,
}

fn dims(v: &[i64]) -> String {
    let d: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", d.join(","))
}

/// `#21 f32[32,3,32,32] transposed [3072,1024,1,32]`: identity and layout.
pub fn head(t: &TensorNode) -> String {
    let mut s = format!("#{} {} {}", t.tensor_id, shape_text(t), t.layout.label());
    if t.layout.is_non_contiguous() {
        let _ = write!(s, " {}", dims(&t.strides));
    }
    if t.offset_elems > 0 {
        let _ = write!(s, " +{}", t.offset_elems);
    }
    if t.parent.is_none() {
        let _ = write!(s, " · {} storage {}", t.device, t.storage_id);
    }
    s
}

/// Who made it and where: `aten::transpose at train.py(12): step`.
pub fn origin(t: &TensorNode) -> String {
    match (&t.created_by, t.relation) {
        (Some(c), _) => c.text(),
        (None, Relation::Untracked) => "no recorded op (untracked alias)".into(),
        (None, _) => "made before the trace".into(),
    }
}

pub(crate) fn traffic_text(tr: &Traffic) -> String {
    if tr.accesses == 0 {
        return String::new();
    }
    let mut s = format!(
        " · {} in {}×, {}",
        fmt_bytes(tr.bytes as f64),
        tr.accesses,
        fmt_ms(tr.time_ns / 1e6)
    );
    if tr.wasted_bytes > 0 {
        let _ = write!(s, ", {} wasted", fmt_bytes(tr.wasted_bytes as f64));
    }
    s
}

/// What the hardware pass measured through a tensor: `measured 1.2 GiB, 22% efficient,
/// 61% of warp cycles stalled on global memory` (empty when nothing was measured).
pub fn measured_text(tr: &Traffic) -> String {
    let Some(eff) = tr.efficiency() else {
        return String::new();
    };
    let mut s = format!(
        "measured {}, {:.0}% efficient",
        fmt_bytes(tr.measured_bytes),
        100.0 * eff
    );
    if let Some(ls) = tr.long_scoreboard_share() {
        let _ = write!(s, ", {:.0}% of warp cycles waiting on memory", 100.0 * ls);
    }
    s
}

/// Draw the tree under `root`.
pub fn tree(out: &mut String, f: &Forest, root: u32, o: TreeOptions) {
    draw(out, f, root, "", "", o);
}

fn shown(f: &Forest, i: u32, o: TreeOptions) -> bool {
    !o.with_traffic_only || f.nodes[i as usize].subtree.accesses > 0
}

fn draw(
    out: &mut String,
    f: &Forest,
    i: u32,
    head_prefix: &str,
    child_prefix: &str,
    o: TreeOptions,
) {
    let Some(t) = f.nodes.get(i as usize) else {
        return;
    };
    let kids: Vec<u32> = t
        .children
        .iter()
        .copied()
        .filter(|&c| shown(f, c, o))
        .collect();
    let bar = if kids.is_empty() { "   " } else { "│  " };
    let _ = writeln!(
        out,
        "{}",
        cut(&format!("{head_prefix}{}", head(t)), o.width)
    );
    let line = format!(
        "{child_prefix}{bar}{}{}",
        origin(t),
        traffic_text(&t.traffic)
    );
    if line.chars().count() <= o.width || t.traffic.accesses == 0 {
        let _ = writeln!(out, "{}", cut(&line, o.width));
    } else {
        let _ = writeln!(
            out,
            "{}",
            cut(&format!("{child_prefix}{bar}{}", origin(t)), o.width)
        );
        let tr = traffic_text(&t.traffic);
        let tr = tr.trim_start_matches(" · ");
        let _ = writeln!(out, "{}", cut(&format!("{child_prefix}{bar}{tr}"), o.width));
    }
    let m = measured_text(&t.traffic);
    if !m.is_empty() {
        let _ = writeln!(out, "{}", cut(&format!("{child_prefix}{bar}{m}"), o.width));
    }
    let n = kids.len();
    let drawn = n.min(o.max_children.max(1));
    for (k, &c) in kids.iter().take(drawn).enumerate() {
        let last = k + 1 == n;
        let (h, p) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        draw(
            out,
            f,
            c,
            &format!("{child_prefix}{h}"),
            &format!("{child_prefix}{p}"),
            o,
        );
    }
    if drawn < n {
        let _ = writeln!(out, "{child_prefix}└─ … {} more views", n - drawn);
    }
}

/// The whole forest as text (`tensight analyze --forest`).
pub fn text(f: &Forest, source: &str, width: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Tensor forest of {}:\n{} tensors, {} base tensors, {} views.",
        crate::text::shown(source),
        f.nodes.len(),
        f.roots.len(),
        f.views()
    );
    let _ = writeln!(
        out,
        "Traffic (· bytes in accesses, time) is modelled from shapes and strides,\nover {}.{}",
        f.attribution.window,
        if f.attribution.measured_kernels > 0 {
            format!(
                "\n`measured` lines: Nsight Compute's global sectors for {} of {} kernels.",
                f.attribution.measured_kernels, f.attribution.kernels
            )
        } else {
            String::new()
        }
    );
    for &r in &f.roots {
        out.push('\n');
        tree(
            &mut out,
            f,
            r,
            TreeOptions {
                width: width.max(60),
                with_traffic_only: false,
                max_children: usize::MAX,
            },
        );
    }
    super::terminal::fit(&out, width.max(60), false)
}

/// A DOT string's text: [`crate::text::shown_to`] (control characters escaped, cut to
/// 120 characters), then DOT's own quoting.
fn esc(s: &str) -> String {
    crate::text::shown_to(s, 120)
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// The whole forest as Graphviz DOT: one node per tensor, an edge from each view's
/// parent labelled with the op that made it. Non-contiguous views with modelled wasted
/// traffic are drawn red.
pub fn dot(f: &Forest) -> String {
    let mut out = String::new();
    out.push_str("digraph tensor_forest {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
    for (i, t) in f.nodes.iter().enumerate() {
        let mut label = format!("{}\\n{}", esc(&head(t)), esc(&origin(t)));
        if t.traffic.accesses > 0 {
            let _ = write!(
                label,
                "\\n{} modelled, {}",
                esc(&fmt_bytes(t.traffic.bytes as f64)),
                esc(&fmt_ms(t.traffic.time_ns / 1e6))
            );
        }
        let style = if t.parent.is_none() {
            ", style=bold"
        } else if t.traffic.excess_bytes() > 0.0 {
            ", color=red"
        } else {
            ""
        };
        let _ = writeln!(out, "  t{i} [label=\"{label}\"{style}];");
    }
    for (i, t) in f.nodes.iter().enumerate() {
        if let Some(p) = t.parent {
            let op = t
                .created_by
                .as_ref()
                .map_or("untracked".to_string(), |c| c.name.to_string());
            let _ = writeln!(out, "  t{p} -> t{i} [label=\"{}\"];", esc(&op));
        }
    }
    out.push_str("}\n");
    out
}

fn traffic_json(tr: &Traffic) -> Value {
    json!({
        "accesses": tr.accesses,
        "bytes": tr.bytes,
        "ideal_bytes": tr.ideal_bytes,
        "wasted_bytes": tr.wasted_bytes,
        "time_ms": tr.time_ns / 1e6,
        "measured_accesses": tr.measured_accesses,
        "measured_bytes": tr.measured_bytes,
        "measured_excess_bytes": tr.measured_excess_bytes,
        "efficiency": tr.efficiency(),
        "long_scoreboard_share": tr.long_scoreboard_share(),
    })
}

/// One tensor and its views (recursively) as JSON.
pub fn node_json(f: &Forest, i: u32) -> Value {
    let Some(t) = f.nodes.get(i as usize) else {
        return Value::Null;
    };
    json!({
        "tensor_id": t.tensor_id,
        "storage_id": t.storage_id,
        "device": t.device,
        "dtype": t.dtype,
        "shape": t.shape,
        "strides": t.strides,
        "offset": t.offset_elems,
        "numel": t.numel,
        "layout": t.layout,
        "relation": t.relation,
        "created_by": t.created_by.as_ref().map(|c| json!({
            "op": c.name, "et_node": c.et_node, "source": c.source})),
        "first_use": t.first_use,
        "last_use": t.last_use,
        "traffic": traffic_json(&t.traffic),
        "subtree": traffic_json(&t.subtree),
        "views": t.children.iter().map(|&c| node_json(f, c)).collect::<Vec<_>>(),
    })
}

/// The report's `tensors` object.
pub fn summary_json(f: &Forest, top: usize) -> Value {
    let a = &f.attribution;
    json!({
        "modelled": a.measured_kernels == 0,
        "window": a.window,
        "tensors": f.nodes.len(),
        "base_tensors": f.roots.len(),
        "views": f.views(),
        "storage_splits": f.storage_splits,
        "untracked": f.untracked,
        "attributed_ops": a.ops,
        "attributed_ms": a.attributed_ns as f64 / 1e6,
        "unattributed_ms": a.unattributed_ns as f64 / 1e6,
        "bytes": a.bytes,
        "wasted_bytes": a.wasted_bytes,
        "kernels": a.kernels,
        "measured_kernels": a.measured_kernels,
        "measured_bytes": a.measured_bytes,
        "measured_excess_bytes": a.measured_excess_bytes,
        "by_traffic": f.top_roots(|t| t.bytes, top).into_iter().map(|r| node_json(f, r)).collect::<Vec<_>>(),
        "by_wasted": f.top_roots(|t| t.excess_bytes() as u64, top).into_iter().map(|r| node_json(f, r)).collect::<Vec<_>>(),
    })
}
