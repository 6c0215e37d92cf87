//! Bundle reader: the folder `tensight run` writes.
//!
//! Input: a folder holding `manifest.json` (`{"format": "tensight-bundle",
//! "format_version": "MAJOR.MINOR", ...}`, written by the Python collector), the Kineto
//! trace it names (`files.trace`) and, when recorded, the execution trace
//! (`files.execution_trace`). Output: the linked [`Profile`](crate::model::Profile) with
//! [`BundleInfo`] set. A major `format_version` this reader does not know is refused
//! (the hint says to upgrade); unknown fields are ignored and fields of the wrong type
//! read as absent, so newer minor versions load. A missing or unreadable execution
//! trace is a warning, not an error: the timeline alone still makes a report.
//! The Nsight Compute file (`files.ncu`), when present, is read and aligned
//! ([`super::ncu`]).

use super::{execution_trace, load_file, Loaded};
use crate::error::{Error, Result};
use crate::model::{
    BundleDevice, BundleFiles, BundleHardware, BundleInfo, BundleTiming, ProgramOutcome,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Name of the manifest inside a bundle.
pub const MANIFEST: &str = "manifest.json";
/// The manifest's `format`.
pub const FORMAT: &str = "tensight-bundle";
/// The bundle format version this tensight writes; it reads every `1.x`.
pub const FORMAT_VERSION: &str = "1.0";
const READS_MAJOR: u64 = 1;

/// The bundle folder `path` names: the folder itself when it holds a manifest, or the
/// folder of a `manifest.json` given directly. `None` when `path` is no bundle.
pub fn bundle_dir(path: &Path) -> Option<PathBuf> {
    if path.is_dir() {
        return path.join(MANIFEST).is_file().then(|| path.to_path_buf());
    }
    if path.file_name().and_then(|n| n.to_str()) == Some(MANIFEST) && path.is_file() {
        let parent = path.parent()?;
        return Some(if parent.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            parent.to_path_buf()
        });
    }
    None
}

/// Read and check the manifest of the bundle in `dir`.
pub fn read_manifest(dir: &Path) -> Result<BundleInfo> {
    let path = dir.join(MANIFEST);
    let bytes = std::fs::read(&path).map_err(|e| {
        Error::new(format!(
            "failed to read bundle {}: {MANIFEST}: {}",
            dir.display(),
            io_cause(&e)
        ))
    })?;
    parse_manifest(&dir.display().to_string(), &bytes)
}

fn io_cause(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string().to_lowercase(),
    }
}

