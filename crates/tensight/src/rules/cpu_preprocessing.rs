//! C004 cpu-preprocessing: tensor work done on the CPU inside the step, on the training
//! thread, while the GPU waits (normalising, resizing, augmenting before `.cuda()`).

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule,
    RuleMeta, Status,
};
use crate::analysis::flops::{parse_dims, parse_types, Dtype};
use crate::analysis::host_code::{self, HostCode};
use crate::analysis::host_work::{
    idle_overlap, inside_any, is_top_level, main_thread, not_computing, numel, step_of, Launched,
    Steady,
};
use crate::analysis::simulate::Change;
use crate::analysis::timeline::Timeline;
use crate::model::{CopyDir, CpuOp, OpKind, Profile};
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "C004",
    name: "cpu-preprocessing",
    category: Category::CpuResidency,
    status: Status::Preview,
    since: "0.1.0",
    // Without GPU activity nothing tells host-only ops from ops that launch GPU work.
    needs_gpu: true,
    doc: r#"## What it detects
Host-only work inside the steps on the training thread: outermost operators
(`aten::...`) that launched no GPU work at all (no kernel, memcpy or memset, under them
or their children), and, when stacks were recorded, the host code the frames show:
the outermost functions of the program, of array and image libraries (numpy, PIL,
OpenCV, SciPy, torchvision transforms, ...) and built-ins the program calls, that
launched nothing and ran no op (a function running ops is counted through them), and
the program's own code where the profiler recorded no call at all (a C extension that
makes no frame, such as numpy's random generators, or plain Python). While another
thread launches GPU work the training thread may be waiting for it (the backward pass
on autograd's threads): not counted. Torch's own frames, tensight's and a framework's
are left to their ops. These are CPU tensors being computed on: normalising,
resizing, casting, augmenting, building masks. When such ops feed a host → device copy
(`aten::to`, `_to_copy` or `copy_` with an HtoD memcpy, with no op launching GPU work
between them and it), the chain also costs the time between its ops and the copy itself.
Left to other rules: cheap bookkeeping ops (views, `empty`, `item`), factory ops copied
to the GPU right after (C003), work between a GPU → CPU → GPU round trip (C002) and work
inside DataLoader `__next__` (D003).

## Why it costs time
The training thread does this work in series with the step. While it runs, no kernel is
launched, and once the queued ones finish the GPU idles. Between the ops the thread
releases their large CPU intermediates (returning them to the OS costs time that grows
with their size) and then copies the result, often bigger than the raw input (uint8 →
float32), from pageable memory while the host blocks. The same ops on a GPU tensor take
microseconds, only the raw input needs to move; in DataLoader workers they run in
parallel with the step.

## Example
Between the step's start and `aten::to` (`.cuda()`), the main thread runs `aten::to`
(uint8 → float32 on the CPU) 80 µs, `aten::div` 60 µs, `aten::upsample_bilinear2d`
400 µs, `aten::sub` and `aten::div` 150 µs, none of which launched GPU work, with the
GPU idle throughout. Between them the thread frees the previous op's 20 MB float32
result (a `[memory]` event of −20 MB, then 100 µs with no op), and the final `aten::to`
copies 20 MB from pageable memory for 2 ms where the uint8 input was 5 MB.

## Fix
```python
# before: preprocess on the CPU, then copy
x = batch.float() / 255
x = F.interpolate(x, size=(224, 224), mode="bilinear")
x = ((x - mean) / std).cuda()
# after: copy the (smaller, uint8) batch first, then the same ops on the GPU
x = batch.cuda(non_blocking=True).float() / 255
x = F.interpolate(x, size=(224, 224), mode="bilinear")
x = (x - mean_gpu) / std_gpu
# or: do it in the Dataset, so DataLoader workers run it in parallel (num_workers > 0)
```
For image augmentation: torchvision transforms v2 on CUDA tensors, Kornia or DALI.

## Thresholds
Only GPU idle this work is to blame for counts: the gaps the host caused, and of a gap
that began when a sync drained the GPU, per step, only the last part of the work in it
beyond the step's GPU busy time: without the sync the host would do the rest while the
step's queued GPU work runs (the sync's to save: S001, C002). Functions and stretches without a call shorter than 100 µs are the
interpreter's glue between launches (L001's), not counted; CPU image library calls count
however short.
The saving is the GPU idle time during these ops' host time (each instant once). For a
chain of them feeding a host → device copy (the counted ops after the last op that
launched GPU work, or the step's start, and before the copy) it adds the GPU idle time
of:
- each gap between the chain's ops, before the copy and after it (up to the next op or
  the step's end), less the Python calls that start in it (library wrappers and modules
  run the same on GPU tensors): up to 50 µs of interpreter glue, or, when the thread
  freed a CPU block of at least 128 KiB in the gap (glibc's default mmap threshold:
  releasing the chain's intermediates), up to the duration of the chain's longest op
  (releasing a buffer costs less than filling it);
- the copy op: its host time while the GPU ran nothing but this copy, times the share of
  the copied bytes that would not move if the ops ran on the GPU: 1 − (bytes of the first
  chain op's tensor inputs) / (bytes copied), clamped to [0, 1]; 0 when shapes were not
  recorded or an input is a tensor list. That part is also in D001's saving on the same
  copy when the copy is pageable.
The total is at most the GPU idle time of the steps averaged over, and is averaged over
them; the GPU equivalents (a few µs of kernels) are not subtracted.
Reported when it is at least 50 µs per step and 1% of the step.
Per-step figures leave out a first step slower than twice the others' median (warm-up)
and, when the trace has no step markers, everything before the first GPU activity
(setup).

## References
- PyTorch performance tuning guide: "Enable asynchronous data loading and augmentation".
- torchvision docs, "Transforms v2: accelerated transforms on GPU tensors".
"#,
};

/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.05;
/// Smallest saving reported, % of the step.
const MIN_SHARE_PCT: f64 = 1.0;
/// Most offenders listed as locations.
const MAX_SITES: usize = 5;
/// Time between two ops of a chain counted without further evidence: Python glue (ns).
const GLUE_NS: i64 = 50_000;
/// Shortest function that launches no GPU work, or stretch of a function's own code with
/// no call recorded, counted (CPU image libraries aside): shorter ones are the
/// interpreter's glue between calls (ns).
const HOST_CODE_MIN_NS: i64 = 100_000;
/// Smallest CPU free that shows a gap is spent releasing the chain's intermediates
/// (glibc's default mmap threshold: larger blocks go back to the OS, at a cost that grows
/// with their size; smaller ones return to the heap in microseconds).
const FREE_MIN_BYTES: i64 = 128 * 1024;

/// Host-only ops that cost nothing worth moving (metadata, views, allocation, scalar
/// reads), or whose cost other rules own.
const CHEAP: &[&str] = &[
    "aten::view",
    "aten::view_as",
    "aten::reshape",
    "aten::reshape_as",
    "aten::flatten",
    "aten::unflatten",
    "aten::movedim",
    "aten::swapaxes",
    "aten::swapdims",
    "aten::diagonal",
    "aten::_reshape_alias",
    "aten::_unsafe_view",
    "aten::as_strided",
    "aten::transpose",
    "aten::t",
    "aten::permute",
    "aten::expand",
    "aten::expand_as",
    "aten::squeeze",
    "aten::unsqueeze",
    "aten::slice",
    "aten::select",
    "aten::narrow",
    "aten::unbind",
    "aten::split",
    "aten::chunk",
    "aten::split_with_sizes",
    "aten::tensor_split",
    "aten::unflatten_dense_tensors",
    "aten::detach",
    "aten::detach_",
    "aten::alias",
    "aten::lift_fresh",
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::resize_",
    "aten::set_",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::is_nonzero",
    "aten::pin_memory",
    "aten::_pin_memory",
    "aten::record_stream",
    "aten::result_type",
];

#[derive(Default)]
struct Site {
    count: u64,
    host_ns: i64,
    idle_ns: i64,
    op: Option<u32>,
    frame: bool,
    /// For host code seen through frames: which kind.
    kind: Option<host_code::Kind>,
}

/// How a site of the user's code the profiler records no call in is named.
const UNTRACED: &str = "its own code (no call recorded)";

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let Some((pid, tid)) = main_thread(p) else {
        return Vec::new();
    };
    let launched = ctx.launched();
    let steady = Steady::of(p);
    // What other rules own.
    let mut claimed: FxHashSet<u32> = FxHashSet::default();
    for m in crate::analysis::migration::find(p, &ctx.metrics.timeline, launched) {
        claimed.insert(m.factory);
        claimed.extend(m.chain);
    }
    let trips: Vec<(i64, i64)> = crate::analysis::transfers::round_trips(p, &ctx.metrics.timeline)
        .into_iter()
        .map(|t| t.window)
        .collect();
    let mut trips = trips;
    trips.sort();
    let in_trip = |a: i64, b: i64| inside_any(&trips, a, b);
    let host_code: Vec<host_code::Range> = HostCode::new(p, pid, tid, HOST_CODE_MIN_NS)
        .find(|t| steady.includes(p, t))
        .into_iter()
        .filter(|r| !in_trip(r.start_ns, r.end_ns))
        .collect();
    let frame_ranges: Vec<(i64, i64)> = host_code
        .iter()
        .filter(|r| r.kind != host_code::Kind::Untraced)
        .map(|r| (r.start_ns, r.end_ns))
        .collect();
    let in_frame = |a: i64, b: i64| inside_any(&frame_ranges, a, b);
    let mut sites: BTreeMap<(String, String), Site> = BTreeMap::new();
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    let mut site_ranges: Vec<((String, String), i64, i64)> = Vec::new();
    for (i, o) in p.ops.iter().enumerate() {
        let i = i as u32;
        // Cheapest tests first: most ops fail one of the first few.
        if o.pid != pid
            || o.tid != tid
            || o.kind != OpKind::Op
            || !launched.host_only(i)
            || !is_top_level(p, i)
            || !steady.includes(p, o.ts_ns)
            || !o.name.contains("::")
            || o.name.starts_with("autograd::")
            || CHEAP.contains(&&*o.name)
            || claimed.contains(&i)
            || in_data_loader(p, i)
            || in_trip(o.ts_ns, o.end_ns())
            || in_frame(o.ts_ns, o.end_ns())
        {
            continue;
        }
        let source = p
            .user_frame(i)
            .map(|f| f.name.to_string())
            .unwrap_or_default();
        let key = (o.name.to_string(), source);
        site_ranges.push((key.clone(), o.ts_ns, o.end_ns()));
        let s = sites.entry(key).or_default();
        s.count += 1;
        s.host_ns += o.dur_ns;
        s.op = s.op.or(Some(i));
        ranges.push((o.ts_ns, o.end_ns()));
    }
    for r in &host_code {
        let name = &p.python_frames[r.frame as usize].name;
        let label = match r.kind {
            host_code::Kind::Untraced => format!("{name}, {UNTRACED}"),
            _ => name.to_string(),
        };
        let key = (label, String::new());
        site_ranges.push((key.clone(), r.start_ns, r.end_ns));
        let s = sites.entry(key).or_default();
        s.count += 1;
        s.host_ns += r.end_ns - r.start_ns;
        s.frame = true;
        s.kind = Some(r.kind);
        ranges.push((r.start_ns, r.end_ns));
    }
    if sites.is_empty() {
        return Vec::new();
    }
    // Each instant once (ops never overlap each other; frames hold no counted op).
    let merged = merge(ranges);
    let own = own_gaps(&ctx.metrics.timeline, &merged);
    let gaps = &own;
    for (key, a, b) in &site_ranges {
        if let Some(s) = sites.get_mut(key) {
            s.idle_ns += idle_overlap(gaps, *a, *b);
        }
    }
    let n = steady.n;
    let host_ns: i64 = merged.iter().map(|&(a, b)| b - a).sum();
    let ops_idle_ns: i64 = merged.iter().map(|&(a, b)| idle_overlap(gaps, a, b)).sum();
    // The chains that feed a host→device copy: the time between their ops, the copy and
    // the time after it.
    let chains = chains(
        ctx,
        launched,
        &steady,
        (&merged, gaps),
        &claimed,
        &trips,
        (pid, tid),
    );
    let mut pieces: Vec<(i64, i64)> = merged.clone();
    pieces.extend(chains.iter().flat_map(|c| c.gaps.iter().copied()));
    let pieces = merge(pieces);
    let gap_idle_ns: i64 = pieces
        .iter()
        .map(|&(a, b)| idle_overlap(gaps, a, b))
        .sum::<i64>()
        - ops_idle_ns;
    let copy_ns: i64 = chains.iter().map(|c| c.copy_counted_ns).sum();
    // Never more than the GPU idled in the steps averaged over.
    let cap_ns: i64 = p
        .steps
        .iter()
        .skip(steady.first)
        .map(|s| idle_overlap(gaps, s.start_ns.max(steady.from_ns), s.end_ns))
        .sum();
    let idle_ns = (ops_idle_ns + gap_idle_ns + copy_ns).min(cap_ns);
    // The fix: none of this host time (the ops, the time between them, the copied bytes
    // that would not move) happens on the training thread; the step is replayed without it.
    // Only where this work held the GPU back (see `own_gaps`).
    let mut cuts = intersect(&pieces, gaps);
    cuts.extend(chains.iter().map(|c| {
        let t = p.ops[c.copy as usize].ts_ns;
        (t, t + c.copy_counted_ns)
    }));
    let change = Change {
        host_cuts: cuts,
        ..Default::default()
    };
    let saving_ms = ctx.replayed_ms(&change);
    if saving_ms < MIN_SAVING_MS || saving_ms < MIN_SHARE_PCT / 100.0 * ctx.step_ms() {
        return Vec::new();
    }
    let mut ranked: Vec<(&(String, String), &Site)> = sites.iter().collect();
    ranked.sort_by(|a, b| b.1.idle_ns.cmp(&a.1.idle_ns).then_with(|| a.0.cmp(b.0)));
    let top = ranked[0];
    let per_step = |ns: i64| fmt_ms(ns as f64 / 1e6 / n);
    let mut locations: Vec<Location> = ranked
        .iter()
        .take(if chains.is_empty() {
            MAX_SITES
        } else {
            MAX_SITES - 1
        })
        .map(|((name, source), s)| {
            let mut l = match (s.frame, s.op) {
                (false, Some(o)) => op_location(p, o),
                _ => Location {
                    source: Some(name.clone()),
                    ..Default::default()
                },
            };
            if l.source.is_none() && !source.is_empty() {
                l.source = Some(source.clone());
            }
            l.tensor = Some(format!("{} per step on the CPU", per_step(s.host_ns)));
            l
        })
        .collect();
    // The copy that moves the chains' result, when there is one.
    if let Some(c) = chains.iter().max_by_key(|c| c.copy_host_ns) {
        let mut l = op_location(p, c.copy);
        l.kernel = Some("Memcpy HtoD".into());
        l.tensor = Some(format!(
            "{} per step copying the preprocessed result to the GPU",
            per_step(chains.iter().map(|c| c.copy_host_ns).sum())
        ));
        locations.push(l);
    }
    let offenders: Vec<String> = ranked
        .iter()
        .take(3)
        .map(|((name, _), s)| format!("{name} {}", per_step(s.idle_ns)))
        .collect();
    let at = if top.0 .1.is_empty() {
        String::new()
    } else {
        format!(" at {}", top.0 .1)
    };
    let chain_text = if chains.is_empty() {
        String::new()
    } else {
        format!(
            "; with the time between them ({} per step of GPU idle) and the copy of their result to the GPU ({} per step), the GPU idles {} per step on their account",
            per_step(gap_idle_ns),
            per_step(copy_ns),
            per_step(idle_ns)
        )
    };
    let mut evidence = vec![
        ev("CPU-only tensor work per step", per_step(host_ns)),
        ev(
            "share of the step",
            format!(
                "{:.1}%",
                100.0 * host_ns as f64 / 1e6 / n / ctx.step_ms().max(1e-9)
            ),
        ),
        ev("GPU idle during it per step", per_step(ops_idle_ns)),
        ev("top offenders (GPU idle per step)", offenders.join(", ")),
    ];
    if !chains.is_empty() {
        let copied: u64 = chains.iter().map(|c| c.copy_bytes).sum();
        let kept: Vec<String> = chains
            .iter()
            .map(|c| format!("{:.0}%", 100.0 * c.moved_share))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        evidence.extend([
            ev(
                "host→device copies fed by these ops per step",
                format!(
                    "{:.1} ({})",
                    chains.len() as f64 / n,
                    fmt_bytes(copied as f64 / n)
                ),
            ),
            ev(
                "GPU idle between the chain's ops and after the copy per step",
                per_step(gap_idle_ns),
            ),
            ev(
                "copy time counted per step",
                format!(
                    "{} of {} (share of the copied bytes that would not move: {})",
                    per_step(copy_ns),
                    per_step(chains.iter().map(|c| c.copy_not_computing_ns).sum()),
                    kept.join(", ")
                ),
            ),
        ]);
    }
    if idle_ns < ops_idle_ns + gap_idle_ns + copy_ns {
        evidence.push(ev("capped at the GPU idle time per step", per_step(cap_ns)));
    }
    // Host code seen through frames (the program's functions, array and image
    // libraries), not only tensor ops.
    let through_frames = sites.values().any(|s| s.kind.is_some());
    let d = Draft {
        change: Some(change),
        title: if through_frames {
            "Host work that launches no GPU work runs inside the step".into()
        } else {
            "Tensors are preprocessed on the CPU inside the step".into()
        },
        message: format!(
            "The training thread spends {} per step {} (largest: `{}`{at}); the GPU idles {} per step meanwhile{chain_text}",
            per_step(host_ns),
            what_runs(&sites),
            top.0 .0,
            per_step(ops_idle_ns),
        ),
        saving_ms,
        estimate: format!(
            "the step replayed without the host time of these CPU-only ops{} (each instant once){}: what the step shortens where the host held the GPU back, averaged over steps; the few µs their GPU equivalents would take are not added{}{}",
            if through_frames {
                ", functions and untraced code (shorter than 100 µs: interpreter glue, not counted)"
            } else {
                ""
            },
            if chains.is_empty() {
                ""
            } else {
                "; for the ops feeding a host→device copy, also the time between them, before the copy and right after it, outside the Python calls made there, that is interpreter glue (up to 50 µs a gap) or the release of their CPU intermediates (a gap holding a CPU free of 128 KiB or more: up to the chain's longest op), and the time the copy op held the host while the GPU ran nothing else, times the share of the copied bytes that would not move if the ops ran on the GPU (1 − the bytes of the first op's inputs / the bytes copied; 0 without recorded shapes)"
            },
            steady.note,
            if chains.is_empty() {
                ""
            } else {
                ". The copy time counted here is also in D001's saving on the same copy: do not add the two"
            },
        ),
        evidence,
        explanation: if through_frames {
            format!(
                "This host work (tensor ops on CPU tensors, array, image or other Python code) runs on the training thread, in series with the step: for {} per step no kernel is launched and the GPU idles. Done on GPU tensors it takes microseconds; in DataLoader workers it runs in parallel with training.",
                fmt_ms(saving_ms)
            )
        } else {
            format!(
                "These ops compute on CPU tensors on the training thread, in series with the step: for {} per step no kernel is launched and the GPU idles. On the GPU the same ops take microseconds; in DataLoader workers they run in parallel with training.",
                fmt_ms(saving_ms)
            )
        },
        fixes: vec![
            "Copy the raw batch to the GPU first (`x.cuda(non_blocking=True)`), then run the same ops on the GPU tensor".into(),
            "Or move the preprocessing into the Dataset so DataLoader workers (`num_workers > 0`) run it in parallel".into(),
            "For image augmentation use GPU transforms (torchvision transforms v2 on CUDA tensors, Kornia, DALI)".into(),
        ],
        locations,
    };
    vec![d.finish(&META, ctx)]
}

