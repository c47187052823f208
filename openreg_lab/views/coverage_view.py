"""The coverage explorer (``CoverageView(profile=None, trace=None)``): every registered overload,
grouped into families, drawn as a treemap coloured by how openreg resolves it, with a search box,
a table, a profile picker that recomputes, a second profile to compare against (what one lacks that
the other has) and, with a trace, hit counts and time on the ops that ran. It draws the tables of
``openreg_lab.dispatch.families`` (``families``, ``lacks``, ``coverage_tree``).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import pandas as pd

from openreg_lab import theme
from openreg_lab.dispatch import profiles
from openreg_lab.dispatch.coverage import RESOLUTIONS, coverage
from openreg_lab.dispatch.families import coverage_tree, families, lacks
from openreg_lab.views import png, static
from openreg_lab.views._embed import plotly_text
from openreg_lab.views.table import Column, Table, substring_filter

TREEMAP_LIMIT = 4000  #: overloads drawn at most in the treemap (the table has them all)
_LEVEL_COLORS = {"namespace": "#f1f3f5", "group": "#e9ecef", "family": "#dee2e6"}

COLUMNS = [
    Column("name", "overload"),
    Column("resolution", "resolution", color=True),
    Column("kernel", "runs as"),
    Column("category", "group"),
    Column("hits", "calls in trace", "int"),
    Column("time_ns", "time in trace", "ns"),
    Column("compiled_hits", "calls from compiled code", "int"),
    Column("tags", "tags"),
]


def treemap_nodes(rows: pd.DataFrame) -> pd.DataFrame:
    """The treemap's nodes, one row each (``id``, ``label``, ``parent``, ``color``, ``value``,
    ``hover``), from ``coverage_tree(rows)`` (``rows`` a ``families()`` table): namespaces, then
    groups, then families, then the overloads as leaves coloured by resolution."""
    tree = coverage_tree(rows)
    # Every string is plotly text here (Note [Strings reaching a page]): custom ops name themselves.
    text = {c: tree[c].map(plotly_text) for c in ("id", "label", "parent", "name", "kernel")}
    level = tree["level"]
    leaf = level.eq("overload").to_numpy()
    color = level.map(_LEVEL_COLORS).where(
        ~leaf, tree["resolution"].map(lambda r: theme.RESOLUTION_COLORS.get(r, theme.OTHER_COLOR))
    )
    counts = text["name"] + ": " + tree["overloads"].astype(str) + " overloads"
    hover = counts.where(
        level.ne("group"), text["label"] + ": " + tree["overloads"].astype(str) + " overloads"
    )
    family = (
        text["name"] + ": " + tree["native"].astype(str) + "/" + tree["overloads"].astype(str) + " native"
    )
    hover = hover.where(level.ne("family"), family)
    cells = zip(text["name"][leaf], tree["resolution"][leaf], text["kernel"][leaf], tree["hits"][leaf],
                tree["time_ns"][leaf], strict=True)  # fmt: skip
    hover[leaf] = [
        f"{nm}<br>{r}, runs as {k}<br>{h} calls, {theme.format_ns(ns)}" for nm, r, k, h, ns in cells
    ]
    return pd.DataFrame(
        {"id": text["id"], "label": text["label"], "parent": text["parent"], "color": color,
         "value": tree["value"].astype(float), "hover": hover}
    )  # fmt: skip


def treemap(fam: pd.DataFrame, search: str = "") -> Any:
    """A treemap namespace > group > family > overload, leaves coloured by resolution, sized by
    time in the trace when there is one (else one unit per overload)."""
    import plotly.graph_objects as go

    rows = substring_filter(fam, name=search) if search else fam
    if len(rows) > TREEMAP_LIMIT:
        # Keep what ran, then the rest by name: the table below holds every row.
        rows = rows.sort_values(["hits", "name"], ascending=[False, True]).head(TREEMAP_LIMIT)
    nodes = treemap_nodes(rows)
    ids, labels, parents = nodes["id"].tolist(), nodes["label"].tolist(), nodes["parent"].tolist()
    colors, values, hover = nodes["color"].tolist(), nodes["value"].tolist(), nodes["hover"].tolist()
    fig = go.Figure(
        go.Treemap(
            ids=ids,
            labels=labels,
            parents=parents,
            values=values,
            marker={"colors": colors},
            hovertext=hover,
            hoverinfo="text",
            maxdepth=3,
            branchvalues="remainder",
        )
    )
    fig.update_layout(**theme.plotly_layout(height=460, margin={"l": 4, "r": 4, "t": 4, "b": 4}))
    return fig


class CoverageView(w.VBox):
    """The coverage explorer. ``profile`` and ``versus`` take every form ``use_profile`` does (a
    built-in name, a YAML or JSON file, a list or mapping of operator names); ``profile=None`` is
    the active profile, whatever its form; a bad one raises the profiles' own error."""

    def __init__(
        self,
        profile: profiles.Profile | None = None,
        trace: Any = None,
        versus: profiles.Profile | None = None,
    ) -> None:
        self.trace = trace
        # Each choice by its label (a built-in name, a file's base name, "custom"): the picker
        # shows labels, and coverage() gets the profile itself.
        self._choices: dict[str, profiles.Profile] = {n: n for n in profiles.BUILTIN_PROFILES}
        if profile is None and profiles.active_profile_ops() is not None:
            current = self._add_choice(
                profiles.get_profile() or "custom", sorted(profiles.active_profile_ops() or ())
            )
        elif profile is None:
            current = "default"
        else:
            current = self._add_choice(profiles.resolve_profile(profile)[0], profile)
        other = None if versus is None else self._add_choice(profiles.resolve_profile(versus)[0], versus)
        names = list(self._choices)
        self.picker = w.Dropdown(options=names, value=current, description="profile")
        self.versus = w.Dropdown(
            options=[("(none)", None), *[(n, n) for n in names]], value=other, description="lacks vs"
        )
        self.search = w.Text(placeholder="search ops…", description="search", continuous_update=False)
        self.summary = w.HTML()
        self.lacks_html = w.HTML()
        self.data = self._compute(current)
        self.table = Table(
            self.data,
            COLUMNS,
            kernels=RESOLUTIONS,
            devices=(),
            page_size=20,
            sort=("time_ns", False) if trace is not None else ("name", True),
            filter=lambda f, **kw: substring_filter(f, kernel_column="resolution", **kw),
        )
        import plotly.graph_objects as go

        self.figure = go.FigureWidget(treemap(self.data))
        self.figure.add_class("openreg-chart")
        self._update_text()
        self.picker.observe(lambda c: self.set_profile(c["new"]), "value")
        self.versus.observe(lambda c: self._update_text(), "value")
        self.search.observe(lambda c: self.set_search(c["new"]), "value")
        controls = w.HBox([self.picker, self.versus, self.search])
        super().__init__([controls, self.summary, self.figure, self.table, self.lacks_html])
        self.add_class("openreg-coverage")

    def _add_choice(self, label: str, profile: profiles.Profile) -> str:
        """Add ``profile`` under ``label`` (made unique when another profile has it); return the label."""
        if label in profiles.BUILTIN_PROFILES and profile == label:
            return label
        base, k = label, 1
        while label in self._choices and self._choices[label] != profile:
            k += 1
            label = f"{base} ({k})"
        self._choices[label] = profile
        return label

    def _compute(self, profile: str) -> pd.DataFrame:
        return families(coverage(profile=self._choices.get(profile, profile), trace=self.trace))

    def set_profile(self, profile: str) -> None:
        """Recompute everything for ``profile`` (one of the picker's labels)."""
        self.data = self._compute(profile)
        self.table.set_frame(self.data)
        self._redraw()
        self._update_text()

    def set_search(self, text: str) -> None:
        """Show the overloads whose name contains ``text`` (table and treemap)."""
        self.table.name_filter = text
        self._redraw()

    def _redraw(self) -> None:
        fig = treemap(self.data, self.search.value)
        with self.figure.batch_update():
            self.figure.data[0].update(fig.data[0].to_plotly_json())

    def _update_text(self) -> None:
        self.summary.value = self.summary_html()
        if self.versus.value:
            other = families(coverage(profile=self._choices[self.versus.value]))
            missing = lacks(self.data, other)
            self.lacks_html.value = (
                f"<b>{len(missing)} overloads are native under {html.escape(self.versus.value)} "
                "but not under "
                f"{html.escape(self.picker.value)}</b>"
                + static.table_html(
                    missing,
                    [
                        ("name", "overload", "text"),
                        ("resolution", f"under {self.picker.value}", "text"),
                        ("kernel", "runs as", "text"),
                    ],
                )
            )
        else:
            self.lacks_html.value = ""

    def summary_html(self) -> str:
        """Counts by resolution, and what the trace ran if there is one."""
        counts = self.data["resolution"].value_counts()
        parts = [
            f"<span style='color:{theme.RESOLUTION_COLORS.get(r, '#333')}'>■</span> "
            f"{r}: {int(counts.get(r, 0)):,}"
            for r in RESOLUTIONS
        ]
        ran = ""
        if self.trace is not None:
            hit = self.data[self.data["hits"] > 0]
            fell = int((hit["resolution"] == "fallback").sum())
            ran = f" · the trace ran {len(hit)} overloads, {fell} through the fallback"
        return (
            f"<div style='font:12px system-ui'><b>{len(self.data):,} overloads</b> under profile "
            f"{html.escape(self.picker.value)}: {' · '.join(parts)}{ran}</div>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        ran = self.data.sort_values(["hits", "name"], ascending=[False, True])
        bundle["text/html"] = self.summary_html() + static.table_html(
            ran, [(c.key, c.label, c.fmt) for c in COLUMNS]
        )
        bundle["text/plain"] = (
            f"<openreg coverage explorer: profile {self.picker.value}, {len(self.data)} overloads>"
        )
        return png.add_png(bundle, self.figure)
