"""Reading the project's Markdown (README.md, docs/*.md) for the layout tests: the repository paths,
Notes and links a page names, and the Notes the code opens. Text only: no torch, no build."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The folders whose paths the pages name and the layout tests resolve.
TOP_FOLDERS = ("csrc", "openreg_lab", "tests", "benchmarks", "docs", "notebooks", "scripts")

# A path under one of TOP_FOLDERS, possibly with {a,b} alternatives, a * glob, a trailing / (a folder),
# or ::name (a test function in the file).
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP_FOLDERS) + r")/[\w./{},*-]*[\w}/*])(?:::(\w+))?")
# A file at the repository's root, named alone in backticks (`setup.py`, `pyproject.toml`).
ROOT_FILE = re.compile(r"`(\w[\w-]*\.(?:py|toml|cfg|ini))`")
NOTE = re.compile(r"Note \[([^\]]+)\]")
# "Note [X] in `path`" or "Note [X] (`path`)": the Note is written in that file.
NOTE_AT = re.compile(r"Note \[([^\]]+)\] (?:in |\()`([^`]+)`")
# The line that opens a Note (its heading), after a comment marker in C++, Python or JS.
NOTE_HEADING = re.compile(r"^\s*(?://+|#+|\*)?\s*Note \[([^\]]+)\]\s*(?::.*)?$")
# A Markdown link or image: [text](target).
LINK = re.compile(r"\]\(([^)\s]+)\)")


def flat(text: str) -> str:
    """``text`` with every run of whitespace as one space (names wrap across lines)."""
    return " ".join(text.split())


def expand(path: str) -> list[str]:
    """``a/{b,c}.h`` as ``[a/b.h, a/c.h]`` (one brace group at a time, nested left to right)."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    out = []
    for choice in match.group(1).split(","):
        out += expand(path[: match.start()] + choice + path[match.end() :])
    return out


def note_headings() -> dict[str, set[str]]:
    """Every Note opened in the code, with the files (relative to the root) that open it."""
    files = [ROOT / "_openreg_lab_autoload.py"]
    for pattern in (
        "csrc/**/*.h",
        "csrc/**/*.cpp",
        "openreg_lab/**/*.py",
        "openreg_lab/**/*.js",
        "scripts/*.py",
    ):
        files += ROOT.glob(pattern)
    found: dict[str, set[str]] = {}
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            m = NOTE_HEADING.match(line)
            if m:
                found.setdefault(m.group(1), set()).add(f.relative_to(ROOT).as_posix())
    return found


def missing_paths(text: str) -> list[str]:
    """The repository paths ``text`` names that do not exist (a glob matching nothing, a folder
    that is not one, a ``file::function`` without that function)."""
    missing = []
    for m in PATH.finditer(text):
        path, function = m.group(1), m.group(2)
        for one in expand(path):
            if "*" in one:
                if not list(ROOT.glob(one)):
                    missing.append(f"{one} (matches no file)")
                continue
            target = ROOT / one
            if one.endswith("/") and not target.is_dir():
                missing.append(f"{one} (no such folder)")
            elif not target.exists():
                missing.append(one)
            elif function is not None and not re.search(
                rf"^(?:async )?def {re.escape(function)}\(", target.read_text(encoding="utf-8"), re.M
            ):
                missing.append(f"{one}::{function} (no such function)")
    return sorted(set(missing))


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading's text."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of the headings of a Markdown text (outside code blocks)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", prose, flags=re.M)}


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file, or whose anchor in it, does not exist."""
    text = page.read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    broken = []
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target} (no such heading)")
    return broken
