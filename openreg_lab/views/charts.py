"""The dashboard's plotly charts, as plain ``go.Figure`` objects built from the recording layer's tables.

The same figures go into the live dashboard (one ``FigureWidget`` whose content is swapped by a
tab), the HTML report (static, plotly.js inline) and PNGs; only the tables decide what they show.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from openreg_lab import theme
from openreg_lab.recording import analysis, breakdown, flow
from openreg_lab.recording.lod import Pyramid
from openreg_lab.views._embed import plotly_text


def node_color(node: str) -> str:
    """A Sankey node's colour: the kernel kind's for ``ran ...`` nodes, grey for dispatch keys."""
    for kind, label in flow.RAN.items():
        if node == label:
            return theme.kernel_color(kind)
    return theme.DISPATCH_KEY_COLOR


#: What the dispatch flow says for a trace without op events.
NO_FLOW = "No op events in this trace: no dispatch flow to draw"

#: Fallback bars drawn at most (the rest are summed in the table).
TOP_FALLBACKS = 15


def shown_fallbacks(fb: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``fallback_costs`` the bar chart draws, in its order (bar ``i`` is row ``i``)."""
    return fb.head(TOP_FALLBACKS).iloc[::-1].reset_index(drop=True)  # the costliest at the top


def fallbacks(fb: pd.DataFrame) -> go.Figure:
    """Fallbacks ranked by cost, each a bar split into copy to CPU, CPU compute and copy back."""
    fb = shown_fallbacks(fb)
    names = [plotly_text(n) for n in fb["name"]]  # Note [Strings reaching a page]
    fig = go.Figure()
    parts = [
        ("copy to CPU", "copy_to_cpu_ns", "bytes_to_cpu"),
        ("CPU compute", "cpu_ns", None),
        ("copy back", "copy_back_ns", "bytes_back"),
    ]
    for label, col, nbytes in parts:
        moved = fb[nbytes] if nbytes else pd.Series(0, index=fb.index)
        hover = [
            f"{n}<br>{label}: {theme.format_ns(v)}"
            + (f", {theme.format_bytes(b)}" if nbytes else "")
            + f"<br>{int(c)} calls; from "
            + plotly_text(", ".join(s) if len(s) else "unknown (trace with stack=True)")
            for n, v, b, c, s in zip(names, fb[col], moved, fb["calls"], fb["sources"], strict=True)
        ]
        fig.add_bar(
            y=names,
            x=(fb[col] / 1e6).tolist(),
            orientation="h",
            name=label,
            marker_color=theme.FALLBACK_PART_COLORS[label],
            hovertext=hover,
            hoverinfo="text",
        )
    fig.update_layout(
        **theme.plotly_layout(
            barmode="stack",
            title={"text": "CPU fallbacks by cost", "x": 0},
            xaxis_title="ms",
            height=max(220, 60 + 26 * len(fb)),
            legend={"orientation": "h", "y": -0.2},
        )
    )
    return fig


