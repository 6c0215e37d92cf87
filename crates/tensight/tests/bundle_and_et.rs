//! Bundles (manifest + Kineto trace + execution trace) and execution-trace linking, on
//! real traces recorded on an H200 (schema 1.1.1-chakra.0.0.4) and an old-schema (1.0.1)
//! execution trace.

use std::path::{Path, PathBuf};
use tensight::model::{AliasKind, Profile};
use tensight::read;
use tensight::report::{json, terminal, RenderOptions};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

const MANIFEST: &str = r#"{
  "format": "tensight-bundle", "format_version": "1.0", "tensight_version": "0.1.0",
  "python_version": "3.12.3", "torch_version": "2.11.0+cu130", "cuda_version": "13.0",
  "device": {"name": "NVIDIA H200", "total_memory_bytes": 150109880320,
             "capability": [9, 0], "multi_processor_count": 132},
  "command": ["python", "train.py", "--lr", "0.1 x"], "cwd": "/work",
  "step_detection": "optimizer", "warmup_steps": 3, "steps_requested": 5,
  "steps_recorded": 3, "options": {"record_shapes": true}, "some_future_field": [1, 2],
  "program": {"status": "crashed", "exit_code": 1,
              "error": "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error: out of memory"},
  "files": {"trace": "trace.json.gz", "execution_trace": "et.json.gz", "ncu": null},
  "timing": {"step_ms_unprofiled": [5.0, 5.2, 5.1], "step_ms_profiled": [6.0, 6.4, 6.2]}
}"#;

/// A bundle in a temp dir: the h200-probe traces and `manifest`.
fn temp_bundle(manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        fixture("h200-probe/kineto_trace.json.gz"),
        dir.path().join("trace.json.gz"),
    )
    .expect("copy trace");
    std::fs::copy(
        fixture("h200-probe/execution_trace.json.gz"),
        dir.path().join("et.json.gz"),
    )
    .expect("copy et");
    std::fs::write(dir.path().join("manifest.json"), manifest).expect("write manifest");
    dir
}

fn text(r: &tensight::report::Report) -> String {
    terminal::render(
        r,
        RenderOptions {
            color: false,
            width: 120,
        },
    )
}

#[test]
fn committed_bundle_reads_with_its_execution_trace() {
    let dir = fixture("bundles/h200-probe");
    let loaded = read::load(&dir).expect("bundle loads");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let p = &loaded.profile;
    let b = p.bundle.as_ref().expect("bundle info");
    assert_eq!(b.torch_version.as_deref(), Some("2.11.0+cu130"));
    assert_eq!(b.cuda_version.as_deref(), Some("13.0"));
    assert_eq!(
        b.device.as_ref().map(|d| d.name.as_str()),
        Some("NVIDIA H200")
    );
    let et = p.execution_trace.as_ref().expect("execution trace");
    assert_eq!(et.schema, "1.1.1-chakra.0.0.4");
    // 342 nodes less the 3 `[pytorch|profiler|execution_trace|...]` roots; every one
    // matches a Kineto op.
    assert_eq!(et.nodes.len(), 339);
    assert_eq!(et.linked, 339);
    assert_eq!(p.counters.get("et_node_unlinked"), 0);
    assert_eq!(p.counters.get("et_node_name_mismatch"), 0);
    assert_eq!(
        read::resolve(&dir).expect("resolves"),
        dir.join("trace.json.gz")
    );
    // The manifest itself names the bundle too.
    assert!(read::load(&dir.join("manifest.json")).is_ok());
}

