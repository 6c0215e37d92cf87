//! `tensight run`, `tensight bench` and `analyze` on bundles, through the binary.
//! The Python collector is stood in for by small shell programs that write a bundle
//! into `$TENSIGHT_BUNDLE` the way the collector does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// The binary with a clean tensight environment, run in `cwd`.
fn tensight(cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tensight"));
    c.current_dir(cwd)
        .env_remove("TENSIGHT_BOOT_DIR")
        .env_remove("TENSIGHT_PYTHON")
        .env_remove("TENSIGHT_BUNDLE")
        .env("NO_COLOR", "1");
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn run(c: &mut Command) -> Output {
    c.output().expect("the binary runs")
}

#[test]
fn run_needs_the_python_package() {
    let tmp = tempfile::tempdir().expect("tmp");
    let o = run(tensight(tmp.path()).args(["run", "--", "python", "train.py"]));
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.starts_with("error: `tensight run` needs the Python package: pip install"),
        "{e}"
    );
    assert!(e.contains("\nhint: "), "{e}");
    assert!(
        !tmp.path().join("tensight-runs").exists(),
        "nothing created"
    );
    let o = run(tensight(tmp.path()).args(["bench", "--model", "resnet50"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("needs the Python package"));
}

#[test]
fn run_wants_a_command_after_the_dashes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let o = run(tensight(tmp.path()).arg("run"));
    assert_eq!(o.status.code(), Some(2));
    let o = run(tensight(tmp.path()).args(["run", "--steps", "0", "--", "true"]));
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn non_empty_out_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("mine");
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::write(out.join("keep.txt"), "precious").expect("write");
    let o = run(tensight(tmp.path())
        .env("TENSIGHT_BOOT_DIR", tmp.path())
        .args(["run", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", "touch \"$TENSIGHT_BUNDLE/ran\""]));
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("refusing to write the bundle into") && e.contains("the folder is not empty"),
        "{e}"
    );
    let names: Vec<_> = std::fs::read_dir(&out)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["keep.txt"], "never touched");
    assert_eq!(
        std::fs::read_to_string(out.join("keep.txt")).expect("read"),
        "precious"
    );
    // A file in the way is refused too.
    let o = run(tensight(tmp.path())
        .env("TENSIGHT_BOOT_DIR", tmp.path())
        .args(["run", "--out"])
        .arg(out.join("keep.txt"))
        .args(["--", "true"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("it is a file"));
}

#[cfg(unix)]
mod unix {
    use super::*;

    const MANIFEST: &str = r#"{"format": "tensight-bundle", "format_version": "1.0",
      "tensight_version": "0.1.0", "python_version": "3.12.3",
      "torch_version": "2.11.0+cu130", "cuda_version": "13.0",
      "device": {"name": "NVIDIA H200", "total_memory_bytes": 150109880320,
                 "capability": [9, 0], "multi_processor_count": 132},
      "command": ["python", "train.py"], "cwd": "/tmp", "step_detection": "optimizer",
      "warmup_steps": 2, "steps_requested": 7, "steps_recorded": 3, "options": {},
      "program": {"status": "crashed", "exit_code": 3, "error": "ValueError: boom"},
      "files": {"trace": "trace.json.gz", "execution_trace": "et.json.gz", "ncu": null},
      "timing": {"step_ms_unprofiled": [], "step_ms_profiled": []}}"#;

    /// A stand-in for the collector: writes the bundle, records its environment, exits 3.
    const FAKE: &str = r#"
        cp "$1" "$TENSIGHT_BUNDLE/trace.json.gz" &&
        cp "$2" "$TENSIGHT_BUNDLE/et.json.gz" &&
        cp "$3" "$TENSIGHT_BUNDLE/manifest.json" &&
        env | grep -E '^(TENSIGHT_|PYTHONPATH=)' | sort > "$TENSIGHT_BUNDLE/env.txt"
        echo "program output"
        exit 3"#;

    fn fake_program(tmp: &Path) -> Vec<String> {
        let manifest = tmp.join("manifest.src.json");
        std::fs::write(&manifest, MANIFEST).expect("write");
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "sh".into(),
            "-c".into(),
            FAKE.into(),
            "fake".into(),
            s(fixture("h200-probe/kineto_trace.json.gz")),
            s(fixture("h200-probe/execution_trace.json.gz")),
            s(manifest),
        ]
    }

    #[test]
    fn run_records_analyzes_and_passes_the_exit_code_on() {
        let tmp = tempfile::tempdir().expect("tmp");
        let boot = tmp.path().join("boot");
        std::fs::create_dir(&boot).expect("mkdir");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", &boot)
            .env("PYTHONPATH", "/old/path")
            .args(["run", "--steps", "7", "--warmup", "2", "--"])
            .args(fake_program(tmp.path())));
        let (out, err) = (stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(
            out.starts_with("program output\n"),
            "stdio inherited: {out}"
        );
        assert!(out.contains("GPU PERFORMANCE DIAGNOSIS REPORT"), "{out}");
        assert!(out.contains("status crashed: ValueError: boom"), "{out}");
        let dir = Path::new("tensight-runs/run-001");
        assert_eq!(
            err.lines().last(),
            Some(
                format!(
                    "tensight: bundle {} · report {}/report.txt · in a browser: {}/report.html",
                    dir.display(),
                    dir.display(),
                    dir.display()
                )
                .as_str()
            ),
            "{err}"
        );
        let bundle = tmp.path().join(dir);
        let txt = std::fs::read_to_string(bundle.join("report.txt")).expect("report.txt");
        assert!(txt.contains("GPU PERFORMANCE DIAGNOSIS REPORT") && !txt.contains('\x1b'));
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bundle.join("report.json")).expect("json"))
                .expect("valid json");
        assert_eq!(json["bundle"]["program"]["error"], "ValueError: boom");
        assert_eq!(json["execution_trace"]["linked"], 339);
        let html = std::fs::read_to_string(bundle.join("report.html")).expect("report.html");
        assert!(html.starts_with("<!doctype html>") && html.contains("ValueError: boom"));
        let env = std::fs::read_to_string(bundle.join("env.txt")).expect("env");
        let abs = bundle.canonicalize().expect("abs");
        let pp = std::env::join_paths([boot.as_path(), Path::new("/old/path")]).expect("join");
        for want in [
            format!("PYTHONPATH={}", pp.to_string_lossy()),
            format!("TENSIGHT_BOOT_DIR={}", boot.display()),
            format!("TENSIGHT_BUNDLE={}", abs.display()),
            "TENSIGHT_STEPS=7".into(),
            "TENSIGHT_WARMUP=2".into(),
            "TENSIGHT_STOP=0".into(),
        ] {
            assert!(env.lines().any(|l| l == want), "{want} in\n{env}");
        }
        // The next run takes the next number; --format json prints the JSON report.
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", &boot)
            .args(["run", "--format", "json", "--stop", "--"])
            .args(fake_program(tmp.path())));
        assert_eq!(o.status.code(), Some(3));
        let out = stdout(&o);
        let json_part = out.strip_prefix("program output\n").expect("program first");
        let v: serde_json::Value = serde_json::from_str(json_part).expect("json on stdout");
        assert_eq!(v["schema_version"], tensight::report::json::SCHEMA_VERSION);
        let env =
            std::fs::read_to_string(tmp.path().join("tensight-runs/run-002/env.txt")).expect("env");
        assert!(env.contains("TENSIGHT_STOP=1"), "{env}");
    }

    #[test]
    fn explicit_out_is_created_and_used() {
        let tmp = tempfile::tempdir().expect("tmp");
        let out = tmp.path().join("a/b");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .args(["run", "--out"])
            .arg(&out)
            .arg("--")
            .args(fake_program(tmp.path())));
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        assert!(out.join("report.txt").is_file());
        assert!(!tmp.path().join("tensight-runs").exists());
        // An existing empty folder is fine.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).expect("mkdir");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .args(["run", "--out"])
            .arg(&empty)
            .arg("--")
            .args(fake_program(tmp.path())));
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        assert!(empty.join("report.json").is_file());
    }

    /// A fake `ncu`: saves its argv, writes the recorded CSV to --log-file and the
    /// collector's range note (the program itself is not run).
    const FAKE_NCU: &str = r#"#!/bin/sh