/// The sites in words: `in 6 CPU-only tensor ops that launch no GPU work`, or with host
/// code seen through frames `on host work that launches no GPU work: 2 CPU-only tensor
/// ops, 3 library or program functions and untraced code in 1 function`.
fn what_runs(sites: &BTreeMap<(String, String), Site>) -> String {
    let count = |k: Option<host_code::Kind>| sites.values().filter(|s| s.kind == k).count();
    let plural = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    let ops = count(None);
    let frames = count(Some(host_code::Kind::Frame)) + count(Some(host_code::Kind::Transform));
    let untraced = count(Some(host_code::Kind::Untraced));
    if frames == 0 && untraced == 0 {
        return format!(
            "in {} that launch no GPU work",
            plural(ops, "CPU-only tensor op")
        );
    }
    let mut parts = Vec::new();
    if ops > 0 {
        parts.push(plural(ops, "CPU-only tensor op"));
    }
    if frames > 0 {
        parts.push(plural(frames, "library or program function"));
    }
    if untraced > 0 {
        parts.push(format!("untraced code in {}", plural(untraced, "function")));
    }
    let last = parts.pop().unwrap_or_default();
    let list = if parts.is_empty() {
        last
    } else {
        format!("{} and {last}", parts.join(", "))
    };
    format!("on host work that launches no GPU work: {list}")
}

