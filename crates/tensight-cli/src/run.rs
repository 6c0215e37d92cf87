//! `tensight run` and `tensight bench`: record a program into a bundle, then report.
//!
//! `run` creates the bundle folder, starts the program (argv as given, no shell) with
//! inherited stdio and the Python collector on its `PYTHONPATH`, waits for it, then
//! analyses the bundle: `report.txt` and `report.json` go into the bundle, the report
//! to stdout, and a last stderr line says where both are. The exit code is the
//! program's (128 + N when a signal N ended it); when nothing was recorded, an error
//! says why and the code is the program's, or 2 if it exited 0.
//!
//! The contract with the collector (python/tensight) is environment variables:
//! `PYTHONPATH=$TENSIGHT_BOOT_DIR:<old PYTHONPATH>`, `TENSIGHT_BUNDLE` (absolute bundle
//! folder), `TENSIGHT_STEPS`, `TENSIGHT_WARMUP`, `TENSIGHT_STOP` (`1` or `0`).
//! With `--hardware` the program then runs again under Nsight Compute (see
//! `hardware.rs`; `TENSIGHT_HARDWARE=1`, `TENSIGHT_HARDWARE_STEP=K`) before the analysis.
//! `TENSIGHT_BOOT_DIR` and `TENSIGHT_PYTHON` are set by the `tensight` console script
//! of the Python package before it hands argv to this crate; without them (the bare
//! cargo binary) `run` and `bench` refuse with an install instruction.
//! Recording itself (profiler, steps, manifest) is the collector's job, not this file's.

use super::{use_color, write_stdout, ColorChoice, Format};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;
use tensight::report::{self, RenderOptions};
use tensight::Error;

/// Where default bundles go, under the current folder.
const RUNS_DIR: &str = "tensight-runs";

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    record: RecordArgs,
    /// Stop the program once the steps are recorded (default: it runs on to its end).
    #[arg(long)]
    stop: bool,
    /// The program and its arguments, after `--` (e.g. `-- python train.py --lr 0.1`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// The built-in model to train on synthetic data.
    #[arg(long, value_parser = ["resnet50", "transformer", "simple_cnn"])]
    model: String,
    /// Batch size.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: u64,
    /// Train with automatic mixed precision (bf16 autocast).
    #[arg(long)]
    amp: bool,
    /// Device to train on (default: cuda when available, else cpu).
    #[arg(long, value_parser = ["cuda", "cpu"])]
    device: Option<String>,
    #[command(flatten)]
    record: RecordArgs,
}

#[derive(clap::Args)]
struct RecordArgs {
    /// Steps to record.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Steps to run first, unrecorded (allocator, cuDNN autotuning and compilation settle).
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Bundle folder to create (new or empty); default ./tensight-runs/run-NNN.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Format of the report on stdout (the bundle gets report.txt and report.json).
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Then run the program a second time under Nsight Compute (`ncu` on PATH or
    /// $TENSIGHT_NCU) for one step: per-kernel hardware counters (ncu.csv.gz in the
    /// bundle). GPU clocks are left as they are (--clock-control none).
    #[arg(long)]
    hardware: bool,
    /// The step that --hardware profiles (default: the first after the warm-up).
    #[arg(long, value_name = "K", requires = "hardware",
          value_parser = clap::value_parser!(u64).range(1..))]
    hardware_step: Option<u64>,
    /// Profile every kernel launch of the step. By default an op call that repeats an
    /// earlier one of the step (same op, operand shapes, strides, dtypes, alignment) is
    /// skipped and its kernels take the counters of the first: one ResNet-50 training
    /// step on an H200 had 276 of its 725 launches profiled, in about 2 minutes instead
    /// of 4.5. A program that used torch.compile is profiled at every launch.
    #[arg(long, requires = "hardware")]
    hardware_every_launch: bool,
}

/// `tensight run`.
pub(crate) fn run(args: RunArgs) -> tensight::Result<i32> {
    record(&args.record, args.stop, args.command)
}

/// `tensight bench`: `run --stop -- $TENSIGHT_PYTHON -m tensight.bench ...`.
pub(crate) fn bench(args: BenchArgs) -> tensight::Result<i32> {
    boot_dir()?;
    let python = std::env::var_os("TENSIGHT_PYTHON")
        .filter(|p| !p.is_empty())
        .ok_or_else(needs_package)?;
    let r = &args.record;
    let mut cmd: Vec<OsString> = vec![
        python,
        "-m".into(),
        "tensight.bench".into(),
        "--model".into(),
        args.model.clone().into(),
        "--batch-size".into(),
        args.batch_size.to_string().into(),
        "--steps".into(),
        // Two spare steps, so the program cannot end before the last recorded one closes.
        (r.warmup + r.steps + 2).to_string().into(),
    ];
    if args.amp {
        cmd.push("--amp".into());
    }
    if let Some(d) = &args.device {
        cmd.push("--device".into());
        cmd.push(d.into());
    }
    record(r, true, cmd)
}

