//! The `tensight` command line: parse arguments, dispatch, print errors. Glue only.
//!
//! stdout carries only the report; progress, warnings and errors go to stderr.
//! Exit codes: 0 ok, 1 a finding at or above `--fail-on`, 2 error. A closed pipe
//! (`tensight analyze x | head`) exits 0.

mod demo;
mod diff;
mod output;
mod ranks;
mod rules_text;
mod run;

use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use tensight::report::{self, RenderOptions, Report};
use tensight::rules::{self, Severity};

#[derive(Parser)]
#[command(
    name = "tensight",
    version,
    about = "Why is my PyTorch GPU program slow, and what should I change?",
    long_about = "tensight reads PyTorch profiler (Kineto) traces and reports the bottlenecks ranked by \
how much time each costs per step, with the evidence, the op, kernel and source line behind each, \
and the change that fixes it.\n\nStart with `tensight demo` to see a report of a real H200 run, then \
`tensight analyze TRACE` on your own trace (the .json or .json.gz written by torch.profiler).",
    after_help = "Examples:\n  tensight demo\n  tensight analyze trace.json.gz\n  tensight analyze ./log/ --format json -o report.json\n  tensight analyze trace.json.gz --format html -o report.html\n  tensight analyze trace.json.gz --format perfetto -o annotated.json\n  tensight diff before/ after/\n  tensight analyze ranks/                  # every rank of a job\n  tensight rules S001"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Diagnose a PyTorch profiler trace (.json, .json.gz, or a folder holding one).
    #[command(
        after_help = "Record a trace with:\n  with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n                              record_shapes=True, with_stack=True) as prof:\n      for step in range(5): train_step(); prof.step()\n  prof.export_chrome_trace(\"trace.json\")\nrecord_shapes enables FLOPs and the roofline; with_stack names source lines."
    )]
    Analyze {
        /// Trace file, a folder (e.g. a TensorBoard log dir) holding one, or a bundle
        /// folder written by `tensight run`. A folder of two or more rank traces, or of
        /// rank0/, rank1/, … bundles, is read as the ranks of one job and compared
        /// (docs/distributed.md).
        path: PathBuf,
        /// Execution trace recorded with the trace (ExecutionTraceObserver's et.json):
        /// links tensors (ids, storages, shapes, strides, dtypes) to the ops.
        #[arg(long, value_name = "FILE")]
        et: Option<PathBuf>,
        /// Nsight Compute CSV of the same program (`ncu --csv --page raw`, plain or
        /// gzip): per-kernel hardware counters, aligned with the trace's kernels; enables
        /// the rules that need a hardware pass (V001, M001–M003).
        #[arg(long, value_name = "FILE")]
        ncu: Option<PathBuf>,
        /// Print the tensor forest of the execution trace (base tensors and their views,
        /// with modelled traffic) instead of the report: a text tree (`--forest`),
        /// Graphviz DOT (`--forest=dot`) or JSON (`--forest=json`).
        #[arg(long, value_enum, value_name = "FORMAT", num_args = 0..=1,
              require_equals = true, default_missing_value = "tree")]
        forest: Option<ForestFormat>,
        #[command(flatten)]
        out: OutputArgs,
        /// Exit with code 1 when a finding is at least this severe.
        #[arg(long, value_name = "SEVERITY", value_parser = ["info", "low", "moderate", "severe", "critical"])]
        fail_on: Option<String>,
        /// Most bytes one gzip input may inflate to (K/M/G/T suffixes; default 8G, or
        /// TENSIGHT_MAX_INFLATED). Plain files are memory-mapped and have no such limit.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_inflated: Option<u64>,
        /// Most inflated bytes per compressed byte before a gzip input is taken for a
        /// decompression bomb (default 100, or TENSIGHT_MAX_RATIO; real traces: 5-20).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_ratio: Option<u64>,
    },
    /// Run a Python program under the profiler and diagnose it.
    #[command(
        after_help = "Examples:\n  tensight run -- python train.py --epochs 1\n  tensight run --steps 10 --warmup 5 --stop -- python -m mypkg.train\n  tensight run -- python bench.py          # a loop with no optimizer or module\n\nThe program runs unmodified. Steps are found from optimizer.step() calls, else top-level\nforward calls of modules with parameters, else the iterations of the loop of your code\nthat holds the work (a benchmark loop, hand-written SGD). The first W run unprofiled and\ntimed, then the profiler's warm-up, then N timed steps recorded lean (no stacks or shapes,\nwhich would slow a busy host), then one step later a detail step with stacks, shapes,\nallocator events and the execution trace. The bundle gets report.txt,\nreport.json and report.html (open it in a browser); the exit code is the program's."
    )]
    Run(run::RunArgs),
    /// Train a built-in model on synthetic data, profiled and diagnosed.
    #[command(
        after_help = "Example:\n  tensight bench --model resnet50 --batch-size 32 --steps 20 --amp"
    )]
    Bench(run::BenchArgs),
    /// Compare two runs (bundles or traces): step time, GPU busy, findings resolved or
    /// new, the kernels and ops that changed most.
    #[command(after_help = diff::AFTER_HELP)]
    Diff(diff::DiffArgs),
    /// Analyze real profiles recorded on an NVIDIA H200 that ship with tensight.
    Demo {
        /// Which demo (default: resnet50, followed by a line for each of the others).
        #[arg(value_parser = demo::names())]
        name: Option<String>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Write one rank's summary (per-step times, collectives, top causes) as Parquet,
    /// for `tensight merge` to compare many ranks without their traces.
    #[command(
        after_help = "Example:\n  tensight summarize rank3/trace.json.gz -o summaries/rank3.parquet\n\nThe schema is documented in docs/distributed.md."
    )]
    Summarize(ranks::SummarizeArgs),
    /// Compare the ranks of one job from their summaries (`tensight summarize`): the
    /// same cross-rank findings as `tensight analyze DIR`.
    #[command(
        after_help = "Examples:\n  tensight merge summaries/*.parquet --format json\n  tensight merge --ray run-042/                      # summarize each rank on Ray, then merge\n  tensight merge --ray --ray-address auto traces/    # on the cluster `ray start --head` began\n\n--ray needs Ray: pip install 'tensight[ray]'. The same report as `tensight analyze DIR`'s\ncross-rank step (docs/distributed.md)."
    )]
    Merge(ranks::MergeArgs),
    /// List the rules, or print one rule's documentation (like `ruff rule`).
    Rules {
        /// A rule code (S001) or name (host-sync-in-step).
        code: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = RulesFormat::Text)]
        format: RulesFormat,
        #[arg(long, value_name = "N", help = WIDTH_HELP)]
        width: Option<usize>,
    },
}

