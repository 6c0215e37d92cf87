"""``tensight.distributed``: the ranks of a job summarized on Ray, then merged here.

For jobs too large for one ``tensight analyze DIR``: each rank's trace or bundle is
summarized in a Ray task (``tensight summarize``, the very command, run by the engine in
the worker), the summaries come back through Ray's object store (or a shared folder the
user names), and the cross-rank step (``tensight merge``) runs on this machine:

    >>> from tensight.distributed import analyze_ranks_on_ray
    >>> report = analyze_ranks_on_ray(["run-042/"])          # a local Ray, or RAY_ADDRESS
    >>> report["ranks"]["diagnosis"]["bottlenecks"][0]["code"]

or from the shell, ``tensight merge --ray run-042/`` (``python -m tensight.distributed
run-042/`` is the same). Ray is imported only here, and only when called: it is the
optional extra ``pip install 'tensight[ray]'``. Scheduling, retries and transport are
Ray's; this module only maps one command over the ranks and merges. It does not copy
traces: on a cluster, every worker must see the inputs at the same paths.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tensight import _native

RAY_HINT = "pip install 'tensight[ray]'"
#: Summaries fetched from the object store per `ray.wait`, written as they arrive.
BATCH = 32


class DistributedError(ValueError):
    """A user-facing failure: the message is one line, ``hint`` the likely fix or None."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@dataclasses.dataclass(frozen=True)
class RankInput:
    """One rank's trace or bundle folder; ``rank`` when the layout says (None: the trace's
    ``distributedInfo.rank``, else its file name, decides)."""

    rank: int | None
    path: str


@dataclasses.dataclass
class Summaries:
    """The summaries made for a job: ``paths[i]`` is rank ``ranks[i]``'s, ascending."""

    ranks: list[int]
    paths: list[Path]
    #: Ranks left out (``PATH left out: why``) and the engine's warnings, in input order.
    warnings: list[str]


def rank_inputs(paths: Sequence[str | os.PathLike[str]]) -> list[RankInput]:
    """The ranks `paths` hold, as ``tensight analyze DIR`` finds them: a multi-rank folder
    (rank traces, or ``rank0/``, ``rank1/``, … bundles) gives its ranks; any other path
    (a trace, a bundle) is one rank."""
    out: list[RankInput] = []
    for p in paths:
        try:
            found = _native.rank_inputs(os.fspath(p))
        except ValueError as e:
            raise DistributedError(str(e), getattr(e, "hint", None)) from None
        if found is None:
            out.append(RankInput(None, os.path.abspath(p)))
        else:
            out.extend(RankInput(r, os.path.abspath(x)) for r, x in found[1])
    return out


def summarize(path: str, out: str, rank: int | None = None) -> tuple[int, list[str]]:
    """``tensight summarize PATH -o OUT [--rank N]`` in this process. Returns the rank
    written and the engine's warnings; raises DistributedError with its message."""
    argv = ["tensight", "summarize", path, "-o", out]
    if rank is not None:
        argv += ["--rank", str(rank)]
    code, lines = _run_cli(argv)
    if code != 0:
        raise _cli_error(lines, f"failed to summarize {path}")
    written = [m for m in map(_WRITTEN.match, lines) if m]
    if not written:
        raise DistributedError(f"failed to summarize {path}: the engine said no rank")
    return int(written[0].group(1)), [x for x in lines if x.startswith("warning: ")]


_WRITTEN = re.compile(r"^tensight: rank (\d+) summary written to ")


