"""torch's autoload of openreg-lab (the ``torch.backends`` entry point), in fresh interpreters.

The entry points are installed for the children from this tree by ``scripts/dev_install.py`` (what
``scripts/setup.sh`` runs on the venv) into a temporary directory on their PYTHONPATH.
"""

from __future__ import annotations

import configparser
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.processes import run_python

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from dev_install import PTH, install  # noqa: E402

HEAVY = ("torch._dynamo", "torch._inductor", "torch.distributed", "pandas", "yaml", "openreg_lab.views")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(install(tmp_path_factory.mktemp("site")).parent)


def _run(site: str, code: str, **env: str):
    path = os.pathsep.join([site, str(REPO), os.environ.get("PYTHONPATH", "")])
    return run_python(code, PYTHONPATH=path, **env)


def test_dev_install_writes_the_metadata_with_the_entry_points(tmp_path: Path):
    dist = install(tmp_path)
    again = install(tmp_path)  # idempotent
    assert dist == again and dist.name == "openreg_lab-0.1.0.dist-info"
    assert sorted(p.name for p in tmp_path.iterdir()) == [dist.name, PTH]
    assert (tmp_path / PTH).read_text().strip() == str(REPO)
    eps = configparser.ConfigParser()
    eps.read_string((dist / "entry_points.txt").read_text())
    assert dict(eps["torch.backends"]) == {"openreg": "_openreg_lab_autoload:load"}
    assert dict(eps["torch_dynamo_backends"]) == {"openreg": "openreg_lab.device._compile:openreg_backend"}
    assert eps["console_scripts"]["openreg-lab"] == "openreg_lab.cli:console_main"
    assert json.loads((dist / "direct_url.json").read_text())["dir_info"] == {"editable": True}
    record = [line.split(",")[0] for line in (dist / "RECORD").read_text().splitlines()]
    assert PTH in record and f"{dist.name}/entry_points.txt" in record
    # an older version's metadata is replaced, not left beside
    (tmp_path / "openreg_lab-0.0.9.dist-info").mkdir()
    install(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [dist.name, PTH]


def test_the_children_see_openreg_lab_installed(site):
    result = _run(
        site,
        "from importlib.metadata import distribution, entry_points; "
        "print(distribution('openreg-lab').version, "
        "[e.value for e in entry_points(group='torch.backends') if e.name == 'openreg'])",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0.1.0 ['_openreg_lab_autoload:load']"


def test_import_torch_alone_makes_openreg_usable(site):
    result = _run(
        site,
        "import sys, torch; x = torch.ones(2, device='openreg'); "
        "print(x.device, x.cpu().tolist(), 'openreg_lab' in sys.modules, torch.openreg.device_count())",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "openreg:0 [1.0, 1.0] True 2"
    assert result.stderr == ""


def test_autoload_off_leaves_torch_untouched(site):
    result = _run(
        site,
        "import sys, torch; print('openreg_lab' in sys.modules, '_openreg_lab_autoload' in sys.modules, "
        "torch._C._get_privateuse1_backend_name(), hasattr(torch, 'openreg'))",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "privateuseone", "False"]


def test_a_failing_autoload_warns_and_torch_still_imports(site):
    result = _run(
        site,
        "import torch; print(torch.ones(2).sum().item(), hasattr(torch, 'openreg'))",
        OPENREG_DEVICE_COUNT="seven",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.0", "False"]
    warning = [line for line in result.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warning) == 1, result.stderr
    assert "openreg-lab could not register the openreg device on `import torch`" in warning[0]
    assert "OPENREG_DEVICE_COUNT='seven' is not a device count" in warning[0]  # the cause
    assert "set TORCH_DEVICE_BACKEND_AUTOLOAD=0" in warning[0]  # the switch


def test_autoload_imports_no_compiler_no_more_distributed_and_no_tables(site):
    code = f"import sys, torch; print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))"
    on = _run(site, code)
    off = _run(site, code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    loaded_on, loaded_off = eval(on.stdout), eval(off.stdout)
    assert loaded_on == loaded_off  # whatever torch.distributed `import torch` loads itself, no more
    assert not [m for m in loaded_on if m.startswith(("torch._dynamo", "torch._inductor", "pandas"))]


def test_import_openreg_lab_after_autoload_is_the_same_package_with_its_whole_api(site):
    code = textwrap.dedent(
        """
        import sys, torch
        first = sys.modules["openreg_lab"]
        print(torch.openreg.is_initialized())
        import openreg_lab
        import openreg_lab as again
        assert openreg_lab is first is again
        print("pandas" in sys.modules, callable(openreg_lab.trace), "pandas" in sys.modules)
        from openreg_lab import coverage, step
        from openreg_lab.recording import session
        with openreg_lab.trace() as t:
            torch.ones(3, device="openreg").add_(1)
        print(session._renderer is not None, int((t.summary()["name"] == "aten::add_.Tensor").sum()))
        """
    )
    result = _run(site, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "True", "True", "True", "1"]


def test_import_openreg_lab_first_with_autoload_on(site):
    # openreg_lab's own `import torch` runs the autoload, which finds the package half-imported
    result = _run(site, "import openreg_lab, torch; print(torch.ones(1, device='openreg:1').device)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "openreg:1" and result.stderr == ""


def test_dynamo_lists_the_openreg_backend_through_its_entry_point(site):
    result = _run(
        site,
        "import sys, torch, torch._dynamo; from torch._dynamo.backends import registry; "
        "print('openreg' in torch._dynamo.list_backends(), "
        "registry.lookup_backend('openreg').__qualname__)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "openreg_backend"]
