//! `tensight run --hardware`: the program's second run, under Nsight Compute, for one step.
//!
//! After the normal run wrote the bundle, the program runs again as
//! `ncu --clock-control none --target-processes all --nvtx --nvtx-include tensight_step
//! --csv --page raw --metrics M --log-file BUNDLE/ncu.csv -- env K=V... CMD...` with
//! `TENSIGHT_HARDWARE=1` and `TENSIGHT_HARDWARE_STEP=K`: the collector records no profile
//! and instead wraps step K in the process-wide NVTX start/end range `tensight_step`
//! (every thread's kernels, the backward pass's included; range names come from the
//! bundle contract, `contract.json`). When the first run found its steps as the
//! iterations of a loop, `TENSIGHT_HARDWARE_LOOP=FILE:LINE` names that loop. Unless
//! `--hardware-every-launch`, `TENSIGHT_HARDWARE_REPEATS=skip` has the collector wrap
//! each op call that repeats an earlier one of the step in the push/pop range
//! `tensight_repeat`, which `--nvtx-exclude tensight_repeat/` skips (python
//! `tensight/repeats.py`); the reader gives those launches the counters of their
//! signature's profiled launch. After the step the collector stops the program (if
//! `--stop`) and writes `ncu_range.json`: whether the range closed, how many op calls
//! it marked.
//! ncu writes its CSV (and its `==PROF==` lines, which the reader skips) to the
//! `--log-file`; the program's own stdout and stderr (and any ncu message that misses
//! the log file) go to `ncu.log`, so nothing corrupts the CSV. The CSV is gzipped to
//! `ncu.csv.gz`; the manifest gets `files.ncu` and `hardware` (status `recorded`,
//! `skipped` or `failed`, reason, step, launches, op_calls, op_repeats, ncu_version,
//! wall_s), replaced atomically.
//! Never fatal: a missing ncu is a note, a failure a warning, and the run goes on.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use tensight::read::bundle::manifest::{contract, Hardware};

/// The metrics the engine reads (read/ncu.rs). Each kernel is replayed until all are
/// collected; one unknown name makes ncu refuse, so only names valid on Hopper.
pub const METRICS: &[&str] = &[
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "lts__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "sm__maximum_warps_avg_per_active_cycle",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_active_per_issue_active.ratio",
    // The rest of the warp-state breakdown (model::hardware::STALL_REASONS).
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_drain_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_misc_per_issue_active.ratio",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_allocated",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
];

const CSV: &str = "ncu.csv";
const LOG: &str = "ncu.log";

/// What the user asked of the hardware pass.
pub struct Ask {
    /// The step to profile (default: the first after the warm-up).
    pub step: Option<u64>,
    /// Profile every launch, repeated op calls too.
    pub every_launch: bool,
}

/// What the second run needs from the first.
pub(crate) struct Pass<'a> {
    pub bundle: &'a Path,
    pub command: &'a [OsString],
    /// The environment of the first run (PYTHONPATH, TENSIGHT_*).
    pub env: Vec<(&'static str, OsString)>,
    pub ask: &'a Ask,
    /// The first run's warm-up steps.
    pub warmup: u64,
}

impl Pass<'_> {
    /// The collector's warm-up: W boundaries (W = 0 acts as 1), then the step to profile.
    fn step(&self) -> u64 {
        self.ask.step.unwrap_or(self.warmup.max(1) + 1)
    }
}

/// How the pass ended, for the manifest and the one stderr line.
struct Outcome {
    status: &'static str,
    reason: Option<String>,
    kernels: Option<usize>,
    signatures: Option<usize>,
    version: Option<String>,
    /// What the collector counted in the step: op calls, and those marked as repeats.
    marks: Marks,
}

/// The collector's counts from `ncu_range.json`.
#[derive(Default)]
struct Marks {
    op_calls: Option<u64>,
    op_repeats: Option<u64>,
    note: Option<String>,
}

impl Outcome {
    fn failed(reason: String) -> Self {
        Outcome {
            status: "failed",
            reason: Some(reason),
            kernels: None,
            signatures: None,
            version: None,
            marks: Marks::default(),
        }
    }
}

