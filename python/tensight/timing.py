"""Step timing, for the manifest's ``timing``: the host clock between step boundaries
(unprofiled warm-up steps and the profiled timed steps) and CUDA events at the warm-up
boundaries (the unprofiled step time as the GPU saw it: the host clock runs ahead of a
GPU-bound program's queue)."""

from __future__ import annotations

from typing import Any

import torch

from tensight import bundle as contract
from tensight import profiling


class StepTiming:
    """The step times of one window (ms)."""

    def __init__(self) -> None:
        self.t_last: float | None = None  # ``time.perf_counter()`` at the last boundary
        self.unprofiled: list[float] = []
        self.unprofiled_gpu: list[float] = []
        self.profiled: list[float] = []
        self._gpu_marks: list[Any] = []

    def restart(self) -> None:
        """Start the warm-up's timing over (another kind of steps, or another loop)."""
        self.unprofiled.clear()
        self._gpu_marks.clear()
        self.t_last = None

    def warmup_step(self, now: float, learned: bool, draining: bool) -> None:
        """A warm-up boundary at `now`: time the step that ended, unless steps are not
        learned yet or run on prefetched batches (not the steady state: untimed)."""
        if draining:
            self.unprofiled.clear()
            self._gpu_marks.clear()
        elif self.t_last is not None and learned:
            self.unprofiled.append((now - self.t_last) * 1e3)
        if learned:
            self._gpu_mark()

    def timed_step(self, now: float) -> None:
        if self.t_last is not None:
            self.profiled.append((now - self.t_last) * 1e3)

    def _gpu_mark(self) -> None:
        """A CUDA event at this warm-up boundary (a few µs; never a sync)."""
        try:
            if profiling.cuda_ready():
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self._gpu_marks.append(ev)
        except Exception:  # noqa: BLE001 - a measurement never breaks the program
            self._gpu_marks.clear()

    def read_gpu_marks(self) -> None:
        """After the drain at the window's start: the warm-up steps' GPU-timed periods."""
        try:
            marks = self._gpu_marks
            self.unprofiled_gpu = [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
        except Exception:  # noqa: BLE001
            self.unprofiled_gpu = []
        self._gpu_marks = []

    def manifest(self) -> contract.Timing:
        return contract.Timing([round(x, 3) for x in self.unprofiled],
                               [round(x, 3) for x in self.unprofiled_gpu],
                               [round(x, 3) for x in self.profiled])
