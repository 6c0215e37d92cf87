//! The tensor forest of the execution trace, and the GPU traffic of each op attributed to
//! the tensors it reads and writes (TenProf's view of a run: slow kernels explained by
//! the tensors they touch and how those tensors were made).
//!
//! Input: a [`Profile`] with an [`crate::model::ExecTrace`]. Output: a [`Forest`]:
//!
//! - **Roots** are base tensors: the owner of one *lifetime* of a storage. The caching
//!   allocator hands a freed block to the next allocation, so the execution trace reuses
//!   storage ids; a storage's history is split whenever a new tensor appears on it that
//!   is not made from a tensor on that storage by the same op (a factory or allocating
//!   op's output starts a new lifetime).
//! - **Children** are views: an op's new output on the storage of one of its inputs. By
//!   the schema (`Tensor(a)` return) or the op's name (view, reshape, transpose, permute,
//!   slice, select, expand, …) it is a [`Relation::View`]; an op that shares storage
//!   without saying so (`aten::_unsafe_view`) makes a [`Relation::Alias`]. A tensor first
//!   seen as an argument on a live storage, made by no recorded op, is
//!   [`Relation::Untracked`] and hangs from that storage's base.
//!
//! Nodes are processed in file order, which is the order ops *end* (the observer writes
//! a node at op exit, so inner ops come before the op that called them); a tensor's
//! creating op is then lifted to the outermost enclosing op that also returns it without
//! taking it (`aten::_to_copy` rather than its inner `aten::empty_strided`).
//!
//! **Attribution is modelled, not measured.** Each GPU activity linked to an op with an
//! execution-trace node (the op itself or its nearest recorded ancestor) has its time
//! split over that node's tensor arguments by the bytes each moves. Bytes are modelled
//! from shape and strides in 32-byte sectors: along the innermost (last) dimension after
//! merging dimensions that are contiguous with each other, a row of `n` elements of
//! stride `s` spans `ceil(((n-1)·s + 1)·itemsize / 32)` sectors (one per element once
//! `s·itemsize ≥ 32`), rows times that is what a kernel reading in logical order touches.
//! The excess over a dense layout's sectors is "wasted" traffic: what uncoalesced access
//! to a non-contiguous view costs. Broadcast (stride-0) dimensions add no bytes. Caches
//! are ignored, and GEMM/convolution/attention ops (those with a FLOP formula) are
//! charged the dense bytes: their kernels take transposed operands natively.
//!
//! **Iteration order.** PyTorch's elementwise and copy kernels (TensorIterator) do not
//! walk in logical order: they walk in the memory order of the output, which for a fresh
//! output follows the first input's layout. So `a + b.t()` reads `b.t()` across its
//! strides, but `b.t() + a` writes a transposed output and reads `a` across its strides.
//! The recorded output strides say which order was taken: every operand of the output's
//! shape is modelled in the order of the output's strides (largest first); the input of a
//! reduction (more elements than its output) in its own memory order; other operands in
//! logical order.
//!
//! **Measured, when there is a hardware pass.** A kernel with Nsight Compute counters
//! (its own row or its signature's) replaces the model by what was measured: its L1
//! global load and store sectors × 32 B, and the excess over the ideal sectors for its
//! access width ([`crate::analysis::efficiency`]). The measured dense part is split over
//! the op's tensors by their dense bytes, the excess by their modelled excess (by
//! modelled bytes when the model sees none). Per tensor this gives an access-efficiency score (ideal /
//! measured sectors) and the long-scoreboard share of the warp cycles of the kernels
//! that touch it. Only the ops the execution trace covers are attributed: for a bundle,
//! the one step recorded with the observer (`execution_trace_step`).

use crate::model::{AliasKind, EtNode, EtTensor, ExecTrace, Name, Profile};
use serde::Serialize;
use std::collections::HashMap;

/// Bytes of one DRAM/L2 sector: the unit of the traffic model.
pub const SECTOR_BYTES: u64 = 32;

/// Ops that make views (used when the schema is not recorded; the schema's `Tensor(a)`
/// return annotation decides otherwise). Names without the `aten::` prefix.
const VIEW_OPS: [&str; 40] = [
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "transpose",
    "t",
    "permute",
    "slice",
    "select",
    "narrow",
    "expand",
    "expand_as",
    "unsqueeze",
    "squeeze",
    "as_strided",
    "diagonal",
    "unfold",
    "alias",
    "detach",
    "view_as",
    "flatten",
    "unflatten",
    "split",
    "split_with_sizes",
    "unsafe_split",
    "chunk",
    "unbind",
    "movedim",
    "moveaxis",
    "swapaxes",
    "swapdims",
    "numpy_T",
    "mT",
    "mH",
    "adjoint",
    "view_as_real",
    "view_as_complex",
    "real",
    "imag",
    "tensor_split",
];

/// Ops that overwrite their `self` without reading it.
const OVERWRITE_OPS: [&str; 9] = [
    "copy_",
    "fill_",
    "zero_",
    "normal_",
    "uniform_",
    "random_",
    "bernoulli_",
    "exponential_",
    "set_",
];

fn bare(name: &str) -> &str {
    name.strip_prefix("aten::").unwrap_or(name)
}

/// True when `name` is a view op by the fallback list.
pub fn is_view_op(name: &str) -> bool {
    VIEW_OPS.contains(&bare(name))
}

/// How a tensor's elements are laid out in its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Row-major dense (sizes of 1 ignored).
    Contiguous,
    /// NHWC (or NDHWC) dense: `torch.channels_last`.
    ChannelsLast,
    /// Dense, but dimensions permuted (a transpose or permute of a dense tensor).
    Transposed,
    /// Gaps between elements (a slice, a select, a step): not dense.
    Strided,
    /// Some dimension has stride 0 with size > 1 (expand, broadcast).
    Expanded,
    /// Elements share memory (as_strided, unfold with overlapping windows).
    Overlapping,
    /// Strides not recorded.
    Unknown,
}

