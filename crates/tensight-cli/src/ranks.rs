//! Many ranks of one job: `tensight analyze DIR` over a multi-rank folder,
//! `tensight summarize PATH -o rank.parquet` (one rank's summary) and
//! `tensight merge SUMMARIES…` (the cross-rank step from summaries alone). Glue only:
//! [`tensight::analyze_ranks`], [`tensight::merge`] and [`tensight::summary`] do the work.

use crate::output;
use std::path::{Path, PathBuf};
use tensight::report::{self, RanksReport, RenderOptions};

/// Arguments of `tensight summarize`.
#[derive(clap::Args)]
pub struct SummarizeArgs {
    /// One rank's trace (.json, .json.gz), a folder holding one, or its bundle.
    path: PathBuf,
    /// The file to write: one rank's summary, as Parquet (`.json`: as JSON).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: PathBuf,
    /// The rank, when neither the trace (`distributedInfo.rank`) nor the file name
    /// (`rank-N`) says.
    #[arg(long, value_name = "N")]
    rank: Option<u32>,
    /// Replace an existing file that is not a tensight summary.
    #[arg(long)]
    force: bool,
}

/// Arguments of `tensight merge`.
#[derive(clap::Args)]
pub struct MergeArgs {
    /// Summaries written by `tensight summarize` (one per rank). With --ray: the ranks'
    /// traces or bundles, or a folder of them (as `tensight analyze DIR` reads).
    #[arg(required = true, num_args = 1.., value_name = "SUMMARIES")]
    summaries: Vec<PathBuf>,
    /// Summarize every rank in a Ray task first (`tensight summarize`, one task per
    /// rank, the summaries carried back by Ray's object store), then merge here. Needs
    /// Ray: pip install 'tensight[ray]'.
    #[arg(long)]
    ray: bool,
    /// The Ray cluster for --ray (what `ray start --head` prints, e.g. 10.0.0.1:6379;
    /// `auto` for the one started on this machine). Default: RAY_ADDRESS, else a local
    /// Ray started for this run. The workers must see the traces at the same paths.
    #[arg(long, value_name = "ADDR", requires = "ray")]
    ray_address: Option<String>,
    /// With --ray: a folder the workers write the summaries into (a filesystem every
    /// node mounts at the same path) instead of the object store; they are kept there.
    #[arg(long, value_name = "DIR", requires = "ray")]
    summaries_dir: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = MergeFormat::Text)]
    format: MergeFormat,
    /// Write the report to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    #[arg(long, value_name = "N", help = crate::WIDTH_HELP)]
    width: Option<usize>,
    /// With -o, replace an existing file that is not a tensight report.
    #[arg(long, requires = "output")]
    force: bool,
}

#[derive(Clone, Copy, clap::ValueEnum, PartialEq)]
enum MergeFormat {
    /// A report for people.
    Text,
    /// The documented JSON schema (the multi-rank shape).
    Json,
}

/// `tensight summarize`.
pub fn summarize(args: SummarizeArgs) -> tensight::Result<i32> {
    let inputs = output::inputs(&args.path, &[]);
    output::check(&args.output, &inputs, args.force)?;
    let report = tensight::analyze_path(&args.path)?;
    for w in &report.warnings {
        eprintln!("warning: {}", crate::safe(w));
    }
    let traced = report
        .profile
        .meta
        .distributed
        .as_ref()
        .and_then(|d| d.rank)
        .and_then(|r| u32::try_from(r).ok());
    let rank = args
        .rank
        .or(traced)
        .or_else(|| tensight::read::ranks::rank_from_name(&args.path))
        .ok_or_else(|| {
            tensight::Error::new(format!(
                "failed to summarize {}: no rank (no distributedInfo.rank in the trace, no rank-N in its name)",
                tensight::text::shown(&args.path.display().to_string())
            ))
            .with_hint("pass --rank N")
        })?;
    let summary = tensight::rank_summary(&report, rank);
    let json = args
        .output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let bytes = if json {
        tensight::summary::to_bytes(&summary)?
    } else {
        tensight::summary::to_parquet(&summary)
    };
    output::write_bytes(&args.output, &bytes, &inputs, args.force)?;
    eprintln!(
        "tensight: rank {rank} summary written to {}",
        tensight::text::shown(&args.output.display().to_string())
    );
    Ok(0)
}

