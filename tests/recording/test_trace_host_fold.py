"""Host time in the user's terms (Note [Folding host frames]): an import is one ``import <module>``
frame with its time, library frames fold into the user's nearest frame unless ``library=True``, and
the verdict names the user's line and the module it imported."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig

import numpy as np
import pytest
import torch

import openreg_lab
from openreg_lab.recording import accounting, host, host_fold

SPIN_S = 0.3
MODULE = "openreg_fold_slow_import"


def _spin_module(directory) -> None:
    (directory / f"{MODULE}.py").write_text(
        "import time\n\n\ndef spin(seconds):\n    end = time.perf_counter() + seconds\n"
        "    while time.perf_counter() < end:\n        pass\n\n\n"
        f"spin({SPIN_S})\n"
    )


class Model:
    def __init__(self) -> None:
        importlib.import_module(MODULE)  # IMPORT_LINE: a library call (importlib) that imports


IMPORT_LINE = Model.__init__.__code__.co_firstlineno + 1


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A traced step whose user line calls importlib.import_module, which imports a module that
    spins SPIN_S at import time; the module's directory stays on sys.path while the tests read."""
    directory = tmp_path_factory.mktemp("fold")
    _spin_module(directory)
    sys.path.insert(0, str(directory))
    x = torch.ones(4, device="openreg")
    try:
        with openreg_lab.trace() as t:
            Model()
            x + x
            openreg_lab.step()
        yield t
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop(MODULE, None)


def test_an_import_is_one_frame_with_its_time(imported):
    h = imported.host()
    step0 = h[h["step"] == 0]
    imp = step0[step0["function"] == f"import {MODULE}"]
    assert len(imp) == 1
    total = int(imported.steps()["dur_ns"].iloc[0])
    sampled = int(step0.loc[step0["thread"] == imp["thread"].iloc[0], "self_ns"].sum())
    # The import holds the spin: nearly all of the step's sampled time, all on the stack.
    assert 0.8 * SPIN_S * 1e9 < imp["total_ns"].iloc[0] <= sampled <= total
    assert imp["total_ns"].iloc[0] / sampled > 0.9
    # No frame of the import system is left, nor importlib's import_module (a library's).
    assert not step0["function"].isin(["_find_and_load", "_call_with_frames_removed", "import_module"]).any()
    assert not step0["file"].str.startswith("<frozen").any()
    # The user's frames stay: the caller's line, and the module's own code (the user's, not a library's).
    assert (step0["function"] == "Model.__init__").any()
    spin = step0[step0["function"] == "spin"]
    assert spin["file"].iloc[0].endswith(f"{MODULE}.py") and spin["self_ns"].iloc[0] > 0.8 * SPIN_S * 1e9


def test_library_true_keeps_the_library_frames_but_not_the_import_system(imported):
    h = imported.host(library=True)
    assert (h["function"] == "import_module").any()  # importlib/__init__.py: the standard library's
    assert (h["function"] == f"import {MODULE}").any()
    assert not h["function"].isin(["_find_and_load", "_gcd_import", "_load_unlocked"]).any()
    raw = host.per_function(imported.host_samples, imported._t0, imported.steps(), imported._thread_index())
    assert raw["function"].isin(["_find_and_load"]).any()  # the raw samples had them


def test_the_verdict_names_the_users_line_and_what_it_imported(imported):
    w = imported.verdict().time[0]
    top = w.python[0]
    assert top.kind == "import"
    assert top.what == f"`import_module()` at {__file__}:{IMPORT_LINE} imported {MODULE}"
    assert top.ns > 0.8 * SPIN_S * 1e9 and top.ns / w.parts["host Python"] > 0.9
    assert f"host Python: `import_module()` at {__file__}:{IMPORT_LINE} imported {MODULE}: " in "\n".join(
        w.lines()
    )
    # library=True names the innermost frame instead: the module's spin loop.
    assert imported.verdict(library=True).time[0].python[0].what == "spin"


def samples_of(stacks: list[list[tuple[str, str, int]]]) -> host.Samples:
    """Samples with one sample a stack (root first; each frame function, file, line), 1 ms apart."""
    strings = [""]
    nodes: dict[tuple, int] = {}
    parent, function, file, line = [], [], [], []

    def code(t: str) -> int:
        if t not in strings:
            strings.append(t)
        return strings.index(t)

    leaves = []
    for stack in stacks:
        p = -1
        for f in stack:
            key = (p, *f)
            if key not in nodes:
                nodes[key] = len(parent)
                parent.append(p)
                function.append(code(f[0]))
                file.append(code(f[1]))
                line.append(f[2])
            p = nodes[key]
        leaves.append(p)
    n = len(stacks)
    z = np.zeros(n, dtype=np.int64)
    a = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return host.Samples(
        np.arange(n, dtype=np.int64) * 1_000_000, z + 7, a(leaves), a(np.arange(n) * 1_000_000), z,
        a(parent), a(function), a(file), a(line), a(line), a(np.zeros(len(parent))), strings,
    )  # fmt: skip