impl Layout {
    /// Short label for reports.
    pub fn label(self) -> &'static str {
        match self {
            Layout::Contiguous => "contiguous",
            Layout::ChannelsLast => "channels_last",
            Layout::Transposed => "transposed",
            Layout::Strided => "strided",
            Layout::Expanded => "expanded",
            Layout::Overlapping => "overlapping",
            Layout::Unknown => "unknown",
        }
    }

    /// Classify `shape`/`strides` (in elements).
    pub fn of(shape: &[i64], strides: &[i64]) -> Layout {
        if strides.len() != shape.len() {
            return Layout::Unknown;
        }
        let dims: Vec<(i64, i64)> = shape
            .iter()
            .zip(strides)
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &s)| (n, s))
            .collect();
        if dims.iter().any(|&(n, _)| n == 0) {
            return Layout::Contiguous;
        }
        if dims.iter().any(|&(_, s)| s == 0) {
            return Layout::Expanded;
        }
        if is_dense_in_order(&dims) {
            return Layout::Contiguous;
        }
        if shape.len() >= 4 && shape.len() <= 5 {
            // channels_last: C innermost, then W, H, (D), N.
            let mut order: Vec<usize> = (2..shape.len()).rev().collect();
            order.insert(0, 1);
            order.push(0);
            // `order` lists dims innermost first: C, W, H, (D), N.
            let mut expected = 1i64;
            let mut ok = true;
            for &d in &order {
                if shape[d] != 1 && strides[d] != expected {
                    ok = false;
                    break;
                }
                expected = expected.saturating_mul(shape[d]);
            }
            if ok {
                return Layout::ChannelsLast;
            }
        }
        let mut sorted: Vec<(i64, i64)> =
            dims.iter().map(|&(n, s)| (n, s.saturating_abs())).collect();
        sorted.sort_by_key(|&(n, s)| (std::cmp::Reverse(s), std::cmp::Reverse(n)));
        if is_dense_in_order(&sorted) {
            return Layout::Transposed;
        }
        // Innermost first: a stride smaller than the inner dims' extent overlaps.
        let mut span = 0i64;
        for &(n, s) in sorted.iter().rev() {
            if s <= span {
                return Layout::Overlapping;
            }
            span = span.saturating_add(n.saturating_sub(1).saturating_mul(s));
        }
        Layout::Strided
    }

    /// True for layouts a kernel reading in logical order does not read densely.
    pub fn is_non_contiguous(self) -> bool {
        !matches!(
            self,
            Layout::Contiguous | Layout::ChannelsLast | Layout::Unknown
        )
    }
}

/// `dims` (size, stride), outermost first, are row-major dense.
fn is_dense_in_order(dims: &[(i64, i64)]) -> bool {
    let mut expected = 1i64;
    for &(n, s) in dims.iter().rev() {
        if s != expected {
            return false;
        }
        expected = expected.saturating_mul(n);
    }
    true
}

/// Largest element index a tensor reaches relative to its offset (`Σ (size-1)·stride`),
/// `None` for an empty tensor; falls back to `numel - 1` without strides.
pub fn max_index(shape: &[i64], strides: &[i64], numel: u64) -> Option<u64> {
    if numel == 0 || shape.contains(&0) {
        return None;
    }
    if strides.len() != shape.len() {
        return Some(numel - 1);
    }
    let mut m: i128 = 0;
    for (&n, &s) in shape.iter().zip(strides) {
        if n > 0 && s > 0 {
            m += (n as i128 - 1) * s as i128;
        }
    }
    Some(m.clamp(0, u64::MAX as i128) as u64)
}

/// Modelled bytes a kernel touches reading or writing `t` in logical order, and the bytes
/// a dense layout of the same distinct elements would touch (both in whole sectors).
pub fn modelled_bytes(t: &EtTensor) -> (u64, u64) {
    modelled_bytes_in_order(t, None)
}

/// The order a TensorIterator kernel walks a tensor of `strides`: dimensions outermost
/// first, by stride, largest first (ties and size-1 dimensions keep their logical place).
pub fn iteration_order(shape: &[i64], strides: &[i64]) -> Option<Vec<usize>> {
    if shape.len() != strides.len() || shape.len() < 2 {
        return None;
    }
    // Dims of size > 1 are sorted among their own positions (stably); the rest stay.
    let slots: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] > 1).collect();
    let mut moving = slots.clone();
    moving.sort_by_key(|&d| std::cmp::Reverse(strides[d].unsigned_abs()));
    let mut order: Vec<usize> = (0..shape.len()).collect();
    for (&slot, &d) in slots.iter().zip(&moving) {
        order[slot] = d;
    }
    Some(order)
}

/// [`modelled_bytes`] with the kernel walking `t`'s dimensions in `order` (outermost
/// first; `None`: logical order).
pub fn modelled_bytes_in_order(t: &EtTensor, order: Option<&[usize]>) -> (u64, u64) {
    let b = t.itemsize.max(1) as u128;
    let sector = SECTOR_BYTES as u128;
    let sectors = |bytes: u128| bytes.div_ceil(sector);
    let clamp = |v: u128| v.min(u64::MAX as u128) as u64;
    if t.numel == 0 || t.shape.contains(&0) {
        return (0, 0);
    }
    if t.strides.len() != t.shape.len() {
        let dense = sectors((t.numel as u128).saturating_mul(b)).saturating_mul(sector);
        return (clamp(dense), clamp(dense));
    }
    // Drop sizes of 1 and broadcast dims (no new addresses), then merge dims that are
    // contiguous with the next one.
    let mut dims: Vec<(u128, u128)> = Vec::new();
    let logical: Vec<usize> = (0..t.shape.len()).collect();
    let order = order
        .filter(|o| o.len() == t.shape.len() && o.iter().all(|&d| d < t.shape.len()))
        .unwrap_or(&logical);
    for (&n, &s) in order.iter().map(|&d| (&t.shape[d], &t.strides[d])) {
        if n <= 1 || s == 0 {
            continue;
        }
        let (n, s) = (n as u128, s.unsigned_abs() as u128);
        if let Some(last) = dims.last_mut() {
            if last.1 == n.saturating_mul(s) {
                *last = (last.0.saturating_mul(n), s);
                continue;
            }
        }
        dims.push((n, s));
    }
    let product = |d: &[(u128, u128)]| d.iter().fold(1u128, |a, x| a.saturating_mul(x.0));
    let unique = product(&dims);
    let ideal = sectors(unique.saturating_mul(b)).saturating_mul(sector);
    let Some(&(n, s)) = dims.last() else {
        return (clamp(ideal), clamp(ideal));
    };
    let rows = product(&dims[..dims.len() - 1]);
    let per_row = if s.saturating_mul(b) >= sector {
        n
    } else {
        sectors(((n - 1).saturating_mul(s).saturating_add(1)).saturating_mul(b))
    };
    let touched = rows
        .saturating_mul(per_row)
        .saturating_mul(sector)
        .max(ideal);
    (clamp(touched), clamp(ideal))
}

