//! Hardware counters per kernel, from an Nsight Compute pass (`ncu --csv --page raw`).
//!
//! One [`HwKernel`] per profiled kernel launch, every metric optional (ncu collects
//! what it was asked for and what the GPU supports). [`Hardware`] holds them in launch
//! order with their alignment to the trace's kernels ([`HwKernel::gpu`]) and the
//! counters of what could not be used. Read by [`crate::read::ncu`]; efficiency is
//! derived in [`crate::analysis::efficiency`].

use serde::Serialize;

/// One kernel launch as Nsight Compute measured it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HwKernel {
    /// Row `ID` (launch order within the ncu run).
    pub id: u64,
    /// Kernel name as ncu printed it (demangled, sometimes without namespaces).
    pub name: String,
    /// Grid dimensions (blocks).
    pub grid: [u32; 3],
    /// Block dimensions (threads).
    pub block: [u32; 3],
    /// NVTX push/pop range the kernel ran in (`tensight_step`), when recorded.
    pub nvtx: Option<String>,
    /// `gpu__time_duration.sum`, ns (under ncu: serialized, caches flushed per pass).
    pub duration_ns: Option<f64>,
    /// `dram__bytes_read.sum`, bytes.
    pub dram_read_bytes: Option<f64>,
    /// `dram__bytes_write.sum`, bytes.
    pub dram_write_bytes: Option<f64>,
    /// `l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`: 32-byte sectors loaded.
    pub ld_sectors: Option<f64>,
    /// `l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`: warp-level load requests.
    pub ld_requests: Option<f64>,
    /// `l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum`: 32-byte sectors stored.
    pub st_sectors: Option<f64>,
    /// `l1tex__t_requests_pipe_lsu_mem_global_op_st.sum`: warp-level store requests.
    pub st_requests: Option<f64>,
    /// `lts__t_sector_hit_rate.pct`: L2 hit rate, %.
    pub l2_hit_pct: Option<f64>,
    /// `sm__warps_active.avg.pct_of_peak_sustained_active`: achieved occupancy, %.
    pub achieved_occupancy_pct: Option<f64>,
    /// `sm__maximum_warps_per_active_cycle_pct`: theoretical occupancy, %.
    pub theoretical_occupancy_pct: Option<f64>,
    /// `sm__throughput.avg.pct_of_peak_sustained_elapsed`: SM throughput, % of peak.
    pub sm_throughput_pct: Option<f64>,
    /// `gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed`, % of peak.
    pub memory_throughput_pct: Option<f64>,
    /// `sm__pipe_tensor_op_*_cycles_active.avg.pct_of_peak_sustained_active`, %.
    pub tensor_pipe_pct: Option<f64>,
    /// `smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio`: cycles a warp
    /// spent waiting on L1TEX (global, local, texture) results, per warp, as ncu reports it.
    pub long_scoreboard_stall: Option<f64>,
    /// `smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio`: warps
    /// waiting on L1TEX per issue cycle (the numerator of the long-scoreboard stall share).
    pub long_scoreboard_per_issue: Option<f64>,
    /// `smsp__average_warps_active_per_issue_active.ratio`: warps resident per issue cycle
    /// (the denominator: every cycle a warp spends between two issued instructions).
    pub warps_active_per_issue: Option<f64>,
    /// `launch__registers_per_thread`.
    pub registers_per_thread: Option<f64>,
    /// `launch__shared_mem_per_block_allocated` (static + dynamic + driver), bytes.
    pub shared_mem_per_block: Option<f64>,
    /// `launch__occupancy_limit_registers`: blocks per SM the registers allow.
    pub occupancy_limit_registers: Option<f64>,
    /// `launch__occupancy_limit_shared_mem`: blocks per SM shared memory allows.
    pub occupancy_limit_shared_mem: Option<f64>,
    /// `launch__occupancy_limit_warps`: blocks per SM the warp slots allow.
    pub occupancy_limit_warps: Option<f64>,
    /// `launch__occupancy_limit_blocks`: blocks per SM the block slots allow.
    pub occupancy_limit_blocks: Option<f64>,
    /// `sm__maximum_warps_avg_per_active_cycle` / theoretical %: warp slots per SM.
    pub max_warps_per_sm: Option<f64>,
    /// Warps per issue cycle in each state of [`STALL_REASONS`] that ncu reported
    /// (`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`).
    pub stalls: Vec<(&'static str, f64)>,
    /// Index into [`crate::model::Profile::gpu`] of the trace kernel this row measured
    /// (`None` when it matched none).
    pub gpu: Option<u32>,
}

