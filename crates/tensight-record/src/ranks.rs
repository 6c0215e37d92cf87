//! A distributed job's bundle: one ordinary bundle per rank, `BUNDLE/rank{N}/` (each
//! rank's collector writes its own, `tensight.ranks`), and the job's `BUNDLE/manifest.json`,
//! which [`summarize`] builds and [`write`] writes after the command ended.
//!
//! The top manifest (`"kind": "ranks"`; the engine's cross-rank reader reads it):
//!
//! ```text
//! { "format": "tensight-bundle", "format_version": "MAJOR.MINOR", "kind": "ranks",
//!   "world_size": int,
//!   "ranks": [ { "rank": int, "dir": "rank0",
//!                "status": "completed"|"crashed"|"running"|"missing",
//!                         // running: the rank was killed before it could finish
//!                         // (SIGKILL); missing: no manifest.json in its folder
//!                "exit_code": int|null, "error": str|null,
//!                "step_detection": str|null,
//!                "iterations": [first, last] | null } ],
//!                         // the program iterations (0-based) of its timed steps
//!   "command": [str], "cwd": str,
//!   "program": { "status": "completed"|"crashed", "exit_code": int, "error": str|null } }
//! ```
//!
//! [`summarize`] also says where ranks recorded different steps (the analysis compares
//! the same step across ranks, so it must be the same iteration). It reads only; it
//! does not analyse.

use crate::io_cause;
use serde::Serialize;
use std::path::{Path, PathBuf};
use tensight::read::bundle::manifest::{contract, Manifest, Program};
use tensight::read::bundle::MANIFEST;

/// The top manifest's `kind`.
pub const KIND: &str = "ranks";

/// `BUNDLE/manifest.json` of a distributed job.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RanksManifest {
    /// `tensight-bundle`.
    pub format: String,
    /// The contract's format version.
    pub format_version: String,
    /// `ranks`.
    pub kind: String,
    /// Ranks in the job (the largest `world_size` a rank saw, else the highest rank + 1).
    pub world_size: u64,
    /// Every rank `0..world_size`, in order.
    pub ranks: Vec<RankEntry>,
    /// The command as run (the launcher and its arguments).
    pub command: Vec<String>,
    /// The folder it ran in.
    pub cwd: String,
    /// How the command ended.
    pub program: Program,
}

/// One rank of the job.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RankEntry {
    /// Global rank.
    pub rank: u64,
    /// Its bundle, relative to the job's (`rank0`).
    pub dir: String,
    /// `completed`, `crashed`, `running` (killed before it finished) or `missing`.
    pub status: String,
    /// Its exit code, when its collector saw it.
    pub exit_code: Option<i64>,
    /// The exception or signal that ended it.
    pub error: Option<String>,
    /// How its steps were found.
    pub step_detection: Option<String>,
    /// The program iterations (0-based) of its timed steps, first and last.
    pub iterations: Option<[u64; 2]>,
}

impl RankEntry {
    /// Its timed steps in words, numbered from 1 as the collector's progress lines
    /// count them (`optimizer steps 4..6`: iterations 3..5).
    pub fn steps_text(&self) -> String {
        match (&self.step_detection, self.iterations) {
            (Some(d), Some([a, b])) => format!("{d} steps {}..{}", a + 1, b + 1),
            (Some(d), None) => format!("no timed steps ({d})"),
            (None, _) => "no steps".into(),
        }
    }
}

/// What [`summarize`] found.
#[derive(Debug, Clone)]
pub struct Job {
    /// The top manifest to write.
    pub manifest: RanksManifest,
    /// The bundle folder of each rank that wrote a manifest, by rank.
    pub recorded: Vec<(u64, PathBuf)>,
    /// Ranks that recorded other steps than the first rank, said in a sentence each.
    pub warnings: Vec<String>,
}

/// The `rank{N}` folders of `dir`, by rank.
pub fn rank_dirs(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix("rank")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// The job's summary, when `dir` holds `rank{N}/` folders and no manifest of its own
/// (a single process's bundle has one); None otherwise. `exit_code` and `signal`: how
/// the command ended.
pub fn summarize(
    dir: &Path,
    command: &[String],
    exit_code: i32,
    signal: Option<i32>,
) -> Option<Job> {
    if dir.join(MANIFEST).exists() {
        return None;
    }
    let dirs = rank_dirs(dir);
    if dirs.is_empty() {
        return None;
    }
    let read: Vec<(u64, PathBuf, Option<Manifest>)> = dirs
        .into_iter()
        .map(|(n, d)| {
            let m = std::fs::read(d.join(MANIFEST))
                .ok()
                .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok());
            (n, d, m)
        })
        .collect();
    let highest = read.iter().map(|(n, _, _)| n + 1).max().unwrap_or(0);
    let world_size = read
        .iter()
        .filter_map(|(_, _, m)| m.as_ref()?.distributed.as_ref()?.world_size)
        .max()
        .unwrap_or(0)
        .max(highest);
    let ranks = (0..world_size)
        .map(|n| match read.iter().find(|(r, _, _)| *r == n) {
            Some((_, _, Some(m))) => entry(n, m),
            _ => RankEntry {
                rank: n,
                dir: format!("rank{n}"),
                status: "missing".into(),
                exit_code: None,
                error: None,
                step_detection: None,
                iterations: None,
            },
        })
        .collect::<Vec<_>>();
    let warnings = window_warnings(&ranks);
    let c = contract();
    let manifest = RanksManifest {
        format: c.format.clone(),
        format_version: c.format_version.clone(),
        kind: KIND.into(),
        world_size,
        ranks,
        command: command.to_vec(),
        cwd: std::env::current_dir()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default(),
        program: ended(exit_code, signal),
    };
    let recorded = read
        .into_iter()
        .filter_map(|(n, d, m)| m.map(|_| (n, d)))
        .collect();
    Some(Job {
        manifest,
        recorded,
        warnings,
    })
}

