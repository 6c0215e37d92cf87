"""The in-process Python API: ``profile_model`` and ``with tensight.profile() as p``.

Both record a bundle with the collector that ``tensight run`` uses (``tensight.collect``)
and have the Rust engine diagnose it. torch is imported only when they are called.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensight import _native  # the Rust extension (types: _native.pyi)

__all__ = ["profile_model", "profile", "results_from_report", "analyze_bundle"]


def analyze_bundle(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON report of a bundle, as a dict (raises ``ValueError`` with the reason)."""
    report: dict[str, Any] = json.loads(_native.analyze_json(os.fspath(bundle)))
    return report


def results_from_report(report: dict[str, Any], bundle: str | os.PathLike[str]) -> dict[str, Any]:
    """The seed's result shape over the JSON report (schema: the engine's report/json.rs).

    ``diagnosis``: ``bottlenecks`` (findings, largest estimated saving first),
    ``primary_bottleneck`` (finding or None), ``skipped_rules``; ``metrics``: the summary
    (``step_time_ms``, ``gpu_busy_pct``, ``kernels_per_step``, ...); ``roofline`` (or None);
    ``report``: the whole report; ``bundle``: the bundle directory."""
    diagnosis = report.get("diagnosis") or {}
    return {
        "diagnosis": {
            "bottlenecks": list(diagnosis.get("bottlenecks") or []),
            "primary_bottleneck": diagnosis.get("primary_bottleneck"),
            "skipped_rules": list(diagnosis.get("skipped_rules") or []),
        },
        "metrics": dict(report.get("summary") or {}),
        "roofline": report.get("roofline"),
        "report": report,
        "bundle": str(bundle),
    }


def report_text(bundle: str | os.PathLike[str]) -> str:
    """The terminal report of a bundle, as text (no colors)."""
    return _native.report_text(os.fspath(bundle))


def _bundle_dir(out: str | os.PathLike[str] | None) -> Path:
    if out is None:
        return Path(tempfile.mkdtemp(prefix="tensight-"))
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _to(x: Any, device: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True) if x.device != device else x
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _call(model: Any, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


def _default_loss(output: Any) -> Any:
    """Mean of the output (the sum of the means of a tuple/dict of float tensors)."""
    import torch

    if isinstance(output, torch.Tensor):
        return output.float().mean()
    values = output.values() if isinstance(output, dict) else output
    parts = [v.float().mean() for v in values
             if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if not parts:
        raise TypeError("the model's output has no float tensor: pass loss_fn=")
    return torch.stack(parts).sum()


def profile_model(model: Any, input_gen: Callable[[], Any], steps: int = 50, warmup: int = 5,
                  loss_fn: Callable[[Any], Any] | None = None, optimizer: Any = None,
                  train: bool = True, device: Any = None,
                  out: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Profile `warmup` + 1 + `steps` iterations of `model` and diagnose them.

    Each iteration: ``batch = input_gen()``; ``output = model(batch)`` (``*batch`` for a
    tuple/list, ``**batch`` for a dict). With ``train=True``: ``loss_fn(output)`` (default:
    the output's mean) ``.backward()``, then ``optimizer.step()`` and ``zero_grad`` (without
    an optimizer the gradients are only cleared: the model's weights never change). With
    ``train=False``: ``model.eval()`` under ``torch.inference_mode()``. `device`: moves
    the model and the batches there; ``None`` leaves both where they are.

    The first `warmup` iterations are not profiled, the next one is the profiler's warm-up,
    the last `steps` are recorded (bundle in `out`, else a new temp dir). Returns
    ``{"diagnosis": {"bottlenecks": [...], "primary_bottleneck": finding|None, ...},
    "metrics": {...}, "roofline": {...}|None, "report": {...}, "bundle": path}``.
    """
    import torch

    from tensight.collect import Collector

    if steps < 1 or warmup < 0:
        raise ValueError("steps must be >= 1 and warmup >= 0")
    if device is not None:
        device = torch.device(device)
        model.to(device)
    bundle = _bundle_dir(out)
    detection = "optimizer" if train and optimizer is not None else "forward"
    c = Collector(bundle, steps, warmup, auto=False, speculate=False, detection=detection)
    was_training = model.training
    model.train(train)
    c.install()
    try:
        for _ in range(warmup + 1 + steps):
            batch = input_gen()
            if device is not None:
                batch = _to(batch, device)
            if train:
                loss = (loss_fn or _default_loss)(_call(model, batch))
                loss.backward()
                if optimizer is not None:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                else:
                    model.zero_grad(set_to_none=True)
            else:
                with torch.inference_mode():
                    _call(model, batch)
            c.boundary()
    except BaseException as e:
        c.finish("crashed", None, f"{type(e).__name__}: {e}")
        raise
    finally:
        model.train(was_training)
    c.finish("completed", None, None)
    return results_from_report(analyze_bundle(bundle), bundle)


class profile:  # noqa: N801 - used as `with tensight.profile() as p:`
    """Profile an existing loop: ``with tensight.profile(steps=5, warmup=3) as p: ...``.

    Steps are found as under ``tensight run``: optimizer steps, else top-level forward
    calls of modules with parameters, else everything inside the block. After the block,
    ``p.results`` is the dict that :func:`profile_model` returns and ``p.report()`` the
    text report; ``p.bundle`` is the bundle directory (`out`, else a new temp dir)."""

    def __init__(self, steps: int = 5, warmup: int = 3,
                 out: str | os.PathLike[str] | None = None) -> None:
        if steps < 1 or warmup < 0:
            raise ValueError("steps must be >= 1 and warmup >= 0")
        self.steps = steps
        self.warmup = warmup
        self._out = out
        self.bundle: Path | None = None
        self.results: dict[str, Any] | None = None
        self._collector: Any = None

    def __enter__(self) -> profile:
        from tensight.collect import Collector

        self.bundle = _bundle_dir(self._out)
        self._collector = Collector(self.bundle, self.steps, self.warmup, auto=True,
                                    speculate=True)
        self._collector.install()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        c, self._collector = self._collector, None
        if exc_type is not None:
            c.finish("crashed", None, f"{exc_type.__name__}: {exc}")
            return None  # the exception propagates
        c.finish("completed", None, None)
        assert self.bundle is not None
        self.results = results_from_report(analyze_bundle(self.bundle), self.bundle)
        return None

    def report(self) -> str:
        """The terminal report (text) of the recorded bundle."""
        if self.bundle is None or self._collector is not None:
            raise RuntimeError("report() is available after the `with` block")
        return report_text(self.bundle)
