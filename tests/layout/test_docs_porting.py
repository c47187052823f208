"""docs/porting.md stays true to the repository: every path and Note it names exists, and the README links it.

The guide tells a backend author which files to read and replace and which tests to run; a file that
moved or a Note renamed would send them nowhere. These checks read text only (no torch, no build).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.doc_text import NOTE, NOTE_AT, PATH, ROOT_FILE, expand, flat, missing_paths, note_headings

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "porting.md"


def _guide() -> str:
    assert GUIDE.is_file(), f"{GUIDE.relative_to(ROOT)} is missing"
    return GUIDE.read_text(encoding="utf-8")


def _named_paths() -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in PATH.finditer(_guide())]


def test_the_guide_names_the_files_of_every_step():
    paths = {p for p, _ in _named_paths()}
    # One folder of each part the guide walks through, and the tests that check them.
    for expected in (
        "csrc/runtime/",
        "csrc/aten/",
        "csrc/aten/Registration.h",
        "csrc/runtime/Seam.h",
        "csrc/python/device/Module.cpp",
        "scripts/template_check.py",
        "scripts/template_setup.py",
        "csrc/distributed/",
        "openreg_lab/device/_inductor.py",
        "openreg_lab/device/_distributed.py",
        "openreg_lab/device/_sharing.py",
        "tests/device/test_registration.py",
        "tests/compile/test_compile.py",
        "tests/distributed/test_distributed.py",
    ):
        assert expected in paths, f"docs/porting.md no longer names {expected}"
    assert len(paths) >= 60, f"only {len(paths)} paths found: has the path pattern stopped matching?"


def test_every_path_the_guide_names_exists():
    missing = missing_paths(_guide())
    assert not missing, "docs/porting.md names paths that do not exist: " + ", ".join(missing)


def test_every_root_file_the_guide_names_exists():
    names = set(ROOT_FILE.findall(_guide()))
    assert {"pyproject.toml", "_openreg_lab_autoload.py"} <= names
    missing = sorted(n for n in names if not (ROOT / n).is_file())
    assert not missing, f"docs/porting.md names files absent from the repository's root: {missing}"


def test_every_note_the_guide_names_is_written_in_the_code():
    # "Note [...]" in the guide's introduction stands for any Note.
    named = {flat(n) for n in NOTE.findall(flat(_guide()))} - {"..."}
    assert len(named) >= 25, f"only {len(named)} Notes found in docs/porting.md"
    headings = note_headings()
    missing = sorted(named - headings.keys())
    assert not missing, f"docs/porting.md names Notes no comment opens (grep 'Note \\['): {missing}"


def test_a_note_placed_in_a_file_is_written_in_that_file():
    headings = note_headings()
    placed = NOTE_AT.findall(flat(_guide()))
    assert len(placed) >= 5
    wrong = [
        f"Note [{name}] is not in {path} but in {sorted(headings.get(name, ())) or 'no file'}"
        for name, path in placed
        if path in {p for p, _ in _named_paths()} and path not in headings.get(name, ())
    ]
    assert not wrong, "; ".join(wrong)


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("read `csrc/runtime/Stream.h` first", [("csrc/runtime/Stream.h", None)]),
        ("`csrc/distributed/Agreement.{h,cpp}`", [("csrc/distributed/Agreement.{h,cpp}", None)]),
        ("run tests/test_compile.py::test_x -q", [("tests/test_compile.py", "test_x")]),
        ("see `openreg_lab/device/`.", [("openreg_lab/device/", None)]),
        ("the `tests/test_native_*.py` files", [("tests/test_native_*.py", None)]),
        ("torch/csrc/distributed and my-openreg_lab/x", []),
    ],
)
def test_the_path_pattern_reads_what_the_guide_writes(text, paths):
    assert [(m.group(1), m.group(2)) for m in PATH.finditer(text)] == paths
    assert expand("a/B.{h,cpp}") == ["a/B.h", "a/B.cpp"]


def test_the_readme_links_the_guide():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # A Markdown link outside code blocks, so that it renders on GitHub.
    prose = re.sub(r"^```.*?^```", "", readme, flags=re.S | re.M)
    assert re.search(r"\]\(docs/porting\.md\)", prose), "README.md does not link docs/porting.md"
