//! `tensight run`'s recorder: runs a program with the Python collector, then (with
//! `--hardware`) again under Nsight Compute, and leaves a bundle. No analysis and no
//! report here: the command line does those with the engine.
//!
//! [`record`] creates the bundle folder ([`bundle_dir`]), starts the program (argv as
//! given, no shell) with inherited stdio and the collector on its `PYTHONPATH`, waits
//! for it, writes the command as run into the manifest (the program's own `sys.argv`
//! lacks the interpreter and reads `-c` for `python -c ...`), and runs the hardware pass
//! ([`hardware`]). The exit code is the program's (128 + N when a signal N ended it).
//!
//! A distributed job (`tensight run -- torchrun ...`) leaves one bundle per rank,
//! `rank{N}/`, each written by that rank's collector; the launcher records nothing.
//! After the command ends [`ranks`] writes the job's own `manifest.json` (`"kind":
//! "ranks"`) beside them. The hardware pass does not run for such a job.
//!
//! The contract with the collector (`python/tensight`) is environment variables:
//! `PYTHONPATH=$TENSIGHT_BOOT_DIR:<old PYTHONPATH>`, `TENSIGHT_BUNDLE` (absolute bundle
//! folder), `TENSIGHT_STEPS`, `TENSIGHT_WARMUP`, `TENSIGHT_STOP` (`1` or `0`), and the
//! bundle's `manifest.json` ([`tensight::read::bundle::manifest::Manifest`]), which the
//! collector writes and this crate updates through that type.

mod bundle_dir;
pub mod hardware;
mod program;
pub mod ranks;

pub use bundle_dir::make_bundle_dir;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use tensight::read::bundle::manifest::Manifest;
use tensight::read::bundle::MANIFEST;
use tensight::Error;

/// What to record.
pub struct Options<'a> {
    /// The program and its arguments.
    pub command: &'a [OsString],
    /// The collector's folder (`TENSIGHT_BOOT_DIR`, set by the Python package).
    pub boot_dir: &'a Path,
    /// Steps to record.
    pub steps: u64,
    /// Steps to run first, unrecorded.
    pub warmup: u64,
    /// Bundle folder to create (new or empty); default ./tensight-runs/run-NNN.
    pub out: Option<&'a Path>,
    /// Stop the program once the steps are recorded.
    pub stop: bool,
    /// The hardware pass, if asked for.
    pub hardware: Option<hardware::Ask>,
    /// Progress lines on stderr (a terminal).
    pub progress: bool,
}

/// How a recording went.
pub struct Recorded {
    /// The bundle folder.
    pub dir: PathBuf,
    /// The program's exit code (128 + N for signal N).
    pub exit_code: i32,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// The command, as a shell would need it written.
    pub shown_command: String,
    /// Whether the collector wrote a manifest (false: the program never imported torch,
    /// or died before the collector could write anything). For a distributed job:
    /// whether any rank did.
    pub manifest: bool,
    /// A distributed job: its ranks (`dir/rank{N}/`) and the top manifest written.
    pub job: Option<ranks::Job>,
}

/// Record `o.command` into a new bundle.
pub fn record(o: &Options) -> tensight::Result<Recorded> {
    let Some((program, _)) = o.command.split_first() else {
        return Err(Error::new("no program to run").with_hint("tensight run -- python train.py"));
    };
    let shown_command = o
        .command
        .iter()
        .map(|a| tensight::report::terminal::shell_word(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let (dir, created) = make_bundle_dir(o.out)?;
    let abs = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    let env = program::collector_env(o, &abs)?;
    if o.progress {
        eprintln!(
            "tensight: recording {} step{} after {} warm-up of `{shown_command}` into {}",
            o.steps,
            if o.steps == 1 { "" } else { "s" },
            o.warmup,
            dir.display()
        );
    }
    let ended = match program::run(o.command, &env) {
        Ok(e) => e,
        Err(e) => {
            if created {
                let _ = std::fs::remove_dir(&dir);
            }
            return Err(e.start_error(&program.to_string_lossy()));
        }
    };
    let command: Vec<String> = o
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let job = ranks::summarize(&abs, &command, ended.code, ended.signal);
    if let Some(job) = job {
        if let Err(e) = ranks::write(&abs, &job.manifest) {
            eprintln!(
                "warning: failed to write the job's manifest into {}: {e}",
                dir.display()
            );
        }
        if o.hardware.is_some() {
            eprintln!("warning: no hardware pass: --hardware does not run for a distributed job yet (record one rank with a single-process command instead)");
        }
        return Ok(Recorded {
            dir,
            exit_code: ended.code,
            signal: ended.signal,
            shown_command,
            manifest: !job.recorded.is_empty(),
            job: Some(job),
        });
    }
    let manifest = dir.join(MANIFEST).is_file();
    if !manifest {
        let empty = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
        if created && empty {
            let _ = std::fs::remove_dir(&dir);
        }
    } else {
        if let Err(e) = update_manifest(&abs, |m| m.command = command) {
            eprintln!("warning: failed to write the command into the manifest: {e}");
        }
        if let Some(ask) = &o.hardware {
            hardware::run(&hardware::Pass {
                bundle: &abs,
                command: o.command,
                env,
                ask,
                warmup: o.warmup,
            });
        }
    }
    Ok(Recorded {
        dir,
        exit_code: ended.code,
        signal: ended.signal,
        shown_command,
        manifest,
        job: None,
    })
}

/// Read the bundle's manifest, change it with `f`, write it back atomically (fields
/// this version does not know are kept).
pub fn update_manifest(bundle: &Path, f: impl FnOnce(&mut Manifest)) -> Result<(), String> {
    let path = bundle.join(MANIFEST);
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let mut m: Manifest = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    f(&mut m);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, m.to_json()).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, &path).map_err(|e| e.to_string())
}

/// An I/O error's cause, lowercase, for messages.
pub fn io_cause(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let s = e.to_string();
            // `Os { .. }` messages end with "(os error N)": keep them, lowercase the start.
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
                None => s,
            }
        }
    }
}
