//! C004 cpu-preprocessing: tensor work done on the CPU inside the step, on the training
//! thread, while the GPU waits (normalising, resizing, augmenting before `.cuda()`).

use super::host_work::{
    idle_overlap, inside_any, is_top_level, main_thread, step_of, Launched, Steady,
};
use super::{
    ev, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status,
};
use crate::model::{OpKind, Profile};
use std::collections::{BTreeMap, HashSet};

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
Host-only tensor work inside the steps on the training thread: outermost operators
(`aten::...`) that launched no GPU work at all (no kernel, memcpy or memset, under them
or their children), and, when stacks were recorded, `torchvision/transforms` and PIL
frames whose ops launched nothing. These are CPU tensors being computed on: normalising,
resizing, casting, augmenting, building masks. Left to other rules: cheap bookkeeping
ops (views, `empty`, `item`), factory ops copied to the GPU right after (C003), work
between a GPU → CPU → GPU round trip (C002) and work inside DataLoader `__next__`
(D003).

## Why it costs time
The training thread does this work in series with the step. While it runs, no kernel is
launched, and once the queued ones finish the GPU idles. The same ops on a GPU tensor
take microseconds; in DataLoader workers they run in parallel with the step.

## Example
Between the step's start and `aten::to` (`.cuda()`), the main thread runs `aten::to`
(uint8 → float32 on the CPU) 80 µs, `aten::div` 60 µs, `aten::upsample_bilinear2d`
400 µs, `aten::sub` and `aten::div` 150 µs, none of which launched GPU work, with the
GPU idle throughout.

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
The saving is the GPU idle time during these ops' host time (each instant once),
averaged over steps; the GPU equivalents (a few µs of kernels) are not subtracted.
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

/// Python frames of CPU image libraries.
const TRANSFORM_FRAMES: &[&str] = &["torchvision/transforms/", "PIL/", "albumentations/"];

#[derive(Default)]
struct Site {
    count: u64,
    host_ns: i64,
    idle_ns: i64,
    op: Option<u32>,
    frame: bool,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let gaps = &ctx.metrics.timeline.idle_gaps;
    let Some((pid, tid)) = main_thread(p) else {
        return Vec::new();
    };
    let launched = ctx.launched();
    let steady = Steady::of(p);
    // What other rules own.
    let mut claimed: HashSet<u32> = HashSet::new();
    for m in super::late_gpu_migration::find(ctx, launched) {
        claimed.insert(m.factory);
        claimed.extend(m.chain);
    }
    let trips: Vec<(i64, i64)> = super::device_ping_pong::round_trips(ctx)
        .into_iter()
        .map(|t| t.window)
        .collect();
    let mut trips = trips;
    trips.sort();
    let in_trip = |a: i64, b: i64| inside_any(&trips, a, b);
    let frames = transform_frames(p, pid, tid, launched);
    let frame_ranges: Vec<(i64, i64)> = frames
        .iter()
        .map(|&f| {
            let fr = &p.python_frames[f as usize];
            (fr.ts_ns, fr.end_ns())
        })
        .collect();
    let in_frame = |a: i64, b: i64| inside_any(&frame_ranges, a, b);
    let mut sites: BTreeMap<(String, String), Site> = BTreeMap::new();
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    for (i, o) in p.ops.iter().enumerate() {
        let i = i as u32;
        if o.pid != pid
            || o.tid != tid
            || o.kind != OpKind::Op
            || !o.name.contains("::")
            || o.name.starts_with("autograd::")
            || CHEAP.contains(&&*o.name)
            || claimed.contains(&i)
            || !steady.includes(p, o.ts_ns)
            || !is_top_level(p, i)
            || !launched.host_only(i)
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
        let s = sites.entry((o.name.to_string(), source)).or_default();
        s.count += 1;
        s.host_ns += o.dur_ns;
        s.idle_ns += idle_overlap(gaps, o.ts_ns, o.end_ns());
        s.op = s.op.or(Some(i));
        ranges.push((o.ts_ns, o.end_ns()));
    }
    for &f in &frames {
        let fr = &p.python_frames[f as usize];
        if in_trip(fr.ts_ns, fr.end_ns()) || !steady.includes(p, fr.ts_ns) {
            continue;
        }
        let s = sites
            .entry((fr.name.to_string(), String::new()))
            .or_default();
        s.count += 1;
        s.host_ns += fr.dur_ns;
        s.idle_ns += idle_overlap(gaps, fr.ts_ns, fr.end_ns());
        s.frame = true;
        ranges.push((fr.ts_ns, fr.end_ns()));
    }
    if sites.is_empty() {
        return Vec::new();
    }
    // Each instant once (ops never overlap each other; frames hold no counted op).
    ranges.sort();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let n = steady.n;
    let idle_ns: i64 = merged.iter().map(|&(a, b)| idle_overlap(gaps, a, b)).sum();
    let host_ns: i64 = merged.iter().map(|&(a, b)| b - a).sum();
    let saving_ms = idle_ns as f64 / 1e6 / n;
    if saving_ms < MIN_SAVING_MS || saving_ms < MIN_SHARE_PCT / 100.0 * ctx.step_ms() {
        return Vec::new();
    }
    let mut ranked: Vec<(&(String, String), &Site)> = sites.iter().collect();
    ranked.sort_by(|a, b| b.1.idle_ns.cmp(&a.1.idle_ns).then_with(|| a.0.cmp(b.0)));
    let top = ranked[0];
    let locations: Vec<Location> = ranked
        .iter()
        .take(MAX_SITES)
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
            l.tensor = Some(format!(
                "{} per step on the CPU",
                fmt_ms(s.host_ns as f64 / 1e6 / n)
            ));
            l
        })
        .collect();
    let offenders: Vec<String> = ranked
        .iter()
        .take(3)
        .map(|((name, _), s)| format!("{name} {}", fmt_ms(s.idle_ns as f64 / 1e6 / n)))
        .collect();
    let at = if top.0 .1.is_empty() {
        String::new()
    } else {
        format!(" at {}", top.0 .1)
    };
    let d = Draft {
        title: "Tensors are preprocessed on the CPU inside the step".into(),
        message: format!(
            "The training thread spends {} per step in {} CPU-only tensor ops that launch no GPU work (largest: `{}`{at}); the GPU idles {} per step meanwhile",
            fmt_ms(host_ns as f64 / 1e6 / n),
            sites.len(),
            top.0 .0,
            fmt_ms(saving_ms),
        ),
        saving_ms,
        estimate: format!("GPU idle time during the host time of these CPU-only ops (each instant once), averaged over steps; the few µs their GPU equivalents would take are not subtracted{}", steady.note),
        evidence: vec![
            ev("CPU-only tensor work per step", fmt_ms(host_ns as f64 / 1e6 / n)),
            ev("share of the step", format!("{:.1}%", 100.0 * host_ns as f64 / 1e6 / n / ctx.step_ms().max(1e-9))),
            ev("GPU idle during it per step", fmt_ms(saving_ms)),
            ev("top offenders (GPU idle per step)", offenders.join(", ")),
        ],
        explanation: format!(
            "These ops compute on CPU tensors on the training thread, in series with the step: for {} per step no kernel is launched and the GPU idles. On the GPU the same ops take microseconds; in DataLoader workers they run in parallel with training.",
            fmt_ms(saving_ms)
        ),
        fixes: vec![
            "Copy the raw batch to the GPU first (`x.cuda(non_blocking=True)`), then run the same ops on the GPU tensor".into(),
            "Or move the preprocessing into the Dataset so DataLoader workers (`num_workers > 0`) run it in parallel".into(),
            "For image augmentation use GPU transforms (torchvision transforms v2 on CUDA tensors, Kornia, DALI)".into(),
        ],
        locations,
    };
    vec![d.finish(&META, ctx)]
}

