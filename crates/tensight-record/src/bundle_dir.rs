//! The bundle folder: a new or empty `--out`, else the next free
//! `./tensight-runs/run-NNN`. Nothing is ever overwritten.

use crate::io_cause;
use std::path::{Path, PathBuf};
use tensight::Error;

/// Where default bundles go, under the current folder.
const RUNS_DIR: &str = "tensight-runs";

/// Create the bundle folder: `out` (new, or an empty folder) or the next free
/// `./tensight-runs/run-NNN`. Returns it and whether it was created here.
pub fn make_bundle_dir(out: Option<&Path>) -> tensight::Result<(PathBuf, bool)> {
    if let Some(out) = out {
        let refuse = |why: &str| {
            Error::new(format!(
                "refusing to write the bundle into {}: {why}",
                out.display()
            ))
            .with_hint(
                "choose a new folder for --out, or leave --out out to use ./tensight-runs/run-NNN",
            )
        };
        if out.exists() {
            if !out.is_dir() {
                return Err(refuse("it is a file"));
            }
            let mut entries = std::fs::read_dir(out).map_err(|e| {
                Error::new(format!(
                    "failed to read {}: {}",
                    out.display(),
                    io_cause(&e)
                ))
            })?;
            if entries.next().is_some() {
                return Err(refuse("the folder is not empty"));
            }
            return Ok((out.to_path_buf(), false));
        }
        std::fs::create_dir_all(out).map_err(|e| create_error(out, &e))?;
        return Ok((out.to_path_buf(), true));
    }
    let base = PathBuf::from(RUNS_DIR);
    std::fs::create_dir_all(&base).map_err(|e| create_error(&base, &e))?;
    let mut next = std::fs::read_dir(&base)
        .map_err(|e| create_error(&base, &e))?
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("run-")?
                .parse::<u32>()
                .ok()
        })
        .max()
        .map_or(1, |n| n.saturating_add(1));
    for _ in 0..1000 {
        let dir = base.join(format!("run-{next:03}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((dir, true)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => next += 1,
            Err(e) => return Err(create_error(&dir, &e)),
        }
    }
    Err(Error::new(format!(
        "failed to create a bundle folder in {RUNS_DIR}: no free run-NNN name"
    ))
    .with_hint("pass --out DIR"))
}

fn create_error(dir: &Path, e: &std::io::Error) -> Error {
    Error::new(format!(
        "failed to create the bundle folder {}: {}",
        dir.display(),
        io_cause(e)
    ))
}
