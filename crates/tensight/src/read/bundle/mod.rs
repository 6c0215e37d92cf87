//! Bundle reader: the folder `tensight run` writes.
//!
//! Input: a folder holding `manifest.json` ([`manifest::Manifest`], the typed contract
//! with the collector), the Kineto trace of the timed steps (`files.trace`), the detail
//! step's trace (`files.detail`, format 1.1: stacks, shapes and allocator events of one
//! more step, carried over to the timed steps by [`crate::model::detail`]) and the
//! execution trace (`files.execution_trace`). Output: the linked
//! [`Profile`](crate::model::Profile) with [`BundleInfo`] set. A major `format_version`
//! this reader does not know is refused (the hint says to upgrade); unknown fields are
//! ignored and fields of the wrong type read as absent, so newer minor versions load. A
//! missing or unreadable detail step or execution trace is a warning, not an error: the
//! timeline alone still makes a report. The Nsight Compute file (`files.ncu`), when
//! present, is read and aligned ([`super::ncu`]).

pub mod manifest;

use super::{execution_trace, load_file, Loaded};
use crate::error::{Error, Result};
use crate::model::{
    BundleDevice, BundleFiles, BundleHardware, BundleInfo, BundleTiming, ProgramOutcome,
};
use manifest::Manifest;
use std::path::{Path, PathBuf};

/// Name of the manifest inside a bundle (`contract.json`'s `files.manifest`).
pub const MANIFEST: &str = "manifest.json";
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

/// Every string in the manifest (the program's command, versions, device names, file
/// names) as [`crate::text::clean`] leaves it: no later stage sees a raw control
/// character from a manifest, nor a string over the cap. The program's `error` (a
/// traceback) keeps its line feeds: each of its lines is cleaned, and the report shows
/// only the last.
fn clean_strings(v: &mut serde_json::Value) {
    clean_value(v, false);
}

fn clean_value(v: &mut serde_json::Value, lines: bool) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            let cleaned = if lines {
                let kept: Vec<String> = s.split('\n').map(crate::text::cleaned).collect();
                let mut j = kept.join("\n");
                if j.len() > crate::text::MAX_STRING_BYTES {
                    j = crate::text::cleaned(&j[j.len() - crate::text::MAX_STRING_BYTES..]);
                }
                j
            } else {
                crate::text::cleaned(s)
            };
            if cleaned != *s {
                *s = cleaned;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| clean_value(v, false)),
        Value::Object(o) => o.iter_mut().for_each(|(k, v)| clean_value(v, k == "error")),
        _ => {}
    }
}

/// Largest manifest read: 16 MiB (one written by `tensight run` is a few KB).
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// Read and check the manifest of the bundle in `dir`.
pub fn read_manifest(dir: &Path) -> Result<BundleInfo> {
    let path = dir.join(MANIFEST);
    let meta = std::fs::metadata(&path).map_err(|e| {
        Error::new(format!(
            "failed to read bundle {}: {MANIFEST}: {}",
            crate::text::shown(&dir.display().to_string()),
            io_cause(&e)
        ))
    })?;
    let bytes = super::source::read_bounded(
        &path,
        &format!(
            "bundle {}: {MANIFEST}",
            crate::text::shown(&dir.display().to_string())
        ),
        MAX_MANIFEST_BYTES,
    )
    .map_err(|e| {
        if meta.is_file() {
            e
        } else {
            e.with_hint("a bundle's manifest is a small JSON file written by `tensight run`")
        }
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
    let mut v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        let cut = e.is_eof();
        let err = fail(format!(
            "{MANIFEST} is not valid JSON ({})",
            crate::text::shown(&e.to_string())
        ));
        if cut {
            err.with_hint(
                "the manifest is cut short: was the program killed while tensight wrote it?",
            )
        } else {
            err
        }
    })?;
    if !v.is_object() {
        return Err(fail(format!("{MANIFEST} is not a JSON object")));
    }
    clean_strings(&mut v);
    let m: Manifest = serde_json::from_value(v).map_err(|e| {
        fail(format!(
            "{MANIFEST} does not read as a manifest ({})",
            crate::text::shown(&e.to_string())
        ))
    })?;
    let format = &manifest::contract().format;
    match m.format.as_str() {
        f if f == format => {}
        "" => return Err(fail(format!(
            "{MANIFEST} is not a tensight bundle manifest (no \"format\")"
        ))
        .with_hint(
            "a bundle is the folder `tensight run` writes; to analyze a trace file, pass the file",
        )),
        other => {
            return Err(fail(format!(
                "{MANIFEST} has format \"{other}\", not \"{format}\""
            )))
        }
    }
    let version = m.format_version.clone();
    if version.is_empty() {
        return Err(fail(format!("{MANIFEST} has no \"format_version\"")));
    }
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
    Ok(info_of(dir, m))
}

