//! Known GPUs and their ceilings.
//! INTERIM PLACEHOLDER written by the lead so the workspace compiles while the real
//! table is written: replace this whole file. Keep `Ceilings` deriving
//! `Debug, Clone, serde::Serialize` (analysis/mod.rs serialises it in reports).

/// Ceilings of one GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ceilings {
    /// Name pattern.
    pub name: &'static str,
    /// fp32 TFLOP/s.
    pub fp32_tflops: f64,
    /// tf32 TFLOP/s.
    pub tf32_tflops: f64,
    /// bf16 TFLOP/s.
    pub bf16_tflops: f64,
    /// fp16 TFLOP/s.
    pub fp16_tflops: f64,
    /// fp8 TFLOP/s.
    pub fp8_tflops: Option<f64>,
    /// GB/s.
    pub mem_bw_gbs: f64,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// Datasheet ceilings for a device name.
pub fn lookup(_device_name: &str) -> Option<Ceilings> {
    None
}

/// Measured ceilings for a device name.
pub fn measured(_device_name: &str) -> Option<Ceilings> {
    None
}
