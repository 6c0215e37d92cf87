//! Steps of plain traces (no `ProfilerStep#N`): the loop body found from a repeating
//! Python frame even when the host queues every iteration long before the GPU runs
//! it, from a repeating op sequence without stacks, from optimizer steps under
//! gradient accumulation; and syncs outside the steps reported as such.

use tensight::model::StepSource;
use tensight::testing::{codes, TraceBuilder};

/// `n` calls of `bench.py(10): step` back to back on the host (`host_us` each), each
/// launching two kernels of `kernel_us` that the GPU runs one after the other, then a
/// `torch.cuda.synchronize()` after the loop (under a `<module>` frame), and one before.
fn gpu_bound_loop(n: usize, host_us: f64, kernel_us: f64, stacks: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let total = 100.0 + n as f64 * 2.0 * kernel_us + 500.0;
    if stacks {
        b.frame("bench.py(1): <module>", 0.0, total);
    }
    let s0 = b.op("aten::empty", 1.0, 2.0);
    b.runtime("cudaDeviceSynchronize", 3.0, 5.0, Some(s0));
    let mut gpu = 100.0;
    for i in 0..n {
        let t = 20.0 + i as f64 * host_us;
        if stacks {
            b.frame("bench.py(10): step", t, host_us - 1.0);
        }
        for k in 0..2 {
            let ts = t + 1.0 + k as f64 * (host_us / 3.0);
            let mm = b.op("aten::mm", ts, host_us / 4.0);
            b.kernel(
                "sm90_xmma_gemm_bf16",
                mm,
                ts + 1.0,
                gpu,
                kernel_us,
                [132, 1, 1],
                [384, 1, 1],
            );
            gpu += kernel_us;
        }
        let s = b.op("aten::sum", t + host_us * 0.8, host_us / 10.0);
        b.kernel(
            "reduce_kernel",
            s,
            t + host_us * 0.8 + 1.0,
            gpu,
            5.0,
            [1, 1, 1],
            [512, 1, 1],
        );
        gpu += 5.0;
    }
    let after = 20.0 + n as f64 * host_us + 5.0;
    let sync = b.op("aten::empty", after, 1.0);
    b.runtime(
        "cudaDeviceSynchronize",
        after + 1.0,
        gpu - after,
        Some(sync),
    );
    b
}

#[test]
fn a_gpu_bound_function_loop_is_found_by_its_frame() {
    // The host queues all 5 iterations in 0.5 ms; the GPU takes 10 ms.
    let r = gpu_bound_loop(5, 100.0, 1000.0, true).report();
    assert_eq!(
        r.profile.step_source,
        StepSource::PythonFrame {
            frame: "bench.py(10): step".into()
        }
    );
    let steps = &r.metrics.timeline.steps;
    assert_eq!(steps.len(), 5);
    // Each step lasts the iteration period (two 1 ms kernels and a 5 µs one).
    for s in &steps[1..] {
        let ms = s.dur_ns as f64 / 1e6;
        assert!((ms - 2.005).abs() < 0.05, "step {} lasts {ms} ms", s.name);
    }
    // The syncs before and after the loop are outside the steps: no per-step sync.
    let t = &r.metrics.timeline;
    assert!(t.syncs.is_empty(), "{:?}", t.syncs);
    let pos: Vec<&str> = t.syncs_outside.iter().map(|o| o.position).collect();
    assert_eq!(pos, ["before", "after"]);
    assert!(!codes(&r).contains(&"S001"), "{:?}", codes(&r));
}

#[test]
fn without_stacks_the_repeating_op_sequence_cuts_the_steps() {
    let r = gpu_bound_loop(6, 100.0, 1000.0, false).report();
    match &r.profile.step_source {
        StepSource::OpSequence {
            first_op,
            ops_per_step,
        } => {
            assert_eq!(first_op, "aten::mm");
            assert_eq!(*ops_per_step, 3);
        }
        other => panic!("steps found by {other:?}"),
    }
    assert_eq!(r.metrics.timeline.steps.len(), 6);
    assert!(r.metrics.timeline.syncs.is_empty());
}