/// How a tensor node came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// A base tensor: owns one lifetime of its storage.
    Base,
    /// Made by a view op from its parent (`Tensor(a)` schema or a view op's name).
    View,
    /// Shares its parent's storage through an op that does not declare it a view
    /// (`aten::_unsafe_view`).
    Alias,
    /// First seen as an argument on a live storage; no recorded op made it.
    Untracked,
}

/// The op that made a tensor.
#[derive(Debug, Clone, Serialize)]
pub struct Creator {
    /// Op name (`aten::transpose`).
    pub name: Name,
    /// Execution-trace node id.
    pub et_node: i64,
    /// The linked Kineto op (index into `Profile::ops`).
    pub op: Option<u32>,
    /// The user's source line (`train.py(12): step`), when stacks were recorded.
    pub source: Option<String>,
}

impl Creator {
    /// `aten::transpose at train.py(12): step`, or the op alone without a source line.
    pub fn text(&self) -> String {
        match &self.source {
            Some(src) => format!("{} at {src}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// Traffic through a tensor: modelled always, measured where the hardware pass has the
/// kernels' counters (see the module doc).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Traffic {
    /// Times a GPU-launching op read or wrote it.
    pub accesses: u64,
    /// Modelled bytes touched (whole sectors).
    pub bytes: u64,
    /// Bytes a dense layout would touch.
    pub ideal_bytes: u64,
    /// `bytes - ideal_bytes`: modelled excess sectors of non-contiguous access.
    pub wasted_bytes: u64,
    /// GPU time of those ops, split over their tensors by bytes, ns.
    pub time_ns: f64,
    /// Accesses whose op's kernels all had hardware counters.
    pub measured_accesses: u64,
    /// Measured global sectors × 32 B of those accesses, this tensor's share.
    pub measured_bytes: f64,
    /// Measured sectors beyond the ideal for the access width, × 32 B, this tensor's share.
    pub measured_excess_bytes: f64,
    /// Σ time × long-scoreboard share over the kernels with that counter, ns.
    pub stall_ns: f64,
    /// Time of the kernels with a long-scoreboard share, ns (the denominator).
    pub stall_known_ns: f64,
}

impl Traffic {
    fn add(&mut self, o: &Traffic) {
        self.accesses += o.accesses;
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.ideal_bytes = self.ideal_bytes.saturating_add(o.ideal_bytes);
        self.wasted_bytes = self.wasted_bytes.saturating_add(o.wasted_bytes);
        self.time_ns += o.time_ns;
        self.measured_accesses += o.measured_accesses;
        self.measured_bytes += o.measured_bytes;
        self.measured_excess_bytes += o.measured_excess_bytes;
        self.stall_ns += o.stall_ns;
        self.stall_known_ns += o.stall_known_ns;
    }

    /// Access efficiency from the hardware pass: ideal / measured sectors (1 = every
    /// sector fully used); `None` without measured accesses.
    pub fn efficiency(&self) -> Option<f64> {
        (self.measured_accesses > 0 && self.measured_bytes > 0.0)
            .then(|| (1.0 - self.measured_excess_bytes / self.measured_bytes).clamp(0.0, 1.0))
    }

    /// Share of the warp cycles of the kernels touching it spent waiting on global memory
    /// (long scoreboard), time-weighted; `None` when not collected.
    pub fn long_scoreboard_share(&self) -> Option<f64> {
        (self.stall_known_ns > 0.0).then(|| self.stall_ns / self.stall_known_ns)
    }

    /// Excess traffic: measured where measured, else modelled.
    pub fn excess_bytes(&self) -> f64 {
        if self.measured_accesses > 0 {
            self.measured_excess_bytes
        } else {
            self.wasted_bytes as f64
        }
    }
}

/// One tensor argument of an attributed op.
#[derive(Debug, Clone, Serialize)]
pub struct Access {
    /// The tensor (index into [`Forest::nodes`]).
    pub tensor: u32,
    /// Written (an output, or an in-place argument), else read.
    pub write: bool,
    /// Modelled bytes in the kernel's iteration order.
    pub bytes: u64,
    /// Bytes a dense layout would touch.
    pub ideal: u64,
}

/// An execution-trace op with GPU work, its tensor accesses and its kernels.
#[derive(Debug, Clone, Serialize)]
pub struct OpAccess {
    /// Execution-trace node id.
    pub et_node: i64,
    /// The linked Kineto op (index into `Profile::ops`).
    pub op: Option<u32>,
    /// Op name.
    pub name: Name,
    /// GEMM, convolution or attention (kernels that take strided operands natively).
    pub natively_strided: bool,
    /// Its tensor arguments.
    pub accesses: Vec<Access>,
    /// GPU activities attributed to it (indices into `Profile::gpu`).
    pub gpu: Vec<u32>,
    /// Their time, ns.
    pub gpu_ns: i64,
    /// Measured sectors × 32 B (when every kernel was measured).
    pub measured_bytes: Option<f64>,
    /// Measured excess over the ideal sectors × 32 B (when every kernel was measured).
    pub measured_excess_bytes: Option<f64>,
}

impl OpAccess {
    /// Modelled excess bytes over all its arguments.
    pub fn wasted_bytes(&self) -> u64 {
        self.accesses
            .iter()
            .map(|a| a.bytes.saturating_sub(a.ideal))
            .sum()
    }

    /// Dense bytes over all its arguments.
    pub fn ideal_bytes(&self) -> u64 {
        self.accesses.iter().map(|a| a.ideal).sum()
    }
}

/// One tensor of the forest.
#[derive(Debug, Clone, Serialize)]
pub struct TensorNode {
    /// Execution-trace tensor id.
    pub tensor_id: u64,
    /// Storage id (shared with its root).
    pub storage_id: u64,
    /// Device as written (`cuda:0`).
    pub device: Name,
    /// Element type as written (`float`).
    pub dtype: Name,
    /// Bytes per element.
    pub itemsize: u32,
    /// Sizes.
    pub shape: Vec<i64>,
    /// Strides, elements (empty when not recorded).
    pub strides: Vec<i64>,
    /// Offset into the storage, elements.
    pub offset_elems: u64,
    /// Elements.
    pub numel: u64,
    /// Layout class.
    pub layout: Layout,
    /// How it relates to its parent.
    pub relation: Relation,
    /// Parent tensor (index into `Forest::nodes`); `None` for a root.
    pub parent: Option<u32>,
    /// Its root (itself for a root).
    pub root: u32,
    /// Views made from it, in creation order.
    pub children: Vec<u32>,
    /// The op that made it; `None` when it existed before the trace or no recorded op made it.
    pub created_by: Option<Creator>,
    /// First execution-trace node id that names it.
    pub first_use: i64,
    /// Last execution-trace node id that names it.
    pub last_use: i64,
    /// Roots: elements of the storage lifetime as far as known (the base's extent, or
    /// for a base made before the trace, the furthest element any of its tensors reach).
    pub storage_elems: u64,
    /// Roots: true when a recorded op allocated it, so `storage_elems` is its size.
    pub storage_known: bool,
    /// Traffic through this tensor itself.
    pub traffic: Traffic,
    /// Traffic through it and every view below it.
    pub subtree: Traffic,
}

impl TensorNode {
    /// Bytes its elements span.
    pub fn bytes(&self) -> u64 {
        self.numel.saturating_mul(self.itemsize as u64)
    }

    /// `#13 f32[8192,8192] transposed [1,8192]`: id, shape, layout and strides (findings).
    pub fn describe(&self) -> String {
        let strides: Vec<String> = self.strides.iter().map(|s| s.to_string()).collect();
        format!(
            "#{} {} {} [{}]",
            self.tensor_id,
            shape_text(self),
            self.layout.label(),
            strides.join(",")
        )
    }

    /// The op (and line) that made it, `not recorded` when none did (findings).
    pub fn made_by(&self) -> String {
        self.created_by
            .as_ref()
            .map_or_else(|| "not recorded".into(), Creator::text)
    }
}

/// Totals of the attribution.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Attribution {
    /// What the attribution covers, in words (the execution-trace step).
    pub window: String,
    /// Ops with GPU work attributed.
    pub ops: u64,
    /// GPU time attributed to tensors, ns.
    pub attributed_ns: i64,
    /// GPU time of ops in the execution trace with no tensor argument, ns.
    pub unattributed_ns: i64,
    /// Modelled bytes over all accesses.
    pub bytes: u64,
    /// Modelled excess bytes of non-contiguous access.
    pub wasted_bytes: u64,
    /// GPU activities attributed.
    pub kernels: u64,
    /// Of those, with hardware counters (own row or their signature's).
    pub measured_kernels: u64,
    /// Measured global sectors × 32 B of the fully measured ops.
    pub measured_bytes: f64,
    /// Measured excess sectors × 32 B of the fully measured ops.
    pub measured_excess_bytes: f64,
}

/// The tensor forest with modelled traffic.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Forest {
    /// Tensors, in order of first appearance (a parent before its children).
    pub nodes: Vec<TensorNode>,
    /// Base tensors (indices into `nodes`), in order of first appearance.
    pub roots: Vec<u32>,
    /// Storage lifetimes split because a new base appeared on a reused storage id.
    pub storage_splits: u64,
    /// Tensors first seen as an argument and hung under a live base ([`Relation::Untracked`]).
    pub untracked: u64,
    /// Traffic attribution totals.
    pub attribution: Attribution,
    /// The attributed ops in execution-trace order, with their accesses.
    #[serde(skip)]
    pub ops: Vec<OpAccess>,
}

struct Builder<'a> {
    et: &'a ExecTrace,
    p: &'a Profile,
    f: Forest,
    by_tensor: HashMap<u64, u32>,
    live: HashMap<u64, u32>,
    by_id: HashMap<i64, usize>,
    /// Per ET node: each read and write.
    args: Vec<Vec<Access>>,
}

