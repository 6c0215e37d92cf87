"""The ``tensight`` command: hands argv to the Rust command line.

``tensight run`` needs to know where the boot hook lives (the folder put first on the
profiled program's PYTHONPATH) and which interpreter this is (``tensight bench`` runs
``$TENSIGHT_PYTHON -m tensight.bench``): both are passed in the environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tensight import _native

BOOT_DIR = Path(os.path.abspath(__file__)).parent / "_boot"  # as imported: no resolve()


def main() -> None:
    """Entry point of the ``tensight`` console script."""
    os.environ["TENSIGHT_BOOT_DIR"] = str(BOOT_DIR)
    os.environ["TENSIGHT_PYTHON"] = sys.executable
    argv = ["tensight", *sys.argv[1:]]
    try:
        code = _native.main(argv)
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
