//! Rank sets for tests and benchmarks: the traces of a distributed job, made from one
//! real rank's trace by perturbing copies of it ([`perturbed`]), or synthetic
//! ([`synthetic`], any number of ranks: the 64-rank set of a scale-out test). Not for
//! production use.
//!
//! A straggler is made the way one happens: in each step its host pauses `gap_us`
//! before launching the step's last communication kernel (every event from that launch
//! on moves later; ranges spanning it grow). Every other rank waits for it: the same
//! kernel on them lasts `gap_us` longer (what NCCL's spin looks like) and everything
//! after it moves later. All ranks then end each step together, as in a synchronous
//! job, and only the straggler has the host gap.

use serde_json::{json, Value};

/// Copies of the Kineto trace `trace` (plain JSON) as the ranks `0..ranks` of one job
/// (`distributedInfo.rank` and `world_size` rewritten), rank `straggler` pausing
/// `gap_us` per step; `None` when the trace has no communication kernel in a
/// `ProfilerStep#N` or is not a JSON object.
pub fn perturbed(trace: &[u8], ranks: u32, straggler: u32, gap_us: f64) -> Option<Vec<Vec<u8>>> {
    let base: Value = serde_json::from_slice(trace).ok()?;
    let cuts = cuts_of(&base)?;
    let mut out = Vec::with_capacity(ranks as usize);
    for r in 0..ranks {
        let mut v = base.clone();
        let events = v.get_mut("traceEvents")?.as_array_mut()?;
        // Latest step first: each cut is in the original times.
        for c in cuts.iter().rev() {
            if r == straggler {
                shift_from(events, c.launch_ts, gap_us, None);
            } else {
                shift_from(events, c.kernel_ts, gap_us, Some(c.kernel));
            }
        }
        let info = v
            .as_object_mut()?
            .entry("distributedInfo")
            .or_insert_with(|| json!({"backend": "nccl"}));
        info["rank"] = json!(r);
        info["world_size"] = json!(ranks);
        out.push(serde_json::to_vec(&v).ok()?);
    }
    Some(out)
}

/// Where a step's wait goes: its last communication kernel (index into the events),
/// when it starts, and when its launch call starts.
struct Cut {
    kernel: usize,
    kernel_ts: f64,
    launch_ts: f64,
}

fn num(e: &Value, k: &str) -> Option<f64> {
    e.get(k)?.as_f64()
}

fn cuts_of(v: &Value) -> Option<Vec<Cut>> {
    let events = v.get("traceEvents")?.as_array()?;
    let name = |e: &Value| {
        e.get("name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string()
    };
    let cat = |e: &Value| {
        e.get("cat")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string()
    };
    let mut steps: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| name(e).starts_with("ProfilerStep#") && cat(e) != "gpu_user_annotation")
        .filter_map(|e| Some((num(e, "ts")?, num(e, "ts")? + num(e, "dur")?)))
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let launch_of = |corr: &Value| {
        events
            .iter()
            .find(|e| {
                cat(e) == "cuda_runtime"
                    && e.get("args").and_then(|a| a.get("correlation")) == Some(corr)
            })
            .and_then(|e| num(e, "ts"))
    };
    let mut cuts = Vec::new();
    for (lo, hi) in steps {
        let last = events
            .iter()
            .enumerate()
            .filter(|(_, e)| cat(e) == "kernel" && name(e).starts_with("nccl"))
            .filter(|(_, e)| num(e, "ts").is_some_and(|t| t >= lo && t < hi))
            .max_by(|a, b| {
                num(a.1, "ts")
                    .unwrap_or(0.0)
                    .total_cmp(&num(b.1, "ts").unwrap_or(0.0))
            });
        let Some((i, k)) = last else { continue };
        let kernel_ts = num(k, "ts")?;
        let corr = k.get("args").and_then(|a| a.get("correlation"))?;
        cuts.push(Cut {
            kernel: i,
            kernel_ts,
            launch_ts: launch_of(corr).unwrap_or(kernel_ts),
        });
    }
    (!cuts.is_empty()).then_some(cuts)
}

