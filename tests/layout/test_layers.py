"""The Python package keeps the layers of csrc/: imports point down only, and there are no cycles."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import openreg_lab

PACKAGE = Path(openreg_lab.__file__).parent

# Lower numbers are lower layers. A module may import its own layer and the ones below.
LAYERS = {"_C": 0, "theme": 0, "device": 1, "recording": 2, "dispatch": 3, "views": 4}
TOP = 5  # the package's __init__, the command line, the examples, plugins


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every ``openreg_lab...`` module ``path`` imports, at any depth of its code."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("openreg_lab")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("openreg_lab"):
            # `from pkg import submodule` imports the submodule; `from pkg import name`, the package.
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in MODULES else node.module)
    return out


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return TOP
    return LAYERS.get(parts[1], TOP)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _graph() -> dict[str, set[str]]:
    return {m: {i for i in _imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def test_the_layers_are_packages():
    for layer in ("device", "recording", "dispatch", "views"):
        assert (PACKAGE / layer / "__init__.py").exists()
    # The function openreg_lab.trace is not hidden by (and does not hide) a module of that name.
    assert not (PACKAGE / "trace.py").exists() and not (PACKAGE / "trace").exists()
    assert callable(openreg_lab.trace) and callable(openreg_lab.coverage) and callable(openreg_lab.explain)


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (m, i)
        for m, deps in graph.items()
        for i in deps
        if "openreg_lab" not in (m, i) and _layer(i) > _layer(m)
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # The package re-exports everything; nothing below it imports it.
    graph = {m: deps - {"openreg_lab"} for m, deps in graph.items() if m != "openreg_lab"}
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                found.append([*stack[stack.index(d) :], d])
            elif d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_imports_point_down_only():
    assert _upward(_graph()) == []


def test_there_are_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_checks_see_a_cycle_and_an_upward_import():
    # The checks above are only worth something if they can fail.
    bad = {
        "openreg_lab.recording.a": {"openreg_lab.views.b"},
        "openreg_lab.views.b": {"openreg_lab.recording.a"},
    }
    assert _upward(bad) == [("openreg_lab.recording.a", "openreg_lab.views.b")]
    assert _cycles(bad) == [["openreg_lab.recording.a", "openreg_lab.views.b", "openreg_lab.recording.a"]]


def _layer_name(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "top"


def _private(target: str) -> bool:
    """Whether ``target`` (``openreg_lab.<layer>...``) names something private to its layer: a
    segment after the layer's own name that starts with ``_``. The device layer's modules are all
    private-named (its public face is ``torch.openreg``), so a module there is not, but a private
    name inside one is; ``_C``'s functions are the extension's bindings, the layer itself."""
    parts = target.split(".")
    if _layer_name(target) == "_C":
        return False
    for k in range(2, len(parts)):
        seg = parts[k]
        if not seg.startswith("_") or seg.startswith("__"):
            continue
        module = ".".join(parts[: k + 1])
        if _layer_name(target) == "device" and module in MODULES:
            continue
        return True
    return False


def _private_uses(module: str, text: str) -> list[str]:
    """What ``module``'s code uses of another layer's private names: ``from openreg_lab.x import _y``
    (a private module or name), ``import openreg_lab.x._y``, or ``m._y`` on a module ``m`` imported
    from another layer (``tests/layout/test_layers.py``: no private cross-layer calls)."""
    mine = _layer_name(module)
    found = []
    aliases: dict[str, str] = {}
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("openreg_lab"):
            for a in node.names:
                target = f"{node.module}.{a.name}"
                if _layer_name(target) != mine:
                    aliases[a.asname or a.name] = target
                    if _private(target):
                        found.append(target)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("openreg_lab") and _layer_name(a.name) != mine:
                    if a.asname:
                        aliases[a.asname] = a.name
                    if _private(a.name):
                        found.append(a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            target = f"{aliases[node.value.id]}.{node.attr}"
            if _private(target):
                found.append(target)
    return sorted(set(found))


def test_no_module_uses_a_private_name_of_another_layer():
    """A layer's private names (a leading ``_``) are its own: the views call the recording and
    dispatch layers' public functions, which return tables, and the command line does the same."""
    offenders = {m: bad for m, p in sorted(MODULES.items()) if (bad := _private_uses(m, p.read_text()))}
    assert offenders == {}, f"make these public (or compute them in their own layer): {offenders}"


