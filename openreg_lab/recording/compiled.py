"""The lab's Scheduling and wrapper over the template's (Note [Compiled code in the trace]).

Attached to the device's ``torch.compile`` registration through its one seam (Note [The lab's seam
in Python] in ``openreg_lab/device/_seam.py``), at the first registration; importing this module
imports Inductor. :func:`attach` derives from the template's classes (``openreg_lab/device/_inductor.py``):

- the Scheduling remembers which aten ops each kernel fused (:func:`fused_ops`);
- the wrapper's generated module interns its kernels' names once when it loads, calls
  ``_trace_compiled_begin`` / ``_trace_scope_end`` around each kernel call (one relaxed atomic load
  each when no trace is open; ``csrc/trace/Compiled.h``), and wraps its ``call`` in the graph's
  region (``compiled_runtime.py``);

and registers the compile, recompile and graph-break callbacks with Dynamo at each registration
(``compile_events.py``).
"""

from __future__ import annotations

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

        def write_header(self) -> None:
            super().write_header()
            self.header.splice(
                f"""
                import {RUNTIME} as _openreg
                _openreg_begin = _openreg.compiled_begin
                _openreg_end = _openreg.compiled_end
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
    )
