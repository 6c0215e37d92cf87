//! Access efficiency from the hardware pass: per kernel, sectors per request against
//! the ideal for its access width, the excess traffic and the time it costs; per op,
//! the same summed over its kernels.
//!
//! The model. A warp-level global load or store request moves 32 threads × `w` bytes,
//! where `w` is the width of each thread's access (4 for a scalar fp32 load, 16 for a
//! `float4` vector load). When the 32 addresses are consecutive the request touches
//! exactly `32 × w / 32 = w` sectors of 32 bytes: the ideal sectors per request equals
//! the access width in bytes. A strided access touches up to 32 sectors per request
//! (one per thread) and moves 32 bytes per sector to use `w`. The width is inferred
//! from the kernel name (PyTorch's TensorIterator kernels: `vectorized_elementwise_kernel<V, ...>`
//! loads `V` elements per thread, the other elementwise kernels one; the element size
//! is the first scalar type among the template arguments). For any other kernel the
//! width is taken as 16 bytes, the widest vector access, so only traffic that no
//! access width explains counts as excess (conservative).
//!
//! Excess bytes = (measured − ideal) sectors × 32 B, loads and stores together. Time
//! cost, assuming the kernel is bound by the sectors it moves: duration × (1 −
//! ideal / measured sectors). Durations are the trace's when a trace kernel is mapped to
//! the row, else ncu's (measured under ncu, serialized).

use crate::analysis::flops::parse_dims;
use crate::model::hardware::{kernel_key, HwKernel};
use crate::model::Profile;
use serde::Serialize;

/// Excess factor from which a kernel's access counts as wasteful (V001, M001).
pub(crate) const MIN_FACTOR: f64 = 2.0;
/// Excess bytes from which it is reported (V001, M001).
pub(crate) const MIN_EXCESS_BYTES: f64 = 1024.0 * 1024.0;

/// Bytes per sector.
pub const SECTOR_BYTES: f64 = 32.0;

/// One profiled kernel's access efficiency.
#[derive(Debug, Clone, Serialize)]
pub struct KernelEfficiency {
    /// Row index in [`crate::model::hardware::Hardware::kernels`].
    pub row: usize,
    /// Kernel name (ncu's).
    pub name: String,
    /// Access width per thread, bytes (see the module docs).
    pub access_bytes: f64,
    /// How the width was found: `name` or `assumed`.
    pub access_source: &'static str,
    /// Measured load sectors per request.
    pub ld_sectors_per_request: Option<f64>,
    /// Measured store sectors per request.
    pub st_sectors_per_request: Option<f64>,
    /// Ideal sectors per request (= access width in bytes).
    pub ideal_sectors_per_request: f64,
    /// Sectors measured, loads + stores.
    pub measured_sectors: f64,
    /// Sectors an ideal access would have moved (requests × ideal, capped at measured).
    pub ideal_sectors: f64,
    /// (measured − ideal) × 32 B.
    pub excess_bytes: f64,
    /// Of which on loads.
    pub excess_load_bytes: f64,
    /// measured / ideal sectors (1 = ideal).
    pub excess_factor: f64,
    /// ncu's duration, ns.
    pub ncu_duration_ns: f64,
    /// Share of the kernel's time the excess costs: 1 − ideal / measured.
    pub cost_fraction: f64,
    /// Long-scoreboard stall cycles per warp (ncu's ratio), when collected.
    pub long_scoreboard_stall: Option<f64>,
}

/// Access width from the kernel name, bytes, when the name says it.
pub fn access_bytes_from_name(name: &str) -> Option<f64> {
    let key = kernel_key(name);
    let elem = scalar_bytes(name)?;
    match key.as_str() {
        "vectorized_elementwise_kernel" => {
            let after = name.split_once('<')?.1;
            let v: f64 = after.split([',', '>']).next()?.trim().parse().ok()?;
            Some((v * elem).clamp(1.0, 16.0))
        }
        "elementwise_kernel" | "unrolled_elementwise_kernel" | "elementwise_kernel_with_index" => {
            Some(elem)
        }
        _ => None,
    }
}

