//! Nsight Compute CSV (`ncu --csv --page raw`, plain or gzip) → [`Hardware`], aligned
//! with the trace's kernels.
//!
//! The reader is tolerant: `==PROF==`/`==WARNING==` lines are skipped wherever they
//! appear, row 1 names the columns and row 2 gives their units (a units row is
//! recognised by its empty `ID`), numbers may carry thousands separators, fields may
//! be quoted with `""` escapes. Rows without a kernel name are counted, not used.
//!
//! Alignment: rows are in launch order. They are matched with the kernels of one step
//! of the trace (the step where the most rows match, or the whole trace when it has no
//! steps) by the longest common subsequence over signatures (name key, grid, block;
//! names reduced by [`kernel_key`] because ncu and Kineto demangle differently). Every
//! other trace kernel with a signature that was profiled gets that row's counters
//! ([`Hardware::by_gpu`]), from a row whose op had the same input shapes where there is
//! one: a signature needs profiling only once per op call shape.

use crate::error::{Error, Result};
use crate::model::hardware::{kernel_key, Alignment, Hardware, HwKernel};
use crate::model::Profile;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// Most bytes of CSV text the ncu reader takes (after inflating): 256 MiB. A ResNet-50
/// training step with eleven metrics is 0.7 MB; the parser holds every field, so the cap
/// keeps its memory bounded too.
pub const MAX_CSV_BYTES: u64 = 256 << 20;

/// Read the ncu CSV at `path` (plain or gzip).
pub fn read_file(path: &Path) -> Result<Hardware> {
    let shown = crate::text::shown(&path.display().to_string());
    let raw =
        super::source::read_bounded(path, &format!("Nsight Compute CSV {shown}"), MAX_CSV_BYTES)
            .map_err(|e| {
                let hint = e.hint.clone().unwrap_or_else(|| {
                    "pass the file written by `ncu --csv --page raw ... > ncu.csv`".into()
                });
                e.with_hint(hint)
            })?;
    parse_bytes(&shown, &raw)
}

/// Parse ncu CSV bytes (plain or gzip).
pub fn parse_bytes(shown: &str, raw: &[u8]) -> Result<Hardware> {
    let what = format!("Nsight Compute CSV {shown}");
    let text = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut limits = super::limits::Limits::current();
        limits.max_inflated_bytes = limits.max_inflated_bytes.min(MAX_CSV_BYTES);
        let (out, cut) = super::source::inflate(&what, raw, limits)?;
        if let Some(e) = cut {
            return Err(Error::new(format!("failed to read {what}: {e}"))
                .with_hint("the gzip file may be cut short; record it again"));
        }
        String::from_utf8_lossy(&out).into_owned()
    } else if raw.len() as u64 > MAX_CSV_BYTES {
        return Err(Error::new(format!(
            "failed to read {what}: it is {}, over the {} this reader accepts",
            crate::text::fmt_size(raw.len() as u64),
            crate::text::fmt_size(MAX_CSV_BYTES)
        )));
    } else {
        String::from_utf8_lossy(raw).into_owned()
    };
    parse_text(shown, &text)
}

