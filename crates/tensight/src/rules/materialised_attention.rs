//! M004 materialised-attention: attention whose score matrix goes through GPU memory —
//! a hand-written `softmax(q @ kᵀ) @ v`, or `scaled_dot_product_attention` off its fused
//! paths — where a fused (flash) attention kernel keeps the scores on chip.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::devices::Ceilings;
use crate::analysis::flops::{parse_dims, parse_types, Dtype};
use crate::analysis::simulate::{Change, Durations};
use crate::analysis::window;
use crate::model::Profile;
use rustc_hash::{FxHashMap, FxHashSet};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "M004",
    name: "materialised-attention",
    category: Category::MemoryHierarchy,
    status: Status::Preview,
    since: "0.2.0",
    needs_gpu: true,
    doc: r#"## What it detects
Attention computed through its full score matrix in GPU memory:
- a hand-written chain on one thread: a matmul whose output is `[..., Tq, Tk]` from
  `[..., Tq, D] @ [..., D, Tk]` (D the head size, at most 256; Tq, Tk at least 128),
  then a softmax over a tensor of that size, then a matmul of `[..., Tq, Tk]` by
  `[..., Tk, Dv]`, with whatever scaling, masking, casts and dropout lie between;
- the same two matmuls with no softmax between them (linear attention: kernel feature
  maps such as `elu(x) + 1` on q and k, computed in the quadratic order), where only
  views, copies and scaling by a scalar touch the scores, and perhaps a sum of them
  (the normaliser) right after: `(q @ kᵀ) @ v` equals `q @ (kᵀ @ v)`, which never forms
  the scores;
- `F.scaled_dot_product_attention` that ran its math fallback
  (`_scaled_dot_product_attention_math`), or that was given a square `[..., T, T]`
  `attn_mask` and so ran neither the flash nor the cuDNN kernel.
Shapes come from the ops' recorded inputs (`record_shapes=True`, or the detail step of
a `tensight run` bundle); without them the rule is silent. The backward of each
attention is found through autograd's sequence numbers (the backward ops carry the
forward op's).

## Why it costs time
The score matrix has `Tq × Tk` elements per head: at batch 16, 12 heads and 512
tokens, 50M elements, 100 MB in bf16. The chain writes it and reads it back once per
op (matmul, scale, mask, softmax, casts, dropout, the second matmul), and the backward
does it again for each gradient. A fused attention kernel tiles the scores in shared
memory and never writes them: its time is its FLOPs at tensor-core rate, and it saves
the memory for the activations too.

## Example
A nanoGPT-style block with `att = (q @ k.transpose(-2, -1)) * scale`,
`masked_fill(mask == 0, -inf)`, `softmax(att.float())`, `att @ v` on bf16
`[16, 12, 512, 64]` heads: `F.scaled_dot_product_attention(q, k, v, is_causal=True)`
computes the same attention with one flash kernel forward and one backward.

## Fix
```python
# before: the scores go through memory
att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
att = att.masked_fill(causal_mask == 0, float("-inf")).softmax(dim=-1)
y = att @ v
# after: a fused kernel (flash attention on bf16/fp16 CUDA tensors)
y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
# a causal mask passed as attn_mask keeps SDPA off flash: say is_causal=True instead
```

## Thresholds
Tq and Tk at least 128 (`MIN_SEQ`), the head size at most 256 (`MAX_HEAD_DIM`), the
softmax and the second matmul within 400 ops (`MAX_SCAN`) of the first on its thread.
Estimate: each attention's forward kernels (and its backward's, through the sequence
numbers) replaced by one kernel of the fused attention's modelled time: its FLOPs
(forward `2·B·Tq·Tk·(D + Dv)`, backward 2.5× that; half of both when a square mask
broadcast over batch and heads is applied, a causal mask) at 35% (`FUSED_EFFICIENCY`)
of the GPU's peak rate for the dtype (bf16/fp16 tensor cores; fp32 CUDA cores), or its
q, k, v and output bytes at the memory bandwidth when that is longer; replayed through
the trace, so only time on the GPU's critical path counts. The host's dispatch of the
removed ops is not cut (a lower bound on a host-bound step). Reported when the saving is
at least 1% of the step (`MIN_SAVING_PCT`). For linear attention the replacement is the
reassociated product: `2·B·(Tq + Tk)·D·Dv` FLOPs, at the same rates; the normaliser's
sum within 16 ops after the second matmul (`NORMALISER_SCAN`) goes with the chain.

