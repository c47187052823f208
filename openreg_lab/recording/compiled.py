"""The lab's Scheduling and wrapper over the template's (Note [Compiled code in the trace]).

Attached to the device's ``torch.compile`` registration through its one seam (Note [The lab's seam
in Python] in ``openreg_lab/device/_seam.py``), at the first registration; importing this module
imports Inductor. :func:`attach` derives from the template's classes (``openreg_lab/device/_inductor.py``):

- the Scheduling remembers which aten ops each kernel fused (:func:`fused_ops`);
- the wrapper's generated module interns its kernels' names once when it loads, calls
  ``_trace_compiled_begin`` / ``_trace_scope_end`` around each kernel call (one relaxed atomic load
  each when no trace is open; ``csrc/trace/Compiled.h``), and wraps its ``call`` in the graph's
  region (``compiled_runtime.py``);
- each buffer it allocates is bracketed by ``_openreg_node(frame, source)`` ... ``(0, 0)`` where
  its FX node records the user's line (Note [The node an allocation is for]): the allocation's
  event takes that line as its source, and its memory-history stack that line as a frame;

and registers the compile, recompile and graph-break callbacks with Dynamo at each registration
(``compile_events.py``).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from typing import Any

import torch
from torch._inductor.virtualized import V

from openreg_lab.device import _seam
from openreg_lab.recording import compile_events

#: The runtime module the generated code imports (cheap: it imports only ``openreg_lab._C``).
RUNTIME = "openreg_lab.recording.compiled_runtime"

DEVICE = "openreg"


def fused_ops(nodes: Any) -> str:
    """The aten overloads the scheduler ``nodes`` of one kernel came from, each once, comma-separated
    (node by node; within a node, by FX node name)."""
    names: dict[str, None] = {}
    for node in nodes:
        for snode in node.get_nodes():
            ir_node = getattr(snode, "node", None)
            for origin in sorted(getattr(ir_node, "origins", ()), key=lambda n: n.name):
                if origin.op != "call_function":
                    continue
                aten = origin.meta.get("original_aten") or origin.target
                name = aten.name() if isinstance(aten, torch._ops.OpOverload) else str(aten)
                names.setdefault(name, None)
    return ", ".join(names)


def node_source(buffer: Any) -> tuple[str, int, str] | None:
    """The user's line an Inductor buffer is for: the innermost frame outside torch of the stack
    trace Dynamo recorded for the last of its FX nodes that has one (Note [The node an allocation is
    for] in csrc/trace/Compiled.h), as (file, line, function); None when no node records one."""
    origins = [n for n in getattr(buffer, "origins", ()) or () if n.meta.get("stack_trace")]
    if not origins:
        return None
    order = {n: i for i, n in enumerate(origins[0].graph.nodes)}
    return _user_frame(max(origins, key=lambda n: order.get(n, -1)).meta["stack_trace"])


def _user_frame(stack_trace: str) -> tuple[str, int, str] | None:
    """The innermost frame outside torch of an FX node's ``stack_trace``."""
    for file, line, function in reversed(_FRAME.findall(stack_trace)):
        if not file.startswith(_TORCH):
            return file, int(line), function
    return None


_FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$', re.M)
_TORCH = os.path.dirname(torch.__file__) + os.sep


def cache_key() -> bytes:
    """The user's lines of the nodes of the graph Inductor is keying its cache on, which the wrapper
    writes into the code (Note [Inductor's cache knows openreg's code generators] in
    ``device/_inductor.py``): a graph of the same code from other lines gets its own key.

    Inductor computes the key in ``FxGraphHashDetails(gm, ...)``, which asks openreg's custom pass
    for its uuid, and through it the seam for this: the graph is that object's, up the stack."""
    from torch._inductor.codecache import FxGraphHashDetails

    frame = sys._getframe(1)
    while frame is not None and not isinstance(frame.f_locals.get("self"), FxGraphHashDetails):
        frame = frame.f_back
    gm = getattr(frame.f_locals["self"], "gm", None) if frame is not None else None
    if gm is None:
        return b""
    lines = [(n.name, _user_frame(n.meta.get("stack_trace") or "")) for n in gm.graph.nodes]
    return hashlib.sha256(repr(lines).encode("utf-8", "surrogatepass")).digest()


