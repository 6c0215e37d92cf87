//! Finishing a Profile after reading: sort, nest, link, find steps.
//!
//! Readers push events in file order; [`finish`] turns that into the linked model:
//! ops and Python frames nested per thread, each op's innermost Python frame, kernels
//! linked to their launching op (External id) and runtime call (correlation).

use super::{steps, CounterSeverity, CpuOp, Profile, PyFrame};
use rustc_hash::FxHashMap as HashMap;

/// Sort, nest and link everything the reader pushed, then find the steps.
pub fn finish(p: &mut Profile) {
    // The ops (sort check + nesting) on one thread, everything else sorted (and the
    // Python frames nested) on another.
    let Profile {
        ops,
        python_frames,
        gpu,
        runtime,
        gpu_annotations,
        gpu_syncs,
        memory,
        ..
    } = p;
    let (overlaps, ()) = rayon::join(
        || {
            ops.sort_by(|a, b| {
                (a.pid, a.tid, a.ts_ns, -a.dur_ns, a.kind as u8).cmp(&(
                    b.pid,
                    b.tid,
                    b.ts_ns,
                    -b.dur_ns,
                    b.kind as u8,
                ))
            });
            nest_ops(ops)
        },
        || {
            python_frames.sort_by(|a, b| {
                (a.pid, a.tid, a.ts_ns, -a.dur_ns).cmp(&(b.pid, b.tid, b.ts_ns, -b.dur_ns))
            });
            nest_frames(python_frames);
            gpu.sort_by_key(|a| (a.ts_ns, a.device, a.stream));
            runtime.sort_by_key(|a| (a.ts_ns, a.tid));
            gpu_annotations.sort_by_key(|a| a.ts_ns);
            gpu_syncs.sort_by_key(|a| a.ts_ns);
            memory.sort_by_key(|m| m.ts_ns);
        },
    );
    p.counters.add(
        "op_partial_overlap",
        CounterSeverity::Info,
        "CPU ranges that start inside another range on the same thread but end after it; nested under it anyway",
        overlaps,
    );

    // Frames per op and the id maps only read the ops: compute them together.
    let ((py_frames, by_corr), by_ext) = rayon::join(
        || {
            rayon::join(
                || attach_frames(&p.ops, &p.python_frames),
                || corr_map(&p.gpu),
            )
        },
        || ext_map(&p.ops),
    );
    if let Some(py_frames) = py_frames {
        for (op, f) in p.ops.iter_mut().zip(py_frames) {
            op.py_frame = f;
        }
    }
    link(p, &by_ext, &by_corr);
    window(p);
    steps::find_steps(p);
}

/// Group boundaries of a slice sorted by (pid, tid).
fn thread_ranges<T>(items: &[T], key: impl Fn(&T) -> (i64, i64)) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=items.len() {
        if i == items.len() || key(&items[i]) != key(&items[start]) {
            if start < items.len() {
                out.push((start, i));
            }
            start = i;
        }
    }
    out
}

/// Parent and depth of each op; returns the number of partial overlaps.
fn nest_ops(ops: &mut [CpuOp]) -> u64 {
    let mut overlaps = 0u64;
    for (s, e) in thread_ranges(ops, |o| (o.pid, o.tid)) {
        let mut stack: Vec<usize> = Vec::new();
        for i in s..e {
            let (ts, end) = (ops[i].ts_ns, ops[i].end_ns());
            while let Some(&top) = stack.last() {
                if ops[top].end_ns() <= ts {
                    stack.pop();
                } else {
                    break;
                }
            }
            if let Some(&top) = stack.last() {
                if ops[top].end_ns() < end {
                    overlaps += 1;
                }
            }
            ops[i].parent = stack.last().map(|&t| t as u32);
            ops[i].depth = stack.len().min(u16::MAX as usize) as u16;
            stack.push(i);
        }
    }
    overlaps
}

fn nest_frames(frames: &mut [PyFrame]) {
    for (s, e) in thread_ranges(frames, |o| (o.pid, o.tid)) {
        let mut stack: Vec<usize> = Vec::new();
        for i in s..e {
            let ts = frames[i].ts_ns;
            while let Some(&top) = stack.last() {
                if frames[top].end_ns() <= ts {
                    stack.pop();
                } else {
                    break;
                }
            }
            frames[i].parent = stack.last().map(|&t| t as u32);
            frames[i].depth = stack.len().min(u16::MAX as usize) as u16;
            stack.push(i);
        }
    }
}

