//! Every line of the text outputs fits `--width` (and the default width, 80 when stdout
//! is not a terminal and COLUMNS is unset): `rules`, one rule's doc, the demo with its
//! closing lines, `analyze` and `diff`. Characters are counted, not bytes, so the
//! box-drawing rules and arrows count one each.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// stdout of `tensight ARGS` (exit 0), with `COLUMNS` set to `columns` or removed.
fn stdout(args: &[&std::ffi::OsStr], columns: Option<&str>) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tensight"));
    c.args(args).env("NO_COLOR", "1");
    match columns {
        Some(v) => c.env("COLUMNS", v),
        None => c.env_remove("COLUMNS"),
    };
    let o = c.output().expect("the binary runs");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

fn assert_fits(what: &str, out: &str, width: usize) {
    assert!(out.lines().count() > 3, "{what}: {out}");
    for l in out.lines() {
        let n = l.chars().count();
        assert!(n <= width, "{what}: a line of {n} > {width}:\n{l}\n\n{out}");
    }
}

#[test]
fn rules_list_and_doc_fit_the_width() {
    let out = stdout(&[os("rules")], None);
    assert_fits("rules", &out, 80);
    // Each rule's description is a whole sentence, never cut.
    assert!(!out.contains('…'), "{out}");
    assert!(out.contains("S001"), "{out}");
    for w in ["60", "100", "120"] {
        let out = stdout(&[os("rules"), os("--width"), os(w)], None);
        assert_fits(&format!("rules --width {w}"), &out, w.parse().unwrap());
    }
    let out = stdout(&[os("rules"), os("L001")], None);
    assert_fits("rules L001", &out, 80);
    assert!(out.starts_with("# L001"), "{out}");
    let out = stdout(&[os("rules"), os("S001"), os("--width"), os("60")], None);
    assert_fits("rules S001 --width 60", &out, 60);
    // A code block is left as written.
    assert!(out.contains("for x, y in loader:\n"), "{out}");
    // COLUMNS wins when it is a number.
    let out = stdout(&[os("rules")], Some("100"));
    assert_fits("COLUMNS=100 rules", &out, 100);
    assert!(out.lines().any(|l| l.chars().count() > 80), "{out}");
}

#[test]
fn demo_fits_the_width_and_ends_with_what_to_run() {
    for (args, w) in [
        (vec![os("demo")], 80),
        (vec![os("demo"), os("--width"), os("60")], 60),
        (vec![os("demo"), os("--width"), os("120")], 120),
    ] {
        let out = stdout(&args, None);
        assert_fits(&format!("{args:?}"), &out, w);
        assert!(out.contains("OTHER DEMOS"), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" ");
        assert!(
            tail.contains("tensight run -- python train.py")
                && tail.contains("tensight analyze TRACE"),
            "{tail}"
        );
    }
    let out = stdout(&[os("demo"), os("sync-in-loop")], Some("70"));
    assert_fits("COLUMNS=70 demo sync-in-loop", &out, 70);
    assert!(out.contains("Your own program:"), "{out}");
}

#[test]
fn analyze_and_diff_fit_the_width() {
    let trace = fixture("h200-probe/kineto_trace.json.gz");
    let out = stdout(&[os("analyze"), os(&trace), os("--width"), os("100")], None);
    assert_fits("analyze --width 100", &out, 100);
    let before = fixture("bundles/h200-transposed-view-hw");
    let after = fixture("bundles/h200-transposed-view-fixed");
    let out = stdout(
        &[os("diff"), os(&before), os(&after), os("--width"), os("70")],
        None,
    );
    assert_fits("diff --width 70", &out, 70);
}

#[test]
fn every_width_help_says_its_default() {
    for cmd in ["analyze", "run", "demo", "diff", "rules"] {
        let out = stdout(&[os(cmd), os("--help")], Some("100"));
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("--width <N>")
                && flat.contains("$COLUMNS when it is a number, else the terminal's width"),
            "{cmd}: {out}"
        );
    }
}