def test_the_private_check_sees_private_uses():
    views = "openreg_lab.views.x"
    assert _private_uses(views, "from openreg_lab.dispatch import explain as e\ne._table('x')") == [
        "openreg_lab.dispatch.explain._table"
    ]
    assert _private_uses(views, "from openreg_lab.recording import _atomic") == [
        "openreg_lab.recording._atomic"
    ]
    assert _private_uses(views, "from openreg_lab.recording._text import visible") == [
        "openreg_lab.recording._text.visible"
    ]
    assert _private_uses(views, "import openreg_lab.recording.analysis as a\na._x()") == [
        "openreg_lab.recording.analysis._x"
    ]
    assert _private_uses(views, "from openreg_lab.recording.lod import _rows") == [
        "openreg_lab.recording.lod._rows"
    ]
    # The device layer's private-named modules are its modules; a private name in one is still private.
    assert _private_uses("openreg_lab.recording.x", "from openreg_lab.device import _seam") == []
    assert _private_uses(
        "openreg_lab.recording.x", "from openreg_lab.device import _distributed as d\nd._x()"
    ) == ["openreg_lab.device._distributed._x"]
    # A layer's own private names, the extension's bindings and public names are fine.
    assert _private_uses(views, "from openreg_lab.views._embed import plotly_text") == []
    assert _private_uses(views, "from openreg_lab import _C\n_C._trace_intern('x')") == []
    assert _private_uses(views, "from openreg_lab.dispatch.keys import key_grid") == []


def test_no_public_name_is_shadowed_by_a_module():
    import importlib

    for m in MODULES:
        importlib.import_module(m)  # importing a submodule sets it as its package's attribute
    for pkg in (openreg_lab, openreg_lab.views):
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            assert name in ("views", "memory") or not isinstance(obj, type(openreg_lab)), (
                f"{pkg.__name__}.{name} is a module"
            )


CSRC = Path(__file__).resolve().parents[2] / "csrc"
# The folders a vendor copies (the template, docs/porting.md): they include nothing of the lab's
# (csrc/trace, csrc/coverage, the lab's bindings in csrc/python) and reach it only at run time, through
# the table of hooks in the seam header (Note [The lab's seam]). `make template-check` builds them alone.
TEMPLATE = ("runtime", "aten", "distributed", "python/device")
SEAM = "runtime/Seam.h"


def _lab_includes(text: str) -> list[str]:
    """The headers a C++ file includes from outside the template's folders (the lab's)."""
    found = re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, flags=re.MULTILINE)
    return [h for h in found if not any(h.startswith(folder + "/") for folder in TEMPLATE)]


def _template_files() -> list[Path]:
    return sorted(
        {p for folder in TEMPLATE for p in (CSRC / folder).rglob("*") if p.suffix in (".h", ".cpp")}
    )


def test_the_template_includes_no_lab_header():
    files = _template_files()
    assert len(files) > 50  # the folders were found
    offenders = {str(p.relative_to(CSRC)): bad for p in files if (bad := _lab_includes(p.read_text()))}
    assert offenders == {}, f"reach the lab through the hooks of {SEAM} instead: {offenders}"
    # OPENREG_IMPL's kernels open their scope at the seam.
    assert '"aten/KernelScopes.h"' in (CSRC / "aten" / "Registration.h").read_text()


def test_the_include_check_sees_a_lab_header():
    assert _lab_includes('#include "trace/Hooks.h"\n#include "runtime/Seam.h"\n') == ["trace/Hooks.h"]
    assert _lab_includes('#include "coverage/Profile.h"\n') == ["coverage/Profile.h"]
    assert _lab_includes('#include "python/Trace.h"\n#include "python/device/Bindings.h"\n') == [
        "python/Trace.h"
    ]
    assert _lab_includes('#include "aten/native/Common.h"  // Note [x]\n#include <vector>\n') == []


def _hooks(seam: str) -> list[str]:
    """The names of the seam's hooks: its function pointers and gates."""
    body = seam[seam.index("struct Hooks {") :]
    body = body[: body.index("\n};")]
    return re.findall(r"\(\*(\w+)\)\(", body) + re.findall(r"std::atomic<bool>\* (\w+)", body)


def test_the_seam_is_the_table_and_says_what_each_hook_is_for():
    seam = (CSRC / SEAM).read_text()
    # Nothing of the lab's, nor of the template's other parts: torch's and the standard library's only.
    assert re.findall(r'^\s*#\s*include\s+"', seam, flags=re.MULTILINE) == []
    hooks = _hooks(seam)
    assert len(hooks) > 15 and "kernel_begin" in hooks and "kernel_events" in hooks
    note = seam[seam.index("// Note [The lab's seam]") : seam.index("#include")]
    assert [h for h in hooks if h not in note] == [], "the Note names every hook and what it is for"
    template = "\n".join(p.read_text() for p in _template_files() if p.name != "Seam.h")
    lab = "\n".join(p.read_text() for folder in ("trace", "coverage") for p in (CSRC / folder).glob("*.cpp"))
    # Every hook is called by the template (no drift) and filled by the lab.
    assert [h for h in hooks if not re.search(rf"->{h}(\(|->)", template)] == []
    assert [h for h in hooks if f"table.{h} = " not in lab] == []


def test_the_template_check_sees_a_header_the_template_lacks(tmp_path):
    import importlib.util

    path = CSRC.parent / "scripts" / "template_check.py"
    spec = importlib.util.spec_from_file_location("template_check", path)
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    (tmp_path / "csrc" / "aten").mkdir(parents=True)
    (tmp_path / "csrc" / "aten" / "A.h").write_text('#pragma once\n#include "aten/B.h"\n')
    (tmp_path / "csrc" / "aten" / "B.h").write_text('#include "trace/Recorder.h"\n#include <vector>\n')
    assert check.unresolved_includes(tmp_path) == {"csrc/aten/B.h": ["trace/Recorder.h"]}
    # It copies what porting.md says a vendor copies.
    assert check.CSRC == TEMPLATE


