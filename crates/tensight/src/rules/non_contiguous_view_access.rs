//! V001 non-contiguous-view-access: a kernel reads a non-contiguous view (a transpose,
//! permute, slice or channels-last tensor) across its strides, and the hardware pass
//! measures the cost: more 32-byte sectors per request than the access width needs.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::efficiency::{self, Attributed};
use crate::analysis::forest::{is_view_op, Layout};
use crate::model::Profile;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "V001",
    name: "non-contiguous-view-access",
    category: Category::Views,
    status: Status::Preview,
    since: "0.2.0",
    needs_gpu: true,
    doc: r#"## What it detects
A kernel whose op reads a non-contiguous view (strides that are not the contiguous ones
for its shape: `x.t()`, `permute`, `transpose`, a strided slice, a channels-last tensor
read as NCHW) and whose global loads and stores, measured by Nsight Compute, move at least
twice the 32-byte sectors its access width needs (a hardware pass: `tensight run
--hardware`, or `tensight analyze TRACE --ncu ncu.csv`). Without a hardware pass, the
tensor forest's model of the execution-trace step stands in: ops that walk a view (a
select, slice, transpose; not a channels-last base, which layout-aware kernels read
natively) across its strides, by the view (and the line that made it), their traffic
modelled from shapes and strides. Copies that make a dense tensor of the view are the
cure, not the cost (V002 counts them when they repeat).

## Why it costs time
A warp request of 32 consecutive 4-byte values touches 4 sectors; the same request
walking down a column touches 32, one per thread, and moves 8× the bytes to use the same
values. Elementwise and copy kernels are bound by those bytes, so the time grows with
them. The view itself is free; the kernels that read it across its strides pay, every
time they read it.

## Example
`c = x.t().contiguous()` on a 4096×4096 fp32 tensor on an H200: the copy loads 16.8 M
sectors in 524 K requests, 32 sectors per request against an ideal of 4, and runs 125 µs
where a contiguous copy of the same bytes runs 31.6 µs.

## Fix
```python
# before: every step reads the transposed view across its strides
y = x.t().contiguous()          # or: some_elementwise(a, b.t())
# after: materialize once, outside the loop, when the source does not change
xt = x.t().contiguous()
# or: have the producer write the layout the consumer reads
#     (e.g. compute b already transposed, or pass transposed operands to matmul,
#     which handles strides without a copy)
# for convolutions: model = model.to(memory_format=torch.channels_last)
#                   x = x.to(memory_format=torch.channels_last)
```

## Thresholds
Kernels of ops that a transposed chain (V003) covers are left to that rule. Fires when a
kernel's measured sectors (loads + stores) are at least 2× the ideal for its access width
(ideal sectors per request = bytes per thread access: 4 for fp32, 16 for `float4`), the
excess is at least 1 MiB, and the launching op (or one enclosing it) has a
non-contiguous tensor input. The estimated saving is the kernel time × (1 − ideal /
measured sectors) per step: the share of its traffic that the layout wastes, assuming
the kernel is bound by the sectors it moves. Without a hardware pass: the same 2× and
1 MiB on modelled bytes, and the saving is each op's kernel time beyond its dense bytes at
the reference bandwidth (V003's), reported from 20 µs per step.

## Evidence
The view, the op and source line that made it (from the tensor forest when the bundle
has an execution trace, else the nearest view op before the reader), the kernel, its
load and store sectors per request against the ideal, the excess bytes, and where its
warps' cycles go (Nsight Compute's stall reasons: a strided read shows as long
scoreboard, waiting on global memory). When the reader is itself the materializing copy
(`.contiguous()`, `clone`, `reshape`), the finding says so: only the producer's layout
can remove it.

## References
- CUDA C++ Best Practices Guide, "Coalesced access to global memory".
- Nsight Compute Kernel Profiling Guide, "Memory Workload Analysis" (sectors per request).
- PyTorch: `Tensor.contiguous`, `torch.channels_last` memory format tutorial.
"#,
};