/// The GPU idle that host work in `work` (sorted, disjoint) is to blame for: the gaps
/// the host caused, and of the gaps a sync drained, in each step, the last part of the
/// work in them beyond the step's GPU busy time. Without the sync the host would do that
/// work while the step's queued GPU work runs; only what exceeds it would still find the
/// GPU idle. The rest is the sync's to save (S001, C002).
fn own_gaps(t: &Timeline, work: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let gaps = t.idle_gaps.iter().zip(&t.sync_drained);
    let mut out: Vec<(i64, i64)> = gaps.filter(|g| !g.1).map(|g| *g.0).collect();
    for s in &t.steps {
        // A step's gaps start inside it (the gaps are sorted).
        let (lo, hi) = (s.start_ns, s.start_ns + s.dur_ns);
        let from = t.idle_gaps.partition_point(|g| g.0 < lo);
        let to = t.idle_gaps.partition_point(|g| g.0 < hi);
        let drained = t.sync_drained.get(from..to).unwrap_or_default();
        let in_step: Vec<(i64, i64)> = t.idle_gaps[from..to]
            .iter()
            .zip(drained)
            .filter(|g| *g.1)
            .map(|g| *g.0)
            .collect();
        // Only the work that overlaps these gaps: a scan of all of it per step is
        // quadratic on long traces.
        let (Some(first), Some(last)) = (in_step.first(), in_step.last()) else {
            continue;
        };
        let w0 = work.partition_point(|w| w.1 <= first.0);
        let w1 = work.partition_point(|w| w.0 < last.1).max(w0);
        let busy = intersect(&work[w0..w1], &in_step);
        let total: i64 = busy.iter().map(|(a, b)| b - a).sum();
        let mut left = (total - s.gpu_busy_ns).max(0);
        for &(a, b) in busy.iter().rev() {
            if left <= 0 {
                break;
            }
            let take = (b - a).min(left);
            out.push((b - take, b));
            left -= take;
        }
    }
    merge(out)
}

