//! What the host did while the GPU waited: helpers shared by the CPU-residency (C),
//! data-pipeline (D) and allocator (A) rules. Not a rule.
//!
//! Inputs: the Profile and the timeline's GPU idle gaps. Outputs: per-op GPU work
//! launched (the op and everything under it), the part of a host range during which the
//! GPU sat idle, the step a time falls in, the main thread, and tensor sizes from
//! recorded shapes. It computes no findings and sets no thresholds.

use crate::analysis::flops::{parse_dims, parse_types, Dtype};
use crate::analysis::timeline::overlap;
use crate::model::{is_user_frame, CpuOp, OpKind, Profile, RuntimeKind, Step, StepSource};

/// GPU work each op launched, itself or through the ops nested under it.
pub(crate) struct Launched {
    /// GPU time of the kernels, memcpys and memsets, ns, per op index.
    pub gpu_ns: Vec<i64>,
    /// Launch-type runtime calls (kernel, graph, memcpy, memset) and recorded GPU
    /// activities, per op index: 0 means the op ran on the host only.
    pub launches: Vec<u32>,
}

impl Launched {
    /// Compute for every op of `p`.
    pub fn of(p: &Profile) -> Launched {
        let n = p.ops.len();
        let mut l = Launched {
            gpu_ns: vec![0; n],
            launches: vec![0; n],
        };
        // Parents normally come before their children: then each op's own totals can be
        // added up bottom-up in one pass instead of walking every ancestor chain.
        let parents_first = p
            .ops
            .iter()
            .enumerate()
            .all(|(i, o)| o.parent.is_none_or(|q| (q as usize) < i));
        if !parents_first {
            return Self::of_by_ancestors(p, l);
        }
        for g in &p.gpu {
            let Some(op) = g.op else { continue };
            if let Some(x) = l.gpu_ns.get_mut(op as usize) {
                *x += g.dur_ns.max(0);
            }
            if g.runtime.is_none() {
                if let Some(c) = l.launches.get_mut(op as usize) {
                    *c += 1;
                }
            }
        }
        for r in &p.runtime {
            if !is_launch(r.kind) {
                continue;
            }
            let Some(op) = r.op else { continue };
            if let Some(c) = l.launches.get_mut(op as usize) {
                *c += 1;
            }
        }
        for i in (0..n).rev() {
            if let Some(q) = p.ops[i].parent {
                let (g, c) = (l.gpu_ns[i], l.launches[i]);
                l.gpu_ns[q as usize] += g;
                l.launches[q as usize] += c;
            }
        }
        l
    }

    /// [`Launched::of`] for ops in any order: add each activity to every ancestor.
    fn of_by_ancestors(p: &Profile, mut l: Launched) -> Launched {
        for g in &p.gpu {
            // Activities without a runtime call would otherwise be invisible below.
            let Some(op) = g.op else { continue };
            for a in p.op_ancestors(op) {
                if let Some(x) = l.gpu_ns.get_mut(a as usize) {
                    *x += g.dur_ns.max(0);
                }
                if g.runtime.is_none() {
                    if let Some(c) = l.launches.get_mut(a as usize) {
                        *c += 1;
                    }
                }
            }
        }
        for r in &p.runtime {
            let Some(op) = r.op.filter(|_| is_launch(r.kind)) else {
                continue;
            };
            for a in p.op_ancestors(op) {
                if let Some(c) = l.launches.get_mut(a as usize) {
                    *c += 1;
                }
            }
        }
        l
    }

    /// True when op `idx` (and everything under it) launched no GPU work.
    pub fn host_only(&self, idx: u32) -> bool {
        self.launches.get(idx as usize).is_none_or(|&c| c == 0)
            && self.gpu_ns.get(idx as usize).is_none_or(|&g| g == 0)
    }
}

/// Launch-type runtime calls: kernel, graph, memcpy and memset launches.
/// Whether a runtime call puts work on the GPU (a kernel, a graph, a copy, a memset).
pub(crate) fn is_launch(k: RuntimeKind) -> bool {
    matches!(
        k,
        RuntimeKind::Launch | RuntimeKind::GraphLaunch | RuntimeKind::Memcpy | RuntimeKind::Memset
    )
}

/// Time of [lo, hi) during which the GPU was idle inside a step, ns.
pub(crate) fn idle_overlap(gaps: &[(i64, i64)], lo: i64, hi: i64) -> i64 {
    if hi <= lo {
        return 0;
    }
    overlap(gaps, lo, hi)
}

