"""Acting on a module when it is imported (``openreg_lab/device/_after_import.py``), on small
modules written for each test: what PyTorch Lightning's adaptation to openreg stands on."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from openreg_lab.device import _after_import

ACTIONS = """
CALLS = []

def record(module):
    CALLS.append((module.__name__, module.VALUE, type(module.__loader__).__name__))

def boom(module):
    raise ValueError("boom\\nsecond line")
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """A fresh package ``pkg_<test>`` with a module ``mod`` (VALUE = 1), an actions module, and
    fresh watch and waiting tables; everything imported is forgotten after the test."""
    name = f"pkg_{request.node.name.split('[')[0][5:]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "mod.py").write_text("VALUE = 1\n")
    (tmp_path / f"{name}_actions.py").write_text(ACTIONS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_after_import, "_watched", {})
    monkeypatch.setattr(_after_import, "_waiting", {})
    before = set(sys.modules)
    yield name
    for module in set(sys.modules) - before:
        del sys.modules[module]


def test_an_action_runs_once_right_after_the_module_with_the_module_s_own_loader(modules):
    _after_import.when_imported(f"{modules}.mod", f"{modules}_actions:record")
    assert f"{modules}_actions" not in sys.modules  # named, not imported, until the module is
    module = importlib.import_module(f"{modules}.mod")
    actions = sys.modules[f"{modules}_actions"]
    assert actions.CALLS == [(f"{modules}.mod", 1, "SourceFileLoader")]
    assert type(module.__spec__.loader).__name__ == "SourceFileLoader"
    del sys.modules[f"{modules}.mod"]
    importlib.import_module(f"{modules}.mod")  # imported again: the action ran once
    assert actions.CALLS == [(f"{modules}.mod", 1, "SourceFileLoader")]
    assert _after_import._watched == {}


def test_a_module_already_imported_is_acted_on_at_once(modules):
    importlib.import_module(f"{modules}.mod")
    _after_import.when_imported(f"{modules}.mod", f"{modules}_actions:record")
    assert sys.modules[f"{modules}_actions"].CALLS == [(f"{modules}.mod", 1, "SourceFileLoader")]


def test_a_failing_action_warns_once_and_the_import_goes_on(modules):
    _after_import.when_imported(f"{modules}.mod", f"{modules}_actions:boom")
    with pytest.warns(RuntimeWarning) as said:
        module = importlib.import_module(f"{modules}.mod")
    assert module.VALUE == 1
    assert [str(w.message) for w in said] == [
        f"openreg-lab could not adapt {modules}.mod to openreg ({modules}_actions:boom: ValueError: boom); "
        f"{modules}.mod works as it would without openreg-lab"
    ]


def test_a_module_being_imported_when_it_is_watched_is_said(modules, tmp_path):
    (tmp_path / modules / "mod.py").write_text(
        "from openreg_lab.device import _after_import\n"
        f"_after_import.when_imported(__name__, '{modules}_actions:record')\nVALUE = 1\n"
    )
    with pytest.warns(RuntimeWarning, match="it was being imported when openreg-lab loaded"):
        importlib.import_module(f"{modules}.mod")
    assert f"{modules}_actions" not in sys.modules  # said instead of acted on half a module


def test_a_watched_module_that_is_missing_or_fails_is_acted_on_when_it_imports(modules, tmp_path):
    _after_import.when_imported(f"{modules}.absent", f"{modules}_actions:record")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{modules}.absent")
    (tmp_path / modules / "absent.py").write_text("raise ImportError('not yet')\n")
    importlib.invalidate_caches()
    with pytest.raises(ImportError, match="not yet"):
        importlib.import_module(f"{modules}.absent")
    assert f"{modules}_actions" not in sys.modules  # no action for a failed import
    (tmp_path / modules / "absent.py").write_text("VALUE = 2\n")
    importlib.invalidate_caches()
    importlib.import_module(f"{modules}.absent")
    assert sys.modules[f"{modules}_actions"].CALLS == [(f"{modules}.absent", 2, "SourceFileLoader")]


def test_an_action_module_that_imports_what_it_watches_acts_at_its_end(modules, tmp_path):
    # As _lightning_pytorch.py imported before Lightning: its own import of the watched module runs
    # the watch while it is half-made, so the action waits for its done(__name__).
    (tmp_path / f"{modules}_self.py").write_text(
        f"import {modules}.mod\n"
        "from openreg_lab.device import _after_import\n"
        "CALLS = []\n\n"
        "def record(module):\n    CALLS.append((module.__name__, len(CALLS)))\n\n"
        "_after_import.done(__name__)\n"
    )
    _after_import.when_imported(f"{modules}.mod", f"{modules}_self:record")
    actions = importlib.import_module(f"{modules}_self")
    assert actions.CALLS == [(f"{modules}.mod", 0)]
    assert _after_import._waiting == {}
