"""tensight's accuracy harness over the hold-out set (not one of its programs).

Two halves, as ``workloads/harness.py``:

* **record** (on the GPU machine, repo root, tensight installed): for each program, its
  own steady-state time per iteration (``HOLDOUT_RESULT``) unfixed, ``--fixed`` and, for
  programs with two problems, with each ``--fix NAME`` alone; then two recordings with
  ``tensight run`` (``run1``, ``run2``: is the primary the same?) and one plain
  ``torch.profiler`` trace with its execution trace (``plain.json.gz``, ``plain_et.json``),
  as a user would record it. Writes ``OUT/timings.json`` after every program (a cut-short
  call keeps what it measured; ``--skip-done`` goes on from there).
* **table** (anywhere): ``tensight analyze`` on every recording with the engine installed
  now, against ``EXPECTED.json`` (fixed before the first recording): the primary finding,
  whether it names a planted problem, each problem's estimated saving against its
  measured one (unfixed minus that fix alone), the all-fixes estimate against unfixed
  minus ``--fixed``. Writes ``results-TAG.json`` and prints a Markdown table; TAG names
  the engine (``before``: the rules as they were when the set was recorded).

    python3 holdout/harness.py --out /tmp/h                  # record + table (GPU)
    python3 holdout/harness.py --out /tmp/h --only kv_decode  # some programs
    python3 holdout/harness.py --from tests/fixtures/holdout --tag after
    python3 holdout/harness.py --set holdout_b --out /tmp/hb   # another set (GPU)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "workloads"))
from harness import diagnose, fmt, gpu_context, log  # noqa: E402

#: The set's folder (its programs and EXPECTED.json): this one, or another (`--set`).
SET = HERE


def expected(folder: Path) -> dict[str, Any]:
    """A set's expectations, by program (keys starting with `_` are its notes)."""
    doc = json.loads((folder / "EXPECTED.json").read_text())
    return {k: v for k, v in doc.items() if not k.startswith("_")}


EXPECTED: dict[str, Any] = expected(HERE)
RECORD = ["--steps", "4", "--warmup", "5", "--stop"]
ITERS = 30
TIMEOUT_S = 300


def own_ms(name: str, fixes: list[str]) -> float | None:
    """The program's own steady-state ms per iteration with `fixes` (["all"]: --fixed)."""
    args = ["--fixed"] if fixes == ["all"] else [a for f in fixes for a in ("--fix", f)]
    cmd = [sys.executable, str(SET / f"{name}.py"), "--iters", str(ITERS), *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"{name} {fixes}: timed out")
        return None
    for line in reversed(r.stderr.splitlines()):
        if line.startswith("HOLDOUT_RESULT "):
            return float(json.loads(line.split(" ", 1)[1])["iter_ms"])
    log(f"{name} {fixes} failed:\n{r.stderr[-1500:]}")
    return None


def own_times(name: str) -> dict[str, Any]:
    """The program's own times: unfixed, `--fixed` and each `--fix NAME` alone."""
    problems = EXPECTED[name] or {}
    fixes = [f for f in problems if f != "all"]
    rec: dict[str, Any] = {"unfixed_ms": own_ms(name, []), "fixed_ms": own_ms(name, ["all"])}
    rec["fix_ms"] = {f: own_ms(name, [f]) for f in fixes}
    return rec


