//! Hostile input through the binary (issue #14): terminal injection in the report, the
//! forest and stderr; decompression bombs and special files; `-o` never overwriting an
//! input or a file that is not a report. Each test failed before its fix.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// The binary under test; `TENSIGHT_TEST_BIN` runs these tests against another build
/// (that is how each was checked to fail on the code before its fix).
fn tensight(cwd: &Path) -> Command {
    let bin = std::env::var_os("TENSIGHT_TEST_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tensight").into());
    let mut c = Command::new(bin);
    c.current_dir(cwd)
        .env_remove("TENSIGHT_MAX_INFLATED")
        .env_remove("TENSIGHT_MAX_RATIO")
        .env("NO_COLOR", "1");
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

fn gunzip(path: &Path) -> String {
    let mut s = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).expect("fixture"))
        .read_to_string(&mut s)
        .expect("fixture inflates");
    s
}

/// Control characters other than the line feed, and the bidi override, in `s`.
fn raw_controls(s: &str) -> Vec<char> {
    s.chars()
        .filter(|&c| (c.is_control() && c != '\n') || c == '\u{202e}')
        .collect()
}

/// A name that tries everything: clear the screen, retitle the window, ring, return to
/// column 0, forge a line, reverse the text.
const EVIL: &str = r#"evil\u001b[2J\u001b]0;pwned\u0007\r\nFORGED LINE\u202ekcatta\u009b31m"#;

fn evil_trace() -> String {
    format!(
        r#"{{"traceEvents": [
        {{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {{"name": "{EVIL}"}}}},
        {{"ph": "X", "cat": "python_function", "name": "train.py(1): {EVIL}", "pid": 1, "tid": 1, "ts": 1, "dur": 100}},
        {{"ph": "X", "cat": "cpu_op", "name": "aten::{EVIL}", "pid": 1, "tid": 1, "ts": 2, "dur": 90, "args": {{"External id": 1}}}},
        {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3, "dur": 80, "args": {{"correlation": 1, "External id": 1}}}},
        {{"ph": "X", "cat": "kernel", "name": "kernel_{EVIL}", "pid": 0, "tid": 7, "ts": 90, "dur": 3, "args": {{"device": 0, "stream": 7, "correlation": 1, "External id": 1, "grid": [1, 1, 1], "block": [32, 1, 1]}}}}
    ]}}"#
    )
}

#[test]
fn names_cannot_drive_the_terminal_in_the_report_or_a_file() {
    let tmp = tempfile::tempdir().expect("tmp");
    let trace = tmp.path().join("evil.json");
    std::fs::write(&trace, evil_trace()).expect("write");
    for color in ["never", "always"] {
        let o = run(tensight(tmp.path())
            .args(["analyze", "--color", color])
            .arg(&trace));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("evil"), "{out}");
        let bad: Vec<char> = raw_controls(&out)
            .into_iter()
            .filter(|&c| !(color == "always" && c == '\u{1b}'))
            .collect();
        assert!(bad.is_empty(), "{bad:?}");
        assert!(!out.lines().any(|l| l.starts_with("FORGED")), "{out}");
        if color == "always" {
            // The only escape sequences left are the renderer's own colours.
            assert!(!out.contains("\u{1b}]"), "{out}");
            assert!(!out.contains("\u{1b}[2J"), "{out}");
        }
        assert!(raw_controls(&stderr(&o)).is_empty());
    }
    let file = tmp.path().join("report.txt");
    let o = run(tensight(tmp.path())
        .arg("analyze")
        .arg(&trace)
        .arg("-o")
        .arg(&file));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = std::fs::read_to_string(&file).expect("report");
    assert!(raw_controls(&out).is_empty());
    assert!(out.contains("\\u{1b}"), "escaped, not dropped");
    // JSON carries the escaped name too (and JSON escapes would be safe anyway).
    let o = run(tensight(tmp.path())
        .args(["analyze", "--format", "json"])
        .arg(&trace));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(raw_controls(&out).is_empty());
    assert!(!out.contains("\\u001b"), "{out}");
}

