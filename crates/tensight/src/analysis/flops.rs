//! FLOPs and minimum bytes per op.
//! INTERIM PLACEHOLDER written by the lead so the workspace compiles while the real
//! model is written: replace this whole file (keep these signatures).

use crate::model::CpuOp;

/// Element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// float32.
    F32,
    /// Other.
    Other,
}

impl Dtype {
    /// fp16/bf16/fp8.
    pub fn is_low_precision(&self) -> bool {
        false
    }
}

/// Kind of op cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostKind {
    /// GEMM.
    Gemm,
}

/// Cost of one op.
#[derive(Debug, Clone)]
pub struct OpCost {
    /// FLOPs.
    pub flops: f64,
    /// Minimum bytes.
    pub min_bytes: f64,
    /// Dtype.
    pub dtype: Dtype,
    /// Kind.
    pub kind: CostKind,
    /// GEMM dims (M, N, K).
    pub gemm_dims: Option<(u64, u64, u64)>,
}

/// True when `name` has a FLOP formula.
pub fn has_formula(_name: &str) -> bool {
    false
}

/// FLOPs of an op.
pub fn op_cost(_op: &CpuOp) -> Option<OpCost> {
    None
}

/// Minimum bytes of an elementwise op.
pub fn min_bytes_elementwise(_op: &CpuOp) -> Option<f64> {
    None
}