/// Build the forest and attribute traffic; `None` without an execution trace or tensors.
pub fn build(p: &Profile) -> Option<Forest> {
    let et = p.execution_trace.as_ref()?;
    if et.tensor_count() == 0 {
        return None;
    }
    let mut b = Builder {
        et,
        p,
        f: Forest::default(),
        by_tensor: HashMap::new(),
        live: HashMap::new(),
        by_id: et
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id, i))
            .collect(),
        args: vec![Vec::new(); et.nodes.len()],
    };
    for (ni, n) in et.nodes.iter().enumerate() {
        // GEMM, convolution and attention kernels read transposed operands natively
        // (cuBLAS transpose flags, cuDNN layouts): no modelled excess for their arguments.
        let natively_strided = super::flops::has_formula(&n.name);
        // The walk follows the first output's memory order (see the module doc).
        let leader = n.outputs.first();
        let order = leader.and_then(|o| iteration_order(&o.shape, &o.strides));
        let modelled = |t: &EtTensor| {
            // Operands of the output's shape walk in its order; the input of a reduction
            // (more elements than its output) in its own memory order; others logically.
            let own;
            let walk = match leader {
                Some(o) if o.shape == t.shape => order.as_deref(),
                Some(o) if t.numel > o.numel.saturating_mul(2) => {
                    own = iteration_order(&t.shape, &t.strides);
                    own.as_deref()
                }
                _ => None,
            };
            let (bytes, ideal) = modelled_bytes_in_order(t, walk);
            if natively_strided {
                (ideal, ideal)
            } else {
                (bytes, ideal)
            }
        };
        let access = |tensor: u32, write: bool, t: &EtTensor| {
            let (bytes, ideal) = modelled(t);
            Access {
                tensor,
                write,
                bytes,
                ideal,
            }
        };
        let overwrite = OVERWRITE_OPS.contains(&bare(&n.name));
        let inplace_method = n.name.ends_with('_');
        for t in &n.inputs {
            let i = b.see_input(t, n);
            let read = !(t.alias == AliasKind::InPlace && (overwrite || !inplace_method));
            if read {
                b.args[ni].push(access(i, false, t));
            }
            let returned = n.outputs.iter().any(|o| o.tensor_id == t.tensor_id);
            if t.alias == AliasKind::InPlace && !returned {
                b.args[ni].push(access(i, true, t));
            }
        }
        let viewish = n.alias == AliasKind::View || is_view_op(&n.name);
        for t in &n.outputs {
            let i = b.see_output(t, n, viewish);
            b.args[ni].push(access(i, true, t));
        }
    }
    b.attribute();
    let mut f = b.f;
    for i in (0..f.nodes.len()).rev() {
        let own = f.nodes[i].traffic.clone();
        f.nodes[i].subtree.add(&own);
        if let Some(par) = f.nodes[i].parent {
            let sub = f.nodes[i].subtree.clone();
            f.nodes[par as usize].subtree.add(&sub);
        }
    }
    Some(f)
}

