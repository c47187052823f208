"""binder/ builds a working environment, and agrees with pyproject.toml.

The build itself (repo2docker's steps in a fresh virtual environment) is `binder_build.py`; it runs
in the background of the test run and these tests wait for it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.support import binder_build
from tests.support.binder_build import BinderEnv

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements(lines: list[str]) -> dict[str, SpecifierSet]:
    reqs: dict[str, SpecifierSet] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):  # pip's options: _options
            req = Requirement(line)
            name = canonicalize_name(req.name)
            assert name not in reqs, f"{req.name} is listed twice"
            reqs[name] = req.specifier
    return reqs


def _options(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.strip().startswith("-")]


BINDER_LINES = (BINDER / "requirements.txt").read_text().splitlines()
BINDER_REQS = _requirements(BINDER_LINES)
PROJECT_REQS = _requirements(PYPROJECT["project"]["dependencies"])
BUILD_REQS = _requirements(PYPROJECT["build-system"]["requires"])
TEST_REQS = _requirements(PYPROJECT["project"]["optional-dependencies"]["test"])


def test_binder_pins_the_cpu_torch_of_pyproject():
    assert str(BINDER_REQS["torch"]) == "==2.13.0"
    assert BINDER_REQS["torch"] == PROJECT_REQS["torch"] == BUILD_REQS["torch"]


def test_binder_takes_torch_from_pytorchs_cpu_wheel_index():
    """On PyPI torch 2.13.0's Linux wheel is the CUDA build: Binder names PyTorch's CPU index, as an
    extra index (an --index-url would hide PyPI, where the other packages are), and nothing else."""
    assert _options(BINDER_LINES) == [f"--extra-index-url {binder_build.CPU_INDEX}"]
    assert binder_build.CPU_INDEX == "https://download.pytorch.org/whl/cpu"


def test_binder_installs_every_runtime_dependency_with_the_same_versions():
    for name, spec in PROJECT_REQS.items():
        assert name in BINDER_REQS, f"binder/requirements.txt lacks {name}{spec} (pyproject dependency)"
        assert BINDER_REQS[name] == spec, f"{name}: binder has '{BINDER_REQS[name]}', pyproject '{spec}'"


def test_binder_installs_what_the_build_without_isolation_needs():
    for name, spec in BUILD_REQS.items():
        assert name in BINDER_REQS, f"binder/requirements.txt lacks {name}{spec} (build-system requires)"
        assert BINDER_REQS[name] == spec, f"{name}: binder has '{BINDER_REQS[name]}', pyproject '{spec}'"


def test_binder_jupyterlab_agrees_with_the_test_extra():
    assert BINDER_REQS["jupyterlab"] == TEST_REQS["jupyterlab"]


def test_binder_lists_nothing_pyproject_does_not_know():
    known = PROJECT_REQS.keys() | BUILD_REQS.keys() | TEST_REQS.keys()
    assert set(BINDER_REQS) <= known, f"not in pyproject.toml: {sorted(set(BINDER_REQS) - known)}"


def test_binder_runtime_is_a_python_pyproject_accepts():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-(\d+)\.(\d+)", runtime)
    assert match, runtime
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(f"{match[1]}.{match[2]}")


def test_binder_postbuild_is_an_executable_script_that_stops_on_errors():
    post = BINDER / "postBuild"
    assert os.access(post, os.X_OK)
    lines = post.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -e" in (line.strip() for line in lines)


@pytest.fixture(scope="module")
def binder_env() -> BinderEnv:  # the full build: its tests are in the slow tier
    reason = binder_build.can_build()
    if reason is not None:
        pytest.skip(reason)
    env = binder_build.BACKGROUND.result()
    print("\nbinder environment:", "; ".join(f"{k}: {v:.1f} s" for k, v in env.timings.items()))
    return env


@pytest.mark.slow
def test_binder_environment_imports_openreg_lab_from_the_notebooks_folder(binder_env: BinderEnv):
    code = (
        "import torch, openreg_lab, sys; "
        "x = torch.ones(3, device='openreg'); "
        "print(torch.__version__, openreg_lab.__file__, (x + x).sum().item(), sys.prefix)"
    )
    proc = binder_env.run(
        str(binder_env.venv / "bin" / "python"), "-c", code, cwd=binder_env.checkout / "notebooks"
    )
    assert proc.returncode == 0, proc.stderr
    version, path, total, prefix = proc.stdout.split()
    assert version.startswith("2.13.0")
    assert Path(path) == binder_env.checkout / "openreg_lab" / "__init__.py"
    assert float(total) == 6.0
    assert Path(prefix) == binder_env.venv


@pytest.mark.slow
def test_binder_environment_has_jupyterlab_and_the_views_dependencies(binder_env: BinderEnv):
    python = str(binder_env.venv / "bin" / "python")
    proc = binder_env.run(python, "-c", "import ipywidgets, plotly, anywidget, pandas, yaml")
    assert proc.returncode == 0, proc.stderr
    proc = binder_env.run(str(binder_env.venv / "bin" / "jupyter"), "lab", "--version")
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split(".")[0]) >= 4


def test_readme_binder_badge_opens_jupyterlab_on_the_first_notebook():
    readme = (ROOT / "README.md").read_text()
    urls = re.findall(r"https://mybinder\.org/v2/gh/[^)\s]+", readme)
    assert urls, "no Binder launch badge in the README"
    first = sorted((ROOT / "notebooks").glob("*.ipynb"))[0].name
    for url in urls:
        assert url.endswith(f"?urlpath=lab/tree/notebooks/{first}"), url
        # gh/<owner>/<repository>/<ref>: the project's GitHub home, not a placeholder to fill in.
        owner, repo, ref = url.removeprefix("https://mybinder.org/v2/gh/").split("?")[0].split("/")
        assert (owner, repo, ref) == ("openreg-lab", "openreg-lab", "HEAD"), url