## References
- PyTorch docs: `torch.nn.functional.scaled_dot_product_attention` (the flash,
  memory-efficient, cuDNN and math backends, and when each is chosen).
- Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with
  IO-Awareness" (NeurIPS 2022); Dao, "FlashAttention-2" (2023).
"#,
};

/// Smallest query and key length worth a fused kernel.
const MIN_SEQ: i64 = 128;
/// Largest head size the fused kernels take.
const MAX_HEAD_DIM: i64 = 256;
/// How many ops after the score matmul (any depth, one thread) the chain may span.
const MAX_SCAN: usize = 400;
/// Share of the peak rate a fused attention kernel is modelled to reach.
const FUSED_EFFICIENCY: f64 = 0.35;
/// Share of the peak memory bandwidth it reaches when memory-bound.
const MEM_EFFICIENCY: f64 = 0.8;
/// Backward FLOPs over forward FLOPs of a fused attention (5 matmuls against 2).
const BWD_FLOPS: f64 = 2.5;
/// Report when the saving is at least this share of the step (%).
const MIN_SAVING_PCT: f64 = 1.0;

/// Ops after a linear chain's second matmul searched for its normaliser (a sum of the
/// scores).
const NORMALISER_SCAN: usize = 16;
const MATMULS: [&str; 3] = ["aten::matmul", "aten::bmm", "aten::baddbmm"];
const SOFTMAXES: [&str; 4] = [
    "aten::softmax",
    "aten::_softmax",
    "aten::_safe_softmax",
    "aten::special_softmax",
];
const SDPA: &str = "aten::scaled_dot_product_attention";
/// SDPA's fused backends: an SDPA that ran one of these is fine.
const FUSED_SDPA: [&str; 3] = [
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward",
];

/// How the attention was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Form {
    /// softmax(q @ kᵀ) @ v by hand.
    Chain,
    /// SDPA's math fallback.
    SdpaMath,
    /// SDPA given a square mask.
    SdpaMask,
    /// (q @ kᵀ) @ v with no softmax between (linear attention in the quadratic order):
    /// reassociated, q @ (kᵀ @ v) never forms the scores.
    Linear,
}

/// One attention call and the kernels it ran.
struct Attention {
    form: Form,
    /// The op that names it (the score matmul, or the SDPA call).
    first: u32,
    /// Its last forward op (`first..=last` are its ops, on one thread).
    last: u32,
    /// Batch × heads, query length, key length, head size, value head size.
    shape: [i64; 5],
    dtype: Dtype,
    causal: bool,
    fwd: Vec<u32>,
    bwd: Vec<u32>,
}