/// Write the top manifest into `dir`, atomically.
pub fn write(dir: &Path, m: &RanksManifest) -> Result<(), String> {
    let path = dir.join(MANIFEST);
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(m).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&tmp, text).map_err(|e| io_cause(&e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io_cause(&e))
}

fn entry(rank: u64, m: &Manifest) -> RankEntry {
    let whole = m.step_detection.as_deref() == Some("whole_program");
    let iterations = match (m.first_step_index, m.warmup_steps, m.steps_recorded) {
        (Some(first), Some(warmup), Some(n)) if n > 0 && !whole => {
            Some([first + warmup + 1, first + warmup + n])
        }
        _ => None,
    };
    RankEntry {
        rank,
        dir: format!("rank{rank}"),
        status: m.program.status.clone(),
        exit_code: m.program.exit_code,
        error: m.program.error.clone(),
        step_detection: m.step_detection.clone(),
        iterations,
    }
}

fn ended(code: i32, signal: Option<i32>) -> Program {
    let error = match signal {
        Some(s) => Some(format!("killed by signal {s}")),
        None if code != 0 => Some(format!("exited with code {code}")),
        None => None,
    };
    Program {
        status: if error.is_some() {
            "crashed"
        } else {
            "completed"
        }
        .into(),
        exit_code: Some(i64::from(code)),
        error,
    }
}

/// One sentence per rank whose steps differ from the first recorded rank's.
fn window_warnings(ranks: &[RankEntry]) -> Vec<String> {
    let seen: Vec<&RankEntry> = ranks.iter().filter(|r| r.status != "missing").collect();
    let Some(first) = seen.first() else {
        return Vec::new();
    };
    seen[1..]
        .iter()
        .filter(|r| (&r.step_detection, r.iterations) != (&first.step_detection, first.iterations))
        .map(|r| {
            format!(
                "rank {} recorded {} but rank {} recorded {}: the ranks' steps do not line up",
                r.rank,
                r.steps_text(),
                first.rank,
                first.steps_text()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank_manifest(dir: &Path, rank: u64, detection: &str, first: u64, status: &str) {
        let d = dir.join(format!("rank{rank}"));
        std::fs::create_dir_all(&d).unwrap();
        let m = format!(
            r#"{{"format": "tensight-bundle", "format_version": "1.2", "step_detection": "{detection}",
                "first_step_index": {first}, "warmup_steps": 3, "steps_recorded": 5,
                "program": {{"status": "{status}", "exit_code": 0, "error": null}},
                "distributed": {{"rank": {rank}, "local_rank": {rank}, "world_size": 3, "backend": "gloo"}}}}"#
        );
        std::fs::write(d.join(MANIFEST), m).unwrap();
    }

    #[test]
    fn a_job_lists_every_rank_and_warns_of_other_steps() {
        let t = tempfile::tempdir().unwrap();
        rank_manifest(t.path(), 0, "optimizer", 0, "completed");
        rank_manifest(t.path(), 1, "loop", 2, "crashed");
        // rank 2 never wrote a manifest: missing
        let job = summarize(t.path(), &["torchrun".into()], 1, None).unwrap();
        let m = &job.manifest;
        assert_eq!((m.kind.as_str(), m.world_size), ("ranks", 3));
        let status: Vec<&str> = m.ranks.iter().map(|r| r.status.as_str()).collect();
        assert_eq!(status, ["completed", "crashed", "missing"]);
        assert_eq!(m.ranks[0].iterations, Some([4, 8]));
        assert_eq!(m.ranks[1].dir, "rank1");
        assert_eq!(m.program.status, "crashed");
        assert_eq!(job.recorded.len(), 2);
        assert_eq!(job.warnings.len(), 1, "{:?}", job.warnings);
        assert!(job.warnings[0]
            .contains("rank 1 recorded loop steps 7..11 but rank 0 recorded optimizer steps 5..9"));
        write(t.path(), m).unwrap();
        let back: serde_json::Value =
            serde_json::from_slice(&std::fs::read(t.path().join(MANIFEST)).unwrap()).unwrap();
        assert_eq!(back["ranks"][2]["status"], "missing");
        assert_eq!(back["format_version"], contract().format_version.as_str());
        // once written, the folder is no longer summarized again
        assert!(summarize(t.path(), &[], 0, None).is_none());
    }

    #[test]
    fn a_single_process_bundle_is_no_job() {
        let t = tempfile::tempdir().unwrap();
        assert!(summarize(t.path(), &[], 0, None).is_none());
        std::fs::create_dir(t.path().join("ranked")).unwrap();
        assert!(summarize(t.path(), &[], 0, None).is_none());
    }
}
