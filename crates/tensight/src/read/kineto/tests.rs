//! Tests of the whole reader: a small trace through every path, cut into blocks of
//! every size.

use super::*;
use crate::model::Profile;

/// A small Kineto trace touching every path of the event parser: metadata, ops
/// with shapes, Python frames, kernels, memcpys, runtime calls, flows, allocator
/// records, escapes, numbers as strings, nulls, nested unknown fields.
pub(super) const TRACE: &str = r#"{
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85000000000, "numSms": 132}],
  "traceEvents": [
  {"name": "process_name", "ph": "M", "ts": 1, "pid": 7, "tid": 0, "args": {"name": "python3"}},
  {"name": "thread_name", "ph": "M", "ts": 1, "pid": 7, "tid": 8, "args": {"name": "main \"thread\""}},
  {
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 8,
    "ts": 1700000000000.125, "dur": 900.5,
    "args": {"External id": 1, "Record function id": 10, "Ev Idx": 0}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8,
    "ts": 1700000000010.250, "dur": 20,
    "args": {"External id": 2, "Sequence number": 5, "Input Dims": [[64, 128], [128, 256]],
      "Input type": ["float", "float"], "Input Strides": [[128, 1], [256, 1]],
      "Concrete Inputs": ["", "{\"a\": [1, 2]}"], "nested": {"x": [true, false, null, -1.5e-3]},
      "objects": [
        {"a": 1},
        {"b": [{"c": 2}, {"d": "\n,{"}]}
      ]}
  },
  {
    "ph": "X", "cat": "python_function", "name": "train.py(40): step\ttab", "pid": 7, "tid": 8,
    "ts": "1700000000001", "dur": "899.0", "args": {"Python id": 3}
  },
  {
    "ph": "X", "cat": "Kernel", "name": "ampere_sgemm_\u0041", "pid": 0, "tid": 7,
    "ts": 1700000000040.5, "dur": 12.25,
    "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 99,
      "grid": [120, 1, 1], "block": [256, 1, 1], "registers per thread": 128,
      "shared memory": 49152, "blocks per SM": 0.909091, "warps per SM": 7.272727,
      "est. achieved occupancy %": 11}
  },
  {
    "ph": "X", "cat": "kernel", "name": "triton_poi", "pid": 0, "tid": 7,
    "ts": 1700000000060, "dur": 1,
    "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 100,
      "grid": "grid(100,)", "block": [128, 1, 1.5]}
  },
  {
    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 13,
    "ts": 1700000000005, "dur": 30, "args": {"device": 0, "stream": 13, "correlation": 98, "bytes": 1048576}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8,
    "ts": 1700000000012, "dur": 4, "args": {"External id": 2, "correlation": 99, "cbid": 211, "note": "caf\u00e9\u12ab"}
  },
  {"ph": "s", "id": 99, "pid": 7, "tid": 8, "ts": 1700000000012, "cat": "ac2g", "name": "ac2g"},
  {"ph": "f", "id": 99, "pid": 0, "tid": 7, "ts": 1700000000040.5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 8,
   "ts": 1700000000011, "args": {"Total Reserved": 2097152, "Total Allocated": 1024, "Bytes": 512,
   "Addr": 140000, "Device Type": 1, "Device Id": 0}},
  {"ph": "X", "cat": "cpu_op", "name": null, "pid": null, "tid": 8, "ts": 1, "dur": 1},
  {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 7, "tid": 8, "ts": -5, "dur": -1},
  {"ph": "X", "cat": "cpu_op", "name": "dup", "name": "dup", "pid": 7, "tid": 8, "ts": 2, "dur": 1},
  {"ph": "X", "cat": "cpu_op", "name": "big", "pid": 7, "tid": 8, "ts": 12345678901234567890, "dur": 1e2},
  {"ph": "X", "cat": "cpu_op", "name": "bad\u12", "pid": 7, "tid": 8, "ts": 3, "dur": 1},
  {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1, "dur": 1000},
  [1, 2],
  null,
  {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 1700000000070, "dur": 2, "args": {"correlation": 101, "stream": 7, "device": 0}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 1700000000040, "dur": 30, "args": {"External id": 1}},
  {"ph": "X", "cat": "overhead", "name": "Buffer Request", "pid": 7, "tid": 8, "ts": 4, "dur": 1},
  {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 7, "tid": 8, "ts": 1700000000010.250, "dur": 30, "args": {"External id": 3}}
  ],
  "traceName": "t.json",
  "displayTimeUnit": "ms"
}"#;

fn read_with(buf: &[u8], block_bytes: usize) -> String {
    read_parsed(buf, block_bytes, Parse::Indexed)
}

fn read_parsed(buf: &[u8], block_bytes: usize, parse: Parse) -> String {
    let mut p = Profile::default();
    let mut w = Vec::new();
    let r = read_blocks(buf, &|_, _| {}, block_bytes, parse, &mut p, &mut w);
    format!("{r:?}\n{w:?}\n{p:?}")
}

