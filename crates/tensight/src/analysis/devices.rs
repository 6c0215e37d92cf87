//! Known GPUs and their ceilings: peak dense throughput per number format and peak
//! memory bandwidth, for the roofline.
//!
//! Inputs: the device name a trace's `deviceProperties` gives (`NVIDIA H200`,
//! `NVIDIA A100-SXM4-80GB`, `AMD Instinct MI300X`) or, for ROCm traces that name the GPU
//! generically, its [`DeviceProps`]. Outputs: [`Ceilings`]. Figures are vendor datasheet
//! peaks for dense math (the "with sparsity" figures halved), per device as PyTorch sees
//! it; [`measured`] replaces them with what was measured on the machine where we have a
//! measurement. Nothing here queries a GPU.
//!
//! Sources (vendor datasheets and architecture whitepapers): NVIDIA H100 Tensor Core GPU
//! datasheet (SXM5, PCIe, NVL); NVIDIA H200 Tensor Core GPU datasheet (SXM, NVL); NVIDIA
//! GH200 Grace Hopper Superchip datasheet; NVIDIA DGX B200 / HGX B200 datasheet and
//! GB200 NVL72 datasheet (per GPU); NVIDIA A100 Tensor Core GPU datasheet (40 GB and
//! 80 GB, SXM4 and PCIe); NVIDIA V100 Tensor Core GPU datasheet (SXM2, PCIe, V100S);
//! NVIDIA T4, A10, L4, L40 and L40S datasheets; NVIDIA Ada (RTX 4090) and Ampere GA102
//! (RTX 3090) GPU architecture whitepapers (tensor rates with FP32 accumulate, as PyTorch
//! uses); AMD Instinct MI300X, MI325X, MI300A, MI250X, MI250, MI210 and MI100 data sheets.

use crate::model::DeviceProps;
use serde::Serialize;

/// Peak throughput and bandwidth of one GPU (one device as PyTorch numbers them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ceilings {
    /// Which GPU these are for, e.g. `H100 SXM`.
    pub name: &'static str,
    /// Peak FP32 without TF32, TFLOP/s: the CUDA cores on NVIDIA; on AMD CDNA the FP32
    /// matrix rate, which FP32 GEMMs use.
    pub fp32_tflops: f64,
    /// Peak TF32 tensor-core rate, TFLOP/s (dense). Where the GPU has no TF32 (V100, T4,
    /// AMD before CDNA3) this is the FP32 rate: that is what an FP32 GEMM reaches.
    pub tf32_tflops: f64,
    /// Peak BF16 tensor-core rate, TFLOP/s (dense). Without BF16 tensor cores (V100, T4)
    /// this is the FP32 rate: BF16 math then runs on the FP32 units.
    pub bf16_tflops: f64,
    /// Peak FP16 tensor-core rate, TFLOP/s (dense, FP32 accumulate).
    pub fp16_tflops: f64,
    /// Peak FP8 tensor-core rate, TFLOP/s (dense), when the GPU has FP8.
    pub fp8_tflops: Option<f64>,
    /// Peak memory bandwidth, GB/s (10^9 bytes per second).
    pub mem_bw_gbs: f64,
    /// Where the numbers come from: `datasheet`, or the measurement.
    pub source: &'static str,
}

/// One row of the table: the patterns that select it and its ceilings.
struct Entry {
    /// Each pattern is a space-separated list of tokens that must all appear, as whole
    /// tokens, in the device name (split at anything not a letter or digit, uppercased).
    patterns: &'static [&'static str],
    ceilings: Ceilings,
}

const fn gpu(
    name: &'static str,
    fp32: f64,
    tf32: f64,
    bf16: f64,
    fp16: f64,
    fp8: Option<f64>,
    bw: f64,
) -> Ceilings {
    Ceilings {
        name,
        fp32_tflops: fp32,
        tf32_tflops: tf32,
        bf16_tflops: bf16,
        fp16_tflops: fp16,
        fp8_tflops: fp8,
        mem_bw_gbs: bw,
        source: "datasheet",
    }
}

