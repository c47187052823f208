"""The details panel: one event as HTML (what it is, its dispatch path, children, source lines)."""

from __future__ import annotations

import html
from typing import Any

from openreg_lab import theme

_CHIP = (
    "display:inline-block;padding:1px 7px;margin:1px 2px;border-radius:9px;background:#e9ecef;"
    "font:11px ui-monospace,Menlo,monospace"
)


def details_html(d: dict[str, Any] | None, note: str = "") -> str:
    """HTML for ``recording.lookup.details(...)``'s dict (None: the "nothing selected" hint)."""
    if d is None:
        return (
            "<div style='color:#666'>Click a slice on the timeline or a row of the op table to see how "
            "that op was dispatched, what it ran and where it was called from.</div>"
        )
    e = html.escape
    color = theme.event_color(d["kind"], d["kernel"], d["name"])
    parts = [
        f"<div style='font-weight:600;font-size:13px'><span style='display:inline-block;width:10px;"
        f"height:10px;background:{color};margin-right:6px'></span>{e(d['name'])}</div>",
        f"<div style='color:#555'>{e(d['kind'])}"
        + (f", ran <b>{e(d['kernel'])}</b>" if d["kernel"] else "")
        + f" · {theme.format_ns(max(d['dur_ns'], 0))} · at {theme.format_ns(d['start_ns'])}"
        + (f" · {e(str(d['device']))}" if d["device"] else "")
        + (f" · {theme.format_bytes(d['bytes'])}" if d["bytes"] else "")
        + "</div>",
    ]
    if note:
        parts.append(f"<div style='color:#555;font-style:italic'>{e(note)}</div>")
    if d["path"]:
        chips = " → ".join(f"<span style='{_CHIP}'>{e(k)}</span>" for k in d["path"])
        ran = f" → <span style='{_CHIP};background:{color};color:white'>{e(d['kernel'] or '?')}</span>"
        parts.append(f"<div><b>dispatch path</b> {chips}{ran}</div>")
    if d.get("fused"):
        chips = " ".join(f"<span style='{_CHIP}'>{e(op)}</span>" for op in d["fused"])
        parts.append(f"<div><b>fused ops</b> {chips}</div>")
    if d.get("reason"):
        parts.append(f"<div><b>reason</b> <code>{e(d['reason'])}</code></div>")
    if d["shapes"] is not None:
        args = ", ".join(f"{e(str(t))}{list(s)}" for s, t in zip(d["shapes"], d["dtypes"], strict=True))
        parts.append(f"<div><b>arguments</b> <code>{args}</code></div>")
    parts.append(
        f"<div><b>source</b> <code>{e(d['source'] or 'unknown (trace with stack=True)')}</code></div>"
    )
    if d["forward"] is not None:
        f = d["forward"]
        parts.append(
            f"<div><b>forward op</b> {e(f['name'])} <code>{e(f['source'] or 'unknown source')}</code></div>"
        )
    if d["children"]:
        items = []
        for c in d["children"][:40]:
            extra = f", {theme.format_bytes(c['bytes'])}" if c["bytes"] else ""
            kernel = f" [{e(c['kernel'])}]" if c["kernel"] else ""
            items.append(
                f"<li>{e(c['kind'])}: {e(c['name'])}{kernel} · "
                f"{theme.format_ns(max(c['dur_ns'], 0))}{extra}</li>"
            )
        more = f"<li>… and {len(d['children']) - 40} more</li>" if len(d["children"]) > 40 else ""
        parts.append(
            f"<div><b>children</b> ({len(d['children'])})"
            f"<ul style='margin:2px 0 0 0'>{''.join(items)}{more}</ul></div>"
        )
    return "<div style='line-height:1.6;overflow-wrap:anywhere'>" + "".join(parts) + "</div>"