/// Time of [lo, hi) during which the GPU ran nothing but the activities `own` (e.g. the
/// copy a host call waits for), ns: the idle time plus the part of `own` inside the range.
/// A host call that blocks while the GPU computes other work costs nothing; one that
/// blocks while the GPU idles, or only runs the copy it waits for, costs its time.
pub(crate) fn not_computing(
    p: &Profile,
    gaps: &[(i64, i64)],
    lo: i64,
    hi: i64,
    own: &[u32],
) -> i64 {
    if hi <= lo {
        return 0;
    }
    let idle = idle_overlap(gaps, lo, hi);
    let busy = (hi - lo) - idle;
    let own_ns: i64 = own
        .iter()
        .filter_map(|&g| p.gpu.get(g as usize))
        .map(|g| (g.end_ns().min(hi) - g.ts_ns.max(lo)).max(0))
        .sum();
    idle + own_ns.min(busy)
}

/// The blocking syncs (`RuntimeKind::Sync`) by start time: those that start inside a
/// host window, by binary search (a scan of every runtime call per window is quadratic
/// on long traces).
pub(crate) struct SyncsByTime(Vec<(i64, u32)>);

impl SyncsByTime {
    pub(crate) fn of(p: &Profile) -> SyncsByTime {
        let mut v: Vec<(i64, u32)> = (0..p.runtime.len() as u32)
            .filter(|&r| p.runtime[r as usize].kind == RuntimeKind::Sync)
            .map(|r| (p.runtime[r as usize].ts_ns, r))
            .collect();
        v.sort_unstable();
        SyncsByTime(v)
    }

    /// The syncs (index into `Profile::runtime`) that start in `[a, b)`.
    pub(crate) fn within(&self, a: i64, b: i64) -> impl Iterator<Item = u32> + '_ {
        let from = self.0.partition_point(|s| s.0 < a);
        let to = self.0.partition_point(|s| s.0 < b).max(from);
        self.0[from..to].iter().map(|s| s.1)
    }
}

/// Host time in the runtime call `ri` and in a blocking sync that follows it on the
/// same thread within 50 µs, as (start, end) of the blocked window.
pub(crate) fn blocked_window(p: &Profile, ri: u32) -> Option<(i64, i64)> {
    let r = p.runtime.get(ri as usize)?;
    let end = p
        .runtime
        .get(ri as usize + 1..)?
        .iter()
        .take_while(|s| s.ts_ns <= r.end_ns() + 50_000)
        .find(|s| s.tid == r.tid && s.pid == r.pid && s.kind == RuntimeKind::Sync)
        .map_or(r.end_ns(), |s| s.end_ns().max(r.end_ns()));
    Some((r.ts_ns, end))
}

/// Torch's name of a dtype (`float32`).
pub(crate) fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::F64 => "float64",
        Dtype::F32 => "float32",
        Dtype::F16 => "float16",
        Dtype::BF16 => "bfloat16",
        Dtype::F8 => "float8",
        Dtype::F4 => "float4",
        Dtype::I64 => "int64",
        Dtype::I32 => "int32",
        Dtype::I16 => "int16",
        Dtype::I8 => "int8",
        Dtype::U8 => "uint8",
        Dtype::Bool => "bool",
        Dtype::C64 => "complex64",
        Dtype::C128 => "complex128",
        Dtype::Other => "other",
    }
}

/// The end of the GPU idle stretch that contains `t` (gaps that touch, e.g. across a
/// step boundary, are one stretch), or `t` when the GPU was busy at `t`.
pub(crate) fn idle_until(gaps: &[(i64, i64)], t: i64) -> i64 {
    let i = gaps.partition_point(|g| g.0 <= t);
    let Some(j) = i.checked_sub(1) else { return t };
    match gaps.get(j) {
        Some(&(a, b)) if a <= t && t < b => {
            let mut end = b;
            for &(c, d) in &gaps[j + 1..] {
                if c > end {
                    break;
                }
                end = end.max(d);
            }
            end
        }
        _ => t,
    }
}