#[test]
fn a_trace_where_nothing_repeats_is_one_step() {
    let mut b = TraceBuilder::new();
    for (i, name) in ["aten::mm", "aten::relu", "aten::sum", "aten::add"]
        .iter()
        .enumerate()
    {
        b.op(name, i as f64 * 10.0, 5.0);
    }
    let r = b.report();
    assert_eq!(r.profile.step_source, StepSource::WholeTrace);
    assert_eq!(r.metrics.timeline.steps.len(), 1);
}

/// Optimizer steps after `per[i]` matmuls of `us[i]` µs each (one iteration each), the
/// trace starting inside the first iteration (no annotation before it).
fn optimizer_loop(per: &[usize], us: &[f64]) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let mut t = 0.0;
    for (&n, &d) in per.iter().zip(us) {
        for _ in 0..n {
            let o = b.op("aten::mm", t, d - 5.0);
            b.kernel("gemm", o, t + 1.0, t + 2.0, 3.0, [8, 1, 1], [128, 1, 1]);
            t += d;
        }
        b.annotation("Optimizer.step#SGD.step", t, 10.0);
        b.op("aten::add_", t + 1.0, 5.0);
        t += 20.0;
    }
    b
}

#[test]
fn an_edge_iteration_is_judged_by_its_ops_not_its_time() {
    // The first iteration ran 3× slower (a loaded machine): the same ops, so a step.
    let r = optimizer_loop(&[4, 4, 4, 4], &[300.0, 100.0, 100.0, 100.0]).report();
    assert_eq!(r.metrics.timeline.steps.len(), 4);
    // What comes before the first optimizer step holds twice an iteration's ops (set-up
    // before the loop): not a step, however short.
    let r = optimizer_loop(&[8, 4, 4, 4], &[20.0, 100.0, 100.0, 100.0]).report();
    assert_eq!(r.metrics.timeline.steps.len(), 3);
}

/// A single-process DataLoader loop: each fetch holds `fetch_ops` ops (the collate), then
/// the model's 4 and an optimizer step. `lead` ops of the model, with the optimizer step
/// when `lead_steps`, ran before the first traced fetch.
fn single_process_loader(fetch_ops: usize, lead: usize, lead_steps: bool) -> TraceBuilder {
    let mut b = TraceBuilder::new();
    let mut t = 0.0;
    let body = |b: &mut TraceBuilder, t: &mut f64, n: usize, step: bool| {
        for _ in 0..n {
            let o = b.op("aten::mm", *t, 90.0);
            b.kernel("gemm", o, *t + 1.0, *t + 2.0, 50.0, [8, 1, 1], [128, 1, 1]);
            *t += 100.0;
        }
        if step {
            b.annotation("Optimizer.step#SGD.step", *t, 10.0);
            b.op("aten::add_", *t + 1.0, 5.0);
            *t += 20.0;
        }
    };
    body(&mut b, &mut t, lead, lead_steps);
    for _ in 0..4 {
        let d = 10.0 * fetch_ops as f64 + 10.0;
        b.annotation(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            t,
            d,
        );
        for k in 0..fetch_ops {
            b.op("aten::stack", t + 1.0 + 10.0 * k as f64, 8.0);
        }
        t += d + 5.0;
        body(&mut b, &mut t, 4, true);
    }
    b
}

#[test]
fn an_edge_iteration_without_its_fetch_is_told_by_its_optimizer_step() {
    // The profiler started after the first fetch: the rest of that iteration holds a
    // tenth of the others' ops (the fetch holds the collate) but its optimizer step.
    let r = single_process_loader(40, 4, true).report();
    assert_eq!(r.metrics.timeline.steps.len(), 5);
    // Ops before the first fetch without an optimizer step: not an iteration.
    let r = single_process_loader(40, 4, false).report();
    assert_eq!(r.metrics.timeline.steps.len(), 4);
}