/// `$TENSIGHT_NCU`, else `ncu` on PATH.
fn find_ncu() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENSIGHT_NCU").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("ncu"))
        .find(|p| is_executable(p))
}

#[cfg(unix)]
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(p: &Path) -> bool {
    p.is_file()
}

/// ncu's arguments before `--` and the program.
pub fn ncu_args(csv: &Path, every_launch: bool) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    // No trailing `/`: a start/end range (process-wide), not a push/pop one (per thread;
    // the backward kernels, launched from autograd's threads, would be left out).
    let nvtx = &contract().nvtx;
    a.push(nvtx.step.clone().into());
    if !every_launch {
        // Kernels of op calls the collector marked as repeats (trailing `/`: push/pop).
        a.push("--nvtx-exclude".into());
        a.push(format!("{}/", nvtx.repeat).into());
    }
    for x in ["--csv", "--page", "raw", "--metrics"] {
        a.push(x.into());
    }
    a.push(METRICS.join(",").into());
    a.push("--log-file".into());
    a.push(csv.into());
    a
}

/// The program as ncu starts it: `env K=V... CMD...`, so the collector's variables reach
/// the program even through a launcher that rebuilds the environment. Nsight Compute
/// 2025.3 on an H200 passed them through; what kept the collector out there was its
/// Python launcher claiming the run (see the boot hook's `_on_torch`).
fn target_command(env: &[(&str, OsString)], command: &[OsString]) -> Vec<OsString> {
    let Some(env_bin) = ["/usr/bin/env", "/bin/env"]
        .iter()
        .map(Path::new)
        .find(|p| is_executable(p))
    else {
        return command.to_vec();
    };
    let mut out = vec![env_bin.as_os_str().to_os_string()];
    for (k, v) in env {
        let mut kv = OsString::from(*k);
        kv.push("=");
        kv.push(v);
        out.push(kv);
    }
    out.extend(command.iter().cloned());
    out
}

/// Run the pass and record it in the manifest; one line on stderr says how it went.
pub(crate) fn run(pass: &Pass) {
    let t0 = Instant::now();
    let outcome = match find_ncu() {
        None => Outcome {
            status: "skipped",
            reason: Some("ncu not found (install Nsight Compute or set TENSIGHT_NCU)".to_string()),
            kernels: None,
            signatures: None,
            version: None,
            marks: Marks::default(),
        },
        Some(ncu) => profile(pass, &ncu),
    };
    let wall = t0.elapsed().as_secs_f64();
    match (outcome.status, &outcome.reason) {
        ("skipped", Some(r)) => eprintln!("tensight: hardware pass skipped: {r}"),
        ("failed", Some(r)) => eprintln!("warning: hardware pass failed: {r}"),
        _ => {
            let k = outcome.kernels.unwrap_or(0);
            let s = outcome.signatures.unwrap_or(k);
            let saved = match (&outcome.marks, pass.ask.every_launch) {
                (m, false) if m.op_repeats.is_some() => format!(
                    "; {} of {} op calls repeated an earlier one and were not profiled",
                    m.op_repeats.unwrap_or(0),
                    m.op_calls.unwrap_or(0)
                ),
                (m, false) => format!(
                    "; every launch profiled: {}",
                    m.note.as_deref().unwrap_or("no op calls were marked")
                ),
                _ if s > 0 && s < k => format!(
                    "; {s} distinct signatures: without --hardware-every-launch repeats are skipped"
                ),
                _ => String::new(),
            };
            eprintln!(
                "tensight: hardware: recorded for step {} ({k} kernel{} in {wall:.0} s{saved})",
                pass.step(),
                if k == 1 { "" } else { "s" }
            );
        }
    }
    if let Err(e) = update_manifest(pass, &outcome, wall) {
        eprintln!("warning: failed to record the hardware pass in the manifest: {e}");
    }
}