/// The innermost Python frame enclosing time `ts` on a thread. Frames are sorted by
/// (pid, tid, start) and nested, so: the last one starting at or before `ts`, then up
/// its parents to one that is still open at `ts`.
pub(crate) fn frame_at(p: &Profile, pid: i64, tid: i64, ts: i64) -> Option<u32> {
    let n = p
        .python_frames
        .partition_point(|f| (f.pid, f.tid, f.ts_ns) <= (pid, tid, ts));
    let last = n.checked_sub(1)?;
    let f = p.python_frames.get(last)?;
    if f.pid != pid || f.tid != tid {
        return None;
    }
    let mut cur = Some(last as u32);
    while let Some(i) = cur {
        let f = p.python_frames.get(i as usize)?;
        if f.ts_ns <= ts && ts < f.end_ns() {
            return Some(i);
        }
        cur = f.parent;
    }
    None
}

/// The frames enclosing time `ts` on a thread, innermost first.
pub(crate) fn frames_at(
    p: &Profile,
    pid: i64,
    tid: i64,
    ts: i64,
) -> impl Iterator<Item = u32> + '_ {
    let mut cur = frame_at(p, pid, tid, ts);
    std::iter::from_fn(move || {
        let i = cur?;
        cur = p.python_frames.get(i as usize).and_then(|f| f.parent);
        Some(i)
    })
}

/// The user's source frame at time `ts` on a thread: the innermost enclosing Python
/// frame that is the user's code (see [`crate::model::is_user_frame`]).
pub(crate) fn user_frame_at(p: &Profile, pid: i64, tid: i64, ts: i64) -> Option<u32> {
    frames_at(p, pid, tid, ts).find(|&i| is_user_frame(&p.python_frames[i as usize].name))
}

/// True when [a, b) lies inside one of `ranges` (sorted by start, rarely overlapping).
pub(crate) fn inside_any(ranges: &[(i64, i64)], a: i64, b: i64) -> bool {
    let n = ranges.partition_point(|r| r.0 <= a);
    ranges[..n]
        .iter()
        .rev()
        .take(8)
        .any(|&(x, y)| a >= x && b <= y)
}

/// Index of the step that contains time `t`.
pub(crate) fn step_of(steps: &[Step], t: i64) -> Option<usize> {
    let i = steps.partition_point(|s| s.start_ns <= t).checked_sub(1)?;
    let s = steps.get(i)?;
    (t < s.end_ns).then_some(i)
}

/// A first step slower than this multiple of the others' median is warm-up.
const WARMUP_FACTOR: f64 = 2.0;

/// The steps the C/D/A rules average over: all of them, except a first step that took
/// more than twice the median of the others (profiler start-up, lazy initialisation,
/// autotuning, thread pools starting: costs a steady-state measurement never sees).
/// When no step marker was found (the whole trace is one step), the time before the
/// first GPU activity is left out instead: that is setup (CUDA initialisation, model
/// construction, data loading), not the loop.
pub(crate) struct Steady {
    /// Index of the first step averaged over (0 or 1).
    pub first: usize,
    /// Times before this are left out (ns).
    pub from_ns: i64,
    /// Number of steps averaged over (at least 1).
    pub n: f64,
    /// Why the first step was left out (empty when it was not).
    pub note: String,
}

impl Steady {
    /// Decide for the profile's steps.
    pub fn of(p: &Profile) -> Steady {
        let all = Steady {
            first: 0,
            from_ns: i64::MIN,
            n: p.steps.len().max(1) as f64,
            note: String::new(),
        };
        if p.step_source == StepSource::WholeTrace {
            let from_ns = p.gpu.iter().map(|g| g.ts_ns).min().unwrap_or(i64::MIN);
            let skipped = p
                .steps
                .first()
                .map_or(0, |s| from_ns.saturating_sub(s.start_ns));
            if skipped <= 0 {
                return all;
            }
            return Steady {
                from_ns,
                note: format!(
                    "; with no step markers, the {:.2} ms before the first GPU activity (setup) are left out",
                    skipped as f64 / 1e6
                ),
                ..all
            };
        }
        if p.steps.len() < 3 {
            return all;
        }
        let mut rest: Vec<i64> = p.steps[1..].iter().map(|s| s.dur_ns()).collect();
        let med = crate::analysis::median(&mut rest);
        let first = p.steps[0].dur_ns();
        if med <= 0 || (first as f64) <= WARMUP_FACTOR * med as f64 {
            return all;
        }
        Steady {
            first: 1,
            from_ns: i64::MIN,
            n: (p.steps.len() - 1) as f64,
            note: format!(
                "; the first step ({:.2} ms, against a median of {:.2} ms) is left out as warm-up",
                first as f64 / 1e6,
                med as f64 / 1e6
            ),
        }
    }

