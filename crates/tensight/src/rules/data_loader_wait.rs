//! D003 data-loader-wait: the training loop waits for the DataLoader's next batch while
//! the GPU sits idle.

use super::{ev, fmt_ms, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status};
use crate::analysis::host_work::{idle_overlap, Steady};
use crate::analysis::simulate::Change;
use crate::model::{OpKind, Profile};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "D003",
    name: "data-loader-wait",
    category: Category::DataPipeline,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Host time inside the DataLoader's `__next__` during the steps, found as the
`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` (or
`_MultiProcessingDataLoaderIter`) annotations PyTorch records, or, without them, as
`torch/utils/data/dataloader.py(...): __next__` Python frames; and the GPU idle time
while the host is in there. The annotation's name tells whether batches are loaded in
the main process (`num_workers=0`) or by worker processes.

## Why it costs time
While the main thread fetches a batch it launches no GPU work; once the queued kernels
finish, the GPU waits. With `num_workers=0` the fetch includes reading, decoding,
augmenting and collating the whole batch on the training thread. With workers, a slow
`__next__` means the workers cannot keep up (too few, or too little prefetch), or the
main thread pins and copies large batches itself.

## Example
Each step opens with `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`
lasting 5.4 ms, with `torch/utils/data/_utils/fetch.py(49): fetch` and the dataset's
`__getitem__` under it, and no kernel runs on the GPU until it returns.

## Fix
```python
# before: batches built on the training thread
loader = DataLoader(ds, batch_size=64, shuffle=True)
# after: built ahead of time by worker processes, in pinned memory
loader = DataLoader(ds, batch_size=64, shuffle=True,
                    num_workers=8,            # ~ CPU cores available per GPU
                    pin_memory=True,          # then .cuda(non_blocking=True)
                    persistent_workers=True,  # no worker start-up each epoch
                    prefetch_factor=4)        # batches queued per worker
```
If the workers still cannot keep up, move augmentation to the GPU (torchvision
transforms v2 on CUDA tensors, DALI) or store pre-decoded data.

## Thresholds
The saving is the step replayed (`analysis::simulate`) with each `__next__` cut to what
a fed multi-process loader still costs per batch to hand over: 150 µs (median
`__next__` measured with 6 workers and `pin_memory=True` on an H200 host under the
profiler: 130 µs). Reported when it is at least 100 µs per step and 2% of the step.
Per-step figures leave out a first step slower than twice the others' median (warm-up)
and, when the trace has no step markers, everything before the first GPU activity
(setup).

## References
- PyTorch docs, `torch.utils.data` ("Single- and Multi-process Data Loading", "Memory
  Pinning").
- PyTorch performance tuning guide: "Enable asynchronous data loading and augmentation".
"#,
};

/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.1;
/// Smallest saving reported, % of the step.
const MIN_SHARE_PCT: f64 = 2.0;
/// What a fed multi-process loader still costs per batch, ns.
const HANDOFF_NS: i64 = 150_000;

