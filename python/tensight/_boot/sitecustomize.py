"""tensight's boot hook: on PYTHONPATH only under ``tensight run``.

Python imports ``sitecustomize`` at startup. This one first imports the sitecustomize it
shadows (if any), then, only when ``TENSIGHT_BUNDLE`` is set and this process owns the
run (the first Python process of the command; its children — DataLoader workers,
subprocesses — see ``TENSIGHT_OWNER_PID`` of another pid and do nothing), waits for
``torch`` to be imported (an import hook: torch is never imported here) and then installs
the collector (``tensight.collect``). A distributed job's launcher (torchrun's agent,
:func:`tensight.ranks.is_launcher`) neither claims the run nor records: each rank it
starts is the first Python process of its own and records itself. Any failure prints
one ``tensight: ...`` line on stderr and the program runs as it would without tensight.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `typing`'s: nothing more is imported at every startup
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_here(entry: str) -> bool:
    try:
        return os.path.abspath(entry or os.curdir) == _HERE
    except (TypeError, ValueError):
        return False


def _chain() -> None:
    """Import the sitecustomize this one shadows, reporting errors as site.py does."""
    import importlib

    ours = sys.modules.get(__name__)
    removed = [i for i, p in enumerate(sys.path) if isinstance(p, str) and _is_here(p)]
    for i in reversed(removed):
        del sys.path[i]
    sys.modules.pop(__name__, None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            _site_error(exc)
    except Exception as exc:  # noqa: BLE001 - as site.execsitecustomize
        _site_error(exc)
    finally:
        for i in removed:
            sys.path.insert(min(i, len(sys.path)), _HERE)
        if ours is not None:
            sys.modules[__name__] = ours


def _site_error(err: BaseException) -> None:
    if sys.flags.verbose:
        sys.excepthook(type(err), err, err.__traceback__)
    else:
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         f"{type(err).__name__}: {err}\n")


def _import_tensight(name: str) -> object:
    """``tensight.<name>`` from the tensight package that holds this boot dir, even when
    the program's interpreter has no (or another) tensight installed."""
    import importlib
    import importlib.util

    pkg_dir = os.path.dirname(_HERE)
    mod = sys.modules.get("tensight")
    if mod is None:
        spec = importlib.util.find_spec("tensight")
        found = list(spec.submodule_search_locations or []) if spec else []
        if not any(os.path.abspath(p) == pkg_dir for p in found):
            spec = importlib.util.spec_from_file_location(
                "tensight", os.path.join(pkg_dir, "__init__.py"),
                submodule_search_locations=[pkg_dir])
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load tensight from {pkg_dir}")
            mod = importlib.util.module_from_spec(spec)
            sys.modules["tensight"] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                sys.modules.pop("tensight", None)
                raise
    return importlib.import_module(f"tensight.{name}")


_installed = False
_lock: object = None  # a threading.Lock from _boot: the hook and the watcher may race


def _on_torch() -> None:
    """torch was just imported: install the collector (once: the import hook or the
    watcher, whichever sees it first)."""
    global _installed
    _leave_meta_path()
    with _lock:  # type: ignore[attr-defined]
        if _installed:
            return
        _installed = True
        owner = os.environ.get("TENSIGHT_OWNER_PID")
        if owner and owner != str(os.getpid()):
            return  # forked from the owner after boot (its children see its claim)
        if _is_launcher():
            return  # torchrun's agent: its children, the ranks, record
        os.environ["TENSIGHT_OWNER_PID"] = str(os.getpid())
    try:
        collect = _import_tensight("collect")
        collect.install_from_env()  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - the program must run on
        sys.stderr.write(f"tensight: collector not installed ({type(e).__name__}: {e}); "
                         "the program runs unprofiled\n")


def _is_launcher() -> bool:
    try:
        return bool(_import_tensight("ranks").is_launcher())  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - then this process records, as before
        sys.stderr.write(f"tensight: launcher check failed ({type(e).__name__}: {e})\n")
        return False


class _Loader:
    """Wraps torch's loader: runs it, then the collector install."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def create_module(self, spec: object) -> object:
        return self._inner.create_module(spec)  # type: ignore[attr-defined]

    def exec_module(self, module: object) -> None:
        module.__loader__ = self._inner  # type: ignore[attr-defined]
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._inner
        self._inner.exec_module(module)  # type: ignore[attr-defined]
        _on_torch()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


class _TorchFinder:
    """A meta-path finder that only answers for ``torch``, until torch has run.

    It stays on ``sys.meta_path`` until torch's module code has executed: other code may
    look up torch's spec without importing it (``importlib.util.find_spec("torch")``, as
    an import hook that another package installs does under Nsight Compute), and a
    finder that left at the first lookup would miss the real import."""

    def __init__(self) -> None:
        self._busy = False  # our own lookup below walks sys.meta_path too

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "torch" or self._busy:
            return None
        self._busy = True
        try:
            import importlib.util

            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
            return spec
        except Exception as e:  # noqa: BLE001
            sys.stderr.write(f"tensight: import hook failed ({type(e).__name__}: {e})\n")
            return None
        finally:
            self._busy = False


def _leave_meta_path() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TorchFinder)]


def _torch_ready() -> bool:
    mod = sys.modules.get("torch")
    spec = getattr(mod, "__spec__", None)
    return (mod is not None and not getattr(spec, "_initializing", False)
            and "torch.optim.optimizer" in sys.modules and "torch.nn.modules.module" in sys.modules)


def _watch() -> None:
    """The import hook's backstop: code that rebuilds ``sys.meta_path`` during startup
    drops our finder (seen under Nsight Compute on an H200), so a daemon thread looks
    every 20 ms for a fully imported torch, for up to 10 minutes, and installs the
    collector then. It only reads ``sys.modules``."""
    import threading  # already imported by _boot
    import time

    def run() -> None:
        for _ in range(30_000):
            if _installed:
                return
            if _torch_ready():  # the hook installs before torch counts as ready
                _on_torch()
                return
            time.sleep(0.02)

    threading.Thread(target=run, name="tensight-watch", daemon=True).start()


def _boot() -> None:
    global _lock
    if not os.environ.get("TENSIGHT_BUNDLE"):
        return
    pid = str(os.getpid())
    owner = os.environ.get("TENSIGHT_OWNER_PID")
    if owner and owner != pid:
        return  # a child of the profiled process
    # Ownership is claimed when torch is imported (_on_torch), not here: a Python
    # launcher between tensight and the program (ncu starts the program through one)
    # must not make the program look like its child.
    import threading

    _lock = threading.Lock()
    if "torch" in sys.modules:
        _on_torch()
    else:
        sys.meta_path.insert(0, _TorchFinder())
        _watch()


try:
    _chain()
except Exception as _e:  # noqa: BLE001
    sys.stderr.write(f"tensight: {type(_e).__name__}: {_e}\n")
try:
    _boot()
except Exception as _e:  # noqa: BLE001
    sys.stderr.write(f"tensight: boot failed ({type(_e).__name__}: {_e}); "
                     "the program runs unprofiled\n")
