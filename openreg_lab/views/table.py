"""A sortable, filterable, paged table widget (``table.js``) over a DataFrame.

Filtering, sorting and paging happen here in Python, so a table of any length sends one page to
the browser, and every state is testable without one: set ``name_filter`` and read ``rows``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anywidget
import numpy as np
import pandas as pd
import traitlets

from openreg_lab import theme


@dataclass(frozen=True)
class Column:
    """One column of a ``Table``: its DataFrame ``key``, header ``label`` and format."""

    key: str
    label: str
    fmt: str = "text"  #: text, int, ns, bytes, pct
    color: bool = False  #: draw the theme's colour of the value (kernel kinds) before it
    title: str = ""


#: ``filter(frame, name=..., kernel=..., device=..., flow=...)`` -> the rows to show.
Filter = Callable[..., pd.DataFrame]


def substring_filter(
    frame: pd.DataFrame,
    *,
    name: str = "",
    kernel: str = "",
    device: str = "",
    flow: Any = None,
    name_column: str = "name",
    kernel_column: str = "kernel",
    device_column: str = "device",
) -> pd.DataFrame:
    """Rows whose ``name_column`` contains ``name`` and whose kernel / device columns equal the
    filters (a filter that is empty keeps every row)."""
    keep = np.ones(len(frame), dtype=bool)
    if name:
        keep &= frame[name_column].astype(str).str.contains(name, case=False, regex=False).to_numpy()
    if kernel and kernel_column in frame:
        keep &= (frame[kernel_column] == kernel).to_numpy()
    if device and device_column in frame:
        keep &= (frame[device_column] == device).to_numpy()
    return frame[keep]


class Table(anywidget.AnyWidget):
    """A page of ``frame`` at a time; click a row to set ``selected_key`` (the row's ``key`` value)."""

    _esm = Path(__file__).with_name("table.js")
    columns = traitlets.List().tag(sync=True)
    rows = traitlets.List().tag(sync=True)
    total = traitlets.Int(0).tag(sync=True)
    page = traitlets.Int(0).tag(sync=True)
    page_size = traitlets.Int(25).tag(sync=True)
    sort = traitlets.List(["", False]).tag(sync=True)
    name_filter = traitlets.Unicode("").tag(sync=True)
    kernel_filter = traitlets.Unicode("").tag(sync=True)
    device_filter = traitlets.Unicode("").tag(sync=True)
    flow_label = traitlets.Unicode("").tag(sync=True)
    kernels = traitlets.List().tag(sync=True)
    devices = traitlets.List().tag(sync=True)
    colors = traitlets.Dict().tag(sync=True)
    selected_key = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        frame: pd.DataFrame,
        columns: Sequence[Column],
        *,
        key: Callable[[pd.Series], str] | str = "name",
        filter: Filter = substring_filter,
        kernels: Sequence[str] = (),
        devices: Sequence[str] = (),
        sort: tuple[str, bool] | None = None,
        page_size: int = 25,
        colors: dict[str, str] | None = None,
    ) -> None:
        self._frame = frame.reset_index(drop=True)
        self._key = key
        self._filter = filter
        self.flow: Any = None
        super().__init__(
            columns=[asdict(c) for c in columns],
            kernels=list(kernels),
            devices=list(devices),
            colors=colors if colors is not None else {**theme.KERNEL_COLORS, **theme.RESOLUTION_COLORS},
            page_size=page_size,
            sort=list(sort) if sort else ["", False],
        )
        self.add_class("openreg-table")
        self.refresh()

    @property
    def frame(self) -> pd.DataFrame:
        """Every row of the table, unfiltered."""
        return self._frame

    def set_frame(self, frame: pd.DataFrame) -> None:
        """Show ``frame`` instead (keeping filters and sort)."""
        self._frame = frame.reset_index(drop=True)
        self.refresh()

    def set_flow(self, flow: Any, label: str) -> None:
        """Filter by a Sankey link (None: no flow filter); ``label`` says which on screen."""
        self.flow = flow
        with self.hold_trait_notifications():
            self.flow_label = label if flow is not None else ""
            self.page = 0
        self.refresh()

    def visible(self) -> pd.DataFrame:
        """The filtered, sorted rows (all pages)."""
        f = self._filter(
            self._frame,
            name=self.name_filter,
            kernel=self.kernel_filter,
            device=self.device_filter,
            flow=self.flow,
        )
        key, asc = self.sort
        if key and key in f:
            f = f.sort_values(key, ascending=bool(asc), kind="stable")
        return f

    def key_of(self, row: pd.Series) -> str:
        """The ``selected_key`` a row sets when clicked."""
        return self._key(row) if callable(self._key) else str(row[self._key])

    def refresh(self) -> None:
        """Recompute ``rows`` and ``total`` from the frame and the filters."""
        f = self.visible()
        pages = max(1, -(-len(f) // self.page_size))
        page = min(self.page, pages - 1)
        part = f.iloc[page * self.page_size : (page + 1) * self.page_size]
        keys = [c["key"] for c in self.columns]
        rows = []
        for _, r in part.iterrows():
            row = {k: _plain(r[k]) for k in keys if k in r}
            row["_key"] = self.key_of(r)
            rows.append(row)
        with self.hold_trait_notifications():
            self.total = len(f)
            self.page = page
            self.rows = rows

    @traitlets.observe("name_filter", "kernel_filter", "device_filter", "sort", "page", "page_size")
    def _changed(self, change: dict[str, Any]) -> None:
        if change["name"] != "page" and self.page:
            self.page = 0  # refreshes through this observer
            return
        self.refresh()

    @traitlets.observe("flow_label")
    def _flow_cleared(self, change: dict[str, Any]) -> None:
        if not change["new"] and self.flow is not None:
            self.flow = None
            self.refresh()


def _plain(v: Any) -> Any:
    """A JSON-friendly value (numpy scalars to Python, lists to text)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return v
