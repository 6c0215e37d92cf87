//! The HTML report's tables and the anchors that link them: kernel, op, source-line and
//! step rows, the tensor forest's trees, and each finding's locations pointing at them.
//! Plain data for the template (which escapes every string); no markup here.

use super::super::Report;
use crate::analysis::forest::Forest;
use crate::rules::{fmt_bytes, fmt_ms, Location};
use serde::Serialize;
use std::collections::{HashMap, HashSet};

/// Base tensors drawn by traffic, besides those a finding names.
const TREES: usize = 6;
/// Children drawn under one tensor before `… N more`.
const CHILDREN: usize = 8;
/// Deepest view drawn.
const DEPTH: usize = 8;

/// A link to a finding.
#[derive(Serialize, Clone)]
pub struct FindingRef {
    code: &'static str,
    href: String,
    colour: &'static str,
}

/// A row of the kernel table.
#[derive(Serialize)]
pub struct KernelRow {
    anchor: String,
    name: String,
    short: String,
    class: String,
    count: u64,
    total_ms: f64,
    total: String,
    pct: f64,
    op: Option<String>,
    op_href: Option<String>,
    findings: Vec<FindingRef>,
}

/// A row of the op table.
#[derive(Serialize)]
pub struct OpRow {
    anchor: String,
    name: String,
    count: u64,
    gpu_ms: f64,
    gpu: String,
    cpu_ms: f64,
    cpu: String,
    findings: Vec<FindingRef>,
}

/// A source line named by findings.
#[derive(Serialize)]
pub struct SourceRow {
    anchor: String,
    text: String,
    findings: Vec<FindingRef>,
}

/// One part of a finding's location (`op aten::add`), linked when it is on the page.
#[derive(Serialize)]
pub struct LinkItem {
    kind: &'static str,
    text: String,
    href: Option<String>,
}

/// A finding's location.
#[derive(Serialize)]
pub struct LocationView {
    items: Vec<LinkItem>,
}

/// A tensor in a drawn tree.
#[derive(Serialize)]
pub struct TreeNode {
    anchor: String,
    head: String,
    origin: String,
    traffic: String,
    measured: String,
    findings: Vec<FindingRef>,
    children: Vec<TreeNode>,
    more: usize,
}

/// The forest section.
#[derive(Serialize)]
pub struct ForestView {
    about: String,
    trees: Vec<TreeNode>,
}

/// Every table row with its anchor, and the links between them and the findings.
pub struct Links {
    /// Kernel table.
    pub kernels: Vec<KernelRow>,
    /// Op table (top by GPU time, then top by host time).
    pub ops: Vec<OpRow>,
    /// Source lines the findings name.
    pub sources: Vec<SourceRow>,
    /// The drawn tensor trees.
    pub forest: Option<ForestView>,
    /// Tensor ids drawn in `forest`.
    tensors: HashSet<u64>,
    /// The tensor each location text names, when the forest has it.
    tensor_of: HashMap<String, u64>,
    /// Per finding: the names its locations give (op, kernel, tensor id, source).
    named: Vec<Named>,
}

#[derive(Default)]
struct Named {
    code: &'static str,
    ops: Vec<String>,
    kernels: Vec<String>,
    tensors: Vec<u64>,
    sources: Vec<String>,
}

/// The forest tensor a location's text names: `#13 f32[...]` by id, or `input 1 of
/// aten::add: [8192, 8192] strides [1, 8192] (transposed)` by shape and strides (the
/// matching tensor with the most traffic).
fn tensor_target(text: &str, f: Option<&Forest>) -> Option<u64> {
    if let Some(rest) = text.trim_start().strip_prefix('#') {
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        return digits.parse().ok();
    }
    let f = f?;
    let list = |s: &str| -> Option<Vec<i64>> {
        let inner = s.split_once('[')?.1.split_once(']')?.0;
        inner.split(',').map(|x| x.trim().parse().ok()).collect()
    };
    let (head, tail) = text.split_once(" strides ")?;
    let shape = list(head.rsplit_once(": ").map_or(head, |h| h.1))?;
    let strides = list(tail)?;
    f.nodes
        .iter()
        .filter(|t| t.shape == shape && t.strides == strides)
        .max_by_key(|t| (t.traffic.bytes, std::cmp::Reverse(t.tensor_id)))
        .map(|t| t.tensor_id)
}

/// Drop a C++ signature's argument list and `void ` (full name in the tooltip).
pub(super) fn short_kernel(name: &str) -> String {
    let cleaned = name.replace("(anonymous namespace)::", "");
    let mut s = cleaned.as_str();
    if let Some(i) = s.find('(') {
        if i > 10 {
            s = &s[..i];
        }
    }
    let s = s.strip_prefix("void ").unwrap_or(s);
    crate::text::cut(s, 110)
}

