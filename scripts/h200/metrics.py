"""Print the comma-separated ncu metrics `tensight run --hardware` collects, as listed in
crates/tensight-cli/src/hardware.rs (for the device scripts' direct ncu calls)."""

import re
from pathlib import Path

src = (Path(__file__).resolve().parents[2] / "crates/tensight-cli/src/hardware.rs").read_text()
block = src[src.index("METRICS: &[&str] = &["):]
print(",".join(re.findall(r'"([a-z0-9_.]+)"', block[: block.index("];")])))
