"""The tests' own layout (tests/README.md): every test file in a tier folder, the helpers in one support
package imported one way (Note [One way to import the tests' helpers] in tests/support/__init__.py)."""

from __future__ import annotations

import ast
import json
import pickle
import re
from pathlib import Path

from tests.support import distributed_pool, ipc_peer

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
SUPPORT = TESTS / "support"
NOT_TIERS = {"support", "__pycache__"}


def _tiers() -> list[str]:
    return sorted(p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in NOT_TIERS)


def _python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "fixtures" not in p.parts)


def _readme_tiers() -> list[str]:
    """The folders named in the first cell of each row of tests/README.md's table of tiers."""
    rows = re.findall(r"^\| `(\w+)/` \|", (TESTS / "README.md").read_text(), flags=re.M)
    return sorted(rows)


def test_every_test_file_is_in_a_tier_folder():
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert flat == [], f"{flat}: move each into the tier folder of what it tests (tests/README.md)"
    for tier in _tiers():
        assert list((TESTS / tier).glob("test_*.py")), f"tests/{tier}/ holds no test file"
    assert list(SUPPORT.glob("test_*.py")) == [], "tests/support/ holds helpers only, no tests"


def test_helpers_live_only_in_the_support_package():
    stray = [
        str(p.relative_to(ROOT))
        for p in _python_files(TESTS)
        if not p.name.startswith("test_") and p.name != "conftest.py" and SUPPORT not in p.parents
    ]
    assert stray == [], f"{stray}: helpers belong in tests/support/ (imported as tests.support.<module>)"


def test_no_init_files_and_unique_test_names():
    # pytest imports each test file under its bare name (no __init__.py): two equal names collide.
    inits = [str(p.relative_to(ROOT)) for p in TESTS.rglob("__init__.py") if SUPPORT not in p.parents]
    assert inits == [], f"{inits}: remove them (see tests/support/__init__.py)"
    names = [p.name for p in TESTS.rglob("test_*.py") if "fixtures" not in p.parts]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_helpers_are_imported_one_way():
    # The bare names of the helpers, their names before the move, and the conftests.
    bare = {p.stem for p in SUPPORT.glob("*.py")} - {"__init__"} | {"conftest", "harness", "_parity"}
    wrong = []
    for path in _python_files(TESTS, ROOT / "scripts", ROOT / "benchmarks"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                # tests.support.* or a test module of a tier (tests.operators.test_opinfo), nothing else.
                outside = name.startswith("tests.") and not re.match(
                    r"tests\.(support\b|\w+\.test_\w+$)", name
                )
                if name.split(".")[0] in bare or outside:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert wrong == [], "import the helpers as tests.support.<module>:\n" + "\n".join(wrong)


def test_child_processes_unpickle_the_helpers_by_their_full_name():
    # spawn and forkserver children import the target's module by the name pickled here.
    assert distributed_pool._serve.__module__ == "tests.support.distributed_pool"
    assert b"tests.support.ipc_peer" in pickle.dumps(ipc_peer.serve)
    assert b"tests.support.ipc_peer" in pickle.dumps(ipc_peer.Batches())


def test_the_readme_of_tiers_names_every_folder():
    assert _readme_tiers() == _tiers(), "tests/README.md's table of tiers and the folders of tests/ differ"
    assert "tests/README.md" in (ROOT / "README.md").read_text()


#: Where the project names test files by path (docs, comments, messages).
MENTIONS = (
    "README.md",
    "docs",
    "csrc",
    "openreg_lab",
    "scripts",
    "benchmarks",
    "binder",
    "tests",
    "setup.py",
    "pyproject.toml",
    "Makefile",
    "notebooks",
)
#: A test file's path in prose: tests/..../name.py, a * glob allowed (not /root/tests/... examples).
MENTION = re.compile(r"(?<![\w/.-])(tests/[\w/*-]+\.py)")
#: Files whose mentions are examples of the pattern, not paths to resolve.
EXAMPLES = {"tests/layout/test_docs_porting.py", "tests/layout/test_tiers.py", "openreg_lab/pytest_plugin.py"}


def test_every_test_path_the_project_names_exists():
    missing = []
    for top in MENTIONS:
        base = ROOT / top
        for path in [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()):
            rel = str(path.relative_to(ROOT))
            if rel in EXAMPLES or "fixtures" in path.parts or path.suffix in {".so", ".png", ".pyc"}:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            missing += [f"{rel}: {m}" for m in MENTION.findall(text) if not list(ROOT.glob(m))]
    assert missing == [], "paths of test files that do not exist (moved? see tests/README.md):\n" + "\n".join(
        sorted(set(missing))
    )


VISION = ("torchvision", "timm")  # no CPU build of torchvision beside torch on PyPI (README)


def _vision_imports(code: str) -> list[str]:
    """The modules of :data:`VISION` that ``code`` imports (``import``, ``from ... import``, or a
    name given to ``importlib.import_module`` / ``find_spec`` / ``importorskip``)."""
    found = []
    for node in ast.walk(ast.parse(code)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee in ("import_module", "find_spec", "importorskip", "__import__"):
                names = [str(node.args[0].value)]
        found += [n for n in names if n.split(".")[0] in VISION]
    return found


def test_nothing_needs_torchvision():
    sources = {
        p: p.read_text()
        for p in _python_files(ROOT / "openreg_lab", TESTS, ROOT / "benchmarks", ROOT / "scripts")
    }
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        sources[notebook] = "\n".join(
            line for cell in code for line in cell.splitlines() if not line.startswith(("%", "!"))
        )
    assert len(sources) > 100 and any(p.suffix == ".ipynb" for p in sources)
    candidates = {p: text for p, text in sources.items() if any(name in text for name in VISION)}
    offenders = {
        str(p.relative_to(ROOT)): found for p, text in candidates.items() if (found := _vision_imports(text))
    }
    assert offenders == {}, "openreg-lab and its tests run without torchvision (README)"


def test_the_torchvision_check_sees_an_import():
    code = "import torchvision.models\nfrom timm import create_model\nfind_spec('timm')\nimport torch"
    assert _vision_imports(code) == ["torchvision.models", "timm", "timm"]
    assert _vision_imports("from .torchvision import x\nimport torchvisionary") == []
