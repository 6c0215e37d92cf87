//! What a kernel is, from its name: GEMM or convolution, tensor-core or not,
//! elementwise, reduction, copy, communication. Names are the only evidence a trace
//! gives without a hardware pass, so each pattern here is one that vendor libraries
//! (cuBLAS, cuDNN, CUTLASS, rocBLAS, hipBLASLt) and PyTorch actually use.

/// Broad kind of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// Matrix multiply (cuBLAS/CUTLASS/rocBLAS/hipBLASLt, Triton mm templates).
    Gemm,
    /// Convolution (cuDNN, MIOpen, implicit GEMM).
    Conv,
    /// Attention (flash, memory-efficient, cuDNN fused attention).
    Attention,
    /// Elementwise (PyTorch's TensorIterator kernels, Triton pointwise).
    Elementwise,
    /// Reductions and norms (sum, softmax, layer/batch norm).
    Reduction,
    /// Communication (NCCL, RCCL).
    Communication,
    /// Anything else (indexing, copies, sorting, ...).
    Other,
}

/// Classify a kernel by name.
pub fn classify(name: &str) -> KernelClass {
    let n = name.to_ascii_lowercase();
    if n.starts_with("nccl") || n.contains("ncclkernel") || n.starts_with("rccl") {
        KernelClass::Communication
    } else if n.contains("flash")
        || n.contains("fmha")
        || n.contains("attention")
        || n.contains("attn")
    {
        KernelClass::Attention
    } else if n.contains("conv")
        || n.contains("wgrad")
        || n.contains("dgrad")
        || n.contains("implicit_gemm")
        || n.contains("winograd")
        || n.contains("miopen")
    {
        KernelClass::Conv
    } else if n.contains("gemm")
        || n.contains("gemv")
        || n.starts_with("nvjet")
        || n.contains("cutlass")
        || n.contains("cublas")
        || n.contains("triton_tem_fused_mm")
        || n.contains("triton_tem_fused_addmm")
        || n.contains("_mm_")
        || n.contains("cijk_")
        || n.starts_with("kernel2")
    {
        KernelClass::Gemm
    } else if n.contains("reduce")
        || n.contains("softmax")
        || n.contains("norm")
        || n.starts_with("triton_red")
        || n.starts_with("triton_per")
    {
        KernelClass::Reduction
    } else if n.contains("elementwise")
        || n.starts_with("triton_poi")
        || n.contains("copy_kernel")
        || n.contains("fillfunctor")
    {
        KernelClass::Elementwise
    } else {
        KernelClass::Other
    }
}

/// True when a GEMM/conv kernel name says it runs on tensor cores (or AMD matrix
/// cores): HMMA/IMMA/GMMA tile names (`h884`, `s1688`, `16816`, `wgmma`, `gmma`),
/// cuBLASLt's `nvjet` kernels, CUTLASS `tensorop`, xmma with a low-precision or tf32
/// input type, and rocBLAS/hipBLASLt `MT...MI` (matrix instruction) kernels.
pub fn uses_tensor_cores(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    const MARKS: [&str; 13] = [
        "h884", "h1688", "s1688", "i8816", "16816", "1688", "884gemm", "wgmma", "gmma", "tensorop",
        "nvjet", "hmma", "tf32",
    ];
    if MARKS.iter().any(|m| n.contains(m)) {
        return true;
    }
    // Tensile/hipBLASLt: `..._MI16x16x16x1_...` names a matrix-core instruction.
    if n.match_indices("_mi")
        .any(|(i, _)| n.as_bytes().get(i + 3).is_some_and(u8::is_ascii_digit))
    {
        return true;
    }
    if n.contains("xmma") {
        // xmma kernels name their input type: f16/bf16/tf32/e4m3 use tensor cores.
        return n.contains("bf16") || n.contains("f16") || n.contains("e4m3") || n.contains("e5m2");
    }
    n.contains("bf16") && (n.contains("gemm") || n.contains("cutlass"))
        || n.contains("fp16") && n.contains("gemm")
}

/// True for an fp32 SIMT GEMM (no tensor cores): `sgemm`, `volta_sgemm`, `ampere_sgemm`,
/// `gemmSN`/`gemv2T` and cutlass `simt` kernels on float.
pub fn is_fp32_simt_gemm(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    (n.contains("sgemm") || n.contains("simt") || n.contains("gemmsn") || n.contains("gemv"))
        && !uses_tensor_cores(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(classify("ampere_sgemm_128x64_nn"), KernelClass::Gemm);
        assert_eq!(
            classify("nvjet_tst_128x64_64x8_1x1_v_bz_coopA_TNT"),
            KernelClass::Gemm
        );
        assert_eq!(
            classify("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"),
            KernelClass::Elementwise
        );
        assert_eq!(
            classify("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw"),
            KernelClass::Conv
        );
        assert_eq!(
            classify(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
            ),
            KernelClass::Communication
        );
        assert_eq!(
            classify("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>"),
            KernelClass::Attention
        );
    }

    #[test]
    fn tensor_cores() {
        assert!(uses_tensor_cores(
            "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
        ));
        assert!(uses_tensor_cores("volta_h884gemm_64x64_ldg8_nn"));
        assert!(uses_tensor_cores(
            "nvjet_tst_128x64_64x8_1x1_v_bz_coopA_TNT"
        ));
        assert!(uses_tensor_cores(
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
        ));
        assert!(!uses_tensor_cores("ampere_sgemm_128x64_nn"));
        assert!(!uses_tensor_cores("volta_sgemm_128x64_nn"));
        assert!(is_fp32_simt_gemm("ampere_sgemm_128x64_nn"));
        assert!(!is_fp32_simt_gemm("ampere_s16816gemm_128x64_nn"));
    }
}
