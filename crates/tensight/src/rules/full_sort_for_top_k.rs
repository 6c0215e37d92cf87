//! M006 full-sort-for-top-k: a whole dimension sorted (`sort`, `argsort`) when only its
//! first or last few entries are kept.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::flops::{parse_dims, parse_types, Dtype};
use crate::analysis::simulate::{Change, Durations};
use crate::model::Profile;
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "M006",
    name: "full-sort-for-top-k",
    category: Category::MemoryHierarchy,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
A `torch.sort` or `torch.argsort` over a dimension of n entries whose result is then
sliced to its first (or last) k entries along that dimension, with k at most n/8:
`scores.argsort(dim=1, descending=True)[:, :100]`, `x.sort().values[..., -k:]`.

## Why it costs time
Sorting n entries on the GPU is a radix sort: several passes over the keys and the
int64 indices, each reading and writing all of them. Selecting the k largest needs
about one or two passes over the keys (a radix select) and writes only k entries.
On large rows the sort moves several times the bytes and most of its output is thrown
away.

## Example
A recommendation server scores 1,024 users against 262,144 items and keeps the best
100: `torch.argsort(scores, dim=1, descending=True)[:, :100]` runs a segmented radix
sort of 268M bf16 keys with int64 indices for 9.2 ms on an H200; `torch.topk(scores,
100, dim=1)` does the same job in about 1 ms.

## Fix
```python
# before: sort everything, keep 100
top = scores.argsort(dim=1, descending=True)[:, :100]
# after: select the 100 largest (sorted among themselves)
top = torch.topk(scores, 100, dim=1, sorted=True).indices
# the k smallest: torch.topk(x, k, largest=False); values and indices: .values, .indices
```

## Thresholds
The sort's result is sliced, by the next ops on the same thread, along the sorted
dimension from its start or to its end, keeping at most n/8 (`MIN_N_OVER_K`) entries,
and the sort's kernels take at least 20 µs per call (`MIN_KERNEL_NS`). Reported when
the saving is at least 1% of the step (`MIN_SAVING_PCT`). Estimate: the sort's kernels
replaced by a top-k of two passes over the keys at the memory bandwidth
(`TOPK_PASSES`), the trace replayed with those times. Needs recorded shapes and
scalar arguments (`record_shapes`, on in `tensight run`'s detail step).

## References
- PyTorch docs: `torch.topk`, `torch.argsort`.
- CUB: `DeviceSegmentedRadixSort` (the passes a sort makes) and `DeviceTopK`/radix select.
"#,
};

/// The slice keeps at most n / this many entries.
const MIN_N_OVER_K: i64 = 8;
/// Passes over the keys a top-k makes (a radix select: a histogram pass and a gather).
const TOPK_PASSES: f64 = 2.0;
/// Sort kernel time per call below which it is left alone (ns).
const MIN_KERNEL_NS: i64 = 20_000;
/// Report when the saving is at least this share of the step (%).
const MIN_SAVING_PCT: f64 = 1.0;
/// Ops after the sort (same thread) searched for the slice.
const LOOKAHEAD_OPS: usize = 24;

/// A sort of `shape` along `dim` (normalised) in `dtype`, from its op's arguments.
struct SortCall {
    shape: Vec<i64>,
    dim: usize,
    itemsize: f64,
}

fn sort_call(p: &Profile, o: usize) -> Option<SortCall> {
    let op = &p.ops[o];
    let dims = parse_dims(op.input_dims.as_deref()?);
    let shape = dims.first()?.clone();
    let concrete = op.concrete_inputs.as_deref().map(parse_types)?;
    // sort(self, dim, descending), sort.stable(self, stable, dim, descending),
    // argsort(self, dim, descending), argsort.stable(self, stable, dim, descending).
    let raw = match concrete.len() {
        4 => concrete.get(2)?,
        _ => concrete.get(1)?,
    };
    let dim = normalise(raw.trim().parse::<i64>().ok()?, shape.len())?;
    let itemsize = op
        .input_types
        .as_deref()
        .map(parse_types)
        .and_then(|t| t.first().and_then(|s| Dtype::from_kineto(s)))
        .map_or(4.0, |d| f64::from(d.itemsize()));
    Some(SortCall {
        shape,
        dim,
        itemsize,
    })
}

fn normalise(dim: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    (0..r).contains(&d).then_some(d as usize)
}

