//! One rank's summary as a file: what `tensight summarize` writes and `tensight merge`
//! reads, so the cross-rank step can run on summaries gathered from many hosts (or by
//! Ray) without moving the traces.
//!
//! Input/output: a [`RankSummary`] ⇄ bytes, as Parquet ([`to_parquet`], the default) or
//! JSON ([`to_bytes`], for `-o FILE.json`); [`read_file`] tells them apart by their first
//! bytes. It only encodes and decodes; the summary is made by
//! [`crate::analysis::ranks::summary`] and compared by [`crate::analysis::ranks::compare`].
//! The Parquet codec is this crate's own ([`parquet`], over [`thrift`]'s compact
//! protocol): the `parquet` crate took over 5 minutes of CPU to build in release on the
//! 2-core development machine (docs/distributed.md has the measurement).
//!
//! Parquet schema, version [`SUMMARY_VERSION`] (`MAJOR.MINOR`: a reader refuses another
//! major; a minor version adds columns, which a reader of it takes as null in files of
//! an earlier minor). One flat table, one row per record, every
//! column OPTIONAL, PLAIN, uncompressed; a column a record does not use is null:
//!
//! ```text
//! column               type        step  collective  cause   meaning
//! record               utf8        ●     ●           ●       "step" | "collective" | "cause" | "frame"
//! step                 int64       ●     ●                   index among the analysed steps
//! seq                  int64             ●                   k-th collective of its group in the step
//! dur_ns               int64       ●     ●                   wall time / kernel duration / frame time
//! gpu_busy_ns          int64       ●                         union of GPU activity
//! compute_ns           int64       ●                         union of non-communication GPU work
//! comm_ns              int64       ●                         sum of communication kernels
//! exposed_ns           int64       ●     ●                   communication with no compute under it
//! idle_cpu_ns          int64       ●                         GPU idle, host not launching
//! idle_sync_ns         int64       ●                         GPU idle after host syncs
//! idle_data_loader_ns  int64       ●                         GPU idle in DataLoader __next__
//! idle_transfer_ns     int64       ●                         GPU idle in memcpy calls
//! idle_comm_ns         int64       ●                         GPU idle in host collectives (1.1)
//! start_ns             int64             ○                   start, from the step's (1.1)
//! host                 int64             ○                   1: run on the host (gloo) (1.1)
//! group                utf8              ●                   process group ("?" unknown)
//! name                 utf8              ●           ●       collective ("allreduce") / rule code / frame
//! dtype                utf8              ●                   element type ("" unknown)
//! nelems               int64             ○                   elements of the larger message
//! bytes                int64             ○                   bytes of the larger message
//! group_size           int64             ○                   ranks in the group
//! title                utf8                          ●       the finding's title
//! saving_ms            double                        ●       its saving on this rank, ms/step
//! ```
//! (● set for that record, ○ when known.) A `frame` record (1.2) sets `name` (the user
//! frame, `train.py(42): augment`) and `dur_ns` (its time inside the analysed steps).
//! File key-value metadata:
//! `tensight.summary_version`, `tensight.rank`, `tensight.source`, and
//! `tensight.world_size` when the trace states it.
//!
//! The JSON form holds the same fields, nested:
//!
//! ```text
//! {
//!   "tensight_summary": "1.2",              // the version, first key (sniffed)
//!   "rank": int, "world_size": int|null, "source": str,
//!   "steps": [ { "step", "dur_ns", "gpu_busy_ns", "compute_ns", "comm_ns",
//!                "exposed_comm_ns", "idle_cpu_ns", "idle_sync_ns",
//!                "idle_data_loader_ns", "idle_transfer_ns", "idle_comm_ns": int } ],
//!   "collectives": [ { "step", "seq": int, "group", "name", "dtype": str,
//!                      "nelems", "bytes", "group_size", "start_ns": int|null,
//!                      "dur_ns", "exposed_ns": int, "host": bool } ],
//!   "top_causes": [ { "code", "title": str, "saving_ms": float } ],
//!   "host_frames": [ { "name": str, "dur_ns": int } ]    // 1.2; absent: none
//! }
//! ```

