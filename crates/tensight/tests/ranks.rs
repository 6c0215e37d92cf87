//! Many ranks of one job, on real data first: the real 2-rank NCCL trace (rank 0 of
//! HTA's test run) and rank sets made by perturbing copies of it (a straggler that
//! pauses before its last all-reduce, the others waiting for it), a synthetic 64-rank
//! job, summaries merged, multi-rank bundles and bad input.

use std::io::Read;
use std::path::{Path, PathBuf};
use tensight::read::ranks::{discover, RankSet};
use tensight::report::{json, terminal, RanksReport, RenderOptions};

const NCCL: &str = "real/nccl_parser_config-nccl_data.json.gz";

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn plain(rel: &str) -> Vec<u8> {
    let raw = std::fs::read(fixture(rel)).expect("fixture");
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&raw[..])
        .read_to_end(&mut out)
        .expect("gunzip");
    out
}

/// `traces` written as rank-N.json into a new folder.
fn folder(traces: &[Vec<u8>]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (r, t) in traces.iter().enumerate() {
        std::fs::write(dir.path().join(format!("rank-{r}.json")), t).expect("write");
    }
    dir
}

fn set_of(dir: &Path) -> RankSet {
    discover(dir)
        .expect("discover")
        .expect("a multi-rank folder")
}

fn analyze(dir: &Path) -> RanksReport {
    tensight::analyze_ranks(&set_of(dir), "ranks").expect("analyze ranks")
}

fn codes(r: &RanksReport) -> Vec<&'static str> {
    r.diagnosis.findings.iter().map(|f| f.code).collect()
}

/// The real rank, four times: rank 2 pauses 20 ms per step before its last all-reduce.
fn four_ranks() -> Vec<Vec<u8>> {
    tensight::rank_sets::perturbed(&plain(NCCL), 4, 2, 20_000.0).expect("perturbed")
}

#[test]
fn real_nccl_kernels_are_named_with_their_collective() {
    let r = tensight::analyze_path(&fixture(NCCL)).expect("analyze");
    let comm: Vec<_> = r
        .profile
        .gpu
        .iter()
        .filter(|g| g.name.starts_with("ncclKernel"))
        .collect();
    assert_eq!(comm.len(), 21);
    for g in &comm {
        let c = g
            .collective
            .as_deref()
            .expect("collective args on the kernel");
        assert!(c.name == "allreduce" || c.name == "broadcast", "{}", c.name);
        if c.name == "allreduce" {
            assert_eq!(c.dtype.as_deref(), Some("Float"));
        }
        assert_eq!(c.group.as_deref(), Some("0"));
        assert_eq!(c.group_size, Some(2));
        assert!(c.in_nelems.is_some_and(|n| n > 0));
    }
    let big = comm
        .iter()
        .filter_map(|g| g.collective.as_deref())
        .find(|c| c.in_nelems == Some(6_637_568))
        .expect("the 6.6 M element all-reduce");
    assert_eq!(big.bytes(), Some(6_637_568 * 4));
}

#[test]
fn the_real_two_rank_job_reports_exposed_communication_and_skew() {
    let traces = tensight::rank_sets::perturbed(&plain(NCCL), 2, 1, 15_000.0).expect("perturbed");
    let dir = folder(&traces);
    let r = analyze(dir.path());
    let a = &r.analysis;
    assert_eq!((a.ranks.len(), a.world_size, a.steps), (2, 2, 3));
    assert_eq!(a.slowest_rank, 1);
    // Rank 0 waits the 15 ms in each step's last all-reduce; rank 1 does not.
    assert!(
        (a.ranks[0].wait_ms - 15.0).abs() < 0.5,
        "{}",
        a.ranks[0].wait_ms
    );
    assert!(a.ranks[1].wait_ms < 0.5, "{}", a.ranks[1].wait_ms);
    // The real trace's all-reduces run mostly after the backward kernels: exposed.
    assert!(
        a.ranks[1].exposed_comm_ms > 5.0,
        "{}",
        a.ranks[1].exposed_comm_ms
    );
    assert!(a.collectives.matched >= 21);
    let c = codes(&r);
    assert!(c.contains(&"P001") && c.contains(&"P003"), "{c:?}");
}

