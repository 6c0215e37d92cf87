//! The bundle contract, engine side: `contract.json` (file names, format version, NVTX
//! range names; shared with the collector, which reads the same file) and
//! [`Manifest`], the typed `manifest.json`.
//!
//! The schema (field for field the collector's `tensight.bundle.Manifest`):
//!
//! ```text
//! { "format": "tensight-bundle", "format_version": "MAJOR.MINOR",
//!   "tensight_version", "python_version", "torch_version": str, "cuda_version": str|null,
//!   "device": { "name": str, "total_memory_bytes": int, "capability": [int, int],
//!               "multi_processor_count": int } | null,
//!   "command": [str], "cwd": str,
//!   "step_detection": "optimizer"|"forward"|"loop"|"whole_program",
//!   "step_loop": { "file": str, "line": int, "function": str } | null,   // since 1.1
//!   "warmup_steps", "steps_requested", "steps_recorded": int,
//!   "detail_step": int|null,        // since 1.1: ProfilerStep#k of files.detail
//!   "first_step_index": int|null,   // since 1.1: the iteration boundary 1 ended
//!   "execution_trace_step": int|null,  // 1.0 only: the ET's step in files.trace
//!   "options": {...},               // profiler options, as written
//!   "program": { "status": "completed"|"crashed"|"running", "exit_code": int|null,
//!                "error": str|null },
//!   "files": { "trace", "detail" (since 1.1), "execution_trace", "ncu": str|null },
//!   "timing": { "step_ms_unprofiled", "step_ms_unprofiled_gpu", "step_ms_profiled": [float] },
//!   "hardware": { "status", "reason", "step", "kernels", "signatures", "launches",
//!                 "op_calls", "op_repeats", "ncu_version", "wall_s" } | null }
//!                                   // written by run --hardware
//!   "distributed": { "rank": int, "local_rank": int|null, "world_size": int|null,
//!                    "backend": str|null } | null }
//!                                   // since 1.2: the rank of a distributed job whose
//!                                   // BUNDLE/rank{N}/ this is (null: a single process)
//! ```
//!
//! Reading is tolerant, as a reader of other programs' files should be: a field of the
//! wrong type reads as absent, unknown fields are kept (and written back unchanged by
//! [`Manifest::to_json`]), so manifests of newer minor versions load and survive the
//! hardware pass's rewrite.

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::OnceLock;

/// `python/tensight/contract.json`, the one place file names and range names are written.
const CONTRACT_JSON: &str = include_str!("../../../../../python/tensight/contract.json");

/// The shared contract.
#[derive(Debug, Deserialize)]
pub struct Contract {
    /// The manifest's `format`.
    pub format: String,
    /// The format version the collector writes.
    pub format_version: String,
    /// File names in a bundle.
    pub files: ContractFiles,
    /// NVTX range names of the hardware pass.
    pub nvtx: ContractNvtx,
}

/// File names in a bundle.
#[derive(Debug, Deserialize)]
pub struct ContractFiles {
    /// `manifest.json`.
    pub manifest: String,
    /// The timed steps' Kineto trace.
    pub trace: String,
    /// The detail step's Kineto trace.
    pub detail: String,
    /// The execution trace.
    pub execution_trace: String,
    /// The hardware pass's Nsight Compute CSV.
    pub ncu: String,
    /// What the hardware pass's collector says of its range.
    pub ncu_range: String,
}

/// NVTX range names.
#[derive(Debug, Deserialize)]
pub struct ContractNvtx {
    /// Around the step the hardware pass profiles.
    pub step: String,
    /// Around op calls that repeat an earlier one of that step.
    pub repeat: String,
}

/// The contract, parsed once (it is compiled in: a broken one fails the tests).
pub fn contract() -> &'static Contract {
    static C: OnceLock<Contract> = OnceLock::new();
    C.get_or_init(|| {
        serde_json::from_str(CONTRACT_JSON).unwrap_or_else(|e| {
            // contract.json is part of the source tree; `contract_parses` tests it.
            panic!("python/tensight/contract.json does not parse: {e}")
        })
    })
}