/// Size of the first scalar type named in the template arguments.
fn scalar_bytes(name: &str) -> Option<f64> {
    const TYPES: [(&str, f64); 12] = [
        ("c10::BFloat16", 2.0),
        ("BFloat16", 2.0),
        ("c10::Half", 2.0),
        ("Half", 2.0),
        ("__half", 2.0),
        ("double", 8.0),
        ("float", 4.0),
        ("long", 8.0),
        ("int64_t", 8.0),
        ("bool", 1.0),
        ("unsigned char", 1.0),
        ("signed char", 1.0),
    ];
    let start = name.find('<')?;
    let s = &name[start..];
    let mut best: Option<(usize, f64)> = None;
    for (t, b) in TYPES {
        let mut from = 0;
        while let Some(pos) = s[from..].find(t) {
            let at = from + pos;
            let before = s[..at].chars().last().unwrap_or(' ');
            let after = s[at + t.len()..].chars().next().unwrap_or(' ');
            let ident = |c: char| c.is_alphanumeric() || c == '_';
            let word = !ident(before) && !ident(after);
            if word {
                if best.is_none_or(|(p, _)| at < p) {
                    best = Some((at, b));
                }
                break;
            }
            from = at + t.len();
        }
    }
    best.map(|(_, b)| b)
}

/// Efficiency of one row (`None` without sector and request counts).
pub fn kernel_efficiency(row: usize, k: &HwKernel) -> Option<KernelEfficiency> {
    let (w, src) = match access_bytes_from_name(&k.name) {
        Some(w) => (w, "name"),
        None => (16.0, "assumed"),
    };
    let side = |s: Option<f64>, r: Option<f64>| -> (f64, f64) {
        match (s, r) {
            (Some(s), Some(r)) if r > 0.0 => (s, (r * w).min(s)),
            (Some(s), _) => (s, s),
            _ => (0.0, 0.0),
        }
    };
    if k.ld_sectors.is_none() && k.st_sectors.is_none() {
        return None;
    }
    let (ld_m, ld_i) = side(k.ld_sectors, k.ld_requests);
    let (st_m, st_i) = side(k.st_sectors, k.st_requests);
    let measured = ld_m + st_m;
    let ideal = ld_i + st_i;
    let excess_factor = if ideal > 0.0 { measured / ideal } else { 1.0 };
    Some(KernelEfficiency {
        row,
        name: k.name.clone(),
        access_bytes: w,
        access_source: src,
        ld_sectors_per_request: k.ld_sectors_per_request(),
        st_sectors_per_request: k.st_sectors_per_request(),
        ideal_sectors_per_request: w,
        measured_sectors: measured,
        ideal_sectors: ideal,
        excess_bytes: (measured - ideal) * SECTOR_BYTES,
        excess_load_bytes: (ld_m - ld_i) * SECTOR_BYTES,
        excess_factor,
        ncu_duration_ns: k.duration_ns.unwrap_or(0.0),
        cost_fraction: if measured > 0.0 {
            1.0 - ideal / measured
        } else {
            0.0
        },
        long_scoreboard_stall: k.long_scoreboard_stall,
    })
}

/// Efficiency of every row of the profile's hardware pass (empty without one).
pub fn kernels(p: &Profile) -> Vec<KernelEfficiency> {
    let Some(hw) = &p.hardware else {
        return Vec::new();
    };
    hw.kernels
        .iter()
        .enumerate()
        .filter_map(|(i, k)| kernel_efficiency(i, k))
        .collect()
}

