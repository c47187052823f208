"""Memory in words: what was live when an allocation failed, for the verdict and ``run``'s summary.

::

    out of memory on openreg:0 asking 64.0 MiB with 1.7 GiB allocated: 1.1 GiB activations (0.4 GiB
    saved by `h.*.attn` at model.py:88), 0.6 GiB optimizer state

Module paths are shortened for the sentence: the outermost module's class is dropped and layer
numbers become ``*`` (``GPT2LMHeadModel.transformer.h.3.attn`` -> ``transformer.h.*.attn``), so
that a layer repeated twelve times counts as one place; lines are ``file.py:88``. The text is plain
(views escape it: every module and frame name comes from the user's code).
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from openreg_lab import theme

#: How each category reads in a sentence.
PHRASES = {
    "parameter": "parameters",
    "gradient": "gradients",
    "optimizer_state": "optimizer state",
    "input": "inputs",
    "activation": "activations",
    "autograd_detail": "autograd intermediates",
    "temporary": "temporaries",
    "unknown": "of unknown kind",
}
#: What made memory of each category: "activations saved by `attn`".
VERBS = {"activation": "saved by", "temporary": "made by", "autograd_detail": "made for"}
TOP = 3  # categories in the sentence, and lines listed under it


def short_module(path: object) -> str | None:
    """``GPT2LMHeadModel.transformer.h.3.attn`` -> ``transformer.h.*.attn``; the outermost module's
    class alone stays; None for no module."""
    if not isinstance(path, str) or not path:
        return None
    parts = path.split(".")
    inner = parts[1:] if any(not p.isdigit() for p in parts[1:]) else parts  # "Sequential.*" stays
    return ".".join("*" if p.isdigit() else p for p in inner)


def short_source(source: object) -> str | None:
    """``/long/path/model.py:88`` -> ``model.py:88``; None for no line."""
    if not isinstance(source, str) or not source:
        return None
    path, sep, line = source.rpartition(":")
    return f"{os.path.basename(path)}{sep}{line}" if sep else source


def _where(rows: pd.DataFrame) -> tuple[str | None, str | None, int]:
    """The place (short module, short line) holding the most of ``rows``, and its bytes."""
    key = pd.DataFrame(
        {
            "module": [short_module(m) for m in rows["module"]],
            "source": [short_source(s) for s in rows["source"]],
            "bytes": rows["block_bytes"].to_numpy(),
        }
    )
    g = key.groupby(["module", "source"], dropna=False, sort=False)["bytes"].sum()
    if not len(g):
        return None, None, 0
    g = g.sort_values(ascending=False, kind="stable")
    (module, source), nbytes = g.index[0], int(g.iloc[0])
    return (
        (module if isinstance(module, str) else None),
        (source if isinstance(source, str) else None),
        nbytes,
    )


def _part(category: str, rows: pd.DataFrame) -> str:
    total = int(rows["block_bytes"].sum())
    text = f"{theme.format_bytes(total)} {PHRASES.get(category, category)}"
    module, source, nbytes = _where(rows)
    if module is None and source is None:
        return text
    by = f"{VERBS.get(category, 'in')} `{module}`" if module else None
    where = " ".join(p for p in (by, f"at {source}" if source else None) if p)
    if theme.format_bytes(nbytes) == theme.format_bytes(total):  # all of it, as far as it reads
        return f"{text} {where}"
    return f"{text} ({theme.format_bytes(nbytes)} {where})"


def live_sentence(live: pd.DataFrame, top: int = TOP) -> str:
    """The bytes of ``live`` (rows of ``Memory.live`` or ``peak``) by category, most first, each
    with the module and line that held the most of it: "1.1 GiB activations saved by ..."."""
    if live.empty:
        return "nothing allocated"
    by = live.groupby("category", sort=False)["block_bytes"].sum().sort_values(ascending=False, kind="stable")
    by = by[by > 0]
    parts = [_part(str(c), live[live["category"] == c]) for c in by.index[:top]]
    rest = int(by.iloc[top:].sum())
    if rest:
        parts.append(f"{theme.format_bytes(rest)} more in {len(by) - top} other categories")
    return ", ".join(parts)


def oom_lines(memory: Any, top: int = TOP) -> list[str]:
    """What the verdict and ``run``'s summary open with when an allocation failed in the trace: the
    first failure in one sentence (device, request, what was live by category and where), then the
    lines that held the most then, and how many more failed; [] when none did."""
    ooms = memory.ooms()
    if ooms.empty:
        return []
    first = ooms.iloc[0]
    live = memory.oom_live(int(first["event"]))
    head = (
        f"Out of memory on {first['device']} asking {theme.format_bytes(int(first['requested']))} with "
        f"{theme.format_bytes(int(first['allocated']))} allocated: {live_sentence(live, top)}."
    )
    out = [head]
    if not live.empty:
        keys = ["source", "module", "op", "category"]
        live = live.assign(module=[short_module(m) for m in live["module"]])
        sites = live.groupby(keys, dropna=False, sort=False)["block_bytes"].sum()
        sites = sites.sort_values(ascending=False, kind="stable").head(top)
        out.append("  live then, by line:")
        for (source, module, op, category), nbytes in sites.items():
            where = short_source(source) or "(no line: trace(stack=True) records them)"
            inside = f" in `{module}`" if isinstance(module, str) else ""
            name = f" {op}" if isinstance(op, str) else ""
            what = f"{theme.format_bytes(int(nbytes))} {PHRASES.get(category, category)}"
            out.append(f"    {where}{name}{inside}: {what}")
    if len(ooms) > 1:
        out.append(f"  ({len(ooms) - 1} more allocations failed after it: Trace.memory().ooms())")
    if not memory.complete:
        out.append(f"  the memory tables are incomplete: {'; '.join(memory.problems)}")
    return out
