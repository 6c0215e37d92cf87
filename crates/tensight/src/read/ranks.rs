//! Many ranks of one job: which inputs a folder holds, one per rank.
//!
//! Input: a path. Output: `None` when it is not a multi-rank input (a trace, a bundle, a
//! folder holding one trace: read as before), else a [`RankSet`]: one input per rank.
//! Two layouts are multi-rank:
//! - a multi-rank bundle: a folder whose subfolders `rank0/`, `rank1/`, … each hold a
//!   bundle (with its `manifest.json`), with or without a top `manifest.json` listing
//!   them as `"ranks": [{"rank": 0, "dir": "rank0"}, …]` beside `"world_size"` (what
//!   `tensight run -- torchrun …` writes); the list is read when present;
//! - a folder of two or more Kineto traces, one per rank: the rank comes from each
//!   trace's `distributedInfo.rank` once read ([`rank_from_name`] is the fallback).
//!
//! It only finds the inputs: reading them is [`super::load`]'s job, per rank.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// One rank's input.
#[derive(Debug, Clone, PartialEq)]
pub struct RankInput {
    /// The rank, when the layout says (a bundle's `ranks[].rank`, a `rankN` folder);
    /// `None` for a trace: its `distributedInfo.rank` decides, else its file name.
    pub rank: Option<u32>,
    /// The trace or bundle folder.
    pub path: PathBuf,
}

/// The inputs of a multi-rank folder.
#[derive(Debug, Clone, PartialEq)]
pub struct RankSet {
    /// One per rank, in path order.
    pub inputs: Vec<RankInput>,
    /// `world_size` of a top manifest, when there is one.
    pub world_size: Option<u32>,
}

/// The multi-rank layout at `path`, if it is one.
pub fn discover(path: &Path) -> Result<Option<RankSet>> {
    if !path.is_dir() {
        return Ok(None);
    }
    if let Some(set) = from_top_manifest(path)? {
        return Ok(Some(set));
    }
    let mut sub: Vec<RankInput> = rank_folders(path)
        .into_iter()
        .filter(|(_, p)| p.join("manifest.json").is_file())
        .map(|(rank, p)| RankInput {
            rank: Some(rank),
            path: p,
        })
        .collect();
    if sub.len() >= 2 {
        sub.sort_by_key(|i| i.rank);
        return Ok(Some(RankSet {
            inputs: sub,
            world_size: None,
        }));
    }
    if super::bundle::bundle_dir(path).is_some() {
        return Ok(None);
    }
    let mut traces = Vec::new();
    super::collect_traces(path, &mut traces, 0);
    traces.sort();
    if traces.len() < 2 {
        return Ok(None);
    }
    Ok(Some(RankSet {
        inputs: traces
            .into_iter()
            .map(|path| RankInput { rank: None, path })
            .collect(),
        world_size: None,
    }))
}

/// The top manifest's `ranks` list, when `path/manifest.json` has one.
fn from_top_manifest(path: &Path) -> Result<Option<RankSet>> {
    let file = path.join("manifest.json");
    let Ok(bytes) = std::fs::read(&file) else {
        return Ok(None);
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Ok(None);
    };
    let Some(list) = v.get("ranks").and_then(|r| r.as_array()) else {
        return Ok(None);
    };
    let shown = crate::text::shown(&file.display().to_string());
    let mut inputs = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let rank = e.get("rank").and_then(|r| r.as_u64());
        let dir = e.get("dir").and_then(|d| d.as_str());
        let (Some(rank), Some(dir)) = (rank, dir) else {
            return Err(Error::new(format!(
                "failed to read {shown}: ranks[{i}] lacks a numeric \"rank\" or a \"dir\""
            ))
            .with_hint("each entry of \"ranks\" is {\"rank\": 0, \"dir\": \"rank0\"}"));
        };
        let rel = Path::new(dir);
        if rel.is_absolute() || rel.components().any(|c| c.as_os_str() == "..") {
            return Err(Error::new(format!(
                "failed to read {shown}: ranks[{i}].dir {} is outside the folder",
                crate::text::shown(dir)
            )));
        }
        inputs.push(RankInput {
            rank: Some(rank.min(u32::MAX as u64) as u32),
            path: path.join(rel),
        });
    }
    let world_size = v
        .get("world_size")
        .and_then(|w| w.as_u64())
        .map(|w| w.min(u32::MAX as u64) as u32);
    Ok(Some(RankSet { inputs, world_size }))
}

/// Subfolders named `rankN`, `rank-N` or `rank_N`, with N.
fn rank_folders(path: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let digits = name.strip_prefix("rank")?.trim_start_matches(['-', '_']);
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse().ok())
                .flatten()
                .map(|r| (r, p.clone()))
        })
        .collect()
}

/// The rank a file name states: the number after `rank` (`rank-3`, `rank_3`, `rank3`,
/// `trainer-rank-34.Jul_15.pt.trace.json`), case-insensitive; `None` without one.
pub fn rank_from_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let mut rest = name.as_str();
    while let Some(at) = rest.find("rank") {
        let after = rest[at + 4..].trim_start_matches(['-', '_']);
        let digits: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(r) = digits.parse() {
            return Some(r);
        }
        rest = &rest[at + 4..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_file_names() {
        let r = |s: &str| rank_from_name(Path::new(s));
        assert_eq!(
            r("cpu_only-rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"),
            Some(34)
        );
        assert_eq!(r("rank0.json"), Some(0));
        assert_eq!(r("trainer_RANK_12.json.gz"), Some(12));
        assert_eq!(r("ranking-rank7.json"), Some(7));
        assert_eq!(r("trace.json"), None);
    }

    #[test]
    fn a_folder_of_one_trace_is_not_multi_rank() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.json"), "{}").expect("write");
        assert_eq!(discover(dir.path()).expect("discover"), None);
        std::fs::write(dir.path().join("b.json"), "{}").expect("write");
        let set = discover(dir.path()).expect("discover").expect("two traces");
        assert_eq!(set.inputs.len(), 2);
    }

    #[test]
    fn a_bad_ranks_list_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("manifest.json"),
            r#"{"ranks": [{"rank": 0, "dir": "../x"}], "world_size": 1}"#,
        )
        .expect("write");
        let e = discover(dir.path()).expect_err("outside");
        assert!(e.message.contains("outside the folder"), "{}", e.message);
    }
}
