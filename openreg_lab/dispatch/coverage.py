"""Operator coverage: how openreg resolves every operator registered in the dispatcher.

``coverage()`` reads the live dispatcher (which dispatch keys have kernels for each operator), not a
hand-kept list, so an operator or kernel added at runtime with ``torch.library`` shows up.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pandas as pd
import torch

from openreg_lab.dispatch import _lookup
from openreg_lab.dispatch import profiles as _profiles
from openreg_lab.dispatch.native import native_ops, via_cpu_ops

#: Values of the ``resolution`` column, in the dispatcher's order of preference for PrivateUse1.
RESOLUTIONS = ("native", "composite_implicit", "composite_explicit", "fallback", "missing")

#: Values of the ``kernel`` column: what runs for an openreg call.
KERNELS = (
    "hand_written",  # a kernel in csrc/aten/native (listed in dispatch/native_ops.yaml)
    "generic",  # the generic native path: the CPU kernel on device memory (under a profile)
    "via_cpu",  # computing through the copy path (fallback routes; convolution under a profile lacking it)
    "registered",  # a PrivateUse1 kernel registered elsewhere (torch itself, torch.library)
    "unavailable",  # native in the profile, but no CPU kernel to simulate it with
    "composite",  # decomposes into other operators
    "cpu_fallback",  # the boxed CPU fallback, with its copies
    "none",  # nothing can run it: the fallback's CPU kernel does not exist
)

COLUMNS = (
    "name",
    "namespace",
    "overload",
    "resolution",
    "kernel",
    "has_autograd_kernel",
    "has_autocast_rule",
    "tags",
)

_has_kernel = _lookup.has_kernel  # Note [Operator names torch cannot parse]


@cache
def _tags(name: str) -> tuple[str, ...]:
    base, _, overload = name.partition(".")
    try:
        _, _, tags = torch._C._get_operation_overload(base, overload)
    except RuntimeError:
        return ()
    return tuple(sorted(t.name for t in tags))


def _without_openreg(name: str) -> tuple[str, str]:
    """(resolution, kernel) the dispatcher picks for PrivateUse1 when openreg has no kernel for ``name``."""
    if _has_kernel(name, "CompositeExplicitAutogradNonFunctional") or _has_kernel(
        name, "CompositeExplicitAutograd"
    ):
        return "composite_explicit", "composite"
    if _has_kernel(name, "CompositeImplicitAutograd"):
        return "composite_implicit", "composite"
    fallback = torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.PrivateUse1)
    if fallback and _profiles._runs_on_cpu(name):
        return "fallback", "cpu_fallback"
    return "missing", "none"


def _static(
    name: str, overridden: bool, hand_written: frozenset[str], via_cpu: frozenset[str]
) -> tuple[str, str]:
    """(resolution, kernel) of ``name`` with openreg's static registrations, as if no profile were active.

    ``overridden``: the active profile registers a PrivateUse1 kernel for it, to be looked through.
    """
    if overridden:
        return ("native", "hand_written") if name in hand_written else _without_openreg(name)
    if _has_kernel(name, "PrivateUse1"):
        if name in hand_written:
            return "native", "hand_written"
        return "native", "via_cpu" if name in via_cpu else "registered"
    return _without_openreg(name)


def _classify(name: str, static: tuple[str, str], ops: frozenset[str] | None) -> tuple[str, str]:
    """Apply a profile (its operator set; None: no profile) to a static classification.

    Mirrors ``profiles._plan``: the operators a profile has without a hand-written kernel run
    generically; the hand-written ones it lacks get what the dispatcher picks without them.
    """
    resolution, kernel = static
    if ops is None or kernel in ("via_cpu", "registered") or resolution == "composite_implicit":
        return static
    if name in ops:
        if kernel == "hand_written":
            return static
        return "native", "generic" if _profiles._runs_on_cpu(name) else "unavailable"
    if kernel == "hand_written" and name in _profiles._convolution_hooks():
        return "native", "via_cpu"  # the kernel computes through the copy path
    if kernel == "hand_written" and name not in _profiles._minimal():
        return _without_openreg(name)
    return static


def coverage(profile: _profiles.Profile | None = None, *, trace: Any = None) -> pd.DataFrame:
    """Return one row per operator overload registered in the dispatcher, with how openreg runs it.

    Columns: ``name`` (``aten::add.Tensor``, ``aten::linear``), ``namespace``, ``overload``,
    ``resolution`` (what the dispatcher picks for openreg: ``native``, ``composite_implicit``,
    ``composite_explicit``, ``fallback`` or ``missing``, the last meaning that the fallback would run
    but the CPU has no kernel either), ``kernel`` (see ``KERNELS``), ``has_autograd_kernel``,
    ``has_autocast_rule``, ``tags``.

    ``profile``: classify as if that profile were active (see ``openreg_lab.profiles``); by default,
    the active profile, if any. ``trace``: an object whose ``events`` DataFrame has the columns
    ``kind``, ``name``, ``kernel`` and ``dur_ns``; adds ``hits`` and ``time_ns`` (summed over the
    trace's ``op`` events) and ``traced_kernels`` (the kernels the trace saw, e.g. ``"fallback"``),
    so that ``coverage(trace=t).sort_values("time_ns")`` ranks what to implement next; and
    ``compiled_hits``, the calls made from ``torch.compile``'d code: what a backend must implement
    for compiled mode (the ops that still reach it after AOTAutograd's and Inductor's
    decompositions and fusion).
    """
    ops = _profiles.profile_ops(profile) if profile is not None else _profiles.active_profile_ops()
    active = _profiles._active
    overridden = frozenset() if active is None else active.overridden()
    hand_written = frozenset(native_ops())
    via_cpu = frozenset(via_cpu_ops())
    rows = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, rest = name.partition("::")
        _, _, overload = rest.partition(".")
        resolution, kernel = _classify(name, _static(name, name in overridden, hand_written, via_cpu), ops)
        rows.append(
            (
                name,
                namespace,
                overload,
                resolution,
                kernel,
                _has_kernel(name, "AutogradPrivateUse1") or _has_kernel(name, "Autograd"),
                _has_kernel(name, "AutocastPrivateUse1"),
                _tags(name),
            )
        )
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["resolution"] = pd.Categorical(df["resolution"], categories=list(RESOLUTIONS))
    df["kernel"] = pd.Categorical(df["kernel"], categories=list(KERNELS))
    if trace is not None:
        df = _join_trace(df, trace)
    return df


_TRACE_COLUMNS = ("kind", "name", "kernel", "dur_ns")


def _join_trace(df: pd.DataFrame, trace: Any) -> pd.DataFrame:
    events = getattr(trace, "events", None)
    if not isinstance(events, pd.DataFrame):
        raise TypeError(
            "coverage(trace=...) takes a trace whose `events` is a pandas DataFrame "
            f"(from openreg_lab.trace()); got {type(trace).__name__}"
        )
    missing = [c for c in _TRACE_COLUMNS if c not in events.columns]
    if missing:
        raise ValueError(
            f"coverage(trace=...): the trace's events lack the column(s) {', '.join(missing)}; "
            f"expected {', '.join(_TRACE_COLUMNS)}"
        )
    ops = events[events["kind"] == "op"]
    stats = ops.groupby("name").agg(
        hits=("name", "size"),
        time_ns=("dur_ns", "sum"),
        traced_kernels=("kernel", lambda k: ",".join(sorted(set(map(str, k))))),
    )
    out = df.merge(stats, how="left", left_on="name", right_index=True)
    out["hits"] = out["hits"].fillna(0).astype("int64")
    out["time_ns"] = out["time_ns"].fillna(0).astype("int64")
    out["traced_kernels"] = out["traced_kernels"].fillna("")
    is_op = (events["kind"] == "op").to_numpy()
    compiled = ops[_inside_compiled(events)[is_op]].groupby("name").size()
    out["compiled_hits"] = out["name"].map(compiled).fillna(0).astype("int64")
    return out


def _inside_compiled(events: pd.DataFrame) -> np.ndarray:
    """Per event (by row; parents are row ids): whether it ran under a ``compiled`` event."""
    kind = events["kind"].to_numpy()
    parent = events["parent"].to_numpy() if "parent" in events else np.full(len(events), -1)
    inside = np.zeros(len(events), dtype=bool)
    up = parent.astype(np.int64).copy()
    while True:
        live = up >= 0
        if not live.any():
            return inside
        inside[live] |= kind[up[live]] == "compiled"
        up[live] = parent[up[live]]
