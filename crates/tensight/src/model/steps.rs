//! Finding the steps (iterations) of a run.
//!
//! In order of trust: `ProfilerStep#N` annotations (a profiler schedule wrote them);
//! a user Python frame that repeats under one parent and covers most of it (the loop
//! body, e.g. `train.py(40): train_step`); repeating `Optimizer.step#...` annotations
//! (one iteration ends where each optimizer step ends); repeating DataLoader
//! `__next__` annotations (one iteration starts at each batch fetch); else the whole
//! trace is one step. The report says which method was used.
//!
//! A step runs from its host-side start to the next step's start; the last step ends
//! at the later of its host-side end and the end of the GPU work launched inside it.

use super::{is_user_frame, OpKind, Profile, Step, StepSource};
use std::collections::HashMap;

/// Fill `p.steps` and `p.step_source`.
pub fn find_steps(p: &mut Profile) {
    let (ranges, source) = host_ranges(p);
    p.step_source = source;
    p.steps = close_steps(p, ranges);
}

/// Host-side (start, end, label) of each step, and how they were found.
fn host_ranges(p: &Profile) -> (Vec<(i64, i64, String)>, StepSource) {
    // 1. ProfilerStep#N.
    let mut ps: Vec<(i64, i64, String)> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with("ProfilerStep#"))
        .map(|o| (o.ts_ns, o.end_ns(), o.name.to_string()))
        .collect();
    if !ps.is_empty() {
        ps.sort();
        ps.dedup_by_key(|r| r.0);
        return (ps, StepSource::ProfilerStep);
    }
    // 2. A repeating user Python frame.
    if let Some((frame, r)) = repeating_frame(p) {
        return (r, StepSource::PythonFrame { frame });
    }
    // 3. Optimizer.step annotations: iterations between consecutive optimizer steps.
    let mut opt: Vec<(i64, i64)> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with("Optimizer.step#"))
        .map(|o| (o.ts_ns, o.end_ns()))
        .collect();
    opt.sort();
    if opt.len() >= 3 {
        let name = p
            .ops
            .iter()
            .find(|o| o.name.starts_with("Optimizer.step#"))
            .map(|o| o.name.to_string())
            .unwrap_or_default();
        let r = opt
            .windows(2)
            .enumerate()
            .map(|(i, w)| (w[0].1, w[1].1, format!("step {}", i + 1)))
            .collect();
        return (r, StepSource::Annotation { name });
    }
    // 4. DataLoader batch fetches: an iteration starts at each `__next__`.
    let mut dl: Vec<(i64, i64)> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with("enumerate(DataLoader)#"))
        .map(|o| (o.ts_ns, o.end_ns()))
        .collect();
    dl.sort();
    if dl.len() >= 3 {
        let name = p
            .ops
            .iter()
            .find(|o| o.name.starts_with("enumerate(DataLoader)#"))
            .map(|o| o.name.to_string())
            .unwrap_or_default();
        let r = dl
            .windows(2)
            .enumerate()
            .map(|(i, w)| (w[0].0, w[1].0, format!("step {}", i + 1)))
            .collect();
        return (r, StepSource::Annotation { name });
    }
    (
        vec![(p.meta.start_ns, p.meta.end_ns, "whole trace".to_string())],
        StepSource::WholeTrace,
    )
}

/// The user frame that repeats (≥ 2 times) under one parent frame, covers at least half
/// of that parent and at least a third of the profiled window; the shallowest such
/// frame wins, then the one covering most.
/// A frame's name and its occurrences as (start, end, label).
type Repeats = (String, Vec<(i64, i64, String)>);

fn repeating_frame(p: &Profile) -> Option<Repeats> {
    // (parent, name) -> (count, total dur, depth)
    let mut groups: HashMap<(Option<u32>, &str), (usize, i64, u16)> = HashMap::new();
    for f in &p.python_frames {
        if !is_user_frame(&f.name) {
            continue;
        }
        let e = groups.entry((f.parent, &f.name)).or_insert((0, 0, f.depth));
        e.0 += 1;
        e.1 += f.dur_ns;
    }
    type Candidate<'a> = ((Option<u32>, &'a str), u16, i64);
    let mut best: Option<Candidate> = None;
    for (&(parent, name), &(count, total, depth)) in &groups {
        if count < 2 {
            continue;
        }
        let parent_dur = match parent {
            Some(i) => p.python_frames[i as usize].dur_ns,
            None => p.meta.end_ns - p.meta.start_ns,
        };
        let window = p.meta.end_ns - p.meta.start_ns;
        if parent_dur <= 0
            || (total as f64) < 0.5 * parent_dur as f64
            || (total as f64) < window as f64 / 3.0
        {
            continue;
        }
        let better = match best {
            None => true,
            Some((_, d, t)) => depth < d || (depth == d && total > t),
        };
        if better {
            best = Some(((parent, name), depth, total));
        }
    }
    let ((parent, name), _, _) = best?;
    let mut r: Vec<(i64, i64, String)> = p
        .python_frames
        .iter()
        .filter(|f| f.parent == parent && &*f.name == name)
        .map(|f| (f.ts_ns, f.end_ns(), String::new()))
        .collect();
    r.sort();
    for (i, x) in r.iter_mut().enumerate() {
        x.2 = format!("step {}", i + 1);
    }
    Some((name.to_string(), r))
}

/// Turn host ranges into steps. Work belongs to the step whose host range launched it
/// (up to the next step's start). A step is done when both its host range and its GPU
/// work are done, so steps are the contiguous windows between consecutive "done"
/// times: host-bound, that is the next step's host start; GPU-bound (the host runs
/// ahead of a busy GPU), it is when the step's GPU work ends, so the step time is the
/// real iteration period rather than the time the host took to queue it.
fn close_steps(p: &Profile, ranges: Vec<(i64, i64, String)>) -> Vec<Step> {
    let n = ranges.len();
    let mut out: Vec<Step> = Vec::with_capacity(n);
    let mut window_start = ranges.first().map_or(0, |r| r.0);
    for (i, (start, cpu_end, name)) in ranges.iter().enumerate() {
        let launch_end = if i + 1 < n {
            ranges[i + 1].0 - 1
        } else {
            *cpu_end
        };
        let gpu_end = last_gpu_end_launched_in(p, *start, launch_end).unwrap_or(i64::MIN);
        let done = (*cpu_end).max(gpu_end);
        let end = if i + 1 < n {
            done.max(ranges[i + 1].0)
        } else {
            done
        };
        let end = end.max(window_start);
        out.push(Step {
            name: name.clone(),
            start_ns: window_start,
            end_ns: end,
            host_start_ns: *start,
            cpu_end_ns: *cpu_end,
        });
        window_start = end;
    }
    out
}

/// Latest end of GPU work whose launching runtime call started in [start, end].
fn last_gpu_end_launched_in(p: &Profile, start: i64, end: i64) -> Option<i64> {
    let lo = p.runtime.partition_point(|r| r.ts_ns < start);
    let hi = p.runtime.partition_point(|r| r.ts_ns <= end);
    p.runtime[lo..hi]
        .iter()
        .filter_map(|r| r.gpu)
        .map(|g| p.gpu[g as usize].end_ns())
        .max()
}
