//! Finding the steps (iterations) of a run.
//!
//! In order of trust: `ProfilerStep#N` annotations (a profiler schedule wrote them, or
//! `tensight run`'s window); a user Python frame that repeats under one parent (the loop
//! body, e.g. `train.py(40): train_step`); repeating `Optimizer.step#...` annotations
//! (one iteration ends where each optimizer step ends; preferred over a frame that
//! repeats a different number of times, as in gradient accumulation); repeating
//! DataLoader `__next__` annotations (one iteration starts at each batch fetch); a
//! repeating sequence of top-level ops (a trace without stacks, or a loop written
//! inline); else the whole trace is one step. The report says which method was used.
//!
//! What may count as the loop body is decided by [`choose_repeating`], which
//! `tensight run`'s collector calls too (through `tensight._native.choose_loop`) on the
//! loops it watches live, so both paths pick a loop by the same criteria: the outermost
//! candidate that repeats, runs back to back, and holds most of the work.
//!
//! A step runs from its host-side start to the next step's start; the last step ends
//! at the later of its host-side end and the end of the GPU work launched inside it, so
//! in a GPU-bound loop (the host queues iterations long before the GPU runs them) each
//! step holds the GPU work its host range launched and lasts the iteration period.

use super::{user_frames, OpKind, Profile, Step, StepSource};
use rustc_hash::FxHashMap;
use std::collections::HashMap;

/// Something that repeats and may be the loop body: a Python frame under one parent,
/// or (in the collector) a loop in the user's code.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Repeating {
    /// Nesting: lower is outer (frame depth; the collector: frame depth, then the
    /// loop's nesting inside its function).
    pub depth: u32,
    /// Occurrences (iterations) seen.
    pub count: usize,
    /// Sum of the occurrences' host durations, ns.
    pub covered_ns: i64,
    /// From the first occurrence's start to the last one's end, ns.
    pub span_ns: i64,
    /// Share of the work (GPU launches, else ops) of the reference window that ran
    /// inside the occurrences, 0 to 1.
    pub work_share: f64,
}

/// Fewest occurrences for a loop body.
pub const MIN_REPEATS: usize = 2;
/// Occurrences must cover at least this share of their span: a loop body runs back to
/// back (a function called once per iteration beside others still does).
pub const MIN_BACK_TO_BACK: f64 = 0.25;
/// A loop body holds at least this share of the work.
pub const MIN_WORK_SHARE: f64 = 0.5;

impl Repeating {
    /// Whether it can be the loop body at all.
    pub fn qualifies(&self) -> bool {
        self.count >= MIN_REPEATS
            && self.span_ns > 0
            && self.covered_ns as f64 >= MIN_BACK_TO_BACK * self.span_ns as f64
            && self.work_share >= MIN_WORK_SHARE
    }
}

/// The loop body among `c`: of those that qualify, the outermost, then the one holding
/// most of the work, then the one covering most time (index into `c`).
pub fn choose_repeating(c: &[Repeating]) -> Option<usize> {
    c.iter()
        .enumerate()
        .filter(|(_, r)| r.qualifies())
        .min_by(|(_, a), (_, b)| {
            a.depth
                .cmp(&b.depth)
                .then(b.work_share.total_cmp(&a.work_share))
                .then(b.covered_ns.cmp(&a.covered_ns))
        })
        .map(|(i, _)| i)
}

/// Fill `p.steps` and `p.step_source`.
pub fn find_steps(p: &mut Profile) {
    let (ranges, source) = host_ranges(p);
    p.step_source = source;
    p.steps = close_steps(p, ranges);
}

/// A step's host range: (start, end, label).
type HostRange = (i64, i64, String);