use crate::analysis::efficiency::{MIN_EXCESS_BYTES, MIN_FACTOR};

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    if p.hardware.is_none() {
        return modelled(ctx);
    }
    // Kernels of a transposed chain are V003's: the chain's fix covers them all. Rows
    // stand for every launch of their signature, so they are matched by signature.
    let mut in_chain = std::collections::HashSet::new();
    if let (Some(f), Some(hw)) = (ctx.metrics.tensors.as_ref(), p.hardware.as_ref()) {
        for c in &ctx.chains().chains {
            for o in &c.ops {
                for &g in &f.ops[o.op].gpu {
                    if let Some(k) = hw.for_gpu(g as usize) {
                        in_chain.insert((k.name.clone(), k.grid, k.block));
                    }
                }
            }
        }
    }
    efficiency::attributed(p, ctx.steps(), MIN_FACTOR)
        .into_iter()
        .filter(|a| a.view.is_some() && a.eff.excess_bytes >= MIN_EXCESS_BYTES)
        .filter(|a| {
            p.hardware.as_ref().is_none_or(|hw| {
                let k = &hw.kernels[a.eff.row];
                !in_chain.contains(&(k.name.clone(), k.grid, k.block))
            })
        })
        .map(|a| finding(ctx, p, &a))
        .collect()
}

fn finding(ctx: &Context, p: &Profile, a: &Attributed) -> Finding {
    let e = &a.eff;
    let view = a.view.as_ref().map(|v| v.describe(p)).unwrap_or_default();
    let reader = a.view.as_ref().map(|v| v.op).or(a.op);
    let mut loc = reader.map(|o| op_location(p, o)).unwrap_or_default();
    loc.kernel = Some(e.name.clone());
    loc.tensor = Some(view.clone());
    // The tensor forest names the op that made the view; without it, the nearest view op
    // before the reader is the likely one.
    let exact = a
        .view
        .as_ref()
        .and_then(|v| forest_view(ctx, p, v))
        .and_then(|n| n.created_by.as_ref());
    let creator = match exact {
        Some(c) => c.op,
        None => reader.and_then(|o| view_creator(p, o)),
    };
    let created = match exact {
        Some(c) => c.text(),
        None => creator
            .map(|c| {
                let l = op_location(p, c);
                match l.source {
                    Some(s) => format!("{} at {s}", l.op.unwrap_or_default()),
                    None => l.op.unwrap_or_default(),
                }
            })
            .unwrap_or_else(|| {
                "not recorded (profile with record_shapes=True, with_stack=True)".into()
            }),
    };
    let created_label = if exact.is_some() {
        "created by"
    } else {
        "created by (nearest view op before it)"
    };
    let spr = e
        .ld_sectors_per_request
        .filter(|&s| s > e.ideal_sectors_per_request)
        .or(e.st_sectors_per_request)
        .unwrap_or(0.0);
    let cost_ms = a.cost_ns() / 1e6;
    let copy = reader.and_then(|o| materializing_copy(p, o));
    let mut locations = vec![loc];
    if let Some(c) = creator {
        locations.push(op_location(p, c));
    }
    Draft {
        change: None,
        title: match copy {
            Some(_) => format!("A copy materializes a {} view, reading across its strides", a.view.as_ref().map(|v| v.layout).unwrap_or("non-contiguous")),
            None => format!("A {} view is read across its strides", a.view.as_ref().map(|v| v.layout).unwrap_or("non-contiguous")),
        },
        message: format!(
            "{view} is read by {} at {spr:.0} sectors per request against an ideal {:.0} ({:.1}× the traffic, {} excess); it costs an estimated {} per step",
            short(&e.name),
            e.ideal_sectors_per_request,
            e.excess_factor,
            fmt_bytes(e.excess_bytes),
            fmt_ms(cost_ms)
        ),
        saving_ms: cost_ms,
        estimate: "kernel time × (1 − ideal / measured sectors), loads and stores, per step (the kernel is taken as bound by the sectors it moves)".into(),
        evidence: vec![
            ev("view", view.clone()),
            ev(created_label, created),
            ev("kernel", e.name.clone()),
            ev("load sectors per request", fmt_opt(e.ld_sectors_per_request)),
            ev("store sectors per request", fmt_opt(e.st_sectors_per_request)),
            ev("ideal sectors per request", format!("{:.0} ({:.0}-byte accesses, width from the {})", e.ideal_sectors_per_request, e.access_bytes, if e.access_source == "name" { "kernel name" } else { "widest vector access" })),
            ev("excess traffic", fmt_bytes(e.excess_bytes)),
            ev("kernel time per step", fmt_ms(a.time_per_step_ns / 1e6)),
            ev("long-scoreboard stall (cycles per warp)", fmt_opt(e.long_scoreboard_stall)),
        ].into_iter().chain(p.hardware.as_ref().and_then(|hw| hw.kernels.get(e.row)).and_then(super::stall_evidence)).collect(),
        explanation: format!(
            "Each warp request of this kernel touches {spr:.0} sectors of 32 bytes where {:.0} would carry the same values: the threads of a warp read addresses a stride apart, so most of every sector is fetched and thrown away. The view costs nothing to create; its readers pay {:.1}× the traffic.",
            e.ideal_sectors_per_request, e.excess_factor
        ),
        fixes: match copy {
            // The reader is the materialization already: only the producer can remove it.
            Some(c) => vec![
                format!("This read is already the materializing copy (`{c}`): only producing the data in the layout it is read in removes it (compute the transposed result directly; matmul accepts transposed operands without a copy)."),
                "If the copy must stay, keep it outside the loop when its source does not change between steps.".into(),
                "For convolution nets: `model.to(memory_format=torch.channels_last)` and the input likewise, so no NCHW↔NHWC copies run.".into(),
            ],
            None => vec![
                "Materialize the view once (`.contiguous()` outside the loop) when its source does not change between reads.".into(),
                "Change the producer so it writes the layout the consumer reads (compute the transposed result directly; matmul accepts transposed operands without a copy).".into(),
                "For convolution nets: `model.to(memory_format=torch.channels_last)` and the input likewise, so no NCHW↔NHWC copies run.".into(),
            ],
        },
        locations,
    }
    .finish(&META, ctx)
}