/// Time per step (ns) of the trace kernels that row `row`'s counters apply to, and
/// how many; falls back to ncu's duration (one profiled step) when none is mapped.
pub fn trace_time_per_step(p: &Profile, row: usize, steps: f64) -> (f64, usize) {
    let Some(hw) = &p.hardware else {
        return (0.0, 0);
    };
    let in_step =
        |ts: i64| p.steps.is_empty() || p.steps.iter().any(|s| ts >= s.start_ns && ts < s.end_ns);
    let mut total = 0.0;
    let mut n = 0;
    for (i, r) in hw.by_gpu.iter().enumerate() {
        if *r == Some(row as u32) {
            if let Some(g) = p.gpu.get(i) {
                if in_step(g.ts_ns) {
                    total += g.dur_ns as f64;
                    n += 1;
                }
            }
        }
    }
    if n == 0 {
        let d = hw
            .kernels
            .get(row)
            .and_then(|k| k.duration_ns)
            .unwrap_or(0.0);
        return (d, 0);
    }
    (total / steps.max(1.0), n)
}

/// A tensor argument of an op whose strides are not the contiguous ones for its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct NonContiguousInput {
    /// The op holding it (index into `Profile::ops`).
    pub op: u32,
    /// Argument position.
    pub arg: usize,
    /// Shape.
    pub dims: Vec<i64>,
    /// Strides.
    pub strides: Vec<i64>,
    /// `transposed`, `channels-last`, `expanded` or `strided`.
    pub layout: &'static str,
}

impl NonContiguousInput {
    /// `input 0 of aten::copy_: [4096, 4096] strides [1, 4096] (transposed)`.
    pub fn describe(&self, p: &Profile) -> String {
        let name = p
            .ops
            .get(self.op as usize)
            .map(|o| o.name.to_string())
            .unwrap_or_default();
        format!(
            "input {} of {name}: {:?} strides {:?} ({})",
            self.arg, self.dims, self.strides, self.layout
        )
    }
}

/// The first non-contiguous tensor input of op `op` or its ancestors (inner first):
/// what a kernel launched inside them reads across strides.
pub fn non_contiguous_input(p: &Profile, op: u32) -> Option<NonContiguousInput> {
    std::iter::once(op)
        .chain(p.op_ancestors(op))
        .find_map(|o| non_contiguous_of(p, o))
}

fn non_contiguous_of(p: &Profile, op: u32) -> Option<NonContiguousInput> {
    let o = p.ops.get(op as usize)?;
    let dims = parse_dims(o.input_dims.as_deref()?);
    let strides = parse_dims(o.input_strides.as_deref()?);
    for (arg, (d, s)) in dims.iter().zip(strides.iter()).enumerate() {
        if d.len() < 2 || d.len() != s.len() {
            continue;
        }
        if let Some(layout) = classify(d, s) {
            return Some(NonContiguousInput {
                op,
                arg,
                dims: d.clone(),
                strides: s.clone(),
                layout,
            });
        }
    }
    None
}

/// `None` when contiguous (size-1 dims ignored), else the layout class.
fn classify(d: &[i64], s: &[i64]) -> Option<&'static str> {
    let mut expect = 1i64;
    let mut contiguous = true;
    for i in (0..d.len()).rev() {
        if d[i] != 1 && s[i] != expect {
            contiguous = false;
        }
        expect = expect.saturating_mul(d[i].max(1));
    }
    if contiguous {
        return None;
    }
    if d.iter().zip(s).any(|(&d, &s)| d > 1 && s == 0) {
        return Some("expanded");
    }
    if d.len() == 4 && s[1] == 1 && d[1] > 1 {
        return Some("channels-last");
    }
    let mut sorted: Vec<i64> = s.to_vec();
    sorted.sort_unstable();
    let mut perm_strides = Vec::new();
    let mut order: Vec<usize> = (0..d.len()).collect();
    order.sort_by_key(|&i| s[i]);
    let mut e = 1i64;
    for &i in &order {
        perm_strides.push(e);
        e = e.saturating_mul(d[i].max(1));
    }
    if order
        .iter()
        .zip(&perm_strides)
        .all(|(&i, &ps)| d[i] == 1 || s[i] == ps)
    {
        Some("transposed")
    } else {
        Some("strided")
    }
}

