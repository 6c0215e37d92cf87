//! `tensight diff`: a planted workload's bundle against its fixed variant, both recorded
//! on an H200 (tests/fixtures/bundles/README.md): the planted finding is resolved and
//! the step is faster.

use serde_json::Value;
use tensight::compare::{compare, Comparison, Status};
use tensight::report::{diff, RenderOptions};

/// Relative to the crate (the tests' working folder), so the snapshot names no machine.
const BEFORE: &str = "../../tests/fixtures/bundles/h200-transposed-view-hw";
const AFTER: &str = "../../tests/fixtures/bundles/h200-transposed-view-fixed";

fn comparison() -> Comparison {
    let before = tensight::analyze_path(BEFORE.as_ref()).expect("before analyses");
    let after = tensight::analyze_path(AFTER.as_ref()).expect("after analyses");
    compare(&before, &after)
}

#[test]
fn the_planted_view_is_resolved_and_the_step_is_faster() {
    let c = comparison();
    let v001 = c
        .findings
        .iter()
        .find(|f| f.code == "V001")
        .expect("V001 on a side");
    assert_eq!(v001.status, Status::Resolved);
    assert!(v001.before.as_ref().is_some_and(|b| b.saving_ms > 0.1));
    assert!(c.step_time_ms.change < 0.0 && c.step_time_ms.ratio.unwrap() < 0.9);
    let u = c
        .unprofiled_step_time_ms
        .expect("both bundles timed their steps");
    assert!(u.after < u.before);
    // The transposed read's kernel is gone; the add runs vectorized instead.
    assert!(c.kernels[0].ms_per_step.after == 0.0 && c.kernels[0].ms_per_step.change < -0.3);
    assert_eq!(c.ops[0].name, "aten::add");
}

#[test]
fn text_diff_of_the_transposed_view_pair() {
    for width in [60, 80, 120] {
        let text = diff::render_text(
            &comparison(),
            RenderOptions {
                color: false,
                width,
            },
        );
        for line in text.lines() {
            assert!(line.chars().count() <= width, "over {width}: {line}");
        }
        if width == 80 {
            insta::assert_snapshot!(text);
        }
    }
}

#[test]
fn json_diff_has_its_schema_and_the_resolved_finding() {
    let text = diff::render_json(&comparison());
    let v: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(v["schema_version"], diff::SCHEMA_VERSION);
    assert_eq!(v["kind"], "diff");
    assert_eq!(v["before"]["input"], BEFORE);
    assert_eq!(v["after"]["input"], AFTER);
    for key in [
        "step_time_ms",
        "gpu_busy_ms_per_step",
        "gpu_busy_pct",
        "kernels_per_step",
    ] {
        let d = &v[key];
        let (b, a) = (d["before"].as_f64().unwrap(), d["after"].as_f64().unwrap());
        assert!(
            (d["change"].as_f64().unwrap() - (a - b)).abs() < 1e-9,
            "{key}"
        );
        assert!((d["ratio"].as_f64().unwrap() - a / b).abs() < 1e-9, "{key}");
    }
    let findings = v["findings"].as_array().unwrap();
    let v001 = findings.iter().find(|f| f["code"] == "V001").unwrap();
    assert_eq!(v001["status"], "resolved");
    assert!(v001["after"].is_null());
    assert!(v001["before"]["saving_ms"].as_f64().unwrap() > 0.1);
    assert!(v001["before"]["severity"].is_string());
    let k = &v["kernels"][0];
    assert!(k["name"].is_string() && k["ms_per_step"]["change"].as_f64().unwrap() < 0.0);
    assert!(k["count_per_step"]["before"].as_f64().unwrap() >= 1.0);
    assert!(v["ops"].as_array().is_some_and(|o| !o.is_empty()));
}

#[test]
fn a_run_against_itself_changes_nothing() {
    let r = tensight::analyze_path(BEFORE.as_ref()).unwrap();
    let c = compare(&r, &r);
    assert!(c.findings.iter().all(|f| f.status == Status::Unchanged));
    assert!(c.kernels.is_empty() && c.ops.is_empty());
    assert_eq!(c.step_time_ms.ratio, Some(1.0));
}