impl Attention {
    /// FLOPs of the fused forward (of the reassociated one for [`Form::Linear`]).
    fn fwd_flops(&self) -> f64 {
        let [b, q, k, d, dv] = self.shape.map(|x| x as f64);
        if self.form == Form::Linear {
            // kᵀ @ v ([D, Dv] per head), then q @ that.
            return 2.0 * b * (q + k) * d * dv;
        }
        let f = 2.0 * b * q * k * (d + dv);
        if self.causal {
            f / 2.0
        } else {
            f
        }
    }
    /// Bytes of q, k, v and the output.
    fn io_bytes(&self) -> f64 {
        let [b, q, k, d, dv] = self.shape.map(|x| x as f64);
        b * (q * d + k * d + k * dv + q * dv) * self.dtype.itemsize() as f64
    }
    /// Modelled time of the fused forward (`backward`: its backward), ns.
    fn fused_ns(&self, c: &Ceilings, backward: bool) -> i64 {
        let scale = if backward { BWD_FLOPS } else { 1.0 };
        let tflops = match self.dtype {
            Dtype::BF16 => c.bf16_tflops,
            Dtype::F16 => c.fp16_tflops,
            _ => c.fp32_tflops,
        };
        let compute = scale * self.fwd_flops() / (tflops * FUSED_EFFICIENCY * 1e3);
        let memory = scale * self.io_bytes() / (c.mem_bw_gbs * MEM_EFFICIENCY);
        compute.max(memory).ceil() as i64
    }
    /// Bytes of one score matrix (all heads), in the attention's dtype.
    fn score_bytes(&self) -> f64 {
        let [b, q, k, ..] = self.shape.map(|x| x as f64);
        b * q * k * self.dtype.itemsize() as f64
    }
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let Some(c) = ctx.metrics.device.as_ref().and_then(|d| d.ceilings) else {
        return Vec::new();
    };
    let found = attentions(p);
    if found.is_empty() || ctx.step_ms() <= 0.0 {
        return Vec::new();
    }
    let n = ctx.steps();
    let mut new_dur: Durations = Durations::default();
    let (mut kernel_ns, mut fused_ns) = (0i64, 0i64);
    // Per cause (form and first op's name and source line): calls, kernel ns, first.
    let mut causes: FxHashMap<(Form, String), (usize, i64, u32)> = FxHashMap::default();
    for a in &found {
        let mut own = 0;
        for (kernels, backward) in [(&a.fwd, false), (&a.bwd, true)] {
            let sum: i64 = kernels.iter().map(|&g| p.gpu[g as usize].dur_ns).sum();
            let fused = a.fused_ns(&c, backward);
            if kernels.is_empty() || fused >= sum {
                continue;
            }
            let keep = longest(p, kernels);
            for &g in kernels {
                new_dur.insert(g, if g == keep { fused } else { 0 });
            }
            kernel_ns += sum;
            fused_ns += fused;
            own += sum;
        }
        let key = (a.form, site(p, a.first));
        let e = causes.entry(key).or_insert((0, 0, a.first));
        e.0 += 1;
        e.1 += own;
    }
    if new_dur.is_empty() {
        return Vec::new();
    }
    let change = Change::durations(new_dur);
    let saving_ms = ctx.replayed_ms(&change);
    if 100.0 * saving_ms / ctx.step_ms() < MIN_SAVING_PCT {
        return Vec::new();
    }
    let mut causes: Vec<_> = causes.into_iter().collect();
    causes.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(&b.0)));
    let top = &found[found
        .iter()
        .position(|a| a.first == causes[0].1 .2)
        .unwrap_or(0)];
    let [b, q, k, d, dv] = top.shape;
    let with_bwd = found.iter().filter(|a| !a.bwd.is_empty()).count();
    let what = match top.form {
        Form::Chain => "softmax(q @ kᵀ) @ v written out",
        Form::SdpaMath => "scaled_dot_product_attention on its math fallback",
        Form::SdpaMask => "scaled_dot_product_attention given a square attn_mask",
        Form::Linear => "(q @ kᵀ) @ v with no softmax, in the quadratic order",
    };
    let per_step = |ns: i64| fmt_ms(ns as f64 / 1e6 / n);
    let d = Draft {
        change: Some(change),
        title: "Attention materialises its score matrix in GPU memory".into(),
        message: format!(
            "{:.1} attention calls per step ({what}) write and re-read a [{b}, {q}, {k}] score matrix ({} each) through GPU memory: {} of kernels per step{}, where {} is modelled at {}",
            found.len() as f64 / n,
            fmt_bytes(top.score_bytes()),
            per_step(kernel_ns),
            if with_bwd > 0 { " forward and backward" } else { "" },
            if top.form == Form::Linear {
                "q @ (kᵀ @ v)"
            } else {
                "a fused attention kernel"
            },
            per_step(fused_ns),
        ),
        saving_ms,
        estimate: format!(
            "each attention's kernels ({} per step) replaced by one fused kernel forward and one backward of modelled time ({} per step: FLOPs at {:.0}% of the {:?} peak, or q/k/v/output bytes at the memory bandwidth{}), replayed through the trace so only time on the GPU's critical path counts; the host dispatch of the removed ops is not cut",
            per_step(kernel_ns),
            per_step(fused_ns),
            FUSED_EFFICIENCY * 100.0,
            top.dtype,
            if top.causal { "; causal, half the FLOPs" } else { "" },
        ),
        evidence: vec![
            ev("attention calls per step", format!("{:.1}", found.len() as f64 / n)),
            ev("with their backward found", format!("{with_bwd} of {}", found.len())),
            ev("shape (batch·heads, Tq, Tk, D, Dv)", format!("{b}, {q}, {k}, {d}, {dv}")),
            ev("score matrix per call", fmt_bytes(top.score_bytes())),
            ev("their kernels per step", per_step(kernel_ns)),
            ev("fused attention, modelled, per step", per_step(fused_ns)),
            ev("distinct sites", causes.len().to_string()),
        ],
        explanation: if top.form == Form::Linear {
            format!(
                "With no softmax between them, (q kᵀ) v equals q (kᵀ v): the {q}×{k} scores of every head need never exist. Computed in this order they cost {q}·{k}·(D + Dv) multiply-adds per head and a write and re-read of the scores; reassociated, ({q} + {k})·D·Dv and a [D, Dv] summary per head."
            )
        } else {
            format!(
                "Each op of the chain (matmul, scale, mask, softmax, casts, the second matmul) writes or reads the whole {q}×{k} score matrix of every head in GPU memory, and the backward does it again; a fused attention kernel keeps the scores in shared memory and is bound by its FLOPs."
            )
        },
        fixes: match top.form {
            Form::Chain => vec![
                "Call `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` (or `attn_mask=` for a non-causal mask, `dropout_p=` for dropout) instead of the matmul/softmax/matmul chain".into(),
                "Keep q, k, v in bf16/fp16 (autocast) so SDPA can take its flash kernel".into(),
            ],
            Form::Linear => vec![
                "Reassociate: `kv = k.transpose(-2, -1) @ v` (or `einsum('bhmd,bhme->bhde', k, v)`), then `q @ kv`; the normaliser as `q @ k.sum(-2, keepdim=True).transpose(-2, -1)`".into(),
                "For causal linear attention, use a chunked or cumulative-sum form (prefix sums of kᵀv) rather than a masked [T, T] score matrix".into(),
            ],
            Form::SdpaMath | Form::SdpaMask => vec![
                "Pass `is_causal=True` instead of a causal `attn_mask`: with a mask SDPA cannot use flash attention".into(),
                "Give SDPA bf16/fp16 CUDA tensors with a head size of at most 256 and the last dimension contiguous, so it leaves its math fallback".into(),
            ],
        },
        locations: causes
            .iter()
            .take(5)
            .map(|((_, _), (count, ns, first))| {
                let mut loc = op_location(p, *first);
                loc.tensor = Some(format!(
                    "{:.1}× per step, {} of kernels per step",
                    *count as f64 / n,
                    per_step(*ns)
                ));
                loc
            })
            .collect(),
    };
    vec![d.finish(&META, ctx)]
}

