//! `tensight run` and `tensight bench`: the arguments, the recorder
//! (`tensight-record`), then the report.
//!
//! The recorder leaves a bundle; this file analyses it: `report.txt`, `report.json` and
//! `report.html` go into the bundle, the report to stdout, and a last stderr line says where both are.
//! The exit code is the program's (128 + N when a signal N ended it). When nothing was
//! recorded: a program that never imported torch exits with its own code and a note; a
//! program that failed or was killed before the collector wrote anything gets an error
//! saying why, and its code (2 if it exited 0).
//! A distributed job (`-- torchrun ...`) leaves a bundle per rank, `BUNDLE/rank{N}/`, and
//! the job's manifest: [`report_job`] says how each rank ended, writes each rank's
//! reports into its folder, then runs the cross-rank analysis over the whole job (the
//! report on stdout; `report.txt`, `report.json` and `report.html` beside the manifest).
//! `TENSIGHT_BOOT_DIR` and `TENSIGHT_PYTHON` are set by the `tensight` console script
//! of the Python package before it hands argv to this crate; without them (the bare
//! cargo binary) `run` and `bench` refuse with an install instruction.

use super::{use_color, write_stdout, ColorChoice, Format};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use tensight::report::{self, RenderOptions};
use tensight::Error;
use tensight_record::{hardware, io_cause, ranks, Options, Recorded};

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
    /// Format of the report on stdout (the bundle gets report.txt, report.json,
    /// report.html, and annotated.json with `-f perfetto`).
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Text)]
    format: Format,
    // (The report on stdout; report.txt in the bundle is 80 columns wide.)
    #[arg(long, value_name = "N", help = crate::WIDTH_HELP)]
    width: Option<usize>,
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
        // The profiler's warm-up, a step between the sessions, the detail step, and one
        // spare, so the program cannot end before the last recorded one closes.
        (r.warmup + r.steps + 4).to_string().into(),
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
    let tty = std::io::stderr().is_terminal();
    let rec = tensight_record::record(&Options {
        command: &command,
        boot_dir: &boot,
        steps: r.steps,
        warmup: r.warmup,
        out: r.out.as_deref(),
        stop,
        hardware: r.hardware.then_some(hardware::Ask {
            step: r.hardware_step,
            every_launch: r.hardware_every_launch,
        }),
        progress: tty,
    })?;
    let (dir, code) = (&rec.dir, rec.exit_code);
    if !rec.manifest {
        let cmd = &rec.shown_command;
        if rec.signal.is_none() && code == 0 {
            eprintln!("tensight: nothing to profile: `{cmd}` ended without importing torch");
            eprintln!("hint: the collector starts when a Python program imports torch (it is loaded through PYTHONPATH); `python -I`/`-S` or a program that resets PYTHONPATH is not seen");
            return Ok(0);
        }
        let how = match rec.signal {
            Some(sig) => format!("was killed by signal {sig}"),
            None => format!("exited with code {code}"),
        };
        let err = Error::new(format!(
            "nothing recorded: `{cmd}` {how} before tensight's collector wrote a manifest into {}",
            dir.display()
        ))
        .with_hint(if rec.signal.is_some() {
            "a program killed before it ends leaves nothing; the collector writes the bundle when the steps are recorded or the program exits"
        } else {
            "the collector starts when a Python program imports torch (it is loaded through PYTHONPATH): did the program fail before importing it?"
        });
        print_error(&err);
        return Ok(if code != 0 { code } else { 2 });
    }
    match &rec.job {
        Some(job) => report_job(r, &rec, job),
        None => report_bundle(r, dir, code),
    }
}

/// A distributed job's report: each rank's end in a line, where the ranks' steps do
/// not line up, then the cross-rank report (one rank's own report when only one
/// recorded). The exit code is the command's.
fn report_job(r: &RecordArgs, rec: &Recorded, job: &ranks::Job) -> tensight::Result<i32> {
    let m = &job.manifest;
    for e in &m.ranks {
        let why = e
            .error
            .as_ref()
            .map(|x| format!(" ({x})"))
            .unwrap_or_default();
        let steps = if e.status == "missing" {
            String::new()
        } else {
            format!(", {}", e.steps_text())
        };
        eprintln!("tensight: rank {} {}{why}{steps}", e.rank, e.status);
    }
    for w in &job.warnings {
        eprintln!("warning: {w}");
    }
    let Some((rank, dir)) = job.recorded.first() else {
        // not reached: with no rank's manifest, `record` said "nothing recorded" above
        return Ok(rec.exit_code);
    };
    if job.recorded.len() < 2 {
        // One rank recorded: its own report is the job's.
        let code = report_bundle(r, dir, rec.exit_code)?;
        eprintln!(
            "tensight: {} ranks in {} · only rank {rank} was recorded: its report is above",
            m.world_size,
            rec.dir.display()
        );
        return Ok(code);
    }
    report_ranks(r, &rec.dir, &job.recorded, rec.exit_code)
}

