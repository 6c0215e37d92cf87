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

/// Sub-partitions of an SM (NVIDIA since Volta) or SIMDs of a compute unit (AMD CDNA),
/// each issuing only from its own resident warps: with fewer warps per SM than this, some
/// of them have nothing to issue whatever the kernel does.
pub const SUB_PARTITIONS: f64 = 4.0;

/// At most this share of a kernel's time is saved by spreading its work over the SMs
/// and sub-partitions it leaves idle (a 10× speed-up): more blocks add split or
/// reduction work.
pub const MAX_SPREAD_SAVING: f64 = 0.9;

/// Share of the GPU's issue capacity a kernel launched as `l` can use from its launch
/// configuration alone: the share of SMs holding a block, times the share of each busy
/// SM's sub-partitions that have a warp (1.0 when both are full); and its warps per busy
/// SM.
pub fn used_share(l: &crate::model::LaunchInfo, sms: f64, warp: u64) -> (f64, f64) {
    let per_sm = l.blocks() as f64 / sms;
    let warps_per_block = l.threads_per_block().div_ceil(warp.max(1)).max(1) as f64;
    let warps_per_busy_sm = per_sm.max(1.0) * warps_per_block;
    (
        per_sm.min(1.0) * (warps_per_busy_sm / SUB_PARTITIONS).min(1.0),
        warps_per_busy_sm,
    )
}

/// Share of a kernel's time saved if its work spread over the whole GPU, given the
/// share of it its launch uses ([`used_share`]): the idle rest, at most
/// [`MAX_SPREAD_SAVING`].
pub fn spread_saving(used: f64) -> f64 {
    (1.0 - used).clamp(0.0, MAX_SPREAD_SAVING)
}

/// Threads per warp (wavefront) of the profile's main device: 32 unless it says otherwise.
pub fn warp_size(p: &crate::model::Profile) -> u64 {
    p.main_device()
        .map(|d| u64::from(d.warp_size))
        .filter(|&w| w > 0)
        .unwrap_or(32)
}

