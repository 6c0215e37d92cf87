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
    /// Summaries written by `tensight summarize` (one per rank).
    #[arg(required = true, num_args = 1..)]
    summaries: Vec<PathBuf>,
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
