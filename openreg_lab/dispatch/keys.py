"""An operator's dispatch table as the dispatcher computed it (``dispatch_table``), and as a table of
keys in priority order with the path a call takes marked (``key_grid``, what
``openreg_lab.views.DispatchExplorer`` draws).
"""

from __future__ import annotations

import pandas as pd
import torch

# The tags the dispatcher prints after each entry of an operator's computed table, and what
# they mean here.
_TAGS = {
    "kernel": "kernel",
    "autograd kernel": "kernel",
    "default backend kernel": "composite_explicit",
    "math kernel": "composite_implicit",
    "backend fallback": "boxed fallback",
}


def dispatch_table(name: str) -> dict[str, tuple[str, str]]:
    """``{runtime key: (registered, source)}`` from the dispatcher's computed table for ``name`` (a
    qualified overload name), lowest priority first as the dispatcher lists them: ``registered`` is
    ``kernel``, ``fallthrough``, ``composite_explicit``, ``composite_implicit``, ``boxed fallback``
    (or another tag, as the dispatcher prints it); ``source`` where it was registered."""
    out = {}
    for line in torch._C._dispatch_dump_table(name).splitlines():
        key, sep, text = line.partition(": ")
        if not sep:
            continue
        text = text.strip()
        tag = text.rsplit("[", 1)[-1].rstrip("]") if text.endswith("]") else ""
        registered = "fallthrough" if text.startswith("fallthrough") else _TAGS.get(tag, tag or "kernel")
        source = text.removeprefix("fallthrough ").removeprefix("registered at ")
        out[key.strip()] = (registered, source)
    return out


#: Backends whose per-backend keys are hidden unless "every backend" is ticked (openreg and CPU stay).
_BACKENDS = (
    "CPU",
    "CUDA",
    "HIP",
    "XLA",
    "MPS",
    "IPU",
    "XPU",
    "HPU",
    "VE",
    "Lazy",
    "MTIA",
    "MAIA",
    "PrivateUse2",
    "PrivateUse3",
    "Meta",
    "FPGA",
    "Vulkan",
    "Metal",
    "Other",
    "NestedTensor",
    "CustomRNGKeyId",
    "MkldnnCPU",
)


def key_grid(op: str, path: list[str], *, every_backend: bool = False) -> pd.DataFrame:
    """The dispatch table of ``op`` as rows ``key``, ``registered``, ``source``, ``on_path`` in
    priority order (highest first), keeping openreg's (PrivateUse1) and CPU's per-backend keys and
    every backend-independent key unless ``every_backend``."""
    table = dispatch_table(op)
    rows = []
    for key in reversed(list(table)):  # the dispatcher lists runtime keys lowest priority first
        registered, source = table[key]
        per_backend = next((b for b in _BACKENDS if (key.endswith(b) and key != b) or key == b), None)
        if not every_backend and per_backend and key != "CPU" and key not in path:
            continue
        if key == "Undefined":
            continue
        rows.append((key, registered, source, key in path))
    for key in path:  # a key the table does not list (nothing registered) still shows on the path
        if key not in table:
            rows.append((key, "missing", "", True))
    return pd.DataFrame(rows, columns=["key", "registered", "source", "on_path"])
