"""Two traces compared, as tables: per op, the difference in calls, kernel kinds, time, bytes copied
and casts (``compare_table``), the calls of generated kernels that fused an op (``fused_calls``), and
one trace's headline numbers (``totals``). ``openreg_lab.views.compare`` draws them.

The cases it exists for: profile ``default`` vs ``mps``, autocast off vs on, before and after
registering a kernel, eager vs ``torch.compile`` (``fused_a`` / ``fused_b``: the calls of
generated kernels that fused the op, so an op that vanished into fused kernels says so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from openreg_lab.recording import analysis

_PER_TRACE = ["calls", "fallback", "kernel", "time_ns", "bytes_copied", "casts", "fused"]


def compare_table(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per op name, both traces side by side (``calls_a``, ``calls_b``, ... for ``_PER_TRACE``) and
    the differences ``d_calls``, ``d_time_ns``, ``d_bytes_copied``, ``d_casts`` (b minus a).

    ``change`` says ``"falls back only in a"`` / ``"only in b"``, ``"fused in a"`` / ``"fused in b"``
    (no call reached openreg in that trace, compiled kernels fused it), ``"kernel changed"``, ``"only
    in a"`` / ``"only in b"`` or ``""``; rows with a fallback difference come first, then by
    ``|d_time_ns|``.
    """
    sides = [_per_op(a).add_suffix("_a"), _per_op(b).add_suffix("_b")]
    out = sides[0].join(sides[1], how="outer")
    for col in _PER_TRACE:
        for s in "ab":
            c = f"{col}_{s}"
            out[c] = out[c].fillna("" if col == "kernel" else 0)
            if col != "kernel":
                out[c] = out[c].astype(np.int64)
    for col in ("calls", "time_ns", "bytes_copied", "casts"):
        out[f"d_{col}"] = out[f"{col}_b"] - out[f"{col}_a"]
    fa, fb = out["fallback_a"] > 0, out["fallback_b"] > 0
    change = np.select(
        [
            fa & ~fb,
            fb & ~fa,
            (out["calls_a"] == 0) & (out["fused_a"] > 0),
            (out["calls_b"] == 0) & (out["fused_b"] > 0),
            out["calls_a"] == 0,
            out["calls_b"] == 0,
            out["kernel_a"] != out["kernel_b"],
        ],
        [
            "falls back only in a",
            "falls back only in b",
            "fused in a",
            "fused in b",
            "only in b",
            "only in a",
            "kernel changed",
        ],
        default="",
    )
    out["change"] = change
    out["rank"] = np.where(fa != fb, 0, np.where(change != "", 1, 2))
    out["abs_d"] = out["d_time_ns"].abs()
    out = out.reset_index(names="name").sort_values(["rank", "abs_d", "name"], ascending=[True, False, True])
    return out.drop(columns=["rank", "abs_d"]).reset_index(drop=True)


def _per_op(events: pd.DataFrame) -> pd.DataFrame:
    """Per op name: calls, fallback calls, the main kernel kind, time, bytes copied, casts."""
    ops = analysis.summary(events)
    per = ops.groupby("name").agg(
        calls=("calls", "sum"),
        fallback=("fallback", "sum"),
        time_ns=("total_ns", "sum"),
        bytes_copied=("bytes_copied", "sum"),
    )
    per["kernel"] = ops.groupby("name")["kernel"].agg(lambda s: s.iloc[0])
    casts = analysis.casts(events)
    per["casts"] = casts.groupby("op").size().reindex(per.index, fill_value=0) if len(casts) else 0
    fused = fused_calls(events)
    per = per.join(fused.rename("fused"), how="outer")
    per["fused"] = per["fused"].fillna(0)
    for col in ("calls", "fallback", "time_ns", "bytes_copied", "casts"):
        per[col] = per[col].fillna(0)
    per["kernel"] = per["kernel"].fillna("")
    return per[_PER_TRACE]


def fused_calls(events: pd.DataFrame) -> pd.Series:
    """Per op name, how many calls of generated (torch.compile) kernels fused it."""
    if "fused" not in events:
        return pd.Series(dtype=np.int64)
    kernels = events.loc[(events["kind"] == "compiled") & events["fused"].notna(), "fused"]
    if kernels.empty:
        return pd.Series(dtype=np.int64)
    return kernels.str.split(", ").explode().value_counts().astype(np.int64)


def totals(events: pd.DataFrame) -> dict[str, int]:
    """The headline numbers of one trace: op calls, fallback calls, traced time, bytes copied, casts."""
    kind = events["kind"]
    return {
        "op calls": int((kind == "op").sum()),
        "fallback calls": int((kind == "fallback").sum()),
        "time_ns": analysis.span(events),
        "bytes copied": int(events.loc[kind == "copy", "bytes"].sum()),
        "casts": int((kind == "cast").sum()),
    }