/// Classify a kernel by name.
fn classify_uncached(name: &str) -> KernelClass {
    let n = name.to_ascii_lowercase();
    if n.starts_with("nccl")
        || n.contains("ncclkernel")
        || n.starts_with("rccl")
        || is_collective_name(&n)
    {
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
        || n.contains("scudnn")
        || n.contains("hcudnn")
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
    } else if is_indexing_name(&n) {
        // Scatter/gather and index_add (named for their ReduceAdd functor or as
        // elementwise): irregular, often atomic, not a pass a fusion removes.
        KernelClass::Other
    } else if n.contains("reduce")
        || n.contains("softmax")
        || n.contains("norm")
        || n.contains("bn_fw")
        || n.contains("bn_bw")
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

/// Indexing kernels (lower-case name): `index_add_`/`index_copy_` (`indexFunc…`),
/// scatter and gather, `index_put_`, advanced indexing, sorts.
fn is_indexing_name(n: &str) -> bool {
    n.contains("indexfunc")
        || n.contains("scatter")
        || n.contains("index_put")
        || n.contains("index_elementwise")
        || n.contains("radixsort")
        || n.contains("segmented_sort")
}

/// True when a GEMM/conv kernel name says it runs on tensor cores (or AMD matrix
/// cores): HMMA/IMMA/GMMA tile names (`h884`, `s1688`, `16816`, `wgmma`, `gmma`),
/// cuBLASLt's `nvjet` kernels, CUTLASS `tensorop`, xmma with a low-precision or tf32
/// input type, and rocBLAS/hipBLASLt `MT...MI` (matrix instruction) kernels.
fn uses_tensor_cores_uncached(name: &str) -> bool {
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

/// True for an fp32 SIMT GEMM or convolution (no tensor cores): `sgemm`, `volta_sgemm`,
/// `ampere_sgemm`, `gemmSN`/`gemv2T` and cutlass `simt` kernels on float, cuDNN's `scudnn`
/// kernels and float-templated `dgrad_engine`/`wgrad_alg*_engine`, and xmma kernels on
/// `f32f32_f32f32` or marked `ffma` (FP32 fused multiply-add: no TF32).
fn is_fp32_simt_gemm_uncached(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let half = n.contains("bfloat16") || n.contains("half") || n.contains("bf16");
    let simt = n.contains("sgemm")
        || n.contains("simt")
        || n.contains("scudnn")
        || n.contains("ffma")
        || (n.contains("xmma") && n.contains("f32f32_f32f32"))
        || ((n.contains("gemmsn") || n.contains("gemv")) && !half)
        || ((n.contains("dgrad_engine<float") || n.contains("wgrad_alg")) && n.contains("<float"));
    simt && !uses_tensor_cores_uncached(name)
}

/// True for a GEMM/conv kernel whose name says it computes in TF32 on tensor cores:
/// `tf32` in the name (xmma, cuDNN, CUTLASS) or CUTLASS's `s1688` tile on float
/// (`cutlass_80_tensorop_s1688gemm_...`, without a 16-bit input type).
fn is_tf32_gemm_uncached(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    (n.contains("tf32") || n.contains("s1688gemm") || n.contains("s1688dgrad"))
        && !is_low_precision_gemm_uncached(name)
}

/// True for a GEMM/conv/attention kernel whose name says it reads 16- or 8-bit inputs:
/// `bf16`, `f16`/`fp16`/`half`, HMMA tiles `h884`/`h1688`/`h16816`, `hgemm`, FP8
/// (`e4m3`, `e5m2`), int8 (`i8816`, `imma`). Kernels that do not name a type (cuBLASLt's
/// `nvjet`, Triton templates) give false: their precision is unknown from the name.
fn is_low_precision_gemm_uncached(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    // xmma names list types as `bf16bf16_bf16f32`; a plain `f16` inside `bf16` counts too.
    const MARKS: [&str; 14] = [
        "bf16", "bfloat16", "f16", "fp16", "half", "h884", "h1688", "h16816", "hgemm", "e4m3",
        "e5m2", "i8816", "imma", "int8",
    ];
    MARKS.iter().any(|m| n.contains(m))
}

/// The vector width, in elements, that a CUTLASS/xmma kernel name states for its operands
/// (`_align8`, `_aligna4_alignc4`: the smallest stated), or `None` when the name states
/// none. A width below 16 bytes / element size means the kernel reads with narrower loads
/// because a leading dimension or pointer is not 16-byte aligned.
pub fn stated_alignment(name: &str) -> Option<u32> {
    let n = name.to_ascii_lowercase();
    let mut best: Option<u32> = None;
    for (i, _) in n.match_indices("align") {
        let rest = &n[i + 5..];
        // `aligna4` / `alignc4`: skip one operand letter.
        let rest = rest
            .strip_prefix(|c: char| c.is_ascii_lowercase())
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
            .unwrap_or(rest);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(v) = digits.parse::<u32>() {
            best = Some(best.map_or(v, |b| b.min(v)));
        }
    }
    best
}

/// True for a collective-communication kernel named by what it does rather than by its
/// library (PyTorch symmetric memory, vLLM and TensorRT-LLM custom all-reduce): these use
/// few blocks by design and wait on other GPUs.
fn is_collective_name(n: &str) -> bool {
    const MARKS: [&str; 9] = [
        "all_reduce",
        "allreduce",
        "all_gather",
        "allgather",
        "reduce_scatter",
        "reducescatter",
        "alltoall",
        "all_to_all",
        "multimem",
    ];
    MARKS.iter().any(|m| n.contains(m))
}

/// Everything this module says about one kernel name, computed once per distinct name:
/// the same few hundred names recur hundreds of thousands of times in a large trace, and
/// each uncached answer lower-cases a long C++ signature.
#[derive(Debug, Clone, Copy)]
struct Traits {
    class: KernelClass,
    tensor_cores: bool,
    fp32_simt: bool,
    tf32: bool,
    low_precision: bool,
}

/// Per-thread memo of [`Traits`]: (name address, length) → (name, traits).
type TraitsCache = std::cell::RefCell<rustc_hash::FxHashMap<(usize, usize), (Box<str>, Traits)>>;

thread_local! {
    /// Keyed by the name's address and length (names are shared `Arc<str>`s), with the
    /// text kept to check a hit, so a reused address can never return another name's
    /// traits.
    static TRAITS: TraitsCache = Default::default();
}

fn traits(name: &str) -> Traits {
    let key = (name.as_ptr() as usize, name.len());
    TRAITS.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((text, t)) = c.get(&key) {
            if &**text == name {
                return *t;
            }
        }
        let t = Traits {
            class: classify_uncached(name),
            tensor_cores: uses_tensor_cores_uncached(name),
            fp32_simt: is_fp32_simt_gemm_uncached(name),
            tf32: is_tf32_gemm_uncached(name),
            low_precision: is_low_precision_gemm_uncached(name),
        };
        if c.len() > 1 << 16 {
            c.clear(); // bound the memory on pathological traces
        }
        c.insert(key, (Box::from(name), t));
        t
    })
}