#[test]
fn transpose_is_a_view_on_the_same_storage() {
    let loaded = read::load(&fixture("bundles/h200-probe")).expect("bundle loads");
    let p: &Profile = &loaded.profile;
    let et = p.execution_trace.as_ref().expect("execution trace");
    let t = et
        .nodes
        .iter()
        .find(|n| {
            n.name.as_ref() == "aten::transpose"
                && n.outputs.first().map(|o| o.strides.as_slice()) == Some(&[3072, 1024, 1, 32])
        })
        .expect("the probe's x.transpose(2, 3)");
    let (i, o) = (&t.inputs[0], &t.outputs[0]);
    assert_ne!(i.tensor_id, o.tensor_id, "a view is a new tensor");
    assert_eq!(i.storage_id, o.storage_id, "on the same storage");
    assert_eq!(i.strides, [3072, 1024, 32, 1]);
    assert_eq!(o.shape, [32, 3, 32, 32]);
    assert_eq!((o.offset_elems, o.numel, o.itemsize), (0, 98304, 4));
    assert_eq!(o.device.as_ref(), "cuda:0");
    assert_eq!(o.dtype.as_ref(), "float");
    assert_eq!(o.is_contiguous(), Some(false));
    assert_eq!(i.is_contiguous(), Some(true));
    assert_eq!(t.alias, AliasKind::View);
    assert!(t.aliases());
    // Linked through the record function id to the Kineto op of that name, whose
    // recorded input shape agrees.
    let op_idx = t.op.expect("linked");
    let op = &p.ops[op_idx as usize];
    assert_eq!(op.name.as_ref(), "aten::transpose");
    assert_eq!(op.rf_id, t.rf_id);
    assert!(
        op.input_dims
            .as_deref()
            .is_some_and(|d| d.replace(' ', "").starts_with("[[32,3,32,32]")),
        "{:?}",
        op.input_dims
    );
    assert!(std::ptr::eq(et.node_of_op(op_idx).expect("lookup"), t));
}

#[test]
fn links_hit_ops_of_the_same_name_and_kinds_of_alias() {
    let loaded = read::load(&fixture("bundles/h200-probe")).expect("bundle loads");
    let p = &loaded.profile;
    let et = p.execution_trace.as_ref().expect("execution trace");
    for n in et.nodes.iter().filter(|n| n.op.is_some()) {
        let op = &p.ops[n.op.unwrap_or_default() as usize];
        assert_eq!(op.name, n.name);
        assert_eq!(op.rf_id, n.rf_id);
    }
    let kind = |name: &str| {
        et.nodes
            .iter()
            .find(|n| n.name.as_ref() == name)
            .map(|n| n.alias)
    };
    assert_eq!(kind("aten::mm"), Some(AliasKind::None));
    assert_eq!(kind("aten::add_"), Some(AliasKind::InPlace));
    assert_eq!(kind("aten::view"), Some(AliasKind::View));
    // Tensor lists are flattened: the optimizer's _foreach_add_ updates 4 parameters.
    let fe = et
        .nodes
        .iter()
        .find(|n| n.name.as_ref() == "aten::_foreach_add_")
        .expect("foreach");
    let listed: Vec<_> = fe.inputs.iter().filter(|t| t.arg == 0).collect();
    assert_eq!(listed.len(), 4);
    assert_eq!(listed[3].list_index, Some(3));
    assert_eq!(listed[0].alias, AliasKind::InPlace);
}

#[test]
fn report_shows_the_bundle() {
    let dir = temp_bundle(MANIFEST);
    let r = tensight::analyze_path(dir.path()).expect("analyzes");
    let t = text(&r);
    assert!(t.contains("run    python train.py --lr '0.1 x'"), "{t}");
    assert!(
        t.contains("crashed: RuntimeError: CUDA error: out of memory — the report covers what was recorded"),
        "{t}"
    );
    assert!(t.contains("3 of 5 requested steps after 3 warm-up"), "{t}");
    assert!(t.contains("optimizer.step() calls"), "{t}");
    assert!(
        t.contains("torch 2.11.0+cu130 · CUDA 13.0 · Python 3.12.3"),
        "{t}"
    );
    assert!(
        // the analysed steps' mean, as the savings were scaled with (the collector's host
        // clock median was 6.20 ms)
        t.contains("step 8.08 ms under the profiler, 5.10 ms without (the analysed steps' mean, the warm-up's median: 1.58×)"),
        "{t}"
    );
    let v = json::to_value(&r);
    assert_eq!(v["schema_version"], json::SCHEMA_VERSION);
    assert_eq!(v["bundle"]["program"]["status"], "crashed");
    assert_eq!(v["bundle"]["steps_recorded"], 3);
    assert_eq!(v["bundle"]["device"]["capability"][0], 9);
    assert_eq!(v["bundle"]["files"]["execution_trace"], "et.json.gz");
    assert_eq!(v["execution_trace"]["linked"], 339);
    // A bare trace has neither.
    let bare = tensight::analyze_path(&fixture("h200-probe/kineto_trace.json.gz")).expect("bare");
    let v = json::to_value(&bare);
    assert!(v["bundle"].is_null() && v["execution_trace"].is_null());
}

