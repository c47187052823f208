"""The ``torch.compile`` options openreg cannot honour, refused with :class:`InductorUnsupportedError`.

CUDA graphs (``mode="reduce-overhead"``, ``"max-autotune"``, ``options={"triton.cudagraphs":
True}``), a CPU backend other than Inductor's C++ one (``options={"cpu_backend": "triton"}``),
and Inductor's C++ wrapper (``options={"cpp_wrapper": True}``, refused by ``_inductor.py``).
Each error names the option and what works instead, before any code runs on the device.
"""

from __future__ import annotations


class InductorUnsupportedError(RuntimeError):
    """An option of torch.compile's default backend (Inductor) that openreg cannot honour."""

    def __init__(self, option: str, instead: str) -> None:
        super().__init__(f"torch.compile on openreg does not support {option}: {instead}")
        self.option = option


def check_options() -> None:
    """Raise :class:`InductorUnsupportedError` for an Inductor option in force that openreg cannot honour.

    Called by Inductor's wrapper code generator for each openreg graph, inside the configuration
    the graph is compiled with (``torch.compile(mode=..., options=...)``).
    """
    from torch._inductor import config

    if config.triton.cudagraphs:
        raise InductorUnsupportedError(
            'CUDA graphs (mode="reduce-overhead", mode="max-autotune" or '
            'options={"triton.cudagraphs": True})',
            'openreg has no graph capture; use the default mode, or mode="max-autotune-no-cudagraphs"',
        )
    if config.cpu_backend != "cpp":
        raise InductorUnsupportedError(
            f"options={{'cpu_backend': {config.cpu_backend!r}}}",
            "openreg's kernels are Inductor's C++ kernels for CPUs; leave cpu_backend at 'cpp'",
        )