/// The kernel of `kernels` that runs longest (the one that stands for the fused kernel).
fn longest(p: &Profile, kernels: &[u32]) -> u32 {
    let mut best = kernels[0];
    for &g in kernels {
        if p.gpu[g as usize].dur_ns > p.gpu[best as usize].dur_ns {
            best = g;
        }
    }
    best
}

/// Op `i`'s name and source line: one cause.
fn site(p: &Profile, i: u32) -> String {
    let l = op_location(p, i);
    format!(
        "{} {}",
        l.op.unwrap_or_default(),
        l.source.unwrap_or_default()
    )
}

/// Dims of op `i`'s inputs (empty without shapes).
fn dims(p: &Profile, i: usize) -> Vec<Vec<i64>> {
    p.ops[i]
        .input_dims
        .as_deref()
        .map(parse_dims)
        .unwrap_or_default()
}

/// The dtype of op `i`'s first input.
fn dtype(p: &Profile, i: usize) -> Option<Dtype> {
    let t = parse_types(p.ops[i].input_types.as_deref()?);
    Dtype::from_kineto(t.first()?)
}

fn numel(s: &[i64]) -> i64 {
    s.iter().product()
}

/// The last op on op `i`'s thread that starts before `i` ends: `i..=` that are `i` and
/// what it called.
fn last_inside(p: &Profile, i: usize) -> usize {
    let o = &p.ops[i];
    let stop = o.end_ns();
    (i..p.ops.len())
        .take_while(|&j| p.ops[j].pid == o.pid && p.ops[j].tid == o.tid && p.ops[j].ts_ns < stop)
        .last()
        .unwrap_or(i)
}

