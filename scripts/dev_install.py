"""The development install of openreg-lab (run by scripts/setup.sh): this source tree, importable and
known to the environment as the installed distribution ``openreg-lab``.

Usage: python scripts/dev_install.py [SITE_DIR]   (default: the running interpreter's site-packages)

It writes two things into SITE_DIR, both rewritten on each run (idempotent):

- ``openreg_lab_dev.pth``: the source tree on ``sys.path``, so the package, the autoload module and
  the extension built in place (``setup.py build_ext --inplace``) are imported from here;
- ``openreg_lab-<version>.dist-info``: the metadata read from ``pyproject.toml``, entry points
  included. torch's autoload (group ``torch.backends``) and Dynamo's backends
  (``torch_dynamo_backends``) look entry points up in installed metadata, so a ``.pth`` file alone
  does not make ``import torch`` register openreg. The ``RECORD`` lists both, so ``pip uninstall
  openreg-lab`` removes them; ``direct_url.json`` marks the install editable, as pip's own does.

Unlike ``pip install -e .``, nothing is built (the extension is built in place by setup.sh, once,
incrementally) and nothing else is installed.
"""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
PTH = "openreg_lab_dev.pth"


def _metadata(project: dict) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '')}",
    ]
    lines += [f"Requires-Dist: {req}" for req in project.get("dependencies", [])]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {req}; extra == "{extra}"' for req in reqs]
    return "\n".join(lines) + "\n"


def _entry_points(project: dict) -> str:
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    out = []
    for group, entries in groups.items():
        if entries:
            out.append(f"[{group}]")
            out += [f"{name} = {target}" for name, target in entries.items()]
            out.append("")
    return "\n".join(out)


def install(site: Path, repo: Path = REPO) -> Path:
    """Write the ``.pth`` file and the dist-info for ``repo`` into ``site``; return the dist-info."""
    project = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    stem = project["name"].replace("-", "_")
    dist = site / f"{stem}-{project['version']}.dist-info"
    site.mkdir(parents=True, exist_ok=True)
    for old in site.glob(f"{stem}-*.dist-info"):
        if old != dist:  # an earlier version's metadata
            shutil.rmtree(old)
    dist.mkdir(exist_ok=True)
    (site / PTH).write_text(f"{repo}\n", encoding="utf-8")
    files = {
        "METADATA": _metadata(project),
        "entry_points.txt": _entry_points(project),
        "INSTALLER": "openreg-lab scripts/dev_install.py\n",
        "direct_url.json": json.dumps({"url": repo.as_uri(), "dir_info": {"editable": True}}) + "\n",
    }
    for name, text in files.items():
        (dist / name).write_text(text, encoding="utf-8")
    record = [PTH, *(f"{dist.name}/{name}" for name in files), f"{dist.name}/RECORD"]
    (dist / "RECORD").write_text("".join(f"{path},,\n" for path in record), encoding="utf-8")
    return dist


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(sysconfig.get_paths()["purelib"])
    print(f"setup: development install of {REPO} in {install(target)}")
