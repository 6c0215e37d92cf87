"""The bundle contract, collector side: what ``tensight run`` writes for the engine.

File names, the format version and the NVTX range names come from ``contract.json``
beside this file, which the engine reads too (``read::bundle::contract`` in Rust), so
each is written down once. :class:`Manifest` is ``manifest.json``, field for field the
engine's ``read::bundle::Manifest`` (a round-trip test holds the two together); its
``to_json`` is what the collector writes, atomically (a program killed mid-write leaves
the previous manifest).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CONTRACT: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent / "contract.json").read_text(encoding="utf-8"))

FORMAT: str = _CONTRACT["format"]
FORMAT_VERSION: str = _CONTRACT["format_version"]
FILES: dict[str, str] = _CONTRACT["files"]
MANIFEST = FILES["manifest"]
TRACE = FILES["trace"]
DETAIL = FILES["detail"]
EXECUTION_TRACE = FILES["execution_trace"]
NCU_RANGE = FILES["ncu_range"]
#: NVTX range around the step the hardware pass profiles (ncu --nvtx-include).
NVTX_STEP: str = _CONTRACT["nvtx"]["step"]
#: NVTX range around op calls that repeat an earlier one of that step (ncu skips them).
NVTX_REPEAT: str = _CONTRACT["nvtx"]["repeat"]
#: record_function name of the collector's own GPU drains (not the program's syncs).
DRAIN: str = _CONTRACT["annotations"]["drain"]

_GZIP_LEVEL = 3  # traces compress ~10x at any level; 3 is several times faster than 9


@dataclass
class Device:
    """The GPU the program used (``torch.cuda.get_device_properties``)."""

    name: str
    total_memory_bytes: int
    capability: list[int]
    multi_processor_count: int


@dataclass
class Program:
    """How the program ended: ``completed``, ``crashed`` or ``running`` (not seen yet)."""

    status: str = "running"
    exit_code: int | None = None
    error: str | None = None


@dataclass
class Files:
    """The bundle's files, relative to its folder; None: not recorded."""

    trace: str | None = None
    #: The detail step (stacks, shapes, memory, modules), its own profiler session.
    detail: str | None = None
    execution_trace: str | None = None
    ncu: str | None = None


@dataclass
class Timing:
    """Step times the collector measured, ms."""

    #: Warm-up steps without the profiler, host clock.
    step_ms_unprofiled: list[float] = field(default_factory=list)
    #: The same, by CUDA events at the boundaries (the GPU's view).
    step_ms_unprofiled_gpu: list[float] = field(default_factory=list)
    #: The recorded (timed) steps under the profiler, host clock.
    step_ms_profiled: list[float] = field(default_factory=list)


@dataclass
class Distributed:
    """The rank of a distributed job that recorded the bundle (since format 1.2): from
    the launcher's environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``), then from
    ``torch.distributed`` once the program initialised it (:mod:`tensight.ranks`)."""

    rank: int
    local_rank: int | None = None
    world_size: int | None = None
    #: ``torch.distributed.get_backend()`` (``nccl``, ``gloo``, ...); None: not initialised.
    backend: str | None = None


@dataclass
class Manifest:
    """``manifest.json``. ``hardware`` is written by ``tensight run --hardware``."""

    tensight_version: str
    python_version: str
    torch_version: str
    cuda_version: str | None
    device: Device | None
    command: list[str]
    cwd: str
    #: ``optimizer``, ``forward``, ``loop`` or ``whole_program``.
    step_detection: str
    warmup_steps: int
    steps_requested: int
    steps_recorded: int
    #: The loop whose iterations are the steps (``loop`` detection): file, line, function.
    step_loop: dict[str, Any] | None = None
    #: The ``ProfilerStep#k`` of the detail step (k = steps + 1), left out of timing.
    detail_step: int | None = None
    #: The program's iteration (0-based) whose end was the first step boundary counted:
    #: 0 for optimizer and forward steps; for a loop, the iterations seen before it was
    #: chosen. Timed step j is iteration first_step_index + warmup_steps + j.
    first_step_index: int | None = None
    #: Profiler options of the timed steps and of the detail step.
    options: dict[str, Any] = field(default_factory=dict)
    program: Program = field(default_factory=Program)
    files: Files = field(default_factory=Files)
    timing: Timing = field(default_factory=Timing)
    hardware: dict[str, Any] | None = None
    #: The job's rank that recorded it (``BUNDLE/rank{N}/``); None: not a distributed job.
    distributed: Distributed | None = None
    format: str = FORMAT
    format_version: str = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    def write(self, bundle: Path) -> None:
        write_atomic(bundle / MANIFEST, self.to_json())


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def gzip_to(src: Path, dst: Path) -> None:
    """Compress `src` into `dst` atomically, then remove `src`."""
    tmp = dst.with_name(dst.name + ".tmp")
    with open(src, "rb") as fin, gzip.open(tmp, "wb", compresslevel=_GZIP_LEVEL) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(tmp, dst)
    src.unlink()


def remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
