//! Snapshot tests: the full text report of every real trace in tests/fixtures, at 80
//! columns without colour. A change to any analysis, rule or renderer shows up here as
//! a reviewable diff (`INSTA_UPDATE=always cargo test --test snapshots` rewrites them).

use std::path::Path;
use tensight::report::{terminal, RenderOptions};

/// Columns every snapshot is rendered at; no line of a report may be wider.
const WIDTH: usize = 80;

/// `text`, after checking that each of its lines fits [`WIDTH`].
fn fitted(name: &str, text: String) -> String {
    for line in text.lines() {
        let n = line.chars().count();
        assert!(n <= WIDTH, "{name}: a {n}-column line: {line}");
    }
    text
}

fn report_of(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let path = root.join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {rel}: {e}"));
    let report = tensight::analyze_bytes(rel, &bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
    terminal::render(
        &report,
        RenderOptions {
            color: false,
            width: WIDTH,
        },
    )
}

macro_rules! snap {
    ($name:ident, $rel:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(fitted($rel, report_of($rel)));
        }
    };
}

snap!(h200_probe, "h200-probe/kineto_trace.json.gz");
snap!(
    amd_mi250,
    "real/amd_trace-mi250_minitoy_train_ROCm6_2_kineto.json.gz"
);
snap!(
    cpu_only,
    "real/cpu_only-rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
);
// A CPU-only torch trace with ops and stacks: what it holds, its ops by host time.
snap!(cpu_mlp, "cpu/cpu_mlp.json.gz");
snap!(
    alexnet_pageable,
    "real/critical_path-alexnet-benchmark_result_2869224_1695835535_trace.json.gz"
);
snap!(
    cuda_event_sync,
    "real/critical_path-cuda_event_sync-event_sync_trace.json.gz"
);
snap!(
    simple_add,
    "real/execution_trace-benchmark_simple_add_trace.json.gz"
);
snap!(nccl_two_ranks, "real/nccl_parser_config-nccl_data.json.gz");
snap!(
    ns_resolution,
    "real/ns_resolution_trace-rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
);
snap!(compare_base, "real/trace_compare-base-base.json.gz");
snap!(compare_test, "real/trace_compare-test-test.json.gz");
snap!(b200_eager, "real/tracelens-b200-eager_trace.json.gz");
snap!(
    h100_bert,
    "real/tracelens-h100-gaunernst_bert-small-uncased-1016001.json.gz"
);
snap!(
    vllm_graph_rocm,
    "real/tracelens-inference-vllm_decode_full-graph_execution.json.gz"
);
snap!(
    compile_triton_rocm,
    "real/tracelens-torch_compile_triton-trace.json.gz"
);
snap!(triton_example, "real/triton_example-triton_example.json.gz");

/// A bundle's report, read from its folder (relative to the crate, so stable).
fn bundle_report(rel: &str) -> String {
    let path = Path::new("../../tests/fixtures/bundles").join(rel);
    let report = tensight::analyze_path(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    terminal::render(
        &report,
        RenderOptions {
            color: false,
            width: WIDTH,
        },
    )
}

macro_rules! snap_bundle {
    ($name:ident, $rel:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(fitted($rel, bundle_report($rel)));
        }
    };
}

snap_bundle!(bundle_h200_resnet50, "h200-resnet50");
snap_bundle!(bundle_h200_late_migration, "h200-late-migration");
snap_bundle!(bundle_h200_launch_bound, "h200-launch-bound");
snap_bundle!(bundle_h200_fp32_gemm, "h200-fp32-gemm");
snap_bundle!(bundle_h200_sync_in_loop, "h200-sync-in-loop");
snap_bundle!(bundle_h200_probe, "h200-probe");

/// The profiler's slowdown is one figure: the header's timing line and the note under
/// the primary's saving state the same ratio (they once said 1.40× and 1.62×).
#[test]
fn the_profiler_slowdown_is_stated_once() {
    for rel in ["h200-resnet50", "h200-launch-bound", "h200-late-migration"] {
        let text = bundle_report(rel)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let ratio = |after: &str, end: char| -> String {
            let at = text
                .find(after)
                .unwrap_or_else(|| panic!("{rel}: no `{after}`"));
            let rest = &text[at + after.len()..];
            rest[..rest.find(end).expect("a ratio")].to_string()
        };
        let header = ratio("median: ", '×');
        let note = ratio("the profiler slowed the step ", '×');
        assert_eq!(header, note, "{rel}");
    }
}