/// The parts of sorted, disjoint `a` inside sorted, disjoint `b`.
fn intersect(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (lo, hi) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if lo < hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Sorted ranges with overlapping ones joined.
fn merge(mut ranges: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// CPU-only ops feeding one host→device copy.
struct Chain {
    /// The copy op (top level).
    copy: u32,
    /// Counted parts of the time between the chain's ops, before the copy and after it.
    gaps: Vec<(i64, i64)>,
    /// Bytes the copy moved to the GPU.
    copy_bytes: u64,
    /// Share of those bytes that would not move if the chain ran on the GPU (0..=1).
    moved_share: f64,
    /// Host time of the copy op, ns.
    copy_host_ns: i64,
    /// Of the copy op's host time, the part while the GPU ran nothing but this copy, ns.
    copy_not_computing_ns: i64,
    /// `copy_not_computing_ns` times `moved_share`, ns.
    copy_counted_ns: i64,
}

/// A time range (start, end), ns.
type Span = (i64, i64);

/// For every host→device copy on the training thread in the steps averaged over: the
/// counted CPU-only ranges (`counted`, merged) between the last op before it that
/// launched GPU work (or the step's start) and the copy, with the time between them;
/// `gaps`: the GPU idle the rule counts (`own_gaps`).
fn chains(
    ctx: &Context,
    launched: &Launched,
    steady: &Steady,
    (counted, gaps): (&[Span], &[Span]),
    claimed: &FxHashSet<u32>,
    trips: &[(i64, i64)],
    (pid, tid): (i64, i64),
) -> Vec<Chain> {
    let p = ctx.profile;
    let mut out = Vec::new();
    for (_, copy, c) in crate::analysis::transfers::h2d_copy_ops(p, &ctx.metrics.timeline) {
        if c.pid != pid
            || c.tid != tid
            || claimed.contains(&copy)
            || !steady.includes(p, c.ts_ns)
            || in_data_loader(p, copy)
            || inside_any(trips, c.ts_ns, c.end_ns())
        {
            continue;
        }
        let Some(si) = step_of(&p.steps, c.ts_ns) else {
            continue;
        };
        let step = &p.steps[si];
        // Walk back to the last top-level op that launched GPU work or belongs to
        // another rule (a factory C003 owns, a DataLoader fetch, a round trip).
        let mut lo = step.start_ns;
        let mut j = copy as usize;
        while j > 0 {
            j -= 1;
            let o = &p.ops[j];
            if o.pid != pid || o.tid != tid || o.end_ns() <= lo {
                break;
            }
            if o.kind != OpKind::Op || o.end_ns() > c.ts_ns || !is_top_level(p, j as u32) {
                continue;
            }
            let k = j as u32;
            if !launched.host_only(k)
                || claimed.contains(&k)
                || in_data_loader(p, k)
                || inside_any(trips, o.ts_ns, o.end_ns())
            {
                lo = o.end_ns();
                break;
            }
        }
        let from = counted.partition_point(|r| r.0 < lo);
        let to = counted.partition_point(|r| r.1 <= c.ts_ns);
        let Some(ops) = counted.get(from..to).filter(|s| !s.is_empty()) else {
            continue;
        };
        let longest = ops.iter().map(|&(a, b)| b - a).max().unwrap_or(0);
        let allowance = |a: i64, b: i64| {
            if frees_cpu_memory(p, tid, a, b) {
                GLUE_NS.max(longest)
            } else {
                GLUE_NS
            }
        };
        let mut holes: Vec<(i64, i64)> = ops.windows(2).map(|w| (w[0].1, w[1].0)).collect();
        holes.push((ops[ops.len() - 1].1, c.ts_ns));
        // After the copy: up to the next top-level op on the thread, or the step's end.
        let next = p.ops[copy as usize + 1..]
            .iter()
            .enumerate()
            .take_while(|(_, o)| o.pid == pid && o.tid == tid)
            .find(|&(k, o)| {
                o.kind == OpKind::Op
                    && o.ts_ns >= c.end_ns()
                    && is_top_level(p, (copy as usize + 1 + k) as u32)
            })
            .map_or(step.end_ns, |(_, o)| o.ts_ns.min(step.end_ns));
        holes.push((c.end_ns(), next));
        let gaps_counted: Vec<(i64, i64)> = holes
            .into_iter()
            .filter(|&(a, b)| b > a)
            .flat_map(|(a, b)| outside_calls(p, (pid, tid), a, b, allowance(a, b)))
            .collect();
        let memcpys: Vec<u32> = ctx
            .metrics
            .timeline
            .gpu_in_steps
            .iter()
            .copied()
            .filter(|&k| {
                let a = &p.gpu[k as usize];
                a.copy_dir() == Some(CopyDir::HtoD)
                    && a.op.is_some_and(|o| p.top_level_op(o) == copy)
            })
            .collect();
        let copy_bytes: u64 = memcpys
            .iter()
            .filter_map(|&k| p.gpu[k as usize].bytes)
            .sum();
        let first = first_chain_op(p, launched, ops[0].0, c.ts_ns, (pid, tid));
        let moved_share = match (
            first.and_then(|f| input_bytes(&p.ops[f as usize])),
            copy_bytes,
        ) {
            (Some(src), b) if b > 0 => (1.0 - src as f64 / b as f64).clamp(0.0, 1.0),
            _ => 0.0,
        };
        let nc = not_computing(p, gaps, c.ts_ns, c.end_ns(), &memcpys);
        out.push(Chain {
            copy,
            gaps: gaps_counted,
            copy_bytes,
            moved_share,
            copy_host_ns: c.dur_ns,
            copy_not_computing_ns: nc,
            copy_counted_ns: (nc as f64 * moved_share) as i64,
        });
    }
    out
}

/// The parts of the gap [a, b) on the thread outside the Python calls made in it, the
/// first `budget` ns of them. A call made between two ops (a library wrapper such as
/// `F.interpolate`, a module's `forward`) runs the same on GPU tensors; the rest is the
/// interpreter between the calls and the release of the chain's intermediates.
fn outside_calls(
    p: &Profile,
    (pid, tid): (i64, i64),
    a: i64,
    b: i64,
    budget: i64,
) -> Vec<(i64, i64)> {
    let frames = &p.python_frames;
    let from = frames.partition_point(|f| (f.pid, f.tid, f.ts_ns) < (pid, tid, a));
    let mut out = Vec::new();
    let (mut cursor, mut left) = (a, budget);
    let mut take = |x: i64, y: i64, out: &mut Vec<(i64, i64)>| {
        let y = y.min(x + left);
        if y > x {
            out.push((x, y));
            left -= y - x;
        }
    };
    for f in frames[from..]
        .iter()
        .take_while(|f| f.pid == pid && f.tid == tid && f.ts_ns < b)
    {
        if f.ts_ns < cursor {
            continue;
        }
        take(cursor, f.ts_ns, &mut out);
        cursor = f.end_ns().min(b);
    }
    take(cursor, b, &mut out);
    out
}

/// True when the thread freed a CPU block of at least [`FREE_MIN_BYTES`] in [a, b).
fn frees_cpu_memory(p: &Profile, tid: i64, a: i64, b: i64) -> bool {
    let from = p.memory.partition_point(|m| m.ts_ns < a);
    p.memory[from..]
        .iter()
        .take_while(|m| m.ts_ns < b)
        .any(|m| m.tid == tid && !m.is_gpu() && m.bytes <= -FREE_MIN_BYTES)
}

/// The first top-level CPU-only op in [a, b) on the thread that is not bookkeeping.
fn first_chain_op(
    p: &Profile,
    launched: &Launched,
    a: i64,
    b: i64,
    (pid, tid): (i64, i64),
) -> Option<u32> {
    let from = p
        .ops
        .partition_point(|o| (o.pid, o.tid, o.ts_ns) < (pid, tid, a));
    p.ops[from..]
        .iter()
        .enumerate()
        .take_while(|(_, o)| o.pid == pid && o.tid == tid && o.ts_ns < b)
        .map(|(k, o)| ((from + k) as u32, o))
        .find(|&(k, o)| {
            o.kind == OpKind::Op
                && o.name.contains("::")
                && !CHEAP.contains(&&*o.name)
                && is_top_level(p, k)
                && launched.host_only(k)
        })
        .map(|(k, _)| k)
}

/// Bytes of an op's tensor inputs from the recorded shapes and types; `None` when
/// shapes were not recorded, no input is a tensor, or one is a list of tensors (whose
/// sizes the trace does not give).
fn input_bytes(o: &CpuOp) -> Option<u64> {
    let dims = parse_dims(o.input_dims.as_deref()?);
    let types = parse_types(o.input_types.as_deref()?);
    if types
        .iter()
        .any(|t| t.ends_with("List") && t != "ScalarList")
    {
        return None;
    }
    let mut total = None;
    for (d, t) in dims.iter().zip(&types) {
        let Some(dt) = Dtype::from_kineto(t) else {
            continue;
        };
        total = Some(total.unwrap_or(0) + numel(d).saturating_mul(dt.itemsize() as u64));
    }
    total
}

/// True when op `i` runs inside a DataLoader `__next__` annotation (D003's).
fn in_data_loader(p: &Profile, i: u32) -> bool {
    p.op_ancestors(i).any(|a| {
        let o = &p.ops[a as usize];
        o.kind == OpKind::Annotation && o.name.starts_with("enumerate(DataLoader)#")
    })
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder, PID, TID};
    use serde_json::json;

    /// Steps of 3 ms: (with `cpu`) 1 ms of CPU-only ops (`aten::div` 300 µs,
    /// `aten::upsample_bilinear2d` 700 µs) and a view, then `.cuda()` and a 1 ms kernel;
    /// otherwise the same ops launch GPU kernels.
    fn trace(cpu: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 3_000.0 * s as f64;
            b.step(s + 1, t0, 3_000.0);
            b.frame("train.py(20): step", t0 + 1.0, 1_149.0);
            let div = b.op("aten::div", t0 + 10.0, 300.0);
            let up = b.op("aten::upsample_bilinear2d", t0 + 320.0, 700.0);
            b.op("aten::view", t0 + 1_030.0, 5.0);
            if !cpu {
                b.kernel(
                    "div_kernel",
                    div,
                    t0 + 20.0,
                    t0 + 30.0,
                    5.0,
                    [64, 1, 1],
                    [256, 1, 1],
                );
                b.kernel(
                    "upsample_kernel",
                    up,
                    t0 + 330.0,
                    t0 + 340.0,
                    5.0,
                    [64, 1, 1],
                    [256, 1, 1],
                );
            }
            let mm = b.op("aten::mm", t0 + 1_100.0, 50.0);
            b.kernel(
                "gemm",
                mm,
                t0 + 1_110.0,
                t0 + 1_120.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_on_cpu_only_ops() {
        let r = trace(true).report();
        let f = finding(&r, "C004");
        // The GPU idles through both ops: 1.0 ms per step.
        assert!((f.saving_ms - 1.0).abs() < 0.01, "saving {}", f.saving_ms);
        assert_eq!(
            f.locations[0].op.as_deref(),
            Some("aten::upsample_bilinear2d")
        );
        assert_eq!(f.locations[0].source.as_deref(), Some("train.py(20): step"));
    }

    #[test]
    fn silent_when_ops_run_on_gpu() {
        assert!(!codes(&trace(false).report()).contains(&"C004"));
    }

    /// How [`chain_trace`] records the chain.
    #[derive(Clone, Copy)]
    struct Chain {
        /// `Input Dims`/`Input type` recorded.
        shapes: bool,
        /// CPU frees of the intermediates recorded in the gaps.
        frees: bool,
        /// An op that launches a kernel between the chain and the copy.
        launch_between: bool,
    }

    const ALL: Chain = Chain {
        shapes: true,
        frees: true,
        launch_between: false,
    };

    /// A CPU `[memory]` free on the main thread.
    fn cpu_free(b: &mut TraceBuilder, ts: f64, bytes: i64) {
        b.raw(
            json!({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
            "pid": PID, "tid": TID, "ts": ts, "args": {"Total Reserved": 0, "Total Allocated": 0,
            "Bytes": -bytes, "Device Id": -1, "Device Type": 0, "Addr": 1}}),
        );
    }

    /// Steps of 10 ms: `aten::to` (uint8 → float32, 1 ms) at 100 µs, a 400 µs gap,
    /// `aten::div` (1 ms), a 200 µs gap, then `.cuda()`: `aten::to` of 1.2 ms whose pageable
    /// HtoD memcpy runs 1 ms and moves 4× the uint8 input's bytes, a 200 µs gap, then
    /// `aten::mm` with a 1 ms kernel.
    fn chain_trace(c: Chain) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        let (numel, dims) = (8 * 3 * 64 * 64, json!([[8, 3, 64, 64], []]));
        for s in 0..3 {
            let t0 = 10_000.0 * s as f64;
            b.step(s + 1, t0, 10_000.0);
            let args = |types: serde_json::Value| {
                if c.shapes {
                    json!({"Input Dims": dims, "Input type": types})
                } else {
                    json!({})
                }
            };
            b.op_with(
                "aten::to",
                t0 + 100.0,
                1_000.0,
                args(json!(["unsigned char", "Scalar"])),
            );
            b.op_with(
                "aten::div",
                t0 + 1_500.0,
                1_000.0,
                args(json!(["float", "Scalar"])),
            );
            if c.frees {
                cpu_free(&mut b, t0 + 1_105.0, 4 * numel);
                cpu_free(&mut b, t0 + 2_505.0, 4 * numel);
                cpu_free(&mut b, t0 + 3_905.0, 4 * numel);
            }
            if c.launch_between {
                let add = b.op("aten::add", t0 + 2_550.0, 50.0);
                b.kernel(
                    "add_kernel",
                    add,
                    t0 + 2_560.0,
                    t0 + 2_570.0,
                    5.0,
                    [64, 1, 1],
                    [256, 1, 1],
                );
            }
            let to = b.op_with(
                "aten::to",
                t0 + 2_700.0,
                1_200.0,
                args(json!(["float", "Scalar"])),
            );
            b.memcpy(
                "HtoD",
                "Pageable",
                "Device",
                to,
                t0 + 2_750.0,
                1_100.0,
                t0 + 2_800.0,
                1_000.0,
                4 * numel as u64,
            );
            let mm = b.op("aten::mm", t0 + 4_100.0, 50.0);
            b.kernel(
                "gemm",
                mm,
                t0 + 4_110.0,
                t0 + 4_120.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn counts_the_chain_feeding_a_copy() {
        let r = chain_trace(ALL).report();
        let f = finding(&r, "C004");
        // Ops 2 ms; the gaps (400 + 200 µs, and 200 µs after the copy) hold frees of the
        // intermediates: 0.8 ms; the copy op holds the host 1.2 ms while the GPU runs
        // only its copy, 3/4 of whose bytes would not move: 0.9 ms.
        assert!((f.saving_ms - 3.7).abs() < 0.01, "saving {}", f.saving_ms);
        // Never more than the GPU idles: 10 ms − 2 ms busy.
        assert!(f.saving_ms <= 8.0);
        assert!(f.estimate.contains("D001"), "{}", f.estimate);
        assert!(f
            .locations
            .iter()
            .any(|l| l.kernel.as_deref() == Some("Memcpy HtoD")));
    }

    #[test]
    fn conservative_without_shapes_or_frees() {
        // No frees: each gap counts 50 µs of glue; no shapes: none of the copy.
        let r = chain_trace(Chain {
            shapes: false,
            frees: false,
            ..ALL
        })
        .report();
        let f = finding(&r, "C004");
        assert!((f.saving_ms - 2.15).abs() < 0.01, "saving {}", f.saving_ms);
    }

    #[test]
    fn no_chain_across_gpu_work() {
        // A kernel launched between the ops and the copy: the copy moves something else,
        // so only the ops' own time counts, as without a copy.
        let r = chain_trace(Chain {
            launch_between: true,
            ..ALL
        })
        .report();
        let f = finding(&r, "C004");
        assert!((f.saving_ms - 2.0).abs() < 0.01, "saving {}", f.saving_ms);
        assert!(f.locations.iter().all(|l| l.kernel.is_none()));
    }

    #[test]
    fn silent_for_a_plain_copy() {
        // `.cuda()` of a batch with no CPU work before it, blocking 1.2 ms while the GPU
        // idles: D001's business, not a preprocessing chain.
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 3_000.0 * s as f64;
            b.step(s + 1, t0, 3_000.0);
            b.op("aten::view", t0 + 10.0, 5.0);
            let to = b.op_with(
                "aten::to",
                t0 + 100.0,
                1_200.0,
                json!({"Input Dims": [[8, 3, 64, 64], []], "Input type": ["float", "Scalar"]}),
            );
            b.memcpy(
                "HtoD",
                "Pageable",
                "Device",
                to,
                t0 + 150.0,
                1_100.0,
                t0 + 200.0,
                1_000.0,
                4 * 8 * 3 * 64 * 64,
            );
            let mm = b.op("aten::mm", t0 + 1_400.0, 50.0);
            b.kernel(
                "gemm",
                mm,
                t0 + 1_410.0,
                t0 + 1_420.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        assert!(!codes(&b.report()).contains(&"C004"));
    }

    #[test]
    fn capped_at_the_gpu_idle_time() {
        // Steps of 3 ms: a 1 ms CPU-only cast, then a copy op of ~2 ms whose memcpy
        // keeps the GPU busy 1.97 ms. Ops 1 ms + 3/4 of the copy's 1.99 ms exceed the
        // GPU's 1.03 ms of idle time per step: the saving is that.
        let mut b = TraceBuilder::new();
        let numel: u64 = 8 * 3 * 64 * 64;
        for s in 0..3 {
            let t0 = 3_000.0 * s as f64;
            b.step(s + 1, t0, 3_000.0);
            b.op_with(
                "aten::to",
                t0,
                1_000.0,
                json!({"Input Dims": [[8, 3, 64, 64], []], "Input type": ["unsigned char", "Scalar"]}),
            );
            let to = b.op("aten::to", t0 + 1_000.0, 1_990.0);
            b.memcpy(
                "HtoD",
                "Pageable",
                "Device",
                to,
                t0 + 1_005.0,
                1_980.0,
                t0 + 1_010.0,
                1_970.0,
                4 * numel,
            );
        }
        let f = finding(&b.report(), "C004").saving_ms;
        assert!((f - 1.03).abs() < 0.01, "saving {f}");
    }

    /// Steps of 5 ms: the step's function (0–2.2 ms) runs `augment` (0.1–1.1 ms, numpy
    /// calls only, no op) and 0.8 ms of its own code with no call recorded (1.2–2.0
    /// ms), then launches a 2 ms kernel at 2.1 ms; with `sync`, a `.item()` blocks at
    /// the step's end (4.1–4.2 ms) — the next step's host work then starts from a GPU
    /// a sync drained.
    fn host_code_trace(sync: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 5_000.0 * s as f64;
            b.step(s + 1, t0, 5_000.0);
            b.frame("train.py(20): step", t0 + 1.0, 2_199.0);
            b.frame("train.py(9): augment", t0 + 100.0, 1_000.0);
            b.frame("numpy/random/mtrand.py(1): rand", t0 + 150.0, 800.0);
            b.frame(
                "<built-in method clip of numpy.ndarray object at 0x1>",
                t0 + 1_250.0,
                20.0,
            );
            let mm = b.op("aten::mm", t0 + 2_100.0, 50.0);
            b.kernel(
                "gemm",
                mm,
                t0 + 2_110.0,
                t0 + 2_120.0,
                2_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
            if sync {
                b.runtime("cudaStreamSynchronize", t0 + 2_160.0, 1_965.0, None);
            }
        }
        b
    }

    #[test]
    fn counts_the_programs_host_code_seen_through_frames() {
        let r = host_code_trace(false).report();
        let f = finding(&r, "C004");
        // augment 1 ms, and the step's own code 1.1–2.1 ms less the 20 µs call: the GPU
        // idles from the previous step's kernel end (4.12 ms) through both.
        assert!((f.saving_ms - 2.0).abs() < 0.1, "saving {}", f.saving_ms);
        assert_eq!(
            f.title,
            "Host work that launches no GPU work runs inside the step"
        );
        let sites: Vec<&str> = f
            .locations
            .iter()
            .filter_map(|l| l.source.as_deref())
            .collect();
        assert!(sites.contains(&"train.py(9): augment"), "{sites:?}");
        assert!(
            sites
                .iter()
                .any(|s| s.starts_with("train.py(20): step, its own code")),
            "{sites:?}"
        );
    }

    #[test]
    fn host_code_after_a_sync_is_the_syncs() {
        // Each step's host work runs after the previous step's sync drained the GPU: the
        // sync's to save (S001), not this rule's. The first step has no sync before.
        let r = host_code_trace(true).report();
        assert!(
            codes(&r).iter().all(|&c| c != "C004") || finding(&r, "C004").saving_ms < 1.0,
            "{:?}",
            codes(&r)
        );
    }
}