/// Saving from which a modelled finding is reported, ns per step.
const MIN_MODELLED_NS: f64 = 20_000.0;

/// Without a hardware pass: the tensor forest's ops that walk a view across its strides
/// (outside V003's chains), by the view they walk (grouped by the op and line
/// that made it and its layout: a column view made the same way in every iteration is one
/// cause), each costing its kernel time beyond its dense bytes at the reference bandwidth.
fn modelled(ctx: &Context) -> Vec<Finding> {
    use crate::analysis::views;
    use std::collections::{BTreeMap, HashSet};
    let Some(f) = ctx.metrics.tensors.as_ref() else {
        return Vec::new();
    };
    let c = ctx.chains();
    let skip: HashSet<usize> = c
        .chains
        .iter()
        .flat_map(|ch| ch.ops.iter().map(|o| o.op))
        .collect();
    let mut groups: BTreeMap<(String, String), Vec<views::ChainOp>> = BTreeMap::new();
    for o in views::strided_ops(f, c.bandwidth, &skip) {
        let a = &f.ops[o.op];
        // A copy that makes a dense tensor of a strided one is the cure (V002 counts it
        // when it repeats); a copy into a strided destination is not.
        let materializes = MATERIALIZE.contains(&&*a.name)
            && !a.accesses.iter().any(|x| x.write && x.bytes > x.ideal);
        if materializes {
            continue;
        }
        let (wasted, ideal) = (a.wasted_bytes() as f64, a.ideal_bytes() as f64);
        if wasted < MIN_EXCESS_BYTES || wasted + ideal < MIN_FACTOR * ideal {
            continue;
        }
        // The view it wastes the most on: a view op's result (a select, slice, transpose),
        // not a base tensor in another memory format (channels-last tensors, which
        // layout-aware kernels read natively, are left to measured sectors).
        let Some(t) = a
            .accesses
            .iter()
            .filter(|x| x.bytes > x.ideal)
            .map(|x| (x.bytes - x.ideal, &f.nodes[x.tensor as usize]))
            .filter(|(_, t)| t.parent.is_some() && t.layout != Layout::ChannelsLast)
            .max_by_key(|x| x.0)
            .map(|x| x.1)
        else {
            continue;
        };
        let layout = t
            .describe()
            .split_once(' ')
            .map(|x| x.1.to_string())
            .unwrap_or_default();
        groups.entry((t.made_by(), layout)).or_default().push(o);
    }
    let mut out: Vec<Finding> = groups
        .into_iter()
        .filter_map(|((made_by, layout), ops)| {
            let saving_ns: f64 = ops.iter().map(|o| o.excess_ns).sum();
            (saving_ns >= MIN_MODELLED_NS)
                .then(|| modelled_finding(ctx, f, &made_by, &layout, &ops, saving_ns, c.bandwidth))
        })
        .collect();
    out.sort_by(|a, b| b.saving_ms.total_cmp(&a.saving_ms));
    out
}

