//! C003 late-gpu-migration: a tensor is created on the CPU by a factory op
//! (`torch.randn`, `zeros`, `arange`, ...) and copied to the GPU right after, where it
//! could have been created directly.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::host_work::{dtype_name, fmt_shape, numel, Steady};
use crate::analysis::migration::{find, gpu_factory_cost_ns, Migration};
use crate::analysis::simulate::Change;
use crate::model::RuntimeKind;

use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "C003",
    name: "late-gpu-migration",
    category: Category::CpuResidency,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Tensors created on the CPU and moved to the GPU moments later: a factory op
(`aten::randn`, `rand`, `randint`, `randperm`, `zeros`, `ones`, `full`, `empty`,
`arange`, `linspace`, `eye`, the `*_like` variants, in-place initialisers such as
`normal_`/`uniform_`/`fill_`) that launched no GPU work, followed on the same thread by
a copy op (`aten::to`, `aten::_to_copy`, `aten::copy_`) whose host-to-device memcpy
moves exactly the factory's output: the byte count equals the factory's shape (from
`Concrete Inputs` or `Input Dims`) times the element size of the copied tensor.
The finding names the factory op, its shape and dtype, and the source line.

## Why it costs time
The CPU fills the tensor element by element (a CPU random-number generator fills
~100 M values/s, far slower than the GPU), then the copy from pageable memory blocks the
host in `cudaMemcpyAsync` and a `cudaStreamSynchronize`. On the GPU the same tensor is
one asynchronous kernel of a few µs, and nothing blocks. While the host creates and
copies, the GPU has nothing queued and idles.

## Example
`aten::randn` with `Concrete Inputs` `[32, 3, 32, 32]` runs 700 µs on the main thread
and launches nothing; 30 µs later `aten::to` → `aten::_to_copy` → `aten::copy_` issues
`Memcpy HtoD (Pageable -> Device)` of 393,216 bytes (= 98,304 float32 values) and a
`cudaStreamSynchronize`.

## Fix
```python
# before: created on the CPU, then copied (and the host waits for the copy)
noise = torch.randn(x.shape).cuda()
idx = torch.arange(n).to(device)
# after: created on the GPU directly, asynchronously
noise = torch.randn(x.shape, device=x.device)      # or torch.randn_like(x)
idx = torch.arange(n, device=device)
```

## Thresholds
A factory op matches a copy when the copy op starts at most 1 ms after the factory op
ends, on the same thread, and its HtoD memcpy moves exactly the factory's output bytes.
Without recorded shapes (`record_shapes=False`) the copy must follow within 100 µs
instead, and the finding says the match is by adjacency. Reported when the estimated
saving is at least 10 µs per step. The saving is the step replayed (`analysis::simulate`)
without the factory ops' and the copy op's host time (which includes the memcpy call
and the sync that follows it), but for the host cost of creating the tensor on the GPU
instead: the median host time of factory ops in this trace that did launch GPU work, or
20 µs when none did.
Per-step figures leave out a first step slower than twice the others' median (warm-up)
and, when the trace has no step markers, everything before the first GPU activity
(setup).

## References
- PyTorch performance tuning guide: "Create tensors directly on the target device".
- PyTorch docs, "Tensor creation ops" (`device=` argument); CUDA semantics: "Best practices".
"#,
};