[ "$1" = "--version" ] && { echo "Version 2099.1 (fake)"; exit 0; }
printf '%s\n' "$@" > "$TENSIGHT_BUNDLE/ncu_args.txt"
while [ "$1" != "--log-file" ]; do shift; done
gzip -dc "$FAKE_CSV" > "$2"
echo '{"range": "closed", "steps_seen": 4, "detection": "optimizer"}' > "$TENSIGHT_BUNDLE/ncu_range.json"
"#;

    #[test]
    fn hardware_pass_composes_ncu_and_records_it() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tmp");
        let ncu = tmp.path().join("ncu");
        std::fs::write(&ncu, FAKE_NCU).expect("write");
        std::fs::set_permissions(&ncu, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let out = tmp.path().join("b");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .env("TENSIGHT_NCU", &ncu)
            .env("FAKE_CSV", fixture("h200-probe/ncu_raw.csv.gz"))
            .args(["run", "--warmup", "2", "--hardware", "--out"])
            .arg(&out)
            .arg("--")
            .args(fake_program(tmp.path())));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(stdout(&o).contains("GPU PERFORMANCE DIAGNOSIS REPORT"));
        assert!(
            err.contains("hardware: recorded for step 3 (4 kernels"),
            "{err}"
        );
        let args = std::fs::read_to_string(out.join("ncu_args.txt")).expect("args");
        let args: Vec<&str> = args.lines().collect();
        for w in [
            ["--clock-control", "none"],
            ["--nvtx-include", "tensight_step"],
            ["--page", "raw"],
        ] {
            assert!(args.windows(2).any(|p| p == w), "{w:?} in {args:?}");
        }
        assert!(args.contains(&"--nvtx") && args.contains(&"--csv"));
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("manifest.json")).expect("m"))
                .expect("json");
        assert_eq!(m["files"]["ncu"], "ncu.csv.gz");
        assert_eq!(m["hardware"]["status"], "recorded");
        assert_eq!(m["hardware"]["step"], 3);
        assert_eq!(m["hardware"]["ncu_version"], "Version 2099.1 (fake)");
        assert!(out.join("ncu.csv.gz").is_file() && out.join("ncu.log").is_file());
        // No ncu: one note, the run still succeeds with its report.
        let out2 = tmp.path().join("c");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .env_remove("TENSIGHT_NCU")
            .env("PATH", "/usr/bin:/bin")
            .args(["run", "--hardware", "--hardware-step", "5", "--out"])
            .arg(&out2)
            .arg("--")
            .args(fake_program(tmp.path())));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert_eq!(
            err.matches(
                "hardware pass skipped: ncu not found (install Nsight Compute or set TENSIGHT_NCU)"
            )
            .count(),
            1,
            "{err}"
        );
        assert!(stdout(&o).contains("GPU PERFORMANCE DIAGNOSIS REPORT"));
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out2.join("manifest.json")).expect("m"))
                .expect("json");
        assert_eq!(m["hardware"]["status"], "skipped");
        assert_eq!(m["hardware"]["step"], 5);
        assert!(m["files"]["ncu"].is_null());
    }

    #[test]
    fn hardware_step_needs_hardware() {
        let tmp = tempfile::tempdir().expect("tmp");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .args(["run", "--hardware-step", "2", "--", "true"]));
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("--hardware"), "{}", stderr(&o));
    }

    #[test]
    fn nothing_recorded_says_why_and_keeps_the_programs_code() {
        let tmp = tempfile::tempdir().expect("tmp");
        let go = |script: &str| {
            run(tensight(tmp.path())
                .env("TENSIGHT_BOOT_DIR", tmp.path())
                .args(["run", "--", "sh", "-c", script]))
        };
        // A program that never imported torch: its own code, and a note.
        let o = go("exit 0");
        assert_eq!(o.status.code(), Some(0));
        let e = stderr(&o);
        assert!(
            e.starts_with(
                "tensight: nothing to profile: `sh -c 'exit 0'` ended without importing torch"
            ),
            "{e}"
        );
        assert!(e.contains("hint: ") && e.contains("imports torch"), "{e}");
        assert!(
            !tmp.path().join("tensight-runs/run-001").exists(),
            "an empty bundle folder is removed"
        );
        let o = go("exit 5");
        assert_eq!(o.status.code(), Some(5));
        assert!(stderr(&o).starts_with("error: nothing recorded: `sh -c 'exit 5'` exited with code 5 before tensight's collector wrote a manifest"));
        let o = go("kill -TERM $$");
        assert_eq!(o.status.code(), Some(128 + 15));
        assert!(stderr(&o).contains("was killed by signal 15"));
        // A manifest without a trace: the bundle's own reason.
        let o = go(
            r#"printf '%s' '{"format": "tensight-bundle", "format_version": "1.0", "warmup_steps": 3, "steps_requested": 5, "steps_recorded": 0, "step_detection": "optimizer", "program": {"status": "completed", "exit_code": 0, "error": null}, "files": {"trace": null}}' > "$TENSIGHT_BUNDLE/manifest.json""#,
        );
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(
            e.contains("before tensight recorded a step (3 warm-up + 5 recorded steps requested)"),
            "{e}"
        );
        assert!(e.trim_end().ends_with("(no report)"), "{e}");
    }

    #[test]
    fn unknown_program_is_an_error() {
        let tmp = tempfile::tempdir().expect("tmp");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .args(["run", "--", "/no/such/program"]));
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(
            e.starts_with("error: failed to start /no/such/program: no such file or directory"),
            "{e}"
        );
        assert!(std::fs::read_dir(tmp.path().join("tensight-runs"))
            .expect("ls")
            .next()
            .is_none());
    }

    #[test]
    fn bench_runs_the_builtin_module_with_stop() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tmp");
        let py = tmp.path().join("python");
        std::fs::write(
            &py,
            "#!/bin/sh\necho \"$@\" > \"$TENSIGHT_BUNDLE/args.txt\"\necho \"$TENSIGHT_STOP\" >> \"$TENSIGHT_BUNDLE/args.txt\"\n",
        )
        .expect("write");
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .env("TENSIGHT_PYTHON", &py)
            .args([
                "bench",
                "--model",
                "simple_cnn",
                "--batch-size",
                "8",
                "--steps",
                "2",
                "--warmup",
                "3",
                "--amp",
                "--device",
                "cpu",
                "--out",
                "b",
            ]));
        assert_eq!(o.status.code(), Some(0), "nothing recorded by the stand-in");
        let args = std::fs::read_to_string(tmp.path().join("b/args.txt")).expect("args");
        assert_eq!(
            args,
            "-m tensight.bench --model simple_cnn --batch-size 8 --steps 9 --amp --device cpu\n1\n"
        );
        let o = run(tensight(tmp.path())
            .env("TENSIGHT_BOOT_DIR", tmp.path())
            .env("TENSIGHT_PYTHON", &py)
            .args(["bench", "--model", "vgg"]));
        assert_eq!(o.status.code(), Some(2));
    }
}

