"""Build the `openreg_lab._C` extension with torch's cpp_extension (ninja).

Build against the installed torch without build isolation:
    pip install --no-build-isolation -e .
Set OPENREG_SANITIZE=1 to build with AddressSanitizer and UBSan.
"""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def _sources() -> list[str]:
    files = glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True)
    return sorted(files)


def _flags() -> tuple[list[str], list[str]]:
    cflags = [
        "-O3",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        # torch's CachingHostAllocator.h trips this one; our code does not.
        "-Wno-interference-size",
        "-fvisibility=hidden",
        # No debug info in normal builds: it doubles compile time (the sanitizer build adds -g).
        "-g0",
    ]
    ldflags: list[str] = []
    if os.environ.get("OPENREG_SANITIZE") == "1":
        san = [
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
            "-O1",
            "-g",
        ]
        cflags += san
        ldflags += ["-fsanitize=address,undefined"]
    return cflags, ldflags


cflags, ldflags = _flags()
setup(
    ext_modules=[
        CppExtension(
            name="openreg_lab._C",
            sources=_sources(),
            include_dirs=[os.path.join(ROOT, "csrc")],
            extra_compile_args=cflags,
            extra_link_args=ldflags,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