/// Host-side ranges of each step, and how they were found.
fn host_ranges(p: &Profile) -> (Vec<HostRange>, StepSource) {
    // 1. ProfilerStep#N.
    let mut ps: Vec<HostRange> = p
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
    let optimizer = annotation_ranges(p, "Optimizer.step#");
    // 2. A repeating user Python frame, unless it repeats more often than the optimizer
    //    steps (gradient accumulation: a frame per micro-batch). Several optimizer steps
    //    per frame (a GAN's two optimizers) are one iteration.
    if let Some((frame, r)) = repeating_frame(p) {
        let micro = optimizer.as_ref().is_some_and(|(_, o)| r.len() > o.len());
        if !micro {
            return (r, StepSource::PythonFrame { frame });
        }
    }
    let loader = annotation_ranges(p, "enumerate(DataLoader)#");
    // Optimizer steps and batch fetches one to one: the iteration starts at the fetch,
    // where the program's own loop starts it.
    let one_to_one = match (&optimizer, &loader) {
        (Some((_, o)), Some((_, d))) => o.len().abs_diff(d.len()) <= 1,
        _ => false,
    };
    // 3. Optimizer.step annotations: an iteration ends where an optimizer step ends. The
    //    first one starts at the thread's first op (the profiler started at an iteration's
    //    start), when it is about as long as the others.
    if let Some((name, opt)) = optimizer.filter(|_| !one_to_one) {
        if let Some(r) = several_per_iteration(p, &opt) {
            return r;
        }
        let mut ends: Vec<(i64, i64)> = opt.windows(2).map(|w| (w[0].1, w[1].1)).collect();
        let t = Thread::of(p, opt[0].0, &name);
        if let Some(first) = t.as_ref().and_then(|t| t.lead(opt[0].1, &ends)) {
            ends.insert(0, (first, opt[0].1));
        }
        return (numbered(ends), StepSource::Annotation { name });
    }
    // 4. DataLoader batch fetches: an iteration starts at each `__next__`. The last one
    //    ends at the thread's last op, and the thread's ops before the first fetch (the
    //    profiler started after it) are an iteration too, when about as large as the others.
    if let Some((name, dl)) = loader {
        let mut starts: Vec<(i64, i64)> = dl.windows(2).map(|w| (w[0].0, w[1].0)).collect();
        let (first, last) = (dl[0].0, dl[dl.len() - 1].0);
        let t = Thread::of(p, first, &name);
        let lead = t.as_ref().and_then(|t| t.lead(first, &starts));
        if let Some(end) = t.as_ref().and_then(|t| t.tail(last, &starts)) {
            starts.push((last, end));
        }
        if let Some(a) = lead {
            starts.insert(0, (a, first));
        }
        return (numbered(starts), StepSource::Annotation { name });
    }
    // 5. A repeating sequence of top-level ops.
    if let Some((first_op, ops_per_step, r)) = repeating_ops(p) {
        return (
            r,
            StepSource::OpSequence {
                first_op,
                ops_per_step,
            },
        );
    }
    (
        vec![(p.meta.start_ns, p.meta.end_ns, "whole trace".to_string())],
        StepSource::WholeTrace,
    )
}

/// Several optimizer steps of the same name per iteration (a GAN's discriminator and
/// generator, without stacks to tell): the repeating op sequence, when each of its steps
/// holds the same number (two or more) of optimizer steps.
fn several_per_iteration(p: &Profile, opt: &[(i64, i64)]) -> Option<(Vec<HostRange>, StepSource)> {
    let (first_op, ops_per_step, r) = repeating_ops(p)?;
    let per: Vec<usize> = r
        .iter()
        .map(|&(a, b, _)| opt.iter().filter(|o| o.0 >= a && o.1 <= b).count())
        .collect();
    (per[0] >= 2 && per.iter().all(|&k| k == per[0])).then_some({
        (
            r,
            StepSource::OpSequence {
                first_op,
                ops_per_step,
            },
        )
    })
}

/// Host ranges labelled `step 1`, `step 2`, ...
fn numbered(r: Vec<(i64, i64)>) -> Vec<HostRange> {
    r.into_iter()
        .enumerate()
        .map(|(i, (a, b))| (a, b, format!("step {}", i + 1)))
        .collect()
}