/// `manifest.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Manifest {
    /// `tensight-bundle`.
    #[serde(deserialize_with = "lenient_string")]
    pub format: String,
    /// `MAJOR.MINOR` (a number is read as its text).
    #[serde(deserialize_with = "version_text")]
    pub format_version: String,
    /// Version of the tensight that recorded it.
    #[serde(deserialize_with = "lenient")]
    pub tensight_version: Option<String>,
    /// Python version of the program.
    #[serde(deserialize_with = "lenient")]
    pub python_version: Option<String>,
    /// `torch.__version__`.
    #[serde(deserialize_with = "lenient")]
    pub torch_version: Option<String>,
    /// `torch.version.cuda`; null for CPU builds.
    #[serde(deserialize_with = "lenient")]
    pub cuda_version: Option<String>,
    /// The GPU the program used.
    #[serde(deserialize_with = "lenient")]
    pub device: Option<Device>,
    /// The program's argv.
    #[serde(deserialize_with = "command")]
    pub command: Vec<String>,
    /// Its working directory.
    #[serde(deserialize_with = "lenient")]
    pub cwd: Option<String>,
    /// `optimizer`, `forward`, `loop` or `whole_program`.
    #[serde(deserialize_with = "lenient")]
    pub step_detection: Option<String>,
    /// The loop whose iterations are the steps (`loop`).
    #[serde(deserialize_with = "lenient")]
    pub step_loop: Option<StepLoop>,
    /// Steps run before the window.
    #[serde(deserialize_with = "lenient")]
    pub warmup_steps: Option<u64>,
    /// `--steps`.
    #[serde(deserialize_with = "lenient")]
    pub steps_requested: Option<u64>,
    /// Steps recorded.
    #[serde(deserialize_with = "lenient")]
    pub steps_recorded: Option<u64>,
    /// The detail step's `ProfilerStep#k` (in `files.detail`).
    #[serde(deserialize_with = "lenient")]
    pub detail_step: Option<u64>,
    /// The program's iteration (0-based) that the first counted step boundary ended.
    #[serde(deserialize_with = "lenient")]
    pub first_step_index: Option<u64>,
    /// Format 1.0: the step of `files.trace` that carried the execution trace.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub execution_trace_step: Option<u64>,
    /// Profiler options, as written.
    #[serde(deserialize_with = "object")]
    pub options: Value,
    /// How the program ended.
    #[serde(deserialize_with = "lenient_default")]
    pub program: Program,
    /// The bundle's files.
    #[serde(deserialize_with = "lenient_default")]
    pub files: Files,
    /// Step times the collector measured.
    #[serde(deserialize_with = "lenient_default")]
    pub timing: Timing,
    /// The hardware pass's record.
    #[serde(deserialize_with = "lenient")]
    pub hardware: Option<Hardware>,
    /// The rank of a distributed job that recorded it (since 1.2).
    #[serde(deserialize_with = "lenient")]
    pub distributed: Option<Distributed>,
    /// Fields this version does not know, kept for the rewrite.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The GPU (`torch.cuda.get_device_properties`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Device {
    /// `NVIDIA H200`.
    #[serde(deserialize_with = "lenient_string")]
    pub name: String,
    /// Global memory, bytes.
    #[serde(deserialize_with = "lenient")]
    pub total_memory_bytes: Option<u64>,
    /// `[major, minor]`.
    #[serde(deserialize_with = "lenient")]
    pub capability: Option<[i64; 2]>,
    /// Streaming multiprocessors.
    #[serde(deserialize_with = "lenient")]
    pub multi_processor_count: Option<u32>,
}

/// A loop of the program's source.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StepLoop {
    /// Source file, as the interpreter named it.
    #[serde(deserialize_with = "lenient")]
    pub file: Option<String>,
    /// Line of the loop's head.
    #[serde(deserialize_with = "lenient")]
    pub line: Option<u64>,
    /// Function holding it (`<module>` at the top level).
    #[serde(deserialize_with = "lenient")]
    pub function: Option<String>,
}

/// How the program ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Program {
    /// `completed`, `crashed`, `running`.
    #[serde(deserialize_with = "lenient_string")]
    pub status: String,
    /// Exit code, when known.
    #[serde(deserialize_with = "lenient")]
    pub exit_code: Option<i64>,
    /// The exception or signal, for a crash.
    #[serde(deserialize_with = "lenient")]
    pub error: Option<String>,
}

impl Default for Program {
    fn default() -> Self {
        Program {
            status: "unknown".into(),
            exit_code: None,
            error: None,
        }
    }
}

/// The bundle's files, relative to its folder.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Files {
    /// The timed steps' Kineto trace.
    #[serde(deserialize_with = "lenient")]
    pub trace: Option<String>,
    /// The detail step's Kineto trace.
    #[serde(deserialize_with = "lenient")]
    pub detail: Option<String>,
    /// The execution trace.
    #[serde(deserialize_with = "lenient")]
    pub execution_trace: Option<String>,
    /// The Nsight Compute CSV.
    #[serde(deserialize_with = "lenient")]
    pub ncu: Option<String>,
}

/// Step times the collector measured, ms.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Timing {
    /// Warm-up steps, host clock.
    #[serde(deserialize_with = "floats")]
    pub step_ms_unprofiled: Vec<f64>,
    /// Warm-up steps, CUDA events.
    #[serde(deserialize_with = "floats")]
    pub step_ms_unprofiled_gpu: Vec<f64>,
    /// Timed steps under the profiler, host clock.
    #[serde(deserialize_with = "floats")]
    pub step_ms_profiled: Vec<f64>,
}