#[test]
fn a_hostile_manifest_reaches_stderr_escaped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("bundle");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(
        dir.join("manifest.json"),
        format!(r#"{{"format": "{EVIL}", "format_version": 1}}"#),
    )
    .expect("write");
    let o = run(tensight(tmp.path()).arg("analyze").arg(&dir));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("evil"), "{err}");
    assert!(raw_controls(&err).is_empty(), "{err:?}");
    assert!(!err.lines().any(|l| l.starts_with("FORGED")), "{err}");
}

#[test]
fn a_10_mb_frame_name_is_cut_to_the_width() {
    let tmp = tempfile::tempdir().expect("tmp");
    let trace = tmp.path().join("long.json");
    let name = "x".repeat(10 << 20);
    std::fs::write(
        &trace,
        format!(
            r#"{{"traceEvents": [
            {{"ph": "X", "cat": "python_function", "name": "train.py(1): {name}", "pid": 1, "tid": 1, "ts": 1, "dur": 100}},
            {{"ph": "X", "cat": "cpu_op", "name": "aten::{name}", "pid": 1, "tid": 1, "ts": 2, "dur": 90}}
        ]}}"#
        ),
    )
    .expect("write");
    let o = run(tensight(tmp.path())
        .args(["analyze", "--width", "80"])
        .arg(&trace));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let widest = out.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest <= 80, "a line of {widest} characters");
    assert!(out.len() < 64 << 10, "{} bytes of report", out.len());
    let o = run(tensight(tmp.path())
        .args(["analyze", "--format", "json"])
        .arg(&trace));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.len() < 1 << 20, "{} bytes of JSON", o.stdout.len());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let counters = v["import"]["counters"].as_array().expect("counters");
    assert!(counters.iter().any(|c| c["name"] == "long_string"));

    // Where a frame name reaches the text: the frame steps were found from.
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir(&bundle).expect("mkdir");
    std::fs::copy(
        fixture("bundles/h200-probe/manifest.json"),
        bundle.join("manifest.json"),
    )
    .expect("copy");
    let t = gunzip(&fixture("bundles/h200-probe/trace.json.gz"))
        .replace("probe.py(10): step", &format!("probe.py(10): step{name}"));
    std::fs::write(bundle.join("trace.json.gz"), gz(t.as_bytes())).expect("write");
    let o = run(tensight(tmp.path())
        .args(["analyze", "--width", "80"])
        .arg(&bundle));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Python frame `probe.py(10):") && out.contains("stepxxxx"),
        "{}",
        &out[..out.len().min(4000)]
    );
    let widest = out.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest <= 80, "a line of {widest} characters");
    assert!(out.len() < 256 << 10, "{} bytes of report", out.len());
}

#[test]
fn a_gzip_bomb_is_stopped_early_with_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    // 256 MiB of spaces inside an array: about 1000× smaller compressed.
    let mut plain = b"{\"traceEvents\": [".to_vec();
    plain.resize(256 << 20, b' ');
    let bomb = tmp.path().join("bomb.json.gz");
    std::fs::write(&bomb, gz(&plain)).expect("write");
    drop(plain);
    let o = run(tensight(tmp.path()).arg("analyze").arg(&bomb));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("decompression bomb"), "{err}");
    assert!(err.contains("--max-ratio"), "{err}");

    // The size cap, from the flag and from the environment.
    let real = fixture("h200-probe/kineto_trace.json.gz");
    let o = run(tensight(tmp.path())
        .args(["analyze", "--max-inflated", "100K"])
        .arg(&real));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("inflates past 100.0 KiB"),
        "{}",
        stderr(&o)
    );
    let o = run(tensight(tmp.path())
        .env("TENSIGHT_MAX_INFLATED", "100K")
        .arg("analyze")
        .arg(&real));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // The same bomb as an Nsight Compute CSV.
    let mut csv = b"\"ID\",\"Kernel Name\"\n".to_vec();
    csv.resize(256 << 20, b' ');
    let ncu = tmp.path().join("ncu.csv.gz");
    std::fs::write(&ncu, gz(&csv)).expect("write");
    drop(csv);
    let o = run(tensight(tmp.path())
        .arg("analyze")
        .arg(&real)
        .arg("--ncu")
        .arg(&ncu));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("Nsight Compute CSV"), "{}", stderr(&o));
}

#[cfg(unix)]
#[test]
fn special_files_are_refused_not_read() {
    let tmp = tempfile::tempdir().expect("tmp");
    let real = fixture("h200-probe/kineto_trace.json.gz");
    let o = run(tensight(tmp.path())
        .arg("analyze")
        .arg(&real)
        .args(["--ncu", "/dev/zero"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a character device"), "{}", stderr(&o));
    let o = run(tensight(tmp.path()).args(["analyze", "/dev/zero"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let fifo = tmp.path().join("pipe.json");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    for args in [vec!["analyze".into(), fifo.clone().into_os_string()], {
        let mut a: Vec<std::ffi::OsString> = vec!["analyze".into(), real.clone().into()];
        a.push("--et".into());
        a.push(fifo.clone().into());
        a
    }] {
        let mut child = tensight(tmp.path())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("analyze blocked on a FIFO");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let o = child.wait_with_output().expect("output");
        assert_eq!(status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("a FIFO"), "{}", stderr(&o));
    }
}

#[test]
fn o_never_overwrites_an_input_or_a_file_that_is_not_a_report() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir(&bundle).expect("mkdir");
    for f in ["manifest.json", "trace.json.gz", "et.json.gz"] {
        std::fs::copy(fixture("bundles/h200-probe").join(f), bundle.join(f)).expect("copy");
    }
    let before: Vec<Vec<u8>> = ["manifest.json", "trace.json.gz", "et.json.gz"]
        .iter()
        .map(|f| std::fs::read(bundle.join(f)).expect("read"))
        .collect();
    let analyze = |extra: &[&std::ffi::OsStr]| {
        let mut c = tensight(tmp.path());
        c.arg("analyze").arg(&bundle).args(extra);
        run(&mut c)
    };
    // The bundle's own files, directly, through a hard link and through a symlink.
    std::fs::hard_link(bundle.join("et.json.gz"), tmp.path().join("hard")).expect("link");
    #[cfg(unix)]
    std::os::unix::fs::symlink(bundle.join("manifest.json"), tmp.path().join("soft"))
        .expect("symlink");
    for target in [
        bundle.join("et.json.gz"),
        bundle.join("manifest.json"),
        tmp.path().join("hard"),
        #[cfg(unix)]
        tmp.path().join("soft"),
    ] {
        for force in [false, true] {
            let mut args = vec![std::ffi::OsStr::new("-o"), target.as_os_str()];
            if force {
                args.push("--force".as_ref());
            }
            let o = analyze(&args);
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            assert!(
                stderr(&o).contains("refusing to write the report over the input"),
                "{}",
                stderr(&o)
            );
        }
    }
    // --et and --ncu inputs.
    let ncu = tmp.path().join("ncu.csv.gz");
    std::fs::copy(fixture("h200-probe/ncu_raw.csv.gz"), &ncu).expect("copy");
    let trace = fixture("h200-probe/kineto_trace.json.gz");
    let o = run(tensight(tmp.path())
        .arg("analyze")
        .arg(&trace)
        .arg("--ncu")
        .arg(&ncu)
        .arg("-o")
        .arg(&ncu));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("over the input"), "{}", stderr(&o));
    let after: Vec<Vec<u8>> = ["manifest.json", "trace.json.gz", "et.json.gz"]
        .iter()
        .map(|f| std::fs::read(bundle.join(f)).expect("read"))
        .collect();
    assert!(before == after, "an input was changed");

    // Another file: only with --force.
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "my notes\n").expect("write");
    let o = analyze(&["-o".as_ref(), notes.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&notes).expect("read"), "my notes\n");
    let o = analyze(&["-o".as_ref(), notes.as_os_str(), "--force".as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&notes)
        .expect("read")
        .contains("GPU PERFORMANCE DIAGNOSIS REPORT"));

    // An earlier report (text, then JSON) is replaced without asking.
    let o = analyze(&["-o".as_ref(), notes.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let json = tmp.path().join("r.json");
    for _ in 0..2 {
        let o = analyze(&[
            "-o".as_ref(),
            json.as_os_str(),
            "-f".as_ref(),
            "json".as_ref(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    // A symlink to another file: refused without --force; with it, the link itself is
    // replaced and its target left alone.
    #[cfg(unix)]
    {
        let link = tmp.path().join("link.txt");
        let other = tmp.path().join("other.txt");
        std::fs::write(&other, "keep me\n").expect("write");
        std::os::unix::fs::symlink(&other, &link).expect("symlink");
        let o = analyze(&["-o".as_ref(), link.as_os_str()]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
        let o = analyze(&["-o".as_ref(), link.as_os_str(), "--force".as_ref()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(std::fs::read_to_string(&other).expect("read"), "keep me\n");
        assert!(!std::fs::symlink_metadata(&link)
            .expect("stat")
            .file_type()
            .is_symlink());
    }
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("ls")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_forest_tree_and_dot_escape_names_from_the_traces() {
    let tmp = tempfile::tempdir().expect("tmp");
    // The probe bundle with `aten::transpose` renamed in both traces (they link by name)
    // and `probe.py` (the source file of the frames) renamed in the trace.
    let evil = |s: String| {
        s.replace("\"aten::transpose\"", &format!("\"aten::transpose{EVIL}\""))
            .replace("probe.py(", &format!("probe{EVIL}.py("))
    };
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir(&bundle).expect("mkdir");
    std::fs::copy(
        fixture("bundles/h200-probe/manifest.json"),
        bundle.join("manifest.json"),
    )
    .expect("copy");
    for f in ["trace.json.gz", "et.json.gz"] {
        let text = evil(gunzip(&fixture("bundles/h200-probe").join(f)));
        std::fs::write(bundle.join(f), gz(text.as_bytes())).expect("write");
    }
    for forest in ["--forest", "--forest=dot"] {
        let o = run(tensight(tmp.path()).arg("analyze").arg(forest).arg(&bundle));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("evil"), "{forest}: {out}");
        assert!(
            raw_controls(&out).is_empty(),
            "{forest}: {:?}",
            raw_controls(&out)
        );
        assert!(!out.lines().any(|l| l.starts_with("FORGED")), "{out}");
    }
}

/// `--format html`: markup in kernel and op names reaches stdout and `-o` as text; a
/// second `-o` replaces the earlier HTML report without `--force`, but not another HTML
/// file; `rules` has no HTML output.
#[test]
fn markup_in_names_reaches_the_html_report_escaped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let trace = fixture("hostile-html/trace.json");
    let o = run(tensight(tmp.path())
        .args(["analyze", "--format", "html"])
        .arg(&trace));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("<!doctype html>"), "{out}");
    assert!(!out.contains("<script>alert(1)</script>"));
    assert!(!out.contains("<img src=x onerror=alert(1)>"));
    assert!(out.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert_eq!(out.matches("<script").count(), 1);
    let file = tmp.path().join("report.html");
    for _ in 0..2 {
        let o = run(tensight(tmp.path())
            .args(["analyze", "-f", "html"])
            .arg(&trace)
            .arg("-o")
            .arg(&file));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    assert_eq!(std::fs::read_to_string(&file).expect("report"), out);
    let other = tmp.path().join("page.html");
    std::fs::write(&other, "<!doctype html><title>mine</title>").expect("write");
    let o = run(tensight(tmp.path())
        .args(["analyze", "-f", "html"])
        .arg(&trace)
        .arg("-o")
        .arg(&other));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run(tensight(tmp.path()).args(["rules", "--format", "html"]));
    assert_eq!(o.status.code(), Some(2), "rules has no HTML output");
}
