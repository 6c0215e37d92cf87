"""Type stubs of the Rust extension (crates/tensight-py): no logic lives there."""

def main(argv: list[str]) -> int:
    """Run the `tensight` command line (argv[0] is the program name); the exit code."""

def analyze_json(path: str) -> str:
    """The JSON report of a trace, a folder holding one, or a bundle. Raises ValueError
    (with a `hint` attribute) for bad input."""

def report_text(path: str) -> str:
    """The text report (no colour, 80 columns) of the same inputs."""

def choose_loop(candidates: list[tuple[int, int, int, int, float]]) -> int | None:
    """The step loop among (depth, count, covered_ns, span_ns, work_share) candidates."""

def version() -> str:
    """The engine's version."""

def read_manifest(path: str) -> str:
    """The manifest at `path` as the engine's typed Manifest reads it, as JSON:
    {"manifest": {...}, "unknown": [fields it does not know]}."""

def rank_inputs(path: str) -> tuple[int | None, list[tuple[int | None, str]]] | None:
    """The ranks of a multi-rank folder as `tensight analyze DIR` finds them:
    (world_size, [(rank, path), ...]) (rank None for a trace: its distributedInfo.rank,
    else its file name, decides), or None when `path` is not one. Raises ValueError for
    a bad top manifest."""