fn modelled_finding(
    ctx: &Context,
    f: &crate::analysis::forest::Forest,
    made_by: &str,
    layout: &str,
    ops: &[crate::analysis::views::ChainOp],
    saving_ns: f64,
    bw: Option<crate::analysis::views::Bandwidth>,
) -> Finding {
    let p = ctx.profile;
    let wasted: u64 = ops.iter().map(|o| f.ops[o.op].wasted_bytes()).sum();
    let gpu_ns: f64 = ops.iter().map(|o| o.gpu_ns).sum();
    let mut names: Vec<&str> = ops.iter().map(|o| &*f.ops[o.op].name).collect();
    names.sort_unstable();
    names.dedup();
    let views = ops
        .iter()
        .flat_map(|o| o.strided.iter().copied())
        .collect::<std::collections::HashSet<u32>>()
        .len();
    let top = ops
        .iter()
        .max_by(|a, b| a.excess_ns.total_cmp(&b.excess_ns))
        .and_then(|o| f.ops[o.op].op);
    let mut locations = Vec::new();
    let creator = ops
        .iter()
        .flat_map(|o| o.strided.iter())
        .find_map(|&t| f.nodes[t as usize].created_by.as_ref().and_then(|c| c.op));
    for o in creator.into_iter().chain(top) {
        let mut l = op_location(p, o);
        l.tensor = Some(layout.to_string());
        locations.push(l);
    }
    let saving_ms = saving_ns / 1e6;
    Draft {
        change: None,
        title: format!("Tensors {layout} are read across their strides"),
        message: format!(
            "{views} tensor(s) {layout}, made by {made_by}, are walked across their strides by {} op(s) per step ({}): {} of excess traffic modelled from shapes and strides, an estimated {} per step",
            ops.len(),
            names.join(", "),
            fmt_bytes(wasted as f64),
            fmt_ms(saving_ms)
        ),
        saving_ms,
        estimate: "Σ over the ops of their kernel time beyond what their dense bytes need at the reference bandwidth, in the step the execution trace recorded; modelled from shapes and strides (no hardware pass: `tensight run --hardware` measures the sectors)".into(),
        evidence: vec![
            ev("tensors", format!("{views} {layout}")),
            ev("created by", made_by.to_string()),
            ev("ops reading them across strides per step", format!("{} ({})", ops.len(), names.join(", "))),
            ev("their kernel time per step", fmt_ms(gpu_ns / 1e6)),
            ev("excess traffic (modelled)", fmt_bytes(wasted as f64)),
            ev(
                "reference bandwidth",
                match bw {
                    Some(b) if b.ops > 0 => format!("{:.0} GB/s, reached by {} dense ops of this step", b.bytes_per_ns, b.ops),
                    Some(b) => format!("{:.0} GB/s, assumed (0.85 × the datasheet)", b.bytes_per_ns),
                    None => "unknown".into(),
                },
            ),
        ],
        explanation: "A warp's 32 threads read addresses a stride apart, so each fetches a whole 32-byte sector for one value: elementwise kernels, bound by the bytes they move, run several times longer than on the same data laid out densely.".into(),
        fixes: vec![
            "Lay the data out the way it is read: a structure of arrays (one dense tensor per attribute) instead of an array of structures read column by column.".into(),
            "Materialize the view once (`.contiguous()` outside the loop) when its source does not change between reads.".into(),
            "Or fuse the readers (`torch.compile`), so the strided data is read once.".into(),
        ],
        locations,
    }
    .finish(&META, ctx)
}