/// The thread an annotation ran on, for the partial iterations at the trace's edges.
struct Thread<'a> {
    /// Start of its first and end of its last top-level op, ns.
    span: (i64, i64),
    /// Start of each of its operators (any depth), sorted.
    op_starts: Vec<i64>,
    /// Its annotations other than the steps' own marker and `ProfilerStep#`: (start, name).
    marks: Vec<(i64, &'a str)>,
}

impl<'a> Thread<'a> {
    /// The thread of the op that starts at `at`, whose steps are marked by `marker`.
    fn of(p: &'a Profile, at: i64, marker: &str) -> Option<Thread<'a>> {
        let o = p.ops.iter().find(|o| o.ts_ns == at)?;
        let mine = || p.ops.iter().filter(|x| x.pid == o.pid && x.tid == o.tid);
        let tops = || mine().filter(|x| x.parent.is_none() && !x.name.starts_with("ProfilerStep#"));
        let span = (
            tops().map(|x| x.ts_ns).min()?,
            tops().map(|x| x.end_ns()).max()?,
        );
        let mut op_starts: Vec<i64> = mine()
            .filter(|x| x.kind == OpKind::Op)
            .map(|x| x.ts_ns)
            .collect();
        op_starts.sort_unstable();
        // `Optimizer.step#` of any optimizer, `enumerate(DataLoader)#` of any iterator.
        let family = marker.find('#').map_or(marker, |i| &marker[..=i]);
        let mut marks: Vec<(i64, &str)> = mine()
            .filter(|x| x.kind == OpKind::Annotation && !x.name.starts_with(family))
            .filter(|x| !x.name.starts_with("ProfilerStep#"))
            .map(|x| (x.ts_ns, &*x.name))
            .collect();
        marks.sort_unstable();
        Some(Thread {
            span,
            op_starts,
            marks,
        })
    }

    /// Operators starting in [a, b).
    fn ops_in(&self, a: i64, b: i64) -> usize {
        self.op_starts.partition_point(|&t| t < b) - self.op_starts.partition_point(|&t| t < a)
    }

    /// Whether [a, b), at an edge of the trace, is an iteration like `others`: it holds
    /// from half their median number of operators (the profiler started or stopped inside
    /// it) to a quarter more, or it holds some of the annotations that each of them holds
    /// once (an optimizer step, a `record_function` of the loop body) and none twice.
    /// Counted in operators and annotations, not time: a loaded machine stretches one
    /// iteration's time, never its ops. With a single-process DataLoader the fetch holds
    /// most ops, so an edge iteration without its fetch is told by its annotations.
    fn like_the_others(&self, a: i64, b: i64, others: &[(i64, i64)]) -> bool {
        if b <= a || others.is_empty() {
            return false;
        }
        let mut n: Vec<usize> = others.iter().map(|&(x, y)| self.ops_in(x, y)).collect();
        let len = self.ops_in(a, b);
        n.sort_unstable();
        let m = n[n.len() / 2];
        if len > 0 && 2 * len >= m && 4 * len <= 5 * m {
            return true;
        }
        let held: Vec<usize> = self
            .once_in_each(others)
            .iter()
            .map(|l| self.count(l, a, b))
            .collect();
        held.contains(&1) && held.iter().all(|&k| k <= 1)
    }

    /// Annotation names that start exactly once in each of `ranges`.
    fn once_in_each(&self, ranges: &[(i64, i64)]) -> Vec<&'a str> {
        let (a, b) = ranges[0];
        let mut names: Vec<&str> = self
            .marks
            .iter()
            .filter(|m| m.0 >= a && m.0 < b)
            .map(|m| m.1)
            .collect();
        names.sort_unstable();
        names.dedup();
        names.retain(|n| ranges.iter().all(|&(x, y)| self.count(n, x, y) == 1));
        names
    }

    /// How many annotations named `name` start in [a, b).
    fn count(&self, name: &str, a: i64, b: i64) -> usize {
        self.marks
            .iter()
            .filter(|m| m.0 >= a && m.0 < b && m.1 == name)
            .count()
    }

    /// The thread's start, when what runs from it to `end` is an iteration.
    fn lead(&self, end: i64, others: &[(i64, i64)]) -> Option<i64> {
        let a = self.span.0;
        self.like_the_others(a, end, others).then_some(a)
    }

