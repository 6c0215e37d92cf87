//! One finding per cause: a rule that finds the same problem at the same place several
//! times (a transposed view made on one line in each layer, a `.item()` in a loop's body
//! reached from each iteration) reports one finding for it, not one per instance.
//!
//! The cause is the rule, its title without figures (a `.item()` and an event sync are
//! two causes of S001) and the first location's source line and op (or op, kernel and
//! tensor without a source line). Findings without a location stay as they are. The
//! merged finding keeps the largest instance's text and evidence, says how many
//! instances it stands for, lists their locations once each, and saves what they save
//! together when every instance has a change (the replay of their changes at once, each
//! instant counted once); else the largest instance's estimate, as its estimate says:
//! instances of one cause may share ops (a layout carried from one layer into the next),
//! so a sum of estimates would count some time twice.

use crate::analysis::simulate::{self, Change};
use crate::rules::{Context, Evidence, Finding, Location};
use std::collections::HashMap;

/// Most locations a merged finding lists.
const MAX_LOCATIONS: usize = 8;

/// `findings` with the instances of one cause merged into one finding each; the order
/// of first appearance is kept.
pub fn same_cause(ctx: &Context, findings: Vec<Finding>) -> Vec<Finding> {
    let mut groups: Vec<Vec<Finding>> = Vec::new();
    let mut index: HashMap<(&'static str, String), usize> = HashMap::new();
    for f in findings {
        match cause(&f) {
            Some(key) => match index.get(&key) {
                Some(&g) => groups[g].push(f),
                None => {
                    index.insert(key, groups.len());
                    groups.push(vec![f]);
                }
            },
            None => groups.push(vec![f]),
        }
    }
    groups.into_iter().map(|g| merged(ctx, g)).collect()
}

/// The cause a finding names, `None` when it names no place.
fn cause(f: &Finding) -> Option<(&'static str, String)> {
    let l = f.locations.first()?;
    let title: String = f.title.chars().filter(|c| !c.is_ascii_digit()).collect();
    let place = match &l.source {
        Some(src) => format!("{src}\u{1f}{}", l.op.as_deref().unwrap_or("")),
        None => format!(
            "\u{1f}{}\u{1f}{}\u{1f}{}",
            l.op.as_deref().unwrap_or(""),
            l.kernel.as_deref().unwrap_or(""),
            l.tensor.as_deref().unwrap_or("")
        ),
    };
    Some((f.code, format!("{title}\u{1f}{place}")))
}

/// One finding for the instances of one cause.
fn merged(ctx: &Context, mut group: Vec<Finding>) -> Finding {
    if group.len() == 1 {
        return group.remove(0);
    }
    // Replayed together when every instance has a change; a finding measured on top of
    // another's change (`after`) is not additive with its siblings', so not replayed.
    let change = if group.iter().any(|f| f.after.is_some()) {
        None
    } else {
        let changes: Option<Vec<&Change>> = group.iter().map(|f| f.change.as_ref()).collect();
        changes.map(|cs| cs.iter().skip(1).fold(cs[0].clone(), |acc, c| acc.and(c)))
    };
    keep_largest_with_count(ctx, group, change)
}

fn keep_largest_with_count(
    ctx: &Context,
    mut group: Vec<Finding>,
    change: Option<Change>,
) -> Finding {
    let n = group.len();
    group.sort_by(|a, b| b.saving_ms.total_cmp(&a.saving_ms));
    let mut locations: Vec<Location> = Vec::new();
    for l in group.iter().flat_map(|f| f.locations.iter()) {
        if locations.len() < MAX_LOCATIONS && !locations.contains(l) {
            locations.push(l.clone());
        }
    }
    let mut f = group.remove(0);
    let saving = match &change {
        Some(c) => simulate::saving_ns(ctx.profile, c) as f64 / 1e6 / ctx.steps(),
        None => f.saving_ms,
    };
    f.locations = locations;
    f.evidence.insert(
        0,
        Evidence {
            label: "instances of this cause".into(),
            value: match &change {
                Some(_) => format!(
                    "{n} (the figures below are the largest's; the saving is theirs together)"
                ),
                None => format!("{n} (the figures below and the saving are the largest's)"),
            },
        },
    );
    f.message = format!("{} ({n} instances of this cause in the steps)", f.message);
    f.estimate = match &change {
        Some(_) => format!(
            "the {n} instances' changes replayed at once: {}",
            f.estimate
        ),
        None => format!(
            "the largest of the {n} instances (they may share ops, so their sum would count \
             some time twice; the saving of all is at least this): {}",
            f.estimate
        ),
    };
    if change.is_some() {
        f.change = change;
    }
    f.set_saving(saving, ctx.step_ms());
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Category, Severity};

    fn finding(code: &'static str, source: &str, saving: f64) -> Finding {
        Finding {
            code,
            rule: "r",
            category: Category::Views,
            title: "t".into(),
            message: "m".into(),
            saving_ms: saving,
            saving_pct: 0.0,
            estimate: "e".into(),
            severity: Severity::Info,
            evidence: vec![],
            explanation: String::new(),
            fixes: vec![],
            locations: vec![Location {
                op: Some("aten::transpose".into()),
                kernel: None,
                tensor: None,
                source: Some(source.into()),
            }],
            change: None,
            after: None,
            marginal_ms: None,
        }
    }

    #[test]
    fn instances_of_one_source_line_become_one_finding_with_the_largest_estimate() {
        let p = crate::model::Profile::default();
        let m = crate::analysis::analyze(&p);
        let ctx = Context::new(&p, &m);
        let out = same_cause(
            &ctx,
            vec![
                finding("V003", "a.py(3): f", 1.0),
                finding("V003", "a.py(9): g", 0.5),
                finding("V003", "a.py(3): f", 2.0),
                finding("V002", "a.py(3): f", 0.25),
                Finding {
                    title: "another kind".into(),
                    ..finding("V003", "a.py(3): f", 0.125)
                },
            ],
        );
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].code, "V003");
        assert!((out[0].saving_ms - 2.0).abs() < 1e-9);
        assert!(out[0].message.contains("2 instances"));
        assert_eq!(out[0].evidence[0].label, "instances of this cause");
        assert!((out[1].saving_ms - 0.5).abs() < 1e-9);
        assert_eq!(out[2].code, "V002");
        assert_eq!(out[3].title, "another kind");
    }
}
