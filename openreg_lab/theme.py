"""The one palette of every view, the HTML report and the Chrome export (depends on nothing).

A kernel kind (what finally ran an op) and a copy direction each have one colour, used identically
everywhere, so a fallback is the same orange in the timeline, the fallback bars, the Sankey and
the report. The Chrome export names the nearest of Chrome's reserved colour names (``cname``).
"""

from __future__ import annotations

#: What finally ran an op: a hand-written kernel, the boxed CPU fallback, a composite that
#: decomposed into other ops, or the generic native path (a CPU kernel on device memory).
KERNEL_COLORS: dict[str, str] = {
    "native": "#2a9d8f",
    "fallback": "#e76f51",
    "composite": "#8d99ae",
    "generic": "#6a4c93",
}
#: An op whose kernel the recorder did not see (e.g. an autograd node, a still-running op).
OTHER_COLOR = "#b8c0cc"
#: Backward (autograd) nodes: drawn as the frame around the ops they ran.
BACKWARD_COLOR = "#457b9d"

#: Copies by direction: host to device, device to host, device to device.
COPY_COLORS: dict[str, str] = {"H2D": "#f4a261", "D2H": "#e9c46a", "D2D": "#9c6644"}
CAST_COLOR = "#c77dff"
MEMORY_COLOR = "#264653"
MARK_COLOR = "#d62828"
DISPATCH_KEY_COLOR = "#5c677d"  # a dispatch key in the Sankey
TEXT_COLOR = "#222222"
MUTED_TEXT_COLOR = "#555555"  # notes under a view
WARNING_COLOR = "#b00020"  # what changes how to read a trace: dropped events, a profile...
STEP_BAND_COLOR = "rgba(29,53,87,0.07)"  # every other training step on the timeline
#: torch.compile: a generated kernel (or a compiled graph's call), and compiling a graph.
COMPILED_COLOR = "#0077b6"
COMPILE_COLOR = "#343a40"
#: torch.distributed collectives (views.ranks): the collective itself, and a rank's wait on it.
COLLECTIVE_COLOR = "#1d3557"
COLLECTIVE_WAIT_COLOR = "#a8dadc"
HOST_COLOR = "#95d5b2"  # sampled host Python (trace(host=True)) on the timeline and in the verdict
HOST_WAIT_COLOR = "#d8e2dc"  # host time spent waiting (a sleep, a lock, data loading)

#: The memory categories (``recording.observations.CATEGORIES``, in that order), stacked by the
#: memory view: what the model holds in greens and blues, what a step makes in warm colours.
MEMORY_CATEGORY_COLORS: dict[str, str] = {
    "parameter": "#264653",
    "gradient": "#2a9d8f",
    "optimizer_state": "#8ab17d",
    "input": "#e9c46a",
    "activation": "#f4a261",
    "autograd_detail": "#e76f51",
    "temporary": "#9d4edd",
    "unknown": "#b8c0cc",
}

#: The split of a fallback's time: copying the arguments to the CPU, the CPU kernel, copying back.
FALLBACK_PART_COLORS: dict[str, str] = {
    "copy to CPU": COPY_COLORS["D2H"],
    "CPU compute": KERNEL_COLORS["fallback"],
    "copy back": COPY_COLORS["H2D"],
}

#: ``coverage()``'s resolutions (how openreg resolves an operator), in the same family of colours.
RESOLUTION_COLORS: dict[str, str] = {
    "native": KERNEL_COLORS["native"],
    "composite_implicit": KERNEL_COLORS["composite"],
    "composite_explicit": "#adb5bd",
    "fallback": KERNEL_COLORS["fallback"],
    "missing": "#6c757d",
}

#: Chrome's reserved colour names closest to ours, for the Chrome Trace Event export.
CHROME_CNAMES: dict[str, str] = {
    "native": "good",
    "fallback": "terrible",
    "composite": "grey",
    "generic": "olive",
    "backward": "rail_response",
    "H2D": "yellow",
    "D2H": "bad",
    "D2D": "brown",
    "cast": "rail_animation",
    "compiled": "cq_build_passed",
    "compile": "startup",
    "collective": "thread_state_running",
    "collective wait": "thread_state_iowait",
    "host": "generic_work",  # a sampled Python function (the Python lane)
    "host wait": "thread_state_sleeping",  # one that waited through most of its slice
}

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
MONO = "ui-monospace, SFMono-Regular, Menlo, monospace"


def kernel_color(kernel: str | None) -> str:
    """The colour of an op whose kernel kind is ``kernel`` (None or unknown: ``OTHER_COLOR``)."""
    if kernel is None:
        return OTHER_COLOR
    return KERNEL_COLORS.get(kernel, OTHER_COLOR)


def event_color(kind: str, kernel: str | None = None, name: str | None = None) -> str:
    """The colour of one event: ops by kernel kind, copies by direction, casts, backward nodes,
    compiled code and compilations, collectives and the waits on them."""
    if kind == "copy":
        return COPY_COLORS.get(name or "", OTHER_COLOR)
    if kind == "cast":
        return CAST_COLOR
    if kind == "backward":
        return BACKWARD_COLOR
    if kind == "fallback":
        return KERNEL_COLORS["fallback"]
    if kind == "compiled":
        return COMPILED_COLOR
    if kind == "compile":
        return COMPILE_COLOR
    if kind == "collective":
        return COLLECTIVE_WAIT_COLOR if (name or "").startswith("wait ") else COLLECTIVE_COLOR
    return kernel_color(kernel)


def plotly_layout(**overrides: object) -> dict[str, object]:
    """The plotly layout every chart starts from (font, margins, background)."""
    layout: dict[str, object] = {
        "font": {"family": FONT, "size": 12, "color": "#222"},
        "margin": {"l": 10, "r": 10, "t": 36, "b": 10},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "hoverlabel": {"font": {"family": MONO, "size": 11}},
    }
    layout.update(overrides)
    return layout


def format_ns(ns: float) -> str:
    """A duration for people: ``"812 ns"``, ``"3.4 µs"``, ``"12.0 ms"``, ``"1.25 s"``."""
    ns = float(ns)
    if abs(ns) < 1_000:
        return f"{ns:.0f} ns"
    if abs(ns) < 1_000_000:
        return f"{ns / 1e3:.1f} µs"
    if abs(ns) < 1_000_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def format_bytes(n: float) -> str:
    """A byte count for people: ``"512 B"``, ``"4.0 KiB"``, ``"1.5 MiB"``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
