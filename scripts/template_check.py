"""``make template-check``: the template builds and runs as a device without the lab.

Copies the folders a vendor copies (docs/porting.md) into a scratch tree, ``build/template/``: the C++
template (``csrc/runtime``, ``csrc/aten``, ``csrc/distributed``, the device's Python binding
``csrc/python/device``) and the Python package without the lab's recording and views layers; no
``csrc/trace``, ``csrc/coverage`` or lab binding is there to be found. It builds the template's own
extension there (``scripts/template_setup.py``), checks that the package imports it, and that the
lab is absent, then runs the device and operator tiers' tests listed in ``TESTS`` against it.

The scratch tree is kept between runs: files are copied with their times, so ninja recompiles only
what changed (a fresh clone, as in CI, compiles everything once). Times of each step are printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "template"
#: The C++ a vendor copies, under csrc/.
CSRC = ("runtime", "aten", "distributed", "python/device")
#: The Python package's parts that are the lab's: left out of the copy.
LAB_PACKAGES = {"recording", "views"}

# Note [The template's tests]
# The tests run against the template's build are the device and operator tiers' quick tests that use
# neither the recorder nor a coverage profile (nor explain() or coverage(), which read the recorder's
# dispatch tables), and start no process of their own: the device's registration, devices, streams
# and generators, moving modules, and the native kernels' parity with the CPU (elementwise,
# reductions, indexing, linear algebra, losses, softmax, layer norm, foreach, out= rules) plus the
# CPU fallback's minimal operators and a training step. They prove the device works with every hook
# null. What they leave to the lab's build: everything that records, profiles, or spawns, and each
# family's test_registered_and_listed (native_ops.yaml against the dispatcher: it reads the list
# through openreg_lab.native_ops, whose first use loads the lab's whole API, views included).
DESELECT = "not test_registered_and_listed"
TESTS = (
    "tests/device/test_module_to.py",
    "tests/device/test_rng.py",
    "tests/device/test_streams.py",
    "tests/operators/test_minimal_ops.py",
    "tests/operators/test_native_foreach.py",
    "tests/operators/test_native_indexing.py",
    "tests/operators/test_native_layer_norm.py",
    "tests/operators/test_native_linalg.py",
    "tests/operators/test_native_loss.py",
    "tests/operators/test_native_out_rules.py",
    "tests/operators/test_native_reduction.py",
    "tests/operators/test_native_softmax.py",
    "tests/operators/test_training.py",
)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _copy_tree(src: Path, dst: Path, skip: set[str]) -> None:
    """``src`` into ``dst`` (emptied first), file times kept, leaving out the names in ``skip``."""
    if dst.exists():
        shutil.rmtree(dst)

    def ignore(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n in skip or n == "__pycache__" or n.endswith(".so")]

    shutil.copytree(src, dst, ignore=ignore, copy_function=shutil.copy2)


def copy_template() -> None:
    """The scratch tree: the template's C++, the setup, and the package without the lab."""
    if (OUT / "csrc").exists():
        shutil.rmtree(OUT / "csrc")
    for folder in CSRC:
        _copy_tree(ROOT / "csrc" / folder, OUT / "csrc" / folder, set())
    _copy_tree(ROOT / "openreg_lab", OUT / "openreg_lab", LAB_PACKAGES)
    shutil.copy2(ROOT / "scripts" / "template_setup.py", OUT / "setup.py")


def unresolved_includes(tree: Path) -> dict[str, list[str]]:
    """The quoted includes of the tree's C++ that name no file of the tree (a lab header, say)."""
    found: dict[str, list[str]] = {}
    for path in sorted((tree / "csrc").rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        missing = [h for h in INCLUDE.findall(path.read_text()) if not (tree / "csrc" / h).exists()]
        if missing:
            found[str(path.relative_to(tree))] = missing
    return found


def _run(args: list[str], what: str) -> float:
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": f"{OUT}{os.pathsep}{ROOT}"}
    if subprocess.run(args, cwd=OUT, env=env).returncode != 0:
        sys.exit(f"template-check: {what} failed")
    return time.monotonic() - start


# Run in the scratch tree: the package found there is the template's, and the lab is not in it.
PROBE = """
import torch, openreg_lab
from openreg_lab import _C
assert _C.__file__.startswith(%r), _C.__file__
lab = [n for n in dir(_C) if n.startswith("_trace_") or n in ("set_profile", "profile_name")]
assert not lab, f"the template's extension binds the lab's {lab}"
for layer in %r:
    try:
        __import__("openreg_lab." + layer)
    except ImportError:
        pass
    else:
        raise AssertionError(f"openreg_lab.{layer} is importable: the lab is not absent")
x = torch.arange(6.0, device="openreg").reshape(2, 3)
assert (x * 2).sum().item() == 30.0 and str(x.device) == "openreg:0"
print("template-check: the template's openreg_lab._C runs without the lab:", _C.__file__)
"""


def main() -> None:
    start = time.monotonic()
    copy_template()
    if bad := unresolved_includes(OUT):
        sys.exit(f"template-check: the template includes headers it does not have (the lab's?): {bad}")
    build = _run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], "the template's build")
    _run([sys.executable, "-c", PROBE % (str(OUT), sorted(LAB_PACKAGES))], "the template's import")
    tests = [str(ROOT / t) for t in TESTS]
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={ROOT}"]
    run = _run(
        [*pytest, "-c", str(ROOT / "pyproject.toml"), "--durations=5", "-k", DESELECT, *tests],
        "the template's tests",
    )
    total = time.monotonic() - start
    print(f"template-check: build {build:.0f} s, tests {run:.0f} s, total {total:.0f} s")


if __name__ == "__main__":
    main()
