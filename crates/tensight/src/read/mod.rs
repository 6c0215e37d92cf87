//! Readers: from a path to a [`Profile`].
//!
//! Input: a path (a Kineto trace `.json`/`.json.gz`, or a folder holding one, e.g. a
//! TensorBoard log folder). Output: a finished, linked [`Profile`] plus warnings for the
//! user. The format is sniffed from the first bytes, not the file name; inputs that are
//! profiler output of another kind (an execution trace, an Nsight Compute CSV) get an
//! error saying what they are and what to pass with them.

pub mod kineto;
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
/// the one Kineto trace it holds (searched recursively, as TensorBoard lays them out).
pub fn resolve(path: &Path) -> Result<PathBuf> {
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
            let list: Vec<String> = found.iter().take(8).map(|p| format!("  {}", p.display())).collect();
            Err(Error::new(format!(
                "failed to read {}: {} trace files in this folder; pass one of them\n{}",
                path.display(),
                found.len(),
                list.join("\n")
            ))
            .with_hint("each rank writes its own trace: analyze them one at a time"))
        }
    }
}

fn collect_traces(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
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
                || name.starts_with("et.")
                || name.contains("execution_trace");
            if is_json && !skip {
                out.push(p);
            }
        }
    }
}

/// Read and finish the profile at `path`.
pub fn load(path: &Path) -> Result<Loaded> {
    let file = resolve(path)?;
    let shown = file.display().to_string();
    let (bytes, info) = source::open(&file)?;
    let mut warnings = Vec::new();
    if let Some(e) = &info.gzip_truncated {
        warnings.push(format!(
            "the gzip stream ends early ({e}): read the {} bytes before the cut",
            bytes.len()
        ));
    }
    let mut loaded = parse(&shown, &bytes)?;
    warnings.append(&mut loaded.warnings);
    loaded.warnings = warnings;
    Ok(loaded)
}

/// Read and finish a profile from bytes already in memory (plain JSON or gzip).
pub fn load_bytes(shown: &str, bytes: &[u8]) -> Result<Loaded> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_end(&mut out)
            .map_err(|e| Error::new(format!("failed to read trace {shown}: {e}")))?;
        return parse(shown, &out);
    }
    if bytes.is_empty() {
        return Err(Error::new(format!(
            "failed to read trace {shown}: it is empty"
        )));
    }
    parse(shown, bytes)
}

fn parse(shown: &str, bytes: &[u8]) -> Result<Loaded> {
    let mut warnings = Vec::new();
    let mut profile = Profile::default();
    match sniff(bytes) {
        Sniffed::Json => {}
        Sniffed::NcuCsv => {
            return Err(Error::new(format!(
                "{shown} is an Nsight Compute CSV (per-kernel hardware counters), not a timeline trace"
            ))
            .with_hint("pass the Kineto trace of the same run to `tensight analyze`; hardware counters are read from a bundle made by `tensight run --hardware`"))
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
    match kineto::read(bytes, &mut profile, &mut warnings) {
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
    profile.meta.source = shown.to_string();
    profile.meta.json_bytes = bytes.len() as u64;
    if profile.ops.is_empty() && profile.gpu.is_empty() && profile.runtime.is_empty() {
        return Err(Error::new(format!(
            "failed to read trace {shown}: it holds no events (no ops, kernels or runtime calls)"
        ))
        .with_hint("the profiler may have stopped before the first step; profile more steps"));
    }
    model::finish(&mut profile);
    Ok(Loaded { profile, warnings })
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