#[derive(clap::Args)]
pub(crate) struct OutputArgs {
    /// Output format: `text` for a terminal, `json` (the documented schema) for programs,
    /// `html` for one self-contained page (roofline plot, step timeline, findings linked to
    /// their ops, kernels, tensors and source lines, sortable tables; loads nothing from
    /// the network).
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
    /// Write the report to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Colour the text report.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub(crate) color: ColorChoice,
    #[arg(long, value_name = "N", help = WIDTH_HELP)]
    pub(crate) width: Option<usize>,
    /// With -o, replace an existing file that is not a tensight report (an earlier
    /// report is replaced without asking; an input never is).
    #[arg(long, requires = "output")]
    pub(crate) force: bool,
}

/// The `--help` of every `--width`.
pub(crate) const WIDTH_HELP: &str = "Wrap the text at this many columns (60 to 120). Default: \
$COLUMNS when it is a number, else the terminal's width when stdout is a terminal, else 80.";

impl OutputArgs {
    /// `--width`, or its default ([`default_width`]).
    fn width(&self) -> usize {
        self.width.unwrap_or_else(default_width)
    }
}

/// The width when `--width` is not given: `COLUMNS` if it is a number, else the
/// terminal's width when stdout is a terminal, else 80.
pub(crate) fn default_width() -> usize {
    width_from(std::env::var("COLUMNS").ok().as_deref(), || {
        if std::io::stdout().is_terminal() {
            terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
        } else {
            None
        }
    })
}