/// One batch fetch.
struct Fetch {
    dur_ns: i64,
    idle_ns: i64,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let gaps = &ctx.metrics.timeline.idle_gaps;
    let (ranges, source, name) = fetch_ranges(p);
    let steady = Steady::of(p);
    let ranges: Vec<(i64, i64)> = ranges
        .into_iter()
        .filter(|&(a, _)| steady.includes(p, a))
        .collect();
    let fetches: Vec<Fetch> = ranges
        .iter()
        .map(|&(a, b)| Fetch {
            dur_ns: b - a,
            idle_ns: idle_overlap(gaps, a, b),
        })
        .collect();
    if fetches.is_empty() {
        return Vec::new();
    }
    let n = steady.n;
    let ms = |ns: i64| ns as f64 / 1e6 / n;
    // The timeline's figure when annotations exist, so the report's numbers agree.
    let idle_ns: i64 = if source == Source::Annotation {
        ctx.metrics
            .timeline
            .steps
            .iter()
            .skip(steady.first)
            .map(|s| s.idle.data_loader_ns)
            .sum()
    } else {
        fetches.iter().map(|f| f.idle_ns).sum()
    };
    let idle_ms = ms(idle_ns);
    // The fix: batches are ready when asked for; each fetch keeps only the handover.
    let change = Change {
        host_cuts: ranges
            .iter()
            .map(|&(a, b)| (a + HANDOFF_NS.min(b - a), b))
            .collect(),
        ..Default::default()
    };
    let saving_ms = ctx.replayed_ms(&change);
    if saving_ms < MIN_SAVING_MS || saving_ms < MIN_SHARE_PCT / 100.0 * ctx.step_ms() {
        return Vec::new();
    }
    let host_ms = ms(fetches.iter().map(|f| f.dur_ns).sum());
    let longest = fetches.iter().map(|f| f.dur_ns).max().unwrap_or(0);
    let single = name.contains("_SingleProcessDataLoaderIter");
    let multi = name.contains("_MultiProcessingDataLoaderIter");
    let mode = if single {
        "in the main process (num_workers=0)"
    } else if multi {
        "by worker processes (num_workers>0)"
    } else {
        "by an unknown loader mode"
    };
    let mut fixes = Vec::new();
    if single {
        fixes.push("Load in worker processes: `DataLoader(..., num_workers=8, persistent_workers=True, prefetch_factor=4)`".to_string());
    } else {
        fixes.push("The workers cannot keep up: raise `num_workers` and `prefetch_factor`, keep `persistent_workers=True`".to_string());
    }
    fixes.push("`pin_memory=True` and `.cuda(non_blocking=True)` so the copy does not block the training thread".into());
    fixes.push("Make each item cheaper: pre-decode/resize offline, or augment on the GPU (torchvision transforms v2 on CUDA tensors, DALI)".into());
    let d = Draft {
        change: Some(change),
        title: "The training loop waits for the DataLoader".into(),
        message: format!(
            "Fetching the next batch takes {} per step on the training thread (loaded {mode}); the GPU idles {} per step meanwhile",
            fmt_ms(host_ms),
            fmt_ms(idle_ms),
        ),
        saving_ms,
        estimate: format!(
            "the step replayed with each DataLoader `__next__` taking only the {} a fed multi-process loader still takes to hand a batch over: what the step shortens where the fetch held the GPU back, averaged over steps{}",
            fmt_ms(HANDOFF_NS as f64 / 1e6),
            steady.note
        ),
        evidence: vec![
            ev("batches fetched per step", format!("{:.1}", fetches.len() as f64 / n)),
            ev("host time in __next__ per step", fmt_ms(host_ms)),
            ev("longest fetch", fmt_ms(longest as f64 / 1e6)),
            ev("GPU idle during fetches per step", fmt_ms(idle_ms)),
            ev("loader", if name.is_empty() { "DataLoader".to_string() } else { name.clone() }),
            ev("found from", source.describe()),
        ],
        explanation: format!(
            "While the main thread waits for a batch it launches no GPU work, so the GPU idles {} per step. {}",
            fmt_ms(idle_ms),
            if single {
                "With num_workers=0 every batch is read, transformed and collated on the training thread, in series with the step."
            } else {
                "With workers, a slow __next__ means batches are not ready when the step asks for them."
            }
        ),
        fixes,
        locations: vec![Location {
            op: Some(if name.is_empty() { "DataLoader.__next__".to_string() } else { name }),
            ..Default::default()
        }],
    };
    vec![d.finish(&META, ctx)]
}

#[derive(PartialEq)]
enum Source {
    Annotation,
    Frame,
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Annotation => "enumerate(DataLoader)#... annotations".into(),
            Source::Frame => "dataloader.py __next__ Python frames".into(),
        }
    }
}

/// Host ranges of batch fetches (sorted), how they were found, and the loader's name.
fn fetch_ranges(p: &Profile) -> (Vec<(i64, i64)>, Source, String) {
    let mut name = String::new();
    let mut v: Vec<(i64, i64)> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with("enumerate(DataLoader)#"))
        .map(|o| {
            if name.is_empty() {
                name = o.name.to_string();
            }
            (o.ts_ns, o.end_ns())
        })
        .collect();
    if !v.is_empty() {
        v.sort();
        return (v, Source::Annotation, name);
    }
    let is_next =
        |n: &str| n.contains("torch/utils/data/dataloader.py(") && n.ends_with("): __next__");
    let mut v: Vec<(i64, i64)> = p
        .python_frames
        .iter()
        .filter(|f| is_next(&f.name))
        .filter(|f| {
            // outermost only
            let mut q = f.parent;
            while let Some(i) = q {
                let Some(pf) = p.python_frames.get(i as usize) else {
                    break;
                };
                if is_next(&pf.name) {
                    return false;
                }
                q = pf.parent;
            }
            true
        })
        .map(|f| (f.ts_ns, f.end_ns()))
        .collect();
    v.sort();
    (v, Source::Frame, String::new())
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Steps of 6 ms: `__next__` for `fetch_us`, then 1 ms of kernels.
    fn trace(fetch_us: f64) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 6_000.0 * s as f64;
            b.step(s + 1, t0, 6_000.0);
            b.annotation(
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                t0 + 5.0,
                fetch_us,
            );
            let mm = b.op("aten::mm", t0 + fetch_us + 10.0, 50.0);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm,
                t0 + fetch_us + 20.0,
                t0 + fetch_us + 30.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
            let mm2 = b.op("aten::mm", t0 + fetch_us + 70.0, 50.0);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm2,
                t0 + fetch_us + 80.0,
                t0 + fetch_us + 1_030.0,
                4_000.0 - fetch_us,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_when_loading_in_the_step() {
        let r = trace(4_000.0).report();
        let f = finding(&r, "D003");
        // GPU idle through the 4 ms fetch, minus 150 µs for a worker's handoff.
        assert!((f.saving_ms - 3.85).abs() < 0.01, "saving {}", f.saving_ms);
        assert!(f.fixes[0].contains("num_workers"), "{:?}", f.fixes);
    }

    #[test]
    fn silent_when_batches_are_ready() {
        assert!(!codes(&trace(100.0).report()).contains(&"D003"));
    }
}