impl Links {
    /// Rows, anchors and links of `r`.
    pub fn of(r: &Report) -> Links {
        let forest = r.metrics.tensors.as_ref();
        let mut tensor_of = HashMap::new();
        for l in r.diagnosis.findings.iter().flat_map(|f| &f.locations) {
            if let Some(t) = &l.tensor {
                if let Some(id) = tensor_target(t, forest) {
                    tensor_of.insert(t.clone(), id);
                }
            }
        }
        let named: Vec<Named> = r
            .diagnosis
            .findings
            .iter()
            .map(|f| {
                let mut n = Named {
                    code: f.code,
                    ..Default::default()
                };
                for l in &f.locations {
                    n.ops.extend(l.op.clone());
                    n.kernels.extend(l.kernel.clone());
                    n.tensors
                        .extend(l.tensor.as_ref().and_then(|t| tensor_of.get(t)));
                    n.sources.extend(l.source.clone());
                }
                n
            })
            .collect();
        let mut links = Links {
            kernels: Vec::new(),
            ops: Vec::new(),
            sources: Vec::new(),
            forest: None,
            tensors: HashSet::new(),
            tensor_of,
            named,
        };
        links.ops = links.op_rows(r);
        links.kernels = links.kernel_rows(r);
        let mut seen: Vec<String> = Vec::new();
        for n in &links.named {
            for s in &n.sources {
                if !seen.contains(s) {
                    seen.push(s.clone());
                }
            }
        }
        links.sources = seen
            .into_iter()
            .enumerate()
            .map(|(i, text)| SourceRow {
                anchor: format!("src-{i}"),
                findings: links.refs(|n| n.sources.contains(&text)),
                text,
            })
            .collect();
        if let Some(f) = &r.metrics.tensors {
            links.forest = Some(links.forest_view(f));
        }
        links
    }

    /// Links to the findings whose names satisfy `pred`.
    fn refs(&self, pred: impl Fn(&Named) -> bool) -> Vec<FindingRef> {
        self.named
            .iter()
            .enumerate()
            .filter(|(_, n)| pred(n))
            .map(|(i, n)| FindingRef {
                code: n.code,
                href: format!("#finding-{i}"),
                colour: super::colour(i),
            })
            .collect()
    }

    fn op_rows(&self, r: &Report) -> Vec<OpRow> {
        let mut rows: Vec<OpRow> = Vec::new();
        for o in r.metrics.top_ops_gpu.iter().chain(&r.metrics.top_ops_cpu) {
            if rows.iter().any(|x| x.name == o.name) {
                continue;
            }
            rows.push(OpRow {
                anchor: format!("op-{}", rows.len()),
                name: o.name.clone(),
                count: o.count,
                gpu_ms: o.gpu_ns as f64 / 1e6,
                gpu: fmt_ms(o.gpu_ns as f64 / 1e6),
                cpu_ms: o.cpu_ns as f64 / 1e6,
                cpu: fmt_ms(o.cpu_ns as f64 / 1e6),
                findings: self.refs(|n| n.ops.contains(&o.name)),
            });
        }
        rows
    }

    fn kernel_rows(&self, r: &Report) -> Vec<KernelRow> {
        r.metrics
            .kernels
            .top
            .iter()
            .enumerate()
            .map(|(i, k)| KernelRow {
                anchor: format!("kernel-{i}"),
                name: k.name.clone(),
                short: short_kernel(&k.name),
                class: format!("{:?}", k.class).to_lowercase(),
                count: k.count,
                total_ms: k.total_ns as f64 / 1e6,
                total: fmt_ms(k.total_ns as f64 / 1e6),
                pct: (k.pct * 10.0).round() / 10.0,
                op_href: k.op.as_deref().and_then(|o| self.op_href(o)),
                op: k.op.clone(),
                findings: self.refs(|n| n.kernels.contains(&k.name)),
            })
            .collect()
    }

    /// The op table row of `name`, as a link.
    pub fn op_href(&self, name: &str) -> Option<String> {
        self.ops
            .iter()
            .find(|o| o.name == name)
            .map(|o| format!("#{}", o.anchor))
    }

    /// The first (largest) finding whose locations name op `name`.
    pub fn finding_of_op(&self, name: &str) -> Option<usize> {
        self.named
            .iter()
            .position(|n| n.ops.iter().any(|o| o == name))
    }