fn needs_package() -> Error {
    Error::new("`tensight run` needs the Python package: pip install tensight").with_hint(
        "run the `tensight` command that pip installs (from a clone: pip install .); the bare Rust binary cannot hook into Python",
    )
}

/// The collector's folder, from `TENSIGHT_BOOT_DIR`.
fn boot_dir() -> tensight::Result<PathBuf> {
    let dir = std::env::var_os("TENSIGHT_BOOT_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .ok_or_else(needs_package)?;
    if !dir.is_dir() {
        return Err(Error::new(format!(
            "`tensight run` needs the Python package: TENSIGHT_BOOT_DIR {} is not a folder",
            dir.display()
        ))
        .with_hint("reinstall it: pip install --force-reinstall tensight"));
    }
    Ok(dir)
}

fn record(r: &RecordArgs, stop: bool, command: Vec<OsString>) -> tensight::Result<i32> {
    let boot = boot_dir()?;
    let Some((program, program_args)) = command.split_first() else {
        return Err(Error::new("no program to run").with_hint("tensight run -- python train.py"));
    };
    let shown_cmd = command
        .iter()
        .map(|a| shell_word(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let (dir, created) = make_bundle_dir(r.out.as_deref())?;
    let abs = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    let mut paths = vec![boot];
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        paths.extend(std::env::split_paths(&old));
    }
    let pythonpath = std::env::join_paths(paths).map_err(|e| {
        Error::new(format!("failed to set PYTHONPATH for the program: {e}"))
            .with_hint("a PYTHONPATH entry holds the path separator")
    })?;
    let tty = std::io::stderr().is_terminal();
    if tty {
        eprintln!(
            "tensight: recording {} step{} after {} warm-up of `{shown_cmd}` into {}",
            r.steps,
            if r.steps == 1 { "" } else { "s" },
            r.warmup,
            dir.display()
        );
    }
    let env: Vec<(&'static str, OsString)> = vec![
        ("PYTHONPATH", pythonpath),
        ("TENSIGHT_BUNDLE", abs.clone().into_os_string()),
        ("TENSIGHT_STEPS", r.steps.to_string().into()),
        ("TENSIGHT_WARMUP", r.warmup.to_string().into()),
        ("TENSIGHT_STOP", if stop { "1" } else { "0" }.into()),
    ];
    let mut cmd = Command::new(program);
    cmd.args(program_args).envs(env.iter().map(|(k, v)| (k, v)));
    let guard = signals::install();
    let child = cmd.spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            drop(guard);
            if created {
                let _ = std::fs::remove_dir(&dir);
            }
            let shown = program.to_string_lossy();
            let err = Error::new(format!("failed to start {shown}: {}", io_cause(&e)));
            return Err(match e.kind() {
                std::io::ErrorKind::NotFound => {
                    err.with_hint("is it installed and on PATH? (the command comes after `--`)")
                }
                std::io::ErrorKind::PermissionDenied => err.with_hint("is the file executable?"),
                _ => err,
            });
        }
    };
    guard.forward_to(child.id());
    let status = child.wait();
    drop(guard);
    let status = status
        .map_err(|e| Error::new(format!("failed to wait for the program: {}", io_cause(&e))))?;
    let code = exit_code(&status);
    let died = signal_of(&status);

    if !dir.join(tensight::read::bundle::MANIFEST).is_file() {
        let empty = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
        if created && empty {
            let _ = std::fs::remove_dir(&dir);
        }
        let how = match died {
            Some(sig) => format!("was killed by signal {sig}"),
            None => format!("exited with code {code}"),
        };
        let err = Error::new(format!(
            "nothing recorded: `{shown_cmd}` {how} before tensight's collector wrote a manifest into {}",
            dir.display()
        ))
        .with_hint(if died.is_some() {
            "a program killed before it ends leaves nothing; the collector writes the bundle when the steps are recorded or the program exits"
        } else {
            "the collector starts when a Python program imports torch (it is loaded through PYTHONPATH): was the command a Python program that imports torch? `python -I`/`-S` or a program that resets PYTHONPATH is not seen"
        });
        print_error(&err);
        return Ok(if code != 0 { code } else { 2 });
    }

    if r.hardware {
        // The collector's warm-up: W boundaries (W = 0 acts as 1), then the step to profile.
        let step = r.hardware_step.unwrap_or(r.warmup.max(1) + 1);
        crate::hardware::run(&crate::hardware::Pass {
            bundle: &abs,
            command: &command,
            env,
            step,
            every_launch: r.hardware_every_launch,
        });
    }

    if tty {
        eprint!("tensight: analyzing {}…", dir.display());
    }
    let analysed = tensight::analyze_path(&dir);
    if tty {
        eprint!("\r\x1b[2K");
    }
    let report = match analysed {
        Ok(r) => r,
        Err(e) => {
            print_error(&e);
            eprintln!("tensight: bundle {} (no report)", dir.display());
            return Ok(if code != 0 { code } else { 2 });
        }
    };
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let text = report::terminal::render(
        &report,
        RenderOptions {
            color: false,
            width: 80,
        },
    );
    let json = report::json::render(&report);
    let txt_path = dir.join("report.txt");
    for (path, body) in [(&txt_path, &text), (&dir.join("report.json"), &json)] {
        if let Err(e) = std::fs::write(path, body) {
            eprintln!(
                "warning: failed to write {}: {}",
                path.display(),
                io_cause(&e)
            );
        }
    }
    let shown = match r.format {
        Format::Json => json,
        Format::Text if use_color(ColorChoice::Auto) => report::terminal::render(
            &report,
            RenderOptions {
                color: true,
                width: 80,
            },
        ),
        Format::Text => text,
    };
    write_stdout(&shown)?;
    eprintln!(
        "tensight: bundle {} · report {}",
        dir.display(),
        txt_path.display()
    );
    Ok(code)
}