/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.01;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let launched = ctx.launched();
    let steady = Steady::of(p);
    let migrations: Vec<Migration> = find(p, &ctx.metrics.timeline, launched)
        .into_iter()
        .filter(|m| steady.includes(p, p.gpu[m.memcpy as usize].ts_ns))
        .collect();
    if migrations.is_empty() {
        return Vec::new();
    }
    let (gpu_cost, gpu_seen) = gpu_factory_cost_ns(p, launched);
    // Group by (factory, shape, source line).
    let mut groups: BTreeMap<(String, String, String), Vec<&Migration>> = BTreeMap::new();
    for m in &migrations {
        let f = &p.ops[m.factory as usize];
        let shape = m.shape.as_deref().map(fmt_shape).unwrap_or_default();
        let source = p
            .user_frame(m.factory)
            .map(|fr| fr.name.to_string())
            .unwrap_or_default();
        groups
            .entry((f.name.to_string(), shape, source))
            .or_default()
            .push(m);
    }
    let n = steady.n;
    let mut out = Vec::new();
    for ((name, shape, source), list) in groups {
        // The fix: the factory ops and the copy op no longer run on the host, but for
        // one GPU factory op's host cost, and nothing is copied or waited for.
        let change = Change {
            durations: list.iter().map(|m| (m.memcpy, 0)).collect(),
            unsynced: list
                .iter()
                .flat_map(|m| {
                    // The syncs starting during the copy op (runtime calls are sorted by
                    // start).
                    let c = &p.ops[m.copy as usize];
                    let lo = p.runtime.partition_point(|x| x.ts_ns < c.ts_ns);
                    let hi = p.runtime.partition_point(|x| x.ts_ns < c.end_ns()).max(lo);
                    (lo as u32..hi as u32)
                        .filter(move |&r| p.runtime[r as usize].kind == RuntimeKind::Sync)
                })
                .collect(),
            host_cuts: list
                .iter()
                .flat_map(|m| {
                    let ops = m.chain.iter().chain([&m.factory, &m.copy]);
                    let mut spans: Vec<(i64, i64)> = ops
                        .map(|&o| (p.ops[o as usize].ts_ns, p.ops[o as usize].end_ns()))
                        .collect();
                    spans.sort_unstable();
                    if let Some(first) = spans.first_mut() {
                        first.0 = (first.0 + gpu_cost).min(first.1);
                    }
                    spans
                })
                .collect(),
            ..Default::default()
        };
        let saving_ms = ctx.replayed_ms(&change);
        if saving_ms < MIN_SAVING_MS {
            continue;
        }
        let ms =
            |f: &dyn Fn(&Migration) -> i64| list.iter().map(|m| f(m)).sum::<i64>() as f64 / 1e6 / n;
        let factory_ms = ms(&|m| m.factory_ns);
        let copy_ms = ms(&|m| m.copy_ns);
        let blocked_ms = ms(&|m| m.copy_blocked_ns);
        let idle_ms = ms(&|m| m.idle_ns);
        let first = list[0];
        let g = &p.gpu[first.memcpy as usize];
        // Without a recorded byte count, the factory's size.
        let bytes = g.bytes.unwrap_or_else(|| {
            first.shape.as_deref().map_or(0, numel) * first.dtype.map_or(0, |d| d.itemsize() as u64)
        });
        let dtype = first.dtype.map(dtype_name).unwrap_or("unknown dtype");
        let copy_name = p.ops[first.copy as usize].name.to_string();
        let per_step = list.len() as f64 / n;
        let call = torch_call(&name, &shape);
        let at = if source.is_empty() {
            String::new()
        } else {
            format!(" at {source}")
        };
        let shape_txt = if shape.is_empty() {
            String::new()
        } else {
            format!(" {shape}")
        };
        let mut loc = op_location(p, first.factory);
        loc.tensor = Some(
            format!("{shape_txt} {dtype}, {}", fmt_bytes(bytes as f64))
                .trim()
                .to_string(),
        );
        let mut copy_loc = op_location(p, first.copy);
        copy_loc.kernel = Some(g.name.to_string());
        if copy_loc.source.is_none() {
            copy_loc.source = loc.source.clone();
        }
        let d = Draft {
            change: Some(change),
            title: format!("`{name}`{shape_txt} is created on the CPU, then copied to the GPU"),
            message: format!(
                "`{name}`{shape_txt} ({dtype}, {}){at} runs on the CPU for {} per step, then `{copy_name}` copies it to the GPU ({}) in {} per step; the GPU idles {} of that time",
                fmt_bytes(bytes as f64),
                fmt_ms(factory_ms),
                g.name,
                fmt_ms(copy_ms),
                fmt_ms(idle_ms),
            ),
            saving_ms,
            estimate: format!(
                "the step replayed without the factory ops' and the copy op's host time (the GPU idled {}/step during it), but for {} per instance for creating the tensor on the GPU ({}), averaged over steps{}. It includes what D001 reports for this copy (the marginal savings do not count it twice)",
                fmt_ms(idle_ms),
                fmt_ms(gpu_cost as f64 / 1e6),
                if gpu_seen > 0 {
                    format!("median host time of {gpu_seen} GPU factory ops in this trace")
                } else {
                    "default: no GPU factory op in this trace to measure".into()
                },
                steady.note
            ),
            evidence: vec![
                ev("factory op", format!("{name}{shape_txt} ({dtype}) — launched no GPU work")),
                ev("instances per step", format!("{per_step:.1}")),
                ev("factory host time per step", fmt_ms(factory_ms)),
                ev("copy", format!("{copy_name} → {} of {} bytes", g.name, bytes)),
                ev("copy host time per step", fmt_ms(copy_ms)),
                ev("of which memcpy call + sync per step", fmt_ms(blocked_ms)),
                ev("GPU idle during factory + copy per step", fmt_ms(idle_ms)),
                ev(
                    "matched by",
                    if first.by_adjacency {
                        "adjacency (shapes not recorded)".to_string()
                    } else {
                        format!("bytes: {} elements × {} B = {} B", first.shape.as_deref().map_or(0, numel), first.dtype.map_or(0, |d| d.itemsize()), bytes)
                    },
                ),
            ],
            explanation: format!(
                "The CPU fills this tensor ({} per step), then the copy from {} memory blocks the host ({} per step in the memcpy call and the sync after it). Created with `device='cuda'` it is one asynchronous GPU kernel of a few µs, and the host goes straight on to launch the step's work.",
                fmt_ms(factory_ms),
                if g.is_pageable_copy() { "pageable" } else { "host" },
                fmt_ms(blocked_ms),
            ),
            fixes: vec![
                format!("Create it on the GPU: `{call}`"),
                "If it is a constant, create it once on the GPU before the loop and reuse it".into(),
            ],
            locations: vec![loc, copy_loc],
        };
        out.push(d.finish(&META, ctx));
    }
    out
}