    /// The thread's end, when what runs from `start` to it is an iteration.
    fn tail(&self, start: i64, others: &[(i64, i64)]) -> Option<i64> {
        let b = self.span.1 + 1;
        self.like_the_others(start, b, others)
            .then_some(self.span.1)
    }
}

/// Annotations whose name starts with `prefix`, sorted, when at least three repeat:
/// the first one's name and every (start, end).
fn annotation_ranges(p: &Profile, prefix: &str) -> Option<(String, Vec<(i64, i64)>)> {
    let mut v: Vec<(i64, i64)> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with(prefix))
        .map(|o| (o.ts_ns, o.end_ns()))
        .collect();
    if v.len() < 3 {
        return None;
    }
    v.sort();
    let name = p
        .ops
        .iter()
        .find(|o| o.name.starts_with(prefix))
        .map(|o| o.name.to_string())
        .unwrap_or_default();
    Some((name, v))
}

/// A frame's name and its occurrences.
type Repeats = (String, Vec<HostRange>);

/// The user frame that is the loop body ([`choose_repeating`]): frames grouped by
/// (parent, name); the work is the GPU launches (else the ops) of the frame's thread.
fn repeating_frame(p: &Profile) -> Option<Repeats> {
    struct Group {
        depth: u16,
        ranges: Vec<(i64, i64)>,
        tid: (i64, i64),
    }
    let mut groups: FxHashMap<(Option<u32>, &str), Group> = FxHashMap::default();
    let user = user_frames(&p.python_frames);
    for (f, _) in p.python_frames.iter().zip(&user).filter(|(_, &u)| u) {
        groups
            .entry((f.parent, &f.name))
            .or_insert_with(|| Group {
                depth: f.depth,
                ranges: Vec::new(),
                tid: (f.pid, f.tid),
            })
            .ranges
            .push((f.ts_ns, f.end_ns()));
    }
    groups.retain(|_, g| g.ranges.len() >= MIN_REPEATS);
    if groups.is_empty() {
        return None;
    }
    let work = WorkTimes::of(p);
    let keys: Vec<(Option<u32>, &str)> = {
        let mut k: Vec<_> = groups.keys().copied().collect();
        k.sort(); // deterministic tie-breaks
        k
    };
    let cands: Vec<Repeating> = keys
        .iter()
        .map(|k| {
            let g = &mut groups.get_mut(k).expect("key from the map");
            g.ranges.sort_unstable();
            let span = g.ranges.last().map_or(0, |l| l.1) - g.ranges[0].0;
            Repeating {
                depth: u32::from(g.depth),
                count: g.ranges.len(),
                covered_ns: g.ranges.iter().map(|r| r.1 - r.0).sum(),
                span_ns: span,
                work_share: work.share_inside(g.tid, &g.ranges),
            }
        })
        .collect();
    let best = choose_repeating(&cands)?;
    let (parent, name) = keys[best];
    let g = &groups[&(parent, name)];
    let r = g
        .ranges
        .iter()
        .enumerate()
        .map(|(i, &(a, b))| (a, b, format!("step {}", i + 1)))
        .collect();
    Some((name.to_string(), r))
}

/// Start times of the work per thread: GPU launches when the trace has any, else ops.
struct WorkTimes {
    by_thread: HashMap<(i64, i64), Vec<i64>>,
}

impl WorkTimes {
    fn of(p: &Profile) -> WorkTimes {
        let mut by_thread: HashMap<(i64, i64), Vec<i64>> = HashMap::new();
        let launches = p.runtime.iter().filter(|r| r.gpu.is_some());
        let mut any = false;
        for r in launches {
            any = true;
            by_thread.entry((r.pid, r.tid)).or_default().push(r.ts_ns);
        }
        if !any {
            for o in p.ops.iter().filter(|o| o.kind == OpKind::Op) {
                by_thread.entry((o.pid, o.tid)).or_default().push(o.ts_ns);
            }
        }
        for v in by_thread.values_mut() {
            v.sort_unstable();
        }
        WorkTimes { by_thread }
    }