/// Dense datasheet peaks. The more tokens a pattern has, the more specific it is: the
/// most specific match wins (`A100 80GB PCIE` over `A100 80GB` over `A100`); on a tie the
/// earlier row wins.
const TABLE: &[Entry] = &[
    // Hopper. H200 SXM has H100 SXM's compute with HBM3e.
    Entry {
        patterns: &["H100"],
        ceilings: gpu("H100 SXM", 67.0, 494.7, 989.4, 989.4, Some(1978.9), 3350.0),
    },
    Entry {
        patterns: &["H100 PCIE"],
        ceilings: gpu("H100 PCIe", 51.0, 378.0, 756.0, 756.0, Some(1513.0), 2000.0),
    },
    Entry {
        patterns: &["H100 NVL"],
        ceilings: gpu("H100 NVL", 60.0, 417.5, 835.5, 835.5, Some(1670.5), 3900.0),
    },
    Entry {
        patterns: &["H200"],
        ceilings: gpu("H200 SXM", 67.0, 494.7, 989.4, 989.4, Some(1978.9), 4800.0),
    },
    Entry {
        patterns: &["H200 NVL"],
        ceilings: gpu("H200 NVL", 60.0, 417.5, 835.5, 835.5, Some(1670.5), 4800.0),
    },
    // GH200 with 96 GB HBM3 (`GH200 480GB`) and with 144 GB HBM3e.
    Entry {
        patterns: &["GH200"],
        ceilings: gpu(
            "GH200 96GB",
            67.0,
            494.7,
            989.4,
            989.4,
            Some(1978.9),
            4000.0,
        ),
    },
    Entry {
        patterns: &["GH200 144G", "GH200 144GB", "GH200 HBM3E"],
        ceilings: gpu(
            "GH200 144GB",
            67.0,
            494.7,
            989.4,
            989.4,
            Some(1978.9),
            4900.0,
        ),
    },
    // Blackwell.
    Entry {
        patterns: &["B200"],
        ceilings: gpu("B200", 80.0, 1100.0, 2250.0, 2250.0, Some(4500.0), 8000.0),
    },
    Entry {
        patterns: &["GB200"],
        ceilings: gpu("GB200", 80.0, 1250.0, 2500.0, 2500.0, Some(5000.0), 8000.0),
    },
    // Ampere data centre. `A100-PG509-200` (a 40 GB SXM4 board: its traces report
    // 39.4 GiB) falls to the plain A100 row.
    Entry {
        patterns: &["A100"],
        ceilings: gpu("A100 SXM4 40GB", 19.5, 156.0, 312.0, 312.0, None, 1555.0),
    },
    Entry {
        patterns: &["A100 80GB"],
        ceilings: gpu("A100 SXM4 80GB", 19.5, 156.0, 312.0, 312.0, None, 2039.0),
    },
    Entry {
        patterns: &["A100 PCIE"],
        ceilings: gpu("A100 PCIe 40GB", 19.5, 156.0, 312.0, 312.0, None, 1555.0),
    },
    Entry {
        patterns: &["A100 80GB PCIE"],
        ceilings: gpu("A100 PCIe 80GB", 19.5, 156.0, 312.0, 312.0, None, 1935.0),
    },
    Entry {
        patterns: &["A10"],
        ceilings: gpu("A10", 31.2, 62.5, 125.0, 125.0, None, 600.0),
    },
    // Volta and Turing: no TF32 or BF16 tensor cores (see the field docs).
    Entry {
        patterns: &["V100"],
        ceilings: gpu("V100 SXM2", 15.7, 15.7, 15.7, 125.0, None, 900.0),
    },
    Entry {
        patterns: &["V100 PCIE"],
        ceilings: gpu("V100 PCIe", 14.0, 14.0, 14.0, 112.0, None, 900.0),
    },
    Entry {
        patterns: &["V100S"],
        ceilings: gpu("V100S PCIe", 16.4, 16.4, 16.4, 130.0, None, 1134.0),
    },
    Entry {
        patterns: &["T4"],
        ceilings: gpu("T4", 8.1, 8.1, 8.1, 65.0, None, 320.0),
    },
    // Ada.
    Entry {
        patterns: &["L4"],
        ceilings: gpu("L4", 30.3, 60.0, 121.0, 121.0, Some(242.5), 300.0),
    },
    Entry {
        patterns: &["L40"],
        ceilings: gpu("L40", 90.5, 90.5, 181.0, 181.0, Some(362.0), 864.0),
    },
    Entry {
        patterns: &["L40S"],
        ceilings: gpu("L40S", 91.6, 183.0, 362.05, 362.05, Some(733.0), 864.0),
    },
    // GeForce: tensor rates with FP32 accumulate.
    Entry {
        patterns: &["RTX 4090"],
        ceilings: gpu("RTX 4090", 82.6, 82.6, 165.2, 165.2, Some(330.3), 1008.0),
    },
    Entry {
        patterns: &["RTX 3090"],
        ceilings: gpu("RTX 3090", 35.6, 35.6, 71.0, 71.0, None, 936.0),
    },
    // AMD CDNA3: one device per package (SPX mode).
    Entry {
        patterns: &["MI300X"],
        ceilings: gpu("MI300X", 163.4, 653.7, 1307.4, 1307.4, Some(2614.9), 5300.0),
    },
    Entry {
        patterns: &["MI325X"],
        ceilings: gpu("MI325X", 163.4, 653.7, 1307.4, 1307.4, Some(2614.9), 6000.0),
    },
    Entry {
        patterns: &["MI300A"],
        ceilings: gpu("MI300A", 122.6, 490.3, 980.6, 980.6, Some(1961.2), 5300.0),
    },
    // AMD CDNA2. An MI250X or MI250 package holds two dies (GCDs) and PyTorch sees each
    // as one device: half the package's datasheet figures (MI250X: FP32 matrix 95.7,
    // BF16 383, 3277 GB/s; MI250: 90.5, 362.1, 3277 GB/s). MI210 is one die.
    Entry {
        patterns: &["MI250X"],
        ceilings: gpu("MI250X (one GCD)", 47.85, 47.85, 191.5, 191.5, None, 1638.4),
    },
    Entry {
        patterns: &["MI250"],
        ceilings: gpu(
            "MI250 (one GCD)",
            45.25,
            45.25,
            181.05,
            181.05,
            None,
            1638.4,
        ),
    },
    Entry {
        patterns: &["MI210"],
        ceilings: gpu("MI210", 45.3, 45.3, 181.0, 181.0, None, 1638.4),
    },
    Entry {
        patterns: &["MI100"],
        ceilings: gpu("MI100", 46.1, 46.1, 92.3, 184.6, None, 1228.8),
    },
];

