//! S001 host-sync-in-step: the host blocks on the GPU inside the step (`.item()`,
//! `.cpu()`, `torch.cuda.synchronize()`, a blocking copy), then the GPU idles while
//! the host catches up.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::simulate::{merge_intervals, Change};
use crate::analysis::SyncPoint;
use crate::model::{CopyDir, Profile, RuntimeKind};
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "S001",
    name: "host-sync-in-step",
    category: Category::Sync,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Points inside a step where the host blocks until the GPU has finished its queue:
`tensor.item()`, `.cpu()`, `.tolist()`, `.numpy()`, `torch.cuda.synchronize()`,
`event.synchronize()`, data-dependent shapes (`nonzero`, boolean masks) and blocking
copies. Each is found as a `cuda*Synchronize` call in the trace, attributed to the op
(and, with `with_stack=True`, the source line) that made it.

## Why it costs time
While the host waits, nothing new is queued. When the sync returns, the GPU is idle
until the host has launched the next kernel, and every op between the sync and that
launch runs on the critical path. A sync per step turns an asynchronous pipeline into
lock-step execution: the GPU idles for the host's launch latency every time.

## Example
The trace shows `aten::item` → `aten::_local_scalar_dense` → `cudaMemcpyAsync` (DtoH,
4 bytes) → `cudaStreamSynchronize`, followed by a GPU gap of a few hundred µs to
milliseconds before the next kernel.

## Fix
```python
# before: a sync every step
for x, y in loader:
    loss = step(x, y)
    if loss.item() > 100: ...
# after: keep values on the GPU; read them rarely, or asynchronously
for i, (x, y) in enumerate(loader):
    loss = step(x, y)
    if i % 100 == 0:
        print(loss.item())
# or: losses.append(loss.detach()); torch.stack(losses).cpu() after the loop
```
For blocking H2D copies: `pin_memory=True` in the DataLoader and
`x.cuda(non_blocking=True)`.

## Thresholds
Every host-blocking sync inside a step is reported, grouped by what made it. The
estimated saving is the step replayed without their waits (`analysis::simulate`): the
GPU idle that follows them, less what the host's own work after them (a numpy
transform, the next batch) would still hold back. A sync made by `.item()` takes the call
with it (the value stays on the GPU, so the call is not made at all).

## References
- PyTorch performance tuning guide: "Avoid unnecessary CPU-GPU synchronization".
- CUDA C++ Best Practices Guide, "Asynchronous and overlapping transfers with computation".
"#,
};

/// The host interval of the `.item()` (`aten::item`, else `aten::_local_scalar_dense`)
/// that issued sync `s`: with the value kept on the GPU the call is not made at all.
fn read_back_op(p: &crate::model::Profile, s: &SyncPoint) -> Option<(i64, i64)> {
    let o = s.op?;
    let item = p
        .op_ancestors(o)
        .filter(|&a| {
            matches!(
                &*p.ops[a as usize].name,
                "aten::item" | "aten::_local_scalar_dense"
            )
        })
        .last()?;
    let op = &p.ops[item as usize];
    Some((op.ts_ns, op.end_ns()))
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let syncs = &ctx.metrics.timeline.syncs;
    // Group by (what made it, where).
    let mut groups: BTreeMap<(String, String), Vec<&SyncPoint>> = BTreeMap::new();
    for s in syncs {
        let what = describe(p, s);
        let source =
            s.op.and_then(|o| p.user_frame(o))
                .map(|f| f.name.to_string())
                .unwrap_or_default();
        groups.entry((what, source)).or_default().push(s);
    }
    let n = ctx.steps();
    let mut out = Vec::new();
    for ((what, source), list) in groups {
        // A blocking copy and the stream sync right after it are followed by one idle:
        // count the union of the idle after each, not their sum.
        let idle = merge_intervals(
            list.iter()
                .map(|s| {
                    let end = s.ts_ns + s.dur_ns;
                    (end, end + s.gpu_idle_after_ns)
                })
                .collect(),
        );
        let idle_ms = idle.iter().map(|(a, b)| b - a).sum::<i64>() as f64 / 1e6 / n;
        let blocked_ms: f64 = list.iter().map(|s| s.dur_ns as f64 / 1e6).sum::<f64>() / n;
        let per_step = list.len() as f64 / n;
        let op = list.iter().find_map(|s| s.op);
        let mut loc = op.map(|o| op_location(p, o)).unwrap_or_default();
        if loc.source.is_none() && !source.is_empty() {
            loc.source = Some(source.clone());
        }
        let api = &list[0].api;
        let at = if source.is_empty() {
            String::new()
        } else {
            format!(" at {source}")
        };
        let change = Change {
            unsynced: list.iter().map(|s| s.runtime).collect(),
            host_cuts: list.iter().filter_map(|s| read_back_op(p, s)).collect(),
            ..Default::default()
        };
        let d = Draft {
            change: Some(change),
            title: capitalize(&format!("{what} syncs the host with the GPU")),
            message: format!(
                "{what}{at} blocks the host {:.1}× per step ({} in all); the GPU then idles {} per step before new work arrives",
                per_step,
                list.len(),
                fmt_ms(idle_ms)
            ),
            saving_ms: idle_ms,
            estimate: "the step replayed without these syncs' waits (the value stays on the GPU, the host goes on; an `.item()` call is then not made at all): the GPU idle they caused, less what the host's own work after them still holds back; averaged over steps".into(),
            evidence: vec![
                ev("syncs per step", format!("{per_step:.1}")),
                ev("runtime call", api.clone()),
                ev("host blocked per step", fmt_ms(blocked_ms)),
                ev("GPU idle after the syncs per step", fmt_ms(idle_ms)),
                ev(
                    "issuing op",
                    op.map(|o| chain(p, o)).unwrap_or_else(|| "none recorded".into()),
                ),
            ],
            explanation: format!(
                "This sync waits for every queued kernel to finish. Until the host has launched the next kernel, the GPU has nothing to do, so the {} of idle after it is on the critical path of every step.",
                fmt_ms(idle_ms)
            ),
            fixes: fixes(&what),
            locations: vec![loc],
        };
        out.push(d.finish(&META, ctx));
    }
    out
}