def traced_scheduling(template: type) -> type:
    """The template's Scheduling, remembering which ops each kernel fused for the traced wrapper."""

    class TracedScheduling(template):  # type: ignore[misc, valid-type]
        def define_kernel(self, src_code: str, nodes: Any, kernel_args: Any = None) -> str:
            kernel_name = super().define_kernel(src_code, nodes, kernel_args)
            wrapper = V.graph.wrapper_code
            if isinstance(getattr(wrapper, "fused", None), dict):
                wrapper.fused.setdefault(kernel_name, fused_ops(nodes))
            return kernel_name

    TracedScheduling.__qualname__ = TracedScheduling.__name__ = f"Traced{template.__name__}"
    return TracedScheduling


def traced_wrapper(template: type) -> type:
    """The template's Python wrapper, with the recorder's hooks around each kernel call and graph call."""

    class TracedWrapper(template):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.fused: dict[str, str] = {}
            self._interned: dict[str, str] = {}
            self._nodes: dict[tuple[str, int, str], str] = {}

        def write_header(self) -> None:
            super().write_header()
            self.header.splice(
                f"""
                import {RUNTIME} as _openreg
                _openreg_begin = _openreg.compiled_begin
                _openreg_end = _openreg.compiled_end
                _openreg_node = _openreg.node
                """,
                strip=True,
            )

        def _intern(self, text: str) -> str:
            """The module-level name holding ``text``'s interned id (defined once, at load)."""
            if text not in self._interned:
                var = f"_openreg_s{len(self._interned)}"
                self._interned[text] = var
                self.header.writeline(f"{var} = _openreg.intern({text!r})")
            return self._interned[text]

        def make_buffer_allocation(self, buffer: Any) -> str:
            """The allocation, its FX node's line named to the recorder while it runs (Note [The
            node an allocation is for])."""
            line = super().make_buffer_allocation(buffer)
            device = buffer.get_device()
            source = node_source(buffer) if device is not None and device.type == DEVICE else None
            if source is None:
                return line
            if source not in self._nodes:
                var = f"_openreg_n{len(self._nodes)}"
                self._nodes[source] = var
                self.header.writeline(f"{var} = _openreg.node_frame{source!r}")
            return f"_openreg_node(*{self._nodes[source]}); {line}; _openreg_node(0, 0)"

        def _generate_kernel_call_helper(
            self, kernel_name: str, call_args: Any, *, device: Any = None, **kwargs: Any
        ) -> None:
            device = device or V.graph.get_current_device_or_throw()
            if device.type != DEVICE:
                super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)
                return
            name = self._intern(kernel_name)
            fused = self._intern(self.fused.get(kernel_name, ""))
            self.writeline(f"_openreg_t = _openreg_begin({name}, {fused}, {device.index or 0})")
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)
            self.writeline("_openreg_end(_openreg_t)")

        def generate_end(self, result: Any) -> None:
            super().generate_end(result)
            index = next(iter(V.graph.device_idxs), 0) if V.graph.device_idxs else 0
            part = "backward" if V.graph.is_backward else "inference" if V.graph.is_inference else "forward"
            result.writeline(f"call = _openreg.region(call, {part!r}, {index})")

    TracedWrapper.__qualname__ = TracedWrapper.__name__ = f"Traced{template.__name__}"
    return TracedWrapper


def attach() -> None:
    """Attach the traced classes and the compile callbacks to the device's seam."""
    _seam.attach(
        subclasses={"Scheduling": traced_scheduling, "PythonWrapperCodegen": traced_wrapper},
        on_registered=compile_events.install,
        cache_key=cache_key,
    )
