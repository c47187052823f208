"""Every tutorial notebook is stored clean, runs top to bottom without an error or a warning, shows
our views as widgets (with a text/html fallback), and its exercise's check cell asks for an answer
until the exercise is done, then accepts the solution. Each notebook is executed once for all of it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

import openreg_lab
from tests.support.notebook_views import ALL_VIEW_CLASSES, NOTEBOOKS, VIEWS

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
by_name = pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == sorted(VIEWS)
    assert [p.name[:3] for p in NOTEBOOKS] == [f"{i:02}-" for i in range(1, 11)]


@by_name
def test_notebook_is_stored_without_outputs(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@by_name
def test_notebook_has_a_title_cell_saying_what_and_how_long(path: Path):
    first = nbformat.read(path, as_version=4).cells[0]
    assert first.cell_type == "markdown"
    assert re.match(rf"# {int(path.name[:2])}\. ", first.source)
    assert "What you will learn" in first.source
    assert re.search(r"\*\*Time:\*\* about \d+ minutes", first.source)


@by_name
def test_notebook_ends_with_an_exercise_and_its_check(path: Path):
    cells = nbformat.read(path, as_version=4).cells
    exercise, check = cells[-2], cells[-1]
    assert cells[-3].cell_type == "markdown" and cells[-3].source.startswith("## Exercise")
    assert exercise.metadata.get("tags") == ["exercise"]
    assert exercise.metadata["openreg_lab"]["solution"].strip()
    assert check.metadata.get("tags") == ["check"]


def _execute(nb: Any, path: Path) -> None:
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()


def _outputs(nb: Any) -> list[Any]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _view_classes(state: dict[str, Any], model_id: str) -> set[str]:
    """The CSS classes of a widget model and of every widget it contains."""
    classes: set[str] = set()
    todo, seen = [model_id], set()
    while todo:
        mid = todo.pop()
        if mid in seen or mid not in state:
            continue
        seen.add(mid)
        values = state[mid]["state"]
        classes.update(values.get("_dom_classes", ()))
        for v in values.values():
            for item in v if isinstance(v, list) else [v]:
                if isinstance(item, str) and item.startswith("IPY_MODEL_"):
                    todo.append(item.removeprefix("IPY_MODEL_"))
    return classes


@dataclass
class Executed:
    """A notebook run the way a learner runs it: every cell top to bottom as stored, then the
    exercise filled in with its solution and the check cell run again, in the same kernel."""

    path: Path
    nb: Any
    first_check: str  # what the check cell printed for the exercise as stored (not yet answered)
    second_check: str  # what it printed after the solution


def _printed(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.fixture(scope="module", params=NOTEBOOKS, ids=lambda p: p.name)
def executed(request: pytest.FixtureRequest) -> Executed:
    path: Path = request.param
    nb = nbformat.read(path, as_version=4)
    exercise, check = nb.cells[-2], nb.cells[-1]
    solution = nbformat.v4.new_code_cell(exercise.metadata["openreg_lab"]["solution"])
    again = nbformat.v4.new_code_cell(check.source)
    nb.cells += [solution, again]
    _execute(nb, path)
    return Executed(path, nb, _printed(check), _printed(again))


def test_notebook_runs(executed: Executed):
    nb = executed.nb
    outputs = _outputs(nb)
    errors = [o for o in outputs if o.output_type == "error"]
    assert errors == []
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert stderr == [], "warnings or other stderr output:\n" + "\n".join(stderr)

    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    assert state, "no widget state saved: the notebook displayed no widget"
    shown: set[str] = set()
    for o in outputs:
        if o.output_type in ("execute_result", "display_data") and WIDGET_VIEW in o.data:
            model_id = o.data[WIDGET_VIEW]["model_id"]
            assert model_id in state, "a widget output whose model is not in the saved widget state"
            classes = _view_classes(state, model_id)
            shown |= classes
            if set(state[model_id]["state"].get("_dom_classes", ())) & ALL_VIEW_CLASSES:
                assert "text/html" in o.data, f"{classes & ALL_VIEW_CLASSES}: no text/html fallback"
    missing = set(VIEWS[executed.path.name]) - shown
    assert not missing, f"views not in the outputs: {sorted(missing)}"


def test_notebook_exercise_check_waits_for_an_answer_then_accepts_the_solution(executed: Executed):
    assert executed.first_check.startswith("Your turn:"), executed.first_check
    assert executed.second_check.startswith("✓ Correct"), executed.second_check


def test_the_example_fallback_is_a_kernel_a_profile_takes_away(executed: Executed):
    """openreg has a cumsum kernel: the tour and notebook 02 show a CPU fallback by taking
    it away with a backend profile, as on a backend without it, not by leaving the op unimplemented."""
    if executed.path.name not in ("01-tour.ipynb", "02-dispatch-keys.ipynb"):
        pytest.skip("no example fallback of cumsum in this notebook")
    assert {"aten::cumsum", "aten::cumsum.out"} <= set(openreg_lab.native_ops())
    printed = "".join(_printed(c) for c in executed.nb.cells if c.cell_type == "code")
    if executed.path.name == "01-tour.ipynb":
        assert "aten::cumsum.out has no openreg kernel in the backend profile 'custom'" in printed
    else:  # the exercise's answer, checked against coverage(profile=without_cumsum)
        assert "'aten::cumsum.out': 'fallback'" in executed.second_check


def test_notebook_10_measures_what_it_teaches(executed: Executed):
    """Notebook 10's prose holds on its own run: the peak's categories sum to the allocator's peak,
    checkpointing lowers the peak and the activations live at once, the out-of-memory error is
    raised, explained by category and the limit removed, and _memory_viz reads the allocator's sizes."""
    if executed.path.name != "10-where-memory-goes.ipynb":
        pytest.skip("notebook 10's measurements")
    printed = "".join(_printed(c) for c in executed.nb.cells if c.cell_type == "code")

    def found(pattern: str) -> tuple[str, ...]:
        match = re.search(pattern, printed)
        assert match, f"notebook 10 printed nothing like {pattern!r}:\n{printed}"
        return match.groups()

    live, allocator = found(r"live at the peak: ([\d.]+) MiB; the allocator's peak: ([\d.]+) MiB")
    assert live == allocator and float(live) > 0
    assert found(r"largest category: (\w+)") == ("activation",)
    plain, ckpt = map(float, found(r"\npeak: +([\d.]+) +([\d.]+) MiB"))
    assert ckpt < plain
    plain_act, ckpt_act = map(float, found(r"most activations live: +([\d.]+) +([\d.]+) MiB"))
    assert ckpt_act * 4 < plain_act  # 4 blocks: each keeps its input, not its 4x wider insides
    assert "torch.OutOfMemoryError: openreg:0 out of memory: tried to allocate" in printed
    assert "limit now: None\n" in printed
    assert re.search(r"\nOut of memory on openreg:0 asking .+ allocated: [\d.]+ [KM]iB activations", printed)
    allocated, reserved = found(r"the allocator then: (\S+) allocated, (\S+) reserved")
    assert found(r"total_reserved: (\S+)") == (reserved,)
    assert found(r"\d+ lines, (\S+) active_allocated") == (allocated,)
    assert re.search(r"\n\d+ entries\na = cudaMalloc\(", printed)