/// The cross-rank analysis of a recorded job: its reports beside the job's manifest,
/// each rank's own reports into its folder (`recorded`: rank, folder), the job's report
/// on stdout. Returns `code` (2 instead of 0 when it could not be analysed).
fn report_ranks(
    r: &RecordArgs,
    dir: &Path,
    recorded: &[(u64, PathBuf)],
    code: i32,
) -> tensight::Result<i32> {
    let analysed = tensight::read::ranks::discover(dir).and_then(|set| match set {
        Some(set) => tensight::analyze_ranks(&set, &dir.display().to_string()),
        None => Err(Error::new(format!(
            "no rank bundles in {}",
            tensight::text::shown(&dir.display().to_string())
        ))),
    });
    let report = match analysed {
        Ok(r) => r,
        Err(e) => {
            print_error(&e);
            eprintln!(
                "tensight: job bundle {} (no cross-rank report)",
                dir.display()
            );
            // Each rank's own reports still, as far as its bundle allows.
            for (_, d) in recorded {
                if let Ok(report) = tensight::analyze_path(d) {
                    write_reports(d, &report);
                }
            }
            return Ok(if code != 0 { code } else { 2 });
        }
    };
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    // Each rank's own reports into its folder, from the reports the analysis made
    // (`per_rank` is aligned with `summaries`).
    for (s, rep) in report.summaries.iter().zip(&report.per_rank) {
        if let Some((_, d)) = recorded.iter().find(|(k, _)| *k == u64::from(s.rank)) {
            write_reports(d, rep);
        }
    }
    let text = report::terminal::render_ranks(
        &report,
        RenderOptions {
            color: false,
            width: 80,
        },
    );
    let json = report::json::render_ranks(&report);
    let html = report::html::render_ranks(&report);
    write_files(
        dir,
        [
            ("report.txt", &text),
            ("report.json", &json),
            ("report.html", &html),
        ],
    );
    let shown = match r.format {
        Format::Json => json,
        Format::Html => html,
        Format::Text | Format::Perfetto => {
            terminal_text(r, text, |o| report::terminal::render_ranks(&report, o))
        }
    };
    write_stdout(&shown)?;
    eprintln!(
        "tensight: job bundle {} · cross-rank report {} · each rank's in rank*/report.txt",
        dir.display(),
        dir.join("report.txt").display()
    );
    Ok(code)
}

/// The text report for the terminal: `text` (the 80-column, colourless one written into
/// the bundle) unless colour or another width is asked for, then `render` with those.
fn terminal_text(r: &RecordArgs, text: String, render: impl Fn(RenderOptions) -> String) -> String {
    let color = use_color(ColorChoice::Auto);
    let width = r.width.unwrap_or_else(crate::default_width);
    if color || width != 80 {
        render(RenderOptions { color, width })
    } else {
        text
    }
}

/// A bundle's reports (text at 80 columns, JSON, HTML) written into it; returned too.
fn write_reports(dir: &Path, report: &report::Report) -> (String, String, String) {
    let text = report::terminal::render(
        report,
        RenderOptions {
            color: false,
            width: 80,
        },
    );
    let json = report::json::render(report);
    let html = report::html::render(report);
    write_files(
        dir,
        [
            ("report.txt", &text),
            ("report.json", &json),
            ("report.html", &html),
        ],
    );
    (text, json, html)
}

/// Each (name, body) into `dir`; a failure is a warning (the report still goes to stdout).
fn write_files(dir: &Path, files: [(&str, &String); 3]) {
    for (name, body) in files {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, body) {
            eprintln!(
                "warning: failed to write {}: {}",
                path.display(),
                io_cause(&e)
            );
        }
    }
}

/// Analyse one bundle: its reports into it, the report on stdout. Returns `code`
/// (2 instead of 0 when it could not be analysed).
fn report_bundle(r: &RecordArgs, dir: &Path, code: i32) -> tensight::Result<i32> {
    let tty = std::io::stderr().is_terminal();
    if tty {
        eprint!("tensight: analyzing {}…", dir.display());
    }
    let analysed = tensight::analyze_path(dir);
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
    let (text, json, html) = write_reports(dir, &report);
    let txt_path = dir.join("report.txt");
    let html_path = dir.join("report.html");
    let shown = match r.format {
        Format::Json => json,
        Format::Html => html,
        Format::Text => terminal_text(r, text, |o| report::terminal::render(&report, o)),
        Format::Perfetto => {
            // The annotated trace goes beside the reports; stdout gets the text report.
            let annotated = dir.join("annotated.json");
            let written = tensight::read::resolve(dir).and_then(|trace| {
                let file = std::fs::File::create(&annotated).map_err(|e| {
                    Error::new(format!("failed to write {}: {e}", annotated.display()))
                })?;
                let mut w = std::io::BufWriter::new(file);
                report::perfetto::write_file(&report, &trace, &mut w)
            });
            match written {
                Ok(()) => eprintln!("tensight: annotated trace {}", annotated.display()),
                Err(e) => eprintln!("warning: {}", e.message),
            }
            text
        }
    };
    write_stdout(&shown)?;
    eprintln!(
        "tensight: bundle {} · report {} · in a browser: {}",
        dir.display(),
        txt_path.display(),
        html_path.display()
    );
    Ok(code)
}

fn print_error(e: &Error) {
    eprintln!("error: {}", e.message);
    if let Some(h) = &e.hint {
        eprintln!("hint: {h}");
    }
}
