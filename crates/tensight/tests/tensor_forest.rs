//! The tensor forest and its modelled traffic on every real execution trace we have:
//! the H200 bundles, the h200-probe traces and the old-schema (1.0.1) simple_add trace.

use std::path::{Path, PathBuf};
use tensight::analysis::forest::{Forest, Layout, Relation};
use tensight::report::{self, Report};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

const BUNDLES: [&str; 6] = [
    "bundles/h200-resnet50",
    "bundles/h200-late-migration",
    "bundles/h200-launch-bound",
    "bundles/h200-fp32-gemm",
    "bundles/h200-sync-in-loop",
    "bundles/h200-probe",
];

fn bundle(rel: &str) -> Report {
    tensight::analyze_path(&fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn with_et(trace: &str, et: &str) -> Report {
    tensight::analyze_path_with_et(&fixture(trace), Some(&fixture(et)))
        .unwrap_or_else(|e| panic!("{trace}: {e}"))
}

/// The accuracy suite's workload bundles (tests/fixtures/workloads), recorded on the H200.
const WORKLOADS: [&str; 18] = [
    "sync_in_loop",
    "late_migration",
    "fp32_gemm",
    "launch_bound",
    "pageable_h2d",
    "cpu_preprocessing",
    "device_ping_pong",
    "dataloader_starvation",
    "small_grid",
    "misaligned_bf16",
    "unfused_chain",
    "transposed_view",
    "contiguous_churn",
    "transposed_chain",
    "allocator_churn",
    "control_bf16_gemm",
    "control_resnet50",
    "real_gpt",
];

/// Every real trace with an execution trace, by name.
fn all() -> Vec<(String, Report)> {
    let mut v: Vec<(String, Report)> = BUNDLES.iter().map(|b| (b.to_string(), bundle(b))).collect();
    for w in WORKLOADS {
        let rel = format!("workloads/{w}");
        v.push((rel.clone(), bundle(&rel)));
    }
    v.push((
        "h200-probe (files)".into(),
        with_et(
            "h200-probe/kineto_trace.json.gz",
            "h200-probe/execution_trace.json.gz",
        ),
    ));
    v.push((
        "simple_add (schema 1.0.1)".into(),
        with_et(
            "real/execution_trace-benchmark_simple_add_trace.json.gz",
            "real/execution_trace-benchmark_simple_add_et.json.gz",
        ),
    ));
    v
}

/// The report's TENSORS section, as text at 80 columns.
fn tensors_section(r: &Report) -> String {
    let text = report::terminal::render(
        r,
        report::RenderOptions {
            color: false,
            width: 80,
        },
    );
    text.split("\nTENSORS\n")
        .nth(1)
        .expect("a TENSORS section")
        .to_string()
}

fn forest(r: &Report) -> &Forest {
    r.metrics.tensors.as_ref().expect("a tensor forest")
}

#[test]
fn invariants_hold_on_every_real_execution_trace() {
    for (name, r) in all() {
        let f = forest(&r);
        let et = r.profile.execution_trace.as_ref().expect("et");
        assert!(!f.nodes.is_empty(), "{name}: empty forest");
        let bad = f.check();
        assert!(
            bad.is_empty(),
            "{name}: {} violations: {:?}",
            bad.len(),
            &bad[..bad.len().min(10)]
        );
        // Every tensor argument of the trace is a node of the forest.
        let mut ids: Vec<u64> = et
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().chain(&n.outputs))
            .map(|t| t.tensor_id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            assert!(
                f.nodes.iter().any(|t| t.tensor_id == id),
                "{name}: tensor {id} missing"
            );
        }
        // A view's creating op, when recorded, names it among its outputs' storage.
        for t in &f.nodes {
            if t.relation == Relation::View {
                let c = t.created_by.as_ref().expect("a view has a creating op");
                assert!(!c.name.is_empty(), "{name}");
            }
            assert_eq!(t.root, f.nodes[t.root as usize].root, "{name}");
        }
        // Attribution: never more time than the GPU ran.
        let gpu_ns: i64 = r.profile.gpu.iter().map(|g| g.dur_ns).sum();
        assert!(f.attribution.attributed_ns <= gpu_ns, "{name}");
        let per_tensor: f64 = f.nodes.iter().map(|t| t.traffic.time_ns).sum();
        assert!(
            (per_tensor - f.attribution.attributed_ns as f64).abs() <= 1.0 + 1e-6 * per_tensor,
            "{name}: {per_tensor} vs {}",
            f.attribution.attributed_ns
        );
        let roots: u64 = f
            .roots
            .iter()
            .map(|&i| f.nodes[i as usize].subtree.bytes)
            .sum();
        assert_eq!(roots, f.attribution.bytes, "{name}: roll-up loses bytes");
    }
}

#[test]
fn probe_transposed_view_of_the_cuda_copy() {
    for r in [
        bundle("bundles/h200-probe"),
        with_et(
            "h200-probe/kineto_trace.json.gz",
            "h200-probe/execution_trace.json.gz",
        ),
    ] {
        let f = forest(&r);
        let views: Vec<_> = f
            .nodes
            .iter()
            .filter(|t| t.shape == [32, 3, 32, 32] && t.strides == [3072, 1024, 1, 32])
            .collect();
        assert_eq!(views.len(), 3, "one transposed input per step");
        for v in views {
            assert_eq!(v.layout, Layout::Transposed);
            assert_eq!(v.relation, Relation::View);
            let c = v.created_by.as_ref().expect("creator");
            assert_eq!(&*c.name, "aten::transpose");
            let src = c.source.as_deref().expect("source line");
            assert!(src.starts_with("probe.py("), "{src}");
            let parent = &f.nodes[v.parent.expect("parent") as usize];
            assert!(parent.parent.is_none(), "the copy is a base tensor");
            assert_eq!(parent.storage_id, v.storage_id);
            assert_eq!(parent.layout, Layout::Contiguous);
            assert_eq!(&*parent.device, "cuda:0");
            let pc = parent.created_by.as_ref().expect("the copy's op");
            assert!(
                pc.name.contains("to") || pc.name.contains("copy"),
                "{}",
                pc.name
            );
            // Read by the .contiguous() copies: 8× the sectors of a dense read.
            assert!(v.traffic.accesses > 0);
            assert!(v.traffic.wasted_bytes > 0);
        }
        // Storage 12 is reused each step: three bases, not one.
        let on12 = f
            .roots
            .iter()
            .filter(|&&i| {
                f.nodes[i as usize].storage_id
                    == f.nodes[f
                        .nodes
                        .iter()
                        .position(|t| t.strides == [3072, 1024, 1, 32])
                        .unwrap_or(0)]
                    .storage_id
            })
            .count();
        assert_eq!(on12, 3);
        assert!(f.storage_splits >= 2);
    }
}

#[test]
fn dot_output_is_well_formed() {
    for (name, r) in all() {
        let f = forest(&r);
        let dot = report::forest::dot(f);
        assert!(dot.starts_with("digraph tensor_forest {"), "{name}");
        assert!(dot.ends_with("}\n"), "{name}");
        // Braces balance outside quoted labels; quotes pair up.
        let (mut depth, mut in_str, mut esc) = (0i64, false, false);
        for ch in dot.chars() {
            if in_str {
                match (esc, ch) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match ch {
                '"' => in_str = true,
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "{name}");
        }
        assert_eq!(depth, 0, "{name}");
        assert!(!in_str, "{name}");
        let nodes = dot
            .lines()
            .filter(|l| l.contains("[label=") && !l.contains("->"))
            .count();
        assert_eq!(nodes, f.nodes.len(), "{name}: one node per tensor");
        let edges = dot.lines().filter(|l| l.contains(" -> ")).count();
        assert_eq!(edges, f.views(), "{name}: one edge per view");
    }
}

#[test]
fn reports_show_the_tensors_section() {
    let r = bundle("bundles/h200-resnet50");
    let section = tensors_section(&r);
    assert!(section.contains("modelled from shapes"));
    assert!(section.contains("No hardware pass"));
    assert!(section.contains("ProfilerStep#5"));
    for line in section.lines() {
        assert!(line.chars().count() <= 80, "too wide: {line}");
    }
    let v = report::json::to_value(&r);
    assert_eq!(v["schema_version"], report::json::SCHEMA_VERSION);
    let t = &v["tensors"];
    assert_eq!(t["modelled"], true);
    assert!(t["by_traffic"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(t["base_tensors"].as_u64().unwrap_or(0) > 0);
    // Deterministic.
    let again = report::json::to_value(&bundle("bundles/h200-resnet50"));
    assert_eq!(v["tensors"], again["tensors"]);
    // A bare trace has none.
    let bare = tensight::analyze_path(&fixture("h200-probe/kineto_trace.json.gz")).expect("probe");
    assert!(bare.metrics.tensors.is_none());
    assert!(report::json::to_value(&bare)["tensors"].is_null());
}

#[test]
fn hardware_pass_measures_the_transposed_views_traffic() {
    // `a + b.t()`: the output follows a, so b.t() is walked across its strides; the
    // hardware pass measured 18 load sectors per request against 4, so the view's share
    // of the add kernel's sectors is 1/8 useful.
    let r = bundle("workloads/transposed_view");
    let f = forest(&r);
    let a = &f.attribution;
    assert!(
        a.measured_kernels > 0 && a.measured_kernels <= a.kernels,
        "{a:?}"
    );
    let view = f
        .nodes
        .iter()
        .find(|n| n.layout == Layout::Transposed && n.traffic.accesses > 0)
        .expect("the transposed view");
    let eff = view.traffic.efficiency().expect("measured");
    assert!((eff - 0.125).abs() < 0.01, "efficiency {eff}");
    assert!(view.traffic.measured_excess_bytes > 1.5 * (1u64 << 30) as f64);
    // Its dense partner and the result were read and written at full efficiency.
    for n in f.nodes.iter().filter(|n| {
        n.layout == Layout::Contiguous && n.traffic.measured_accesses > 0 && n.numel == view.numel
    }) {
        assert!(
            n.traffic.efficiency().unwrap_or(0.0) > 0.99,
            "#{}",
            n.tensor_id
        );
    }
}

#[test]
fn mixed_layout_ops_charge_the_operand_walked_across_its_strides() {
    // `ht * a + b`, `relu(.) - c` with ht = h.t(): each result takes ht's layout, so a, b
    // and c (contiguous) are the ones read across strides, not ht. The hardware pass
    // (with the stall-share metrics) agrees: ~12% efficient, mostly waiting on memory.
    let r = bundle("workloads/transposed_chain");
    let f = forest(&r);
    let ht = f
        .nodes
        .iter()
        .find(|n| {
            n.layout == Layout::Transposed
                && n.relation == Relation::View
                && n.created_by.as_ref().is_some_and(|c| &*c.name == "aten::t")
        })
        .expect("ht");
    assert_eq!(ht.traffic.wasted_bytes, 0, "ht itself is walked densely");
    let strided: Vec<_> = f
        .roots
        .iter()
        .map(|&i| &f.nodes[i as usize])
        .filter(|n| n.layout == Layout::Contiguous && n.traffic.wasted_bytes > 0)
        .collect();
    assert!(strided.len() >= 3, "a, b and c");
    for n in &strided {
        let eff = n.traffic.efficiency().expect("measured");
        assert!(eff < 0.2, "#{} efficiency {eff}", n.tensor_id);
        let share = n
            .traffic
            .long_scoreboard_share()
            .expect("stall share collected");
        assert!(
            share > 0.5 && share <= 1.0,
            "#{} share {share}",
            n.tensor_id
        );
    }
}

#[test]
fn tensors_section_says_what_was_measured() {
    let r = bundle("workloads/transposed_chain");
    let section = tensors_section(&r);
    assert!(
        section.contains("Measured by the hardware pass for"),
        "{section}"
    );
    assert!(section.contains("% efficient"), "{section}");
    assert!(
        section.contains("of warp cycles waiting on memory"),
        "{section}"
    );
    let v = report::json::to_value(&r);
    let t = &v["tensors"];
    assert_eq!(t["modelled"], false);
    assert!(t["measured_kernels"].as_u64().unwrap_or(0) > 0);
    let first = &t["by_wasted"][0]["subtree"];
    assert!(
        first["efficiency"].as_f64().is_some_and(|e| e < 0.5),
        "{first}"
    );
}

#[test]
fn wasted_traffic_lists_only_trees_that_waste_a_real_share() {
    // ResNet-50 with its hardware pass: contiguous tensors, a few MiB of partial sectors.
    let r = tensight::analyze_path_with(
        &fixture("bundles/h200-resnet50"),
        None,
        Some(&fixture(
            "bundles/h200-resnet50-hardware-repeats/ncu.csv.gz",
        )),
    )
    .expect("resnet with ncu");
    let section = tensors_section(&r);
    assert!(
        section.contains("By wasted traffic: none over 5% of a tree's traffic (the most:"),
        "{section}"
    );
    // The transposed view wastes most of what it moves: listed, with its tree.
    let section = tensors_section(&bundle("bundles/h200-transposed-view-hw"));
    let waste = section
        .split("By wasted traffic:\n")
        .nth(1)
        .expect("a wasted-traffic list");
    assert!(waste.contains("transposed [1,8192]"), "{waste}");
}

/// V001 without a hardware pass, on a program of hold-out set A (recorded on the H200):
/// `movie_dff_scan` keeps a movie as (H, W, T) and reads each frame `movie.select(2, t)`
/// across a stride of T. The forest's model names the views, the line that made them and
/// a saving near the measured one (51.38 → 5.26 ms per call once frame-major, 46.12 ms);
/// on the dense ResNet-50 bundle nothing fires.
#[test]
fn v001_without_hardware_names_the_strided_frames_from_the_model() {
    let r = bundle("holdout/movie_dff_scan/run1");
    let f = r
        .diagnosis
        .findings
        .iter()
        .find(|f| f.code == "V001")
        .expect("V001 from the modelled traffic");
    let measured = 51.384 - 5.263;
    assert!(
        (f.saving_ms - measured).abs() <= 0.35 * measured,
        "saving {} against {measured}",
        f.saving_ms
    );
    assert!(f.message.contains("movie_dff_scan.py"), "{}", f.message);
    assert!(f.estimate.contains("modelled"), "{}", f.estimate);
    assert!(!r.diagnosis.skipped.iter().any(|s| s.code == "V001"));
    let dense = bundle("bundles/h200-resnet50");
    assert!(!dense.diagnosis.findings.iter().any(|f| f.code == "V001"));
}
