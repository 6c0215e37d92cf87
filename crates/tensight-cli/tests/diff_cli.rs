//! `tensight diff` and `analyze --format perfetto` from the command line: help that
//! teaches, output files, and errors (exit 2, never a panic) for bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn tensight(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tensight"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn diff_help_has_examples() {
    let (code, out, _) = tensight(&[os("diff"), os("--help")]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("Examples:") && out.contains("tensight diff before after"),
        "{out}"
    );
    assert!(out.contains("--format") && out.contains("json"), "{out}");
    assert!(out.contains("--format html -o diff.html"), "{out}");
    assert!(out.contains("html: One self-contained HTML page"), "{out}");
}

/// `--format html` behaves as `analyze --format html`: to stdout without -o, to a file
/// with it, and an earlier page is replaced without --force.
#[test]
fn diff_as_html_to_stdout_and_to_a_file() {
    let before = fixture("bundles/h200-transposed-view-hw");
    let after = fixture("bundles/h200-transposed-view-fixed");
    let (code, out, err) = tensight(&[os("diff"), os(&before), os(&after), os("-f"), os("html")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("<!doctype html>"), "{out}");
    assert!(out.contains("<span class=\"stag st-resolved\">resolved</span>"));
    assert!(out.contains("class=\"plot bars steps\""));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("diff.html");
    let args = [
        os("diff"),
        os(&before),
        os(&after),
        os("--format"),
        os("html"),
        os("-o"),
        os(&file),
    ];
    let (code, out, err) = tensight(&args);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.is_empty() && err.contains("diff written to"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        out_of(&before, &after)
    );
    let (code, _, err) = tensight(&args);
    assert_eq!(code, Some(0), "an earlier page is replaced: {err}");
}

fn out_of(before: &Path, after: &Path) -> String {
    tensight(&[os("diff"), os(before), os(after), os("-f"), os("html")]).1
}

#[test]
fn diff_of_a_planted_and_fixed_pair_as_text_and_json() {
    let before = fixture("bundles/h200-transposed-view-hw");
    let after = fixture("bundles/h200-transposed-view-fixed");
    let (code, out, err) = tensight(&[os("diff"), os(&before), os(&after)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("TENSIGHT DIFF"), "{out}");
    assert!(out.contains("resolved  V001"), "{out}");
    assert!(out.lines().all(|l| l.chars().count() <= 80), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("diff.json");
    let args = [
        os("diff"),
        os(&before),
        os(&after),
        os("-f"),
        os("json"),
        os("-o"),
        os(&file),
    ];
    let (code, _, err) = tensight(&args);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["kind"], "diff");
    // An earlier diff is replaced without --force.
    let (code, _, err) = tensight(&args);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn diff_errors_say_which_side_and_exit_2() {
    let good = fixture("bundles/h200-transposed-view-hw");
    let (code, _, err) = tensight(&[os("diff"), os(&good), os("/nonexistent/after.json")]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("error: after run: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "not json at all").unwrap();
    let (code, _, err) = tensight(&[os("diff"), os(&junk), os(&good)]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("error: before run: "), "{err}");

    let (code, _, err) = tensight(&[os("diff"), os(&good)]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn perfetto_output_reads_back_and_is_replaced_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("annotated.json");
    let bundle = fixture("bundles/h200-sync-in-loop");
    let args = [
        os("analyze"),
        os(&bundle),
        os("--format"),
        os("perfetto"),
        os("-o"),
        os(&file),
    ];
    let (code, out, err) = tensight(&args);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.is_empty() && err.contains("ui.perfetto.dev"), "{err}");
    let (code, _, err) = tensight(&args);
    assert_eq!(
        code,
        Some(0),
        "an earlier annotated trace is replaced: {err}"
    );

    let (code, out, err) = tensight(&[os("analyze"), os(&file)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("S001"), "{out}");
    assert!(
        err.contains("annotated by `tensight analyze --format perfetto`"),
        "{err}"
    );

    // To stdout, piped into a reader that stops early: no error.
    let (code, out, _) = tensight(&[os("demo"), os("sync-in-loop"), os("-f"), os("perfetto")]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert!(v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["cat"] == "tensight"));

    let (code, _, err) = tensight(&[os("rules"), os("--format"), os("perfetto")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("invalid value 'perfetto'"), "{err}");
}
