//! T001 fp32-gemm-without-tensor-cores: (not written yet).

use super::{Category, Context, Finding, Rule, RuleMeta, Status};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "T001",
    name: "fp32-gemm-without-tensor-cores",
    category: Category::TensorCores,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: "TODO",
};

fn check(_ctx: &Context) -> Vec<Finding> {
    Vec::new()
}