/// True when op `i` runs inside a DataLoader `__next__` annotation (D003's).
fn in_data_loader(p: &Profile, i: u32) -> bool {
    p.op_ancestors(i).any(|a| {
        let o = &p.ops[a as usize];
        o.kind == OpKind::Annotation && o.name.starts_with("enumerate(DataLoader)#")
    })
}

/// Outermost transform-library frames on the thread, inside steps, whose ops launched
/// no GPU work.
fn transform_frames(p: &Profile, pid: i64, tid: i64, launched: &Launched) -> Vec<u32> {
    let is_tf = |n: &str| TRANSFORM_FRAMES.iter().any(|m| n.contains(m));
    let mut out = Vec::new();
    for (i, f) in p.python_frames.iter().enumerate() {
        if f.pid != pid || f.tid != tid || !is_tf(&f.name) || step_of(&p.steps, f.ts_ns).is_none() {
            continue;
        }
        let mut q = f.parent;
        let mut nested = false;
        while let Some(j) = q {
            let Some(pf) = p.python_frames.get(j as usize) else {
                break;
            };
            if is_tf(&pf.name) || pf.name.contains("torch/utils/data/") {
                nested = true;
                break;
            }
            q = pf.parent;
        }
        if nested {
            continue;
        }
        // Ops are sorted by (pid, tid, start): scan only those inside the frame.
        let from = p
            .ops
            .partition_point(|o| (o.pid, o.tid, o.ts_ns) < (pid, tid, f.ts_ns));
        let gpu = p.ops[from..]
            .iter()
            .enumerate()
            .take_while(|(_, o)| o.pid == pid && o.tid == tid && o.ts_ns < f.end_ns())
            .any(|(k, _)| !launched.host_only((from + k) as u32));
        if !gpu {
            out.push(i as u32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Steps of 3 ms: (with `cpu`) 1 ms of CPU-only ops (`aten::div` 300 µs,
    /// `aten::upsample_bilinear2d` 700 µs) and a view, then `.cuda()` and a 1 ms kernel;
    /// otherwise the same ops launch GPU kernels.
    fn trace(cpu: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 3_000.0 * s as f64;
            b.step(s + 1, t0, 3_000.0);
            b.frame("train.py(20): step", t0 + 1.0, 2_990.0);
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
}
