//! Readers: from a path to a [`Profile`].
//!
//! Input: a path (a Kineto trace `.json`/`.json.gz`, a folder holding one, e.g. a
//! TensorBoard log folder, or a bundle folder written by `tensight run`: [`bundle`]).
//! An execution trace is read only with a bundle or when asked
//! ([`execution_trace::attach`]). Output: a finished, linked [`Profile`] plus warnings for the
//! user. The format is sniffed from the first bytes, not the file name; inputs that are
//! profiler output of another kind (an execution trace, an Nsight Compute CSV) get an
//! error saying what they are and what to pass with them.

pub mod bundle;
pub mod execution_trace;
pub mod kineto;
pub mod limits;
pub mod ncu;
pub mod ranks;
pub mod scan;
pub mod source;

use crate::error::{Error, Result};
use crate::model::{self, Profile};
use std::path::{Path, PathBuf};

/// A profile with what the reader wants the user to know.
pub struct Loaded {
    /// The finished model.
    pub profile: Profile,
    /// Notes for stderr and the report header (truncation and the like).
    pub warnings: Vec<String>,
}

/// What the first bytes say a buffer is.
#[derive(Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// JSON (object or array): try the Kineto reader.
    Json,
    /// An Nsight Compute CSV export.
    NcuCsv,
    /// Something else.
    Unknown,
}

/// Guess the format from the first bytes.
pub fn sniff(buf: &[u8]) -> Sniffed {
    let i = scan::skip_ws(buf, 0);
    let head = &buf[i..buf.len().min(i + 4096)];
    if head.starts_with(b"{") || head.starts_with(b"[") {
        Sniffed::Json
    } else if head.starts_with(b"\"ID\"")
        || ((head.starts_with(b"==PROF==")
            || head.starts_with(b"==WARNING==")
            || head.starts_with(b"==ERROR=="))
            && memchr::memmem::find(head, b"\"ID\",").is_some())
    {
        Sniffed::NcuCsv
    } else {
        Sniffed::Unknown
    }
}

/// Find the trace to read under `path`: the path itself if it is a file; in a folder,
/// the one Kineto trace it holds (searched recursively, as TensorBoard lays them out);
/// in a bundle, the trace its manifest names.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    if let Some(dir) = bundle::bundle_dir(path) {
        return bundle::trace_file(&dir, &bundle::read_manifest(&dir)?);
    }
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let mut found = Vec::new();
    collect_traces(path, &mut found, 0);
    found.sort();
    match found.len() {
        0 => Err(Error::new(format!(
            "failed to read {}: no trace file (*.json, *.json.gz) in this folder",
            path.display()
        ))
        .with_hint("torch.profiler writes traces with on_trace_ready=tensorboard_trace_handler(DIR) or prof.export_chrome_trace(FILE)")),
        1 => Ok(found.remove(0)),
        _ => {
            let list: Vec<String> = found
                .iter()
                .take(4)
                .map(|p| p.strip_prefix(path).unwrap_or(p).display().to_string())
                .collect();
            let more = if found.len() > 4 { ", ..." } else { "" };
            Err(Error::new(format!(
                "failed to read {}: {} trace files in this folder ({}{more}); pass one of them",
                path.display(),
                found.len(),
                list.join(", ")
            ))
            .with_hint("each rank writes its own trace: `tensight analyze DIR` on the command line compares the ranks of one job (docs/distributed.md); here, analyze them one at a time"))
        }
    }
}

pub(crate) fn collect_traces(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 6 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_traces(&p, out, depth + 1);
        } else {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let is_json = name.ends_with(".json") || name.ends_with(".json.gz");
            let skip = name == "manifest.json"
                || name == "report.json"
                || name.starts_with("et.")
                || name.contains("execution_trace");
            if is_json && !skip {
                out.push(p);
            }
        }
    }
}

/// Read and finish the profile at `path` (a trace, a folder holding one, or a bundle).
pub fn load(path: &Path) -> Result<Loaded> {
    if let Some(dir) = bundle::bundle_dir(path) {
        return bundle::load(&dir);
    }
    load_file(&resolve(path)?)
}