/// The view's node in the tensor forest (the execution-trace step): read by an op of the
/// same name and source line as the reader, with the view's shape and strides.
fn forest_view<'a>(
    ctx: &'a Context,
    p: &Profile,
    v: &crate::analysis::efficiency::NonContiguousInput,
) -> Option<&'a crate::analysis::forest::TensorNode> {
    let f = ctx.metrics.tensors.as_ref()?;
    let reader = p.ops.get(v.op as usize)?;
    let line = |o: u32| p.user_frame(o).map(|fr| fr.name.to_string());
    // Without a source line, ops of one name cannot be told apart: no exact creator.
    let src = Some(line(v.op)?);
    f.ops
        .iter()
        .filter(|o| o.name == reader.name && o.op.map(line) == Some(src.clone()))
        .flat_map(|o| o.accesses.iter().filter(|a| !a.write))
        .map(|a| &f.nodes[a.tensor as usize])
        .find(|n| n.shape == v.dims && n.strides == v.strides)
}

/// The materializing op (`aten::contiguous`, `aten::clone`, `aten::reshape`, ...) when
/// op `reader` is a copy: the call the user wrote, or `aten::copy_` itself.
/// Ops that make a new tensor of another's values.
const MATERIALIZE: &[&str] = &[
    "aten::contiguous",
    "aten::clone",
    "aten::reshape",
    "aten::to",
    "aten::_to_copy",
    "aten::copy_",
];

fn materializing_copy(p: &Profile, reader: u32) -> Option<String> {
    let mut name = None;
    let mut cur = Some(reader);
    while let Some(i) = cur {
        let o = p.ops.get(i as usize)?;
        if MATERIALIZE.contains(&&*o.name) {
            name = Some(o.name.to_string());
        } else if name.is_some() {
            break;
        }
        cur = o.parent;
    }
    name
}

/// The nearest view op before op `reader` on its thread whose first input has as many
/// elements as the view: the likely creator (the forest names it exactly).
fn view_creator(p: &Profile, reader: u32) -> Option<u32> {
    let r = p.ops.get(reader as usize)?;
    let top = p.top_level_op(reader);
    let start = p.ops.get(top as usize).map(|o| o.ts_ns).unwrap_or(r.ts_ns);
    (0..reader as usize)
        .rev()
        .take(512)
        .filter(|&i| {
            let o = &p.ops[i];
            o.tid == r.tid && o.pid == r.pid && o.ts_ns <= start && is_view_op(&o.name)
        })
        .map(|i| i as u32)
        .next()
}