pub mod parquet;
pub mod thrift;

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

/// Read the summary at `path` (Parquet or JSON).
pub fn read_file(path: &Path) -> Result<RankSummary> {
    let shown = crate::text::shown(&path.display().to_string());
    let bytes = crate::read::source::read_bounded(path, &format!("summary {shown}"), MAX_BYTES)?;
    if bytes.starts_with(b"PAR1") {
        return from_parquet(&shown, &bytes);
    }
    from_bytes(&shown, &bytes)
}

/// True when `bytes` start like a summary (Parquet with tensight's version key, or
/// the JSON form): a file `summarize -o` may replace.
pub fn is_summary(bytes: &[u8]) -> bool {
    bytes.starts_with(HEAD.as_bytes())
        || (bytes.starts_with(b"PAR1")
            && parquet::read(bytes).is_ok_and(|(_, kv)| kv.iter().any(|(k, _)| k == VERSION_KEY)))
}

/// Metadata key of the Parquet summary's version.
const VERSION_KEY: &str = "tensight.summary_version";

/// The summary as a Parquet file (the schema in the module doc).
pub fn to_parquet(s: &RankSummary) -> Vec<u8> {
    use parquet::{Column, Data};
    let mut t = Table::default();
    for x in &s.steps {
        t.row("step", Some(x.step as i64));
        let ints = [
            x.dur_ns,
            x.gpu_busy_ns,
            x.compute_ns,
            x.comm_ns,
            x.exposed_comm_ns,
            x.idle_cpu_ns,
            x.idle_sync_ns,
            x.idle_data_loader_ns,
            x.idle_transfer_ns,
            x.idle_comm_ns,
        ];
        for (i, c) in t.ints.iter_mut().enumerate() {
            c.push(ints.get(i).copied());
        }
        t.fill_collective(None);
        t.fill_cause(None);
    }
    for c in &s.collectives {
        t.row("collective", Some(c.step as i64));
        for (i, col) in t.ints.iter_mut().enumerate() {
            col.push(match i {
                0 => Some(c.dur_ns),
                4 => Some(c.exposed_ns),
                10 => c.start_ns,
                11 => Some(c.host as i64),
                _ => None,
            });
        }
        t.fill_collective(Some(c));
        t.fill_cause(None);
    }
    for x in &s.top_causes {
        t.row("cause", None);
        t.ints.iter_mut().for_each(|c| c.push(None));
        t.fill_collective(None);
        t.fill_cause(Some(x));
    }
    for f in &s.host_frames {
        t.row("frame", None);
        for (i, col) in t.ints.iter_mut().enumerate() {
            col.push((i == 0).then_some(f.dur_ns));
        }
        t.fill_collective(None);
        t.name.push(Some(f.name.clone()));
        t.fill_cause(None);
    }
    let i64c = |name: &str, v: Vec<Option<i64>>| Column {
        name: name.into(),
        data: Data::I64(v),
    };
    let strc = |name: &str, v: Vec<Option<String>>| Column {
        name: name.into(),
        data: Data::Str(v),
    };
    let mut cols = vec![
        strc("record", t.record),
        i64c("step", t.step),
        i64c("seq", t.seq),
    ];
    for (n, v) in INTS.iter().zip(t.ints) {
        cols.push(i64c(n, v));
    }
    cols.extend([
        strc("group", t.group),
        strc("name", t.name),
        strc("dtype", t.dtype),
        i64c("nelems", t.nelems),
        i64c("bytes", t.bytes),
        i64c("group_size", t.group_size),
        strc("title", t.title),
        Column {
            name: "saving_ms".into(),
            data: Data::F64(t.saving_ms),
        },
    ]);
    let mut kv = vec![
        (VERSION_KEY.to_string(), SUMMARY_VERSION.to_string()),
        ("tensight.rank".to_string(), s.rank.to_string()),
        ("tensight.source".to_string(), s.source.clone()),
    ];
    if let Some(w) = s.world_size {
        kv.push(("tensight.world_size".to_string(), w.to_string()));
    }
    parquet::write(&cols, &kv)
}

