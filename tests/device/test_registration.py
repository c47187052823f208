"""Importing openreg_lab registers the `openreg` device with PyTorch."""

import glob
import importlib
import os
import re
from pathlib import Path

import pytest
import torch

import openreg_lab
from tests.support.processes import run_python


def test_privateuse1_is_renamed():
    assert torch._C._get_privateuse1_backend_name() == "openreg"
    assert torch.device("openreg").type == "openreg"


def test_device_module_is_registered():
    assert torch.openreg is openreg_lab.device
    assert torch._utils._get_device_module("openreg") is openreg_lab.device


def test_generated_tensor_module_and_storage_methods():
    x = torch.randn(2)
    y = x.openreg()
    assert y.device == torch.device("openreg", 0)
    assert y.is_openreg and not x.is_openreg
    assert torch.equal(y.cpu(), x)
    z = x.openreg(1)
    assert z.device == torch.device("openreg", 1)

    m = torch.nn.Linear(2, 3).openreg()
    assert all(p.device.type == "openreg" for p in m.parameters())

    s = torch.UntypedStorage(8).openreg()
    assert s.is_openreg and s.device.type == "openreg"


def test_accelerator_is_openreg():
    assert torch.accelerator.current_accelerator() == torch.device("openreg")
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == 2


def test_importing_twice_is_harmless():
    importlib.reload(openreg_lab)
    openreg_lab._register()
    assert torch._C._get_privateuse1_backend_name() == "openreg"
    assert torch.ones(1, device="openreg").item() == 1.0


def test_import_in_fresh_process_and_readme_example():
    result = run_python(
        "import torch, openreg_lab\n"
        "x = torch.randn(3, 3).to('openreg')\n"
        "print(x.device, torch.ones(2, device='openreg:1').device, torch.openreg.device_count(),"
        " torch.accelerator.current_accelerator())\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["openreg:0", "openreg:1", "2", "openreg"]


def test_other_privateuse1_name_is_refused():
    # Another extension took PrivateUse1 first: with torch's autoload off, `import torch` leaves it free.
    result = run_python(
        "import torch\ntorch.utils.rename_privateuse1_backend('foo')\nimport openreg_lab\n",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode != 0
    assert "already registered as 'foo'" in result.stderr


def test_the_unity_build_compiles_every_source_once():
    # setup.py compiles csrc/ in unity files (build/unity/): a source left out would be an
    # extension missing its kernels or registrations; one included twice, a duplicate symbol.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    unity = sorted(glob.glob(os.path.join(root, "build", "unity", "*.cpp")))
    if not unity:
        pytest.skip("built with OPENREG_UNITY=0: each source is its own object")
    included = [m for path in unity for m in re.findall(r'^#include "(.+)"$', Path(path).read_text(), re.M)]
    sources = glob.glob(os.path.join(root, "csrc", "**", "*.cpp"), recursive=True)
    # All but the template's own extension module (scripts/template_check.py builds it): the lab's
    # module, csrc/python/Module.cpp, defines the same PyInit__C.
    template_module = os.path.join(root, "csrc", "python", "device", "Module.cpp")
    assert template_module in sources and template_module not in included
    assert sorted(included) == sorted(s for s in sources if s != template_module)
    for path in unity:  # a unity file holds one directory's sources, at most six
        members = re.findall(r'^#include "(.+)"$', Path(path).read_text(), re.M)
        assert 1 <= len(members) <= 6 and len({os.path.dirname(m) for m in members}) == 1
