"""Host samples in the user's terms: imports as one frame each, library frames folded away.

Note [Folding host frames]
The sampler records the interpreter's stacks (Note [Host samples]): an import shows as a dozen
frames of importlib's bootstrap (``_find_and_load``, ``_call_with_frames_removed``, ``_path_stat``)
and a call into torch as its Python layers. ``fold`` rewrites the samples' prefix tree, node by node,
into the frames a user reads (pyinstrument shows stacks the same way):

- A run of consecutive frames of the import system (``<frozen importlib._bootstrap>``,
  ``<frozen importlib._bootstrap_external>``, their source files in ``importlib/``) becomes one
  frame ``import <module>``. A sample does not hold ``_find_and_load``'s argument, so the module is
  read from the tree: the first frame under the run that is a module's top level (``<module>``)
  names it, by its file (its path under the longest ``sys.path`` entry or library directory that
  holds it, as a dotted name; ``__init__`` dropped; a frozen module by its name). The run's first
  node is shared by every sample of that import (the frame is the same object at the same
  instruction while the import runs, Note [Host samples]), so samples taken while the module was
  still being found or read (``_path_stat``, ``FileLoader.get_data``) get the name the module's
  execution gives it in other samples; an import never sampled past its finding is
  ``import (module not sampled)``. Several modules under one run (a loop of ``import_module`` at one
  line) are named together (``import a, b``).
- Unless ``library=True``: frames of the standard library, installed packages, openreg_lab (but
  its bundled examples, which a user runs as their own script) and frozen modules
  (``host.library_prefixes``) are left out, so their time is their nearest kept
  caller's own time; an ``import`` frame under another (the imports a library's import makes) is
  folded into it, its module's code with it: ``import torch._dynamo`` holds all that importing it
  cost. The import frame keeps in ``callee`` what the user's line called (``AdamW()`` for
  ``AdamW.__init__``), for the verdict to say "``AdamW()`` at train.py:88 imported torch._dynamo".
  A stack with no frame of the user's keeps its innermost frame (as ``host.user_node`` does).

The folded tree is a ``Samples`` like the raw one (the same samples, each at its folded node), so
``host.slices``, ``host.per_function`` and the verdict read it unchanged; ``Folded.node`` maps each
raw node to its folded one (the verdict keeps reading waits from the raw stacks, whose callees and
``torch.utils.data`` frames the fold leaves out). Folded frames name no callee but imports' callers.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

import numpy as np

from openreg_lab.recording import host as _host

#: The function name of a folded import frame starts with this.
IMPORT = "import "
UNKNOWN_MODULE = "(module not sampled)"
#: The bundled examples (``openreg_lab/examples``) are the user's code, though inside openreg_lab.
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples")
EXAMPLES = os.path.normpath(EXAMPLES) + os.sep
_IMPORT_FILES = ("<frozen importlib._bootstrap", "<frozen zipimport>")
_IMPORT_SOURCES = tuple(
    os.sep + os.path.join("importlib", f) for f in ("_bootstrap.py", "_bootstrap_external.py")
)


@dataclass(frozen=True)
class Folded:
    """``samples``: the folded samples; ``node``: per raw node, its folded node (-1: none);
    ``library``: whether library frames were kept."""

    samples: _host.Samples
    node: np.ndarray
    library: bool = False


def is_import_file(file: str) -> bool:
    """Whether ``file`` is the import system's own code."""
    return file.startswith(_IMPORT_FILES) or file.endswith(_IMPORT_SOURCES)


def module_name(file: str, roots: tuple[str, ...] | None = None) -> str:
    """The dotted module name of a module's ``file``: its path under the longest of ``roots``
    (``sys.path`` and the library directories by default); a frozen module's own name."""
    if file.startswith("<frozen ") and file.endswith(">"):
        return file[len("<frozen ") : -1]
    if roots is None:
        roots = _roots()
    under = [r for r in roots if file.startswith(r)]
    rel = file[len(max(under, key=len)) :] if under else os.path.basename(file)
    parts = [p for p in rel.split(os.sep) if p]
    if parts:
        parts[-1] = parts[-1].split(".")[0]
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
    return ".".join(parts) or file


def _roots() -> tuple[str, ...]:
    paths = [os.path.abspath(p or os.getcwd()) for p in sys.path if isinstance(p, str)]
    return tuple({p.rstrip(os.sep) + os.sep for p in paths} | set(_host.library_prefixes()))