def record_one(name: str, out: Path, runs: list[str], timed: dict[str, Any] | None) -> dict[str, Any]:
    """Time `name` (or keep the `timed` figures of an earlier call) and record it."""
    t0 = time.monotonic()
    rec: dict[str, Any] = own_times(name) if timed is None else {
        k: timed[k] for k in ("unfixed_ms", "fixed_ms", "fix_ms") if k in timed}
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    for run in runs:
        cmd = [sys.executable, "-m", "tensight", "run", *RECORD, "--out", str(d / run), "--",
               sys.executable, str(SET / f"{name}.py"), "--iters", str(ITERS)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
            rec[f"{run}_exit"] = r.returncode
            if r.returncode not in (0, 1):
                log(f"tensight run {name} ({run}) exited {r.returncode}:\n{r.stderr[-1500:]}")
        except subprocess.TimeoutExpired:
            rec[f"{run}_exit"] = None
    cmd = [sys.executable, str(SET / f"{name}.py"), "--iters", "20", "--trace",
           str(d / "plain.json.gz"), "--trace-iters", "3", "--et", str(d / "plain_et.json")]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        rec["plain_exit"] = r.returncode
    except subprocess.TimeoutExpired:
        rec["plain_exit"] = None
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    return rec


def record(names: list[str], out: Path, skip_done: bool, runs: list[str],
           keep: Path | None = None) -> None:
    """Record `names` into `out`; with `keep` (an earlier timings.json), its programs'
    own times are kept and only the recordings are made again (lost recordings)."""
    out.mkdir(parents=True, exist_ok=True)
    kept = json.loads(keep.read_text()).get("programs", {}) if keep else {}
    path = out / "timings.json"
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    doc["context"] = gpu_context() | {"iters": ITERS, "record": RECORD}
    doc.setdefault("programs", {})
    for n in names:
        if skip_done and n in doc["programs"]:
            continue
        what = "kept times" if n in kept else "timing"
        log(f"{n}: {what}, {len(runs)} tensight run(s), a plain trace")
        doc["programs"][n] = record_one(n, out, runs, kept.get(n))
        path.write_text(json.dumps(doc, indent=2) + "\n")
        log(f"{n}: {doc['programs'][n]}")


def _analyze_plain(d: Path) -> dict[str, Any] | None:
    trace = d / "plain.json.gz"
    if not trace.exists():
        return None
    cmd = [sys.executable, "-m", "tensight", "analyze", str(trace), "--format", "json"]
    et = next((d / n for n in ("plain_et.json.gz", "plain_et.json") if (d / n).exists()), None)
    if et is not None:
        cmd += ["--et", str(et)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode in (0, 1) else None


def judge(name: str, rec: dict[str, Any], report: dict[str, Any] | None) -> dict[str, Any]:
    """One recording of one program against its expectation."""
    problems = EXPECTED[name]
    out: dict[str, Any] = {"program": name}
    if report is None:
        return out | {"primary": None, "ok": False}
    findings = report["diagnosis"]["bottlenecks"]
    primary = report["diagnosis"]["primary_bottleneck"]
    out["primary"] = primary["code"] if primary else None
    out["severe"] = [f["code"] for f in findings if f["severity"] in ("critical", "severe")]
    if problems is None:  # the control
        return out | {"ok": not out["severe"]}
    unfixed, fixed = rec.get("unfixed_ms"), rec.get("fixed_ms")
    per = []
    for fix, codes in problems.items():
        alone = fixed if fix == "all" else (rec.get("fix_ms") or {}).get(fix)
        measured = None if unfixed is None or alone is None else unfixed - alone
        hit = next((f for f in findings if f["code"] in codes), None)
        est = hit["saving_ms"] if hit else None
        per.append({"fix": fix, "codes": codes, "measured_ms": measured, "estimated_ms": est,
                    "within_35pct": bool(est is not None and measured
                                         and abs(est - measured) <= 0.35 * abs(measured))})
    out["problems"] = per
    named = [p for p in per if out["primary"] in p["codes"]]
    out["ok"] = bool(named)
    biggest = max(per, key=lambda p: p["measured_ms"] or 0)
    out["primary_is_largest"] = out["primary"] in biggest["codes"]
    if len(per) > 1:
        allfix = report["diagnosis"].get("all_fixes_ms")
        meas = None if unfixed is None or fixed is None else unfixed - fixed
        out["all_fixes"] = {"estimated_ms": allfix, "measured_ms": meas}
    return out


def recorded_report(bundle: Path) -> dict[str, Any] | None:
    """`bundle` analysed again when every file its manifest names is there, else the
    report `tensight run` wrote into it when it was recorded (the engine of the wheel
    then): the way to score a bundle whose big files did not come back whole."""
    files = json.loads((bundle / "manifest.json").read_text()).get("files") or {}
    if all((bundle / f).is_file() for f in files.values() if f):
        return diagnose(bundle)
    path = bundle / "report.json"
    if not path.is_file():
        log(f"{bundle}: no report.json written at recording")
        return None
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def table(src: Path, tag: str, dest: Path, recorded: bool = False) -> dict[str, Any]:
    """Score every recorded program; `recorded`: a bundle missing files is scored by the
    report written at recording instead (plain traces are analysed either way)."""
    doc = json.loads((src / "timings.json").read_text())
    analyse = recorded_report if recorded else diagnose
    rows = []
    for name, rec in doc["programs"].items():
        if name not in EXPECTED:
            continue
        d = src / name
        runs = {run: judge(name, rec, analyse(d / run) if (d / run).is_dir() else None)
                for run in ("run1", "run2")}
        runs["plain"] = judge(name, rec, _analyze_plain(d))
        # Same primary in both recordings; None where only one was made.
        stable = (runs["run1"].get("primary") == runs["run2"].get("primary")
                  if (d / "run2").is_dir() else None)
        rows.append({"program": name, "expected": EXPECTED[name], **runs, "stable": stable})
    planted = [r for r in rows if r["expected"] is not None]
    summary = {
        "programs": len(rows), "planted": len(planted),
        **{f"primary_ok_{k}": sum(bool(r[k].get("ok")) for r in planted) for k in ("run1", "plain")},
        **{f"estimate_ok_{k}": sum(all(p["within_35pct"] for p in r[k].get("problems", [])) and
                                   bool(r[k].get("problems")) for r in planted)
           for k in ("run1", "plain")},
        "stable": sum(bool(r["stable"]) for r in rows),
        "recorded_twice": sum(r["stable"] is not None for r in rows),
        "controls_clean": sum(bool(r["run1"].get("ok")) for r in rows if r["expected"] is None),
        # Programs whose plain trace was there to score (none when only the committed
        # `tensight run` recordings are re-scored).
        "plain_recorded": sum((src / r["program"] / "plain.json.gz").exists() for r in rows),
    }
    res = {"tag": tag, "context": doc.get("context"), "summary": summary, "rows": rows,
           "scored_from": ("incomplete bundles: reports written at recording" if recorded
                           else "analysed again")}
    (dest / f"results-{tag}.json").write_text(json.dumps(res, indent=2) + "\n")
    return res


def markdown(res: dict[str, Any]) -> str:
    s = res["summary"]
    lines = [f"Engine `{res['tag']}`: primary names a planted problem **{s['primary_ok_run1']}/"
             f"{s['planted']}** (`tensight run`), **{s['primary_ok_plain']}/{s['planted']}** "
             f"(plain trace + ET); every estimate within ±35%: {s['estimate_ok_run1']} / "
             f"{s['estimate_ok_plain']}; same primary in two recordings {s['stable']}/"
             f"{s['recorded_twice']}; controls clean {s['controls_clean']}.", "",
             "| program | primary (run 1, run 2, plain) | ok | estimated ms | measured ms |",
             "| --- | --- | --- | --- | --- |"]
    for r in res["rows"]:
        prim = ", ".join(fmt(r[k].get("primary")) for k in ("run1", "run2", "plain"))
        probs = r["run1"].get("problems", [])
        est = "; ".join(fmt(p["estimated_ms"]) for p in probs) or "–"
        meas = "; ".join(fmt(p["measured_ms"]) for p in probs) or "–"
        lines.append(f"| {r['program']} | {prim} | {fmt(r['run1'].get('ok'))} | {est} | {meas} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--out", type=Path, help="record: where timings.json and the recordings go")
    p.add_argument("--from", dest="src", type=Path, help="table only: a folder --out wrote")
    p.add_argument("--skip-done", action="store_true", help="record: skip programs already in OUT")
    p.add_argument("--tag", default="now", help="table: the engine's name in results-TAG.json")
    p.add_argument("--set", type=Path, default=HERE,
                   help="the hold-out set's folder: its NAME.py programs and EXPECTED.json")
    p.add_argument("--results", type=Path, default=None,
                   help="table: where results-TAG.json goes (default: the set's folder)")
    p.add_argument("--recorded-reports", action="store_true",
                   help="table: a bundle missing a file its manifest names is scored by the "
                        "report.json `tensight run` wrote at recording (the engine of the wheel "
                        "then) instead of being analysed again")
    p.add_argument("--record-only", action="store_true",
                   help="record: no table (tabulate later, off the GPU machine)")
    p.add_argument("--runs", type=int, choices=(1, 2), default=2,
                   help="record: tensight run recordings per program (2: is the primary stable?)")
    p.add_argument("--keep-timings", type=Path, default=None, metavar="TIMINGS_JSON",
                   help="record: keep the own times in this earlier timings.json and only "
                        "record again (recordings lost, times still valid)")
    a = p.parse_args()
    global SET, EXPECTED
    if not (a.set / "EXPECTED.json").is_file():
        p.error(f"{a.set}/EXPECTED.json not found: --set takes a hold-out set's folder")
    SET, EXPECTED = a.set.resolve(), expected(a.set)
    unknown = [n for n in a.only or [] if n not in EXPECTED]
    if unknown:
        p.error(f"unknown programs: {', '.join(unknown)} (known: {', '.join(EXPECTED)})")
    if (a.out is None) == (a.src is None):
        p.error("give --out DIR (record, then tabulate) or --from DIR (tabulate what was recorded)")
    if a.out is not None:
        if a.keep_timings is not None and not a.keep_timings.is_file():
            p.error(f"--keep-timings {a.keep_timings}: no such file")
        record(a.only or list(EXPECTED), a.out, a.skip_done, ["run1", "run2"][:a.runs],
               a.keep_timings)
        if a.record_only:
            return 0
    src = a.out or a.src
    if not (src / "timings.json").is_file():
        p.error(f"{src}/timings.json not found: record first with --out")
    print(markdown(table(src, a.tag, a.results or SET, a.recorded_reports)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
