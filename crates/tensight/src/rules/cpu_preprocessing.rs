//! C004 cpu-preprocessing: (not written yet).

use super::{Category, Context, Finding, Rule, RuleMeta, Status};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "C004",
    name: "cpu-preprocessing",
    category: Category::CpuResidency,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: "TODO",
};

fn check(_ctx: &Context) -> Vec<Finding> {
    Vec::new()
}
