//! Property tests of the reader: whatever the bytes, it never panics; a real trace cut
//! anywhere reads as a prefix of the whole (never more events, never an error once the
//! first event is whole), with a warning naming where it was cut.

use proptest::prelude::*;
use std::io::Read;
use tensight::read::load_bytes;

fn probe_json() -> Vec<u8> {
    let gz = include_bytes!("../../../tests/fixtures/h200-probe/kineto_trace.json.gz");
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut out)
        .expect("fixture decompresses");
    out
}

fn events(p: &tensight::model::Profile) -> usize {
    p.ops.len() + p.gpu.len() + p.runtime.len() + p.python_frames.len() + p.memory.len()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = load_bytes("fuzz", &bytes);
    }

    #[test]
    fn json_like_bytes_never_panic(s in r#"[\{\}\[\]",:0-9a-zA-Z \\]{0,400}"#) {
        let wrapped = format!("{{\"traceEvents\": [{s}");
        let _ = load_bytes("fuzz", wrapped.as_bytes());
        let _ = load_bytes("fuzz", s.as_bytes());
    }

    #[test]
    fn truncation_reads_a_prefix(frac in 0.05f64..1.0) {
        let full = probe_json();
        let whole = load_bytes("whole", &full).expect("fixture loads");
        let cut = ((full.len() as f64) * frac) as usize;
        let part = &full[..cut];
        match load_bytes("cut", part) {
            Ok(l) => {
                prop_assert!(events(&l.profile) <= events(&whole.profile));
                prop_assert!(l.warnings.iter().any(|w| w.contains("truncated at byte")), "{:?}", l.warnings);
            }
            Err(e) => prop_assert!(e.message.contains("no events") || e.message.contains("broken"), "{}", e),
        }
    }
}

#[test]
fn garbage_inside_events_is_counted_not_fatal() {
    let t = br#"{"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": 7, "pid": 1, "tid": 1, "ts": "x"},
        [1, 2, 3],
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 11, "dur": -3, "args": {"device": 0, "stream": 7}}
    ]}"#;
    let l = load_bytes("t", t).expect("loads");
    assert_eq!(l.profile.ops.len(), 1);
    assert_eq!(l.profile.gpu.len(), 1);
    assert_eq!(l.profile.gpu[0].dur_ns, 0);
    assert_eq!(l.profile.counters.get("unparseable_event"), 2);
    assert_eq!(l.profile.counters.get("negative_duration"), 1);
}