    /// Share of all work (all threads) that started inside `ranges` (sorted) on `tid`.
    fn share_inside(&self, tid: (i64, i64), ranges: &[(i64, i64)]) -> f64 {
        let total: usize = self.by_thread.values().map(Vec::len).sum();
        let Some(t) = self.by_thread.get(&tid) else {
            return 0.0;
        };
        if total == 0 {
            return 0.0;
        }
        let inside: usize = ranges
            .iter()
            .map(|&(a, b)| t.partition_point(|&x| x < b) - t.partition_point(|&x| x < a))
            .sum();
        inside as f64 / total as f64
    }
}

/// A repeating sequence of top-level ops on the busiest thread: an op that occurs once
/// per iteration (its occurrences cut the sequence into segments that are, mostly, the
/// same ops), the most frequent such op winning (the shortest period), then the earliest.
/// Returns that op's name, the ops per step and the steps' host ranges.
fn repeating_ops(p: &Profile) -> Option<(String, usize, Vec<HostRange>)> {
    // Top-level ops per thread; the thread with the most.
    let mut per_thread: HashMap<(i64, i64), Vec<u32>> = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        if o.parent.is_none() && !o.name.starts_with("tensight::") {
            per_thread.entry((o.pid, o.tid)).or_default().push(i as u32);
        }
    }
    let (_, seq) = per_thread
        .into_iter()
        .max_by_key(|(k, v)| (v.len(), std::cmp::Reverse(*k)))?;
    if seq.len() < 2 * MIN_REPEATS {
        return None;
    }
    // Intern names into ids.
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let s: Vec<u32> = seq
        .iter()
        .map(|&i| {
            let n = ids.len() as u32;
            *ids.entry(&p.ops[i as usize].name).or_insert(n)
        })
        .collect();
    let mut pos: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
    for (k, &id) in s.iter().enumerate() {
        pos[id as usize].push(k);
    }
    // Anchors: most occurrences first (shortest period), then earliest; a bounded number.
    let mut anchors: Vec<u32> = (0..pos.len() as u32)
        .filter(|&a| (MIN_REPEATS..=MAX_OP_STEPS).contains(&pos[a as usize].len()))
        .collect();
    anchors.sort_by_key(|&a| (std::cmp::Reverse(pos[a as usize].len()), pos[a as usize][0]));
    anchors.truncate(MAX_ANCHORS);
    let hash = |a: usize, b: usize| {
        s[a..b].iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &x| {
            (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
        })
    };
    for a in anchors {
        let at = &pos[a as usize];
        // Segments between consecutive occurrences.
        let segs: Vec<(usize, usize)> = at.windows(2).map(|w| (w[0], w[1])).collect();
        let Some(modal) = modal_len(&segs) else {
            continue;
        };
        let close = |len: usize| len.abs_diff(modal) * 4 <= modal;
        if modal < 2 || !segs.iter().all(|&(x, y)| close(y - x)) {
            continue;
        }
        let mut hashes: HashMap<u64, usize> = HashMap::new();
        for &(x, y) in &segs {
            *hashes.entry(hash(x, y)).or_default() += 1;
        }
        let same = hashes.values().copied().max().unwrap_or(0);
        if (same as f64) < 0.6 * segs.len() as f64 {
            continue;
        }
        // The anchor need not open the iteration: move every cut back while the op before
        // each occurrence is the same one (the iteration starts where they part).
        let mut back = 0;
        while back + 1 < modal
            && at[0] > back
            && at.iter().all(|&k| s[k - back - 1] == s[at[0] - back - 1])
        {
            back += 1;
        }
        let starts: Vec<usize> = at.iter().map(|&k| k - back).collect();
        let mut cuts: Vec<(usize, usize)> = starts.windows(2).map(|w| (w[0], w[1])).collect();
        // The last iteration: as many ops after the last start as a step has, when they
        // are the ops of the most common step (ops after the loop are left out).
        let mut shifted: HashMap<u64, usize> = HashMap::new();
        for &(x, y) in &cuts {
            *shifted.entry(hash(x, y)).or_default() += 1;
        }
        let common = shifted
            .into_iter()
            .max_by_key(|&(h, c)| (c, h))
            .map(|x| x.0);
        let last = *starts.last().expect("at least MIN_REPEATS");
        if last + modal <= s.len() && Some(hash(last, last + modal)) == common {
            cuts.push((last, last + modal));
        }
        if cuts.len() < MIN_REPEATS {
            continue;
        }
        let r = cuts
            .iter()
            .enumerate()
            .map(|(i, &(x, y))| {
                let first = &p.ops[seq[x] as usize];
                let end = seq[x..y]
                    .iter()
                    .map(|&o| p.ops[o as usize].end_ns())
                    .max()
                    .unwrap_or(first.end_ns());
                (first.ts_ns, end, format!("step {}", i + 1))
            })
            .collect();
        let name = p.ops[seq[starts[0]] as usize].name.to_string();
        return Some((name, modal, r));
    }
    None
}