/// A kernel's access efficiency joined with the trace: its op and any non-contiguous
/// input the op reads.
#[derive(Debug, Clone)]
pub struct Attributed {
    /// The row's efficiency.
    pub eff: KernelEfficiency,
    /// The launching op of the first trace kernel mapped to the row.
    pub op: Option<u32>,
    /// A non-contiguous input of that op (or an ancestor).
    pub view: Option<NonContiguousInput>,
    /// Trace time per step of the kernels the row applies to, ns.
    pub time_per_step_ns: f64,
    /// Trace kernels the row applies to (0: ncu's duration used).
    pub trace_kernels: usize,
}

impl Attributed {
    /// Estimated time the excess costs per step, ns.
    pub fn cost_ns(&self) -> f64 {
        self.time_per_step_ns * self.eff.cost_fraction
    }
}

/// Rows with excess traffic of at least `min_factor`, joined with their ops, the most
/// costly first. One entry per distinct signature applied (repeats are summed through
/// the trace kernels the row maps to).
pub fn attributed(p: &Profile, steps: f64, min_factor: f64) -> Vec<Attributed> {
    let Some(hw) = &p.hardware else {
        return Vec::new();
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for eff in kernels(p) {
        if eff.excess_factor < min_factor {
            continue;
        }
        let k = &hw.kernels[eff.row];
        // Rows that share a signature map their trace kernels to the first one.
        if !seen.insert((k.name.clone(), k.grid, k.block)) {
            continue;
        }
        let (t, n) = trace_time_per_step(p, eff.row, steps);
        if n == 0 && hw.alignment.matched > 0 {
            // A row of another part of the program than the trace holds.
            continue;
        }
        let gpu = k.gpu.or_else(|| {
            hw.by_gpu
                .iter()
                .position(|r| *r == Some(eff.row as u32))
                .map(|i| i as u32)
        });
        let op = gpu.and_then(|g| p.gpu.get(g as usize)).and_then(|g| g.op);
        let view = op.and_then(|o| non_contiguous_input(p, o));
        out.push(Attributed {
            eff,
            op,
            view,
            time_per_step_ns: t,
            trace_kernels: n,
        });
    }
    out.sort_by(|a, b| b.cost_ns().total_cmp(&a.cost_ns()));
    out
}

/// A profiled signature as the trace ran it: one row per distinct (name, grid, block),
/// the trace time per step of the kernels its counters apply to, and their op.
#[derive(Debug, Clone)]
pub struct AppliedRow {
    /// Row index in [`crate::model::hardware::Hardware::kernels`].
    pub row: usize,
    /// Trace time per step, ns (ncu's duration when no trace kernel is mapped).
    pub time_per_step_ns: f64,
    /// Trace kernels it applies to.
    pub trace_kernels: usize,
    /// Launching op of the first of them.
    pub op: Option<u32>,
}

/// Every distinct profiled signature with its trace time (rows the trace does not hold
/// are left out when the alignment matched anything).
pub fn applied_rows(p: &Profile, steps: f64) -> Vec<AppliedRow> {
    let Some(hw) = &p.hardware else {
        return Vec::new();
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (row, k) in hw.kernels.iter().enumerate() {
        if !seen.insert((k.name.as_str(), k.grid, k.block)) {
            continue;
        }
        let (t, n) = trace_time_per_step(p, row, steps);
        if n == 0 && hw.alignment.matched > 0 {
            continue;
        }
        let gpu = k.gpu.or_else(|| {
            hw.by_gpu
                .iter()
                .position(|r| *r == Some(row as u32))
                .map(|i| i as u32)
        });
        let op = gpu.and_then(|g| p.gpu.get(g as usize)).and_then(|g| g.op);
        out.push(AppliedRow {
            row,
            time_per_step_ns: t,
            trace_kernels: n,
            op,
        });
    }
    out
}

/// Bytes of the tensor inputs of op `op` (shapes × element sizes), when recorded.
pub fn input_bytes(p: &Profile, op: u32) -> Option<f64> {
    let o = p.ops.get(op as usize)?;
    let dims = parse_dims(o.input_dims.as_deref()?);
    let types = crate::analysis::flops::parse_types(o.input_types.as_deref()?);
    let mut total = 0.0;
    for (d, t) in dims.iter().zip(types.iter()) {
        if d.is_empty() {
            continue;
        }
        let elem = match t.as_str() {
            "float" | "int" | "unsigned int" => 4.0,
            "double" | "long int" | "long" | "c10::complex<float>" => 8.0,
            "c10::Half" | "c10::BFloat16" | "short int" => 2.0,
            "bool" | "unsigned char" | "signed char" | "c10::Float8_e4m3fn"
            | "c10::Float8_e5m2" => 1.0,
            _ => continue,
        };
        total += d.iter().map(|&x| x.max(0) as f64).product::<f64>() * elem;
    }
    (total > 0.0).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_from_names() {
        assert_eq!(
            access_bytes_from_name("void vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>, std::array<char *, 2>>(int, T2, T3)"),
            Some(16.0)
        );
        assert_eq!(
            access_bytes_from_name("void elementwise_kernel<128, 2, void gpu_kernel_impl_nocast<direct_copy_kernel_cuda(TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)"),
            Some(4.0)
        );
        assert_eq!(
            access_bytes_from_name("void at::vectorized_elementwise_kernel<2, at::CUDAFunctorOnSelf_add<long>, std::array<char *, 2>>(int, T2, T3)"),
            Some(16.0)
        );
        assert_eq!(
            access_bytes_from_name("sm80_xmma_fprop_implicit_gemm"),
            None
        );
    }

    #[test]
    fn layouts() {
        assert_eq!(classify(&[4096, 4096], &[4096, 1]), None);
        assert_eq!(classify(&[4096, 4096], &[1, 4096]), Some("transposed"));
        assert_eq!(
            classify(&[32, 3, 32, 32], &[3072, 1024, 1, 32]),
            Some("transposed")
        );
        assert_eq!(
            classify(&[32, 3, 32, 32], &[3072, 1, 96, 3]),
            Some("channels-last")
        );
        assert_eq!(classify(&[8, 4], &[0, 1]), Some("expanded"));
        assert_eq!(classify(&[8, 4], &[8, 2]), Some("strided"));
        assert_eq!(classify(&[1, 4], &[99, 1]), None);
    }

    #[test]
    fn probe_efficiency() {
        let raw = include_bytes!("../../../../tests/fixtures/h200-probe/ncu_raw.csv.gz");
        let hw = crate::read::ncu::parse_bytes("probe", raw).expect("parses");
        let e3 = kernel_efficiency(3, &hw.kernels[3]).expect("counters");
        assert_eq!(e3.ld_sectors_per_request, Some(32.0));
        assert_eq!(e3.ideal_sectors_per_request, 4.0);
        assert_eq!(e3.excess_load_bytes, (16_777_216.0 - 2_097_152.0) * 32.0);
        assert!(
            (e3.excess_factor - 4.5).abs() < 1e-9,
            "{}",
            e3.excess_factor
        );
        // Loads alone: 32 / 4 = 8× the ideal traffic.
        assert_eq!(
            e3.ld_sectors_per_request.unwrap_or(0.0) / e3.ideal_sectors_per_request,
            8.0
        );
        for r in 1..=2 {
            let e = kernel_efficiency(r, &hw.kernels[r]).expect("counters");
            assert_eq!(e.ld_sectors_per_request, Some(16.0));
            assert_eq!(e.excess_bytes, 0.0);
        }
    }
}