BOOT = "<frozen importlib._bootstrap>"
EXT = "<frozen importlib._bootstrap_external>"


def test_an_import_sampled_while_finding_its_module_is_named_from_its_execution():
    root = os.sep + os.path.join("work", "proj") + os.sep
    user = (("main", root + "train.py", 5),)
    pkg = os.path.join(sysconfig.get_paths()["purelib"], "pkg")  # an installed package
    finding = [*user, ("_find_and_load", BOOT, 1), ("_find_spec", BOOT, 2), ("_path_stat", EXT, 3)]
    running = [*user, ("_find_and_load", BOOT, 1), ("_load_unlocked", BOOT, 4), ("exec_module", EXT, 5),
               ("_call_with_frames_removed", BOOT, 6),
               ("<module>", os.path.join(pkg, "sub", "__init__.py"), 1),
               ("_handle_fromlist", BOOT, 7), ("_find_and_load", BOOT, 1),
               ("<module>", os.path.join(pkg, "sub", "deep.py"), 3)]  # fmt: skip
    example = os.path.join(host_fold.EXAMPLES, "train_lm.py")  # inside openreg_lab, yet the user's
    library = [("run", os.path.join(pkg, "cli.py"), 2), ("main", example, 7), ("Adam.__init__", pkg, 3)]
    s = samples_of([finding, running, [*user, ("helper", root + "train.py", 9)], [*library, *finding[1:]]])
    f = host_fold.fold(s)
    assert stack_of(f, 0) == stack_of(f, 1) == ["main", "import pkg.sub"]  # finding and running: one frame
    assert stack_of(f, 2) == ["main", "helper"]
    assert stack_of(f, 3) == ["main", f"import {host_fold.UNKNOWN_MODULE}"]  # never sampled running
    callers = {f.samples.strings[int(c)] for c in f.samples.callee}
    assert callers == {"", "Adam()"}  # what the example's line called; train.py's line is the import
    full = host_fold.fold(s, library=True)
    assert stack_of(full, 1) == ["main", "import pkg.sub", "<module>", "import pkg.sub.deep", "<module>"]
    # With library frames kept the verdict names the innermost frame; an import frame has no file:line.
    key, line = accounting._folded_key(
        full.samples, host.paths(full.samples), int(full.samples.node[0]), True
    )
    assert key[0] == "import pkg.sub" and accounting._where(key[1], line) == ""


def test_the_python_torch_compile_generated_folds_into_the_users_line(monkeypatch, tmp_path):
    root = os.sep + os.path.join("work", "proj") + os.sep
    user = [("<module>", root + "train.py", 1), ("step", root + "train.py", 9)]
    generated = os.path.join(host.INDUCTOR_CACHE + "someone", "ab", "cabcdef.py")  # Inductor's output
    s = samples_of([[*user, ("<module>", generated, 1), ("call", generated, 40)]])
    assert stack_of(host_fold.fold(s), 0) == ["<module>", "step"]
    assert stack_of(host_fold.fold(s, library=True), 0) == ["<module>", "step", "<module>", "call"]
    # A cache directory set by TORCHINDUCTOR_CACHE_DIR is the compiler's too.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    moved = samples_of([[*user, ("call", str(tmp_path / "ab" / "c.py"), 40)]])
    assert stack_of(host_fold.fold(moved), 0) == ["<module>", "step"]


def stack_of(f: host_fold.Folded, sample: int) -> list[str]:
    """The folded stack of one sample, root first, by function."""
    s = f.samples
    return [s.strings[int(s.function[k])] for k in host.paths(s)[int(s.node[sample])]]


def test_module_names_from_files():
    roots = (os.sep + "site" + os.sep, os.sep + "site" + os.sep + "pkg" + os.sep)
    join = os.sep.join
    assert (
        host_fold.module_name(join(["", "site", "torch", "_dynamo", "__init__.py"]), roots) == "torch._dynamo"
    )
    assert (
        host_fold.module_name(join(["", "site", "torch", "nn", "functional.py"]), roots)
        == "torch.nn.functional"
    )
    assert host_fold.module_name("<frozen os>", roots) == "os"
    assert host_fold.module_name(join(["", "elsewhere", "tool.py"]), roots) == "tool"
    assert host_fold._call_name("AdamW.__init__") == "AdamW()" and host_fold._call_name("load") == "load()"