/// Ops that may touch the scores of a linear chain without breaking the reassociation:
/// views, copies, casts, and scaling by a scalar.
fn reassociable(name: &str, dims: &[Vec<i64>]) -> bool {
    const VIEWS: [&str; 17] = [
        "aten::view",
        "aten::reshape",
        "aten::_unsafe_view",
        "aten::permute",
        "aten::transpose",
        "aten::t",
        "aten::as_strided",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::expand",
        "aten::alias",
        "aten::detach",
        "aten::contiguous",
        "aten::clone",
        "aten::copy_",
        "aten::to",
        "aten::_to_copy",
    ];
    VIEWS.contains(&name)
        || name.starts_with("aten::empty")
        || (matches!(
            name,
            "aten::mul" | "aten::div" | "aten::mul_" | "aten::div_"
        ) && dims.get(1).is_some_and(|d| d.iter().product::<i64>() <= 1))
}

/// (batch, M, K, N) of a matmul `a @ b` with a = [..., M, K], b = [..., K, N].
fn matmul_dims(d: &[Vec<i64>]) -> Option<(i64, i64, i64, i64)> {
    let (a, b) = (d.first()?, d.get(1)?);
    if a.len() < 3 || b.len() < 2 {
        return None;
    }
    let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
    let (k2, nn) = (b[b.len() - 2], b[b.len() - 1]);
    (k == k2 && m > 0 && nn > 0).then(|| (numel(&a[..a.len() - 2]), m, k, nn))
}

/// Every attention in the analysed window.
fn attentions(p: &Profile) -> Vec<Attention> {
    let (lo, hi) = window(p);
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.ops.len() {
        let o = &p.ops[i];
        if o.ts_ns < lo || o.ts_ns >= hi {
            i += 1;
            continue;
        }
        let nested = |names: &[&str]| {
            o.parent
                .is_some_and(|q| names.contains(&&*p.ops[q as usize].name))
        };
        let found = if MATMULS.contains(&&*o.name) && !nested(&MATMULS) {
            chain(p, i)
        } else if &*o.name == SDPA && !nested(&[SDPA]) {
            sdpa(p, i)
        } else {
            None
        };
        match found {
            Some(a) => {
                i = a.last as usize + 1;
                out.push(a);
            }
            None => i += 1,
        }
    }
    link_kernels(p, &mut out);
    out
}

