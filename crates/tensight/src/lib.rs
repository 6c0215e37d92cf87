//! tensight: why a PyTorch GPU program is slow, and what to change.
//!
//! Data flows one way: [`read`] (trace bytes → [`model::Profile`]) → [`analysis`]
//! (per-step metrics, FLOPs, roofline, the shared measurements rules read) → [`rules`]
//! (each rule's findings) → [`diagnosis`] (the findings ranked by estimated saving) →
//! [`report`] (terminal, JSON, annotated trace). [`compare`] sets two diagnoses side
//! by side (`tensight diff`), for [`report::diff`] to render. Nothing imports a later
//! stage. No PyO3 and no CLI here:
//! those live in the `tensight-py` and `tensight-cli` crates.

pub mod analysis;
pub mod compare;
pub mod diagnosis;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod model;
pub mod read;
pub mod report;
pub mod rules;
#[doc(hidden)]
pub mod testing;
pub mod text;

pub use error::{Error, Result};

use std::path::Path;

/// Read, analyse and diagnose the trace at `path` (a file, a folder holding one, or a
/// bundle written by `tensight run`).
pub fn analyze_path(path: &Path) -> Result<report::Report> {
    analyze_path_with_et(path, None)
}

/// [`analyze_path`], also reading the execution trace `et` (recorded over the same
/// window) and linking its tensors to the ops.
pub fn analyze_path_with_et(path: &Path, et: Option<&Path>) -> Result<report::Report> {
    analyze_path_with(path, et, None)
}

/// [`analyze_path_with_et`], also reading the Nsight Compute CSV `ncu`
/// (`ncu --csv --page raw`, plain or gzip) and aligning its rows with the trace's kernels.
pub fn analyze_path_with(
    path: &Path,
    et: Option<&Path>,
    ncu: Option<&Path>,
) -> Result<report::Report> {
    let mut loaded = read::load(path)?;
    if let Some(et) = et {
        read::execution_trace::attach(&mut loaded, et)?;
    }
    if let Some(ncu) = ncu {
        let hw = read::ncu::read_file(ncu)?;
        read::ncu::attach(&mut loaded.profile, hw);
    }
    Ok(diagnose(loaded, path.display().to_string()))
}

/// Read, analyse and diagnose a trace held in memory (plain or gzip JSON).
pub fn analyze_bytes(name: &str, bytes: &[u8]) -> Result<report::Report> {
    let loaded = read::load_bytes(name, bytes)?;
    Ok(diagnose(loaded, name.to_string()))
}

/// Read, analyse and diagnose a bundle held in memory: its manifest and trace bytes, and
/// its execution trace and Nsight Compute CSV (plain or gzip) when it has them.
pub fn analyze_bundle_bytes(
    name: &str,
    manifest: &[u8],
    trace: &[u8],
    et: Option<&[u8]>,
    ncu: Option<&[u8]>,
) -> Result<report::Report> {
    let loaded = read::bundle::load_bytes(name, manifest, trace, et, ncu)?;
    Ok(diagnose(loaded, name.to_string()))
}

/// Analyse and diagnose a loaded profile.
pub fn diagnose(loaded: read::Loaded, input: String) -> report::Report {
    let metrics = analysis::analyze(&loaded.profile);
    let diagnosis = diagnosis::diagnose(&rules::Context::new(&loaded.profile, &metrics));
    report::Report {
        profile: loaded.profile,
        metrics,
        diagnosis,
        warnings: loaded.warnings,
        input,
    }
}