#[test]
fn the_straggler_is_named_with_its_cause_and_the_saving_is_its_gap() {
    let dir = folder(&four_ranks());
    let r = analyze(dir.path());
    let p001 = r
        .diagnosis
        .findings
        .iter()
        .find(|f| f.code == "P001")
        .expect("P001");
    assert!(p001.title.contains("Rank 2"), "{}", p001.title);
    assert!(
        p001.message.contains("host time between launches"),
        "{}",
        p001.message
    );
    assert!((p001.saving_ms - 20.0).abs() < 1.0, "{}", p001.saving_ms);
    assert_eq!(r.focus_rank, 2);
    assert!(r.focus().is_some());
    assert_eq!(r.analysis.slowest_excess[0].part, "host_gaps");
    // The fast ranks' waiting is the straggler's gap: 3 × 20 ms per step.
    assert!((r.analysis.collectives.wait_ms - 60.0).abs() < 1.0);
}

#[test]
fn merged_summaries_give_the_same_cross_rank_findings() {
    let dir = folder(&four_ranks());
    let direct = analyze(dir.path());
    let summaries: Vec<_> = (0..4)
        .map(|r| {
            let rep =
                tensight::analyze_path(&dir.path().join(format!("rank-{r}.json"))).expect("rank");
            let bytes =
                tensight::summary::to_bytes(&tensight::rank_summary(&rep, r)).expect("summary");
            tensight::summary::from_bytes("s", &bytes).expect("read back")
        })
        .collect();
    let merged = tensight::merge(summaries, None, "ranks").expect("merge");
    assert_eq!(merged.analysis, direct.analysis);
    let findings = |r: &RanksReport| serde_json::to_value(&r.diagnosis.findings).expect("json");
    assert_eq!(findings(&merged), findings(&direct));
    assert!(!merged.diagnosis.findings.is_empty());
    let v = json::ranks_to_value(&merged);
    assert_eq!(v["schema_version"], json::SCHEMA_VERSION);
    assert_eq!(v["ranks"]["slowest_rank"], 2);
}

#[test]
fn balanced_ranks_have_no_straggler_wait_or_imbalance() {
    let dir = folder(&tensight::rank_sets::synthetic(4, 3, 0, 0.0));
    let r = analyze(dir.path());
    let c = codes(&r);
    for quiet in ["P001", "P002", "P004"] {
        assert!(
            !c.contains(&quiet),
            "{quiet} fired on balanced ranks: {c:?}"
        );
    }
    // Their all-reduce runs after the compute: exposed, and said so.
    assert!(c.contains(&"P003"), "{c:?}");
    assert!(r.analysis.collectives.wait_ms.abs() < 1e-9);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn uneven_compute_is_named_with_the_busiest_rank() {
    let dir = folder(&tensight::rank_sets::imbalanced(4, 3, 3, 2_400.0));
    let r = analyze(dir.path());
    let p004 = r.diagnosis.findings.iter().find(|f| f.code == "P004");
    let p004 = p004.unwrap_or_else(|| panic!("no P004: {:?}", codes(&r)));
    assert!(p004.title.contains("rank 3"), "{}", p004.title);
    // Balanced, every rank computes the mean: 2.4 ms × 3/4 less on the slowest rank.
    assert!((p004.saving_ms - 1.8).abs() < 0.1, "{}", p004.saving_ms);
    assert_eq!(r.analysis.slowest_excess[0].part, "compute");
    // P001 names the same rank for the same time: the smaller one's marginal says so.
    let p001 = r
        .diagnosis
        .findings
        .iter()
        .find(|f| f.code == "P001")
        .expect("P001");
    assert!(
        p001.message.contains("compute kernel time"),
        "{}",
        p001.message
    );
    assert!(
        p004.marginal_ms.is_some_and(|m| m < 0.1),
        "{:?}",
        p004.marginal_ms
    );
}

#[test]
fn the_merged_json_snapshot() {
    let summaries: Vec<_> = tensight::rank_sets::synthetic(4, 3, 1, 3_000.0)
        .iter()
        .enumerate()
        .map(|(r, t)| {
            let name = format!("rank-{r}.json");
            let rep = tensight::analyze_bytes(&name, t).expect("rank");
            tensight::rank_summary(&rep, r as u32)
        })
        .collect();
    let merged = tensight::merge(summaries, None, "four synthetic ranks").expect("merge");
    insta::assert_json_snapshot!(json::ranks_to_value(&merged));
}

#[test]
fn a_summary_pyarrow_rewrote_is_read() {
    // Six row groups, pages of a few values, statistics, pyarrow's own metadata.
    let theirs =
        tensight::summary::read_file(&fixture("summaries/pyarrow-rank2-row-groups.parquet"))
            .expect("pyarrow's file");
    assert_eq!((theirs.rank, theirs.world_size), (2, Some(4)));
    assert_eq!((theirs.steps.len(), theirs.collectives.len()), (3, 21));
    assert_eq!(theirs.source, "rank-2.json");
    let c = &theirs.collectives[2];
    assert_eq!(
        (c.step, c.seq, c.name.as_str(), c.group.as_str()),
        (0, 2, "allreduce", "0")
    );
    assert!(c.bytes.is_some_and(|b| b > 1 << 20));
    assert!(!theirs.top_causes.is_empty());
    // A summary of version 1.0: the columns of 1.1 are read as null.
    assert!(theirs
        .collectives
        .iter()
        .all(|c| c.start_ns.is_none() && !c.host));
    assert!(theirs.steps.iter().all(|s| s.idle_comm_ns == 0));
    let again = tensight::summary::to_parquet(&theirs);
    assert_eq!(
        tensight::summary::from_parquet("ours", &again).expect("ours"),
        theirs
    );
}

#[test]
fn a_synthetic_job_of_64_ranks() {
    let dir = folder(&tensight::rank_sets::synthetic(64, 3, 17, 2_000.0));
    let r = analyze(dir.path());
    assert_eq!(r.analysis.ranks.len(), 64);
    assert_eq!(r.analysis.world_size, 64);
    assert_eq!(r.analysis.slowest_rank, 17);
    let p001 = r.diagnosis.findings.iter().find(|f| f.code == "P001");
    assert!(
        p001.is_some_and(|f| (f.saving_ms - 2.0).abs() < 0.1),
        "{:?}",
        codes(&r)
    );
    let text = terminal::render_ranks(
        &r,
        RenderOptions {
            color: false,
            width: 80,
        },
    );
    assert!(text.contains("48 more ranks"), "{text}");
}

#[test]
fn the_ranks_report_snapshot() {
    let dir = folder(&four_ranks());
    let r = tensight::analyze_ranks(&set_of(dir.path()), "four-ranks/").expect("analyze");
    let text = terminal::render_ranks(
        &r,
        RenderOptions {
            color: false,
            width: 80,
        },
    );
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "a wide line: {line}");
    }
    insta::assert_snapshot!(text);
}