/// [`default_width`] from the value of `COLUMNS` and a query of the terminal.
fn width_from(columns: Option<&str>, terminal: impl FnOnce() -> Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(terminal)
        .filter(|&n| n > 0)
        .unwrap_or(80)
}

fn parse_size(s: &str) -> Result<u64, String> {
    tensight::read::limits::parse_size(s)
        .ok_or_else(|| format!("`{s}` is not a size (e.g. 8G, 512M, 1048576)"))
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum Format {
    /// A report for people.
    Text,
    /// The documented JSON schema (see `schema_version`).
    Json,
    /// The original trace with the findings added as tracks, slices and flow arrows
    /// (Chrome trace JSON: open it in ui.perfetto.dev or chrome://tracing).
    Perfetto,
    /// One self-contained HTML page with plots and sortable tables.
    Html,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum RulesFormat {
    /// A list, or one rule's documentation.
    Text,
    /// Each rule's code, name, category, status and documentation.
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum ForestFormat {
    /// Each base tensor with its views drawn as a tree.
    Tree,
    /// Graphviz DOT: `dot -Tsvg forest.dot -o forest.svg`.
    Dot,
    /// Every tensor node, flat, with parent and children indices.
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is unset.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Set by [`run_and_exit`]: the process ends right after the command, so the analysed
/// report is left to the OS instead of being freed piece by piece (2–3% of `analyze` on
/// a large trace: millions of ops, frames and kernels). [`run`] alone, as the Python
/// extension calls it inside a process that may go on, frees it.
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// [`run`], then exit with its code (the `tensight` binary).
pub fn run_and_exit(args: Vec<OsString>) -> ! {
    EXITING.store(true, std::sync::atomic::Ordering::Relaxed);
    std::process::exit(run(args))
}

/// Done with `report`: dropped, or left to the OS when the process is about to exit.
fn done_with(report: Report) {
    if EXITING.load(std::sync::atomic::Ordering::Relaxed) {
        std::mem::forget(report);
    }
}

/// Run the CLI with `args` (including the program name); returns the exit code
/// (0 ok, 1 findings at or above `--fail-on`, 2 error).
pub fn run(args: Vec<OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "error: {}", safe(&e.message));
            if let Some(h) = &e.hint {
                let _ = writeln!(err, "hint: {}", safe(h));
            }
            2
        }
    }
}

fn dispatch(cli: Cli) -> tensight::Result<i32> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Bench(args) => run::bench(args),
        Command::Diff(args) => diff::run(args),
        Command::Summarize(args) => ranks::summarize(args),
        Command::Merge(args) => ranks::merge(args),
        Command::Analyze {
            path,
            et,
            ncu,
            forest,
            out,
            fail_on,
            max_inflated,
            max_ratio,
        } => {
            tensight::read::limits::Limits::set(max_inflated, max_ratio);
            if et.is_none() && ncu.is_none() && forest.is_none() {
                if let Some(set) = tensight::read::ranks::discover(&path)? {
                    if let [one] = set.inputs.as_slice() {
                        return analyze_one(&one.path, &out, fail_on.as_deref());
                    }
                    let r = ranks::analyze(&set, &path, out.format, &out)?;
                    return Ok(fail_code(&r.diagnosis.findings, fail_on.as_deref()));
                }
            }
            let extra: Vec<&std::path::Path> =
                et.iter().chain(ncu.iter()).map(|p| p.as_path()).collect();
            let inputs = output::inputs(&path, &extra);
            if let Some(o) = &out.output {
                // Refuse before the (possibly long) read, and again when writing.
                output::check(o, &inputs, out.force)?;
            }
            let progress = std::io::stderr().is_terminal();
            if progress {
                let file = tensight::read::resolve(&path).unwrap_or_else(|_| path.clone());
                let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
                eprint!(
                    "tensight: reading {} ({})…",
                    tensight::text::shown(&path.display().to_string()),
                    rules::fmt_bytes(size as f64)
                );
            }
            let report = tensight::analyze_path_with(&path, et.as_deref(), ncu.as_deref());
            if progress {
                eprint!("\r\x1b[2K");
            }
            let report = report?;
            for w in &report.warnings {
                eprintln!("warning: {}", safe(w));
            }
            if let Some(ff) = forest {
                emit_forest(&report, ff, &out, &inputs)?;
                return Ok(0);
            }
            if out.format == Format::Perfetto {
                let trace = tensight::read::resolve(&path)?;
                emit_perfetto(&out, &inputs, |w| {
                    report::perfetto::write_file(&report, &trace, w)
                })?;
            } else {
                emit(&report, &out, &inputs)?;
            }
            let code = fail_code(&report.diagnosis.findings, fail_on.as_deref());
            done_with(report);
            Ok(code)
        }
        Command::Demo { name, out } => {
            // clap has checked the name against demo::names().
            let demo = name
                .as_deref()
                .and_then(demo::find)
                .unwrap_or(&demo::DEMOS[0]);
            let report = demo.report()?;
            if out.format == Format::Perfetto {
                emit_perfetto(&out, &[], |w| {
                    report::perfetto::write_bytes(&report, demo.trace(), w)
                })?;
                return Ok(0);
            }
            emit(&report, &out, &[])?;
            if out.format == Format::Text && out.output.is_none() {
                let w = out.width();
                if name.is_none() {
                    write_stdout(&demo::others(demo.name, w))?;
                }
                write_stdout(&demo::closing(w))?;
            }
            Ok(0)
        }
        Command::Rules {
            code,
            format,
            width,
        } => {
            let w = width.unwrap_or_else(default_width).clamp(60, 120);
            let text = rules_text(code.as_deref(), format, w)?;
            write_stdout(&text)?;
            Ok(0)
        }
    }
}