/// Classify a kernel by name.
pub fn classify(name: &str) -> KernelClass {
    traits(name).class
}

/// True when a GEMM/conv kernel name says it runs on tensor cores (see
/// [`uses_tensor_cores_uncached`] for the patterns).
pub fn uses_tensor_cores(name: &str) -> bool {
    traits(name).tensor_cores
}

/// True for an fp32 SIMT GEMM or convolution (no tensor cores).
pub fn is_fp32_simt_gemm(name: &str) -> bool {
    traits(name).fp32_simt
}

/// True for a TF32 tensor-core GEMM or convolution.
pub fn is_tf32_gemm(name: &str) -> bool {
    traits(name).tf32
}

/// True for a fp16/bf16/fp8 GEMM or convolution.
pub fn is_low_precision_gemm(name: &str) -> bool {
    traits(name).low_precision
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
        // index_add_ (its ReduceAdd functor) and scatter are indexing, not reductions or
        // elementwise passes (names from an H200 trace of torch 2.11).
        for n in [
            "void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true, at::native::ReduceAdd>(at::cuda::detail::TensorInfo<float, unsigned int>)",
            "void at::native::_scatter_gather_elementwise_kernel<128, 8, at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()>(int, F)",
            "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel>(long, F)",
        ] {
            assert_eq!(classify(n), KernelClass::Other, "{n}");
        }
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

    #[test]
    fn precision_from_names() {
        // Seen on an H200 with TF32 off: cuBLAS and cuDNN pick FFMA xmma kernels.
        let ffma = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
        assert!(is_fp32_simt_gemm(ffma));
        assert!(!uses_tensor_cores(ffma));
        let tf32 = "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize32x32x64_stage3_warpsize2x2x1_tensor16x8x8_aligna4_alignc4_execute_kernel__5x_cublas";
        assert!(!is_fp32_simt_gemm(tf32));
        assert!(is_tf32_gemm(tf32));
        assert!(is_tf32_gemm(
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>"
        ));
        assert!(is_fp32_simt_gemm(
            "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1"
        ));
        assert!(is_fp32_simt_gemm(
            "void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int)"
        ));
        assert!(is_fp32_simt_gemm(
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(Params)"
        ));
        assert!(!is_fp32_simt_gemm(
            "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128>"
        ));
        assert!(is_low_precision_gemm(
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>"
        ));
        assert!(!is_low_precision_gemm(
            "nvjet_tst_128x64_64x8_1x1_v_bz_coopA_TNT"
        ));
        assert_eq!(
            classify("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1"),
            KernelClass::Conv
        );
        assert_eq!(
            classify(
                "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>"
            ),
            KernelClass::Reduction
        );
        assert_eq!(
            classify("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>"),
            KernelClass::Communication
        );
    }

    #[test]
    fn alignment_from_names() {
        assert_eq!(
            stated_alignment("cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2"),
            Some(2)
        );
        assert_eq!(
            stated_alignment("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma_aligna4_alignc4_execute"),
            Some(4)
        );
        assert_eq!(
            stated_alignment("nvjet_tst_128x64_64x8_1x1_v_bz_coopA_TNT"),
            None
        );
    }
}
