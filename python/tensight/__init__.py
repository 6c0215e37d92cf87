"""tensight: why a PyTorch GPU program is slow, and what to change.

The engine is Rust (``tensight._native``); this package is the thin Python face:

    >>> import tensight
    >>> report = tensight.analyze("trace.json.gz")
    >>> report["diagnosis"]["primary_bottleneck"]["title"]

The report's schema is documented in the engine (``report/json.rs``) and carries a
``schema_version``. To record and diagnose in-process (torch is imported only then):

    >>> results = tensight.profile_model(model, input_gen, steps=20)
    >>> results["diagnosis"]["primary_bottleneck"]
    >>> with tensight.profile(steps=5) as p:   # around an existing training loop
    ...     train()
    >>> print(p.report())
"""

from __future__ import annotations

import json
import os
from typing import Any

from tensight import _native  # the Rust extension (types: _native.pyi)
from tensight.api import profile, profile_model

__version__: str = _native.version()

__all__ = ["analyze", "profile", "profile_model", "__version__"]


def analyze(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Diagnose a PyTorch profiler trace (``.json``/``.json.gz``, a folder holding one,
    or a bundle written by ``tensight run``).

    Returns the JSON report as a dict: ``report["diagnosis"]["bottlenecks"]`` lists the
    findings, largest estimated saving first; ``report["diagnosis"]["primary_bottleneck"]``
    is the non-roofline finding with the largest saving above zero, or ``None``. Raises
    ``ValueError`` with a one-line reason for bad input (its ``hint`` attribute holds the
    likely fix, or ``None``).
    """
    return json.loads(_native.analyze_json(os.fspath(path)))