/// The warp states ncu counts per issue cycle: the reason key of the metric
/// `smsp__average_warps_issue_stalled_<key>_per_issue_active.ratio`, and what it means.
pub const STALL_REASONS: &[(&str, &str)] = &[
    ("long_scoreboard", "waiting on global or local memory"),
    (
        "short_scoreboard",
        "waiting on shared memory or special math",
    ),
    ("mio_throttle", "shared-memory/special-math queue full"),
    ("lg_throttle", "global-memory instruction queue full"),
    ("math_pipe_throttle", "math pipe busy"),
    ("tex_throttle", "texture queue full"),
    ("barrier", "waiting at a block barrier"),
    ("membar", "waiting on a memory fence"),
    ("wait", "fixed-latency dependency"),
    ("not_selected", "ready, another warp issued"),
    ("selected", "issuing"),
    ("branch_resolving", "resolving a branch"),
    ("dispatch_stall", "dispatch stalled"),
    ("drain", "draining stores at exit"),
    ("imc_miss", "constant cache miss"),
    ("no_instruction", "instruction cache miss"),
    ("sleeping", "sleeping"),
    ("misc", "other"),
];

/// The ncu metric of a [`STALL_REASONS`] key.
pub fn stall_metric(key: &str) -> String {
    format!("smsp__average_warps_issue_stalled_{key}_per_issue_active.ratio")
}