def summarize_on_ray(inputs: Sequence[RankInput], summaries_dir: str | os.PathLike[str],
                     *, shared: bool = False) -> Summaries:
    """One Ray task per input, each running `summarize`; the summaries are written into
    `summaries_dir` as ``rank-N.parquet``. With `shared`, the workers write them there
    themselves (a filesystem every node mounts at that path); else they come back through
    the object store. Ray must be initialised (`connect`). A rank that cannot be
    summarized is left out with a warning, as ``tensight analyze DIR`` does."""
    ray = _import_ray()
    folder = Path(summaries_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    task = ray.remote(num_cpus=1, max_retries=1)(_summarize_task)
    refs = {task.remote(i.path, i.rank, str(folder) if shared else None): i for i in inputs}
    made: dict[int, tuple[Path, str]] = {}
    warnings: list[str] = []
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=min(BATCH, len(pending)))
        for ref in done:
            source = refs[ref].path
            result: _TaskResult = ray.get(ref)
            if result.error is not None:
                warnings.append(f"{source} left out: {result.error.removeprefix('error: ')}")
                continue
            assert result.rank is not None
            warnings.extend(result.warnings)
            if result.rank in made:
                raise DistributedError(
                    f"failed to merge: rank {result.rank} twice ({made[result.rank][1]}, {source})",
                    "pass each rank once")
            target = folder / f"rank-{result.rank}.parquet"
            if isinstance(result.summary, bytes):
                target.write_bytes(result.summary)
            elif result.summary is not None:
                os.replace(result.summary, target)
            made[result.rank] = (target, source)
    ranks = sorted(made)
    if len(ranks) < 2:
        why = f" ({warnings[0]})" if warnings else ""
        raise DistributedError(
            f"failed to merge: {len(ranks)} rank(s) summarized of {len(inputs)} input(s); the "
            f"cross-rank step needs two or more{why}",
            "pass a folder of two or more rank traces or rank bundles (one trace: tensight analyze)")
    return Summaries(ranks, [made[r][0] for r in ranks], warnings)


def merge(summaries: Sequence[str | os.PathLike[str]], *, fmt: str = "json",
          output: str | os.PathLike[str] | None = None, width: int | None = None,
          force: bool = False) -> int:
    """``tensight merge SUMMARIES… --format FMT [-o OUTPUT]`` in this process (the report
    on stdout without `output`); its exit code."""
    return _native.main(_merge_argv(summaries, fmt, output, width, force))


def _merge_argv(summaries: Sequence[str | os.PathLike[str]], fmt: str,
                output: str | os.PathLike[str] | None, width: int | None = None,
                force: bool = False) -> list[str]:
    """The engine's argv for ``tensight merge`` with these options."""
    argv = ["tensight", "merge", *(os.fspath(s) for s in summaries), "--format", fmt]
    if output is not None:
        argv += ["--output", os.fspath(output)]
    if width is not None:
        argv += ["--width", str(width)]
    if force:
        argv.append("--force")
    return argv


def connect(address: str | None = None) -> bool:
    """Initialise Ray unless it is already: the cluster at `address` (``auto``, ``HOST:PORT``,
    ``ray://…``), else RAY_ADDRESS's, else a local one. True when this call started it
    (the caller then shuts it down)."""
    ray = _import_ray()
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False)
    except ConnectionError as e:
        raise DistributedError(f"failed to connect to the Ray cluster: {e}",
                               "check --address (what `ray start --head` printed) or "
                               "RAY_ADDRESS; leave both out for a local Ray") from None
    return True


def analyze_ranks_on_ray(paths: Sequence[str | os.PathLike[str]],
                         summaries_dir: str | os.PathLike[str] | None = None, *,
                         address: str | None = None) -> dict[str, Any]:
    """The cross-rank report of the ranks in `paths` (a multi-rank folder, or one trace
    or bundle per rank), each rank summarized in a Ray task: the JSON report of
    ``tensight merge`` as a dict (``report["ranks"]``: the same analysis and findings as
    ``tensight analyze DIR``'s). With `summaries_dir` (a filesystem the workers share) the
    summaries are written and kept there; else they travel through the object store and
    are dropped after the merge. Uses the Ray already initialised, else `connect(address)`
    (and shuts that down after). Raises DistributedError (with ``hint``) for bad input
    and when Ray is not installed."""
    with _on_ray(paths, summaries_dir, address) as made:
        report_file = Path(tempfile.mkdtemp(prefix="tensight-merge-")) / "report.json"
        try:
            code, lines = _run_cli(_merge_argv(made.paths, "json", report_file))
            if code != 0:
                raise _cli_error(lines, "failed to merge the summaries")
            report: dict[str, Any] = json.loads(report_file.read_text())
        finally:
            report_file.unlink(missing_ok=True)
            report_file.parent.rmdir()
        return report


