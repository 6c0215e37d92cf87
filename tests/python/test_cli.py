"""The installed `tensight` command: reports, exit codes, errors, output handling."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import (
    EXECUTION_TRACES, KINETO_TRACES, NCU_CSVS, PROBE_TRACE, REAL, TENSIGHT,
    analyze_json, assert_full_report, assert_no_crash, assert_primary_is_largest_saving,
    assert_user_error, run,
)

ANSI = "\x1b["


def _ids(paths: list[Path]) -> list[str]:
    return [p.name.split(".")[0][:48] for p in paths]


# --- demo, and every real trace ---------------------------------------------------------


def test_demo_prints_a_full_report() -> None:
    """The default demo: the ResNet-50 bundle recorded on the H200, then one line per
    other demo with its primary bottleneck."""
    r = run("demo")
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    assert "NVIDIA H200" in r.stdout and "ResNet-50" in r.stdout
    assert "OTHER DEMOS" in r.stdout and "C003" in r.stdout  # late migration's finding
    assert ANSI not in r.stdout  # stdout is a pipe here


def test_demo_json() -> None:
    r = run("demo", "--format", "json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["summary"]["steps"] == 4
    assert report["bundle"]["torch_version"] == "2.11.0+cu130"
    assert report["diagnosis"]["bottlenecks"]


@pytest.mark.parametrize("name", ["late-migration", "launch-bound", "fp32-gemm", "sync-in-loop", "probe",
                                  "transposed-view", "transposed-chain"])
def test_each_demo(name: str) -> None:
    r = run("demo", name)
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    assert "OTHER DEMOS" not in r.stdout


def test_probe_demo_names_the_item_sync() -> None:
    r = run("demo", "probe")
    assert "`.item()` syncs the host with the GPU" in r.stdout  # S001
    assert "C003 late-gpu-migration" in r.stdout and "aten::randn" in r.stdout


def test_tensor_demos_carry_the_forest_and_the_hardware_pass() -> None:
    # The execution trace and ncu CSV ship in the binary with these two bundles.
    r = run("demo", "transposed-view", "--format", "json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["execution_trace"]["linked"] > 0 and rep["tensors"]["modelled"] is False
    assert rep["hardware"]["kernels_with_counters"] == rep["hardware"]["trace_kernels"] > 0
    v = rep["diagnosis"]["primary_bottleneck"]
    assert v["code"] == "V001" and f"estimated {v['saving_ms'] * 1000:.1f} µs" in v["message"], v
    chain = run("demo", "transposed-chain")
    assert "V003 transposed-elementwise-chain" in chain.stdout and "measured sectors" in chain.stdout


def test_a_csv_from_another_run_is_said_to_match_poorly() -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
    r = run("analyze", str(fixtures / "h200-transposed-view-hw"), "--ncu",
            str(fixtures / "h200-resnet50-hardware-repeats" / "ncu.csv.gz"))
    assert r.returncode in (0, 1), r.stderr
    header = " ".join(r.stdout.split("EXECUTIVE SUMMARY")[0].split())
    assert "2 of 276 rows aligned with the trace" in header, header
    assert "Most rows match no kernel of this trace" in header, header
    # The bundle's own pass record (8 launches in 18 s) is not put on another CSV.
    assert "launches profiled" not in header, header


def test_unknown_demo() -> None:
    r = run("demo", "nope")
    assert r.returncode == 2
    assert r.stderr.startswith("error: invalid value 'nope'") and "transposed-chain" in r.stderr


def test_demo_help_lists_every_demo() -> None:
    listed = run("demo", "nope").stderr.split("[possible values: ")[1].split("]")[0].split(", ")
    helped = run("demo", "--help").stdout
    assert len(listed) == 8
    for name in listed:
        assert f"- {name}:" in helped, name


@pytest.mark.parametrize("trace", KINETO_TRACES, ids=_ids(KINETO_TRACES))
def test_analyze_real_trace_text(trace: Path) -> None:
    r = run("analyze", trace)
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    assert "warning:" not in r.stderr  # whole, well-formed traces


@pytest.mark.parametrize("trace", KINETO_TRACES, ids=_ids(KINETO_TRACES))
def test_analyze_real_trace_json(trace: Path) -> None:
    report = analyze_json(trace)
    assert report["schema_version"].split(".")[0] == "1"
    assert report["summary"]["steps"] >= 1
    assert report["summary"]["step_time_ms"] > 0
    assert isinstance(report["diagnosis"]["bottlenecks"], list)
    assert_primary_is_largest_saving(report["diagnosis"])


# --- other profiler output given alone ----------------------------------------------------


@pytest.mark.parametrize("path", EXECUTION_TRACES, ids=_ids(EXECUTION_TRACES))
def test_execution_trace_alone_is_explained(path: Path) -> None:
    r = run("analyze", path)
    assert_user_error(r, "execution trace")
    assert r.stderr.splitlines()[1].startswith("hint: pass the Kineto trace")


@pytest.mark.parametrize("path", NCU_CSVS, ids=_ids(NCU_CSVS))
def test_ncu_csv_alone_is_explained(path: Path) -> None:
    r = run("analyze", path)
    assert_user_error(r, "Nsight Compute CSV")
    hint = r.stderr.splitlines()[1]
    assert hint.startswith("hint: pass the Kineto trace")
    assert "tensight run" not in hint  # not built: don't send users to it


# --- bad inputs -------------------------------------------------------------------------

Maker = Callable[[Path], Path]


def _file(name: str, data: bytes) -> Maker:
    def make(tmp: Path) -> Path:
        p = tmp / name
        p.write_bytes(data)
        return p
    return make


def _gzip_prefix(n: int) -> Maker:
    def make(tmp: Path) -> Path:
        p = tmp / f"cut{n}.json.gz"
        p.write_bytes(PROBE_TRACE.read_bytes()[:n])
        return p
    return make


def _json_prefix(n: int) -> Maker:
    def make(tmp: Path) -> Path:
        p = tmp / f"cut{n}.json"
        p.write_bytes(gzip.decompress(PROBE_TRACE.read_bytes())[:n])
        return p
    return make


def _empty_dir(tmp: Path) -> Path:
    d = tmp / "logs"
    (d / "plugins").mkdir(parents=True)
    (d / "plugins" / "notes.txt").write_text("no trace here\n")
    return d


def _traces(*names: str) -> Maker:
    def make(tmp: Path) -> Path:
        d = tmp / "ranks"
        d.mkdir()
        for n in names:
            (d / n).write_bytes(PROBE_TRACE.read_bytes())
        return d
    return make


BAD_INPUTS: dict[str, tuple[Maker, tuple[str, ...]]] = {
    "empty": (_file("empty.json", b""), ("empty",)),
    "binary": (_file("trace.json", bytes(range(256)) * 4), ("not JSON",)),
    "text": (_file("trace.json", b"Epoch 1/10: loss=0.31\n"), ("not JSON",)),
    "object_not_trace": (_file("a.json", b'{"a": 1}'), ("not a trace", "a")),
    "array_of_numbers": (_file("arr.json", b"[1, 2]"), ("not a trace",)),
    "events_not_objects": (_file("ev.json", b'{"traceEvents": [1, "x", null]}'), ("not a trace",)),
    "empty_trace": (_file("none.json", b'{"traceEvents": []}'), ("no events",)),
    "nonexistent": (lambda tmp: tmp / "missing.json.gz", ("missing.json.gz", "no such file")),
    "dir_without_trace": (_empty_dir, ("no trace file",)),
    # Two traces are the ranks of one job (docs/distributed.md): each needs a rank.
    "dir_with_two_traces_without_ranks": (_traces("a.json.gz", "b.json.gz"),
                                          ("no rank for", "a.json.gz", "b.json.gz")),
    "dir_with_a_rank_twice": (_traces("rank0.json.gz", "trainer-rank-0.json.gz"),
                              ("rank 0 twice", "rank0.json.gz", "trainer-rank-0.json.gz")),
    "gzip_magic_only": (_gzip_prefix(2), ("cut2.json.gz",)),
    "gzip_header_only": (_gzip_prefix(10), ("cut10.json.gz",)),
    "gzip_cut_in_header_json": (_gzip_prefix(100), ("gzip stream ends early",)),
    "gzip_cut_before_events": (_gzip_prefix(500), ("ends early", "traceEvents")),
    "gzip_corrupt": (_file("bad.json.gz", b"\x1f\x8b\x08\x00" + b"garbage" * 8), ("bad.json.gz",)),
    "gzip_of_text": (_file("t.json.gz", gzip.compress(b"hello")), ("not JSON",)),
    "json_cut_before_events": (_json_prefix(400), ("ends early", "traceEvents")),
}


def test_a_folder_of_rank_traces_is_compared(tmp_path: Path) -> None:
    r = run("analyze", _traces("rank0.json.gz", "rank1.json.gz")(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "RANKS" in r.stdout and "2 read of world size 2" in r.stdout


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_is_one_clear_error(name: str, tmp_path: Path) -> None:
    make, needles = BAD_INPUTS[name]
    r = run("analyze", make(tmp_path), env={"RUST_BACKTRACE": "1"})
    assert_user_error(r, *needles)


# --- truncated traces ---------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True], ids=["json", "json.gz"])
def test_truncated_trace_is_read_with_a_warning(compress: bool, tmp_path: Path) -> None:
    raw = gzip.decompress(PROBE_TRACE.read_bytes())
    cut = raw[: len(raw) * 6 // 10]
    path = tmp_path / ("cut.json.gz" if compress else "cut.json")
    path.write_bytes(gzip.compress(cut) if compress else cut)
    r = run("analyze", path)
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    m = re.search(r"^warning: .*truncated at byte (\d+)", r.stderr, re.M)
    assert m, r.stderr
    assert len(cut) - 4096 < int(m.group(1)) <= len(cut)
    assert "error:" not in r.stderr


def test_cut_gzip_file_is_read_with_a_warning(tmp_path: Path) -> None:
    data = PROBE_TRACE.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) * 6 // 10])
    r = run("analyze", path)
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    assert re.search(r"^warning: the gzip stream ends early", r.stderr, re.M), r.stderr
    assert re.search(r"^warning: .*truncated at byte \d+", r.stderr, re.M), r.stderr


# --- -o FILE ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_output_file(fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"report.{fmt}"
    r = run("analyze", PROBE_TRACE, "--format", fmt, "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    text = out.read_text()
    if fmt == "json":
        assert json.loads(text)["summary"]["steps"] == 3
    else:
        assert_full_report(text)
        assert ANSI not in text


def test_output_refuses_to_overwrite_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json.gz"
    trace.write_bytes(PROBE_TRACE.read_bytes())
    for target in (trace, tmp_path / "." / "trace.json.gz"):
        r = run("analyze", trace, "-o", target)
        assert_user_error(r, "refusing")
    assert trace.read_bytes() == PROBE_TRACE.read_bytes()


def test_output_refuses_to_overwrite_the_trace_found_in_a_folder(tmp_path: Path) -> None:
    trace = tmp_path / "log" / "run1" / "worker0.pt.trace.json.gz"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(PROBE_TRACE.read_bytes())
    r = run("analyze", tmp_path / "log", "-o", trace)
    assert_user_error(r, "refusing")
    assert trace.read_bytes() == PROBE_TRACE.read_bytes()


# --- --fail-on ----------------------------------------------------------------------------

SEVERITIES = ["info", "low", "moderate", "severe", "critical"]
NO_FINDINGS_TRACE = REAL / "cpu_only-rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _worst(trace: Path) -> int:
    """Index in SEVERITIES of the worst finding (-1: none)."""
    found = [SEVERITIES.index(b["severity"]) for b in analyze_json(trace)["diagnosis"]["bottlenecks"]]
    return max(found, default=-1)


def test_fail_on_critical() -> None:
    critical = [t for t in KINETO_TRACES if _worst(t) == SEVERITIES.index("critical")]
    assert critical, "no fixture has a critical finding: pick another way to test exit 1"
    r = run("analyze", critical[0], "--fail-on", "critical")
    assert_no_crash(r)
    assert r.returncode == 1, r.stderr
    assert_full_report(r.stdout)  # the report is still printed
    assert "error:" not in r.stderr
    assert run("analyze", critical[0]).returncode == 0  # no --fail-on: 0
    assert _worst(NO_FINDINGS_TRACE) == -1
    assert run("analyze", NO_FINDINGS_TRACE, "--fail-on", "info").returncode == 0


@pytest.mark.parametrize("level", SEVERITIES)
@pytest.mark.parametrize("trace", [PROBE_TRACE, NO_FINDINGS_TRACE], ids=["probe", "cpu_only"])
def test_fail_on_threshold(level: str, trace: Path) -> None:
    """Exit 1 exactly when a finding is at least `level`."""
    r = run("analyze", trace, "--format", "json", "--fail-on", level)
    assert r.returncode == (1 if _worst(trace) >= SEVERITIES.index(level) else 0), r.stderr
    json.loads(r.stdout)


def test_fail_on_bad_value() -> None:
    r = run("analyze", PROBE_TRACE, "--fail-on", "fatal")
    assert_no_crash(r)
    assert r.returncode == 2
    assert r.stdout == ""
    assert "fatal" in r.stderr


# --- colour and pipes ---------------------------------------------------------------------


def test_no_ansi_when_piped_or_no_color() -> None:
    assert ANSI not in run("analyze", PROBE_TRACE).stdout
    assert ANSI not in run("analyze", PROBE_TRACE, env={"NO_COLOR": "1"}).stdout
    assert ANSI in run("analyze", PROBE_TRACE, "--color", "always").stdout


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
@pytest.mark.parametrize("no_color", [False, True])
def test_terminal_colour_follows_no_color(no_color: bool) -> None:
    import pty

    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm"
    if no_color:
        env["NO_COLOR"] = "1"
    master, slave = pty.openpty()
    p = subprocess.Popen([TENSIGHT, "demo"], stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=60) == 0
    assert b"EXECUTIVE SUMMARY" in out
    assert (ANSI.encode() in out) is not no_color


def test_broken_pipe_exits_0_quietly() -> None:
    r = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'"{TENSIGHT}" analyze "{PROBE_TRACE}" | head -1'],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1
    assert r.stderr == ""


@pytest.mark.parametrize("args", [["analyze", str(PROBE_TRACE)], ["demo", "--format", "json"], ["rules"]])
def test_closed_stdout_exits_0_quietly(args: list[str]) -> None:
    """The reader is gone before the first write: every write fails with EPIPE."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        p = subprocess.run([TENSIGHT, *args], stdout=wr, stderr=subprocess.PIPE,
                           text=True, timeout=60, check=False)
    finally:
        os.close(wr)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""