/// A message for stderr: one sanitizer ([`tensight::text::terminal_safe`]) over it, so a
/// name quoted from an input cannot drive the terminal.
pub(crate) fn safe(msg: &str) -> std::borrow::Cow<'_, str> {
    tensight::text::terminal_safe(msg, false)
}

pub(crate) fn use_color(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    }
}

/// `analyze` of one input found in a multi-rank layout (a job of one rank).
fn analyze_one(
    path: &std::path::Path,
    out: &OutputArgs,
    fail_on: Option<&str>,
) -> tensight::Result<i32> {
    let inputs = output::inputs(path, &[]);
    let report = tensight::analyze_path(path)?;
    for w in &report.warnings {
        eprintln!("warning: {}", safe(w));
    }
    emit(&report, out, &inputs)?;
    let code = fail_code(&report.diagnosis.findings, fail_on);
    done_with(report);
    Ok(code)
}

/// 1 when a finding is at least as severe as `--fail-on`, else 0.
fn fail_code(findings: &[rules::Finding], fail_on: Option<&str>) -> i32 {
    match fail_on.and_then(Severity::parse) {
        Some(t) if findings.iter().any(|f| f.severity >= t) => 1,
        _ => 0,
    }
}

fn emit_forest(
    report: &Report,
    ff: ForestFormat,
    out: &OutputArgs,
    inputs: &[PathBuf],
) -> tensight::Result<()> {
    let Some(f) = &report.metrics.tensors else {
        return Err(tensight::Error::new(format!(
            "{} has no execution trace: no tensor forest to print",
            tensight::text::shown(&report.input)
        ))
        .with_hint("analyze a bundle written by `tensight run`, or pass --et et.json.gz"));
    };
    let text = match ff {
        ForestFormat::Dot => report::forest::dot(f),
        ForestFormat::Json => {
            let mut s = serde_json::to_string_pretty(f).unwrap_or_default();
            s.push('\n');
            s
        }
        ForestFormat::Tree => report::forest::text(f, &report.input, out.width()),
    };
    write_out(&text, out, inputs)
}