/// Read and finish the Kineto trace in the file `file`.
fn load_file(file: &Path) -> Result<Loaded> {
    let shown = file.display().to_string();
    let (bytes, info) = source::open(file)?;
    let mut warnings = Vec::new();
    if let Some(e) = &info.gzip_truncated {
        warnings.push(format!(
            "the gzip stream ends early ({e}): read the {} bytes before the cut",
            bytes.len()
        ));
    }
    let mut loaded = parse(&shown, &bytes, &|s, e| bytes.release(s, e)).map_err(|mut err| {
        if let Some(e) = &info.gzip_truncated {
            err.message += &format!("; the gzip stream ends early ({e})");
            err.hint = Some(INCOMPLETE.to_string());
        }
        err
    })?;
    warnings.append(&mut loaded.warnings);
    loaded.warnings = warnings;
    Ok(loaded)
}

/// Read the Kineto traces `trace` and `detail` (a second profiler session of the same
/// process: the bundle's detail step) into one profile, and finish it. A detail file
/// that cannot be read is a warning.
pub(crate) fn load_with_detail(trace: &Path, detail: &Path) -> Result<Loaded> {
    let shown = trace.display().to_string();
    let (bytes, info) = source::open(trace)?;
    let mut warnings = Vec::new();
    if let Some(e) = &info.gzip_truncated {
        warnings.push(format!(
            "the gzip stream ends early ({e}): read the {} bytes before the cut",
            bytes.len()
        ));
    }
    let mut profile = Profile::default();
    read_into(
        &shown,
        &bytes,
        &|s, e| bytes.release(s, e),
        &mut profile,
        &mut warnings,
    )?;
    drop(bytes);
    let shown_detail = detail.display().to_string();
    let read_detail = |profile: &mut Profile, warnings: &mut Vec<String>| -> Result<()> {
        let (bytes, info) = source::open(detail)?;
        if let Some(e) = &info.gzip_truncated {
            return Err(Error::new(format!("the gzip stream ends early ({e})")));
        }
        read_into(
            &shown_detail,
            &bytes,
            &|s, e| bytes.release(s, e),
            profile,
            warnings,
        )
    };
    if let Err(e) = read_detail(&mut profile, &mut warnings) {
        warnings.push(format!(
            "the detail step {} not used (no stacks, shapes or allocator events): {}",
            detail.display(),
            e.message
        ));
    }
    model::finish(&mut profile);
    Ok(Loaded { profile, warnings })
}

/// Read and finish a profile from bytes already in memory (plain JSON or gzip).
pub fn load_bytes(shown: &str, bytes: &[u8]) -> Result<Loaded> {
    if let Some(out) = gunzipped(&format!("trace {shown}"), bytes) {
        return parse(shown, &out?, &|_, _| {});
    }
    if bytes.is_empty() {
        return Err(Error::new(format!(
            "failed to read trace {shown}: it is empty"
        )));
    }
    parse(shown, bytes, &|_, _| {})
}

/// In-memory bytes that start like gzip, decompressed (within the [`limits::Limits`] in
/// force); `None` when they do not start like gzip. A stream cut short keeps what came
/// before the cut.
pub(crate) fn gunzipped(what: &str, bytes: &[u8]) -> Option<Result<Vec<u8>>> {
    bytes
        .starts_with(&[0x1f, 0x8b])
        .then(|| source::inflate(what, bytes, limits::Limits::current()).map(|(out, _cut)| out))
}

const INCOMPLETE: &str =
    "the file is incomplete: was the profiler killed while writing it, or the copy cut short?";

/// `release(start, end)` is told when the bytes in that range have been parsed
/// ([`source::Bytes::release`]).
fn parse(shown: &str, bytes: &[u8], release: &(dyn Fn(usize, usize) + Sync)) -> Result<Loaded> {
    let mut warnings = Vec::new();
    let mut profile = Profile::default();
    read_into(shown, bytes, release, &mut profile, &mut warnings)?;
    model::finish(&mut profile);
    Ok(Loaded { profile, warnings })
}