    /// A finding's location with links to what is on the page.
    pub fn location(&self, l: &Location) -> LocationView {
        let mut items = Vec::new();
        if let Some(s) = &l.source {
            let href = self
                .sources
                .iter()
                .find(|x| &x.text == s)
                .map(|x| format!("#{}", x.anchor));
            items.push(LinkItem {
                kind: "source",
                text: s.clone(),
                href,
            });
        }
        if let Some(op) = &l.op {
            items.push(LinkItem {
                kind: "op",
                text: op.clone(),
                href: self.op_href(op),
            });
        }
        if let Some(k) = &l.kernel {
            let href = self
                .kernels
                .iter()
                .find(|x| &x.name == k)
                .map(|x| format!("#{}", x.anchor));
            items.push(LinkItem {
                kind: "kernel",
                text: short_kernel(k),
                href,
            });
        }
        if let Some(t) = &l.tensor {
            let href = self
                .tensor_of
                .get(t)
                .filter(|id| self.tensors.contains(id))
                .map(|id| format!("#tensor-{id}"));
            items.push(LinkItem {
                kind: "tensor",
                text: t.clone(),
                href,
            });
        }
        LocationView { items }
    }

    /// The trees drawn: roots of the tensors findings name, then the largest by traffic.
    fn forest_view(&mut self, f: &Forest) -> ForestView {
        let mut roots: Vec<u32> = Vec::new();
        let wanted: Vec<u64> = self.named.iter().flat_map(|n| n.tensors.clone()).collect();
        for id in &wanted {
            if let Some(node) = f.nodes.iter().find(|t| t.tensor_id == *id) {
                if !roots.contains(&node.root) {
                    roots.push(node.root);
                }
            }
        }
        for r in f.top_roots(|x| x.bytes, TREES) {
            if !roots.contains(&r) {
                roots.push(r);
            }
        }
        let trees = roots.iter().map(|&r| self.tree(f, r, 0)).collect();
        let a = &f.attribution;
        let about = format!(
            "{} tensors ({} base, {} views) in the execution trace. Over {}: {} moved by {} ops \
             as modelled from shapes and strides, {} of it excess sectors of non-contiguous \
             access; {} of kernel time split by bytes{}. Shown: the trees of the tensors the \
             findings name, then the {} with the most traffic.",
            f.nodes.len(),
            f.roots.len(),
            f.views(),
            a.window,
            fmt_bytes(a.bytes as f64),
            a.ops,
            fmt_bytes(a.wasted_bytes as f64),
            fmt_ms(a.attributed_ns as f64 / 1e6),
            if a.measured_kernels > 0 {
                format!(
                    "; the hardware pass measured {} of {} kernels",
                    a.measured_kernels, a.kernels
                )
            } else {
                " (no hardware pass: modelled, not measured)".to_string()
            },
            TREES
        );
        ForestView { about, trees }
    }

    fn tree(&mut self, f: &Forest, i: u32, depth: usize) -> TreeNode {
        let t = &f.nodes[i as usize];
        self.tensors.insert(t.tensor_id);
        let kids: Vec<u32> = t
            .children
            .iter()
            .copied()
            .filter(|&c| f.nodes[c as usize].subtree.accesses > 0)
            .collect();
        let drawn = if depth >= DEPTH {
            0
        } else {
            kids.len().min(CHILDREN)
        };
        let id = t.tensor_id;
        TreeNode {
            anchor: format!("tensor-{id}"),
            head: super::super::forest::head(t),
            origin: super::super::forest::origin(t),
            traffic: super::super::forest::traffic_text(&t.traffic)
                .trim_start_matches(" · ")
                .to_string(),
            measured: super::super::forest::measured_text(&t.traffic),
            findings: self.refs(|n| n.tensors.contains(&id)),
            children: kids[..drawn]
                .iter()
                .map(|&c| self.tree(f, c, depth + 1))
                .collect(),
            more: kids.len() - drawn,
        }
    }
}

/// One row of the step table.
#[derive(Serialize)]
pub struct StepRow {
    name: String,
    shown: bool,
    wall_ms: f64,
    wall: String,
    busy_pct: f64,
    kernels: u64,
    idle_cpu_ms: f64,
    idle_cpu: String,
    idle_sync_ms: f64,
    idle_sync: String,
    h2d_bytes: u64,
    h2d: String,
}

/// The step table.
pub fn steps(r: &Report) -> Vec<StepRow> {
    let shown = r.metrics.step_view.as_ref().map(|v| v.step);
    let ms = |ns: i64| ns as f64 / 1e6;
    r.metrics
        .timeline
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| StepRow {
            name: s.name.clone(),
            shown: shown == Some(i),
            wall_ms: ms(s.dur_ns),
            wall: fmt_ms(ms(s.dur_ns)),
            busy_pct: if s.dur_ns > 0 {
                (1000.0 * s.gpu_busy_ns as f64 / s.dur_ns as f64).round() / 10.0
            } else {
                0.0
            },
            kernels: s.kernels,
            idle_cpu_ms: ms(s.idle.cpu_ns),
            idle_cpu: fmt_ms(ms(s.idle.cpu_ns)),
            idle_sync_ms: ms(s.idle.sync_ns),
            idle_sync: fmt_ms(ms(s.idle.sync_ns)),
            h2d_bytes: s.h2d.bytes,
            h2d: fmt_bytes(s.h2d.bytes as f64),
        })
        .collect()
}