/// The hand-written chain starting with score matmul `i`.
fn chain(p: &Profile, i: usize) -> Option<Attention> {
    let (b, tq, d, tk) = matmul_dims(&dims(p, i))?;
    if tq < MIN_SEQ || tk < MIN_SEQ || d > MAX_HEAD_DIM {
        return None;
    }
    let o = &p.ops[i];
    let scores = b * tq * tk;
    let same_thread = |j: usize| p.ops[j].pid == o.pid && p.ops[j].tid == o.tid;
    let end = (i + MAX_SCAN).min(p.ops.len());
    let second = |from: usize| {
        (from + 1..end).take_while(|&j| same_thread(j)).find(|&j| {
            MATMULS.contains(&&*p.ops[j].name)
                && matmul_dims(&dims(p, j))
                    .is_some_and(|(b2, m, k, _)| b2 * m * k == scores && k == tk)
        })
    };
    let softmax = (i + 1..end).take_while(|&j| same_thread(j)).find(|&j| {
        SOFTMAXES.contains(&&*p.ops[j].name)
            && dims(p, j)
                .first()
                .is_some_and(|s| numel(s) == scores && s.last() == Some(&tk))
    });
    let (form, out) = match softmax.and_then(second) {
        Some(out) => (Form::Chain, out),
        None => {
            // No softmax: linear when only views and scalar scaling touch the scores
            // between the two matmuls.
            let out = second(i)?;
            let linear = (i + 1..out).all(|j| {
                let d = dims(p, j);
                d.first().is_none_or(|s| numel(s) != scores) || reassociable(&p.ops[j].name, &d)
            });
            if !linear {
                return None;
            }
            (Form::Linear, out)
        }
    };
    let (_, _, _, dv) = matmul_dims(&dims(p, out))?;
    let mut last = last_inside(p, out);
    if form == Form::Linear {
        // The normaliser: a sum of the scores over the keys, soon after.
        let end = (last + 1 + NORMALISER_SCAN).min(p.ops.len());
        if let Some(sum) = (last + 1..end).take_while(|&j| same_thread(j)).find(|&j| {
            &*p.ops[j].name == "aten::sum" && dims(p, j).first().is_some_and(|s| numel(s) == scores)
        }) {
            last = last_inside(p, sum);
        }
    }
    // A square mask broadcast over batch and heads ([1, 1, T, T]) is a causal one.
    let causal = tq == tk
        && (i..=last).any(|j| {
            p.ops[j].name.starts_with("aten::masked_fill")
                && dims(p, j).get(1).is_some_and(|m| {
                    m.len() >= 2
                        && m[m.len() - 2..] == [tq, tk]
                        && m[..m.len() - 2].iter().all(|&x| x == 1)
                })
        });
    let a = Attention {
        form,
        first: i as u32,
        last: last as u32,
        shape: [b, tq, tk, d, dv],
        dtype: dtype(p, i).unwrap_or(Dtype::F32),
        causal,
        fwd: Vec::new(),
        bwd: Vec::new(),
    };
    Some(a)
}

/// SDPA call `i` when it ran off its fused paths.
fn sdpa(p: &Profile, i: usize) -> Option<Attention> {
    let last = last_inside(p, i);
    let inner = |names: &[&str]| (i + 1..=last).any(|j| names.contains(&&*p.ops[j].name));
    if inner(&FUSED_SDPA) {
        return None;
    }
    let d = dims(p, i);
    let (q, k, v) = (d.first()?, d.get(1)?, d.get(2)?);
    if q.len() < 3 || k.len() < 3 || v.len() < 3 {
        return None;
    }
    let (tq, hd) = (q[q.len() - 2], q[q.len() - 1]);
    let (tk, dv) = (k[k.len() - 2], v[v.len() - 1]);
    if tq < MIN_SEQ || tk < MIN_SEQ || hd > MAX_HEAD_DIM {
        return None;
    }
    let square_mask = tq == tk
        && d.get(3)
            .is_some_and(|m| m.len() >= 2 && m[m.len() - 2..] == [tq, tk]);
    let form = if inner(&["aten::_scaled_dot_product_attention_math"]) {
        Form::SdpaMath
    } else if square_mask {
        Form::SdpaMask
    } else {
        return None;
    };
    let a = Attention {
        form,
        first: i as u32,
        last: last as u32,
        shape: [numel(&q[..q.len() - 2]), tq, tk, hd, dv],
        dtype: dtype(p, i).unwrap_or(Dtype::F32),
        causal: square_mask,
        fwd: Vec::new(),
        bwd: Vec::new(),
    };
    Some(a)
}