/// Parse manifest bytes; `dir` is the bundle folder as shown in messages.
pub fn parse_manifest(dir: &str, bytes: &[u8]) -> Result<BundleInfo> {
    let fail = |why: String| Error::new(format!("failed to read bundle {dir}: {why}"));
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        let cut = e.is_eof();
        let err = fail(format!("{MANIFEST} is not valid JSON ({e})"));
        if cut {
            err.with_hint(
                "the manifest is cut short: was the program killed while tensight wrote it?",
            )
        } else {
            err
        }
    })?;
    let Some(obj) = v.as_object() else {
        return Err(fail(format!("{MANIFEST} is not a JSON object")));
    };
    match obj.get("format").and_then(Value::as_str) {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(fail(format!(
                "{MANIFEST} has format \"{other}\", not \"{FORMAT}\""
            )))
        }
        None => return Err(fail(format!(
            "{MANIFEST} is not a tensight bundle manifest (no \"format\")"
        ))
        .with_hint(
            "a bundle is the folder `tensight run` writes; to analyze a trace file, pass the file",
        )),
    }
    let version = match obj.get("format_version") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(fail(format!("{MANIFEST} has no \"format_version\""))),
    };
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.trim().parse::<u64>().ok());
    match major {
        Some(READS_MAJOR) => {}
        Some(m) if m > READS_MAJOR => {
            return Err(fail(format!(
                "bundle format version {version} is newer than this tensight ({}) reads ({READS_MAJOR}.x)",
                env!("CARGO_PKG_VERSION")
            ))
            .with_hint("upgrade tensight: pip install --upgrade tensight"))
        }
        _ => {
            return Err(fail(format!(
                "unknown bundle format version \"{version}\" (this tensight {} reads {READS_MAJOR}.x)",
                env!("CARGO_PKG_VERSION")
            ))
            .with_hint("upgrade tensight (pip install --upgrade tensight), or record the bundle again with this version"))
        }
    }
    let s = |o: &Value, k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
    let u = |o: &Value, k: &str| o.get(k).and_then(Value::as_u64);
    let device = v
        .get("device")
        .filter(|d| d.is_object())
        .map(|d| BundleDevice {
            name: s(d, "name").unwrap_or_default(),
            total_memory_bytes: u(d, "total_memory_bytes"),
            capability: d
                .get("capability")
                .and_then(Value::as_array)
                .and_then(|c| Some([c.first()?.as_i64()?, c.get(1)?.as_i64()?])),
            multi_processor_count: u(d, "multi_processor_count")
                .and_then(|n| u32::try_from(n).ok()),
        });
    let command = match v.get("command") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    let empty = Value::Null;
    let program = v.get("program").unwrap_or(&empty);
    let files = v.get("files").unwrap_or(&empty);
    let timing = v.get("timing").unwrap_or(&empty);
    let floats = |k: &str| -> Vec<f64> {
        timing
            .get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    Ok(BundleInfo {
        dir: dir.to_string(),
        format_version: version,
        tensight_version: s(&v, "tensight_version"),
        python_version: s(&v, "python_version"),
        torch_version: s(&v, "torch_version"),
        cuda_version: s(&v, "cuda_version"),
        device,
        command,
        cwd: s(&v, "cwd"),
        step_detection: s(&v, "step_detection"),
        warmup_steps: u(&v, "warmup_steps"),
        steps_requested: u(&v, "steps_requested"),
        steps_recorded: u(&v, "steps_recorded"),
        execution_trace_step: u(&v, "execution_trace_step"),
        options: v
            .get("options")
            .filter(|o| o.is_object())
            .cloned()
            .unwrap_or(Value::Object(Default::default())),
        program: ProgramOutcome {
            status: s(program, "status").unwrap_or_else(|| "unknown".into()),
            exit_code: program.get("exit_code").and_then(Value::as_i64),
            error: s(program, "error").filter(|e| !e.is_empty()),
        },
        files: BundleFiles {
            trace: s(files, "trace").filter(|f| !f.is_empty()),
            execution_trace: s(files, "execution_trace").filter(|f| !f.is_empty()),
            ncu: s(files, "ncu").filter(|f| !f.is_empty()),
        },
        timing: BundleTiming {
            step_ms_unprofiled: floats("step_ms_unprofiled"),
            step_ms_unprofiled_gpu: floats("step_ms_unprofiled_gpu"),
            step_ms_profiled: floats("step_ms_profiled"),
        },
        hardware: v
            .get("hardware")
            .filter(|h| h.is_object())
            .map(|h| BundleHardware {
                status: s(h, "status").unwrap_or_else(|| "unknown".into()),
                reason: s(h, "reason"),
                step: u(h, "step"),
                kernels: u(h, "kernels"),
                launches: s(h, "launches"),
                op_calls: u(h, "op_calls"),
                op_repeats: u(h, "op_repeats"),
                wall_s: h.get("wall_s").and_then(Value::as_f64),
            }),
    })
}

/// The Kineto trace of the bundle in `dir`: the file the manifest names, else a
/// `trace.json.gz` / `trace.json` lying there. An error says why there is none.
pub fn trace_file(dir: &Path, info: &BundleInfo) -> Result<PathBuf> {
    match &info.files.trace {
        Some(name) => {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                let mut e = Error::new(format!(
                    "failed to read bundle {}: its trace {name} is missing",
                    dir.display()
                ));
                e.hint = Some(match &info.program.error {
                    Some(err) => format!("the program {} ({err}); the profiler may not have written the trace", status_words(info)),
                    None => "was the program killed before the profiler wrote it, or the bundle copied without it?".into(),
                });
                Err(e)
            }
        }
        None => ["trace.json.gz", "trace.json"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| nothing_recorded(info)),
    }
}