# --- rules, help, version -----------------------------------------------------------------

DOC_SECTIONS = ("What it detects", "Why it costs time", "Example", "Fix", "Thresholds", "References")


def test_rules_lists_rules() -> None:
    r = run("rules")
    assert r.returncode == 0, r.stderr
    codes = re.findall(r"^([A-Z]\d{3}) +(\S+)", r.stdout, re.M)
    assert ("S001", "host-sync-in-step") in codes
    assert len(codes) >= 10
    assert len({c for c, _ in codes}) == len(codes)


def test_rules_json() -> None:
    r = run("rules", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert any(m["code"] == "S001" for m in json.loads(r.stdout))


@pytest.mark.parametrize("key", ["S001", "host-sync-in-step"])
def test_rule_documentation(key: str) -> None:
    r = run("rules", key)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# S001 host-sync-in-step")
    for s in DOC_SECTIONS:
        assert re.search(rf"^## {s}\s*$", r.stdout, re.M), f"section {s!r} missing"


def test_unknown_rule() -> None:
    assert_user_error(run("rules", "X999"), "unknown rule X999")


@pytest.mark.parametrize("args", [["--help"], ["analyze", "--help"], ["help"], ["rules", "--help"]])
def test_help(args: list[str]) -> None:
    r = run(*args)
    assert r.returncode == 0, r.stderr
    assert "Usage: tensight" in r.stdout


def test_no_command_is_a_usage_error() -> None:
    r = run()
    assert_no_crash(r)
    assert r.returncode == 2
    assert "Usage: tensight" in r.stderr


def test_unknown_option_is_a_usage_error() -> None:
    r = run("analyze", PROBE_TRACE, "--frobnicate")
    assert_no_crash(r)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ")


def test_version() -> None:
    import tensight

    r = run("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"tensight {tensight.__version__}"


def test_phases_are_timed_on_request_only() -> None:
    """TENSIGHT_PHASES=1 (what bench/ splits runs with) prints the wall time of reading,
    the analyses, each rule and rendering to stderr; the report is the same."""
    cmd = [TENSIGHT, "analyze", str(PROBE_TRACE), "--format", "json"]
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    timed = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "TENSIGHT_PHASES": "1"})
    assert plain.returncode == timed.returncode == 0, timed.stderr
    assert "phase " not in plain.stderr
    assert plain.stdout == timed.stdout
    names = {m.group(1) for m in re.finditer(r"^phase (.+): [\d.]+ ms$", timed.stderr, re.M)}
    assert {"read", "analyses", "diagnosis", "after the rules", "render and write",
            "rule S001"} <= names, timed.stderr