/// Give each attention its forward kernels (launched by its ops) and its backward's
/// (launched inside the ops that carry the sequence numbers of its ops).
fn link_kernels(p: &Profile, found: &mut [Attention]) {
    if found.is_empty() {
        return;
    }
    // Op → attention: the forward ops (`first..=last` on their thread) and, through
    // their sequence numbers, the backward ops.
    let mut fwd_of: FxHashMap<u32, usize> = FxHashMap::default();
    let mut seq_of: FxHashMap<i64, usize> = FxHashMap::default();
    for (ai, a) in found.iter().enumerate() {
        for j in a.first..=a.last {
            fwd_of.insert(j, ai);
            if let Some(s) = p.ops[j as usize].seq {
                seq_of.insert(s, ai);
            }
        }
    }
    let mut bwd_ops: FxHashMap<u32, usize> = FxHashMap::default();
    for (j, o) in p.ops.iter().enumerate() {
        let Some(&ai) = o.seq.and_then(|s| seq_of.get(&s)) else {
            continue;
        };
        if !fwd_of.contains_key(&(j as u32)) {
            bwd_ops.insert(j as u32, ai);
        }
    }
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    for (g, act) in p.gpu.iter().enumerate() {
        if !act.is_kernel() {
            continue;
        }
        let Some(op) = act.op else { continue };
        if let Some(&ai) = fwd_of.get(&op) {
            found[ai].fwd.push(g as u32);
            continue;
        }
        if let Some(ai) = p.op_ancestors(op).find_map(|a| bwd_ops.get(&a).copied()) {
            if seen.insert(g as u32) {
                found[ai].bwd.push(g as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{codes, finding, TraceBuilder};
    use serde_json::json;

    const GEMM: &str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64";
    const EW: &str =
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>";
    const SOFTMAX: &str = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8>";

    /// Three GPU-bound steps of bf16 ops `names` (each with its input dims), each op
    /// launching one 300 µs kernel (and, with `backward`, its backward op on another
    /// thread one more); a sync at the end of the step waits for them.
    fn trace(names: &[(&str, serde_json::Value)], backward: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        b.top_level("record_shapes", json!(1));
        let kernels = names.len() as f64 * if backward { 2.0 } else { 1.0 };
        let step = 220.0 + 301.0 * kernels;
        for s in 0..3 {
            let t0 = step * s as f64;
            b.step(s + 1, t0, step);
            let mut start = t0 + 100.0;
            for (i, (name, dims)) in names.iter().enumerate() {
                let at = t0 + 10.0 + 10.0 * i as f64;
                let seq = 1000 * s as i64 + i as i64;
                let op = b.op_with(
                    name,
                    at,
                    8.0,
                    json!({"Input Dims": dims, "Input type": ["c10::BFloat16", "c10::BFloat16"],
                           "Sequence number": seq}),
                );
                let k = if name.contains("matmul") || name.contains("bmm") {
                    GEMM
                } else if name.contains("softmax") {
                    SOFTMAX
                } else {
                    EW
                };
                b.kernel(k, op, at + 1.0, start, 300.0, [4096, 1, 1], [128, 1, 1]);
                start += 301.0;
            }
            // The backward, in reverse order, queued after the forward.
            for (i, (name, _)) in names.iter().enumerate().rev().filter(|_| backward) {
                let at = t0 + 100.0 + 10.0 * (names.len() - i) as f64;
                let bop = b.op_on(
                    7,
                    &format!("autograd::engine::evaluate_function: {name}Backward0"),
                    at,
                    8.0,
                    json!({"Sequence number": 1000 * s as i64 + i as i64}),
                );
                b.kernel(EW, bop, at + 1.0, start, 300.0, [4096, 1, 1], [128, 1, 1]);
                start += 301.0;
            }
            b.runtime(
                "cudaDeviceSynchronize",
                t0 + 200.0,
                start - t0 - 190.0,
                None,
            );
        }
        b
    }

    fn chain(t: i64) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("aten::matmul", json!([[16, 12, t, 64], [16, 12, 64, t]])),
            ("aten::mul", json!([[16, 12, t, t], []])),
            (
                "aten::masked_fill",
                json!([[16, 12, t, t], [1, 1, t, t], []]),
            ),
            ("aten::softmax", json!([[16, 12, t, t], [], []])),
            ("aten::matmul", json!([[16, 12, t, t], [16, 12, t, 64]])),
        ]
    }

    #[test]
    fn fires_on_a_hand_written_attention_with_its_backward() {
        let r = trace(&chain(512), true).report();
        let f = finding(&r, "M004");
        // 10 kernels of 300 µs (5 forward, 5 backward) become one forward and one
        // backward kernel of modelled time: causal [192, 512, 512] × 64, 6.4 GFLOP
        // forward at 35% of 989 TFLOP/s (18.6 µs) and 2.5× that backward (46.5 µs).
        assert!(
            (f.saving_ms - (3.0 - 0.0186 - 0.0465)).abs() < 0.05,
            "saving {}",
            f.saving_ms
        );
        assert!(f.message.contains("[192, 512, 512]"), "{}", f.message);
        assert!(f.message.contains("forward and backward"), "{}", f.message);
        assert!(f.fixes[0].contains("scaled_dot_product_attention"));
    }

    #[test]
    fn silent_on_short_sequences_and_without_a_softmax() {
        let r = trace(&chain(64), true).report();
        assert!(!codes(&r).contains(&"M004"), "{:?}", codes(&r));
        let mut no_softmax = chain(512);
        no_softmax.remove(3);
        let r = trace(&no_softmax, true).report();
        assert!(!codes(&r).contains(&"M004"), "{:?}", codes(&r));
    }

    #[test]
    fn linear_attention_in_the_quadratic_order_fires_with_its_normaliser() {
        let t = 1024;
        let linear = vec![
            ("aten::bmm", json!([[192, t, 64], [192, 64, t]])),
            ("aten::view", json!([[192, t, t], []])),
            ("aten::mul", json!([[16, 12, t, t], []])),
            ("aten::bmm", json!([[192, t, t], [192, t, 64]])),
            ("aten::sum", json!([[16, 12, t, t], [], [], []])),
        ];
        let r = trace(&linear, false).report();
        let f = finding(&r, "M004");
        // The five ops' kernels (300 µs each: the builder gives every op one) become
        // q @ (kᵀ @ v): 2·192·(1024 + 1024)·64·64 FLOPs, 3.2 GFLOP, 9.3 µs at 35% of
        // 989 TFLOP/s, or its 4 × 192·1024·64 bf16 values at 80% of the H200's
        // 4.8 TB/s: 26 µs; the replay keeps the launches' gaps.
        assert!(
            (1.35..1.474).contains(&f.saving_ms),
            "saving {}",
            f.saving_ms
        );
        assert!(f.message.contains("no softmax"), "{}", f.message);
        assert!(f.fixes[0].contains("Reassociate"), "{:?}", f.fixes);
        // A mask or a nonlinearity on the scores breaks the reassociation.
        let mut masked = linear.clone();
        masked[2] = ("aten::exp", json!([[16, 12, t, t]]));
        assert!(!codes(&trace(&masked, false).report()).contains(&"M004"));
    }

    #[test]
    fn sdpa_with_a_square_mask_fires_and_flash_does_not() {
        let q = json!([16, 12, 1024, 64]);
        let masked = vec![(
            "aten::scaled_dot_product_attention",
            json!([q, q, q, [1, 1, 1024, 1024]]),
        )];
        let r = trace(&masked, false).report();
        let f = finding(&r, "M004");
        assert!(f.fixes[0].contains("is_causal=True"), "{:?}", f.fixes);
        let mut b = trace(
            &[("aten::scaled_dot_product_attention", json!([q, q, q]))],
            false,
        );
        // The same call on its flash path: nothing to fix.
        for s in 0..3 {
            b.op_with(
                "aten::_scaled_dot_product_flash_attention",
                (220.0 + 301.0) * s as f64 + 11.0,
                2.0,
                json!({}),
            );
        }
        let r = b.report();
        assert!(!codes(&r).contains(&"M004"), "{:?}", codes(&r));
    }
}