@contextlib.contextmanager
def _on_ray(paths: Sequence[str | os.PathLike[str]],
            summaries_dir: str | os.PathLike[str] | None,
            address: str | None) -> Iterator[Summaries]:
    """The ranks in `paths` summarized on Ray (`summarize_on_ray`, its warnings printed)
    for the block: the summaries' temporary folder, and a Ray this call started, end
    with it."""
    inputs = rank_inputs(paths)
    started = connect(address)
    try:
        with _folder(summaries_dir) as folder:
            made = summarize_on_ray(inputs, folder, shared=summaries_dir is not None)
            for w in made.warnings:
                print(f"warning: {w}", file=sys.stderr)
            sys.stderr.flush()
            yield made
    finally:
        if started:
            _import_ray().shutdown()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tensight.distributed",
        description="Summarize every rank of a job in a Ray task (`tensight summarize`), "
        "then run the cross-rank step here (`tensight merge`): the same findings as "
        "`tensight analyze DIR`, for jobs of thousands of ranks. `tensight merge --ray` "
        "runs this.",
        epilog="examples:\n"
        "  python -m tensight.distributed run-042/            # a local Ray (or RAY_ADDRESS)\n"
        "  python -m tensight.distributed --address auto traces/ --format json -o ranks.json\n"
        "  python -m tensight.distributed --summaries-dir /shared/sum rank*/trace.json.gz\n\n"
        f"Needs Ray ({RAY_HINT}). On a cluster every worker must see the inputs at the "
        "same paths, with tensight installed.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="a multi-rank folder (rank traces, or rank0/, rank1/, … bundles), "
                   "or one trace or bundle per rank")
    p.add_argument("--address", metavar="ADDR",
                   help="the Ray cluster (`auto`, HOST:PORT, ray://HOST:PORT); default: "
                   "RAY_ADDRESS, else a local Ray started for this run")
    p.add_argument("--summaries-dir", metavar="DIR",
                   help="a folder every worker sees at this path: the workers write the "
                   "summaries there (kept) instead of sending them through the object store")
    p.add_argument("--format", "-f", choices=("text", "json"), default="text",
                   help="report format (default: text)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE, not stdout")
    p.add_argument("--width", type=int, metavar="N", help="text width (default: the terminal's)")
    p.add_argument("--force", action="store_true",
                   help="with -o, replace an existing file that is not a tensight report")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m tensight.distributed``: exit 0, or 2 with ``error:`` (+ ``hint:``)."""
    args = parse(argv)
    try:
        with _on_ray(args.inputs, args.summaries_dir, args.address) as made:
            return merge(made.paths, fmt=args.format, output=args.output,
                         width=args.width, force=args.force)
    except DistributedError as e:
        print(f"error: {e}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


@dataclasses.dataclass
class _TaskResult:
    """What a Ray task sends back: the rank and its summary (bytes, or the path the worker
    wrote in the shared folder), or the engine's error line."""

    rank: int | None
    summary: bytes | str | None
    warnings: list[str]
    error: str | None


def _summarize_task(path: str, rank: int | None, shared: str | None) -> _TaskResult:
    """A Ray task (runs in a worker): `summarize` one input."""
    with tempfile.TemporaryDirectory(prefix="tensight-rank-", dir=shared) as tmp:
        out = os.path.join(tmp, "summary.parquet")
        try:
            got, warnings = summarize(path, out, rank)
        except DistributedError as e:
            return _TaskResult(None, None, [], str(e))
        if shared is None:
            return _TaskResult(got, Path(out).read_bytes(), warnings, None)
        kept = os.path.join(shared, f".rank-{got}-{os.getpid()}.parquet")
        os.replace(out, kept)
        return _TaskResult(got, kept, warnings, None)


def _run_cli(argv: list[str]) -> tuple[int, list[str]]:
    """The engine's command line in this process, its stderr captured: (exit code, lines)."""
    with tempfile.TemporaryFile() as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            code = _native.main(argv)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return code, err.read().decode("utf-8", "replace").splitlines()


def _cli_error(lines: list[str], fallback: str) -> DistributedError:
    """The engine's ``error:`` and ``hint:`` lines as a DistributedError."""
    error = next((x.removeprefix("error: ") for x in lines if x.startswith("error: ")), fallback)
    hint = next((x.removeprefix("hint: ") for x in lines if x.startswith("hint: ")), None)
    return DistributedError(error, hint)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise DistributedError(f"the Ray scale-out needs Ray, which {sys.executable} cannot "
                               f"import ({e})", RAY_HINT) from None
    return ray


@contextlib.contextmanager
def _folder(given: str | os.PathLike[str] | None) -> Iterator[str]:
    """`given`, else a temporary folder removed afterwards."""
    if given is not None:
        yield os.fspath(given)
        return
    with tempfile.TemporaryDirectory(prefix="tensight-summaries-") as tmp:
        yield tmp


if __name__ == "__main__":
    sys.exit(main())
