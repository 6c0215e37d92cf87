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
pub mod phases;
#[doc(hidden)]
pub mod rank_sets;
pub mod read;
pub mod report;
pub mod rules;
pub mod summary;
#[doc(hidden)]
pub mod testing;
pub mod text;

pub use error::{Error, Result};

use std::path::{Path, PathBuf};

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
    let read = phases::start("read");
    let mut loaded = read::load(path)?;
    drop(read);
    if let Some(et) = et {
        let _p = phases::start("execution trace");
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
    let p = phases::start("analyses");
    let metrics = analysis::analyze(&loaded.profile);
    drop(p);
    let p = phases::start("diagnosis");
    let diagnosis = diagnosis::diagnose(&rules::Context::new(&loaded.profile, &metrics));
    drop(p);
    report::Report {
        profile: loaded.profile,
        metrics,
        diagnosis,
        warnings: loaded.warnings,
        input,
    }
}

/// Read every rank of `set` in parallel, diagnose each, and compare them: the
/// cross-rank findings beside each rank's own report. `input` names the folder. A rank
/// that cannot be read is left out with a warning while two or more remain; two
/// inputs of one rank, or a trace with no rank, are errors.
pub fn analyze_ranks(set: &read::ranks::RankSet, input: &str) -> Result<report::RanksReport> {
    use rayon::prelude::*;
    let read: Vec<(PathBuf, Option<u32>, Result<report::Report>)> = set
        .inputs
        .par_iter()
        .map(|i| (i.path.clone(), i.rank, analyze_path(&i.path)))
        .collect();
    let mut warnings = Vec::new();
    let mut ranked: Vec<(u32, PathBuf, report::Report)> = Vec::new();
    let mut no_rank = Vec::new();
    for (path, rank, r) in read {
        let shown = text::shown(&path.display().to_string());
        match r {
            Err(e) => warnings.push(format!("{shown} left out: {}", e.message)),
            Ok(r) => {
                let traced = r.profile.meta.distributed.as_ref().and_then(|d| d.rank);
                let rank = rank
                    .or_else(|| traced.and_then(|t| u32::try_from(t).ok()))
                    .or_else(|| read::ranks::rank_from_name(&path));
                match rank {
                    Some(k) => ranked.push((k, path, r)),
                    None => no_rank.push(shown),
                }
            }
        }
    }
    if !no_rank.is_empty() {
        return Err(Error::new(format!(
            "failed to read {input} as the ranks of one job: no rank for {} (no distributedInfo.rank in the trace, no rank-N in the file name)",
            no_rank.join(", ")
        ))
        .with_hint("pass one trace to analyze it alone, or name the files rank-0.json, rank-1.json, …"));
    }
    let reports = checked_ranks(ranked, input, &warnings)?;
    let summaries: Vec<analysis::ranks::RankSummary> = reports
        .iter()
        .map(|(rank, r)| rank_summary(r, *rank))
        .collect();
    let mut out = merge(summaries, set.world_size, input)?;
    out.per_rank = reports.into_iter().map(|(_, r)| r).collect();
    warnings.append(&mut out.warnings);
    out.warnings = warnings;
    Ok(out)
}

/// Refuse duplicate ranks and fewer than two; sort by rank.
fn checked_ranks(
    mut ranked: Vec<(u32, PathBuf, report::Report)>,
    input: &str,
    warnings: &[String],
) -> Result<Vec<(u32, report::Report)>> {
    ranked.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    for w in ranked.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(Error::new(format!(
                "failed to read {input} as the ranks of one job: rank {} twice ({} and {})",
                w[0].0,
                text::shown(&w[0].1.display().to_string()),
                text::shown(&w[1].1.display().to_string())
            ))
            .with_hint("a folder holds one trace per rank of one run: move the others out"));
        }
    }
    if ranked.len() < 2 {
        let why = warnings
            .first()
            .map(|w| format!(": {w}"))
            .unwrap_or_default();
        return Err(Error::new(format!(
            "failed to read {input} as the ranks of one job: {} rank(s) readable{why}",
            ranked.len()
        )));
    }
    Ok(ranked.into_iter().map(|(k, _, r)| (k, r)).collect())
}

/// The summary of rank `rank` from its report (what `tensight summarize` writes).
pub fn rank_summary(r: &report::Report, rank: u32) -> analysis::ranks::RankSummary {
    analysis::ranks::summary::summarize(&r.profile, &r.metrics, rank, &r.input, top_causes(r))
}

/// A rank's own largest findings, as causes for the cross-rank report.
fn top_causes(r: &report::Report) -> Vec<analysis::ranks::TopCause> {
    r.diagnosis
        .findings
        .iter()
        .filter(|f| f.saving_ms > 0.0 && f.category != rules::Category::Roofline)
        .take(analysis::ranks::summary::TOP_CAUSES)
        .map(|f| analysis::ranks::TopCause {
            code: f.code.to_string(),
            title: f.title.clone(),
            saving_ms: f.saving_ms,
        })
        .collect()
}

/// The cross-rank step from summaries alone (`tensight merge`, and the last part of
/// [`analyze_ranks`]): compare, diagnose, pick the focus rank.
pub fn merge(
    summaries: Vec<analysis::ranks::RankSummary>,
    world_size: Option<u32>,
    input: &str,
) -> Result<report::RanksReport> {
    let mut ranks: Vec<u32> = summaries.iter().map(|s| s.rank).collect();
    ranks.sort_unstable();
    if let Some(w) = ranks.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::new(format!(
            "failed to merge {input}: rank {} twice",
            w[0]
        )));
    }
    if summaries.len() < 2 {
        return Err(Error::new(format!(
            "failed to merge {input}: {} rank(s); the cross-rank step needs two or more",
            summaries.len()
        )));
    }
    let analysis = analysis::ranks::compare(summaries.clone(), world_size);
    let diagnosis = diagnosis::ranks::diagnose(&analysis);
    let mut summaries = summaries;
    summaries.sort_by_key(|s| s.rank);
    Ok(report::RanksReport {
        input: input.to_string(),
        summaries,
        focus_rank: analysis.slowest_rank,
        warnings: analysis.warnings.clone(),
        analysis,
        diagnosis,
        per_rank: Vec::new(),
    })
}
