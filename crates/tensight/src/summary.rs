//! One rank's summary as a file: what `tensight summarize` writes and `tensight merge`
//! reads, so the cross-rank step can run on summaries gathered from many hosts (or by
//! Ray) without moving the traces.
//!
//! Input/output: a [`RankSummary`] ⇄ bytes. It only encodes and decodes; the summary is
//! made by [`crate::analysis::ranks::summary`] and compared by
//! [`crate::analysis::ranks::compare`].
//!
//! The format is JSON, not Parquet: the `parquet` crate with only its `arrow` feature
//! (and `arrow-array`, `arrow-schema` without default features) took over 5 minutes of
//! CPU to build in release on the 2-core development machine before `parquet` itself had
//! finished (docs/distributed.md has the measurement), past the budget this project set
//! for it. The layout is the flat table a Parquet file would hold, so that a Parquet
//! codec can replace this one without changing a reader of the fields.
//!
//! Schema, version [`SUMMARY_VERSION`] (`MAJOR.MINOR`: a reader refuses another major;
//! a minor version adds fields):
//!
//! ```text
//! {
//!   "tensight_summary": "1.0",              // the version, first key (sniffed)
//!   "rank": int, "world_size": int|null,    // world_size: distributedInfo's
//!   "source": str,                          // the input, as shown
//!   "steps": [ { "step": int,               // index among the analysed steps
//!                "dur_ns", "gpu_busy_ns",   // wall time; union of GPU activity
//!                "compute_ns",              // union of non-communication GPU work
//!                "comm_ns",                 // sum of communication kernels
//!                "exposed_comm_ns",         // communication with no compute under it
//!                "idle_cpu_ns", "idle_sync_ns",  // GPU idle by cause: host not
//!                "idle_data_loader_ns",     // launching, after a sync, in DataLoader
//!                "idle_transfer_ns": int } ],    // __next__, in memcpy calls
//!   "collectives": [ { "step", "seq": int,  // seq: k-th of its group in the step
//!                      "group", "name", "dtype": str,  // "?"/"" when not recorded
//!                      "nelems", "bytes": int|null,    // the larger message
//!                      "group_size": int|null,
//!                      "dur_ns", "exposed_ns": int } ],
//!   "top_causes": [ { "code", "title": str, "saving_ms": float } ]
//! }
//! ```

use crate::analysis::ranks::{RankSummary, SUMMARY_VERSION};
use crate::error::{Error, Result};
use std::path::Path;

/// How a summary file starts: the first key.
pub const HEAD: &str = "{\"tensight_summary\":";

/// Largest summary read (a rank of 10,000 steps with 100 collectives each is ~150 MB).
const MAX_BYTES: u64 = 1 << 30;

/// The summary as bytes (compact JSON, version first, then a newline).
pub fn to_bytes(s: &RankSummary) -> Result<Vec<u8>> {
    let body = serde_json::to_value(s)
        .map_err(|e| Error::new(format!("failed to write the rank summary: {e}")))?;
    let mut out = format!("{HEAD}{}", serde_json::Value::from(SUMMARY_VERSION)).into_bytes();
    if let serde_json::Value::Object(m) = body {
        for (k, v) in m {
            out.push(b',');
            out.extend(serde_json::to_vec(&k).unwrap_or_default());
            out.push(b':');
            out.extend(serde_json::to_vec(&v).unwrap_or_default());
        }
    }
    out.extend(b"}\n");
    Ok(out)
}

/// Read the summary in `bytes`; `shown` names it in errors.
pub fn from_bytes(shown: &str, bytes: &[u8]) -> Result<RankSummary> {
    let what = format!("failed to read the summary {shown}");
    let hint = "pass files written by `tensight summarize PATH -o FILE`";
    let v: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::new(format!("{what}: not JSON ({e})")).with_hint(hint))?;
    let Some(version) = v.get("tensight_summary").and_then(|x| x.as_str()) else {
        return Err(
            Error::new(format!("{what}: JSON, but not a tensight summary")).with_hint(hint),
        );
    };
    if version.split('.').next() != SUMMARY_VERSION.split('.').next() {
        return Err(Error::new(format!(
            "{what}: summary version {version}; this tensight reads {SUMMARY_VERSION}"
        ))
        .with_hint("summarize the traces again with this version of tensight"));
    }
    let s: RankSummary = serde_json::from_value(v)
        .map_err(|e| Error::new(format!("{what}: {e}")).with_hint(hint))?;
    if s.steps
        .iter()
        .enumerate()
        .any(|(i, x)| x.step as usize != i)
    {
        return Err(Error::new(format!(
            "{what}: its steps are out of order or missing"
        )));
    }
    Ok(s)
}

/// Read the summary at `path`.
pub fn read_file(path: &Path) -> Result<RankSummary> {
    let shown = crate::text::shown(&path.display().to_string());
    let bytes = crate::read::source::read_bounded(path, &format!("summary {shown}"), MAX_BYTES)?;
    from_bytes(&shown, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ranks::{CollectiveCall, RankStep, TopCause};

    fn sample() -> RankSummary {
        RankSummary {
            rank: 3,
            world_size: Some(4),
            source: "rank3/trace.json.gz".into(),
            steps: vec![RankStep {
                step: 0,
                dur_ns: 10,
                gpu_busy_ns: 9,
                compute_ns: 8,
                comm_ns: 7,
                exposed_comm_ns: 6,
                idle_cpu_ns: 5,
                idle_sync_ns: 4,
                idle_data_loader_ns: 3,
                idle_transfer_ns: 2,
            }],
            collectives: vec![CollectiveCall {
                step: 0,
                seq: 1,
                group: "0".into(),
                name: "allreduce".into(),
                dtype: "Float".into(),
                nelems: Some(12),
                bytes: None,
                group_size: Some(4),
                dur_ns: 7,
                exposed_ns: 6,
            }],
            top_causes: vec![TopCause {
                code: "C001".into(),
                title: "CPU-heavy ops".into(),
                saving_ms: 1.25,
            }],
        }
    }

    #[test]
    fn a_summary_survives_the_round_trip() {
        let s = sample();
        let bytes = to_bytes(&s).expect("write");
        assert!(bytes.starts_with(HEAD.as_bytes()));
        assert_eq!(from_bytes("x", &bytes).expect("read"), s);
    }

    #[test]
    fn other_files_are_refused_with_a_hint() {
        let e = from_bytes("x", b"PAR1").expect_err("not json");
        assert!(
            e.message.starts_with("failed to read the summary x"),
            "{}",
            e.message
        );
        assert!(e.hint.is_some());
        let e = from_bytes("x", br#"{"traceEvents": []}"#).expect_err("a trace");
        assert!(
            e.message.contains("not a tensight summary"),
            "{}",
            e.message
        );
        let e = from_bytes("x", br#"{"tensight_summary": "2.0"}"#).expect_err("major");
        assert!(e.message.contains("version 2.0"), "{}", e.message);
        let mut s = sample();
        s.steps[0].step = 1;
        let e = from_bytes("x", &to_bytes(&s).expect("write")).expect_err("order");
        assert!(e.message.contains("out of order"), "{}", e.message);
    }
}