#[test]
fn the_html_report_has_an_escaped_ranks_section() {
    let mut traces = tensight::rank_sets::synthetic(2, 2, 1, 2_000.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let nasty = dir.path().join("<b>rank-0.json");
    std::fs::write(&nasty, traces.remove(0)).expect("write");
    std::fs::write(dir.path().join("rank-1.json"), traces.remove(0)).expect("write");
    let r = analyze(dir.path());
    let html = tensight::report::html::render_ranks(&r);
    assert!(html.contains("<section id=\"ranks\">"));
    assert!(html.contains("Cross-rank findings"));
    assert!(html.contains("&lt;b&gt;rank-0.json"));
    assert!(!html.contains("<b>rank-0"));
    assert!(!html.contains(" src=\"http") && !html.contains("<link"));
}

#[test]
fn an_unreadable_rank_is_left_out_with_a_warning() {
    let mut traces = four_ranks();
    traces[3] = b"{\"traceEvents\": [".to_vec();
    let dir = folder(&traces);
    let r = analyze(dir.path());
    assert_eq!(r.analysis.ranks.len(), 3);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("rank-3.json left out")),
        "{:?}",
        r.warnings
    );
    assert!(r
        .warnings
        .iter()
        .any(|w| w.contains("world size 4 but 3 ranks")));
}

#[test]
fn duplicate_ranks_are_an_error_naming_both_files() {
    let t = four_ranks();
    let dir = folder(&[t[1].clone(), t[1].clone()]);
    let Err(e) = tensight::analyze_ranks(&set_of(dir.path()), "dup") else {
        panic!("duplicate ranks were read");
    };
    assert!(e.message.contains("rank 1 twice"), "{}", e.message);
    assert!(e.message.contains("rank-0.json") && e.message.contains("rank-1.json"));
}