/// `tensight merge`.
pub fn merge(args: MergeArgs) -> tensight::Result<i32> {
    if args.ray {
        return merge_on_ray(args);
    }
    let mut summaries = Vec::with_capacity(args.summaries.len());
    for p in &args.summaries {
        summaries.push(tensight::summary::read_file(p)?);
    }
    let shown: Vec<String> = args
        .summaries
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let input = if shown.len() > 3 {
        format!("{}, … ({} summaries)", shown[..2].join(", "), shown.len())
    } else {
        shown.join(", ")
    };
    let r = tensight::merge(summaries, None, &input)?;
    let text = match args.format {
        MergeFormat::Json => report::json::render_ranks(&r),
        MergeFormat::Text => text(
            &r,
            args.width,
            args.output.is_none() && crate::use_color(crate::ColorChoice::Auto),
        ),
    };
    write(&text, args.output.as_deref(), &args.summaries, args.force)
}

/// `tensight merge --ray`: `$TENSIGHT_PYTHON -m tensight.distributed …` (Ray is a
/// Python library; that module maps `summarize` over Ray tasks and runs this `merge`).
fn merge_on_ray(args: MergeArgs) -> tensight::Result<i32> {
    let python = std::env::var_os("TENSIGHT_PYTHON")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            tensight::Error::new(
                "`tensight merge --ray` needs the Python package: pip install 'tensight[ray]'",
            )
            .with_hint(
                "run the `tensight` command that pip installs (from a clone: pip install '.[ray]'); the bare Rust binary cannot start Ray",
            )
        })?;
    let mut cmd = std::process::Command::new(&python);
    cmd.args(["-m", "tensight.distributed"]);
    if let Some(a) = &args.ray_address {
        cmd.arg("--address").arg(a);
    }
    if let Some(d) = &args.summaries_dir {
        cmd.arg("--summaries-dir").arg(d);
    }
    let format = match args.format {
        MergeFormat::Text => "text",
        MergeFormat::Json => "json",
    };
    cmd.args(["--format", format]);
    if let Some(o) = &args.output {
        cmd.arg("--output").arg(o);
    }
    if let Some(w) = args.width {
        cmd.arg("--width").arg(w.to_string());
    }
    if args.force {
        cmd.arg("--force");
    }
    cmd.arg("--").args(&args.summaries);
    let status = cmd.status().map_err(|e| {
        tensight::Error::new(format!(
            "failed to start {} -m tensight.distributed: {e}",
            tensight::text::shown(&python.to_string_lossy())
        ))
    })?;
    Ok(status.code().unwrap_or(2))
}

/// `tensight analyze DIR` over a multi-rank folder: text, JSON or HTML.
pub fn analyze(
    set: &tensight::read::ranks::RankSet,
    path: &Path,
    format: crate::Format,
    out: &crate::OutputArgs,
) -> tensight::Result<RanksReport> {
    let r = tensight::analyze_ranks(set, &path.display().to_string())?;
    for w in &r.warnings {
        eprintln!("warning: {}", crate::safe(w));
    }
    let text = match format {
        crate::Format::Json => report::json::render_ranks(&r),
        crate::Format::Html => report::html::render_ranks(&r),
        crate::Format::Text => text(
            &r,
            out.width,
            out.output.is_none() && crate::use_color(out.color),
        ),
        crate::Format::Perfetto => {
            return Err(tensight::Error::new(
                "--format perfetto annotates one trace: pass one rank's trace",
            ))
        }
    };
    let inputs = output::inputs(path, &[]);
    write(&text, out.output.as_deref(), &inputs, out.force)?;
    Ok(r)
}

fn text(r: &RanksReport, width: Option<usize>, color: bool) -> String {
    report::terminal::render_ranks(
        r,
        RenderOptions {
            color,
            width: width.unwrap_or_else(crate::default_width),
        },
    )
}

fn write(text: &str, to: Option<&Path>, inputs: &[PathBuf], force: bool) -> tensight::Result<i32> {
    match to {
        Some(path) => {
            output::write(path, text, inputs, force)?;
            eprintln!(
                "tensight: report written to {}",
                tensight::text::shown(&path.display().to_string())
            );
        }
        None => crate::write_stdout(text)?,
    }
    Ok(0)
}
