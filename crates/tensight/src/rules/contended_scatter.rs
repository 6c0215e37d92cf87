//! M005 contended-scatter: `index_add_`, `scatter_add_`, `scatter_reduce_`,
//! `index_reduce_` and accumulating `index_put_` that send many updates to few
//! destinations, so their atomic additions queue on the same addresses.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::flops::{parse_dims, parse_types, Dtype};
use crate::analysis::simulate::{Change, Durations};
use crate::model::{CpuOp, Profile};
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "M005",
    name: "contended-scatter",
    category: Category::MemoryHierarchy,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Accumulating scatters (`index_add_`, `scatter_add_`, `scatter_reduce_`, `index_reduce_`,
`index_put_(..., accumulate=True)`) whose source has many elements for each element
of the destination, and whose kernels run far longer than one pass over their bytes
at the GPU's memory bandwidth: a histogram, per-cluster or per-class sums, a segment
sum over few segments.

## Why it costs time
These kernels add each source element into its destination with an atomic operation.
Atomics on one address are serialised in the L2 cache: when a million updates go to a
few hundred addresses, the kernel runs at the rate of those queues, not of memory.
Its time then grows with the number of updates per address, and the GPU's bandwidth
sits unused.

## Example
k-means on 8M points of 64 floats: `sums.index_add_(0, labels, x)` into a `[16, 64]`
tensor makes 512M atomic additions on 1,024 addresses (524k updates each). On an H200
its kernel took 6.7 ms where one pass over the 2 GiB source takes 0.5 ms; the
one-hot matmul below took the step from 12.4 to 5.5 ms.

## Fix
```python
# before: every point added atomically into one of 16 rows
sums = torch.zeros(k, d, device=x.device).index_add_(0, labels, x)
# after (few destinations): a one-hot matmul, on tensor cores, no atomics
onehot = torch.nn.functional.one_hot(labels, k).to(x.dtype)      # [N, k]
sums = onehot.T @ x                                              # [k, d]
counts = onehot.sum(0)
# after (many segments): sort once, then reduce contiguous segments
order = labels.argsort(); lens = torch.bincount(labels, minlength=k)
sums = torch.segment_reduce(x[order], "sum", lengths=lens)
```
`torch.bincount` and `torch.histc` count privately per block first and are the better
choice for plain histograms.

## Thresholds
An op counts when its source has at least 64 (`MIN_UPDATES_PER_ADDRESS`) elements per
destination element and its kernels run at least 4× (`MIN_SLOWDOWN`) the time of one
pass over its bytes (source and index read once, destination read and written once) at
the memory bandwidth, and at least 20 µs per call (`MIN_KERNEL_NS`). Reported when the
saving is at least 1% of the step (`MIN_SAVING_PCT`). Estimate: the kernels take that
one pass (a one-hot matmul or a segmented reduction moves at least these bytes), the
trace replayed with those times, so only time on the GPU's critical path counts. Needs
recorded shapes (`record_shapes`, on in `tensight run`'s detail step).

## References
- NVIDIA, CUDA C++ Programming Guide: "Atomic Functions" (atomics to one address are
  serialised).
- PyTorch docs: `torch.Tensor.index_add_`, `torch.segment_reduce`, `torch.bincount`.
"#,
};

/// Source elements per destination element from which updates queue.
const MIN_UPDATES_PER_ADDRESS: f64 = 64.0;
/// Kernel time over the one-pass time from which the op counts.
const MIN_SLOWDOWN: f64 = 4.0;
/// Kernel time per call below which an op is left alone (ns).
const MIN_KERNEL_NS: i64 = 20_000;
/// Report when the saving is at least this share of the step (%).
const MIN_SAVING_PCT: f64 = 1.0;

/// An accumulating scatter: positions of the destination, index and source arguments.
fn scatter_args(op: &CpuOp) -> Option<(usize, usize, usize)> {
    let name = op.name.strip_prefix("aten::")?;
    match name.trim_end_matches('_') {
        "index_add" | "scatter_add" | "scatter_reduce" | "index_reduce" => Some((0, 2, 3)),
        "_index_put_impl" | "index_put" => {
            let accumulate = op
                .concrete_inputs
                .as_deref()
                .map(parse_types)
                .and_then(|c| c.get(3).map(|s| s.trim() == "True"))
                .unwrap_or(false);
            accumulate.then_some((0, 1, 2))
        }
        _ => None,
    }
}

/// One call's shape-derived facts.
struct Call {
    /// Source elements per destination element.
    updates_per_address: f64,
    /// Bytes of one pass: source and index read, destination read and written.
    bytes: f64,
    /// The source and destination shapes and dtype, for the location.
    label: String,
}

