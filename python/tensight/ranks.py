"""The ranks of a distributed job: which process is which, and where each one records.

Under ``tensight run -- torchrun ...`` (or ``python -m torch.distributed.run``) the
launcher (torchrun's agent) starts one process per rank with ``RANK``, ``LOCAL_RANK``
and ``WORLD_SIZE`` in its environment. This module

- tells the launcher apart (:func:`is_launcher`): the agent runs no training, so the boot
  hook installs no collector there and leaves the run to its children, the ranks;
- reads a rank's identity from that environment (:func:`from_env`), and the backend
  from ``torch.distributed`` once the program initialised it (:func:`with_backend`);
- names the rank's bundle inside the job's (:func:`rank_dir`): ``BUNDLE/rank{RANK}/``,
  an ordinary single-rank bundle. ``tensight run`` writes ``BUNDLE/manifest.json``
  (``"kind": "ranks"``) after the command ends.

It never calls a collective (a rank's profiler must not wait for, or make wait, the
others) and never initialises ``torch.distributed``: everything here is local.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tensight.bundle import Distributed

__all__ = ["LAUNCH_MODULES", "from_env", "is_launcher", "rank_dir", "with_backend"]

#: Modules that launch a job's ranks (``python -m MODULE``): the agent is no rank.
LAUNCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
#: Console scripts that do the same (``torchrun``, as pip installs it).
LAUNCH_SCRIPTS = ("torchrun",)
#: Interpreter options that take a value (skipped while looking for the program).
_OPTS_WITH_VALUE = ("-W", "-X", "-Q")


def is_launcher(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a job's launcher (torchrun's agent): its command runs
    ``torch.distributed.run``/``launch`` or the ``torchrun`` script, and it has no
    ``RANK`` (the ranks it starts do). `argv`: the interpreter's full command line
    (``sys.orig_argv``: interpreter, options, then ``-m MODULE``, ``-c CODE`` or a script)."""
    env = os.environ if env is None else env
    if env.get("RANK"):
        return False
    args = list(sys.orig_argv if argv is None else argv)[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m":
            return i + 1 < len(args) and args[i + 1] in LAUNCH_MODULES
        if a.startswith("-m") and len(a) > 2:
            return a[2:] in LAUNCH_MODULES
        if a == "-c" or a.startswith("-c") or a == "-":
            return False
        if a in _OPTS_WITH_VALUE:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        name = os.path.basename(a)
        for suffix in ("-script.py", ".exe", ".py"):
            name = name.removesuffix(suffix)
        return name in LAUNCH_SCRIPTS
    return False


def _int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def from_env(env: Mapping[str, str] | None = None) -> Distributed | None:
    """This process's rank, from the environment a launcher sets (``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE``); None when it is no rank of a job (``RANK`` unset
    or not a number)."""
    env = os.environ if env is None else env
    rank = _int(env, "RANK")
    if rank is None or rank < 0:
        return None
    world = _int(env, "WORLD_SIZE")
    return Distributed(rank=rank, local_rank=_int(env, "LOCAL_RANK"),
                       world_size=world if world is not None and world > rank else None)


def with_backend(d: Distributed) -> Distributed:
    """`d` with what ``torch.distributed`` knows now, if the program initialised it: the
    backend, and the rank and world size of the default group (local queries only)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return d
        return Distributed(rank=int(dist.get_rank()), local_rank=d.local_rank,
                           world_size=int(dist.get_world_size()),
                           backend=str(dist.get_backend()))
    except Exception:  # noqa: BLE001 - a torch without these: keep what the env said
        return d


def rank_dir(bundle: str | os.PathLike[str], d: Distributed) -> Path:
    """The rank's bundle inside the job's: ``BUNDLE/rank{RANK}``."""
    return Path(bundle) / f"rank{d.rank}"