/// The int64 columns of steps and collectives, in order (the last three: version 1.1).
const INTS: [&str; 12] = [
    "dur_ns",
    "gpu_busy_ns",
    "compute_ns",
    "comm_ns",
    "exposed_ns",
    "idle_cpu_ns",
    "idle_sync_ns",
    "idle_data_loader_ns",
    "idle_transfer_ns",
    "idle_comm_ns",
    "start_ns",
    "host",
];

/// Columns a summary of version 1.0 does not have: read as null.
const SINCE_1_1: [&str; 3] = ["idle_comm_ns", "start_ns", "host"];

/// The columns under construction.
#[derive(Default)]
struct Table {
    record: Vec<Option<String>>,
    step: Vec<Option<i64>>,
    seq: Vec<Option<i64>>,
    ints: [Vec<Option<i64>>; 12],
    group: Vec<Option<String>>,
    name: Vec<Option<String>>,
    dtype: Vec<Option<String>>,
    nelems: Vec<Option<i64>>,
    bytes: Vec<Option<i64>>,
    group_size: Vec<Option<i64>>,
    title: Vec<Option<String>>,
    saving_ms: Vec<Option<f64>>,
}

impl Table {
    fn row(&mut self, record: &str, step: Option<i64>) {
        self.record.push(Some(record.to_string()));
        self.step.push(step);
    }
    fn fill_collective(&mut self, c: Option<&crate::analysis::ranks::CollectiveCall>) {
        let big = |v: Option<u64>| v.map(|x| x.min(i64::MAX as u64) as i64);
        self.seq.push(c.map(|c| c.seq as i64));
        self.group.push(c.map(|c| c.group.clone()));
        self.dtype.push(c.map(|c| c.dtype.clone()));
        self.nelems.push(c.and_then(|c| big(c.nelems)));
        self.bytes.push(c.and_then(|c| big(c.bytes)));
        self.group_size
            .push(c.and_then(|c| c.group_size.map(|g| g as i64)));
        if let Some(c) = c {
            self.name.push(Some(c.name.clone()));
        }
    }
    fn fill_cause(&mut self, t: Option<&crate::analysis::ranks::TopCause>) {
        match t {
            Some(t) => {
                self.name.push(Some(t.code.clone()));
                self.title.push(Some(t.title.clone()));
                self.saving_ms.push(Some(t.saving_ms));
            }
            None => {
                if self.name.len() < self.record.len() {
                    self.name.push(None);
                }
                self.title.push(None);
                self.saving_ms.push(None);
            }
        }
    }
}