impl HwKernel {
    /// Where the warps' cycles go: each [`STALL_REASONS`] state's share of the warps
    /// resident per issue cycle, largest first (shares of 0 left out). The states' sum
    /// and ncu's total differ by up to a quarter on real rows (H200, ncu 2025.3): the
    /// larger is the whole, so shares never add up to more than 1.
    pub fn stall_shares(&self) -> Vec<(&'static str, f64)> {
        let sum: f64 = self.stalls.iter().map(|s| s.1.max(0.0)).sum();
        let total = self.warps_active_per_issue.unwrap_or(0.0).max(sum);
        if total <= 0.0 {
            return Vec::new();
        }
        let mut v: Vec<(&'static str, f64)> = self
            .stalls
            .iter()
            .filter(|s| s.1 > 0.0)
            .map(|&(k, w)| (k, (w / total).min(1.0)))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }

    /// Share of a warp's cycles between two issued instructions spent waiting on L1TEX
    /// (global memory) results: Nsight Compute's own long-scoreboard ratio, 0..1.
    pub fn long_scoreboard_share(&self) -> Option<f64> {
        let (n, d) = (
            self.long_scoreboard_per_issue?,
            self.warps_active_per_issue?,
        );
        (d > 0.0 && n >= 0.0).then(|| (n / d).min(1.0))
    }

    /// `(name key, grid, block)`: what identifies a kernel across ncu and the trace.
    pub fn signature(&self) -> (String, [u32; 3], [u32; 3]) {
        (kernel_key(&self.name), self.grid, self.block)
    }
    /// Load sectors per request, when both are known and requests > 0.
    pub fn ld_sectors_per_request(&self) -> Option<f64> {
        ratio(self.ld_sectors?, self.ld_requests?)
    }
    /// Store sectors per request, when both are known and requests > 0.
    pub fn st_sectors_per_request(&self) -> Option<f64> {
        ratio(self.st_sectors?, self.st_requests?)
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// How ncu rows were matched with the trace's kernels.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Alignment {
    /// How the rows were placed: `step ProfilerStep#3 (best match of 5 steps)`,
    /// `longest common subsequence over the whole trace`.
    pub method: String,
    /// The trace step the rows were aligned to, if any.
    pub step: Option<String>,
    /// Kernels of that step (or of the trace) in the trace.
    pub trace_kernels: usize,
    /// ncu rows matched to a trace kernel.
    pub matched: usize,
    /// ncu rows that matched no trace kernel.
    pub unmatched_rows: usize,
    /// Trace kernels of the aligned window that no row matched.
    pub unmatched_trace_kernels: usize,
    /// Trace kernels (any step) given a row's counters through a shared signature
    /// (same name, grid and block) rather than their own profiled launch.
    pub applied_by_signature: usize,
    /// Of those, the kernels whose launching op's name, input shapes and dtypes no row's
    /// op had: counters of the same kernel, grid and block doing other work (an
    /// approximation).
    pub applied_other_shapes: usize,
    /// Kernels in the whole trace.
    pub all_trace_kernels: usize,
    /// Kernels in the whole trace with counters (own launch or same signature).
    pub with_counters: usize,
}

/// The hardware pass: per-kernel counters and how they map onto the trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Hardware {
    /// The file read.
    pub source: String,
    /// Rows in launch order.
    pub kernels: Vec<HwKernel>,
    /// Distinct (full name, grid, block) signatures among the rows: profiling each once
    /// would need this many launches instead of `kernels.len()`.
    pub signatures: usize,
    /// Metric columns present (name → unit), sorted.
    pub metrics: Vec<(String, String)>,
    /// Alignment with the trace.
    pub alignment: Alignment,
    /// For each [`crate::model::Profile::gpu`] entry, the row whose counters apply
    /// (own launch or same signature); empty before alignment.
    pub by_gpu: Vec<Option<u32>>,
    /// Rows skipped and why (`ncu_row_without_kernel_name`, ...), as counts.
    pub skipped: Vec<(String, u64)>,
    /// The bundle's own hardware pass (its manifest describes the run), not a CSV given
    /// with `--ncu`.
    pub from_bundle: bool,
}

impl Hardware {
    /// The row whose counters apply to trace activity `gpu_idx`.
    pub fn for_gpu(&self, gpu_idx: usize) -> Option<&HwKernel> {
        let r = (*self.by_gpu.get(gpu_idx)?)?;
        self.kernels.get(r as usize)
    }
}

/// A kernel's name with the parts ncu and Kineto print differently made alike: no
/// leading `void`, and an anonymous namespace is `anon` whether Kineto wrote
/// `(anonymous namespace)` or ncu `<unnamed>` (ncu also drops that `<` at times:
/// `unnamed>::multi_tensor_apply_kernel<unnamed>::TensorListMetadata<2>, ...`, where the
/// second `<` is the template's own).
fn normalized(name: &str) -> String {
    let s = name.trim();
    let s = s.strip_prefix("void ").unwrap_or(s);
    let s = s
        .replace("(anonymous namespace)", "anon")
        .replace("::<unnamed>", "::anon")
        .replace(" <unnamed>", " anon");
    let s = match s.strip_prefix("<unnamed>") {
        Some(rest) => format!("anon{rest}"),
        None => s,
    };
    s.replace("unnamed>", "anon")
}

/// A kernel's name reduced to what both ncu and Kineto agree on: the function's base
/// name (no `void`, namespaces, template arguments or parameters). ncu may print
/// `vectorized_elementwise_kernel<4, ...>(int, T2, T3)` where Kineto prints
/// `void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`; grid and block
/// tell launches of one base name apart.
pub fn kernel_key(name: &str) -> String {
    let cleaned = normalized(name);
    let end = cleaned.find(['<', '(']).unwrap_or(cleaned.len());
    let head = &cleaned[..end];
    let base = head.rsplit("::").next().unwrap_or(head).trim();
    base.to_string()
}

/// What tells apart kernels that share a [`kernel_key`] (`elementwise_kernel` runs add,
/// mul, copy...): the first two identifiers of its template arguments, without namespace
/// qualifiers, keywords, primitive types, booleans (ncu prints `1` where Kineto prints
/// `true`), casts (Kineto's `(cudnnKernelDataType_t)2` is ncu's `2`) and template
/// placeholders (`T1`). The same in ncu's and Kineto's demanglings; empty for names
/// without template arguments. Only the template argument list is read, never the
/// parameters (ncu prints them with placeholders).
pub fn kernel_detail(name: &str) -> String {
    const SKIP: &[&str] = &[
        "void", "const", "unsigned", "signed", "int", "long", "short", "char", "float", "double",
        "bool", "half", "lambda", "instance", "auto", "struct", "class", "anon", "true", "false",
    ];
    let name = normalized(name);
    let Some(start) = name
        .find(['<', '('])
        .filter(|&i| name.as_bytes()[i] == b'<')
    else {
        return String::new();
    };
    let b = &name.as_bytes()[start + 1..];
    let mut out: Vec<&str> = Vec::new();
    let (mut i, mut depth) = (0, 0usize);
    while i < b.len() && out.len() < 2 {
        let c = b[i];
        match c {
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' if depth == 0 => break,
            b'>' | b')' | b']' => depth -= 1,
            _ => {}
        }
        if c.is_ascii_alphabetic() || c == b'_' || c.is_ascii_digit() {
            let j = i + b[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            let word = &name[start + 1 + i..start + 1 + j];
            let qualifier = b[j..].starts_with(b"::");
            let cast = b.get(j) == Some(&b')');
            let placeholder = word.len() > 1
                && word.starts_with('T')
                && word[1..].bytes().all(|c| c.is_ascii_digit());
            if !(c.is_ascii_digit() || qualifier || cast || placeholder || SKIP.contains(&word)) {
                out.push(word);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::{kernel_detail, kernel_key};

    #[test]
    fn details_tell_functors_apart_and_agree_across_demanglings() {
        let ncu_add = "void elementwise_kernel<128, 2, void gpu_kernel_impl_nocast<CUDAFunctor_add<float>>(TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)";
        let kineto_add = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1})";
        let ncu_mul = "void elementwise_kernel<128, 2, void gpu_kernel_impl_nocast<BinaryFunctor<float, float, float, binary_internal::MulFunctor<float>>>(TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)";
        assert_eq!(
            kernel_detail(ncu_add),
            "gpu_kernel_impl_nocast,CUDAFunctor_add"
        );
        assert_eq!(kernel_detail(ncu_add), kernel_detail(kineto_add));
        assert_ne!(kernel_detail(ncu_add), kernel_detail(ncu_mul));
        assert_eq!(kernel_key(ncu_add), kernel_key(ncu_mul));
        let ncu = "void vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>, std::array<char *, 2>>(int, T2, T3)";
        let kineto = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)";
        assert_eq!(kernel_detail(ncu), kernel_detail(kineto));
        assert_eq!(
            kernel_detail("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"),
            ""
        );
    }

    #[test]
    fn anonymous_namespaces_keep_the_kernel_name() {
        // As ncu 2025.3 and Kineto (torch 2.11) wrote the foreach optimizer's kernel.
        let ncu = "void unnamed>::multi_tensor_apply_kernel<unnamed>::TensorListMetadata<2>, unnamed>::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(T1, T2, T3...)";
        let kineto = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)";
        assert_eq!(kernel_key(ncu), "multi_tensor_apply_kernel");
        assert_eq!(kernel_key(kineto), "multi_tensor_apply_kernel");
        assert_eq!(kernel_detail(ncu), kernel_detail(kineto));
        assert_eq!(
            kernel_key("<unnamed>::fill_kernel<float>(float*)"),
            "fill_kernel"
        );
        let clamp = "void vectorized_elementwise_kernel<4, unnamed>::launch_clamp_scalar(TensorIteratorBase &, Scalar, Scalar, detail::ClampLimits)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 4)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, 2>>(int, T2, T3)";
        assert_eq!(kernel_key(clamp), "vectorized_elementwise_kernel");
    }

    #[test]
    fn keys_agree_across_demanglings() {
        let ncu = "void vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>, std::array<char *, 2>>(int, T2, T3)";
        let kineto = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)";
        assert_eq!(kernel_key(ncu), kernel_key(kineto));
        assert_eq!(kernel_key(ncu), "vectorized_elementwise_kernel");
        assert_eq!(
            kernel_key("void at::<unnamed>::multi_tensor_apply_kernel<X>(T)"),
            kernel_key("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<Y>(Z)")
        );
        assert_eq!(
            kernel_key("sm80_xmma_fprop_implicit_gemm"),
            "sm80_xmma_fprop_implicit_gemm"
        );
    }
}