def _repeated_runs(texts: dict[str, str], n: int) -> dict[tuple[str, ...], list[tuple[str, int]]]:
    """Runs of ``n`` code lines (stripped; blank lines, lone braces and comments left out) that
    occur more than once across ``texts`` (file name -> text)."""
    runs: dict[tuple[str, ...], list[tuple[str, int]]] = {}
    for name, text in texts.items():
        lines = [(i + 1, s.strip()) for i, s in enumerate(text.splitlines())]
        code = [(i, s) for i, s in lines if s and s not in ("{", "}", "});", "};") and not s.startswith("//")]
        for k in range(len(code) - n + 1):
            runs.setdefault(tuple(s for _, s in code[k : k + n]), []).append((name, code[k][0]))
    return {run: where for run, where in runs.items() if len(where) > 1}


def test_no_repeated_method_bodies_in_the_collectives():
    """Each collective of csrc/distributed is one short method through the call builder
    (Backend.h): no five code lines repeat across the folder's sources."""
    texts = {p.name: p.read_text() for p in sorted((CSRC / "distributed").glob("*.cpp"))}
    assert "Backend.cpp" in texts
    assert _repeated_runs(texts, 5) == {}


def test_the_repetition_check_sees_a_copy():
    body = "int a = 1;\nint b = 2;\n\n// x\nint c = 3;\n{\nint d = 4;\nint e = 5;\n"
    assert list(_repeated_runs({"x.cpp": body, "y.cpp": "int z;\n" + body}, 5).values()) == [
        [("x.cpp", 1), ("y.cpp", 2)]
    ]


# The Python side of the seam (Note [The lab's seam in Python] in openreg_lab/device/_seam.py): the
# device layer's modules hold no recorder code; the lab attaches through _seam alone.
PY_SEAM = "openreg_lab.device._seam"


def _recorder_code(text: str) -> list[str]:
    """What in a module's code names the recorder: an import of the recording layer (``import``,
    ``from ... import`` or a module name in a string, as importlib takes), a ``_C._trace_*`` function,
    or a string of code (not a docstring) calling the recorder's runtime, as generated code would."""
    found = []
    tree = ast.parse(text)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("openreg_lab.recording")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("openreg_lab.recording"):
            found.append(str(node.module))
        elif isinstance(node, ast.ImportFrom) and node.module == "openreg_lab":
            found += [f"openreg_lab.{a.name}" for a in node.names if a.name == "recording"]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_trace_"):
            found.append(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            # A module name importlib takes, or generated code calling the recorder's runtime.
            found += re.findall(
                r"\bopenreg_lab\.recording[\w.]*|\b_?compiled_runtime\b|\b_trace_\w+", node.value
            )
    return found


def test_the_device_layer_reaches_the_recorder_only_through_its_seam():
    device = {m: p for m, p in MODULES.items() if m.startswith("openreg_lab.device.")}
    assert PY_SEAM in device and len(device) > 10  # the modules were found
    offenders = {m: bad for m, p in sorted(device.items()) if (bad := _recorder_code(p.read_text()))}
    assert offenders == {}, f"attach recorder code through {PY_SEAM} instead: {offenders}"
    # The seam itself names no recorder either: the lab hands it its loader from the package's top.
    assert _recorder_code(device[PY_SEAM].read_text()) == []
    # The registration consults it: the Scheduling and wrapper Inductor gets, and the callbacks.
    assert "_seam.subclass(" in device["openreg_lab.device._inductor"].read_text()
    assert "_seam.registered()" in device["openreg_lab.device._compile"].read_text()


def test_the_python_seam_check_sees_recorder_code():
    assert _recorder_code("from openreg_lab.recording import compile_events") == ["openreg_lab.recording"]
    assert _recorder_code("import openreg_lab.recording.compiled as c") == ["openreg_lab.recording.compiled"]
    assert _recorder_code("from openreg_lab import recording") == ["openreg_lab.recording"]
    assert _recorder_code("from openreg_lab import _C\n_C._trace_intern('x')") == ["_trace_intern"]
    assert _recorder_code("importlib.import_module('openreg_lab.recording.compiled')") == [
        "openreg_lab.recording.compiled"
    ]
    # Generated code calling the recorder (the wrapper of openreg_lab/device/_inductor.py wrote it).
    assert _recorder_code("RUNTIME = 'openreg_lab.device._compiled_runtime'") == ["_compiled_runtime"]
    assert _recorder_code("line = f'_C._trace_scope_end({t})'") == ["_trace_scope_end"]
    assert _recorder_code("from openreg_lab import _C\n_C.mark_initialized()") == []  # the device's own
    assert _recorder_code('"""Calls ``_trace_intern`` (openreg_lab.recording)."""') == []  # prose only
