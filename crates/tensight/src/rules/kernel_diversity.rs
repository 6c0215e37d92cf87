//! G002 kernel-diversity: (not written yet).

use super::{Category, Context, Finding, Rule, RuleMeta, Status};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "G002",
    name: "kernel-diversity",
    category: Category::Fusion,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: "TODO",
};

fn check(_ctx: &Context) -> Vec<Finding> {
    Vec::new()
}
