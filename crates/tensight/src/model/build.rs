//! Finishing a Profile after reading: sort, nest, link, find steps.
//!
//! Readers push events in file order; [`finish`] turns that into the linked model:
//! ops and Python frames nested per thread, each op's innermost Python frame, kernels
//! linked to their launching op (External id) and runtime call (correlation).

use super::{steps, CounterSeverity, CpuOp, Profile, PyFrame};
use rustc_hash::FxHashMap as HashMap;

/// Sort, nest and link everything the reader pushed, then find the steps.
pub fn finish(p: &mut Profile) {
    p.ops.sort_by(|a, b| {
        (a.pid, a.tid, a.ts_ns, -a.dur_ns, a.kind as u8).cmp(&(
            b.pid,
            b.tid,
            b.ts_ns,
            -b.dur_ns,
            b.kind as u8,
        ))
    });
    p.python_frames.sort_by(|a, b| {
        (a.pid, a.tid, a.ts_ns, -a.dur_ns).cmp(&(b.pid, b.tid, b.ts_ns, -b.dur_ns))
    });
    p.gpu.sort_by_key(|a| (a.ts_ns, a.device, a.stream));
    p.runtime.sort_by_key(|a| (a.ts_ns, a.tid));
    p.gpu_annotations.sort_by_key(|a| a.ts_ns);
    p.gpu_syncs.sort_by_key(|a| a.ts_ns);
    p.memory.sort_by_key(|m| m.ts_ns);

    nest_ops(p);
    nest_frames(p);
    attach_frames(p);
    link(p);
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

fn nest_ops(p: &mut Profile) {
    let mut overlaps = 0u64;
    for (s, e) in thread_ranges(&p.ops, |o| (o.pid, o.tid)) {
        let mut stack: Vec<usize> = Vec::new();
        for i in s..e {
            let (ts, end) = (p.ops[i].ts_ns, p.ops[i].end_ns());
            while let Some(&top) = stack.last() {
                if p.ops[top].end_ns() <= ts {
                    stack.pop();
                } else {
                    break;
                }
            }
            if let Some(&top) = stack.last() {
                if p.ops[top].end_ns() < end {
                    overlaps += 1;
                }
            }
            p.ops[i].parent = stack.last().map(|&t| t as u32);
            p.ops[i].depth = stack.len().min(u16::MAX as usize) as u16;
            stack.push(i);
        }
    }
    p.counters.add(
        "op_partial_overlap",
        CounterSeverity::Info,
        "CPU ranges that start inside another range on the same thread but end after it; nested under it anyway",
        overlaps,
    );
}

fn nest_frames(p: &mut Profile) {
    for (s, e) in thread_ranges(&p.python_frames, |o| (o.pid, o.tid)) {
        let mut stack: Vec<usize> = Vec::new();
        for i in s..e {
            let ts = p.python_frames[i].ts_ns;
            while let Some(&top) = stack.last() {
                if p.python_frames[top].end_ns() <= ts {
                    stack.pop();
                } else {
                    break;
                }
            }
            p.python_frames[i].parent = stack.last().map(|&t| t as u32);
            p.python_frames[i].depth = stack.len().min(u16::MAX as usize) as u16;
            stack.push(i);
        }
    }
}

/// Give each op its innermost enclosing Python frame on the same thread.
fn attach_frames(p: &mut Profile) {
    if p.python_frames.is_empty() {
        return;
    }
    let frame_ranges: HashMap<(i64, i64), (usize, usize)> =
        thread_ranges(&p.python_frames, |f| (f.pid, f.tid))
            .into_iter()
            .map(|(s, e)| ((p.python_frames[s].pid, p.python_frames[s].tid), (s, e)))
            .collect();
    for (s, e) in thread_ranges(&p.ops, |o| (o.pid, o.tid)) {
        let key = (p.ops[s].pid, p.ops[s].tid);
        let Some(&(fs, fe)) = frame_ranges.get(&key) else {
            continue;
        };
        let frames: &[PyFrame] = &p.python_frames;
        let mut j = fs;
        let mut stack: Vec<usize> = Vec::new();
        for op in p.ops[s..e].iter_mut() {
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
            op.py_frame = stack.last().map(|&t| t as u32);
        }
    }
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

fn link(p: &mut Profile) {
    let mut by_ext: HashMap<i64, u32> =
        HashMap::with_capacity_and_hasher(p.ops.len(), Default::default());
    for (i, o) in p.ops.iter().enumerate() {
        if let Some(x) = o.external_id {
            // Keep the innermost (deepest) op when an id repeats.
            match by_ext.get(&x) {
                Some(&j) if p.ops[j as usize].depth >= o.depth => {}
                _ => {
                    by_ext.insert(x, i as u32);
                }
            }
        }
    }
    let mut by_corr: HashMap<i64, u32> =
        HashMap::with_capacity_and_hasher(p.gpu.len(), Default::default());
    for (i, g) in p.gpu.iter().enumerate() {
        if let Some(c) = g.correlation {
            by_corr.entry(c).or_insert(i as u32);
        }
    }
    let ranges: HashMap<(i64, i64), (usize, usize)> = thread_ranges(&p.ops, |o| (o.pid, o.tid))
        .into_iter()
        .map(|(s, e)| ((p.ops[s].pid, p.ops[s].tid), (s, e)))
        .collect();
    let mut unlinked_runtime = 0u64;
    for (ri, r) in p.runtime.iter_mut().enumerate() {
        r.gpu = r.correlation.and_then(|c| by_corr.get(&c).copied());
        r.op = r.external_id.and_then(|x| by_ext.get(&x).copied());
        if r.op.is_none() {
            if let Some(&range) = ranges.get(&(r.pid, r.tid)) {
                r.op = enclosing_op(&p.ops, range, r.ts_ns);
            }
        }
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
    let mut unlinked = 0u64;
    for g in p.gpu.iter_mut() {
        g.op = g.external_id.and_then(|x| by_ext.get(&x).copied());
        if g.op.is_none() {
            g.op = g.runtime.and_then(|r| p.runtime[r as usize].op);
        }
        if g.op.is_none() {
            unlinked += 1;
        }
    }
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