fn parse_text(shown: &str, text: &str) -> Result<Hardware> {
    let body: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("=="))
        .collect::<Vec<_>>()
        .join("\n");
    let records = split_csv(&body);
    let mut it = records
        .into_iter()
        .filter(|r| !(r.len() == 1 && r[0].is_empty()));
    let header = it.next().ok_or_else(|| {
        Error::new(format!("failed to read Nsight Compute CSV {shown}: no header row"))
            .with_hint("ncu printed no kernels: was the range filter (--nvtx-include) right, and did the program launch kernels?")
    })?;
    let col: HashMap<&str, usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), i))
        .collect();
    let Some(&name_col) = col.get("Kernel Name") else {
        return Err(Error::new(format!(
            "failed to read Nsight Compute CSV {shown}: no \"Kernel Name\" column (columns: {})",
            header
                .iter()
                .take(6)
                .map(|h| crate::text::shown_to(h, 60))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .with_hint("record with `ncu --csv --page raw`; the details page has another layout"));
    };
    let id_col = col.get("ID").copied();
    let mut units: Vec<String> = vec![String::new(); header.len()];
    let mut hw = Hardware {
        source: shown.to_string(),
        ..Default::default()
    };
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    for (n, rec) in it.enumerate() {
        let field = |i: usize| rec.get(i).map(String::as_str).unwrap_or("");
        let id = id_col.map(field).unwrap_or("");
        if n == 0 && id.is_empty() {
            units = (0..header.len()).map(|i| field(i).to_string()).collect();
            continue;
        }
        let name = field(name_col);
        if name.is_empty() {
            *skipped
                .entry("ncu_row_without_kernel_name".into())
                .or_default() += 1;
            continue;
        }
        let num = |metric: &str| col.get(metric).and_then(|&i| number(field(i)));
        let mut k = HwKernel {
            id: number(id)
                .map(|v| v as u64)
                .unwrap_or(hw.kernels.len() as u64),
            name: crate::text::cleaned(name),
            grid: col
                .get("Grid Size")
                .and_then(|&i| dims(field(i)))
                .unwrap_or_default(),
            block: col
                .get("Block Size")
                .and_then(|&i| dims(field(i)))
                .unwrap_or_default(),
            nvtx: col
                .get("thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg")
                .and_then(|&i| nvtx_range(field(i)))
                .or_else(|| {
                    col.get(
                        "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",
                    )
                    .and_then(|&i| nvtx_range(field(i)))
                }),
            duration_ns: num("gpu__time_duration.sum"),
            dram_read_bytes: num("dram__bytes_read.sum"),
            dram_write_bytes: num("dram__bytes_write.sum"),
            ld_sectors: num("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
            ld_requests: num("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
            st_sectors: num("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
            st_requests: num("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
            l2_hit_pct: num("lts__t_sector_hit_rate.pct"),
            achieved_occupancy_pct: num("sm__warps_active.avg.pct_of_peak_sustained_active"),
            theoretical_occupancy_pct: num("sm__maximum_warps_per_active_cycle_pct"),
            sm_throughput_pct: num("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            memory_throughput_pct: num(
                "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            ),
            tensor_pipe_pct: num(
                "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            )
            .or_else(|| {
                num("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")
            })
            .or_else(|| num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")),
            long_scoreboard_stall: num(
                "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
            ),
            long_scoreboard_per_issue: num(
                "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
            ),
            warps_active_per_issue: num("smsp__average_warps_active_per_issue_active.ratio"),
            registers_per_thread: num("launch__registers_per_thread"),
            shared_mem_per_block: num("launch__shared_mem_per_block_allocated"),
            occupancy_limit_registers: num("launch__occupancy_limit_registers"),
            occupancy_limit_shared_mem: num("launch__occupancy_limit_shared_mem"),
            occupancy_limit_warps: num("launch__occupancy_limit_warps"),
            occupancy_limit_blocks: num("launch__occupancy_limit_blocks"),
            max_warps_per_sm: None,
            stalls: crate::model::hardware::STALL_REASONS
                .iter()
                .filter_map(|&(key, _)| {
                    num(&crate::model::hardware::stall_metric(key)).map(|v| (key, v))
                })
                .collect(),
            gpu: None,
        };
        if let (Some(w), Some(p)) = (
            num("sm__maximum_warps_avg_per_active_cycle"),
            k.theoretical_occupancy_pct,
        ) {
            if p > 0.0 {
                k.max_warps_per_sm = Some(w * 100.0 / p);
            }
        }
        if k.duration_ns.is_none() {
            *skipped
                .entry("ncu_row_without_duration".into())
                .or_default() += 1;
        }
        hw.kernels.push(k);
    }
    if hw.kernels.is_empty() {
        return Err(Error::new(format!(
            "failed to read Nsight Compute CSV {shown}: no kernel rows"
        ))
        .with_hint("ncu profiled nothing: check --nvtx-include (`NAME/` selects a push/pop range, of the thread that launches; `NAME` a start/end range) and --launch-skip/--launch-count"));
    }
    hw.signatures = hw
        .kernels
        .iter()
        .map(|k| (k.name.as_str(), k.grid, k.block))
        .collect::<HashSet<_>>()
        .len();
    hw.metrics = header
        .iter()
        .zip(units.iter().chain(std::iter::repeat(&String::new())))
        .filter(|(h, _)| h.contains("__"))
        .map(|(h, u)| (h.clone(), u.clone()))
        .collect();
    hw.metrics.sort();
    hw.skipped = skipped.into_iter().collect();
    Ok(hw)
}

/// Split CSV text into records of fields (RFC 4180 quoting, `""` escapes).
fn split_csv(s: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rec = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            } else {
                field.push(c);
            }
        } else {
            match c {
                '"' => quoted = true,
                ',' => rec.push(std::mem::take(&mut field)),
                '\r' => {}
                '\n' => {
                    rec.push(std::mem::take(&mut field));
                    out.push(std::mem::take(&mut rec));
                }
                _ => field.push(c),
            }
        }
    }
    if !field.is_empty() || !rec.is_empty() {
        rec.push(field);
        out.push(rec);
    }
    out
}

/// `1,234.5` → 1234.5; empty, `n/a` and text → `None`.
fn number(s: &str) -> Option<f64> {
    let t: String = s.trim().chars().filter(|&c| c != ',').collect();
    if t.is_empty() {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// `(256, 1, 1)` → [256, 1, 1].
fn dims(s: &str) -> Option<[u32; 3]> {
    let inner = s.trim().trim_start_matches('(').trim_end_matches(')');
    let mut d = [1u32; 3];
    let mut n = 0;
    for (i, part) in inner.split(',').enumerate() {
        if i >= 3 {
            return None;
        }
        d[i] = part.trim().parse().ok()?;
        n += 1;
    }
    (n > 0).then_some(d)
}

/// The range name of an NVTX column: push/pop `600  "<default domain>:tensight_step:none:..."`
/// or start/end `"1:<default domain>:tensight_step:none:..."` → `tensight_step` (the first
/// part after the domain; a leading id is skipped).
fn nvtx_range(s: &str) -> Option<String> {
    let q = s.find('"')?;
    let rest = s[q + 1..].trim_end_matches('"').trim();
    let mut parts = rest
        .split(':')
        .map(str::trim)
        .skip_while(|p| p.parse::<u64>().is_ok());
    parts.next()?;
    parts
        .next()
        .map(crate::text::cleaned)
        .filter(|r| !r.is_empty())
}

/// A kernel signature: (name key, grid, block).
type Sig = (String, [u32; 3], [u32; 3]);

/// Align `hw`'s rows with `p`'s kernels and store the result in `p.hardware`.
pub fn attach(p: &mut Profile, mut hw: Hardware) {
    let sig_of = |i: usize| -> Option<Sig> {
        let g = &p.gpu[i];
        if !g.is_kernel() {
            return None;
        }
        let l = g.launch.unwrap_or_default();
        Some((kernel_key(&g.name), l.grid, l.block))
    };
    let trace_sigs: Vec<Option<Sig>> = (0..p.gpu.len()).map(sig_of).collect();
    let row_sigs: Vec<Sig> = hw.kernels.iter().map(HwKernel::signature).collect();
    // Candidate windows: each step, then the whole trace.
    let mut windows: Vec<(Option<String>, Vec<usize>)> = p
        .steps
        .iter()
        .map(|s| {
            let idx: Vec<usize> = (0..p.gpu.len())
                .filter(|&i| {
                    trace_sigs[i].is_some()
                        && p.gpu[i].ts_ns >= s.start_ns
                        && p.gpu[i].ts_ns < s.end_ns
                })
                .collect();
            (Some(s.name.clone()), idx)
        })
        .collect();
    windows.push((
        None,
        (0..p.gpu.len())
            .filter(|&i| trace_sigs[i].is_some())
            .collect(),
    ));
    let mut best: Option<(usize, Vec<(usize, usize)>)> = None;
    for (w, (_, idx)) in windows.iter().enumerate() {
        if idx.is_empty() || row_sigs.len().saturating_mul(idx.len()) > 60_000_000 {
            continue;
        }
        let pairs = lcs(&row_sigs, idx, &trace_sigs);
        if best.as_ref().is_none_or(|(_, b)| pairs.len() > b.len()) {
            best = Some((w, pairs));
        }
    }
    let steps = p.steps.len();
    let mut by_gpu: Vec<Option<u32>> = vec![None; p.gpu.len()];
    let mut al = Alignment::default();
    if let Some((w, pairs)) = best {
        let (step, idx) = &windows[w];
        al.method = match step {
            Some(s) => {
                format!("longest common subsequence with step {s} (best match of {steps} steps)")
            }
            None => "longest common subsequence with the whole trace".into(),
        };
        al.step = step.clone();
        al.trace_kernels = idx.len();
        al.matched = pairs.len();
        al.unmatched_trace_kernels = idx.len() - pairs.len();
        for &(r, g) in &pairs {
            hw.kernels[r].gpu = Some(g as u32);
            by_gpu[g] = Some(r as u32);
        }
    } else {
        al.method = "no kernels in the trace to align with".into();
    }
    al.unmatched_rows = hw.kernels.len() - al.matched;
    // Trace kernels without their own row (other steps; launches the pass skipped) take
    // the counters of a row with their signature (the template detail keeps add and mul,
    // one `elementwise_kernel` key, apart): preferably one whose launching op had the
    // same name, input shapes and input dtypes (the same work), else the first.
    let detail = |name: &str| crate::model::hardware::kernel_detail(name);
    type Call<'a> = (&'a str, &'a str, &'a str);
    let call_of = |i: usize| -> Option<Call> {
        let op = p.ops.get(p.gpu[i].op? as usize)?;
        Some((
            &op.name,
            op.input_dims.as_deref().unwrap_or(""),
            op.input_types.as_deref().unwrap_or(""),
        ))
    };
    let mut first: HashMap<(&Sig, String), u32> = HashMap::new();
    let mut same_call: HashMap<(&Sig, String, Call), u32> = HashMap::new();
    for (r, s) in row_sigs.iter().enumerate() {
        let d = detail(&hw.kernels[r].name);
        if let Some(call) = hw.kernels[r].gpu.and_then(|g| call_of(g as usize)) {
            same_call.entry((s, d.clone(), call)).or_insert(r as u32);
        }
        first.entry((s, d)).or_insert(r as u32);
    }
    for (i, s) in trace_sigs.iter().enumerate() {
        let Some(s) = s.as_ref() else { continue };
        if by_gpu[i].is_some() {
            continue;
        }
        let d = detail(&p.gpu[i].name);
        let call = call_of(i);
        let exact = call.and_then(|c| same_call.get(&(s, d.clone(), c)));
        if let Some(r) = exact {
            by_gpu[i] = Some(*r);
            al.applied_by_signature += 1;
        } else if let Some(r) = first.get(&(s, d)) {
            by_gpu[i] = Some(*r);
            al.applied_by_signature += 1;
            // A kernel without a launching op cannot be said to do other work.
            if call.is_some() {
                al.applied_other_shapes += 1;
            }
        }
    }
    al.all_trace_kernels = trace_sigs.iter().filter(|s| s.is_some()).count();
    al.with_counters = by_gpu.iter().filter(|r| r.is_some()).count();
    hw.by_gpu = by_gpu;
    hw.alignment = al;
    p.hardware = Some(hw);
}

/// Longest common subsequence of `rows` and the trace kernels `idx` (by signature):
/// (row, gpu index) pairs in order.
fn lcs(rows: &[Sig], idx: &[usize], trace: &[Option<Sig>]) -> Vec<(usize, usize)> {
    let (n, m) = (rows.len(), idx.len());
    let w = m + 1;
    let mut t = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i * w + j] = if trace[idx[j]].as_ref() == Some(&rows[i]) {
                t[(i + 1) * w + j + 1] + 1
            } else {
                t[(i + 1) * w + j].max(t[i * w + j + 1])
            };
        }
    }
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if trace[idx[j]].as_ref() == Some(&rows[i]) {
            out.push((i, idx[j]));
            i += 1;
            j += 1;
        } else if t[(i + 1) * w + j] >= t[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBE: &[u8] = include_bytes!("../../../../tests/fixtures/h200-probe/ncu_raw.csv.gz");
    pub(super) const RESNET: &[u8] =
        include_bytes!("../../../../tests/fixtures/h200-probe/ncu_resnet50_step.csv.gz");

    #[test]
    fn nvtx_range_names() {
        assert_eq!(
            nvtx_range("600  \"<default domain>:tensight_step:none:none\"").as_deref(),
            Some("tensight_step")
        );
        assert_eq!(
            nvtx_range("\"1:<default domain>:tensight_step:none:none\"").as_deref(),
            Some("tensight_step")
        );
        assert_eq!(nvtx_range("no quotes"), None);
    }

    #[test]
    fn probe_kernel_3_loads_32_sectors_per_request() {
        let hw = parse_bytes("probe", PROBE).expect("probe CSV parses");
        assert_eq!(hw.kernels.len(), 4);
        let k = &hw.kernels[3];
        assert_eq!(k.grid, [65536, 1, 1]);
        assert_eq!(k.block, [128, 1, 1]);
        assert_eq!(k.ld_sectors, Some(16_777_216.0));
        assert_eq!(k.ld_requests, Some(524_288.0));
        assert_eq!(k.ld_sectors_per_request(), Some(32.0));
        assert_eq!(k.duration_ns, Some(125_184.0));
        assert_eq!(k.nvtx.as_deref(), Some("transposed"));
        assert_eq!(hw.kernels[1].ld_sectors_per_request(), Some(16.0));
        assert_eq!(hw.kernels[1].nvtx.as_deref(), Some("contig"));
        assert_eq!(k.registers_per_thread, Some(18.0));
        assert!(hw
            .metrics
            .iter()
            .any(|(m, u)| m == "dram__bytes_read.sum" && u == "byte"));
    }

    #[test]
    fn resnet_step_has_304_rows_and_76_signatures() {
        let hw = parse_bytes("resnet", RESNET).expect("resnet CSV parses");
        assert_eq!(hw.kernels.len(), 304);
        assert_eq!(hw.signatures, 76);
        assert!(hw.kernels.iter().all(|k| k.duration_ns.is_some()));
        assert!(hw.kernels.iter().all(|k| k.l2_hit_pct.is_some()));
        assert_eq!(hw.kernels[0].nvtx.as_deref(), Some("tensight_step"));
        assert!(hw.skipped.is_empty());
    }

    #[test]
    fn tolerant_of_plain_text_and_odd_rows() {
        let csv = "==PROF== hi\n\"ID\",\"Kernel Name\",\"Grid Size\",\"Block Size\",\"gpu__time_duration.sum\"\n\"\",\"\",\"\",\"\",\"ns\"\n\"0\",\"k<a, \"\"b\"\">\",\"(2, 1, 1)\",\"(32, 1, 1)\",\"1,024\"\n==WARNING== x\n\"1\",\"\",\"\",\"\",\"\"\n";
        let hw = parse_bytes("t", csv.as_bytes()).expect("parses");
        assert_eq!(hw.kernels.len(), 1);
        assert_eq!(hw.kernels[0].name, "k<a, \"b\">");
        assert_eq!(hw.kernels[0].duration_ns, Some(1024.0));
        assert_eq!(
            hw.skipped,
            vec![("ncu_row_without_kernel_name".to_string(), 1)]
        );
        assert!(parse_bytes("t", b"\"ID\",\"x\"\n").is_err());
        assert!(parse_bytes("t", b"").is_err());
    }
}

#[cfg(test)]
mod bundle_tests {
    use super::*;

    /// The ResNet-50 ncu step (a separate run of the same model and batch) against
    /// the ResNet-50 bundle's steps.
    #[test]
    fn resnet_rows_align_with_a_bundle_step() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/bundles/h200-resnet50");
        let mut loaded = crate::read::load(&dir).expect("bundle loads");
        let hw = parse_bytes("resnet", super::tests::RESNET).expect("parses");
        attach(&mut loaded.profile, hw);
        let hw = loaded.profile.hardware.as_ref().expect("attached");
        let a = &hw.alignment;
        eprintln!("{a:?}");
        assert!(a.step.is_some(), "{a:?}");
        assert!(a.matched >= 250, "{a:?}");
        assert_eq!(a.matched + a.unmatched_rows, 304);
    }
}

/// The two ResNet-50 hardware passes (H200, `tensight bench --model resnet50
/// --batch-size 32 --hardware`, one step): every launch (725 rows) and repeated op calls
/// skipped (276 rows), each aligned with the recorded ResNet-50 bundle (another run).
#[cfg(test)]
mod resnet_passes {
    use super::*;
    use crate::model::hardware::kernel_detail;

    fn attached(csv: &str) -> Profile {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bundles");
        let mut loaded = crate::read::load(&root.join("h200-resnet50")).expect("bundle loads");
        let hw = read_file(&root.join(csv)).expect("ncu CSV reads");
        attach(&mut loaded.profile, hw);
        loaded.profile
    }

    #[test]
    fn names_agree_across_demanglings_for_every_aligned_kernel() {
        let p = attached("h200-resnet50-hardware/ncu.csv.gz");
        let hw = p.hardware.as_ref().expect("attached");
        let mut pairs = 0;
        for k in &hw.kernels {
            let Some(g) = k.gpu else { continue };
            let trace = &p.gpu[g as usize].name;
            // cuDNN's templates, booleans, casts and anonymous namespaces included.
            assert_eq!(
                kernel_key(&k.name),
                kernel_key(trace),
                "{} | {trace}",
                k.name
            );
            assert_eq!(
                kernel_detail(&k.name),
                kernel_detail(trace),
                "{} | {trace}",
                k.name
            );
            pairs += 1;
        }
        assert_eq!(pairs, 724);
        let a = &hw.alignment;
        // 5 steps of 725 kernels; the one cutlass kernel whose grid differs between the
        // two runs (cuDNN chose it per process) has none, in each step.
        assert_eq!(
            (a.all_trace_kernels, a.with_counters),
            (3625, 3620),
            "{a:?}"
        );
        assert_eq!(a.applied_other_shapes, 0, "{a:?}");
    }

    #[test]
    fn skipping_repeated_op_calls_keeps_every_kernels_counters() {
        let every = attached("h200-resnet50-hardware/ncu.csv.gz");
        let skip = attached("h200-resnet50-hardware-repeats/ncu.csv.gz");
        let (he, hs) = (
            every.hardware.as_ref().unwrap(),
            skip.hardware.as_ref().unwrap(),
        );
        assert_eq!((hs.kernels.len(), hs.signatures), (276, 160));
        assert_eq!(he.signatures, hs.signatures);
        let a = &hs.alignment;
        assert_eq!(a.with_counters, he.alignment.with_counters, "{a:?}");
        assert!(a.applied_other_shapes <= 5, "{a:?}");
        // Every row has the whole warp-state breakdown (40 metrics since 2026-11-29).
        for k in &hs.kernels {
            assert_eq!(
                k.stalls.len(),
                crate::model::hardware::STALL_REASONS.len(),
                "{}",
                k.name
            );
            let shares = k.stall_shares();
            let sum: f64 = shares.iter().map(|s| s.1).sum();
            assert!(sum <= 1.0 + 1e-9 && sum > 0.5, "{sum} {}", k.name);
        }
        // The counters each kernel gets agree with its own launch's, profiled in the
        // every-launch pass: sectors are the work, not the run.
        let (mut compared, mut off) = (0, Vec::new());
        for i in 0..every.gpu.len() {
            let (Some(e), Some(s)) = (he.for_gpu(i), hs.for_gpu(i)) else {
                continue;
            };
            let (Some(x), Some(y)) = (e.ld_sectors, s.ld_sectors) else {
                continue;
            };
            compared += 1;
            if (x - y).abs() > 0.02 * x.max(y) + 64.0 {
                off.push((i, x, y));
            }
        }
        assert!(compared >= 3000, "{compared}");
        assert!(
            off.len() * 100 <= compared,
            "{} of {compared} differ: {:?}",
            off.len(),
            &off[..off.len().min(5)]
        );
    }
}
