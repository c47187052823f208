"""What torch's autoload of openreg-lab adds to `import torch`, in fresh processes, side by side.

Each round starts, in turn, a fresh interpreter that runs `import torch` with autoload off
(TORCH_DEVICE_BACKEND_AUTOLOAD=0), one with autoload on (openreg-lab's entry point registers the
device), and one that then loads the whole openreg_lab API (pandas, the recording layer, the views:
what `import openreg_lab` cost before it loaded its API on first use). Medians over the rounds.

- "import torch" is wall time in the child, the difference of the first two rows is what autoload
  adds as a whole (noisy: torch's own import varies by more on a busy machine);
- "inside autoload" is the time spent in the entry point itself (`_openreg_lab_autoload.seconds`),
  measured in the same children: the cost that does not drown in torch's own.

The children cache byte code as an installed package does (PYTHONDONTWRITEBYTECODE is dropped
for them; a first, discarded run writes the caches). The entry point is installed for them from this
tree (scripts/dev_install.py into a
temporary directory on PYTHONPATH), so the benchmark runs where openreg-lab is not installed too.

.venv/bin/python benchmarks/bench_autoload.py [rounds]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from _timing import fmt_time, print_table
from dev_install import REPO, install

CHILD = """
import sys, time
start = time.perf_counter()
import torch
took = time.perf_counter() - start
inside = getattr(sys.modules.get("_openreg_lab_autoload"), "seconds", None)
api = None
if sys.argv[1] == "api":
    start = time.perf_counter()
    import openreg_lab
    openreg_lab.trace  # loads the whole API
    api = time.perf_counter() - start
print(took, inside, api)
"""

CASES = {
    "autoload off": ("0", "torch"),
    "autoload on": ("1", "torch"),
    "autoload on, then the whole API": ("1", "api"),
}


def _run(autoload: str, what: str, path: str) -> tuple[float, float | None, float | None]:
    # As installed: byte-compiled modules are cached (this tree's in its __pycache__ directories).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD=autoload, PYTHONPATH=path)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, what], env=env, capture_output=True, text=True, timeout=300, check=True
    ).stdout.split()
    took, inside, api = (None if v == "None" else float(v) for v in out)
    assert took is not None
    return took, inside, api


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_autoload_") as site:
        install(Path(site))
        path = os.pathsep.join([site, str(REPO), os.environ.get("PYTHONPATH", "")])
        samples: dict[str, list[tuple[float, float | None, float | None]]] = {k: [] for k in CASES}
        _run("1", "api", path)  # warm-up: the byte-code caches and the page cache
        for _ in range(rounds):
            for name, (autoload, what) in CASES.items():
                samples[name].append(_run(autoload, what, path))

    def med(values: list[float | None]) -> str:
        present = [v for v in values if v is not None]
        return fmt_time(statistics.median(present)) if present else "-"

    rows = []
    base = statistics.median(s[0] for s in samples["autoload off"])
    for name, runs in samples.items():
        took = statistics.median(s[0] for s in runs)
        rows.append(
            [
                name,
                fmt_time(took),
                f"{took / base:.2f}x",
                med([s[1] for s in runs]),
                med([s[2] for s in runs]),
            ]
        )
    print(f"import torch in fresh processes, median of {rounds} interleaved rounds")
    print_table(["case", "import torch", "vs off", "inside autoload", "then the whole API"], rows)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