fn is_sort(name: &str) -> bool {
    matches!(name, "aten::sort" | "aten::argsort")
}

/// k when op `o` slices a tensor of `shape` along `dim` to its first or last k entries.
fn kept(p: &Profile, o: usize, shape: &[i64], dim: usize) -> Option<i64> {
    let op = &p.ops[o];
    if !matches!(&*op.name, "aten::slice" | "aten::narrow") {
        return None;
    }
    let dims = parse_dims(op.input_dims.as_deref()?);
    if dims.first().map(Vec::as_slice) != Some(shape) {
        return None;
    }
    let c = op.concrete_inputs.as_deref().map(parse_types)?;
    let num = |k: usize| c.get(k).and_then(|s| s.trim().parse::<i64>().ok());
    if normalise(num(1)?, shape.len())? != dim {
        return None;
    }
    let n = shape[dim];
    let clamp = |x: i64| if x < 0 { (x + n).max(0) } else { x.min(n) };
    let (start, end) = if &*op.name == "aten::narrow" {
        let s = clamp(num(2)?);
        (s, (s + num(3)?).min(n))
    } else {
        (clamp(num(2).unwrap_or(0)), clamp(num(3).unwrap_or(n)))
    };
    let k = end - start;
    (k > 0 && k * MIN_N_OVER_K <= n && (start == 0 || end == n)).then_some(k)
}

/// The calls of one source line.
struct Site {
    op: u32,
    shape: Vec<i64>,
    dim: usize,
    k: i64,
    calls: usize,
    kernel_ns: i64,
    topk_ns: i64,
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
            .filter(|&a| is_sort(&p.ops[a as usize].name))
            .last()
    });
    let mut new_dur: Durations = Durations::default();
    let mut sites: BTreeMap<String, Site> = BTreeMap::new();
    for (&o, ks) in &kernels {
        let oi = o as usize;
        let Some(s) = sort_call(p, oi) else {
            continue;
        };
        let (pid, tid, end) = (p.ops[oi].pid, p.ops[oi].tid, p.ops[oi].end_ns());
        let Some(k) = p.ops[oi + 1..]
            .iter()
            .enumerate()
            .take_while(|(_, x)| x.pid == pid && x.tid == tid)
            .filter(|(_, x)| x.ts_ns >= end)
            .take(LOOKAHEAD_OPS)
            .find_map(|(j, _)| kept(p, oi + 1 + j, &s.shape, s.dim))
        else {
            continue;
        };
        let kernel_ns: i64 = ks.iter().map(|&gi| p.gpu[gi as usize].dur_ns).sum();
        let numel: f64 = s.shape.iter().map(|&x| x.max(0) as f64).product();
        let topk_ns = (TOPK_PASSES * numel * s.itemsize / bw).ceil() as i64;
        if kernel_ns < MIN_KERNEL_NS || kernel_ns <= topk_ns {
            continue;
        }
        Change::scale_kernels(&mut new_dur, p, ks, topk_ns);
        let key = p
            .user_frame(o)
            .map_or_else(|| p.ops[oi].name.to_string(), |f| f.name.to_string());
        let site = sites.entry(key).or_insert_with(|| Site {
            op: o,
            shape: s.shape.clone(),
            dim: s.dim,
            k,
            calls: 0,
            kernel_ns: 0,
            topk_ns: 0,
        });
        site.calls += 1;
        site.kernel_ns += kernel_ns;
        site.topk_ns += topk_ns;
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
    list.sort_by_key(|s| std::cmp::Reverse(s.kernel_ns - s.topk_ns));
    let kernel_ns: i64 = list.iter().map(|s| s.kernel_ns).sum();
    let topk_ns: i64 = list.iter().map(|s| s.topk_ns).sum();
    let top = &list[0];
    let what = |s: &Site| {
        format!(
            "{:?} sorted along dim {} ({} entries), {} kept",
            s.shape, s.dim, s.shape[s.dim], s.k
        )
    };
    let d = Draft {
        change: Some(change),
        title: "A whole dimension is sorted to keep its top k".into(),
        message: format!(
            "{} is sorted {:.1}× per step and only {} of its {} entries along dim {} are kept; the sort's kernels take {} per step",
            format_args!("{:?}", top.shape),
            top.calls as f64 / n,
            top.k,
            top.shape[top.dim],
            top.dim,
            fmt_ms(kernel_ns as f64 / 1e6 / n),
        ),
        saving_ms,
        estimate: format!(
            "the sort's kernels replaced by a top-k of {TOPK_PASSES:.0} passes over the keys at {bw:.0} GB/s ({} per step instead of {}), the trace replayed with those times",
            fmt_ms(topk_ns as f64 / 1e6 / n),
            fmt_ms(kernel_ns as f64 / 1e6 / n),
        ),
        evidence: vec![
            ev("sorted then sliced", what(top)),
            ev("sort kernel time per step", fmt_ms(kernel_ns as f64 / 1e6 / n)),
            ev("top-k time per step (modelled)", fmt_ms(topk_ns as f64 / 1e6 / n)),
            ev("step time saved per step (replayed)", fmt_ms(saving_ms)),
        ],
        explanation: format!(
            "A GPU sort of {} entries makes several radix passes over the keys and their int64 indices; keeping {} of them needs a selection, about {TOPK_PASSES:.0} passes over the keys, and writes only what is kept.",
            top.shape[top.dim], top.k
        ),
        fixes: vec![
            format!("Select instead of sorting: `torch.topk(x, {}, dim={}, sorted=True)` (`.indices` for argsort's result, `largest=False` for the smallest)", top.k, top.dim),
            "If every entry's rank is needed later, sort once and reuse the order rather than sorting in every step".into(),
        ],
        locations: list
            .iter()
            .take(5)
            .map(|s| {
                let mut loc = op_location(p, s.op);
                loc.tensor = Some(format!(
                    "{}; {:.1}× per step, {} of sort kernels per step",
                    what(s),
                    s.calls as f64 / n,
                    fmt_ms(s.kernel_ns as f64 / 1e6 / n)
                ));
                loc
            })
            .collect(),
    };
    vec![d.finish(&META, ctx)]
}