/// Datasheet ceilings for a device, matched on its `deviceProperties` name.
///
/// Names are split into tokens at anything not a letter or digit and compared whole,
/// case-insensitively, so `A10` does not match `A100` or `A10G` and `L40` does not match
/// `L40S`. The most specific matching pattern wins: `NVIDIA H100 PCIe` gets the PCIe
/// part, `NVIDIA H100 80GB HBM3` the SXM part, `NVIDIA A100-SXM4-80GB` the 80 GB part.
/// `None` for GPUs not in the table (better no roofline than a wrong one).
pub fn lookup(device_name: &str) -> Option<Ceilings> {
    best_entry(device_name).map(|e| e.ceilings)
}

/// Ceilings measured where we have them, with datasheet figures for the fields not
/// measured; `None` for other GPUs (use [`lookup`]).
///
/// H200 SXM, measured by tensight's calibration on an H200 (torch 2.11, CUDA 13.0): a
/// device-to-device copy moves 4300 GB/s (read + write) against 4800 on the datasheet,
/// and a large bf16 matmul reaches 790 TFLOP/s against 989.4.
pub fn measured(device_name: &str) -> Option<Ceilings> {
    let e = best_entry(device_name)?;
    match e.ceilings.name {
        "H200 SXM" => Some(Ceilings {
            bf16_tflops: 790.0,
            mem_bw_gbs: 4300.0,
            source: "measured on an H200 (tensight calibration)",
            ..e.ceilings
        }),
        _ => None,
    }
}