fn short(name: &str) -> String {
    let k = crate::model::hardware::kernel_key(name);
    if k.is_empty() {
        name.chars().take(60).collect()
    } else {
        k
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}"))
        .unwrap_or_else(|| "not collected".into())
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::testing::{codes, TraceBuilder};
    use serde_json::json;

    pub(crate) const PROBE_NCU: &[u8] =
        include_bytes!("../../../../tests/fixtures/h200-probe/ncu_raw.csv.gz");

    /// The probe's program as a trace: randn, `x + 1`, `x.t() + 1`, `x.t().contiguous()`.
    pub(crate) fn probe_trace(with_copy: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        b.step(1, 0.0, 1_000.0);
        b.frame("ncu_recorded_by.py(2): <module>", 1.0, 40.0);
        let r = b.op_with("aten::randn", 1.0, 20.0, json!({"Input Dims": [[]]}));
        b.kernel("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, void>(long, at::PhiloxCudaState, T3, T4)", r, 5.0, 10.0, 55.0, [1056, 1, 1], [256, 1, 1]);
        let a = b.op_with(
            "aten::add",
            100.0,
            10.0,
            json!({"Input Dims": [[4096, 4096], []], "Input Strides": [[4096, 1], []]}),
        );
        b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)", a, 102.0, 110.0, 31.5, [16384, 1, 1], [128, 1, 1]);
        b.frame("ncu_recorded_by.py(8): <module>", 200.0, 20.0);
        b.op_with(
            "aten::t",
            200.0,
            3.0,
            json!({"Input Dims": [[4096, 4096]], "Input Strides": [[4096, 1]]}),
        );
        let a2 = b.op_with(
            "aten::add",
            205.0,
            10.0,
            json!({"Input Dims": [[4096, 4096], []], "Input Strides": [[1, 4096], []]}),
        );
        b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)", a2, 207.0, 150.0, 31.6, [16384, 1, 1], [128, 1, 1]);
        if with_copy {
            b.frame("ncu_recorded_by.py(9): <module>", 300.0, 40.0);
            b.op_with(
                "aten::t",
                300.0,
                3.0,
                json!({"Input Dims": [[4096, 4096]], "Input Strides": [[4096, 1]]}),
            );
            b.op_with(
                "aten::contiguous",
                305.0,
                30.0,
                json!({"Input Dims": [[4096, 4096], []], "Input Strides": [[1, 4096], []]}),
            );
            b.op_with(
                "aten::clone",
                306.0,
                28.0,
                json!({"Input Dims": [[4096, 4096], []], "Input Strides": [[1, 4096], []]}),
            );
            let c = b.op_with("aten::copy_", 310.0, 20.0, json!({"Input Dims": [[4096, 4096], [4096, 4096], []], "Input Strides": [[4096, 1], [1, 4096], []]}));
            b.kernel("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<float>)", c, 312.0, 200.0, 125.2, [65536, 1, 1], [128, 1, 1]);
        }
        b
    }

    #[test]
    fn fires_on_the_transposed_copy() {
        let r = probe_trace(true).report_with_ncu(PROBE_NCU);
        let hw = r.profile.hardware.as_ref().expect("hardware attached");
        assert_eq!(hw.alignment.matched, 4, "{:?}", hw.alignment);
        assert_eq!(hw.alignment.unmatched_rows, 0);
        let v: Vec<_> = r
            .diagnosis
            .findings
            .iter()
            .filter(|f| f.code == "V001")
            .collect();
        assert_eq!(v.len(), 1, "{:?}", codes(&r));
        let f = v[0];
        assert!(
            f.message
                .contains("[4096, 4096] strides [1, 4096] (transposed)"),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains("32 sectors per request against an ideal 4"),
            "{}",
            f.message
        );
        assert!(f.locations[0]
            .kernel
            .as_deref()
            .unwrap_or("")
            .contains("elementwise_kernel<128"));
        // 125.2 µs × (1 − 4.19 M / 18.87 M) ≈ 97 µs; the measured fix saves 125 − 31.6 = 93.6 µs.
        assert!(
            (f.saving_ms - 0.0974).abs() < 0.002,
            "saving {}",
            f.saving_ms
        );
        let created = f
            .evidence
            .iter()
            .find(|e| e.label.starts_with("created by"))
            .map(|e| e.value.clone());
        assert_eq!(
            created.as_deref(),
            Some("aten::t at ncu_recorded_by.py(9): <module>")
        );
    }

    #[test]
    fn silent_on_the_dense_and_transposed_adds() {
        // Kernels 1–2 read at 16 sectors per request with 16-byte loads: ideal.
        let r = probe_trace(false).report_with_ncu(PROBE_NCU);
        assert!(!codes(&r).contains(&"V001"), "{:?}", codes(&r));
        assert!(!codes(&r).contains(&"M001"), "{:?}", codes(&r));
    }

    /// Without a hardware pass V001 runs on the tensor forest's model; a trace without an
    /// execution trace has no forest, so it stays silent (and is not listed as skipped).
    #[test]
    fn without_hardware_or_execution_trace_it_is_silent() {
        let r = probe_trace(true).report();
        assert!(!codes(&r).contains(&"V001"));
        assert!(!r.diagnosis.skipped.iter().any(|s| s.code == "V001"));
    }
}