/// Read the Kineto trace in `bytes` into `profile` (not finished: a second trace of the
/// same process may follow).
fn read_into(
    shown: &str,
    bytes: &[u8],
    release: &(dyn Fn(usize, usize) + Sync),
    profile: &mut Profile,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let had_events = !profile.ops.is_empty();
    match sniff(bytes) {
        Sniffed::Json => {}
        Sniffed::NcuCsv => {
            return Err(Error::new(format!(
                "{shown} is an Nsight Compute CSV (per-kernel hardware counters), not a timeline trace"
            ))
            .with_hint("pass the Kineto trace of the same run (the .json or .json.gz written by torch.profiler) to `tensight analyze`"))
        }
        Sniffed::Unknown => {
            return Err(Error::new(format!(
                "failed to read trace {shown}: not JSON (first bytes: {})",
                printable_head(bytes)
            ))
            .with_hint("tensight reads PyTorch profiler traces: the .json or .json.gz written by torch.profiler"))
        }
    }
    use kineto::NotATrace;
    match kineto::read_releasing(bytes, release, profile, warnings) {
        Ok(()) => {}
        Err(NotATrace::NotJson) => {
            return Err(Error::new(format!("failed to read trace {shown}: not JSON")));
        }
        Err(NotATrace::ExecutionTrace(schema)) => {
            return Err(Error::new(format!(
                "{shown} is a PyTorch execution trace (schema {schema}), which has no timings"
            ))
            .with_hint("pass the Kineto trace recorded with it (the .json from torch.profiler); tensight links the two through Record function ids"))
        }
        Err(NotATrace::NoTraceEvents(keys)) => {
            let keys: Vec<String> = keys.into_iter().take(6).collect();
            if scan::value_end(bytes, scan::skip_ws(bytes, 0)).is_err() {
                return Err(Error::new(format!(
                    "failed to read trace {shown}: the JSON ends early, at byte {}, before \"traceEvents\" (top-level keys read: {})",
                    bytes.len(),
                    keys.join(", ")
                ))
                .with_hint(INCOMPLETE));
            }
            return Err(Error::new(format!(
                "failed to read trace {shown}: JSON but not a trace (no \"traceEvents\"; top-level keys: {})",
                if keys.is_empty() { "none".to_string() } else { keys.join(", ") }
            ))
            .with_hint("tensight reads PyTorch profiler (Kineto) traces: {\"traceEvents\": [...]}"));
        }
        Err(NotATrace::Broken(at)) => {
            return Err(Error::new(format!(
                "failed to read trace {shown}: JSON broken at byte {at} before any event"
            )))
        }
    }
    if !had_events {
        profile.meta.source = shown.to_string();
    }
    profile.meta.json_bytes += bytes.len() as u64;
    if profile.ops.is_empty() && profile.gpu.is_empty() && profile.runtime.is_empty() {
        let c = &profile.counters.counters;
        if let Some(bad) = c.iter().find(|c| c.name == "unparseable_event") {
            return Err(Error::new(format!(
                "failed to read trace {shown}: JSON but not a trace (no ops, kernels or runtime calls; {} array element{})",
                bad.count,
                if bad.count == 1 { " is not a trace event" } else { "s are not trace events" }
            ))
            .with_hint("tensight reads PyTorch profiler (Kineto) traces: {\"traceEvents\": [{\"ph\": \"X\", ...}, ...]}"));
        }
        return Err(Error::new(format!(
            "failed to read trace {shown}: it holds no events (no ops, kernels or runtime calls)"
        ))
        .with_hint("the profiler may have stopped before the first step; profile more steps"));
    }
    Ok(())
}

fn printable_head(b: &[u8]) -> String {
    let head: String = b
        .iter()
        .take(16)
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '.'
            }
        })
        .collect();
    format!("{head:?}")
}
