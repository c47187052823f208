"""Build the template's extension, ``openreg_lab._C``, from the template's sources alone.

``scripts/template_check.py`` copies this file into its scratch tree (``build/template/setup.py``) with
the folders a vendor copies (``csrc/runtime``, ``csrc/aten``, ``csrc/distributed``,
``csrc/python/device``; docs/porting.md) and runs ``python setup.py -q build_ext --inplace`` there. It
is the lab's ``setup.py`` without the lab: no ``csrc/trace``, no ``csrc/coverage``, no lab bindings,
and no precompiled header. The module keeps the lab's name (Note [One extension name, two builds] in
``openreg_lab/_extension.py``).

The check compiles for correctness, not speed: ``-O1`` (the tests it runs use tiny tensors) and the
lab's unity files (up to six sources of a folder in one file, each paying torch's headers once).
OpenMP as the lab's build: compiled with ``-fopenmp``, linked against torch's own ``libgomp``.
"""

import glob
import os

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the build must not load what it builds

import torch.utils.cpp_extension as cpp_extension
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
FOLDERS = ("runtime", "aten", "aten/fallback", "aten/native", "distributed", "python/device")
#: Sources per unity file, at most: the lab's grouping (setup.py's UNITY_GROUP), the one under which
#: the names at file scope of a folder's sources are known not to clash.
UNITY_GROUP = 6


def _unity_sources() -> list[str]:
    out_dir = os.path.join(ROOT, "build", "unity")
    os.makedirs(out_dir, exist_ok=True)
    unity = []
    for folder in FOLDERS:
        members = sorted(glob.glob(os.path.join(ROOT, "csrc", folder, "*.cpp")))
        n = -(-len(members) // UNITY_GROUP)  # groups, as even as they can be
        for i in range(n):
            path = os.path.join(out_dir, folder.replace("/", "_") + f"_{i}.cpp")
            text = "".join(f'#include "{m}"\n' for m in members[i::n])
            old = open(path).read() if os.path.exists(path) else None
            if old != text:  # rewritten only when its list changes: ninja keeps the object
                with open(path, "w") as f:
                    f.write(text)
            unity.append(os.path.relpath(path, ROOT))
    return unity


def _flags() -> tuple[list[str], list[str]]:
    cflags = ["-O1", "-g0", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-interference-size"]
    cflags += ["-fvisibility=hidden"]
    for include in cpp_extension.include_paths():
        cflags += ["-isystem", include]
    gomp = os.path.join(cpp_extension.TORCH_LIB_PATH, "libgomp.so.1")
    if not os.path.exists(gomp):
        return cflags, []
    return [*cflags, "-fopenmp"], [gomp, f"-Wl,-rpath,{cpp_extension.TORCH_LIB_PATH}"]


cflags, ldflags = _flags()
setup(
    name="openreg-template",
    ext_modules=[
        CppExtension(
            name="openreg_lab._C",
            sources=_unity_sources(),
            include_dirs=[os.path.join(ROOT, "csrc")],
            extra_compile_args=cflags,
            extra_link_args=ldflags,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