#[test]
fn unknown_major_version_is_refused() {
    let dir =
        temp_bundle(&MANIFEST.replace(r#""format_version": "1.0""#, r#""format_version": "2.3""#));
    let e = read::load(dir.path()).err().expect("refused");
    assert!(
        e.message.starts_with("failed to read bundle ")
            && e.message
                .contains("bundle format version 2.3 is newer than this tensight"),
        "{e}"
    );
    assert!(!e.message.contains('\n'));
    assert!(
        e.hint
            .as_deref()
            .is_some_and(|h| h.contains("upgrade tensight")),
        "{e}"
    );
    // A newer minor version reads.
    let dir =
        temp_bundle(&MANIFEST.replace(r#""format_version": "1.0""#, r#""format_version": "1.9""#));
    assert!(read::load(dir.path()).is_ok());
}

#[test]
fn missing_trace_file_is_a_clear_error() {
    let dir = temp_bundle(MANIFEST);
    std::fs::remove_file(dir.path().join("trace.json.gz")).expect("rm");
    let e = read::load(dir.path()).err().expect("error");
    assert!(
        e.message.ends_with("its trace trace.json.gz is missing"),
        "{e}"
    );
    assert!(
        e.hint
            .as_deref()
            .is_some_and(|h| h.contains("out of memory")),
        "{e}"
    );
    let e = read::resolve(dir.path()).expect_err("resolve errs too");
    assert!(e.message.contains("is missing"), "{e}");
}

#[test]
fn no_trace_recorded_says_why() {
    let m = MANIFEST
        .replace(r#""trace": "trace.json.gz""#, r#""trace": null"#)
        .replace(r#""status": "crashed""#, r#""status": "completed""#)
        .replace(r#""steps_recorded": 3"#, r#""steps_recorded": 0"#);
    let dir = temp_bundle(&m);
    std::fs::remove_file(dir.path().join("trace.json.gz")).expect("rm");
    let e = read::load(dir.path()).err().expect("error");
    assert!(
        e.message
            .contains("before tensight recorded a step (3 warm-up + 5 recorded steps requested)"),
        "{e}"
    );
}

#[test]
fn missing_execution_trace_is_a_warning() {
    let dir = temp_bundle(MANIFEST);
    std::fs::remove_file(dir.path().join("et.json.gz")).expect("rm");
    let loaded = read::load(dir.path()).expect("still loads");
    assert!(loaded.profile.execution_trace.is_none());
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.contains("et.json.gz is missing")),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn old_schema_execution_trace_reads_without_links() {
    let r = tensight::analyze_path_with_et(
        &fixture("real/execution_trace-benchmark_simple_add_trace.json.gz"),
        Some(&fixture(
            "real/execution_trace-benchmark_simple_add_et.json.gz",
        )),
    )
    .expect("old schema is not a failure");
    let et = r.profile.execution_trace.as_ref().expect("read");
    assert_eq!(et.schema, "1.0.1");
    assert_eq!(et.nodes.len(), 36);
    assert_eq!(et.linked, 0);
    assert_eq!(r.profile.counters.get("et_node_unlinked"), 36);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("no Record function ids")),
        "{:?}",
        r.warnings
    );
    let rand = et
        .nodes
        .iter()
        .find(|n| n.name.as_ref() == "aten::uniform_")
        .expect("uniform_");
    assert_eq!(rand.outputs[0].shape, [256, 256]);
    assert!(rand.outputs[0].strides.is_empty());
    assert_eq!(rand.alias, AliasKind::InPlace);
}

#[test]
fn explicit_et_must_be_an_execution_trace() {
    let k = fixture("h200-probe/kineto_trace.json.gz");
    let e = tensight::analyze_path_with_et(&k, Some(&k))
        .err()
        .expect("refused");
    assert!(e.message.contains("is a Kineto trace"), "{e}");
    let e = tensight::analyze_path_with_et(&k, Some(Path::new("/no/such/et.json")))
        .err()
        .expect("missing");
    assert!(e.message.contains("no such file"), "{e}");
    let r =
        tensight::analyze_path_with_et(&k, Some(&fixture("h200-probe/execution_trace.json.gz")))
            .expect("links");
    assert_eq!(r.profile.execution_trace.map(|e| e.linked), Some(339));
}

#[test]
fn a_manifest_cannot_make_tensight_read_outside_the_bundle() {
    // The trace: refused with an error that names the path (escaped), never its content.
    for name in [
        "/etc/passwd",
        "../trace.json.gz",
        "a/../../x",
        "/\u{1b}]0;pwned\u{7}",
    ] {
        let quoted = serde_json::to_string(name).expect("a JSON string");
        let m = MANIFEST.replace(
            r#""trace": "trace.json.gz""#,
            &format!("\"trace\": {quoted}"),
        );
        let dir = temp_bundle(&m);
        let e = read::load(dir.path()).err().expect("refused");
        assert!(e.message.contains("outside the bundle"), "{name}: {e}");
        assert!(
            !e.message.contains('\u{1b}') && !e.message.contains("root:"),
            "{e}"
        );
    }
    // A symlink inside the bundle that leads out of it.
    let outside = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        fixture("h200-probe/kineto_trace.json.gz"),
        outside.path().join("t.json.gz"),
    )
    .expect("copy");
    let m = MANIFEST.replace(r#""trace": "trace.json.gz""#, r#""trace": "link.json.gz""#);
    let dir = temp_bundle(&m);
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(
            outside.path().join("t.json.gz"),
            dir.path().join("link.json.gz"),
        )
        .expect("symlink");
        let e = read::load(dir.path()).err().expect("refused");
        assert!(e.message.contains("outside the bundle"), "{e}");
    }
    // Another file outside: not read, said so, the rest of the bundle still reports.
    let m = MANIFEST.replace(
        r#""execution_trace": "et.json.gz""#,
        r#""execution_trace": "/etc/hosts""#,
    );
    let loaded = read::load(temp_bundle(&m).path()).expect("the trace still loads");
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.contains("outside the bundle") && w.contains("not read")),
        "{:?}",
        loaded.warnings
    );
    assert!(loaded.profile.execution_trace.is_none());
}

/// W001 on real H200 bundles (hold-out set F): a ViT linear probe whose backbone keeps
/// `requires_grad` while the optimizer holds only the head, and a control that trains
/// every parameter.
#[test]
fn gradients_nothing_reads_are_found_through_the_execution_trace() {
    let probe = tensight::analyze_path(&fixture("holdout_f/vit_linear_probe/run1")).unwrap();
    let f = probe
        .diagnosis
        .findings
        .iter()
        .find(|f| f.code == "W001")
        .expect("W001 on the linear probe");
    assert!(
        f.message.starts_with("150 of the 152 parameters"),
        "{}",
        f.message
    );
    // The planted fix (requires_grad_(False) on the backbone) saved 32.2 ms per step on
    // the H200; the backward after the head's gradients is most of it.
    assert!(
        f.saving_ms > 25.0 && f.saving_ms < 36.0,
        "saving {}",
        f.saving_ms
    );
    let control = tensight::analyze_path(&fixture("holdout_f/mae_control/run1")).unwrap();
    assert!(control.diagnosis.findings.iter().all(|f| f.code != "W001"));
}
