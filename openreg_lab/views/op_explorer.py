"""The report's op explorer: the op table of ``Trace.summary()`` that filters, sorts and, on a click,
outlines the op on the timeline and shows its details and dispatch path, with no kernel.

``explorer_data`` is what the page gets: one row per op and device with its numbers, their text,
the id of its longest call and, for the rows that cost the most, that call's details panel as HTML
(``details_html``, escaped here); ``op_explorer.js`` draws it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import analysis, lookup
from openreg_lab.views.details import details_html

JS = Path(__file__).with_name("op_explorer.js")
#: Rows whose details panel is embedded (the costliest first); the others show a hint.
MAX_DETAILS = 200


def explorer_data(events: pd.DataFrame, ops: pd.DataFrame, max_details: int = MAX_DETAILS) -> dict[str, Any]:
    """The explorer's rows (``ops`` is ``analysis.summary(events)``) and the kernel kinds to filter by."""
    longest = _longest_calls(events)
    rows = []
    for i, r in enumerate(ops.itertuples(index=False)):
        event = longest.get((r.name, r.device), -1)
        details = ""
        if i < max_details and event >= 0:
            details = details_html(lookup.details(events, event), f"the longest of its {int(r.calls)} calls")
        rows.append(
            {
                "name": r.name,
                "device": r.device,
                "kernel": r.kernel,
                "calls": int(r.calls),
                **{k: int(getattr(r, k)) for k in analysis.KERNEL_KINDS},  # calls that ran each way
                "total_ns": int(r.total_ns),
                "self_ns": int(r.self_ns),
                "bytes_copied": int(r.bytes_copied),
                "path": r.path,
                "text": {
                    "total_ns": theme.format_ns(r.total_ns),
                    "self_ns": theme.format_ns(r.self_ns),
                    "bytes_copied": theme.format_bytes(r.bytes_copied),
                },
                "event": int(event),
                "details": details,
            }
        )
    return {"rows": rows, "kernels": list(analysis.KERNEL_KINDS), "colors": dict(theme.KERNEL_COLORS)}


def _longest_calls(events: pd.DataFrame) -> dict[tuple[str, str], int]:
    """The id of the longest call of each op name and device (the summary's ``device``: "-" for none)."""
    ops = events[events["kind"] == "op"]
    if ops.empty:
        return {}
    frame = pd.DataFrame(
        {"name": ops["name"], "dev": ops["device"].where(ops["device"].notna(), "-"), "dur": ops["dur_ns"]}
    )
    frame["id"] = ops["id"]
    picked = frame.sort_values("dur", ascending=False, kind="stable").drop_duplicates(["name", "dev"])
    return {(n, d): int(i) for n, d, i in zip(picked["name"], picked["dev"], picked["id"], strict=True)}
