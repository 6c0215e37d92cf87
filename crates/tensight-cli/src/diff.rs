//! `tensight diff BEFORE AFTER`: analyse two runs as `analyze` does and print what
//! changed ([`tensight::compare`], rendered by [`tensight::report::diff`]). Glue only.

use crate::output;
use std::path::PathBuf;
use tensight::report::{self, RenderOptions};

/// Arguments of `tensight diff`.
#[derive(clap::Args)]
pub struct DiffArgs {
    /// The run before the change: a bundle written by `tensight run`, a trace file
    /// (.json, .json.gz) or a folder holding one.
    before: PathBuf,
    /// The run after the change (the same kinds of input).
    after: PathBuf,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = DiffFormat::Text)]
    format: DiffFormat,
    /// Write the comparison to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    #[arg(long, value_name = "N", help = crate::WIDTH_HELP)]
    width: Option<usize>,
    /// With -o, replace an existing file that is not a tensight report.
    #[arg(long, requires = "output")]
    force: bool,
}

#[derive(Clone, Copy, clap::ValueEnum, PartialEq)]
enum DiffFormat {
    /// A comparison for people.
    Text,
    /// The documented JSON schema (`schema_version`, `kind: "diff"`).
    Json,
    /// One self-contained HTML page: the step table and a bar chart of the step before
    /// and after (GPU busy and idle), the findings with a chart of their savings, and
    /// sortable kernel and op tables (loads nothing from the network).
    Html,
}

/// Examples and what the comparison holds, for `tensight diff --help`.
pub const AFTER_HELP: &str = "Examples:
  tensight diff run-before/ run-after/             # two bundles of `tensight run`
  tensight diff base.json.gz fixed.json.gz         # two torch.profiler traces
  tensight diff before/ after/ --format json -o diff.json
  tensight diff before/ after/ --format html -o diff.html   # one page, charts and tables

Record the same program before and after a change, e.g.
  tensight run --out before -- python train.py
  (apply the fix tensight suggested)
  tensight run --out after -- python train.py
  tensight diff before after

Each side is analysed as `tensight analyze` does. The comparison shows the step time
(mean in the trace, and without the profiler when both are bundles) and GPU busy before
and after with their ratio, each finding resolved, new, changed or unchanged with its
estimated saving, and the kernels and ops whose time per step changed most. --format html
writes it as one self-contained page (to stdout without -o, as `analyze` does) with a bar
chart of the step before and after split into GPU busy and idle, a chart of each
finding's saving before and after, and sortable kernel and op tables.";

/// Run `tensight diff`.
pub fn run(a: DiffArgs) -> tensight::Result<i32> {
    let mut inputs = output::inputs(&a.before, &[]);
    inputs.extend(output::inputs(&a.after, &[]));
    if let Some(o) = &a.output {
        output::check(o, &inputs, a.force)?;
    }
    let side = |which: &str, path: &PathBuf| {
        tensight::analyze_path(path).map_err(|mut e| {
            e.message = format!("{which} run: {}", e.message);
            e
        })
    };
    let before = side("before", &a.before)?;
    let after = side("after", &a.after)?;
    for (which, r) in [("before", &before), ("after", &after)] {
        for w in &r.warnings {
            eprintln!(
                "warning: {which} run: {}",
                tensight::text::terminal_safe(w, false)
            );
        }
    }
    let c = tensight::compare::compare(&before, &after);
    let text = match a.format {
        DiffFormat::Json => report::diff::render_json(&c),
        DiffFormat::Html => report::html::render_diff(&c),
        DiffFormat::Text => report::diff::render_text(
            &c,
            RenderOptions {
                color: false,
                width: a.width.unwrap_or_else(crate::default_width),
            },
        ),
    };
    match &a.output {
        Some(path) => {
            output::write(path, &text, &inputs, a.force)?;
            eprintln!(
                "tensight: diff written to {}",
                tensight::text::shown(&path.display().to_string())
            );
        }
        None => crate::write_stdout(&text)?,
    }
    Ok(0)
}
