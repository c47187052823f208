"""binder/ builds a working environment, and agrees with pyproject.toml.

The build test follows repo2docker's steps for a `requirements.txt` environment: a fresh virtual
environment, `pip install -r binder/requirements.txt`, then `binder/postBuild` from the root of a
clean checkout (the files git tracks). pip resolves `torch==2.13.0` the way `make test` does, from
the machine's pip configuration (here a local wheel directory, `find-links` in /etc/pip.conf).

It is kept cheap without skipping a step: the environment is built once per run (a module-scoped
fixture) under build/binder/, and the checkout's ninja build directory (build/ inside the copy)
survives between runs, so a second run recompiles only what changed. The virtual environment and
the checkout's sources are made afresh every time. build/binder/timings.txt has the timings.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements(lines: list[str]) -> dict[str, SpecifierSet]:
    reqs: dict[str, SpecifierSet] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            name = canonicalize_name(req.name)
            assert name not in reqs, f"{req.name} is listed twice"
            reqs[name] = req.specifier
    return reqs


BINDER_REQS = _requirements((BINDER / "requirements.txt").read_text().splitlines())
PROJECT_REQS = _requirements(PYPROJECT["project"]["dependencies"])
BUILD_REQS = _requirements(PYPROJECT["build-system"]["requires"])
TEST_REQS = _requirements(PYPROJECT["project"]["optional-dependencies"]["test"])


def test_binder_pins_the_cpu_torch_of_pyproject():
    assert str(BINDER_REQS["torch"]) == "==2.13.0"
    assert BINDER_REQS["torch"] == PROJECT_REQS["torch"] == BUILD_REQS["torch"]


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


@dataclass
class BinderEnv:
    venv: Path
    checkout: Path
    env: dict[str, str]
    timings: dict[str, float]

    def run(self, *cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cmd, cwd=cwd or self.checkout, env=self.env, capture_output=True, text=True, timeout=900
        )


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def _fresh_checkout(dest: Path) -> None:
    """The tracked files at dest, like a clone; keeps only dest/build (ninja's objects)."""
    if dest.exists():
        for entry in dest.iterdir():
            if entry.name != "build":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for rel in _tracked_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)  # keeps mtimes: ninja rebuilds only what changed


@pytest.fixture(scope="module")
def binder_env() -> BinderEnv:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the files a clone would have)")
    work = ROOT / "build" / "binder"
    work.mkdir(parents=True, exist_ok=True)
    venv, checkout = work / "venv", work / "checkout"
    timings: dict[str, float] = {}

    def step(name: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        timings[name] = time.monotonic() - start
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"

    start = time.monotonic()
    _fresh_checkout(checkout)
    timings["checkout"] = time.monotonic() - start
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    step("venv", [sys.executable, "-m", "venv", "--clear", str(venv)], work, env)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    step(
        "pip install -r binder/requirements.txt",
        [*pip, "install", "-r", "binder/requirements.txt"],
        checkout,
        env,
    )
    step("binder/postBuild", ["bash", "binder/postBuild"], checkout, env)
    lines = [f"{name}: {seconds:.1f} s" for name, seconds in timings.items()]
    (work / "timings.txt").write_text("\n".join(lines) + "\n")
    print("\nbinder environment:", "; ".join(lines))
    return BinderEnv(venv, checkout, env, timings)


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