#[cfg(test)]
mod tests {
    use crate::testing::{codes, finding, TraceBuilder};

    /// Three steps: argsort of [1024, 262144] bf16 along dim 1 (one 9 ms kernel), then a
    /// slice of dim 1 to `[start, end)`, then a sync.
    fn trace(start: i64, end: i64) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 20_000.0 * s as f64;
            b.step(s + 1, t0, 20_000.0);
            let a = b.op_with(
                "aten::argsort",
                t0 + 10.0,
                30.0,
                serde_json::json!({
                    "Input Dims": [[1024, 262144], [], []],
                    "Input type": ["c10::BFloat16", "Scalar", "Scalar"],
                    "Concrete Inputs": ["", "1", "True"],
                }),
            );
            b.kernel(
                "void at_cuda_detail::cub::detail::radix_sort::DeviceSegmentedRadixSortKernel<>",
                a,
                t0 + 12.0,
                t0 + 45.0,
                9_000.0,
                [1024, 1, 1],
                [256, 1, 1],
            );
            b.op_with(
                "aten::slice",
                t0 + 50.0,
                5.0,
                serde_json::json!({
                    "Input Dims": [[1024, 262144], [], [], [], []],
                    "Input type": ["long int", "Scalar", "Scalar", "Scalar", "Scalar"],
                    "Concrete Inputs": ["", "1", start.to_string(), end.to_string(), "1"],
                }),
            );
            b.runtime("cudaDeviceSynchronize", t0 + 60.0, 9_000.0, None);
        }
        b
    }

    #[test]
    fn names_a_sort_sliced_to_its_first_hundred() {
        let r = trace(0, 100).report();
        let f = finding(&r, "M006");
        // 9 ms of sort against 2 × 512 MiB at 4.3 TB/s ≈ 0.25 ms of top-k.
        assert!(
            f.saving_ms > 8.5 && f.saving_ms < 8.9,
            "saving {}",
            f.saving_ms
        );
        assert!(
            f.fixes[0].contains("torch.topk(x, 100, dim=1"),
            "{:?}",
            f.fixes
        );
    }

    #[test]
    fn the_last_entries_count_too() {
        assert!(codes(&trace(-100, 9_223_372_036_854_775_807).report()).contains(&"M006"));
    }

    #[test]
    fn silent_when_most_of_the_sort_is_kept() {
        assert!(!codes(&trace(0, 200_000).report()).contains(&"M006"));
    }
}
