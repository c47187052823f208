"""torch's autoload of openreg-lab (the ``torch.backends`` entry point), in fresh interpreters.

The entry points are installed for the children from this tree by ``scripts/dev_install.py`` (what
``scripts/setup.sh`` runs on the venv) into a temporary directory on their PYTHONPATH.
"""

from __future__ import annotations

import concurrent.futures
import configparser
import importlib.machinery
import importlib.util
import json
import os
import shutil
import struct
import sys
import textwrap
from pathlib import Path

import pytest

from openreg_lab import _extension
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


def _autoload_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "RuntimeWarning: openreg-lab could not register" in line]


def test_a_truncated_or_missing_extension_warns_with_its_cause_and_torch_still_imports(site, tmp_path):
    # A scratch copy of the package (the real build stays whole), truncated: loading it would kill
    # `import torch` with SIGBUS (rc 135); a missing one was reported as "a circular import".
    scratch = tmp_path / "scratch"
    no_caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "openreg_lab", scratch / "openreg_lab", ignore=no_caches)
    shutil.copy(REPO / "_openreg_lab_autoload.py", scratch)
    [so] = (scratch / "openreg_lab").glob("_C.*")
    size = so.stat().st_size
    os.truncate(so, size // 2)
    code = textwrap.dedent(
        f"""
        import os, sys, warnings
        import torch
        print(torch.ones(2).sum().item(), hasattr(torch, "openreg"), "openreg_lab._C" in sys.modules)
        os.remove({str(so)!r})
        import _openreg_lab_autoload  # the entry point torch called, as it calls it on import
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _openreg_lab_autoload.load()
        print(len(caught), caught[0].category.__name__)
        print(caught[0].message)
        """
    )
    # PYTHONSAFEPATH: not the working directory (this tree) first on the child's path
    result = run_python(code, PYTHONPATH=os.pathsep.join([str(scratch), site]), PYTHONSAFEPATH="1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["2.0 False False", "1 RuntimeWarning"]  # torch works, nothing of ours loaded
    [truncated] = _autoload_warnings(result.stderr)
    assert (
        f"(ImportError: openreg-lab's C++ extension {so} is damaged: its {size // 2} bytes end before its "
        "loadable segment"
    ) in truncated
    assert "the file is truncated. It was not loaded (loading it could kill the process)" in truncated
    missing = lines[2]
    assert missing.startswith(
        f"openreg-lab could not register the openreg device on `import torch` (ImportError: openreg-lab's "
        f"C++ extension is missing: {so.parent} has no {so.name}; build it in place"
    )
    assert "circular" not in missing
    for warning in (truncated, missing):  # the switch
        assert "set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to skip loading device backends" in warning


def test_a_device_count_fixed_after_a_failed_autoload_is_honoured_and_a_changed_one_needs_a_restart(site):
    # OPENREG_DEVICE_COUNT=99 fails the autoload; fixed, `import openreg_lab` works without a restart.
    # The count is fixed once a valid value is read: a later import failing for another reason (a
    # bad OPENREG_MEMORY_LIMIT) keeps it, and a changed count then says a restart is needed.
    code = textwrap.dedent(
        """
        import os
        import torch
        print(hasattr(torch, "openreg"))
        os.environ["OPENREG_DEVICE_COUNT"] = "3"
        try:
            import openreg_lab
        except RuntimeError as e:
            print(e)
        del os.environ["OPENREG_MEMORY_LIMIT"]
        os.environ["OPENREG_DEVICE_COUNT"] = "4"
        try:
            import openreg_lab
        except RuntimeError as e:
            print(e)
        os.environ["OPENREG_DEVICE_COUNT"] = "3"
        import openreg_lab
        print(torch.openreg.device_count(), torch.accelerator.device_count(),
              len(torch.openreg.default_generators), torch.ones(1, device="openreg:2").device)
        """
    )
    result = _run(site, code, OPENREG_DEVICE_COUNT="99", OPENREG_MEMORY_LIMIT="lots")
    assert result.returncode == 0, result.stderr
    [warning] = _autoload_warnings(result.stderr)
    assert "(RuntimeError: OPENREG_DEVICE_COUNT='99' is not a device count" in warning
    assert result.stdout.splitlines() == [
        "False",
        "OPENREG_MEMORY_LIMIT='lots' is not a memory size: use a whole number of bytes from 1 to 2**63 - 1, "
        "or a number with K, M or G (e.g. 512M, 1.5G, 2GiB), or unset it for no limit",
        "OPENREG_DEVICE_COUNT='4' cannot take effect: this process fixed openreg's device count at 3 when an "
        "earlier import of openreg_lab read it; restart Python to use a new value",
        "3 3 3 openreg:2",
    ]


def _elf_head(real: bytes, **fields: int) -> bytes:
    """The first 64 bytes of ``real`` (an ELF64 little-endian header) with some fields replaced."""
    head = bytearray(real[:64])
    offsets = {"ei_class": (4, "B"), "ei_data": (5, "B"), "e_type": (16, "<H"), "e_machine": (18, "<H"),
               "e_phnum": (56, "<H")}  # fmt: skip
    for name, value in fields.items():
        offset, fmt = offsets[name]
        struct.pack_into(fmt, head, offset, value)
    return bytes(head)


def test_the_extension_check_names_what_is_wrong_with_a_file(tmp_path):
    [real_path] = (REPO / "openreg_lab").glob("_C" + importlib.machinery.EXTENSION_SUFFIXES[0])
    real = real_path.read_bytes()
    assert _extension.problem(str(real_path)) is None
    own = _extension._own_elf_ident()
    assert own is not None and own[0] == b"\x02\x01"  # this test's headers are ELF64 little-endian
    name = _extension._machine_name
    host = f"and this Python is 64-bit {name(own[1])}"
    other = 183 if own[1] != 183 else 62  # AArch64, or x86-64 on an AArch64 host
    cases = [
        (b"", "it is not an ELF shared object (0 bytes, starting b'')"),
        (b"<html>not a library</html>", "it is not an ELF shared object (26 bytes, starting b'<htm')"),
        (real[:40], "its 40 bytes end inside its ELF header: the file is truncated"),
        (_elf_head(real, ei_class=7), "its ELF header is invalid (class and byte order b'\\x07\\x01')"),
        (_elf_head(real, ei_class=1), f"it was built for 32-bit {name(own[1])}, {host}"),
        (_elf_head(real, e_machine=other), f"it was built for 64-bit {name(other)}, {host}"),
        (_elf_head(real, e_type=2), "it is not a shared object (ELF type 2)"),
        (_elf_head(real, e_phnum=0), "its program header table is invalid (0 entries of 56 bytes)"),
        (real[:100], "its 100 bytes end before its program headers, which end at byte "),
        (real[:8192], "its 8192 bytes end before its loadable segment "),
        (
            real[:-1],
            f"its {len(real) - 1} bytes end before its section header table, which ends at byte "
            f"{len(real)}: the file is truncated",
        ),
    ]
    for i, (data, want) in enumerate(cases):
        path = tmp_path / f"case{i}.so"
        path.write_bytes(data)
        assert (_extension.problem(str(path)) or "").startswith(want), (i, _extension.problem(str(path)))
    assert _extension.problem(str(tmp_path)) == "it cannot be read (Is a directory)"


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
        from openreg_lab.recording import viewing
        with openreg_lab.trace() as t:
            torch.ones(3, device="openreg").add_(1)
        print(viewing._renderer is not None, int((t.summary()["name"] == "aten::add_.Tensor").sum()))
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


LIGHTNING = """
import sys, torch
print("pytorch_lightning" in sys.modules, "lightning_fabric" in sys.modules)  # not imported for us
import pytorch_lightning as pl
from lightning_fabric.accelerators import ACCELERATOR_REGISTRY
from pytorch_lightning.accelerators import AcceleratorRegistry
%s
trainer = pl.Trainer(accelerator="openreg", logger=False, enable_checkpointing=False)
print("openreg" in AcceleratorRegistry, "openreg" in ACCELERATOR_REGISTRY, trainer.strategy.root_device)
"""


@pytest.mark.skipif(importlib.util.find_spec("pytorch_lightning") is None, reason="no pytorch-lightning")
def test_lightning_finds_openreg_whichever_is_imported_first_and_is_not_imported_for_it(site):
    # Autoload on: openreg-lab loads inside `import torch`, Lightning later, and openreg is adapted as
    # Lightning's connector is imported. Autoload off: Lightning first, then openreg_lab adapts it at once.
    # Two fresh interpreters that import Lightning (seconds each): run side by side.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        later = pool.submit(_run, site, LIGHTNING % "")
        first = pool.submit(_run, site, LIGHTNING % "import openreg_lab", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    for result in (later.result(), first.result()):
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["False", "False", "True", "True", "openreg:0"]
        assert "openreg-lab could not" not in result.stderr