/// The fixed call, in PyTorch terms.
fn torch_call(op: &str, shape: &str) -> String {
    let base = op.strip_prefix("aten::").unwrap_or(op);
    let dims = shape.trim_start_matches('[').trim_end_matches(']');
    let args = if dims.is_empty() {
        "...".to_string()
    } else {
        dims.to_string()
    };
    match base {
        "normal_" | "uniform_" | "fill_" | "zero_" | "random_" | "bernoulli_" | "exponential_" => {
            format!("torch.empty({args}, device='cuda').{base}(...)")
        }
        "tensor" | "scalar_tensor" => "torch.tensor(data, device='cuda')".into(),
        b if b.ends_with("_like") => format!("torch.{b}(x_on_gpu)"),
        "randint" => format!("torch.randint(low, high, ({args}), device='cuda')"),
        "full" => format!("torch.full(({args}), value, device='cuda')"),
        "arange" | "linspace" | "logspace" | "randperm" | "eye" => {
            format!("torch.{base}(..., device='cuda')")
        }
        b => format!("torch.{b}({args}, device='cuda')"),
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};
    use serde_json::json;

    /// Steps of 3 ms: `torch.randn(32, 3, 32, 32)` on the CPU (800 µs), then `.cuda()`
    /// (200 µs, pageable memcpy + sync), then a model kernel. With `on_gpu` the randn
    /// launches a kernel instead and there is no copy.
    fn trace(on_gpu: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 3_000.0 * s as f64;
            b.step(s + 1, t0, 3_000.0);
            b.frame("train.py(12): step", t0 + 1.0, 2_990.0);
            let shape = json!({"Concrete Inputs": ["[32, 3, 32, 32]", "", "", "", "False"],
                "Input type": ["ScalarList", "", "", "", "Scalar"], "Input Dims": [[], [], [], [], []]});
            let randn = b.op_with("aten::randn", t0 + 10.0, 800.0, shape);
            if on_gpu {
                b.kernel(
                    "void at::native::normal_kernel",
                    randn,
                    t0 + 20.0,
                    t0 + 30.0,
                    3.0,
                    [96, 1, 1],
                    [256, 1, 1],
                );
            } else {
                let to = b.op_with(
                    "aten::to",
                    t0 + 830.0,
                    200.0,
                    json!({
                    "Input Dims": [[32, 3, 32, 32], [], [], [], [], [], [], []],
                    "Input type": ["float", "Scalar", "Scalar", "", "", "Scalar", "Scalar", ""]}),
                );
                b.memcpy(
                    "HtoD",
                    "Pageable",
                    "Device",
                    to,
                    t0 + 900.0,
                    50.0,
                    t0 + 945.0,
                    10.0,
                    393_216,
                );
                b.runtime("cudaStreamSynchronize", t0 + 952.0, 13.0, Some(to));
            }
            let mm = b.op("aten::mm", t0 + 1_100.0, 50.0);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm,
                t0 + 1_110.0,
                t0 + 1_120.0,
                1_500.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_on_cpu_randn_then_copy() {
        let r = trace(false).report();
        let f = finding(&r, "C003");
        assert!(
            f.title.contains("aten::randn") && f.title.contains("[32, 3, 32, 32]"),
            "{}",
            f.title
        );
        assert!(
            f.fixes[0].contains("torch.randn(32, 3, 32, 32, device='cuda')"),
            "{:?}",
            f.fixes
        );
        assert_eq!(f.locations[0].source.as_deref(), Some("train.py(12): step"));
        // Replayed without randn's 800 µs and .cuda()'s 200 µs on the host (its copy and
        // sync gone too), but for 20 µs of a GPU randn (none in this trace to measure):
        // each step ends about 0.98 ms earlier.
        assert!((f.saving_ms - 0.97).abs() < 0.02, "saving {}", f.saving_ms);
    }

    #[test]
    fn silent_when_created_on_gpu() {
        assert!(!codes(&trace(true).report()).contains(&"C003"));
    }
}