/// Write output produced as it goes (the annotated trace) to `-o FILE` or stdout.
fn emit_perfetto(
    out: &OutputArgs,
    inputs: &[PathBuf],
    produce: impl FnOnce(&mut dyn Write) -> tensight::Result<()>,
) -> tensight::Result<()> {
    match &out.output {
        Some(path) => {
            output::write_with(path, inputs, out.force, produce)?;
            eprintln!(
                "tensight: annotated trace written to {} (open it in https://ui.perfetto.dev)",
                tensight::text::shown(&path.display().to_string())
            );
            Ok(())
        }
        None => {
            let mut w = output::Stdout::default();
            produce(&mut w)
        }
    }
}

fn emit(report: &Report, out: &OutputArgs, inputs: &[PathBuf]) -> tensight::Result<()> {
    let _p = tensight::phases::start("render and write");
    let text = match out.format {
        Format::Json => report::json::render(report),
        Format::Perfetto => {
            return Err(tensight::Error::new(
                "--format perfetto annotates a trace: use it with `tensight analyze` or `tensight demo`",
            ))
        }
        Format::Html => report::html::render(report),
        Format::Text => {
            let color = out.output.is_none() && use_color(out.color);
            report::terminal::render(
                report,
                RenderOptions {
                    color,
                    width: out.width(),
                },
            )
        }
    };
    write_out(&text, out, inputs)
}

fn write_out(text: &str, out: &OutputArgs, inputs: &[PathBuf]) -> tensight::Result<()> {
    match &out.output {
        Some(path) => {
            output::write(path, text, inputs, out.force)?;
            eprintln!(
                "tensight: report written to {}",
                tensight::text::shown(&path.display().to_string())
            );
            Ok(())
        }
        None => write_stdout(text),
    }
}

pub(crate) fn write_stdout(text: &str) -> tensight::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(tensight::Error::new(format!(
            "failed to write the report: {e}"
        ))),
    }
}

fn rules_text(code: Option<&str>, format: RulesFormat, w: usize) -> tensight::Result<String> {
    let selected: Vec<&rules::RuleMeta> = match code {
        Some(c) => vec![rules::find_meta(c).ok_or_else(|| {
            tensight::Error::new(format!("unknown rule {c}"))
                .with_hint("`tensight rules` lists every rule")
        })?],
        None => rules::all_meta().collect(),
    };
    Ok(match format {
        RulesFormat::Json => {
            let mut s = serde_json::to_string_pretty(&selected).unwrap_or_default();
            s.push('\n');
            s
        }
        RulesFormat::Text if code.is_some() => rules_text::doc(selected[0], w),
        RulesFormat::Text => rules_text::list(&selected, w),
    })
}

#[cfg(test)]
mod tests {
    use super::width_from;

    #[test]
    fn width_default_columns_wins_then_terminal_then_80() {
        assert_eq!(width_from(Some("100"), || Some(200)), 100);
        assert_eq!(width_from(Some("100"), || None), 100);
        // Not a number: the terminal's width, else (not a terminal) 80.
        assert_eq!(width_from(Some("wide"), || None), 80);
        assert_eq!(width_from(Some("wide"), || Some(132)), 132);
        assert_eq!(width_from(Some(""), || None), 80);
        assert_eq!(width_from(None, || Some(132)), 132);
        assert_eq!(width_from(None, || None), 80);
        assert_eq!(width_from(Some("0"), || None), 80);
    }
}