/// Cutting the events into blocks, however small, gives exactly the result of one
/// sequential pass: on the whole trace, on every prefix (truncation), with the
/// newlines removed (no block guesses), and with bytes broken here and there.
#[test]
fn blocks_do_not_change_the_result() {
    let whole = TRACE.as_bytes().to_vec();
    let minified: Vec<u8> = whole.iter().copied().filter(|&c| c != b'\n').collect();
    let mut inputs = vec![whole.clone(), minified];
    for cut in (0..whole.len()).step_by(37) {
        inputs.push(whole[..cut].to_vec());
    }
    for (i, junk) in [b"\"", b"{", b"}", b"]", b",", b"\\"].iter().enumerate() {
        let at = 300 + i * 401;
        let mut v = whole.clone();
        v.splice(at..at, junk.iter().copied());
        inputs.push(v);
    }
    for input in &inputs {
        let one = read_with(input, usize::MAX);
        assert_eq!(read_parsed(input, usize::MAX, Parse::Bytewise), one);
        for block in [1, 2, 5, 13, 64, 333] {
            assert_eq!(
                read_with(input, block),
                one,
                "block {block}, input of {} bytes",
                input.len()
            );
        }
    }
}

#[test]
fn trace_reads_as_expected() {
    let mut p = Profile::default();
    let mut w = Vec::new();
    read(TRACE.as_bytes(), &mut p, &mut w).unwrap();
    // "big" starts 1.2e19 µs after the epoch: out of range, counted, not kept.
    assert_eq!(p.ops.len(), 4, "{:?}", p.ops);
    assert_eq!(p.gpu.len(), 3);
    assert_eq!(p.gpu[0].launch, None); // the memcpy, first by time
    assert_eq!(p.gpu[1].launch.as_ref().unwrap().grid, [120, 1, 1]);
    assert_eq!(&*p.gpu[1].name, "ampere_sgemm_A");
    let triton = p.gpu[2].launch.as_ref().unwrap();
    assert_eq!((triton.grid, triton.block), ([1, 1, 1], [128, 1, 1]));
    assert_eq!(p.python_frames.len(), 1);
    // The JSON escape decodes to a tab, which the reader keeps escaped (text::clean).
    assert_eq!(&*p.python_frames[0].name, "train.py(40): step\\u{9}tab");
    assert_eq!(p.threads[0].name, "main \"thread\"");
    let mm = p.ops.iter().find(|o| &*o.name == "aten::mm").unwrap();
    assert_eq!(mm.input_dims.as_deref(), Some("[[64, 128], [128, 256]]"));
    assert_eq!(mm.ts_ns, 1_700_000_000_010_250);
    let count = |name: &str| {
        p.counters
            .counters
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.count)
    };
    // A repeated field, a bad escape, an array and a null.
    assert_eq!(count("unparseable_event"), 4);
    assert_eq!(count("malformed_event"), 1);
    assert_eq!(count("negative_duration"), 1);
    assert_eq!(count("time_out_of_range"), 1);
    assert_eq!(count("escaped_string"), 1);
    assert_eq!(count("flow_event"), 2);
}

/// Generated Kineto-like events, valid and not: what the property tests feed both
/// event parsers and the whole reader.
pub(super) mod gen {
    use proptest::prelude::*;