/// Each op's innermost enclosing Python frame on the same thread (`None` overall when
/// there are no frames: the ops keep theirs).
fn attach_frames(ops: &[CpuOp], frames: &[PyFrame]) -> Option<Vec<Option<u32>>> {
    if frames.is_empty() {
        return None;
    }
    let mut out: Vec<Option<u32>> = ops.iter().map(|o| o.py_frame).collect();
    let frame_ranges: HashMap<(i64, i64), (usize, usize)> =
        thread_ranges(frames, |f| (f.pid, f.tid))
            .into_iter()
            .map(|(s, e)| ((frames[s].pid, frames[s].tid), (s, e)))
            .collect();
    for (s, e) in thread_ranges(ops, |o| (o.pid, o.tid)) {
        let key = (ops[s].pid, ops[s].tid);
        let Some(&(fs, fe)) = frame_ranges.get(&key) else {
            continue;
        };
        let mut j = fs;
        let mut stack: Vec<usize> = Vec::new();
        for (op, slot) in ops[s..e].iter().zip(&mut out[s..e]) {
            while j < fe && frames[j].ts_ns <= op.ts_ns {
                while let Some(&top) = stack.last() {
                    if frames[top].end_ns() <= frames[j].ts_ns {
                        stack.pop();
                    } else {
                        break;
                    }
                }
                stack.push(j);
                j += 1;
            }
            while let Some(&top) = stack.last() {
                if frames[top].end_ns() <= op.ts_ns {
                    stack.pop();
                } else {
                    break;
                }
            }
            *slot = stack.last().map(|&t| t as u32);
        }
    }
    Some(out)
}

/// Index of the innermost op on (pid, tid) that encloses time `t`.
pub(crate) fn enclosing_op(ops: &[CpuOp], range: (usize, usize), t: i64) -> Option<u32> {
    let slice = &ops[range.0..range.1];
    let n = slice.partition_point(|o| o.ts_ns <= t);
    if n == 0 {
        return None;
    }
    let mut cur = Some((range.0 + n - 1) as u32);
    while let Some(i) = cur {
        let o = &ops[i as usize];
        if o.ts_ns <= t && t < o.end_ns().max(o.ts_ns + 1) {
            return Some(i);
        }
        cur = o.parent;
    }
    None
}

/// An id → index map. Kineto's ids (External id, correlation) are nearly dense
/// counters, so a table indexed by `id - min` is used when the ids' range is small
/// enough; a hash map otherwise.
enum IdMap {
    Dense { min: i64, slots: Vec<u32> },
    Hash(HashMap<i64, u32>),
}

const EMPTY: u32 = u32::MAX;

impl IdMap {
    /// Build from `(id, index)` pairs in index order; `keep_new(old, new)` says whether
    /// `new` replaces `old` for a repeated id.
    fn build(
        ids: impl Iterator<Item = (i64, u32)> + Clone,
        n: usize,
        keep_new: impl Fn(u32, u32) -> bool,
    ) -> IdMap {
        let (mut lo, mut hi, mut count) = (i64::MAX, i64::MIN, 0usize);
        for (x, _) in ids.clone() {
            lo = lo.min(x);
            hi = hi.max(x);
            count += 1;
        }
        let dense_len = (hi as i128 - lo as i128 + 1).max(0) as u128;
        if count > 0 && dense_len <= (8 * count as u128 + 1024) && n < EMPTY as usize {
            let mut slots = vec![EMPTY; dense_len as usize];
            for (x, i) in ids {
                let s = &mut slots[(x - lo) as usize];
                if *s == EMPTY || keep_new(*s, i) {
                    *s = i;
                }
            }
            IdMap::Dense { min: lo, slots }
        } else {
            let mut m: HashMap<i64, u32> = HashMap::with_capacity_and_hasher(n, Default::default());
            for (x, i) in ids {
                match m.get(&x) {
                    Some(&old) if !keep_new(old, i) => {}
                    _ => {
                        m.insert(x, i);
                    }
                }
            }
            IdMap::Hash(m)
        }
    }

    #[inline]
    fn get(&self, x: i64) -> Option<u32> {
        match self {
            IdMap::Dense { min, slots } => {
                let i = x.checked_sub(*min)?;
                let v = *slots.get(usize::try_from(i).ok()?)?;
                (v != EMPTY).then_some(v)
            }
            IdMap::Hash(m) => m.get(&x).copied(),
        }
    }
}