impl Builder<'_> {
    fn known(&self, t: &EtTensor) -> Option<u32> {
        let &i = self.by_tensor.get(&t.tensor_id)?;
        (self.f.nodes[i as usize].storage_id == t.storage_id).then_some(i)
    }

    fn touch(&mut self, i: u32, node_id: i64) {
        let n = &mut self.f.nodes[i as usize];
        n.first_use = n.first_use.min(node_id);
        n.last_use = n.last_use.max(node_id);
        let root = n.root;
        let end = n.offset_elems.saturating_add(
            max_index(&n.shape, &n.strides, n.numel).map_or(0, |m| m.saturating_add(1)),
        );
        let r = &mut self.f.nodes[root as usize];
        r.first_use = r.first_use.min(node_id);
        r.last_use = r.last_use.max(node_id);
        if !r.storage_known {
            r.storage_elems = r.storage_elems.max(end);
        }
    }

    fn see_input(&mut self, t: &EtTensor, n: &EtNode) -> u32 {
        if let Some(i) = self.known(t) {
            self.touch(i, n.id);
            return i;
        }
        // First seen as an argument: a view no recorded op made, or a tensor from before
        // the trace.
        if let Some(&r) = self.live.get(&t.storage_id) {
            let root = &self.f.nodes[r as usize];
            let end = t.offset_elems.saturating_add(
                max_index(&t.shape, &t.strides, t.numel).map_or(0, |m| m.saturating_add(1)),
            );
            if root.device == t.device && (!root.storage_known || end <= root.storage_elems) {
                self.f.untracked += 1;
                return self.push(t, n.id, Some(r), Relation::Untracked, None);
            }
        }
        self.new_root(t, n.id, None)
    }

    fn see_output(&mut self, t: &EtTensor, n: &EtNode, viewish: bool) -> u32 {
        if let Some(i) = self.known(t) {
            self.touch(i, n.id);
            return i;
        }
        let parent = n
            .inputs
            .iter()
            .filter(|x| x.storage_id == t.storage_id && x.device == t.device)
            .find_map(|x| self.known(x));
        let creator = self.creator(n, t.tensor_id);
        match parent {
            Some(par) => {
                let rel = if viewish {
                    Relation::View
                } else {
                    Relation::Alias
                };
                self.push(t, n.id, Some(par), rel, Some(creator))
            }
            None => self.new_root(t, n.id, Some(creator)),
        }
    }

    fn new_root(&mut self, t: &EtTensor, node_id: i64, creator: Option<Creator>) -> u32 {
        if self.live.contains_key(&t.storage_id) {
            self.f.storage_splits += 1;
        }
        let i = self.push(t, node_id, None, Relation::Base, creator);
        self.live.insert(t.storage_id, i);
        i
    }

    fn push(
        &mut self,
        t: &EtTensor,
        node_id: i64,
        parent: Option<u32>,
        relation: Relation,
        created_by: Option<Creator>,
    ) -> u32 {
        let i = self.f.nodes.len() as u32;
        let root = parent.map_or(i, |p| self.f.nodes[p as usize].root);
        let end = t.offset_elems.saturating_add(
            max_index(&t.shape, &t.strides, t.numel).map_or(0, |m| m.saturating_add(1)),
        );
        self.f.nodes.push(TensorNode {
            tensor_id: t.tensor_id,
            storage_id: t.storage_id,
            device: t.device.clone(),
            dtype: t.dtype.clone(),
            itemsize: t.itemsize,
            shape: t.shape.clone(),
            strides: t.strides.clone(),
            offset_elems: t.offset_elems,
            numel: t.numel,
            layout: Layout::of(&t.shape, &t.strides),
            relation,
            parent,
            root,
            children: Vec::new(),
            storage_known: parent.is_none() && created_by.is_some(),
            created_by,
            first_use: node_id,
            last_use: node_id,
            storage_elems: if parent.is_none() { end } else { 0 },
            traffic: Traffic::default(),
            subtree: Traffic::default(),
        });
        match parent {
            Some(p) => self.f.nodes[p as usize].children.push(i),
            None => self.f.roots.push(i),
        }
        self.by_tensor.insert(t.tensor_id, i);
        self.touch(i, node_id);
        i
    }

    /// The op that made `tensor` in node `n`: `n`, lifted to the outermost enclosing node
    /// that also returns the tensor without taking it.
    fn creator(&self, n: &EtNode, tensor: u64) -> Creator {
        let mut best = n;
        let mut hops = 0;
        while let Some(par) = best
            .parent
            .and_then(|id| self.by_id.get(&id))
            .and_then(|&i| self.et.nodes.get(i))
        {
            hops += 1;
            let returns = par.outputs.iter().any(|o| o.tensor_id == tensor);
            let takes = par.inputs.iter().any(|o| o.tensor_id == tensor);
            if !returns || takes || hops > 64 {
                break;
            }
            best = par;
        }
        Creator {
            name: best.name.clone(),
            et_node: best.id,
            op: best.op,
            source: best
                .op
                .and_then(|o| self.p.user_frame(o))
                .map(|f| f.name.to_string()),
        }
    }

    fn node_index_of_op(&self, op: u32) -> Option<usize> {
        let i = self.et.by_op.binary_search_by_key(&op, |&(o, _)| o).ok()?;
        Some(self.et.by_op[i].1 as usize)
    }

    fn attribute(&mut self) {
        let mut op_gpu: HashMap<usize, Vec<u32>> = HashMap::new();
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for (gi, g) in self.p.gpu.iter().enumerate() {
            let Some(op) = g.op else { continue };
            let mut target = None;
            let mut any = None;
            for a in self.p.op_ancestors(op) {
                if let Some(ni) = self.node_index_of_op(a) {
                    any.get_or_insert(ni);
                    if !self.args[ni].is_empty() {
                        target = Some(ni);
                        break;
                    }
                }
            }
            match target {
                Some(ni) => {
                    op_gpu.entry(ni).or_default().push(gi as u32);
                    lo = lo.min(g.ts_ns);
                    hi = hi.max(g.end_ns());
                }
                None if any.is_some() => self.f.attribution.unattributed_ns += g.dur_ns,
                None => {}
            }
        }
        let mut ops: Vec<(usize, Vec<u32>)> = op_gpu.into_iter().collect();
        ops.sort_unstable();
        for (ni, gpu) in ops {
            let ns: i64 = gpu.iter().map(|&g| self.p.gpu[g as usize].dur_ns).sum();
            let total: u64 = self.args[ni].iter().map(|m| m.bytes).sum();
            if total == 0 {
                self.f.attribution.unattributed_ns += ns;
                continue;
            }
            let m = self.measure(&gpu);
            let full = m.kernels as usize == gpu.len();
            let n = &self.et.nodes[ni];
            let op = OpAccess {
                et_node: n.id,
                op: n.op,
                name: n.name.clone(),
                natively_strided: super::flops::has_formula(&n.name),
                accesses: std::mem::take(&mut self.args[ni]),
                gpu,
                gpu_ns: ns,
                measured_bytes: full.then_some(m.bytes),
                measured_excess_bytes: full.then_some(m.excess),
            };
            let a = &mut self.f.attribution;
            a.ops += 1;
            a.attributed_ns += ns;
            a.kernels += op.gpu.len() as u64;
            a.measured_kernels += m.kernels as u64;
            if full {
                a.measured_bytes += m.bytes;
                a.measured_excess_bytes += m.excess;
            }
            let wasted = op.wasted_bytes();
            let ideal_total = op.ideal_bytes();
            for x in &op.accesses {
                let share = x.bytes as f64 / total as f64;
                let waste = x.bytes.saturating_sub(x.ideal);
                let tr = &mut self.f.nodes[x.tensor as usize].traffic;
                tr.accesses += 1;
                tr.bytes = tr.bytes.saturating_add(x.bytes);
                tr.ideal_bytes = tr.ideal_bytes.saturating_add(x.ideal);
                tr.wasted_bytes = tr.wasted_bytes.saturating_add(waste);
                tr.time_ns += ns as f64 * share;
                if full {
                    // The dense part by dense bytes, the excess by modelled excess.
                    let excess = m.excess
                        * if wasted > 0 {
                            waste as f64 / wasted as f64
                        } else {
                            share
                        };
                    let ideal_share = if ideal_total > 0 {
                        x.ideal as f64 / ideal_total as f64
                    } else {
                        share
                    };
                    tr.measured_accesses += 1;
                    tr.measured_bytes += (m.bytes - m.excess).max(0.0) * ideal_share + excess;
                    tr.measured_excess_bytes += excess;
                }
                tr.stall_ns += m.stall_ns * share;
                tr.stall_known_ns += m.stall_known_ns * share;
            }
            let a = &mut self.f.attribution;
            a.bytes = a.bytes.saturating_add(total);
            a.wasted_bytes = a.wasted_bytes.saturating_add(wasted);
            self.f.ops.push(op);
        }
        let step = self
            .p
            .bundle
            .as_ref()
            .and_then(|b| b.execution_trace_step)
            .map(|k| format!("ProfilerStep#{k}"));
        self.f.attribution.window = match step {
            Some(s) => format!("{s}, the step recorded with the execution trace"),
            None if lo <= hi => format!(
                "the {:.2} ms the execution trace covers",
                hi.saturating_sub(lo) as f64 / 1e6
            ),
            None => "the window the execution trace covers".to_string(),
        };
    }
}