/// The model's view of a manifest.
fn info_of(dir: &str, m: Manifest) -> BundleInfo {
    let nonempty = |s: Option<String>| s.filter(|x| !x.is_empty());
    let step_loop = m.step_loop.as_ref().map(|l| {
        let file = l.file.as_deref().unwrap_or("?");
        let file = Path::new(file)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or(file);
        format!(
            "{file}({}) in {}",
            l.line.map_or("?".into(), |n| n.to_string()),
            l.function.as_deref().unwrap_or("?")
        )
    });
    BundleInfo {
        dir: dir.to_string(),
        format_version: m.format_version,
        tensight_version: m.tensight_version,
        python_version: m.python_version,
        torch_version: m.torch_version,
        cuda_version: m.cuda_version,
        device: m.device.map(|d| BundleDevice {
            name: d.name,
            total_memory_bytes: d.total_memory_bytes,
            capability: d.capability,
            multi_processor_count: d.multi_processor_count,
        }),
        command: m.command,
        cwd: m.cwd,
        step_detection: m.step_detection,
        step_loop,
        warmup_steps: m.warmup_steps,
        steps_requested: m.steps_requested,
        steps_recorded: m.steps_recorded,
        execution_trace_step: m.detail_step.or(m.execution_trace_step),
        options: m.options,
        program: ProgramOutcome {
            status: m.program.status,
            exit_code: m.program.exit_code,
            error: nonempty(m.program.error),
        },
        files: BundleFiles {
            trace: nonempty(m.files.trace),
            detail: nonempty(m.files.detail),
            execution_trace: nonempty(m.files.execution_trace),
            ncu: nonempty(m.files.ncu),
        },
        timing: BundleTiming {
            step_ms_unprofiled: m.timing.step_ms_unprofiled,
            step_ms_unprofiled_gpu: m.timing.step_ms_unprofiled_gpu,
            step_ms_profiled: m.timing.step_ms_profiled,
        },
        hardware: m.hardware.map(|h| BundleHardware {
            status: if h.status.is_empty() {
                "unknown".into()
            } else {
                h.status
            },
            reason: h.reason,
            step: h.step,
            kernels: h.kernels,
            launches: h.launches,
            op_calls: h.op_calls,
            op_repeats: h.op_repeats,
            wall_s: h.wall_s,
        }),
    }
}

/// The path of the bundle's file `name` (from the manifest's `files`): inside `dir`
/// only. An absolute path, a `..`, or a symlink that leads out of the bundle is refused:
/// a manifest is input like any other, and must not make tensight read elsewhere.
pub fn in_bundle(dir: &Path, name: &str) -> Result<PathBuf> {
    use std::path::Component;
    let rel = Path::new(name);
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    let leaves = || {
        Error::new(format!(
            "bundle {}: its manifest names a file outside the bundle ({}); tensight reads only files inside it",
            dir.display(),
            crate::text::shown(name)
        ))
        .with_hint("a bundle's `files` are names relative to its folder, as `tensight run` writes them")
    };
    if !plain || name.is_empty() {
        return Err(leaves());
    }
    let p = dir.join(rel);
    // A symlink inside the bundle may still lead out of it.
    if let (Ok(real), Ok(root)) = (p.canonicalize(), dir.canonicalize()) {
        if !real.starts_with(&root) {
            return Err(leaves());
        }
    }
    Ok(p)
}

/// The Kineto trace of the bundle in `dir`: the file the manifest names, else a
/// `trace.json.gz` / `trace.json` lying there. An error says why there is none.
pub fn trace_file(dir: &Path, info: &BundleInfo) -> Result<PathBuf> {
    match &info.files.trace {
        Some(name) => {
            let p = in_bundle(dir, name)?;
            if p.is_file() {
                Ok(p)
            } else {
                let mut e = Error::new(format!(
                    "failed to read bundle {}: its trace {} is missing",
                    dir.display(),
                    crate::text::shown(name)
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
    let mut refused = Vec::new();
    let mut inside = |name: &String| match in_bundle(dir, name) {
        Ok(p) => Some(p),
        Err(e) => {
            refused.push(format!("{} (not read)", e.message));
            None
        }
    };
    let detail = info.files.detail.as_ref().and_then(&mut inside);
    let et_file = info
        .files
        .execution_trace
        .as_ref()
        .map(|n| (n.clone(), inside(n)));
    let ncu = info.files.ncu.as_ref().and_then(&mut inside);
    let mut loaded = match &detail {
        Some(d) if d.is_file() => super::load_with_detail(&trace, d)?,
        Some(d) => {
            let mut l = load_file(&trace)?;
            l.warnings.push(format!(
                "the bundle's detail step {} is missing: no stacks, shapes or allocator events",
                d.display()
            ));
            l
        }
        None => load_file(&trace)?,
    };
    loaded.warnings.append(&mut refused);
    if let Some((name, Some(et))) = &et_file {
        if et.is_file() {
            if let Err(e) = execution_trace::attach(&mut loaded, et) {
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
    apply_manifest(&mut loaded, info);
    if let Some(path) = ncu {
        attach_own_ncu(&mut loaded, super::ncu::read_file(&path));
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
        if loaded.profile.steps.len() > 1 {
            crate::model::steps::leave_out(&mut loaded.profile, &name);
            if info.files.detail.is_some() {
                loaded.profile.detail =
                    crate::model::detail::carry_over(&mut loaded.profile, &name);
            }
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