fn profile(pass: &Pass, ncu: &Path) -> Outcome {
    let version = ncu_version(ncu);
    let csv = pass.bundle.join(CSV);
    let mark = pass.bundle.join(&contract().files.ncu_range);
    let step = pass.step();
    let _ = std::fs::remove_file(&mark);
    let log = match std::fs::File::create(pass.bundle.join(LOG)) {
        Ok(f) => f,
        Err(e) => return Outcome::failed(format!("cannot create {LOG}: {e}")),
    };
    let log2 = match log.try_clone() {
        Ok(f) => f,
        Err(e) => return Outcome::failed(format!("cannot open {LOG}: {e}")),
    };
    let mut env: Vec<(&str, OsString)> = pass.env.iter().map(|(k, v)| (*k, v.clone())).collect();
    env.push(("TENSIGHT_HARDWARE", "1".into()));
    env.push(("TENSIGHT_HARDWARE_STEP", step.to_string().into()));
    let repeats = if pass.ask.every_launch {
        "profile"
    } else {
        "skip"
    };
    env.push(("TENSIGHT_HARDWARE_REPEATS", repeats.into()));
    if let Some(at) = first_run_loop(pass.bundle) {
        env.push(("TENSIGHT_HARDWARE_LOOP", at.into()));
    }
    let mut cmd = Command::new(ncu);
    cmd.args(ncu_args(&csv, pass.ask.every_launch))
        .arg("--")
        .args(target_command(&env, pass.command))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .envs(env.iter().map(|(k, v)| (k, v)));
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    if tty {
        eprintln!(
            "tensight: hardware pass: running the program again under {} for step {} (output in {})",
            ncu.display(),
            step,
            pass.bundle.join(LOG).display()
        );
    }
    let ticker = tty.then(Ticker::start);
    let status = cmd.status();
    drop(ticker);
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            return Outcome {
                version,
                ..Outcome::failed(format!("cannot start {}: {e}", ncu.display()))
            }
        }
    };
    let failed = |reason: String| Outcome {
        version: version.clone(),
        ..Outcome::failed(reason)
    };
    let log_text = std::fs::read_to_string(pass.bundle.join(LOG)).unwrap_or_default();
    let csv_text = std::fs::read_to_string(&csv).unwrap_or_default();
    if let Some(why) = ncu_error(&log_text).or_else(|| ncu_error(&csv_text)) {
        return failed(why);
    }
    let range = range_note(&mark, step);
    let _ = std::fs::remove_file(&mark);
    let marks = match range {
        Ok(m) => m,
        Err(why) => return failed(why),
    };
    if !status.success() {
        let how = status
            .code()
            .map_or("was killed by a signal".to_string(), |c| {
                format!("exited with code {c}")
            });
        return failed(format!("ncu {how} (see {LOG} in the bundle)"));
    }
    let hw = match tensight::read::ncu::read_file(&csv) {
        Ok(h) => h,
        Err(e) => {
            return failed(format!(
                "{} (ncu wrote no usable CSV; see {LOG})",
                e.message
            ))
        }
    };
    if hw.kernels.is_empty() {
        return failed(format!(
            "ncu profiled no kernels in step {step} (see {LOG})"
        ));
    }
    if let Err(e) = gzip(&csv, &pass.bundle.join(&contract().files.ncu)) {
        return failed(format!("cannot compress {CSV}: {e}"));
    }
    Outcome {
        status: "recorded",
        reason: None,
        kernels: Some(hw.kernels.len()),
        signatures: Some(hw.signatures),
        version,
        marks,
    }
}

/// While ncu runs (minutes for a large step, silent: the program's output goes to
/// ncu.log), one stderr line that counts the seconds; erased when dropped.
struct Ticker {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start() -> Self {
        use std::sync::atomic::Ordering;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut shown = u64::MAX;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let secs = t0.elapsed().as_secs();
                if secs != shown {
                    shown = secs;
                    eprint!(
                        "\r\x1b[2Ktensight: hardware pass: {}:{:02} (ncu takes about 0.4 s per kernel it profiles on an H200)",
                        secs / 60,
                        secs % 60
                    );
                }
            }
            eprint!("\r\x1b[2K");
        });
        Ticker {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `ncu --version`'s last line (`Version 2025.1.0.0 (build ...)`).
fn ncu_version(ncu: &Path) -> Option<String> {
    let out = Command::new(ncu)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// The first `==ERROR==` line of ncu, with a hint for the usual one.
fn ncu_error(text: &str) -> Option<String> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("==ERROR=="))?;
    let msg = line.trim_start_matches("==ERROR==").trim();
    if text.contains("ERR_NVGPUCTRPERM") {
        return Some(format!(
            "{msg} (no permission for GPU performance counters: run as root, or set the \
             NVreg_RestrictProfilingToAdminUsers=0 driver option; see \
             https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
        ));
    }
    Some(format!("ncu: {msg} (see {LOG} in the bundle)"))
}