    /// True when time `t` falls in a step averaged over.
    pub fn includes(&self, p: &Profile, t: i64) -> bool {
        t >= self.from_ns && step_of(&p.steps, t).is_some_and(|i| i >= self.first)
    }
}

/// True when no operator (annotations aside) encloses op `idx`.
pub(crate) fn is_top_level(p: &Profile, idx: u32) -> bool {
    p.op_ancestors(idx)
        .skip(1)
        .all(|a| p.ops[a as usize].kind == OpKind::Annotation)
}

/// The thread that runs the training loop: the one whose range opens the first step
/// (steps are found from the main thread's annotations or Python frames); failing
/// that, the thread with the most host time in top-level ops.
pub(crate) fn main_thread(p: &Profile) -> Option<(i64, i64)> {
    let first = p.steps.first()?;
    let t0 = first.start_ns;
    let opens = |ts: i64, end: i64| ts == t0 || end == t0;
    if let Some(o) = p
        .ops
        .iter()
        .find(|o| o.kind == OpKind::Annotation && opens(o.ts_ns, o.end_ns()))
    {
        return Some((o.pid, o.tid));
    }
    if let Some(f) = p.python_frames.iter().find(|f| opens(f.ts_ns, f.end_ns())) {
        return Some((f.pid, f.tid));
    }
    let mut by_thread: std::collections::BTreeMap<(i64, i64), i64> = Default::default();
    for o in p.ops.iter().filter(|o| o.parent.is_none()) {
        *by_thread.entry((o.pid, o.tid)).or_default() += o.dur_ns;
    }
    by_thread
        .into_iter()
        .max_by_key(|&(k, d)| (d, std::cmp::Reverse(k)))
        .map(|(k, _)| k)
}

/// Parse a size list written as text (`"[32, 3, 32, 32]"`).
pub(crate) fn parse_size_list(s: &str) -> Option<Vec<i64>> {
    let inner = s.trim().strip_prefix('[')?.strip_suffix(']')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    inner
        .split(',')
        .map(|x| x.trim().parse::<i64>().ok().filter(|&v| v >= 0))
        .collect()
}

/// Shape of the tensor the op's first argument is (`Input Dims[0]`), if recorded.
pub(crate) fn first_input_shape(op: &CpuOp) -> Option<Vec<i64>> {
    let dims = parse_dims(op.input_dims.as_deref()?);
    dims.into_iter().next().filter(|d| !d.is_empty())
}

/// Element type of the op's first argument, if it is a recorded tensor.
pub(crate) fn first_input_dtype(op: &CpuOp) -> Option<Dtype> {
    let types = parse_types(op.input_types.as_deref()?);
    types.first().and_then(|t| Dtype::from_kineto(t))
}

/// The first size-list argument in `Concrete Inputs` (a factory's `size`).
pub(crate) fn concrete_size(op: &CpuOp) -> Option<Vec<i64>> {
    let vals = parse_types(op.concrete_inputs.as_deref()?);
    vals.iter().find_map(|v| parse_size_list(v))
}

/// Number of elements of a shape (1 for a scalar).
pub(crate) fn numel(shape: &[i64]) -> u64 {
    shape
        .iter()
        .fold(1u64, |a, &d| a.saturating_mul(d.max(0) as u64))
}

/// `[32, 3, 32, 32]`.
pub(crate) fn fmt_shape(shape: &[i64]) -> String {
    let v: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", v.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_lists() {
        assert_eq!(
            parse_size_list("[32, 3, 32, 32]"),
            Some(vec![32, 3, 32, 32])
        );
        assert_eq!(parse_size_list("[]"), Some(vec![]));
        assert_eq!(parse_size_list("6"), None);
        assert_eq!(parse_size_list("[1.5]"), None);
        assert_eq!(numel(&[32, 3, 32, 32]), 98_304);
    }

    #[test]
    fn idle_lookup() {
        let gaps = [(0, 10), (20, 30)];
        assert_eq!(idle_until(&gaps, 5), 10);
        assert_eq!(idle_until(&gaps, 15), 15);
        assert_eq!(idle_until(&gaps, 20), 30);
        assert_eq!(idle_until(&[(0, 10), (10, 15), (20, 30)], 5), 15);
        assert_eq!(idle_overlap(&gaps, 5, 25), 10);
    }
}
