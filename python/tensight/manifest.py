"""The manifest a :class:`~tensight.collect.Collector` writes (``manifest.json``): what it
recorded (the window, the whole program or nothing yet), how, and how the program ended."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

import torch

from tensight import bundle as contract
from tensight import profiling

if TYPE_CHECKING:
    from tensight.collect import Collector

__all__ = ["build_manifest"]


def build_manifest(c: Collector, program: contract.Program,
             distributed: contract.Distributed | None) -> contract.Manifest:
    """The manifest of what `c` recorded, for a program that is `program` now."""
    w = c.window
    whole = w.kept == "whole_program" or (w.kept is None and c.mode is None)
    window = w.kept == "window"
    et_ok = (c.bundle / contract.EXECUTION_TRACE).exists()
    loop = w.loop if window else c.finder.loop
    mode = w.mode if window and w.mode else c.mode
    return contract.Manifest(
        tensight_version=_tensight_version(),
        python_version=platform.python_version(),
        torch_version=str(torch.__version__),
        cuda_version=torch.version.cuda,
        device=_device(),
        command=c.command,
        cwd=c.cwd,
        step_detection="whole_program" if whole else (mode.value if mode else "?"),
        step_loop=loop.describe() if loop is not None and not whole else None,
        warmup_steps=0 if whole else w.warmup_done,
        steps_requested=c.steps,
        steps_recorded=w.recorded if window else 0,
        detail_step=c.steps + 1 if window and w.detail_kept else None,
        first_step_index=None if whole else c.first_index,
        options={"timed": dict(c.spec.options()) if whole else w.timed_options(),
                 "detail": profiling.detail_options() if w.detail_kept else None,
                 "hardware": False},
        program=program,
        files=contract.Files(
            trace=contract.TRACE if w.kept else None,
            detail=contract.DETAIL if window and w.detail_kept else None,
            execution_trace=contract.EXECUTION_TRACE if w.kept and et_ok else None),
        timing=c.timing.manifest(),
        distributed=distributed,
    )


def _device() -> contract.Device | None:
    """The current CUDA device, if the program initialized CUDA (never initialize it)."""
    try:
        if not torch.cuda.is_initialized():
            return None
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return contract.Device(p.name, int(p.total_memory), [int(p.major), int(p.minor)],
                               int(p.multi_processor_count))
    except Exception:  # noqa: BLE001
        return None


def _tensight_version() -> str:
    try:
        from tensight import _native

        return str(_native.version())
    except Exception:  # noqa: BLE001
        return "unknown"