/// Datasheet ceilings for a device from its properties: by name as [`lookup`], and for
/// ROCm traces that name the GPU generically (`AMD Radeon Graphics`, or nothing) by its
/// compute-unit count and memory: 304 CUs is an MI300X (≥ 250 GiB: MI325X), 228 an
/// MI300A, 110 an MI250X die, 104 an MI250 die or an MI210.
pub fn lookup_device(props: &DeviceProps) -> Option<Ceilings> {
    if let Some(c) = lookup(&props.name) {
        return Some(c);
    }
    let generic = props.name.trim().is_empty() || props.name.contains("AMD");
    if !generic {
        return None;
    }
    let gib = props.total_global_mem_bytes as f64 / (1u64 << 30) as f64;
    let name = match props.num_sms {
        304 if gib >= 250.0 => "MI325X",
        304 => "MI300X",
        228 => "MI300A",
        110 => "MI250X",
        104 if gib < 60.0 => "MI210",
        104 => "MI250",
        _ => return None,
    };
    lookup(name)
}

/// The most specific table row matching `device_name`.
fn best_entry(device_name: &str) -> Option<&'static Entry> {
    let upper = device_name.to_ascii_uppercase();
    let tokens: Vec<&str> = upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    let mut best: Option<(usize, &'static Entry)> = None;
    for e in TABLE {
        for p in e.patterns {
            let want: Vec<&str> = p.split(' ').collect();
            let better = match best {
                Some((score, _)) => want.len() > score,
                None => true,
            };
            if better && want.iter().all(|w| tokens.contains(w)) {
                best = Some((want.len(), e));
            }
        }
    }
    best.map(|(_, e)| e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(device: &str) -> Option<&'static str> {
        lookup(device).map(|c| c.name)
    }

    #[test]
    fn names_from_real_traces() {
        // deviceProperties names in shared/traces.
        assert_eq!(name_of("NVIDIA H200"), Some("H200 SXM"));
        assert_eq!(name_of("NVIDIA H100 80GB HBM3"), Some("H100 SXM"));
        assert_eq!(name_of("NVIDIA A100-PG509-200"), Some("A100 SXM4 40GB"));
        assert_eq!(name_of("Tesla V100-SXM2-32GB"), Some("V100 SXM2"));
        assert_eq!(name_of("NVIDIA B200"), Some("B200"));
        assert_eq!(name_of("AMD Instinct MI300X"), Some("MI300X"));
        assert_eq!(name_of("AMD Radeon Graphics"), None);
    }

    #[test]
    fn most_specific_pattern_wins() {
        assert_eq!(name_of("NVIDIA H100 PCIe"), Some("H100 PCIe"));
        assert_eq!(name_of("NVIDIA H100 NVL"), Some("H100 NVL"));
        assert_eq!(name_of("NVIDIA H200 NVL"), Some("H200 NVL"));
        assert_eq!(name_of("NVIDIA GH200 480GB"), Some("GH200 96GB"));
        assert_eq!(name_of("NVIDIA GH200 144G HBM3e"), Some("GH200 144GB"));
        assert_eq!(name_of("NVIDIA GB200"), Some("GB200"));
        assert_eq!(name_of("NVIDIA A100-SXM4-40GB"), Some("A100 SXM4 40GB"));
        assert_eq!(name_of("NVIDIA A100-SXM4-80GB"), Some("A100 SXM4 80GB"));
        assert_eq!(name_of("NVIDIA A100-PCIE-40GB"), Some("A100 PCIe 40GB"));
        assert_eq!(name_of("NVIDIA A100 80GB PCIe"), Some("A100 PCIe 80GB"));
        assert_eq!(name_of("NVIDIA A10"), Some("A10"));
        assert_eq!(name_of("NVIDIA A10G"), None);
        assert_eq!(name_of("Tesla V100-PCIE-16GB"), Some("V100 PCIe"));
        assert_eq!(name_of("Tesla V100S-PCIE-32GB"), Some("V100S PCIe"));
        assert_eq!(name_of("Tesla T4"), Some("T4"));
        assert_eq!(name_of("NVIDIA L4"), Some("L4"));
        assert_eq!(name_of("NVIDIA L40"), Some("L40"));
        assert_eq!(name_of("NVIDIA L40S"), Some("L40S"));
        assert_eq!(name_of("NVIDIA GeForce RTX 4090"), Some("RTX 4090"));
        assert_eq!(name_of("NVIDIA GeForce RTX 3090"), Some("RTX 3090"));
        assert_eq!(name_of("AMD Instinct MI250X"), Some("MI250X (one GCD)"));
        assert_eq!(
            name_of("AMD Instinct MI250X / MI250"),
            Some("MI250X (one GCD)")
        );
        assert_eq!(name_of("AMD Instinct MI250"), Some("MI250 (one GCD)"));
        assert_eq!(name_of("AMD Instinct MI325X"), Some("MI325X"));
        assert_eq!(name_of("nvidia h100 pcie"), Some("H100 PCIe"));
        assert_eq!(name_of(""), None);
        assert_eq!(name_of("NVIDIA GeForce GTX 1080"), None);
    }

    #[test]
    fn datasheet_figures() {
        let h200 = lookup("NVIDIA H200").expect("H200 in table");
        assert_eq!(h200.bf16_tflops, 989.4);
        assert_eq!(h200.tf32_tflops, 494.7);
        assert_eq!(h200.fp8_tflops, Some(1978.9));
        assert_eq!(h200.mem_bw_gbs, 4800.0);
        assert_eq!(h200.source, "datasheet");
        let h100 = lookup("NVIDIA H100 80GB HBM3").expect("H100 in table");
        assert_eq!((h100.fp32_tflops, h100.mem_bw_gbs), (67.0, 3350.0));
        let a100 = lookup("NVIDIA A100-SXM4-80GB").expect("A100 in table");
        assert_eq!(
            (a100.bf16_tflops, a100.fp8_tflops, a100.mem_bw_gbs),
            (312.0, None, 2039.0)
        );
        let v100 = lookup("Tesla V100-SXM2-32GB").expect("V100 in table");
        assert_eq!(
            (v100.fp16_tflops, v100.bf16_tflops, v100.tf32_tflops),
            (125.0, 15.7, 15.7)
        );
        let b200 = lookup("NVIDIA B200").expect("B200 in table");
        assert_eq!((b200.bf16_tflops, b200.mem_bw_gbs), (2250.0, 8000.0));
        let mi300 = lookup("AMD Instinct MI300X").expect("MI300X in table");
        assert_eq!((mi300.bf16_tflops, mi300.mem_bw_gbs), (1307.4, 5300.0));
        // Every row: positive, ordered sensibly.
        for e in TABLE {
            let c = e.ceilings;
            assert!(c.fp32_tflops > 0.0 && c.mem_bw_gbs > 0.0, "{}", c.name);
            assert!(c.tf32_tflops >= c.fp32_tflops, "{}", c.name);
            assert!(c.fp16_tflops >= c.tf32_tflops, "{}", c.name);
            assert!(
                c.fp8_tflops.unwrap_or(f64::INFINITY) >= c.bf16_tflops,
                "{}",
                c.name
            );
            assert_eq!(lookup(c.name).map(|l| l.name), Some(c.name), "{}", c.name);
        }
    }

    #[test]
    fn measured_h200_only() {
        let m = measured("NVIDIA H200").expect("H200 measured");
        assert_eq!((m.bf16_tflops, m.mem_bw_gbs), (790.0, 4300.0));
        assert_eq!(m.fp16_tflops, 989.4);
        assert_eq!(m.source, "measured on an H200 (tensight calibration)");
        assert!(measured("NVIDIA H200 NVL").is_none());
        assert!(measured("NVIDIA H100 80GB HBM3").is_none());
    }

    #[test]
    fn generic_rocm_names_by_fingerprint() {
        let props = |name: &str, cus: u32, gib: u64| DeviceProps {
            name: name.into(),
            num_sms: cus,
            total_global_mem_bytes: gib << 30,
            ..Default::default()
        };
        // shared/traces/real/amd_trace-mi250_minitoy: "AMD Radeon Graphics", 104 CUs, 64 GiB.
        let c = lookup_device(&props("AMD Radeon Graphics", 104, 64));
        assert_eq!(c.map(|c| c.name), Some("MI250 (one GCD)"));
        // tracelens vLLM decode: empty name, 304 CUs, 192 GB.
        assert_eq!(
            lookup_device(&props("", 304, 192)).map(|c| c.name),
            Some("MI300X")
        );
        assert_eq!(
            lookup_device(&props("", 304, 256)).map(|c| c.name),
            Some("MI325X")
        );
        assert_eq!(
            lookup_device(&props("NVIDIA H200", 132, 140)).map(|c| c.name),
            Some("H200 SXM")
        );
        assert!(lookup_device(&props("Some GPU", 304, 192)).is_none());
    }
}
