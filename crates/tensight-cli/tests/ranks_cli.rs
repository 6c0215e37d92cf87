//! `tensight analyze DIR` over many ranks, `summarize` and `merge` through the binary:
//! the merged summaries give the same cross-rank findings as the folder, text fits
//! `--width`, the P rules are documented, and bad input exits 2 with one clear line.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn tensight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensight"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS")
        .output()
        .expect("the binary runs")
}

fn ok(args: &[&str]) -> String {
    let o = tensight(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ranks_dir(n: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (r, t) in tensight::rank_sets::synthetic(n, 3, 1, 3_000.0)
        .iter()
        .enumerate()
    {
        std::fs::write(dir.path().join(format!("rank-{r}.json")), t).expect("write");
    }
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn merge_of_summaries_equals_analyze_of_the_folder() {
    let dir = ranks_dir(4);
    let direct: Value =
        serde_json::from_str(&ok(&["analyze", s(dir.path()), "--format", "json"])).expect("json");
    let out = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    for r in 0..4 {
        // Two as Parquet, two as JSON: merge reads both.
        let ext = if r < 2 { "parquet" } else { "json" };
        let f = out.path().join(format!("rank{r}.{ext}"));
        let trace = dir.path().join(format!("rank-{r}.json"));
        ok(&["summarize", s(&trace), "-o", s(&f)]);
        files.push(f);
    }
    // A summary may be rewritten in place without --force.
    ok(&[
        "summarize",
        s(&dir.path().join("rank-0.json")),
        "-o",
        s(&files[0]),
    ]);
    let mut args = vec!["merge", "--format", "json"];
    args.extend(files.iter().map(|f| s(f)));
    let merged: Value = serde_json::from_str(&ok(&args)).expect("json");
    assert_eq!(merged["diagnosis"], direct["diagnosis"]);
    assert_eq!(
        merged["ranks"]["collectives"],
        direct["ranks"]["collectives"]
    );
    assert_eq!(merged["ranks"]["slowest_rank"], 1);
    assert_eq!(
        direct["ranks"]["per_rank"].as_array().map(Vec::len),
        Some(4)
    );
    let codes: Vec<&str> = direct["diagnosis"]["bottlenecks"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"P001"), "{codes:?}");
}

#[test]
fn the_ranks_report_fits_the_width() {
    let dir = ranks_dir(3);
    for w in ["60", "80", "120"] {
        let text = ok(&["analyze", s(dir.path()), "--width", w]);
        assert!(text.contains("RANKS"), "{text}");
        let w: usize = w.parse().expect("number");
        for l in text.lines() {
            assert!(l.chars().count() <= w, "{w}: {l}");
        }
    }
    let html = ok(&["analyze", s(dir.path()), "--format", "html"]);
    assert!(html.contains("<section id=\"ranks\">"));
}

#[test]
fn the_cross_rank_rules_are_listed_and_documented() {
    let list = ok(&["rules"]);
    for code in ["P001", "P002", "P003", "P004"] {
        assert!(list.contains(code), "{code} not listed");
    }
    let doc = ok(&["rules", "straggler-rank"]);
    assert!(doc.starts_with("# P001 straggler-rank"), "{doc}");
}

#[test]
fn duplicate_ranks_exit_2_with_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = tensight::rank_sets::synthetic(2, 2, 1, 1_000.0);
    std::fs::write(dir.path().join("a.json"), &t[0]).expect("write");
    std::fs::write(dir.path().join("b.json"), &t[0]).expect("write");
    let o = tensight(&["analyze", s(dir.path())]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("error: failed to read"), "{err}");
    assert!(err.contains("rank 0 twice"), "{err}");
    let o = tensight(&["merge", s(&dir.path().join("a.json"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a tensight summary"));
}