/// External id → innermost (deepest) op with it (the first of equal depth).
fn ext_map(ops: &[CpuOp]) -> IdMap {
    let ids = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.external_id.map(|x| (x, i as u32)));
    IdMap::build(ids, ops.len(), |old, new| {
        ops[old as usize].depth < ops[new as usize].depth
    })
}

/// Correlation → first GPU activity with it.
fn corr_map(gpu: &[super::GpuActivity]) -> IdMap {
    let ids = gpu
        .iter()
        .enumerate()
        .filter_map(|(i, g)| g.correlation.map(|c| (c, i as u32)));
    IdMap::build(ids, gpu.len(), |_, _| false)
}

fn link(p: &mut Profile, by_ext: &IdMap, by_corr: &IdMap) {
    use rayon::prelude::*;
    let ranges: HashMap<(i64, i64), (usize, usize)> = thread_ranges(&p.ops, |o| (o.pid, o.tid))
        .into_iter()
        .map(|(s, e)| ((p.ops[s].pid, p.ops[s].tid), (s, e)))
        .collect();
    let ops = &p.ops;
    p.runtime.par_iter_mut().with_min_len(4096).for_each(|r| {
        r.gpu = r.correlation.and_then(|c| by_corr.get(c));
        r.op = r.external_id.and_then(|x| by_ext.get(x));
        if r.op.is_none() {
            if let Some(&range) = ranges.get(&(r.pid, r.tid)) {
                r.op = enclosing_op(ops, range, r.ts_ns);
            }
        }
    });
    let mut unlinked_runtime = 0u64;
    for (ri, r) in p.runtime.iter().enumerate() {
        if let Some(g) = r.gpu {
            let g = &mut p.gpu[g as usize];
            if g.runtime.is_none() {
                g.runtime = Some(ri as u32);
            }
        }
        if r.op.is_none() {
            unlinked_runtime += 1;
        }
    }
    let runtime = &p.runtime;
    let unlinked: u64 = p
        .gpu
        .par_iter_mut()
        .with_min_len(4096)
        .map(|g| {
            g.op = g.external_id.and_then(|x| by_ext.get(x));
            if g.op.is_none() {
                g.op = g.runtime.and_then(|r| runtime[r as usize].op);
            }
            u64::from(g.op.is_none())
        })
        .sum();
    p.counters.add(
        "gpu_activity_without_op",
        CounterSeverity::Info,
        "GPU activities with no launching op (no matching External id or correlation); counted in GPU time but not attributed to an op",
        unlinked,
    );
    p.counters.add(
        "runtime_call_without_op",
        CounterSeverity::Info,
        "runtime calls made outside any recorded op",
        unlinked_runtime,
    );
}

fn window(p: &mut Profile) {
    let mut lo = i64::MAX;
    let mut hi = i64::MIN;
    let mut see = |ts: i64, end: i64| {
        lo = lo.min(ts);
        hi = hi.max(end);
    };
    p.ops.iter().for_each(|o| see(o.ts_ns, o.end_ns()));
    p.gpu.iter().for_each(|g| see(g.ts_ns, g.end_ns()));
    p.runtime.iter().for_each(|r| see(r.ts_ns, r.end_ns()));
    p.python_frames
        .iter()
        .for_each(|f| see(f.ts_ns, f.end_ns()));
    if lo <= hi {
        p.meta.start_ns = lo;
        p.meta.end_ns = hi;
    }
}

/// Python frames were added after [`finish`] (the detail step's, carried over to the
/// timed steps): sort and nest them again and give every op its innermost frame anew.
pub(crate) fn refinish_frames(p: &mut Profile) {
    p.python_frames.sort_by(|a, b| {
        (a.pid, a.tid, a.ts_ns, -a.dur_ns).cmp(&(b.pid, b.tid, b.ts_ns, -b.dur_ns))
    });
    nest_frames(&mut p.python_frames);
    for op in &mut p.ops {
        op.py_frame = None;
    }
    if let Some(frames) = attach_frames(&p.ops, &p.python_frames) {
        for (op, f) in p.ops.iter_mut().zip(frames) {
            op.py_frame = f;
        }
    }
    p.memory.sort_by_key(|m| m.ts_ns);
}