    /// White space between tokens, as compact and pretty-printed traces have it.
    fn ws() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just(""),
            Just(" "),
            Just("\n    "),
            Just("\t"),
            Just(" \r\n")
        ]
    }

    /// A JSON string literal: plain text, escaped quotes and backslashes, unicode
    /// (raw and escaped), and now and then something serde refuses (a raw control
    /// character, a bad escape, a lone surrogate escape).
    pub(crate) fn string() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            8 => "[a-zA-Z0-9 _:<>().#,{}\\[\\]-]{0,24}",
            1 => Just(r#"\""#.to_string()),
            1 => Just(r"\\".to_string()),
            1 => Just(r"\n\t\/".to_string()),
            1 => Just(r"\u00e9\u12ab".to_string()),
            1 => Just("é€😀".to_string()),
            1 => Just("\u{1}".to_string()),
            1 => Just(r"\x".to_string()),
            1 => Just(r"\ud800".to_string()),
        ];
        proptest::collection::vec(piece, 0..4).prop_map(|v| format!("\"{}\"", v.concat()))
    }

    /// A number as Kineto writes them, and the forms only other writers (or broken
    /// files) have: exponents, long digit runs, leading zeros, a lone sign.
    pub(crate) fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => "-?(0|[1-9][0-9]{0,16})(\\.[0-9]{1,6})?",
            1 => "-?[1-9][0-9]{17,22}(\\.[0-9]{1,4})?",
            1 => "-?[0-9]{1,4}(\\.[0-9]{1,3})?[eE][-+]?[0-9]{1,3}",
            1 => prop_oneof![Just("01"), Just("1."), Just("-"), Just(".5"), Just("1e"), Just("+1"), Just("1.5.2")]
                .prop_map(str::to_string),
        ]
    }

    /// Any value, nested up to `depth`.
    pub(crate) fn value(depth: u32) -> BoxedStrategy<String> {
        let leaf = prop_oneof![
            3 => number(),
            3 => string(),
            1 => prop_oneof![Just("true"), Just("false"), Just("null"), Just("nul"), Just("truex")]
                .prop_map(str::to_string),
        ];
        leaf.prop_recursive(depth, 24, 5, |inner| {
            prop_oneof![
                proptest::collection::vec((ws(), inner.clone()), 0..5).prop_map(|v| {
                    let items: Vec<String> =
                        v.into_iter().map(|(w, x)| format!("{w}{x}")).collect();
                    format!("[{}]", items.join(","))
                }),
                proptest::collection::vec((string(), ws(), inner), 0..4).prop_map(|v| {
                    let items: Vec<String> = v
                        .into_iter()
                        .map(|(k, w, x)| format!("{k}:{w}{x}"))
                        .collect();
                    format!("{{{}}}", items.join(", "))
                }),
            ]
        })
        .boxed()
    }

    /// A member of `args`: a known key with a value of its kind (or of another), or
    /// any key.
    fn arg() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("External id"),
            Just("correlation"),
            Just("Record function id"),
            Just("device"),
            Just("stream"),
            Just("bytes"),
            Just("kind"),
            Just("grid"),
            Just("block"),
            Just("registers per thread"),
            Just("Input Dims"),
            Just("Input type"),
            Just("Concrete Inputs"),
            Just("Call stack"),
            Just("name"),
            Just("Python id"),
            Just("Ev Idx"),
            Just("dtype"),
            Just("Collective name"),
            Just("Total Allocated"),
            Just("ex\\u0074ra"),
            Just("é"),
        ];
        (
            key,
            ws(),
            prop_oneof![3 => number(), 3 => value(3), 1 => string()],
        )
            .prop_map(|(k, w, v)| format!("\"{k}\":{w}{v}"))
    }

    /// One event object: the fields Kineto writes, in its order or shuffled, with
    /// values of the usual kind mostly, and sometimes a repeated or odd field.
    pub(crate) fn event() -> impl Strategy<Value = String> {
        let member = prop_oneof![
            2 => prop_oneof![Just("\"X\""), Just("\"i\""), Just("\"M\""), Just("\"s\""), Just("7")]
                .prop_map(|v| format!("\"ph\": {v}")),
            2 => prop_oneof![Just("\"cpu_op\""), Just("\"kernel\""), Just("\"python_function\""),
                    Just("\"cuda_runtime\""), Just("\"Trace\""), Just("null")]
                .prop_map(|v| format!("\"cat\": {v}")),
            2 => string().prop_map(|v| format!("\"name\": {v}")),
            2 => prop_oneof![number(), Just("\"Spans\"".to_string()), Just("\"12\"".to_string())]
                .prop_map(|v| format!("\"pid\": {v}")),
            2 => number().prop_map(|v| format!("\"tid\": {v}")),
            3 => prop_oneof![3 => number(), 1 => Just("\"1700000000001.5\"".to_string())]
                .prop_map(|v| format!("\"ts\": {v}")),
            2 => number().prop_map(|v| format!("\"dur\": {v}")),
            3 => (proptest::collection::vec((arg(), ws()), 0..6))
                .prop_map(|v| {
                    let items: Vec<String> = v.into_iter().map(|(a, w)| format!("{w}{a}")).collect();
                    format!("\"args\": {{{}}}", items.join(","))
                }),
            1 => (string(), value(2)).prop_map(|(k, v)| format!("{k}: {v}")),
        ];
        proptest::collection::vec((ws(), member), 0..10).prop_map(|v| {
            let items: Vec<String> = v.into_iter().map(|(w, m)| format!("{w}{m}")).collect();
            format!("{{{}}}", items.join(","))
        })
    }

    /// An event, sometimes damaged: cut short, or one byte replaced.
    pub(crate) fn event_bytes() -> impl Strategy<Value = Vec<u8>> {
        (
            event(),
            0usize..4,
            any::<prop::sample::Index>(),
            any::<u8>(),
        )
            .prop_map(|(e, how, at, byte)| {
                let mut b = e.into_bytes();
                if b.is_empty() {
                    return b;
                }
                let i = at.index(b.len());
                match how {
                    0 => b.truncate(i),
                    1 => b[i] = byte,
                    _ => {}
                }
                b
            })
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// The indexed reader gives what the byte-at-a-time reader gives, on traces of
    /// generated events (some broken), whole and cut anywhere, in blocks of any size.
    #[test]
    fn indexed_reader_matches_bytewise(
        events in proptest::collection::vec(gen::event_bytes(), 0..12),
        cut in proptest::prelude::any::<proptest::sample::Index>(),
        block in 1usize..400,
    ) {
        let mut t = b"{\"traceEvents\": [\n".to_vec();
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                t.extend_from_slice(b",\n  ");
            }
            t.extend_from_slice(e);
        }
        t.extend_from_slice(b"\n]}");
        for input in [&t[..], &t[..cut.index(t.len() + 1)]] {
            let want = read_parsed(input, usize::MAX, Parse::Bytewise);
            proptest::prop_assert_eq!(&read_parsed(input, usize::MAX, Parse::Indexed), &want);
            proptest::prop_assert_eq!(&read_parsed(input, block, Parse::Indexed), &want);
        }
    }
}