/// Move every event at or after `at` by `gap` µs, and grow the host ranges spanning it
/// (GPU work already running goes on as it was); `stretch` (a kernel starting at `at`)
/// grows instead of moving.
fn shift_from(events: &mut [Value], at: f64, gap: f64, stretch: Option<usize>) {
    const GPU: [&str; 5] = [
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "gpu_user_annotation",
        "cuda_sync",
    ];
    for (i, e) in events.iter_mut().enumerate() {
        let (Some(ts), dur) = (num(e, "ts"), num(e, "dur")) else {
            continue;
        };
        let on_gpu = e
            .get("cat")
            .and_then(|c| c.as_str())
            .is_some_and(|c| GPU.contains(&c));
        if Some(i) == stretch {
            e["dur"] = json!(dur.unwrap_or(0.0) + gap);
        } else if ts >= at && !(stretch.is_some() && ts == at) {
            e["ts"] = json!(ts + gap);
        } else if let Some(d) = dur.filter(|&d| ts + d > at && !on_gpu) {
            e["dur"] = json!(d + gap);
        }
    }
}

/// A synthetic job of `ranks` ranks, `steps` steps of 10 ms each: 6 ms of compute
/// kernels, then a 1 ms all-reduce of 16 MiB (Float, group 0) on a communication
/// stream; rank `straggler` pauses `gap_us` before launching it (and the others wait).
pub fn synthetic(ranks: u32, steps: u32, straggler: u32, gap_us: f64) -> Vec<Vec<u8>> {
    let one = synthetic_rank(steps, 0.0, 0.0);
    perturbed(&one, ranks, straggler, gap_us).unwrap_or_default()
}

/// [`synthetic`] with uneven compute instead of a host gap: rank `slow`'s six compute
/// kernels run `extra_us` longer in all, and the others' all-reduce waits as long.
pub fn imbalanced(ranks: u32, steps: u32, slow: u32, extra_us: f64) -> Vec<Vec<u8>> {
    (0..ranks)
        .filter_map(|r| {
            let t = if r == slow {
                synthetic_rank(steps, extra_us, 0.0)
            } else {
                synthetic_rank(steps, 0.0, extra_us)
            };
            let mut v: Value = serde_json::from_slice(&t).ok()?;
            v["distributedInfo"] = json!({"backend": "nccl", "rank": r, "world_size": ranks});
            serde_json::to_vec(&v).ok()
        })
        .collect()
}

/// One rank: its compute `extra_us` longer per step, its all-reduce waiting `wait_us`;
/// steps are 10 ms plus the larger of the two apart.
fn synthetic_rank(steps: u32, extra_us: f64, wait_us: f64) -> Vec<u8> {
    let mut b = crate::testing::TraceBuilder::new();
    let period = 10_000.0 + extra_us.max(wait_us);
    let kernel = 980.0 + extra_us / 6.0;
    for s in 0..steps {
        let t0 = 1000.0 + s as f64 * period;
        b.step(s, t0, period);
        let fwd = b.op("aten::mm", t0 + 10.0, 6_000.0 + extra_us);
        for k in 0..6 {
            let at = t0 + 20.0 + k as f64 * (kernel + 10.0);
            b.kernel(
                "sm90_xmma_gemm_f32f32",
                fwd,
                at,
                at + 15.0,
                kernel,
                [132, 1, 1],
                [256, 1, 1],
            );
        }
        let start = t0 + 6_100.0 + extra_us;
        let ar = b.op("record_param_comms", start, 50.0);
        b.kernel_with(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            ar,
            start + 10.0,
            start + 30.0,
            1_000.0 + wait_us,
            json!({"stream": 20, "Collective name": "allreduce", "In msg nelems": 4_194_304,
                   "Out msg nelems": 4_194_304, "Group size": 64, "dtype": "Float",
                   "Process Group Name": "0"}),
        );
    }
    b.build()
}