/// What the collector wrote about the range: its counts when step K's range closed.
fn range_note(mark: &Path, step: u64) -> Result<Marks, String> {
    let Ok(bytes) = std::fs::read(mark) else {
        return Err(format!(
            "the collector did not run under ncu (no {}): was the program a Python program that imports torch?",
            contract().files.ncu_range
        ));
    };
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("unreadable range note: {e}"))?;
    if v.get("range").and_then(|r| r.as_str()) == Some("closed") {
        return Ok(Marks {
            op_calls: v.get("op_calls").and_then(|x| x.as_u64()),
            op_repeats: v.get("op_repeats").and_then(|x| x.as_u64()),
            note: v
                .get("repeats_note")
                .and_then(|x| x.as_str())
                .map(str::to_string),
        });
    }
    let seen = v.get("steps_seen").and_then(|s| s.as_u64()).unwrap_or(0);
    let mode = v.get("detection").and_then(|s| s.as_str()).unwrap_or("no");
    Err(format!(
        "the program ended after {seen} {mode} steps, before step {step} ended: choose an earlier --hardware-step"
    ))
}

fn gzip(src: &Path, dst: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dst.with_extension("gz.tmp");
    let data = std::fs::read(src)?;
    let mut enc =
        flate2::write::GzEncoder::new(std::fs::File::create(&tmp)?, flate2::Compression::new(6));
    enc.write_all(&data)?;
    enc.finish()?.sync_all()?;
    std::fs::rename(&tmp, dst)?;
    std::fs::remove_file(src)
}

/// The loop whose iterations were the first run's steps, as `FILE:LINE`.
fn first_run_loop(bundle: &Path) -> Option<String> {
    let bytes = std::fs::read(bundle.join(tensight::read::bundle::MANIFEST)).ok()?;
    let m: tensight::read::bundle::manifest::Manifest = serde_json::from_slice(&bytes).ok()?;
    let l = m
        .step_loop
        .filter(|_| m.step_detection.as_deref() == Some("loop"))?;
    Some(format!("{}:{}", l.file?, l.line?))
}

fn update_manifest(pass: &Pass, o: &Outcome, wall: f64) -> Result<(), String> {
    let recorded = o.status == "recorded";
    let step = pass.step();
    crate::update_manifest(pass.bundle, |m| {
        m.hardware = Some(Hardware {
            status: o.status.to_string(),
            reason: o.reason.clone(),
            step: Some(step),
            kernels: o.kernels.map(|k| k as u64),
            signatures: o.signatures.map(|k| k as u64),
            launches: Some(
                if pass.ask.every_launch || o.marks.op_repeats.is_none() {
                    "every"
                } else {
                    "repeated op calls skipped"
                }
                .to_string(),
            ),
            op_calls: o.marks.op_calls,
            op_repeats: o.marks.op_repeats,
            ncu_version: o.version.clone(),
            wall_s: Some((wall * 10.0).round() / 10.0),
        });
        m.files.ncu = recorded.then(|| contract().files.ncu.clone());
        if let Some(opts) = m.options.as_object_mut() {
            opts.insert("hardware".into(), recorded.into());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::METRICS;

    #[test]
    fn collects_every_metric_the_engine_reads_for_warp_stalls() {
        for (key, _) in tensight::model::hardware::STALL_REASONS {
            let m = tensight::model::hardware::stall_metric(key);
            assert!(METRICS.contains(&m.as_str()), "{m} is not collected");
        }
        let mut sorted = METRICS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), METRICS.len(), "a metric is listed twice");
    }
}