def test_make_lab_opens_jupyterlab_on_the_notebooks_after_the_set_up():
    import subprocess

    import tomllib

    root = Path(__file__).resolve().parents[2]
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab"], cwd=root, capture_output=True, text=True, check=True
    )
    assert dry.stdout.splitlines() == [
        "bash scripts/setup.sh",
        ".venv/bin/python -m jupyter lab --ServerApp.root_dir=notebooks",
    ]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["lab"] == ["jupyterlab>=4.2", "ipykernel"]
    assert "make lab" in (root / "README.md").read_text().split("\n\n")[1]  # the README's first block


@by_name
def test_notebook_reads_nothing_from_the_source_tree(path: Path):
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code":
            for needle in ("__file__", "csrc", "parents["):
                assert needle not in cell.source, f"{path.name}: {needle!r} in {cell.source[:80]!r}"


def test_notebook_05_quotes_the_kernel_as_it_is_in_csrc():
    root = Path(__file__).resolve().parents[2]
    nb = nbformat.read(root / "notebooks" / "05-writing-a-kernel.ipynb", as_version=4)
    quoted = next(c.source for c in nb.cells if c.cell_type == "markdown" and "```cpp" in c.source)
    code = quoted.split("```cpp\n")[1].split("```")[0].splitlines()
    source = (root / "csrc" / "aten" / "native" / "Activation.cpp").read_text().splitlines()
    lines = [line for line in code if line.strip() and not line.startswith("// registered")]
    assert len(lines) > 15
    for line in lines:
        assert line in source, f"notebook 05 quotes a line csrc/aten/native/Activation.cpp lacks: {line!r}"


def test_a_notebook_runs_from_an_installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import shutil

    import openreg_lab

    # An installed copy of the package, without the source tree around it (no csrc/, no tests/).
    site = tmp_path / "site"
    shutil.copytree(Path(openreg_lab.__file__).parent, site / "openreg_lab",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", str(site))
    work = tmp_path / "work"
    work.mkdir()
    path = NOTEBOOKS[4]
    assert path.name == "05-writing-a-kernel.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("import openreg_lab; print(openreg_lab.__file__)"))
    _execute(nb, work / path.name)
    assert _printed(nb.cells[1]).strip() == str(site / "openreg_lab" / "__init__.py")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
