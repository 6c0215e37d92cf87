"""Never imports torch: must run exactly as without tensight."""

import sys

print("no torch here", sum(range(10)))
print("modules:", "torch" in sys.modules, "tensight" in sys.modules)