def dispatch_flow(flows: pd.DataFrame, weight: str = "calls") -> go.Figure:
    """The Sankey of every call, from the dispatch keys that received it to what finally ran.

    ``weight`` is ``"calls"`` or ``"time"`` (the calls' total time in ms). A trace without op
    events has no flow: the figure says so instead of holding a Sankey of no nodes, which plotly.js
    cannot draw (``RangeError: Invalid array length`` in the page).
    """
    unit = "calls" if weight == "calls" else "ms"
    layout = theme.plotly_layout(
        title={"text": f"Dispatch flow: where each call entered and what ran it (by {unit})", "x": 0},
        height=380,
    )
    if flows.empty:
        fig = go.Figure()
        fig.update_layout(**layout, xaxis={"visible": False}, yaxis={"visible": False})
        fig.add_annotation(text=NO_FLOW, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
        return fig
    nodes = flow.sankey_nodes(flows)
    index = {n: i for i, n in enumerate(nodes)}
    column = "calls" if weight == "calls" else "time_ns"
    values = flows[column].astype(float) / (1.0 if weight == "calls" else 1e6)
    link_colors = [_fade(node_color(t)) for t in flows["target"]]
    fig = go.Figure(
        go.Sankey(
            arrangement="snap",
            node={
                "label": [plotly_text(n) for n in nodes],
                "color": [node_color(n) for n in nodes],
                "pad": 14,
                "thickness": 14,
                "hovertemplate": "%{label}: %{value:,.3~f} " + unit + "<extra></extra>",
            },
            link={
                "source": [index[s] for s in flows["source"]],
                "target": [index[t] for t in flows["target"]],
                "value": values.tolist(),
                "color": link_colors,
                "customdata": [
                    f"{c:,} calls, {theme.format_ns(t)}"
                    for c, t in zip(flows["calls"], flows["time_ns"], strict=True)
                ],
                "hovertemplate": "%{source.label} → %{target.label}<br>%{customdata}<extra></extra>",
            },
        )
    )
    fig.update_layout(**layout)
    return fig


def _fade(hex_color: str, alpha: float = 0.45) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def copies_and_casts(events: pd.DataFrame) -> go.Figure:
    """Bytes copied over time by direction (stacked), and autocast casts by op and dtype pair."""
    ct = breakdown.copy_timeline(events)
    casts = breakdown.cast_table(events)
    hits = int(casts["cache_hits"].sum()) if len(casts) else 0
    fig = make_subplots(
        rows=2,
        cols=1,
        vertical_spacing=0.2,
        subplot_titles=(
            "Bytes copied over time, by direction",
            f"Autocast casts by op and dtype pair ({int(casts['casts'].sum()) if len(casts) else 0} casts, "
            f"{hits} weight-cache hits)",
        ),
    )
    for d, color in theme.COPY_COLORS.items():
        fig.add_bar(
            x=(ct["t_ns"] / 1e6).tolist(),
            y=ct[d].tolist(),
            name=d,
            marker_color=color,
            row=1,
            col=1,
            hovertemplate=d + " %{y:,} bytes at %{x:.2f} ms<extra></extra>",
        )
    if len(casts):
        pair = casts["from_dtype"].astype(str) + "→" + casts["to_dtype"].astype(str)
        for p in pair.unique():
            mine = casts[pair == p]
            fig.add_bar(
                x=[plotly_text(op) for op in mine["op"]],
                y=mine["bytes"].tolist(),
                name=plotly_text(p),
                row=2,
                col=1,
                marker_color=theme.CAST_COLOR
                if p.endswith("bfloat16") or p.endswith("float16")
                else "#9d4edd",
                customdata=np.stack([mine["casts"], mine["cache_hits"]], axis=1).tolist(),
                hovertemplate="%{x} %{fullData.name}: %{y:,} bytes in %{customdata[0]} casts, "
                "%{customdata[1]} cache hits<extra></extra>",
            )
    fig.update_layout(**theme.plotly_layout(barmode="stack", height=520, bargap=0.05))
    fig.update_xaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="bytes", row=1, col=1)
    return fig


def memory(events: pd.DataFrame, pyramid: Pyramid, px: int = 1200) -> go.Figure:
    """Allocated bytes per device over time (min / max / last per pixel when dense), the peak marked
    and every point naming the op that allocated or freed."""
    fig = go.Figure()
    owner = analysis.nearest_op(events)
    names = events["name"].to_numpy()
    peaks = breakdown.memory_peaks(events)
    for k, w in enumerate(pyramid.query(0, max(pyramid.span, 1), px).counters):
        ops = [
            plotly_text(names[owner[e]]) if owner[e] >= 0 else "(outside any op)"
            for e in np.asarray(w["event"])
        ]
        device = plotly_text(w["device"])
        fig.add_scatter(
            x=(np.asarray(w["t"]) / 1e6).tolist(),
            y=np.asarray(w["last"]).tolist(),
            mode="lines",
            line_shape="hv",
            name=device,
            line_color=[theme.MEMORY_COLOR, "#2a9d8f", "#8ab17d"][k % 3],
            customdata=ops,
            hovertemplate="%{y:,} bytes at %{x:.3f} ms<br>%{customdata}<extra>%{fullData.name}</extra>",
        )
    for p in peaks.itertuples(index=False):
        fig.add_scatter(
            x=[p.t_ns / 1e6],
            y=[p.peak_bytes],
            mode="markers+text",
            marker={"color": theme.MARK_COLOR, "size": 9},
            text=[f"peak {theme.format_bytes(p.peak_bytes)}"],
            textposition="top center",
            showlegend=False,
            customdata=[[plotly_text(p.device), f"{p.peak_bytes:,}", plotly_text(p.op)]],
            hovertemplate="peak on %{customdata[0]}: %{customdata[1]} bytes<br>"
            "allocated by %{customdata[2]}<extra></extra>",
        )
    fig.update_layout(
        **theme.plotly_layout(
            title={"text": "Device memory allocated", "x": 0},
            height=320,
            xaxis_title="ms",
            yaxis_title="bytes",
        )
    )
    return fig