fn status_words(info: &BundleInfo) -> String {
    match info.program.status.as_str() {
        "crashed" => "crashed".into(),
        "running" => "did not finish".into(),
        "completed" => match info.program.exit_code {
            Some(c) if c != 0 => format!("exited with code {c}"),
            _ => "completed".into(),
        },
        other => format!("ended with status \"{other}\""),
    }
}

/// Why a bundle holds no trace, as an error for the user.
pub fn nothing_recorded(info: &BundleInfo) -> Error {
    let dir = &info.dir;
    let window = match (info.warmup_steps, info.steps_requested) {
        (Some(w), Some(n)) => format!(" ({w} warm-up + {n} recorded steps requested)"),
        _ => String::new(),
    };
    let found = match info.step_detection.as_deref() {
        Some("optimizer") => "optimizer.step() calls",
        Some("forward") => "top-level module forward calls",
        Some("whole_program") => "the whole program (no steps found)",
        _ => "steps",
    };
    match info.program.status.as_str() {
        "crashed" => Error::new(format!(
            "no trace in bundle {dir}: the program crashed before a step was recorded{}",
            info.program
                .error
                .as_ref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ))
        .with_hint("fix the error above, or record earlier steps with a smaller --warmup"),
        "running" => Error::new(format!(
            "no trace in bundle {dir}: the program ended before tensight could write one"
        ))
        .with_hint("was it killed (Ctrl-C, out of memory)? a killed program leaves only what was written"),
        _ => Error::new(format!(
            "no trace in bundle {dir}: the program {} before tensight recorded a step{window}; steps counted by {found}",
            status_words(info)
        ))
        .with_hint("run more iterations, or pass a smaller --warmup/--steps; a program without optimizer.step() or module forward calls is recorded as one window"),
    }
}

/// Read the bundle in `dir`: manifest, Kineto trace, execution trace when recorded.
pub fn load(dir: &Path) -> Result<Loaded> {
    let info = read_manifest(dir)?;
    let trace = trace_file(dir, &info)?;
    let mut loaded = load_file(&trace)?;
    if let Some(name) = &info.files.execution_trace {
        let et = dir.join(name);
        if et.is_file() {
            if let Err(e) = execution_trace::attach(&mut loaded, &et) {
                loaded.warnings.push(format!(
                    "execution trace not used (tensor details unavailable): {}",
                    e.message
                ));
            }
        } else {
            loaded.warnings.push(format!(
                "the bundle's execution trace {name} is missing: tensor details are unavailable"
            ));
        }
    }
    let ncu = info.files.ncu.clone();
    apply_manifest(&mut loaded, info);
    if let Some(name) = ncu {
        attach_own_ncu(&mut loaded, super::ncu::read_file(&dir.join(&name)));
    }
    Ok(loaded)
}

/// A bundle held in memory (the demo's embedded ones): its manifest and trace bytes, and
/// its execution trace and Nsight Compute CSV (plain or gzip) when it has them.
pub fn load_bytes(
    name: &str,
    manifest: &[u8],
    trace: &[u8],
    et: Option<&[u8]>,
    ncu: Option<&[u8]>,
) -> Result<Loaded> {
    let info = parse_manifest(name, manifest)?;
    let mut loaded = super::load_bytes(name, trace)?;
    if let Some(et) = et {
        let shown = format!("{name} (execution trace)");
        if let Err(e) = execution_trace::attach_bytes(&mut loaded, &shown, et) {
            loaded.warnings.push(format!(
                "execution trace not used (tensor details unavailable): {}",
                e.message
            ));
        }
    }
    apply_manifest(&mut loaded, info);
    if let Some(ncu) = ncu {
        attach_own_ncu(
            &mut loaded,
            super::ncu::parse_bytes(&format!("{name} (ncu)"), ncu),
        );
    }
    Ok(loaded)
}