#[test]
fn optimizer_steps_win_over_a_frame_that_repeats_per_micro_batch() {
    // Gradient accumulation: `train.py(20): micro_step` 4 times per optimizer step.
    let mut b = TraceBuilder::new();
    let mut t = 0.0;
    for _ in 0..4 {
        for _ in 0..4 {
            b.frame("train.py(20): micro_step", t, 90.0);
            let o = b.op("aten::mm", t + 5.0, 50.0);
            b.kernel("gemm", o, t + 10.0, t + 20.0, 40.0, [8, 1, 1], [128, 1, 1]);
            t += 100.0;
        }
        b.annotation("Optimizer.step#AdamW.step", t, 30.0);
        let o = b.op("aten::_foreach_add_", t + 2.0, 20.0);
        b.kernel(
            "multi_tensor_apply_kernel",
            o,
            t + 5.0,
            t + 10.0,
            10.0,
            [4, 1, 1],
            [512, 1, 1],
        );
        t += 40.0;
    }
    let r = b.report();
    assert!(
        matches!(r.profile.step_source, StepSource::Annotation { .. }),
        "{:?}",
        r.profile.step_source
    );
    // 4 iterations of 440 µs: the first from the trace's first op (at 5 µs) to the
    // first optimizer step's end.
    let steps = &r.metrics.timeline.steps;
    assert_eq!(steps.len(), 4);
    assert_eq!(steps[0].dur_ns, 425_000);
    for s in &steps[1..] {
        assert_eq!(s.dur_ns, 440_000, "{}", s.name);
    }
}

#[test]
fn a_repeated_frame_without_the_work_is_no_step() {
    // `load.py(5): read_file` repeats 10 times before the real loop, which runs inline
    // (no frame of its own): the op sequence, not the file reader, makes the steps.
    let mut b = TraceBuilder::new();
    b.frame("load.py(1): <module>", 0.0, 10_000.0);
    for i in 0..10 {
        b.frame("load.py(5): read_file", 10.0 + i as f64 * 20.0, 15.0);
    }
    for i in 0..5 {
        let t = 1_000.0 + i as f64 * 500.0;
        for (k, name) in ["aten::mm", "aten::relu", "aten::sum"].iter().enumerate() {
            let o = b.op(name, t + k as f64 * 100.0, 50.0);
            b.kernel(
                "k",
                o,
                t + k as f64 * 100.0 + 5.0,
                t + k as f64 * 100.0 + 20.0,
                50.0,
                [1, 1, 1],
                [32, 1, 1],
            );
        }
    }
    let r = b.report();
    assert!(
        matches!(r.profile.step_source, StepSource::OpSequence { .. }),
        "{:?}",
        r.profile.step_source
    );
    assert_eq!(r.metrics.timeline.steps.len(), 5);
}

/// The profiler's cost removed, the recorded H200 steps replay about as long as the
/// program's own unprofiled steps (`analysis::inflation`): host-bound workloads come down
/// to their unprofiled time; a GPU-bound one whose host ran ahead in the warm-up (its
/// clock 1.09 ms a step against 11.03 ms of CUDA events) has its host deflated to that
/// pace while the step stays the GPU's; one whose host kept pace is not deflated.
#[test]
fn the_deflated_replay_lasts_about_the_unprofiled_step() {
    use tensight::analysis::{inflation, simulate};
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/workloads");
    for (name, source) in [
        ("launch_bound", Some("cuda_events")),
        ("sync_in_loop", None),
        ("fp32_gemm", Some("host_pace")),
    ] {
        let r = tensight::analyze_path(&root.join(name)).expect(name);
        let s = &r.metrics.summary;
        let d = inflation::of(&r.profile, s.step_time_ms, s.gpu_busy_ms_per_step);
        assert_eq!(d.as_ref().map(|d| d.source), source, "{name}");
        let Some(d) = d else { continue };
        if d.source == "host_pace" {
            let (host, work) = d.host_ms.expect("host_pace gives the host's pace");
            assert!(host < work && d.per_event_ns > 0.0, "{name}: {host} {work}");
        }
        let rep = simulate::replay(&r.profile, &d.change).expect("a replay");
        let step_ms = rep.after_ns as f64 / 1e6 / s.steps as f64;
        assert!(
            (step_ms - d.unprofiled_step_ms).abs() <= 0.15 * d.unprofiled_step_ms,
            "{name}: replayed {step_ms:.2} ms, unprofiled {:.2} ms, profiled {:.2} ms",
            d.unprofiled_step_ms,
            s.step_time_ms
        );
    }
}
