"""The README and docs/ stay true to the repository and readable: the README a newcomer reads (its
length, the map of docs/ pages), every link, path and Note a page names exists, and no tracker
numbers in code, tests or docs (they mean nothing to a reader of a copy of the repository)."""

from __future__ import annotations

import re

import pytest

from tests.support.doc_text import NOTE, ROOT, anchors, broken_links, flat, missing_paths, note_headings, slug

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
#: The parts the README's map must name, each a page of docs/.
PARTS = (
    "device", "operators", "recording", "views", "cli", "compile", "distributed", "memory",
    "benchmarks", "porting",
)  # fmt: skip
#: Our issue tracker's numbers as prose writes them ("issue 30", "Issue 22, point 1"); other
#: projects' issues ("pytorch issue 116255", "CPython issues 99110") are not ours.
TRACKER = re.compile(r"(?<!pytorch )(?<!CPython )\b[Ii]ssues? \d{1,3}\b(?!\d)")


def test_the_readme_is_short_and_maps_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250, "README.md: at most 250 lines; move detail to a docs/ page"
    linked = set(re.findall(r"\]\(docs/([\w-]+)\.md\)", text))
    assert set(PARTS) <= {p.stem for p in PAGES}, "docs/ lacks a page of a part"
    assert linked == {p.stem for p in PAGES}, (
        f"README.md's map and docs/ differ: {linked ^ {p.stem for p in PAGES}}"
    )
    assert "```bash\nmake demo" in text.split("\n\n", 2)[1]  # the two commands come first


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_path_and_note_a_page_names_exists(page):
    text = page.read_text(encoding="utf-8")
    assert broken_links(page) == [], f"{page.name}: broken links"
    assert missing_paths(text) == [], f"{page.name}: paths that do not exist"
    prose = re.sub("[│├└─]", " ", text)  # a Note's name wraps inside the repository map's tree
    named = {flat(n) for n in NOTE.findall(flat(prose))} - {"..."}
    missing = sorted(named - note_headings().keys())
    assert not missing, f"{page.name} names Notes no comment opens (grep 'Note \\['): {missing}"


def test_the_link_checker_sees_a_broken_link_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text(
        "# Title here\n\n[x](b.md) [y](#title-here) [z](#nowhere) [w](a.md#title-here)\n"
    )
    assert broken_links(tmp_path / "a.md") == ["b.md", "#nowhere (no such heading)"]
    assert slug("torch.compile on openreg") == "torchcompile-on-openreg"
    assert anchors("# A\n```\n# not a heading\n```\n## B c\n") == {"a", "b-c"}


def test_no_tracker_numbers_in_code_tests_or_docs():
    files = [README, *PAGES, ROOT / "tests" / "README.md", ROOT / "_openreg_lab_autoload.py"]
    for folder, patterns in {
        "openreg_lab": ("*.py", "*.js", "*.yaml"), "csrc": ("*.h", "*.cpp"), "tests": ("*.py",),
        "benchmarks": ("*.py",), "notebooks": ("*.ipynb",), "scripts": ("*.py", "*.sh"),
    }.items():  # fmt: skip
        for pattern in patterns:
            files += (ROOT / folder).rglob(pattern)
    found = [
        f"{f.relative_to(ROOT)}: {m.group(0)}"
        for f in files
        if f != ROOT / "tests" / "layout" / "test_docs.py"
        for m in TRACKER.finditer(f.read_text(encoding="utf-8"))
    ]
    assert found == [], "say what the code does, not which issue asked for it:\n" + "\n".join(found)


def test_the_tracker_pattern_sees_ours_and_not_others():
    assert TRACKER.findall("(issue 30) Issue 22, point 1; issues 13") == ["issue 30", "Issue 22", "issues 13"]
    assert TRACKER.findall("pytorch issue 116255; CPython issues 99110; issue117215") == []