/// Read the Parquet summary in `bytes`; `shown` names it in errors.
pub fn from_parquet(shown: &str, bytes: &[u8]) -> Result<RankSummary> {
    use crate::analysis::ranks::{CollectiveCall, HostFrame, RankStep, TopCause};
    let what = format!("failed to read the summary {shown}");
    let hint = "pass files written by `tensight summarize PATH -o FILE`";
    let (cols, kv) =
        parquet::read(bytes).map_err(|e| Error::new(format!("{what}: {e}")).with_hint(hint))?;
    let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let Some(version) = get(VERSION_KEY) else {
        return Err(Error::new(format!(
            "{what}: a Parquet file, but not a tensight summary"
        ))
        .with_hint(hint));
    };
    if version.split('.').next() != SUMMARY_VERSION.split('.').next() {
        return Err(Error::new(format!(
            "{what}: summary version {version}; this tensight reads {SUMMARY_VERSION}"
        ))
        .with_hint("summarize the traces again with this version of tensight"));
    }
    let missing = |n: &str| Error::new(format!("{what}: column {n} missing or of another type"));
    let ints = |n: &str| -> Result<&Vec<Option<i64>>> {
        cols.iter()
            .find_map(|c| match (&c.data, c.name == n) {
                (parquet::Data::I64(v), true) => Some(v),
                _ => None,
            })
            .ok_or_else(|| missing(n))
    };
    let texts = |n: &str| -> Result<&Vec<Option<String>>> {
        cols.iter()
            .find_map(|c| match (&c.data, c.name == n) {
                (parquet::Data::Str(v), true) => Some(v),
                _ => None,
            })
            .ok_or_else(|| missing(n))
    };
    let saving = cols
        .iter()
        .find_map(|c| match (&c.data, c.name == "saving_ms") {
            (parquet::Data::F64(v), true) => Some(v),
            _ => None,
        })
        .ok_or_else(|| missing("saving_ms"))?;
    let (record, step, seq) = (texts("record")?, ints("step")?, ints("seq")?);
    let nulls = vec![None; record.len()];
    let mut val = Vec::with_capacity(INTS.len());
    for n in INTS {
        val.push(match ints(n) {
            Err(_) if SINCE_1_1.contains(&n) => &nulls,
            v => v?,
        });
    }
    let (group, name, dtype, title) = (
        texts("group")?,
        texts("name")?,
        texts("dtype")?,
        texts("title")?,
    );
    let (nelems, nbytes, gsize) = (ints("nelems")?, ints("bytes")?, ints("group_size")?);
    let rank = get("tensight.rank")
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| Error::new(format!("{what}: no tensight.rank")))?;
    let mut s = RankSummary {
        rank,
        world_size: get("tensight.world_size").and_then(|w| w.parse().ok()),
        source: get("tensight.source").unwrap_or_default().to_string(),
        steps: Vec::new(),
        collectives: Vec::new(),
        top_causes: Vec::new(),
        host_frames: Vec::new(),
    };
    let u32of = |v: Option<i64>| v.and_then(|x| u32::try_from(x).ok());
    let u64of = |v: Option<i64>| v.and_then(|x| u64::try_from(x).ok());
    for i in 0..record.len() {
        let int = |k: usize| val[k][i].unwrap_or(0);
        let txt = |c: &Vec<Option<String>>| c[i].clone().unwrap_or_default();
        let st =
            || u32of(step[i]).ok_or_else(|| Error::new(format!("{what}: row {i} has no step")));
        match record[i].as_deref() {
            Some("step") => s.steps.push(RankStep {
                step: st()?,
                dur_ns: int(0),
                gpu_busy_ns: int(1),
                compute_ns: int(2),
                comm_ns: int(3),
                exposed_comm_ns: int(4),
                idle_cpu_ns: int(5),
                idle_sync_ns: int(6),
                idle_data_loader_ns: int(7),
                idle_transfer_ns: int(8),
                idle_comm_ns: int(9),
            }),
            Some("collective") => s.collectives.push(CollectiveCall {
                step: st()?,
                seq: u32of(seq[i]).unwrap_or(0),
                group: txt(group),
                name: txt(name),
                dtype: txt(dtype),
                nelems: u64of(nelems[i]),
                bytes: u64of(nbytes[i]),
                group_size: u32of(gsize[i]),
                dur_ns: int(0),
                exposed_ns: int(4),
                start_ns: val[10][i],
                host: val[11][i] == Some(1),
            }),
            Some("cause") => s.top_causes.push(TopCause {
                code: txt(name),
                title: txt(title),
                saving_ms: saving[i].unwrap_or(0.0),
            }),
            Some("frame") => s.host_frames.push(HostFrame {
                name: txt(name),
                dur_ns: int(0),
            }),
            // A later minor version may add record kinds: skip them.
            _ => {}
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ranks::{CollectiveCall, HostFrame, RankStep, TopCause};

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
                idle_comm_ns: 1,
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
                start_ns: Some(3),
                host: true,
            }],
            top_causes: vec![TopCause {
                code: "C001".into(),
                title: "CPU-heavy ops".into(),
                saving_ms: 1.25,
            }],
            host_frames: vec![HostFrame {
                name: "train.py(42): augment".into(),
                dur_ns: 250,
            }],
        }
    }

    #[test]
    fn a_summary_survives_the_parquet_round_trip() {
        let s = sample();
        let bytes = to_parquet(&s);
        assert!(is_summary(&bytes));
        assert_eq!(from_parquet("x", &bytes).expect("read"), s);
        let plain = parquet::write(&[], &[]);
        let e = from_parquet("x", &plain).expect_err("no version");
        assert!(
            e.message.contains("not a tensight summary"),
            "{}",
            e.message
        );
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