/// A rank of a distributed job (`RANK`, `LOCAL_RANK`, `WORLD_SIZE` of torchrun's
/// environment, then `torch.distributed` once initialised).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Distributed {
    /// Global rank.
    #[serde(deserialize_with = "lenient")]
    pub rank: Option<u64>,
    /// Rank on its node.
    #[serde(deserialize_with = "lenient")]
    pub local_rank: Option<u64>,
    /// Ranks in the job.
    #[serde(deserialize_with = "lenient")]
    pub world_size: Option<u64>,
    /// `nccl`, `gloo`, ...; null until the program initialised `torch.distributed`.
    #[serde(deserialize_with = "lenient")]
    pub backend: Option<String>,
}

/// The hardware pass's record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Hardware {
    /// `recorded`, `skipped` or `failed`.
    #[serde(deserialize_with = "lenient_string")]
    pub status: String,
    /// Why it was skipped or failed.
    #[serde(deserialize_with = "lenient")]
    pub reason: Option<String>,
    /// The step profiled.
    #[serde(deserialize_with = "lenient")]
    pub step: Option<u64>,
    /// Kernel rows ncu wrote.
    #[serde(deserialize_with = "lenient")]
    pub kernels: Option<u64>,
    /// Distinct (kernel, grid, block) signatures among them.
    #[serde(deserialize_with = "lenient")]
    pub signatures: Option<u64>,
    /// `every` or `repeated op calls skipped`.
    #[serde(deserialize_with = "lenient")]
    pub launches: Option<String>,
    /// Op calls in the profiled step.
    #[serde(deserialize_with = "lenient")]
    pub op_calls: Option<u64>,
    /// Of them, skipped as repeats.
    #[serde(deserialize_with = "lenient")]
    pub op_repeats: Option<u64>,
    /// `ncu --version`'s last line.
    #[serde(deserialize_with = "lenient")]
    pub ncu_version: Option<String>,
    /// Wall time of the pass, seconds.
    #[serde(deserialize_with = "lenient")]
    pub wall_s: Option<f64>,
}

impl Manifest {
    /// The manifest as the collector writes it (indented JSON, a final newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

/// Any value of the right type, else absent.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

/// A struct of the right shape, else its default.
fn lenient_default<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(lenient(d)?.unwrap_or_default())
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(lenient::<D, String>(d)?.unwrap_or_default())
}

fn version_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    })
}

fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => a
            .into_iter()
            .map(|x| match x {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .collect(),
        Value::String(s) => vec![s],
        _ => Vec::new(),
    })
}

fn object<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(if v.is_object() {
        v
    } else {
        Value::Object(Map::new())
    })
}

fn floats<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => a.iter().filter_map(Value::as_f64).collect(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_parses() {
        let c = contract();
        assert_eq!(c.format, "tensight-bundle");
        assert!(c.format_version.starts_with("1."));
        assert_eq!(c.files.manifest, "manifest.json");
        assert!(!c.nvtx.step.is_empty() && !c.nvtx.repeat.is_empty());
    }

    #[test]
    fn unknown_fields_survive_a_rewrite() {
        let m: Manifest = serde_json::from_str(
            r#"{"format": "tensight-bundle", "format_version": 1.3, "future": {"x": [1]},
                "steps_recorded": "five", "program": 7, "timing": {"step_ms_profiled": [1.5, "x"]}}"#,
        )
        .unwrap();
        assert_eq!(m.format_version, "1.3");
        assert_eq!(m.steps_recorded, None);
        assert_eq!(m.program.status, "unknown");
        assert_eq!(m.timing.step_ms_profiled, [1.5]);
        let back: Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(back["future"]["x"][0], 1);
    }

    #[test]
    fn distributed_reads_and_is_optional() {
        let m: Manifest = serde_json::from_str(
            r#"{"format": "tensight-bundle", "format_version": "1.2",
                "distributed": {"rank": 1, "local_rank": 1, "world_size": 2, "backend": "gloo"}}"#,
        )
        .unwrap();
        let d = m.distributed.unwrap();
        assert_eq!((d.rank, d.world_size), (Some(1), Some(2)));
        assert_eq!(d.backend.as_deref(), Some("gloo"));
        let old: Manifest =
            serde_json::from_str(r#"{"format": "tensight-bundle", "format_version": "1.1"}"#)
                .unwrap();
        assert_eq!(old.distributed, None);
        let odd: Manifest = serde_json::from_str(r#"{"distributed": "rank 0"}"#).unwrap();
        assert_eq!(odd.distributed, None);
    }
}
