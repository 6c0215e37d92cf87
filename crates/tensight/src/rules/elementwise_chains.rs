//! G001 elementwise-chains: (not written yet).

use super::{Category, Context, Finding, Rule, RuleMeta, Status};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "G001",
    name: "elementwise-chains",
    category: Category::Fusion,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: "TODO",
};

fn check(_ctx: &Context) -> Vec<Finding> {
    Vec::new()
}