def _call_name(qualname: str) -> str:
    """What a line calling ``qualname`` reads as: ``AdamW()`` for ``AdamW.__init__``."""
    owner, _, leaf = qualname.rpartition(".")
    if leaf in ("__init__", "__call__", "__new__") and owner:
        return f"{owner.rpartition('.')[2]}()"
    return f"{qualname}()"


def fold(s: _host.Samples, *, library: bool = False, prefixes: tuple[str, ...] | None = None) -> Folded:
    """``s`` with its frames folded as Note [Folding host frames] says."""
    text = s.strings
    prefixes = _host.library_prefixes() if prefixes is None else prefixes
    roots = _roots()
    n = len(s.parent)
    is_import = np.array([is_import_file(text[int(f)]) for f in s.file], dtype=bool)
    is_library = np.array(
        [
            (t := text[int(f)]).startswith((*prefixes, "<frozen")) and not t.startswith(EXAMPLES)
            for f in s.file
        ],
        dtype=bool,
    )
    run_start = np.arange(n)  # per import node, the first node of its run of import frames
    # (``modules`` is keyed by it: the names a run's executed modules give it)
    for i in range(n):
        p = int(s.parent[i])
        if is_import[i] and p >= 0 and is_import[p]:
            run_start[i] = run_start[p]
    modules: dict[int, list[str]] = {}
    for i in range(n):
        p = int(s.parent[i])
        if not is_import[i] and p >= 0 and is_import[p] and text[int(s.function[i])] == "<module>":
            names = modules.setdefault(int(run_start[p]), [])
            name = module_name(text[int(s.file[i])], roots)
            if name not in names:
                names.append(name)
    strings = list(text)
    index = {t: k for k, t in enumerate(strings)}

    def code(t: str) -> int:
        if t not in index:
            index[t] = len(strings)
            strings.append(t)
        return index[t]

    tree: dict[tuple[int, ...], int] = {}  # (folded parent, function, file, first line, line, callee)
    rows: list[tuple[int, ...]] = []

    def frame(parent: int, *fields: int) -> int:
        key = (parent, *fields)
        if key not in tree:
            tree[key] = len(rows)
            rows.append(key)
        return tree[key]

    # Per raw node, from its parent's (a parent is an earlier node): ``base`` the folded node its
    # children hang under (-1: no frame kept yet), ``in_import`` whether that is an import frame,
    # ``user`` the nearest user frame on its path and ``below`` the raw node right under that one.
    base = np.full(n, -1, dtype=np.int64)
    in_import = np.zeros(n, dtype=bool)
    user = np.full(n, -1, dtype=np.int64)
    below = np.full(n, -1, dtype=np.int64)
    out = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        p = int(s.parent[i])
        b, imp, u, w = (
            (int(base[p]), bool(in_import[p]), int(user[p]), int(below[p])) if p >= 0 else (-1, False, -1, -1)
        )
        mine = (int(s.function[i]), int(s.file[i]), int(s.first_line[i]), int(s.line[i]), 0)
        if is_import[i]:
            if not (p >= 0 and is_import[p]) and (library or not imp):  # a run starts: one frame
                names = modules.get(i, [])
                what = IMPORT + (", ".join(names) if names else UNKNOWN_MODULE)
                caller = _call_name(text[int(s.function[w])]) if u >= 0 and w >= 0 else ""
                b, imp = frame(b, code(what), 0, 0, 0, code(caller)), True
        elif library or not is_library[i]:
            b, imp = frame(b, *mine), False
        if not is_library[i] and not is_import[i]:
            u, w = i, -1
        elif u >= 0 and w < 0:
            w = i
        base[i], in_import[i], user[i], below[i] = b, imp, u, w
        out[i] = b if b >= 0 else frame(-1, *mine)  # no frame kept: the node's own, as user_node does
    cols = np.array(rows, dtype=np.int64).reshape(-1, 6)
    folded = replace(
        s,
        node=np.where(s.node >= 0, out[np.maximum(s.node, 0)], -1) if n else s.node.copy(),
        parent=cols[:, 0].copy(),
        function=cols[:, 1].copy(),
        file=cols[:, 2].copy(),
        first_line=cols[:, 3].copy(),
        line=cols[:, 4].copy(),
        callee=cols[:, 5].copy(),
        strings=strings,
    )
    return Folded(folded, out, library)