fn call(op: &CpuOp) -> Option<Call> {
    let (d, i, s) = scatter_args(op)?;
    let dims = parse_dims(op.input_dims.as_deref()?);
    let types = op
        .input_types
        .as_deref()
        .map(parse_types)
        .unwrap_or_default();
    let numel = |k: usize| -> Option<f64> {
        let sh = dims.get(k)?;
        (!sh.is_empty()).then(|| sh.iter().map(|&x| x.max(0) as f64).product())
    };
    let size = |k: usize| -> f64 {
        types
            .get(k)
            .and_then(|t| Dtype::from_kineto(t))
            .map_or(4.0, |t| f64::from(t.itemsize()))
    };
    let (dest, src) = (numel(d)?, numel(s)?);
    if dest <= 0.0 || src <= 0.0 {
        return None;
    }
    // index_put_'s indices are a list (no shape recorded): one int64 per update.
    let index = numel(i).unwrap_or(src);
    let bytes = src * size(s) + index * 8.0 + 2.0 * dest * size(d);
    let shape = |k: usize| dims.get(k).map_or_else(String::new, |s| format!("{s:?}"));
    let dtype = types.get(d).cloned().unwrap_or_default();
    Some(Call {
        updates_per_address: src / dest,
        bytes,
        label: format!(
            "{} {dtype} added into {} ({:.0} updates per destination element)",
            shape(s),
            shape(d),
            src / dest
        ),
    })
}

/// The scatter ops of the steps that met the thresholds, by (source line, op name).
struct Site {
    op: u32,
    label: String,
    calls: usize,
    kernel_ns: i64,
    pass_ns: i64,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let Some(bw) = m.mem_bw_gbs() else {
        return Vec::new();
    };
    let n = ctx.steps();
    let kernels = m.step_kernels_by(p, |o| {
        p.op_ancestors(o)
            .find(|&a| scatter_args(&p.ops[a as usize]).is_some())
    });
    let mut new_dur: Durations = Durations::default();
    let mut sites: BTreeMap<(String, String), Site> = BTreeMap::new();
    for (&o, ks) in &kernels {
        let Some(c) = call(&p.ops[o as usize]) else {
            continue;
        };
        let kernel_ns: i64 = ks.iter().map(|&gi| p.gpu[gi as usize].dur_ns).sum();
        let pass_ns = (c.bytes / bw).ceil() as i64;
        if c.updates_per_address < MIN_UPDATES_PER_ADDRESS
            || kernel_ns < MIN_KERNEL_NS
            || (kernel_ns as f64) < MIN_SLOWDOWN * pass_ns as f64
        {
            continue;
        }
        Change::scale_kernels(&mut new_dur, p, ks, pass_ns);
        let key = (site_of(p, o), p.ops[o as usize].name.to_string());
        let s = sites.entry(key).or_insert_with(|| Site {
            op: o,
            label: c.label,
            calls: 0,
            kernel_ns: 0,
            pass_ns: 0,
        });
        s.calls += 1;
        s.kernel_ns += kernel_ns;
        s.pass_ns += pass_ns;
    }
    if sites.is_empty() {
        return Vec::new();
    }
    let change = Change::durations(new_dur);
    let saving_ms = ctx.replayed_ms(&change);
    if 100.0 * saving_ms / ctx.step_ms().max(1e-9) < MIN_SAVING_PCT {
        return Vec::new();
    }
    let mut list: Vec<Site> = sites.into_values().collect();
    list.sort_by_key(|s| std::cmp::Reverse(s.kernel_ns - s.pass_ns));
    let kernel_ns: i64 = list.iter().map(|s| s.kernel_ns).sum();
    let pass_ns: i64 = list.iter().map(|s| s.pass_ns).sum();
    let calls: usize = list.iter().map(|s| s.calls).sum();
    let top = &list[0];
    let top_where = op_location(p, top.op);
    let d = Draft {
        change: Some(change),
        title: "Scatter-adds queue on few destinations (contended atomics)".into(),
        message: format!(
            "{:.1} accumulating scatter calls per step ({}) take {} of kernel time per step where one pass over their bytes takes {}; the largest: {}",
            calls as f64 / n,
            top_where.source.as_deref().unwrap_or(&p.ops[top.op as usize].name),
            fmt_ms(kernel_ns as f64 / 1e6 / n),
            fmt_ms(pass_ns as f64 / 1e6 / n),
            top.label,
        ),
        saving_ms,
        estimate: format!(
            "the scatters' kernels take one pass over their bytes at {:.0} GB/s ({} per step instead of {}: a one-hot matmul or a segmented reduction moves at least these bytes, so this is an upper bound on the saving), the trace replayed with those times",
            bw,
            fmt_ms(pass_ns as f64 / 1e6 / n),
            fmt_ms(kernel_ns as f64 / 1e6 / n),
        ),
        evidence: vec![
            ev("accumulating scatter calls per step", format!("{:.1}", calls as f64 / n)),
            ev("their kernel time per step", fmt_ms(kernel_ns as f64 / 1e6 / n)),
            ev(
                "one pass over their bytes per step (modelled)",
                fmt_ms(pass_ns as f64 / 1e6 / n),
            ),
            ev(
                "slowdown against one pass",
                format!("{:.1}×", kernel_ns as f64 / pass_ns.max(1) as f64),
            ),
            ev("largest", top.label.clone()),
            ev("step time saved per step (replayed)", fmt_ms(saving_ms)),
        ],
        explanation: format!(
            "Each source element is added into its destination by an atomic operation, and atomics on one address wait for each other in the L2 cache. With {} the queues, not memory bandwidth, set the kernel's time: it runs {:.1}× longer than reading its inputs once.",
            top.label,
            kernel_ns as f64 / pass_ns.max(1) as f64
        ),
        fixes: vec![
            "Few destinations (classes, clusters, bins): replace the scatter by a one-hot matmul, `F.one_hot(index, k).to(x.dtype).T @ x`, which runs on tensor cores without atomics".into(),
            "Many segments: sort the index once (`argsort`) and reduce contiguous runs with `torch.segment_reduce(x[order], \"sum\", lengths=torch.bincount(index))`".into(),
            "Plain counts or histograms: `torch.bincount` / `torch.histc`, which count per block before combining".into(),
            "If the destinations are fixed across steps, pre-reduce per block (reshape the source into blocks and sum within each before the scatter)".into(),
        ],
        locations: list
            .iter()
            .take(5)
            .map(|s| {
                let mut loc = op_location(p, s.op);
                loc.tensor = Some(format!(
                    "{}; {:.1}× per step, {} of kernels per step against {} for one pass",
                    s.label,
                    s.calls as f64 / n,
                    fmt_ms(s.kernel_ns as f64 / 1e6 / n),
                    fmt_ms(s.pass_ns as f64 / 1e6 / n)
                ));
                loc
            })
            .collect(),
    };
    vec![d.finish(&META, ctx)]
}