/// Create the bundle folder: `out` (new, or an empty folder) or the next free
/// `./tensight-runs/run-NNN`. Returns it and whether it was created here.
fn make_bundle_dir(out: Option<&Path>) -> tensight::Result<(PathBuf, bool)> {
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

fn io_cause(e: &std::io::Error) -> String {
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

/// An argument as a POSIX shell would need it written.
fn shell_word(a: &str) -> String {
    let plain = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

fn print_error(e: &Error) {
    eprintln!("error: {}", e.message);
    if let Some(h) = &e.hint {
        eprintln!("hint: {h}");
    }
}

/// The shell's view of how a process ended: its code, or 128 + the signal.
fn exit_code(status: &std::process::ExitStatus) -> i32 {
    if let Some(c) = status.code() {
        return c;
    }
    signal_of(status).map_or(1, |s| 128 + s)
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// Signals while the program runs. Ctrl-C reaches the program directly (same process
/// group): tensight only survives it, waits, and reports what was recorded. SIGTERM
/// and SIGHUP sent to tensight alone are passed on to the program.
#[cfg(unix)]
mod signals {
    use std::sync::atomic::{AtomicI32, Ordering};

    static CHILD: AtomicI32 = AtomicI32::new(0);

    extern "C" fn ignore(_: libc::c_int) {}

    extern "C" fn forward(sig: libc::c_int) {
        let pid = CHILD.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }

    /// Restores the previous handlers when dropped.
    pub(super) struct Guard {
        old: Vec<(libc::c_int, libc::sigaction)>,
    }

    /// Install the handlers. A handler (not SIG_IGN) is reset to the default in the
    /// program by exec, so the program still gets its own Ctrl-C behaviour.
    pub(super) fn install() -> Guard {
        let mut old = Vec::new();
        let table: [(libc::c_int, extern "C" fn(libc::c_int)); 4] = [
            (libc::SIGINT, ignore),
            (libc::SIGQUIT, ignore),
            (libc::SIGTERM, forward),
            (libc::SIGHUP, forward),
        ];
        for (sig, handler) in table {
            // SAFETY: plain sigaction calls with zeroed, then filled, structs; the
            // handlers only touch an atomic and call kill.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = handler as usize;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &act, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Guard { old }
    }

    impl Guard {
        /// Pass SIGTERM/SIGHUP on to `pid` from now on.
        pub(super) fn forward_to(&self, pid: u32) {
            CHILD.store(i32::try_from(pid).unwrap_or(0), Ordering::SeqCst);
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            CHILD.store(0, Ordering::SeqCst);
            for (sig, prev) in &self.old {
                // SAFETY: restores a disposition read by sigaction above.
                unsafe {
                    libc::sigaction(*sig, prev, std::ptr::null_mut());
                }
            }
        }
    }
}

#[cfg(not(unix))]
mod signals {
    pub(super) struct Guard;
    pub(super) fn install() -> Guard {
        Guard
    }
    impl Guard {
        pub(super) fn forward_to(&self, _: u32) {}
    }
}