#[test]
fn traces_without_a_rank_are_an_error_naming_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = tensight::testing::TraceBuilder::new();
    b.step(1, 0.0, 100.0);
    let op = b.op("aten::mm", 10.0, 50.0);
    b.kernel("gemm", op, 20.0, 30.0, 40.0, [1, 1, 1], [128, 1, 1]);
    let one = b.build();
    std::fs::write(dir.path().join("a.json"), &one).expect("write");
    std::fs::write(dir.path().join("b.json"), &one).expect("write");
    let Err(e) = tensight::analyze_ranks(&set_of(dir.path()), "two") else {
        panic!("traces without ranks were read");
    };
    assert!(e.message.contains("no rank for"), "{}", e.message);
    assert!(e.message.contains("a.json") && e.message.contains("b.json"));
    assert!(e.hint.is_some());
}

#[test]
fn a_mismatched_world_size_and_step_count_are_warned_about() {
    let mut traces = four_ranks();
    let mut v: serde_json::Value = serde_json::from_slice(&traces[1]).expect("json");
    v["distributedInfo"]["world_size"] = serde_json::json!(8);
    // Drop rank 1's last ProfilerStep: it has two steps, the others three.
    let events = v["traceEvents"].as_array_mut().expect("events");
    events.retain(|e| e["name"] != "ProfilerStep#6");
    traces[1] = serde_json::to_vec(&v).expect("json");
    let dir = folder(&traces);
    let r = analyze(dir.path());
    let w = r.warnings.join("\n");
    assert!(w.contains("disagree on the world size (4, 8)"), "{w}");
    assert!(w.contains("different step counts"), "{w}");
    assert_eq!(r.analysis.steps, 2);
}

#[test]
fn a_multi_rank_bundle_with_and_without_its_top_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture("bundles/h200-probe");
    for r in ["rank0", "rank1"] {
        let to = dir.path().join(r);
        std::fs::create_dir(&to).expect("mkdir");
        for e in std::fs::read_dir(&src).expect("read bundle").flatten() {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
    let set = set_of(dir.path());
    assert_eq!(
        set.inputs.iter().map(|i| i.rank).collect::<Vec<_>>(),
        [Some(0), Some(1)]
    );
    let r = tensight::analyze_ranks(&set, "bundle").expect("analyze");
    assert_eq!(r.analysis.ranks.len(), 2);
    std::fs::write(
        dir.path().join("manifest.json"),
        r#"{"format_version": "1.1", "world_size": 2,
            "ranks": [{"rank": 0, "dir": "rank1"}, {"rank": 1, "dir": "rank0"}]}"#,
    )
    .expect("write");
    let set = set_of(dir.path());
    assert_eq!(set.world_size, Some(2));
    assert_eq!(set.inputs[0].path, dir.path().join("rank1"));
    assert!(tensight::analyze_ranks(&set, "bundle").is_ok());
}

#[test]
fn a_single_trace_or_bundle_is_not_a_rank_set() {
    assert_eq!(discover(&fixture(NCCL)).expect("file"), None);
    assert_eq!(
        discover(&fixture("bundles/h200-probe")).expect("bundle"),
        None
    );
}

/// A real job recorded on the H200 by `bash scripts/h200/ranks.sh` (`tensight run --
/// torchrun --nproc-per-node 2 scripts/h200/ddp_one_gpu.py --straggler`): two DDP ranks on
/// one GPU, all-reducing through gloo, rank 1 doing ~20 ms of numpy work per step. Alone
/// the job ran 65.13 ms per step with the straggler and 47.31 ms without (17.82 ms).
/// Rank 1's own diagnosis names the host work with that saving; rank 0 has none. gloo
/// stages the all-reduce through host copies, not NCCL kernels, so no collective is
/// matched across the ranks: the cross-rank rules stay silent (a gap: host-side
/// collectives are not modelled yet).
#[test]
fn a_real_gloo_job_on_the_h200_names_the_stragglers_host_work() {
    let r = analyze(&fixture("h200-ddp-gloo"));
    assert_eq!(r.per_rank.len(), 2);
    let c004 = |i: usize| {
        r.per_rank[i]
            .diagnosis
            .findings
            .iter()
            .find(|f| f.code == "C004")
            .map(|f| f.saving_ms)
    };
    let measured = 65.13 - 47.31;
    let on_1 = c004(1).expect("rank 1's host work found");
    assert!(
        (on_1 - measured).abs() <= 0.35 * measured,
        "C004 {on_1} vs {measured}"
    );
    assert!(
        c004(0).is_none_or(|s| s < 0.2 * measured),
        "rank 0: {:?}",
        c004(0)
    );
}