/// Hardware counters of an op's kernels, summed.
#[derive(Default)]
struct Measured {
    kernels: u32,
    bytes: f64,
    excess: f64,
    stall_ns: f64,
    stall_known_ns: f64,
}

impl Builder<'_> {
    fn measure(&self, gpu: &[u32]) -> Measured {
        let mut m = Measured::default();
        let Some(hw) = &self.p.hardware else {
            return m;
        };
        for &g in gpu {
            let Some(r) = hw.by_gpu.get(g as usize).copied().flatten() else {
                continue;
            };
            let Some(k) = hw.kernels.get(r as usize) else {
                continue;
            };
            let dur = self.p.gpu[g as usize].dur_ns as f64;
            if let Some(share) = k.long_scoreboard_share() {
                m.stall_ns += dur * share;
                m.stall_known_ns += dur;
            }
            if let Some(e) = super::efficiency::kernel_efficiency(r as usize, k) {
                m.kernels += 1;
                m.bytes += e.measured_sectors * super::efficiency::SECTOR_BYTES;
                m.excess += e.excess_bytes;
            }
        }
        m
    }
}

impl Forest {
    /// Check the forest's invariants; returns one line per violation (empty when sound):
    /// a view's storage is its root's; every tensor's offset + extent stays inside its
    /// root's storage; parent links have no cycles; every tensor is reachable from
    /// exactly one root, through its parent's `children`.
    pub fn check(&self) -> Vec<String> {
        let mut bad = Vec::new();
        let n = self.nodes.len();
        for (i, t) in self.nodes.iter().enumerate() {
            let Some(root) = self.nodes.get(t.root as usize) else {
                bad.push(format!("tensor {}: root index out of range", t.tensor_id));
                continue;
            };
            if root.parent.is_some() {
                bad.push(format!("tensor {}: its root has a parent", t.tensor_id));
            }
            if t.storage_id != root.storage_id {
                bad.push(format!(
                    "tensor {}: storage {} is not its root's {}",
                    t.tensor_id, t.storage_id, root.storage_id
                ));
            }
            if let Some(m) = max_index(&t.shape, &t.strides, t.numel) {
                let end = t.offset_elems.saturating_add(m).saturating_add(1);
                if end > root.storage_elems {
                    bad.push(format!(
                        "tensor {}: reaches element {end} of storage {} holding {}",
                        t.tensor_id, t.storage_id, root.storage_elems
                    ));
                }
            }
            // Walk up: must reach the recorded root within n steps.
            let mut cur = i;
            let mut steps = 0;
            while let Some(p) = self.nodes[cur].parent {
                if !self
                    .nodes
                    .get(p as usize)
                    .is_some_and(|pn| pn.children.contains(&(cur as u32)))
                {
                    bad.push(format!(
                        "tensor {}: parent does not list it",
                        self.nodes[cur].tensor_id
                    ));
                    break;
                }
                cur = p as usize;
                steps += 1;
                if steps > n {
                    bad.push(format!("tensor {}: cycle in parent links", t.tensor_id));
                    break;
                }
            }
            if steps <= n && cur != t.root as usize {
                bad.push(format!(
                    "tensor {}: reaches another root than its own",
                    t.tensor_id
                ));
            }
        }
        // Reachability from the roots, each tensor exactly once.
        let mut seen = vec![0u32; n];
        let mut stack: Vec<u32> = self.roots.clone();
        while let Some(i) = stack.pop() {
            let Some(s) = seen.get_mut(i as usize) else {
                bad.push(format!("index {i} out of range"));
                continue;
            };
            *s += 1;
            if *s > 1 {
                bad.push(format!(
                    "tensor {} reached twice",
                    self.nodes[i as usize].tensor_id
                ));
                continue;
            }
            stack.extend(self.nodes[i as usize].children.iter().copied());
        }
        for (i, &s) in seen.iter().enumerate() {
            if s == 0 {
                bad.push(format!(
                    "tensor {} unreachable from the roots",
                    self.nodes[i].tensor_id
                ));
            }
        }
        bad
    }