#[test]
fn analyze_reads_bundles_and_explicit_execution_traces() {
    let tmp = tempfile::tempdir().expect("tmp");
    let o = run(tensight(tmp.path())
        .args(["analyze", "--format", "json"])
        .arg(fixture("bundles/h200-probe")));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["bundle"]["torch_version"], "2.11.0+cu130");
    assert_eq!(v["execution_trace"]["linked"], 339);

    let o = run(tensight(tmp.path())
        .args(["analyze", "--format", "json"])
        .arg(fixture("h200-probe/kineto_trace.json.gz"))
        .arg("--et")
        .arg(fixture("h200-probe/execution_trace.json.gz")));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(v["bundle"].is_null());
    assert_eq!(v["execution_trace"]["nodes"], 339);

    let o = run(tensight(tmp.path())
        .arg("analyze")
        .arg(fixture("h200-probe/kineto_trace.json.gz"))
        .arg("--et")
        .arg(fixture("h200-probe/kineto_trace.json.gz")));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is a Kineto trace (timeline), not an execution trace"));

    // The report never overwrites the bundle's trace.
    let o = run(tensight(tmp.path())
        .arg("analyze")
        .arg(fixture("bundles/h200-probe"))
        .arg("-o")
        .arg(fixture("bundles/h200-probe/trace.json.gz")));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("refusing to write the report over the input"));
}