/// Name what made the sync, in the user's terms.
fn describe(p: &Profile, s: &SyncPoint) -> String {
    let r = &p.runtime[s.runtime as usize];
    let names: Vec<&str> =
        s.op.map(|o| {
            p.op_ancestors(o)
                .map(|a| &*p.ops[a as usize].name)
                .collect()
        })
        .unwrap_or_default();
    let has = |n: &str| names.contains(&n);
    if has("aten::item") || has("aten::_local_scalar_dense") {
        return "`.item()`".into();
    }
    if has("aten::nonzero")
        || has("aten::masked_select")
        || has("aten::unique")
        || has("aten::_unique2")
    {
        return "a data-dependent shape (`nonzero`/boolean mask)".into();
    }
    // A copy right before the sync on the same thread tells the direction.
    let dir = preceding_copy_dir(p, s.runtime);
    if has("aten::copy_") || has("aten::to") || has("aten::_to_copy") {
        return match dir {
            Some(CopyDir::HtoD) => {
                "a blocking host-to-device copy (`.cuda()`/`.to(device)`)".into()
            }
            Some(CopyDir::DtoH) => "a device-to-host copy (`.cpu()`/`.tolist()`/`.numpy()`)".into(),
            _ => "a blocking copy".into(),
        };
    }
    if r.name.contains("DeviceSynchronize") {
        return "`torch.cuda.synchronize()`".into();
    }
    if r.name.contains("EventSynchronize") {
        return "an event `.synchronize()`".into();
    }
    match names.last() {
        Some(top) => format!("`{top}`"),
        None => format!("`{}`", r.name),
    }
}

/// Upper-case the first letter (titles start with the description of the sync).
fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn preceding_copy_dir(p: &Profile, runtime: u32) -> Option<CopyDir> {
    let r = &p.runtime[runtime as usize];
    p.runtime[..=runtime as usize]
        .iter()
        .rev()
        .take(8)
        .find(|c| c.tid == r.tid && c.kind == RuntimeKind::Memcpy)
        .and_then(|c| c.gpu)
        .and_then(|g| p.gpu[g as usize].copy_dir())
}

fn chain(p: &Profile, op: u32) -> String {
    let mut v: Vec<&str> = p
        .op_ancestors(op)
        .map(|a| &*p.ops[a as usize].name)
        .collect();
    v.reverse();
    v.join(" → ")
}

