//! `tensight analyze --forest`: the tensor forest as a tree, DOT and JSON.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn tensight(args: &[&str], path: &Path) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tensight"))
        .args(args)
        .arg(path)
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn forest_as_tree_dot_and_json() {
    let probe = fixture("bundles/h200-probe");
    let (code, out, err) = tensight(&["analyze", "--forest"], &probe);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("Tensor forest of "), "{out}");
    assert!(
        out.contains("└─ #21 f32[32,3,32,32] transposed [3072,1024,1,32]"),
        "{out}"
    );
    assert!(out.contains("aten::transpose at probe.py("), "{out}");
    assert!(
        out.lines().skip(1).all(|l| l.chars().count() <= 80),
        "{out}"
    );

    let (code, dot, err) = tensight(&["analyze", "--forest=dot"], &probe);
    assert_eq!(code, Some(0), "{err}");
    assert!(dot.starts_with("digraph tensor_forest {") && dot.ends_with("}\n"));
    assert_eq!(dot.matches('{').count(), dot.matches('}').count());

    let (code, json, err) = tensight(&["analyze", "--forest=json"], &probe);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    let nodes = v["nodes"].as_array().expect("nodes");
    assert_eq!(
        dot.lines()
            .filter(|l| l.contains("[label=") && !l.contains("->"))
            .count(),
        nodes.len()
    );

    // Without an execution trace there is no forest: a clear error.
    let (code, _, err) = tensight(
        &["analyze", "--forest"],
        &fixture("h200-probe/kineto_trace.json.gz"),
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("no execution trace"), "{err}");
}
