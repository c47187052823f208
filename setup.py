"""Build the `openreg_lab._C` extension with torch's cpp_extension (ninja).

Build against the installed torch without build isolation:
    pip install --no-build-isolation -e .
Set OPENREG_SANITIZE=1 to build with AddressSanitizer and UBSan, OPENREG_PCH=0 to build without
the precompiled header (csrc/Precompiled.h).

The kernels are compiled with OpenMP and linked against the OpenMP runtime torch ships
(torch/lib/libgomp.so.1), so that at::parallel_for splits them over the threads torch uses
(torch.set_num_threads) and the process holds one OpenMP runtime: see _openmp_flags.
"""

import glob
import hashlib
import os
import shlex
import subprocess
import sys

# The build must not load the extension it builds: with openreg-lab installed, `import torch` would
# (torch's autoload, _openreg_lab_autoload.py), and the link rewrites the loaded file.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch
import torch.utils.cpp_extension as cpp_extension
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
PCH_HEADER = os.path.join(ROOT, "csrc", "Precompiled.h")


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
    # torch's headers are system headers to us: -Wall -Wextra is for our code, not theirs.
    for include in cpp_extension.include_paths():
        cflags += ["-isystem", include]
    # Kineto's plugin headers (csrc/trace/KinetoProfiler.cpp) include each other by bare name.
    cflags += ["-isystem", os.path.join(cpp_extension.include_paths()[0], "kineto")]
    ldflags: list[str] = []
    omp_cflags, omp_ldflags = _openmp_flags()
    cflags += omp_cflags
    ldflags += omp_ldflags
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


def _openmp_flags() -> tuple[list[str], list[str]]:
    """Compile with OpenMP; link against torch's own libgomp, never the compiler's.

    at::parallel_for is inline in ATen's headers (ATen/Parallel-inl.h, ATen/ParallelOpenMP.h):
    it runs in parallel only in objects compiled with -fopenmp, and serially otherwise. Linking
    with -fopenmp would add the system libgomp; two OpenMP runtimes in one process have two
    thread pools that oversubscribe the cores and ignore each other's settings. So -fopenmp is a
    compile flag only, and the link names torch/lib/libgomp.so.1, which `import torch` has
    already loaded (the dynamic loader reuses it by its soname; the rpath makes `ldd` agree).
    tests/operators/test_openmp.py checks that one runtime is mapped and that the threads are used.
    """
    gomp = os.path.join(cpp_extension.TORCH_LIB_PATH, "libgomp.so.1")
    if not (torch.backends.openmp.is_available() and os.path.exists(gomp)):
        print(f"warning: torch has no {gomp}; native kernels run on one thread", file=sys.stderr)
        return [], []
    return ["-fopenmp"], [gomp, f"-Wl,-rpath,{cpp_extension.TORCH_LIB_PATH}"]


def _precompile_header(cflags: list[str], post_cflags: list[str], build_dir: str) -> list[str]:
    """Compile csrc/Precompiled.h with exactly the flags of the objects; return the flags using it.

    GCC only accepts a precompiled header made with the same options, so it is built from the very
    flags cpp_extension writes into build.ninja, and rebuilt when those flags, the header or torch
    change (the stamp holds their hash). GCC's depfiles do not name the .gch, so a rebuilt header
    does not recompile the objects: it holds declarations only, and every source includes what it
    uses. If the compiler cannot make it, the build goes on without it (slower, same result).
    """
    flags = shlex.split(" ".join(cflags)) + shlex.split(" ".join(post_cflags))
    compiler = cpp_extension.get_cxx_compiler()
    pch_dir = os.path.join(build_dir, "pch")
    header = os.path.join(pch_dir, "Precompiled.h")
    gch = header + ".gch"
    with open(PCH_HEADER, "rb") as f:
        text = f.read()
    key = hashlib.sha1(
        repr((compiler, flags, torch.__version__, cpp_extension.TORCH_LIB_PATH)).encode() + text
    ).hexdigest()
    stamp = gch + ".stamp"
    os.makedirs(pch_dir, exist_ok=True)
    if not (os.path.exists(gch) and _read(stamp) == key):
        with open(header, "wb") as f:
            f.write(text)
        cmd = [compiler, *flags, "-w", "-x", "c++-header", header, "-o", gch]
        print(f"precompiling {os.path.relpath(PCH_HEADER, ROOT)}", file=sys.stderr)
        if subprocess.run(cmd).returncode != 0:
            print("warning: no precompiled header; building without it", file=sys.stderr)
            return post_cflags
        with open(stamp, "w") as f:
            f.write(key)
    return [*post_cflags, "-Winvalid-pch", "-include", shlex.quote(header)]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _install_precompiled_header() -> None:
    """Route cpp_extension's ninja step through _precompile_header (torch is pinned to 2.13)."""
    compile_objects = cpp_extension._write_ninja_file_and_compile_objects

    def with_pch(
        *, cflags: list[str], post_cflags: list[str], build_directory: str, **kwargs: object
    ) -> None:
        post_cflags = _precompile_header(cflags, post_cflags, build_directory)
        compile_objects(cflags=cflags, post_cflags=post_cflags, build_directory=build_directory, **kwargs)

    cpp_extension._write_ninja_file_and_compile_objects = with_pch


if os.environ.get("OPENREG_PCH", "1") != "0":
    _install_precompiled_header()
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
