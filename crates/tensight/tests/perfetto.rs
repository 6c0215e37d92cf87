//! The annotated trace (`analyze --format perfetto`): valid Chrome-trace JSON holding
//! every original event and tensight's, which tensight's own reader loads back to the
//! same diagnosis.

use serde_json::Value;
use std::path::{Path, PathBuf};
use tensight::report::{json, perfetto};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// The annotated trace of `path` (a trace or a bundle), as bytes.
fn annotated(path: &Path) -> (tensight::report::Report, Vec<u8>) {
    let report = tensight::analyze_path(path).expect("the fixture analyses");
    let trace = tensight::read::resolve(path).expect("a trace");
    let mut out = Vec::new();
    perfetto::write_file(&report, &trace, &mut out).expect("annotates");
    (report, out)
}

fn ours(v: &Value) -> Vec<&Value> {
    v["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["cat"] == "tensight")
        .collect()
}

/// What a trace viewer needs of tensight's events: a phase; a time on all but metadata;
/// a duration on slices; pid and tid that fit 32 bits (Perfetto reads them so); and the
/// slices of each of tensight's tracks disjoint (a viewer drops slices that overlap
/// without nesting).
fn check_viewable(added: &[&Value]) {
    let mut tracks: std::collections::BTreeMap<(u64, u64), Vec<(f64, f64)>> = Default::default();
    for e in added {
        let ph = e["ph"].as_str().expect("a phase");
        let pid = e["pid"].as_u64().expect("a numeric pid");
        let tid = e["tid"].as_u64().expect("a numeric tid");
        assert!(pid <= u32::MAX as u64 && tid <= u32::MAX as u64, "{e}");
        if ph == "M" {
            continue;
        }
        let ts = e["ts"].as_f64().expect("a time");
        if ph == "X" {
            let dur = e["dur"].as_f64().expect("a duration");
            assert!(dur >= 0.0, "{e}");
            tracks.entry((pid, tid)).or_default().push((ts, ts + dur));
        }
    }
    let ours: Vec<u64> = added
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    for ((pid, tid), mut slices) in tracks {
        if !ours.contains(&pid) {
            continue;
        }
        slices.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in slices.windows(2) {
            assert!(
                w[1].0 >= w[0].1 - 1e-3,
                "track {pid}/{tid}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
}

/// The diagnosis, less what names the input file.
fn diagnosis(r: &tensight::report::Report) -> Value {
    json::to_value(r)["diagnosis"].clone()
}

fn original_events(path: &Path) -> usize {
    let bytes = std::fs::read(tensight::read::resolve(path).unwrap()).unwrap();
    let mut text = Vec::new();
    use std::io::Read;
    flate2::read::MultiGzDecoder::new(&bytes[..])
        .read_to_end(&mut text)
        .unwrap();
    let v: Value = serde_json::from_slice(&text).unwrap();
    v["traceEvents"].as_array().unwrap().len()
}

#[test]
fn a_gzip_trace_annotated_keeps_its_events_adds_findings_and_reads_back_the_same() {
    let path = fixture("h200-probe/kineto_trace.json.gz");
    let (report, out) = annotated(&path);
    let v: Value = serde_json::from_slice(&out).expect("valid JSON");
    assert_eq!(
        v["tensight"]["annotation_version"],
        perfetto::ANNOTATION_VERSION
    );
    let all = v["traceEvents"].as_array().unwrap();
    let added = ours(&v);
    assert_eq!(all.len() - added.len(), original_events(&path));
    check_viewable(&added);
    // The top-level facts of the original are still there.
    assert_eq!(v["deviceProperties"][0]["name"], "NVIDIA H200");

    // A process with a track per finding, one slice per step on it, named by the code.
    let process = added
        .iter()
        .find(|e| e["ph"] == "M" && e["name"] == "process_name")
        .expect("a process for the findings");
    assert_eq!(process["args"]["name"], "tensight findings");
    let pid = process["pid"].clone();
    let tracks: Vec<&str> = added
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid)
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(tracks.contains(&"steps") && tracks.contains(&"GPU idle by cause"));
    for (i, f) in report.diagnosis.findings.iter().enumerate() {
        let track = format!("#{} {} {}", i + 1, f.code, f.title);
        assert!(tracks.contains(&track.as_str()), "{track} in {tracks:?}");
        let slices = added
            .iter()
            .filter(|e| e["ph"] == "X" && e["args"]["code"] == f.code)
            .count();
        assert!(slices >= 1, "{}: no slice", f.code);
    }
    let steps = added
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == 1)
        .count();
    assert_eq!(steps, report.metrics.timeline.steps.len());
    assert!(added
        .iter()
        .any(|e| e["ph"] == "X" && e["name"].as_str().unwrap_or("").starts_with("idle: ")));

    // The sync the probe makes each step is marked on its op and linked by flows whose
    // ends pair up.
    let s001 = report
        .diagnosis
        .findings
        .iter()
        .find(|f| f.code == "S001")
        .expect("the probe syncs");
    assert!(added
        .iter()
        .any(|e| e["ph"] == "i" && e["args"]["finding"] == s001.code));
    let ids = |ph: &str| {
        let mut v: Vec<u64> = added
            .iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        v.sort();
        v
    };
    assert!(!ids("s").is_empty());
    assert_eq!(ids("s"), ids("f"));

    // Read back: the same diagnosis; the added events counted, not analysed.
    let back = tensight::analyze_bytes("annotated.json", &out).expect("reads back");

    // Annotated again: the earlier annotation is replaced, not doubled.
    let mut again = Vec::new();
    perfetto::write_bytes(&back, &out, &mut again).expect("annotates again");
    let twice: Value = serde_json::from_slice(&again).expect("valid JSON");
    assert_eq!(ours(&twice).len(), added.len());
    assert_eq!(twice["traceEvents"].as_array().unwrap().len(), all.len());
    let headers = |b: &[u8]| b.windows(12).filter(|w| w == b"\"tensight\": ").count();
    assert_eq!(headers(&again), 1);
    assert_eq!(diagnosis(&back), diagnosis(&report));
    let counted = back
        .profile
        .counters
        .counters
        .iter()
        .find(|c| c.name == "tensight_event")
        .expect("counted");
    assert_eq!(counted.count as usize, added.len());
    assert!(back.warnings.iter().any(|w| w.contains("annotated by")));
    assert_eq!(
        json::to_value(&back)["summary"],
        json::to_value(&report)["summary"]
    );
}

#[test]
fn a_bundle_annotated_is_its_trace_with_the_bundles_findings() {
    let path = fixture("bundles/h200-transposed-view-hw");
    let (report, out) = annotated(&path);
    let v: Value = serde_json::from_slice(&out).expect("valid JSON");
    assert_eq!(
        v["traceEvents"].as_array().unwrap().len() - ours(&v).len(),
        original_events(&path)
    );
    check_viewable(&ours(&v));
    let v001 = ours(&v)
        .into_iter()
        .filter(|e| e["ph"] == "X" && e["args"]["code"] == "V001")
        .count();
    assert!(
        report.diagnosis.findings.iter().any(|f| f.code == "V001") && v001 > 0,
        "the planted view is a finding, on its track"
    );
    // Read back as a plain trace. Without the manifest, every ProfilerStep is a step
    // (the bundle's window ends one earlier) and the savings are on the profiled
    // timeline; the steps the bundle analysed come back the same, but for the end of
    // its last one (no longer cut at the next step's start).
    let back = tensight::analyze_bytes("annotated.json", &out).expect("reads back");
    let (b, o) = (json::to_value(&back), json::to_value(&report));
    let (b, o) = (
        b["steps"].as_array().unwrap(),
        o["steps"].as_array().unwrap(),
    );
    assert!(b.len() >= o.len() && o.len() > 1);
    assert_eq!(b[..o.len() - 1], o[..o.len() - 1]);
    assert!(back.warnings.iter().any(|w| w.contains("annotated by")));
}

#[test]
fn a_bare_event_array_is_wrapped_and_an_empty_one_gets_only_ours() {
    let mut t = tensight::testing::TraceBuilder::new();
    t.step(1, 0.0, 100.0);
    t.op("aten::mm", 10.0, 20.0);
    let obj: Value = serde_json::from_slice(&t.build()).unwrap();
    let events = obj["traceEvents"].clone();
    let bare = serde_json::to_vec(&events).unwrap();
    let report = tensight::analyze_bytes("bare.json", &bare).expect("analyses");
    let mut out = Vec::new();
    perfetto::write_bytes(&report, &bare, &mut out).expect("annotates");
    let v: Value = serde_json::from_slice(&out).expect("valid JSON");
    assert_eq!(
        v["traceEvents"].as_array().unwrap().len() - ours(&v).len(),
        events.as_array().unwrap().len()
    );
    let back = tensight::analyze_bytes("annotated.json", &out).expect("reads back");
    assert_eq!(diagnosis(&back), diagnosis(&report));

    // A truncated original is refused with a message, not a panic.
    let cut = &bare[..bare.len() / 2];
    let err = perfetto::write_json(&report, cut, &mut Vec::new()).unwrap_err();
    assert!(err.message.contains("ends early"), "{}", err.message);
}
