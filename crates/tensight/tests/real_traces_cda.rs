//! The CPU-residency (C), data-pipeline (D) and allocator (A) rules on real traces:
//! they fire where the recording script planted the problem, with the numbers the trace
//! shows, and nothing panics on any real trace.

use std::path::{Path, PathBuf};
use tensight::rules::Finding;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn findings(rel: &str) -> Vec<Finding> {
    let path = fixtures().join(rel);
    match tensight::analyze_path(&path) {
        Ok(r) => r.diagnosis.findings,
        Err(e) => panic!("{} did not load: {e}", path.display()),
    }
}

fn find<'a>(f: &'a [Finding], code: &str) -> &'a Finding {
    f.iter().find(|x| x.code == code).unwrap_or_else(|| {
        panic!(
            "{code} does not fire; got {:?}",
            f.iter().map(|x| x.code).collect::<Vec<_>>()
        )
    })
}

/// h200-probe: `x = torch.randn(32, 3, 32, 32).cuda()` every step.
#[test]
fn probe_late_migration_names_randn_and_its_line() {
    let f = findings("h200-probe/kineto_trace.json.gz");
    let c3 = find(&f, "C003");
    assert!(
        c3.title.contains("aten::randn") && c3.title.contains("[32, 3, 32, 32]"),
        "{}",
        c3.title
    );
    assert!(c3.message.contains("float32, 384.0 KiB"), "{}", c3.message);
    assert!(
        c3.fixes[0].contains("torch.randn(32, 3, 32, 32, device='cuda')"),
        "{:?}",
        c3.fixes
    );
    assert_eq!(
        c3.locations[0].source.as_deref(),
        Some("probe.py(10): step")
    );
    assert!(
        c3.evidence
            .iter()
            .any(|e| e.value.contains("98304 elements × 4 B = 393216 B")),
        "{:?}",
        c3.evidence
    );
    // randn runs 0.6–1.0 ms on the CPU per step; the copy ~0.2 ms.
    assert!(
        c3.saving_ms > 0.5 && c3.saving_ms < 1.5,
        "saving {}",
        c3.saving_ms
    );
}

/// h200-probe: the `.cuda()` copy is `Memcpy HtoD (Pageable -> Device)`, 393,216 bytes.
#[test]
fn probe_pageable_copy() {
    let f = findings("h200-probe/kineto_trace.json.gz");
    let d1 = find(&f, "D001");
    assert_eq!(d1.locations[0].op.as_deref(), Some("aten::to"));
    assert_eq!(
        d1.locations[0].source.as_deref(),
        Some("probe.py(10): step")
    );
    // memcpy call ~50 µs + sync ~13 µs per step, less ~15 µs for a pinned call.
    assert!(
        d1.saving_ms > 0.02 && d1.saving_ms < 0.1,
        "saving {}",
        d1.saving_ms
    );
    // Not a round trip, no DataLoader, no allocator calls, memory far from full.
    for code in ["C002", "D003", "A001", "A002"] {
        assert!(!f.iter().any(|x| x.code == code), "{code} fired");
    }
}

/// h200-cda: each planted problem, profiled before and after its fix (see
/// `tests/fixtures/h200-cda/recorded_by.py`). The rule fires on the `bad` trace with an
/// estimate within a factor of two of the step time the fix saved, measured without the
/// profiler (`results.json`), and is silent on the `fixed` trace.
#[test]
fn estimates_match_the_measured_fix() {
    let dir = fixtures().join("h200-cda");
    let text = std::fs::read_to_string(dir.join("results.json"))
        .unwrap_or_else(|e| panic!("h200-cda/results.json: {e}"));
    let results: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let plain = |k: &str| results[k]["plain_step_ms"].as_f64().unwrap_or(f64::NAN);
    for (scenario, code) in [
        ("late", "C003"),
        ("pageable", "D001"),
        ("overlap", "D002"),
        ("pingpong", "C002"),
        ("preproc", "C004"),
        ("loader", "D003"),
        ("churn", "A002"),
    ] {
        let bad = findings(&format!("h200-cda/{scenario}_bad.json.gz"));
        let est = find(&bad, code).saving_ms;
        let measured = plain(&format!("{scenario}_bad")) - plain(&format!("{scenario}_fixed"));
        assert!(
            est > 0.5 * measured && est < 2.0 * measured,
            "{scenario}: {code} estimates {est:.3} ms, the fix measured {measured:.3} ms"
        );
        let fixed = findings(&format!("h200-cda/{scenario}_fixed.json.gz"));
        assert!(
            !fixed.iter().any(|f| f.code == code),
            "{scenario}: {code} still fires after the fix"
        );
    }
    // Capacity: a risk, not a time cost.
    let a1 = findings("h200-cda/capacity_bad.json.gz");
    assert_eq!(find(&a1, "A001").saving_ms, 0.0);
    let ok = findings("h200-cda/capacity_fixed.json.gz");
    assert!(
        !ok.iter().any(|f| f.code == "A001"),
        "A001 fires at 50% of memory"
    );
}

/// Every real trace loads and every rule runs without panicking; savings are finite.
#[test]
fn no_panic_on_real_traces() {
    let dir = fixtures().join("real");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.map(|e| e.path()).unwrap_or_default();
        if !path.to_string_lossy().ends_with(".json.gz") {
            continue;
        }
        n += 1;
        if let Ok(r) = tensight::analyze_path(&path) {
            for f in &r.diagnosis.findings {
                assert!(
                    f.saving_ms.is_finite() && f.saving_ms >= 0.0,
                    "{} {}: {}",
                    path.display(),
                    f.code,
                    f.saving_ms
                );
            }
        }
    }
    assert!(n >= 10, "only {n} real traces found");
}
