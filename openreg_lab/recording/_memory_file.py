"""A trace's memory observations in its file (Note [Memory observations in a trace file])."""

from __future__ import annotations

from typing import Any

import numpy as np

from openreg_lab.recording.events import MAX_DEVICES
from openreg_lab.recording.observations import BLOCK_FIELDS, CATEGORIES, Observed

OBSERVATION_FIELDS = ("time", "address", "category")
#: The archive members' prefixes: observations, blocks held when the trace began.
PREFIXES = ("o_", "b_")


# Note [Memory observations in a trace file]
# A trace's observations (``observations.Observed``: what it saw of parameters, gradients,
# optimizer state and inputs, and the blocks each device held when it began) add arrays o_<field>
# (one entry an observation) and b_<field> (one entry a block) to the file, and a "memory" object
# to its header: the category names the codes stand for and the time the blocks were taken.
# Files without them (written before, or by a trace that was never opened) load with no
# observations: the memory tables then show one allocation of the bytes held before the trace, and
# no parameter, gradient, optimizer state or observed input. As for host samples (Note [Host
# samples in a trace file]) the format's version stays 2: older readers skip the new members. They
# are untrusted: every code, device and count is checked before a table reads it.
def pack(observed: Observed) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header entry and the arrays that store ``observed``."""
    header = {"categories": list(CATEGORIES), "snapshot_ns": int(observed.snapshot_ns)}
    arrays = {f"o_{k}": getattr(observed, k) for k in OBSERVATION_FIELDS}
    arrays.update({f"b_{k}": observed.blocks[k] for k in BLOCK_FIELDS})
    return header, arrays


def problem(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> str | None:
    """What is wrong with a file's memory observations (None: nothing, or none saved)."""
    m = header.get("memory")
    if m is None and not arrays:
        return None
    if not isinstance(m, dict):
        return f"its header's memory is {_short(m)}, not an object with the observations' categories"
    names = m.get("categories")
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        return "its header's memory categories is not a list of strings"
    unknown = [x for x in names if x not in CATEGORIES]
    if unknown:
        return f"its header's memory categories name {_short(unknown[0])}, not one of {', '.join(CATEGORIES)}"
    snap = m.get("snapshot_ns")
    if not isinstance(snap, int) or isinstance(snap, bool) or not 0 <= snap < 2**63:
        return f"its header's memory snapshot_ns is {_short(snap)}, not a clock time in ns"
    wanted = [f"o_{k}" for k in OBSERVATION_FIELDS] + [f"b_{k}" for k in BLOCK_FIELDS]
    missing = [k for k in wanted if k not in arrays]
    if missing:
        return f"it lacks the memory columns {', '.join(missing)}"
    for k in wanted:
        v = arrays[k]
        if v.ndim != 1 or not np.issubdtype(v.dtype, np.integer):
            return f"its memory column {k} holds {v.dtype} values of {v.ndim} dimensions, not integers"
    for prefix, fields in (("o_", OBSERVATION_FIELDS), ("b_", BLOCK_FIELDS)):
        if len({len(arrays[prefix + k]) for k in fields}) > 1:
            return f"its memory columns {prefix}* disagree in length"
    limits = {
        "o_time": (0, None), "o_address": (0, None), "o_category": (0, len(names) - 1),
        "b_device": (0, MAX_DEVICES - 1), "b_address": (0, None), "b_size": (0, None),
        "b_requested": (0, None), "b_allocated": (0, 1),
    }  # fmt: skip
    for k, (lo, hi) in limits.items():
        v = arrays[k]
        if len(v) and (int(v.min()) < lo or (hi is not None and int(v.max()) > hi)):
            bad = int(v.min()) if int(v.min()) < lo else int(v.max())
            return f"its memory column {k} holds {bad}, outside {lo} to {'any' if hi is None else hi}"
    return None


def unpack(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> Observed | None:
    """The observations of a file that ``problem`` passed (None when it holds none)."""
    m = header.get("memory")
    if m is None:
        return None
    codes = np.asarray([CATEGORIES.index(x) for x in m["categories"]], dtype=np.int8)
    return Observed(
        time=arrays["o_time"].astype(np.int64),
        address=arrays["o_address"].astype(np.int64),
        category=codes[arrays["o_category"].astype(np.int64)] if len(codes) else np.zeros(0, np.int8),
        blocks={k: arrays[f"b_{k}"].astype(np.int64) for k in BLOCK_FIELDS},
        snapshot_ns=int(m["snapshot_ns"]),
    )


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
