//! Python bindings: the `tensight._native` module.
//!
//! `main(argv)` runs the command line (the `tensight` console script calls it, so one
//! wheel carries both the CLI and the API); `analyze_json(path)` and `demo_json()`
//! return the JSON report (schema in the engine's `report::json` module) as a string,
//! which `tensight.analyze()` turns into a dict; `report_text(path)` returns the text
//! report without colour (`p.report()`); `choose_loop(candidates)` is the engine's step
//! loop choice for the collector's live loop watch; `rank_inputs(path)` lists the ranks
//! of a multi-rank folder for `tensight.distributed`. `path` may be a trace file, a folder holding
//! one, or a bundle folder. No logic lives here.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Run the `tensight` command line with `argv` (argv[0] is the program name).
/// Returns the exit code.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> i32 {
    let args: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
    py.detach(|| tensight_cli::run(args))
}

/// Analyse the trace or bundle at `path` and return the JSON report as a string.
#[pyfunction]
fn analyze_json(py: Python<'_>, path: String) -> PyResult<String> {
    let report = py
        .detach(|| tensight::analyze_path(std::path::Path::new(&path)))
        .map_err(|e| value_error(py, e))?;
    Ok(tensight::report::json::render(&report))
}

/// Analyse the trace or bundle at `path` and return the text report (no colour,
/// 80 columns).
#[pyfunction]
fn report_text(py: Python<'_>, path: String) -> PyResult<String> {
    let report = py
        .detach(|| tensight::analyze_path(std::path::Path::new(&path)))
        .map_err(|e| value_error(py, e))?;
    Ok(tensight::report::terminal::render(
        &report,
        tensight::report::RenderOptions {
            color: false,
            width: 80,
        },
    ))
}

/// A `ValueError` whose message is the error's one line; the hint, when there is
/// one, is the exception's `hint` attribute (None otherwise).
fn value_error(py: Python<'_>, e: tensight::Error) -> PyErr {
    let err = PyValueError::new_err(e.message);
    let _ = err.value(py).setattr("hint", e.hint);
    err
}

/// Which candidate loop is the step loop (`tensight.loops` asks, live): each candidate
/// is `(depth, count, covered_ns, span_ns, work_share)` as in the engine's
/// `model::steps::Repeating`; returns its index, or None when none qualifies. The same
/// choice the engine makes between repeating Python frames of a plain trace.
#[pyfunction]
fn choose_loop(candidates: Vec<(u32, usize, i64, i64, f64)>) -> Option<usize> {
    let c: Vec<tensight::model::steps::Repeating> = candidates
        .into_iter()
        .map(
            |(depth, count, covered_ns, span_ns, work_share)| tensight::model::steps::Repeating {
                depth,
                count,
                covered_ns,
                span_ns,
                work_share,
            },
        )
        .collect();
    tensight::model::steps::choose_repeating(&c)
}

/// The bundle manifest at `path` as the engine reads it (its typed `Manifest`), as JSON:
/// `{"manifest": {...}, "unknown": [field, ...]}`, the fields this engine does not know
/// apart. The round-trip test of the bundle contract holds the collector to it.
#[pyfunction]
fn read_manifest(py: Python<'_>, path: String) -> PyResult<String> {
    use tensight::read::bundle::manifest::Manifest;
    let bytes = std::fs::read(&path).map_err(|e| {
        value_error(
            py,
            tensight::Error::new(format!("failed to read {path}: {e}")),
        )
    })?;
    let mut m: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        value_error(
            py,
            tensight::Error::new(format!("{path} is not a manifest: {e}")),
        )
    })?;
    let unknown: Vec<String> = std::mem::take(&mut m.extra).keys().cloned().collect();
    Ok(serde_json::json!({"manifest": m, "unknown": unknown}).to_string())
}

/// The ranks of a multi-rank folder, as `tensight analyze DIR` finds them:
/// `(world_size, [(rank, path), ...])` (`rank` None for a trace: its
/// `distributedInfo.rank`, else its file name, decides), or None when `path` is not
/// one (a trace, a bundle, a folder holding one trace). `tensight.distributed` maps
/// `tensight summarize` over these on Ray. Raises ValueError for a bad top manifest.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn rank_inputs(
    py: Python<'_>,
    path: String,
) -> PyResult<Option<(Option<u32>, Vec<(Option<u32>, String)>)>> {
    let set = tensight::read::ranks::discover(std::path::Path::new(&path))
        .map_err(|e| value_error(py, e))?;
    Ok(set.map(|s| {
        let inputs = s
            .inputs
            .into_iter()
            .map(|i| (i.rank, i.path.to_string_lossy().into_owned()))
            .collect();
        (s.world_size, inputs)
    }))
}

/// The engine's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_json, m)?)?;
    m.add_function(wrap_pyfunction!(report_text, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(choose_loop, m)?)?;
    m.add_function(wrap_pyfunction!(read_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(rank_inputs, m)?)?;
    Ok(())
}