fn fixes(what: &str) -> Vec<String> {
    if what.contains("item") {
        vec![
            "Keep the value on the GPU: compare or accumulate with tensor ops instead of `.item()`".into(),
            "Read it every N steps (logging), or accumulate `loss.detach()` and read once after the loop".into(),
        ]
    } else if what.contains("host-to-device") {
        vec![
            "Pin the source: `DataLoader(..., pin_memory=True)` or `x.pin_memory()`".into(),
            "Copy asynchronously: `x.cuda(non_blocking=True)` / `x.to(device, non_blocking=True)`"
                .into(),
            "Create tensors on the GPU directly (`torch.randn(..., device='cuda')`)".into(),
        ]
    } else if what.contains("device-to-host") {
        vec![
            "Keep results on the GPU until the end of the step or loop; copy once".into(),
            "Copy into pinned memory with `non_blocking=True` and read it a step later".into(),
        ]
    } else if what.contains("synchronize") {
        vec![
            "Remove `torch.cuda.synchronize()` from the training loop; time with `torch.cuda.Event(enable_timing=True)` instead".into(),
        ]
    } else if what.contains("data-dependent") {
        vec![
            "Avoid data-dependent shapes in the step: use `torch.where` with a fixed shape, or masks multiplied in".into(),
        ]
    } else {
        vec!["Move the host read of GPU values out of the step, or make it asynchronous".into()]
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// A step: a kernel, then `.item()` (DtoH copy + stream sync), then the host
    /// works 2 ms before launching the next kernel.
    fn trace(with_item: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 10_000.0 * s as f64;
            b.step(s + 1, t0, 10_000.0);
            let mm = b.op("aten::mm", t0 + 10.0, 50.0);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm,
                t0 + 20.0,
                t0 + 30.0,
                3_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
            if with_item {
                let item = b.op("aten::item", t0 + 100.0, 3_000.0);
                let dense = b.op("aten::_local_scalar_dense", t0 + 110.0, 2_980.0);
                let _ = item;
                b.memcpy(
                    "DtoH",
                    "Device",
                    "Pinned",
                    dense,
                    t0 + 120.0,
                    10.0,
                    t0 + 3_040.0,
                    2.0,
                    4,
                );
                b.runtime("cudaStreamSynchronize", t0 + 140.0, 2_920.0, Some(dense));
            }
            let add = b.op("aten::add", t0 + 5_000.0, 20.0);
            b.kernel(
                "vectorized_elementwise_kernel",
                add,
                t0 + 5_005.0,
                t0 + 5_012.0,
                100.0,
                [1024, 1, 1],
                [128, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_on_item() {
        let r = trace(true).report();
        let f = finding(&r, "S001");
        assert!(f.title.contains(".item()"), "{}", f.title);
        // The host, not the GPU, sets each 10 ms step: it waits 2.92 ms in the sync
        // (140 → 3060 µs) for the 3 ms kernel, then works until the step's end. With the
        // value kept on the GPU the `.item()` call (3 ms, the wait and 80 µs of its own)
        // is not made: all that work happens 3 ms earlier (the GPU is done by then: the
        // add at 5.0 − 3.0 ms still follows the kernel's end), so the step saves 3 ms.
        assert!((f.saving_ms - 3.0).abs() < 0.05, "saving {}", f.saving_ms);
    }

    /// `tensight run` starts the profiler from a step hook: the collector's frames were
    /// on the stack then, and the profiler shows them open around the whole window.
    /// The user's syncs under them are still the user's; the collector's own are not.
    #[test]
    fn collector_frames_around_the_window_hide_no_user_sync() {
        let mut b = trace(true);
        b.frame("tensight/collect.py(475): _start_detail", 0.0, 30_000.0);
        for s in 0..3 {
            b.frame("train.py(12): step", 10_000.0 * s as f64 + 50.0, 9_000.0);
        }
        let r = b.report();
        assert!((finding(&r, "S001").saving_ms - 3.0).abs() < 0.05);
        // A sync only under the collector's frames (its drain at the window's edge).
        let mut b = trace(false);
        b.frame("tensight/collect.py(500): _drain", 0.0, 30_000.0);
        b.runtime("cudaStreamSynchronize", 9_000.0, 500.0, None);
        assert!(!codes(&b.report()).contains(&"S001"));
    }

    /// `.tolist()` into pageable memory: the host waits inside the copy call for the
    /// queued kernel (the copy starts when the kernel ends), then a short stream sync.
    #[test]
    fn a_pageable_copy_that_waits_for_the_queue_is_a_sync() {
        let mut b = trace(false);
        for s in 0..3 {
            let t0 = 10_000.0 * s as f64;
            let to = b.op("aten::to", t0 + 100.0, 2_990.0);
            let _ = to;
            let copy = b.op("aten::copy_", t0 + 110.0, 2_970.0);
            b.memcpy(
                "DtoH",
                "Device",
                "Pageable",
                copy,
                t0 + 120.0,
                2_930.0,
                t0 + 3_040.0,
                5.0,
                4096,
            );
            b.runtime("cudaStreamSynchronize", t0 + 3_060.0, 7.0, Some(copy));
        }
        let r = b.report();
        let f = finding(&r, "S001");
        assert!(f.title.contains("device-to-host copy"), "{}", f.title);
        assert!((f.saving_ms - 2.92).abs() < 0.1, "saving {}", f.saving_ms);
        // The idle after the copy and after the sync is one idle, counted once.
        let idle = f
            .evidence
            .iter()
            .find(|e| e.label.starts_with("GPU idle"))
            .map(|e| e.value.clone())
            .unwrap_or_default();
        assert!(idle.starts_with("1.9") || idle.starts_with("2.0"), "{idle}");
    }

    #[test]
    fn silent_without_syncs() {
        assert!(!codes(&trace(false).report()).contains(&"S001"));
    }
}