/// The bundle's own hardware pass (its manifest describes that run), or a warning.
fn attach_own_ncu(loaded: &mut Loaded, hw: Result<crate::model::hardware::Hardware>) {
    match hw {
        Ok(hw) => super::ncu::attach(
            &mut loaded.profile,
            crate::model::hardware::Hardware {
                from_bundle: true,
                ..hw
            },
        ),
        Err(e) => loaded.warnings.push(format!(
            "hardware counters not used (rules that need them are skipped): {}",
            e.message
        )),
    }
}

/// Attach the manifest to a loaded profile; the step that carried the execution-trace
/// observer (its ~40 µs per op would distort timing) leaves the analysed steps.
fn apply_manifest(loaded: &mut Loaded, info: BundleInfo) {
    if let Some(k) = info.execution_trace_step {
        let name = format!("ProfilerStep#{k}");
        let steps = &mut loaded.profile.steps;
        if steps.len() > 1 {
            steps.retain(|s| s.name != name);
        }
    }
    loaded.profile.bundle = Some(info);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerant_manifest() {
        let m = br#"{"format": "tensight-bundle", "format_version": "1.7", "future": {"x": 1},
            "torch_version": 2, "command": ["python", "-m", "x"], "steps_recorded": "five",
            "device": {"name": "NVIDIA H200", "capability": [9, 0]},
            "program": {"status": "crashed", "exit_code": 1, "error": "RuntimeError: boom"},
            "files": {"trace": "trace.json.gz", "execution_trace": null}}"#;
        let b = parse_manifest("b", m).unwrap();
        assert_eq!(b.format_version, "1.7");
        assert_eq!(b.torch_version, None);
        assert_eq!(b.steps_recorded, None);
        assert_eq!(b.command, ["python", "-m", "x"]);
        assert_eq!(b.device.as_ref().unwrap().capability, Some([9, 0]));
        assert!(b.crashed());
        assert_eq!(b.files.trace.as_deref(), Some("trace.json.gz"));
        assert_eq!(b.files.execution_trace, None);
    }

    #[test]
    fn refused_manifests() {
        let e = parse_manifest(
            "b",
            br#"{"format": "tensight-bundle", "format_version": "2.0"}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("format version 2.0 is newer"), "{e}");
        assert!(e.hint.unwrap().contains("upgrade"));
        let e =
            parse_manifest("b", br#"{"format": "other", "format_version": "1.0"}"#).unwrap_err();
        assert!(e.message.contains("format \"other\""), "{e}");
        let e = parse_manifest("b", br#"{"format": "tensight-bundle"}"#).unwrap_err();
        assert!(e.message.contains("no \"format_version\""), "{e}");
        let e = parse_manifest("b", br#"{"format": "tensight-bun"#).unwrap_err();
        assert!(
            e.message
                .starts_with("failed to read bundle b: manifest.json is not valid JSON"),
            "{e}"
        );
        assert!(parse_manifest("b", b"[]").is_err());
        let e = parse_manifest(
            "b",
            br#"{"format": "tensight-bundle", "format_version": "x"}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("unknown bundle format version"), "{e}");
    }

    #[test]
    fn why_nothing_was_recorded() {
        let mut b = BundleInfo {
            dir: "d".into(),
            warmup_steps: Some(3),
            steps_requested: Some(5),
            step_detection: Some("optimizer".into()),
            ..Default::default()
        };
        b.program.status = "completed".into();
        let e = nothing_recorded(&b);
        assert!(e.message.contains("3 warm-up + 5"), "{e}");
        b.program.status = "crashed".into();
        b.program.error = Some("ValueError: x".into());
        assert!(nothing_recorded(&b).message.ends_with("ValueError: x"));
    }
}