/// The user source line of op `o`, else its name: what makes two calls one cause.
fn site_of(p: &Profile, o: u32) -> String {
    p.user_frame(o).map_or_else(
        || p.ops[o as usize].name.to_string(),
        |f| f.name.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use crate::testing::{codes, finding, TraceBuilder};

    /// Three steps, each an `index_add_` of `src_rows` × 64 floats into `dest_rows` × 64,
    /// its kernel `kernel_us` long, then a sync (a GPU-bound step).
    fn trace(dest_rows: i64, src_rows: i64, kernel_us: f64) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 20_000.0 * s as f64;
            b.step(s + 1, t0, 20_000.0);
            let o = b.op_with(
                "aten::index_add_",
                t0 + 10.0,
                20.0,
                serde_json::json!({
                    "Input Dims": [[dest_rows, 64], [], [src_rows], [src_rows, 64], []],
                    "Input type": ["float", "Scalar", "long int", "float", "Scalar"],
                }),
            );
            b.kernel(
                "void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true, at::native::ReduceAdd>",
                o,
                t0 + 12.0,
                t0 + 20.0,
                kernel_us,
                [4096, 1, 1],
                [128, 1, 1],
            );
            b.runtime("cudaDeviceSynchronize", t0 + 40.0, kernel_us, None);
        }
        b
    }

    #[test]
    fn names_many_updates_to_few_rows() {
        // 8M × 64 floats into 16 rows: 2 GiB + 64 MiB of index, ~0.5 ms at 4.3 TB/s, against
        // a 6.7 ms kernel.
        let r = trace(16, 8 << 20, 6_700.0).report();
        let f = finding(&r, "M005");
        assert!(
            f.saving_ms > 5.5 && f.saving_ms < 6.4,
            "saving {}",
            f.saving_ms
        );
        assert!(
            f.message.contains("524288 updates per destination"),
            "{}",
            f.message
        );
    }

    #[test]
    fn silent_when_the_kernel_runs_at_bandwidth() {
        // The same bytes in 0.6 ms: no queueing to remove.
        assert!(!codes(&trace(16, 8 << 20, 600.0).report()).contains(&"M005"));
    }

    #[test]
    fn silent_when_destinations_are_many() {
        // 1M rows into 512k: two updates per address.
        assert!(!codes(&trace(512 << 10, 1 << 20, 2_000.0).report()).contains(&"M005"));
    }
}
