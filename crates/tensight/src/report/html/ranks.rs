//! The Ranks section of a multi-rank HTML report: the per-rank table, the straggler,
//! the collectives' transfer/wait split and the cross-rank findings. Values only; the
//! template escapes every string.

use super::{finding_views, FindingView, Links};
use crate::report::RanksReport;
use crate::rules::fmt_ms;
use serde::Serialize;

/// What the template's Ranks section shows.
#[derive(Serialize)]
pub(super) struct RanksView {
    head: String,
    rows: Vec<Row>,
    lines: Vec<String>,
    findings: Vec<FindingView>,
    warnings: Vec<String>,
    focus: u32,
}

#[derive(Serialize)]
struct Row {
    rank: u32,
    slowest: bool,
    step_ms: f64,
    step: String,
    busy_pct: f64,
    busy: String,
    comm_pct: f64,
    comm: String,
    exposed_ms: f64,
    exposed: String,
    wait_ms: f64,
    wait: String,
    own_ms: f64,
    own: String,
    source: String,
}

/// The section's values.
pub(super) fn view(r: &RanksReport, links: &Links) -> RanksView {
    let a = &r.analysis;
    let rows = a
        .ranks
        .iter()
        .map(|x| Row {
            rank: x.rank,
            slowest: x.rank == a.slowest_rank,
            step_ms: x.step_ms,
            step: fmt_ms(x.step_ms),
            busy_pct: x.busy_pct,
            busy: format!("{:.0}%", x.busy_pct),
            comm_pct: x.comm_pct,
            comm: format!("{:.0}%", x.comm_pct),
            exposed_ms: x.exposed_comm_ms,
            exposed: fmt_ms(x.exposed_comm_ms),
            wait_ms: x.wait_ms,
            wait: fmt_ms(x.wait_ms),
            own_ms: x.own_ms,
            own: fmt_ms(x.own_ms),
            source: crate::text::cut(&x.source, 120),
        })
        .collect();
    let mut lines = Vec::new();
    if let Some(e) = a.slowest_excess.first() {
        lines.push(format!(
            "Slowest rank {}: most of the difference is {} ({} per step against {} on the others)",
            a.slowest_rank,
            e.label,
            fmt_ms(e.rank_ms),
            fmt_ms(e.others_ms)
        ));
    }
    if let Some(f) = &a.slowest_frame {
        lines.push(format!(
            "In the program's own code, rank {} spends {} per step in {} against {} on the others",
            a.slowest_rank,
            fmt_ms(f.rank_ms),
            f.name,
            fmt_ms(f.others_ms)
        ));
    }
    let c = &a.collectives;
    lines.push(format!(
        "Collectives: {} instances matched on every rank; per step over all ranks {} = {} transfer + {} waiting",
        c.matched,
        fmt_ms(c.total_ms),
        fmt_ms(c.transfer_ms),
        fmt_ms(c.wait_ms)
    ));
    for k in &c.top {
        lines.push(format!(
            "{}, {:.1}× per step: {} transfer, {} waiting",
            k.label(),
            k.per_step,
            fmt_ms(k.transfer_ms),
            fmt_ms(k.wait_ms)
        ));
    }
    RanksView {
        head: format!(
            "{} ranks of world size {}, {} steps compared; job step {} (the slowest rank's, mean). Waiting: communication beyond the fastest rank's instance; own work: step less waiting.",
            a.ranks.len(),
            a.world_size,
            a.steps,
            fmt_ms(a.job_step_ms)
        ),
        rows,
        lines,
        findings: finding_views(&r.diagnosis.findings, "rank-finding", links),
        warnings: r.warnings.clone(),
        focus: r.focus_rank,
    }
}