    /// Base tensors ranked by `key` of their subtree traffic (largest first, ties by
    /// creation order), those with a non-zero key only.
    pub fn top_roots(&self, key: impl Fn(&Traffic) -> u64, n: usize) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .roots
            .iter()
            .copied()
            .filter(|&r| key(&self.nodes[r as usize].subtree) > 0)
            .collect();
        v.sort_by_key(|&r| (std::cmp::Reverse(key(&self.nodes[r as usize].subtree)), r));
        v.truncate(n);
        v
    }

    /// Views (non-roots) in the forest.
    pub fn views(&self) -> usize {
        self.nodes.len() - self.roots.len()
    }
}

/// Short dtype name (`float` → `f32`).
pub fn short_dtype(d: &str) -> &str {
    match d {
        "float" => "f32",
        "double" => "f64",
        "c10::Half" | "half" => "f16",
        "c10::BFloat16" => "bf16",
        "long int" | "long" | "int64_t" => "i64",
        "int" => "i32",
        "short int" | "short" => "i16",
        "signed char" => "i8",
        "unsigned char" => "u8",
        "bool" => "bool",
        "c10::complex<float>" => "c64",
        _ => d,
    }
}

/// `f32[32,3,32,32]`.
pub fn shape_text(t: &TensorNode) -> String {
    let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    format!("{}[{}]", short_dtype(&t.dtype), dims.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EtNode, ExecTrace};

    fn t(id: u64, storage: u64, shape: &[i64], strides: &[i64]) -> EtTensor {
        EtTensor {
            arg: 0,
            list_index: None,
            tensor_id: id,
            storage_id: storage,
            offset_elems: 0,
            numel: shape.iter().product::<i64>().max(0) as u64,
            itemsize: 4,
            device: "cuda:0".into(),
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dtype: "float".into(),
            alias: AliasKind::None,
        }
    }

    fn node(id: i64, name: &str, inputs: Vec<EtTensor>, outputs: Vec<EtTensor>) -> EtNode {
        EtNode {
            id,
            name: name.into(),
            parent: None,
            rf_id: None,
            seq_id: None,
            tid: None,
            op: None,
            op_schema: None,
            alias: AliasKind::None,
            inputs,
            outputs,
        }
    }

    fn forest(nodes: Vec<EtNode>) -> Forest {
        let p = Profile {
            execution_trace: Some(ExecTrace {
                nodes,
                ..Default::default()
            }),
            ..Default::default()
        };
        build(&p).expect("forest")
    }

    #[test]
    fn reused_storage_ids_do_not_merge_unrelated_tensors() {
        // a = empty(4,8) on storage 7; v = a.t(); a freed; b = empty(2,2) reuses
        // storage 7; w = b.view(4); an op takes a tensor on storage 7 of b's size.
        let f = forest(vec![
            node(1, "aten::empty", vec![], vec![t(1, 7, &[4, 8], &[8, 1])]),
            node(
                2,
                "aten::t",
                vec![t(1, 7, &[4, 8], &[8, 1])],
                vec![t(2, 7, &[8, 4], &[1, 8])],
            ),
            node(3, "aten::empty", vec![], vec![t(3, 7, &[2, 2], &[2, 1])]),
            node(
                4,
                "aten::view",
                vec![t(3, 7, &[2, 2], &[2, 1])],
                vec![t(4, 7, &[4], &[1])],
            ),
            node(
                5,
                "aten::relu",
                vec![t(4, 7, &[4], &[1])],
                vec![t(5, 9, &[4], &[1])],
            ),
            // A storage-7 tensor too big for b's lifetime: a new base, not b's view.
            node(
                6,
                "aten::neg",
                vec![t(6, 7, &[16], &[1])],
                vec![t(7, 10, &[16], &[1])],
            ),
        ]);
        assert!(f.check().is_empty(), "{:?}", f.check());
        let on7: Vec<&TensorNode> = f
            .roots
            .iter()
            .map(|&r| &f.nodes[r as usize])
            .filter(|n| n.storage_id == 7)
            .collect();
        assert_eq!(on7.len(), 3, "three lifetimes of storage 7");
        assert_eq!(f.storage_splits, 2);
        let a = &f.nodes[0];
        assert_eq!(a.children.len(), 1);
        let v = &f.nodes[a.children[0] as usize];
        assert_eq!(
            (v.tensor_id, v.layout, v.relation),
            (2, Layout::Transposed, Relation::View)
        );
        let b = on7[1];
        assert_eq!(b.tensor_id, 3);
        assert_eq!(b.children.len(), 1);
        assert_eq!(f.nodes[b.children[0] as usize].tensor_id, 4);
        assert_eq!(b.storage_elems, 4);
        assert_eq!(on7[2].tensor_id, 6);
        assert!(on7[2].created_by.is_none());
        // Lifetimes do not overlap.
        assert!(a.last_use < b.first_use);
    }

    #[test]
    fn unsafe_view_is_an_alias_and_creator_lifts_to_the_caller() {
        let mut outer = node(
            10,
            "aten::reshape",
            vec![t(1, 5, &[2, 3], &[1, 2])],
            vec![t(3, 6, &[6], &[1])],
        );
        outer.parent = None;
        let mut clone = node(
            11,
            "aten::clone",
            vec![t(1, 5, &[2, 3], &[1, 2])],
            vec![t(2, 6, &[2, 3], &[3, 1])],
        );
        clone.parent = Some(10);
        let mut uv = node(
            12,
            "aten::_unsafe_view",
            vec![t(2, 6, &[2, 3], &[3, 1])],
            vec![t(3, 6, &[6], &[1])],
        );
        uv.parent = Some(10);
        // File order is exit order: inner ops first.
        let f = forest(vec![clone, uv, outer]);
        assert!(f.check().is_empty());
        let v = f.nodes.iter().find(|n| n.tensor_id == 3).expect("view");
        assert_eq!(v.relation, Relation::View);
        assert_eq!(
            v.created_by.as_ref().map(|c| &*c.name),
            Some("aten::reshape")
        );
        let base = &f.nodes[v.root as usize];
        assert_eq!(base.tensor_id, 2);
    }

    #[test]
    fn layouts() {
        assert_eq!(Layout::of(&[2, 3], &[3, 1]), Layout::Contiguous);
        assert_eq!(
            Layout::of(&[32, 3, 32, 32], &[3072, 1024, 1, 32]),
            Layout::Transposed
        );
        assert_eq!(
            Layout::of(&[8, 64, 7, 7], &[3136, 1, 448, 64]),
            Layout::ChannelsLast
        );
        assert_eq!(Layout::of(&[4, 3], &[0, 1]), Layout::Expanded);
        assert_eq!(Layout::of(&[4, 3], &[6, 1]), Layout::Strided);
        assert_eq!(Layout::of(&[4, 3], &[1, 1]), Layout::Overlapping);
        assert_eq!(Layout::of(&[4, 3], &[]), Layout::Unknown);
        assert_eq!(Layout::of(&[], &[]), Layout::Contiguous);
    }

    #[test]
    fn sector_model() {
        // Dense: no waste.
        assert_eq!(modelled_bytes(&t(1, 1, &[32, 32], &[32, 1])), (4096, 4096));
        // Transposed f32 [32,32]: every element its own sector along the last dim.
        assert_eq!(
            modelled_bytes(&t(1, 1, &[32, 32], &[1, 32])),
            (32 * 32 * 32, 4096)
        );
        // The probe's x.transpose(2, 3): 8× a dense read.
        let (b, ideal) = modelled_bytes(&t(1, 1, &[32, 3, 32, 32], &[3072, 1024, 1, 32]));
        assert_eq!((b, ideal), (98304 * 32, 98304 * 4));
        // Broadcast adds nothing.
        assert_eq!(modelled_bytes(&t(1, 1, &[1024, 64], &[0, 1])), (256, 256));
        // Every other element: 2× the dense sectors.
        assert_eq!(modelled_bytes(&t(1, 1, &[64], &[2])), (512, 256));
        // Empty.
        assert_eq!(modelled_bytes(&t(1, 1, &[0, 4], &[4, 1])), (0, 0));
    }

    #[test]
    fn walks_in_the_outputs_order() {
        // `b.t() + a`: the output takes b.t()'s layout, so a is walked across its rows
        // and b.t() densely; `a + b.t()` the other way round.
        let bt = t(2, 2, &[64, 64], &[1, 64]);
        let a = t(1, 1, &[64, 64], &[64, 1]);
        let order = iteration_order(&[64, 64], &[1, 64]).expect("order");
        assert_eq!(order, vec![1, 0]);
        let dense = 64 * 64 * 4;
        assert_eq!(modelled_bytes_in_order(&bt, Some(&order)), (dense, dense));
        assert_eq!(
            modelled_bytes_in_order(&a, Some(&order)),
            (64 * 64 * 32, dense)
        );
        let logical = iteration_order(&[64, 64], &[64, 1]).expect("order");
        assert_eq!(logical, vec![0, 1]);
        assert_eq!(modelled_bytes_in_order(&a, Some(&logical)), (dense, dense));
        // Size-1 dims keep their place; a broadcast stays free.
        assert_eq!(
            iteration_order(&[1, 8, 4], &[32, 1, 8]),
            Some(vec![0, 2, 1])
        );
        assert_eq!(iteration_order(&[8], &[1]), None);
    }

    #[test]
    fn hostile_shapes_do_not_panic() {
        let big = i64::MAX;
        for (shape, strides) in [
            (vec![big, big, big], vec![big, big, 1]),
            (vec![i64::MIN, 3], vec![i64::MIN, -1]),
            (vec![-5, 7], vec![3, 0]),
            (vec![big], vec![]),
        ] {
            let mut x = t(1, 1, &[1], &[1]);
            x.numel = u64::MAX;
            x.shape = shape.clone();
            x.strides = strides.clone();
            let _ = modelled_bytes(&x);
            let _ = Layout::of(&shape, &strides);
            let _ = max_index(&shape, &strides, u64::MAX);
        }
    }
}