/// Most steps a repeating op sequence may cut a trace into.
const MAX_OP_STEPS: usize = 10_000;
/// Anchor ops tried (each costs one pass over the sequence).
const MAX_ANCHORS: usize = 64;

/// The most common segment length (ties: the longer).
fn modal_len(segs: &[(usize, usize)]) -> Option<usize> {
    let mut n: HashMap<usize, usize> = HashMap::new();
    for &(a, b) in segs {
        *n.entry(b - a).or_default() += 1;
    }
    n.into_iter().max_by_key(|&(len, c)| (c, len)).map(|x| x.0)
}

/// Turn host ranges into steps. Work belongs to the step whose host range launched it
/// (up to the next step's start). A step is done when both its host range and its GPU
/// work are done, so steps are the contiguous windows between consecutive "done"
/// times: host-bound, that is the next step's host start; GPU-bound (the host runs
/// ahead of a busy GPU), it is when the step's GPU work ends, so the step time is the
/// real iteration period rather than the time the host took to queue it.
fn close_steps(p: &Profile, ranges: Vec<HostRange>) -> Vec<Step> {
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

/// Leave the step `name` out of `p.steps` (a step the analysis must not time, such as
/// the bundle's detail step): the step before it ends again where its own host range and
/// GPU work end (it had been held open until the left-out step began).
pub fn leave_out(p: &mut Profile, name: &str) {
    let Some(i) = p.steps.iter().position(|s| s.name == name) else {
        return;
    };
    if p.steps.len() < 2 {
        return;
    }
    let removed = p.steps.remove(i);
    let Some(prev) = i.checked_sub(1) else {
        return;
    };
    let s = &p.steps[prev];
    let gpu_end =
        last_gpu_end_launched_in(p, s.host_start_ns, removed.host_start_ns - 1).unwrap_or(i64::MIN);
    let done = s.cpu_end_ns.max(gpu_end).max(s.start_ns);
    let end = match p.steps.get(i) {
        Some(next) => done.max(next.host_start_ns),
        None => done,
    };
    p.steps[prev].end_ns = end;
    if let Some(next) = p.steps.get_mut(i) {
        next.start_ns = end;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(depth: u32, count: usize, covered: i64, span: i64, work: f64) -> Repeating {
        Repeating {
            depth,
            count,
            covered_ns: covered,
            span_ns: span,
            work_share: work,
        }
    }

    #[test]
    fn the_outermost_qualifying_repeat_wins() {
        let c = [
            cand(3, 40, 900, 1000, 0.95), // a layer called in every step
            cand(1, 5, 980, 1000, 0.97),  // the step
            cand(0, 5, 100, 1000, 0.97),  // not back to back
            cand(0, 9, 990, 1000, 0.10),  // a loop without the work
        ];
        assert_eq!(choose_repeating(&c), Some(1));
        assert_eq!(choose_repeating(&c[2..]), None);
        assert_eq!(choose_repeating(&[cand(0, 1, 10, 10, 1.0)]), None);
    }
}
