"""Drawing a ``Trace``: the renderer ``openreg_lab.views`` installs, and ``Trace``'s ``show``,
``to_html`` and notebook display through it (Note [Views are plugged in])."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol


class Renderer(Protocol):
    """What draws a ``Trace`` (a ``Viewable``): ``openreg_lab.views`` installs one (Note [Views are
    plugged in])."""

    def dashboard(self, trace: Viewable) -> Any: ...
    def mimebundle(self, trace: Viewable) -> dict[str, Any]: ...
    def write_html(
        self, trace: Viewable, path: str, title: str | None, run_info: Mapping[str, str] | None
    ) -> None: ...


# Note [Views are plugged in]
# The recording layer sits below the views and never imports them. ``Trace.show()``,
# ``Trace._repr_mimebundle_`` and ``Trace.to_html`` draw through the renderer that
# ``openreg_lab.views`` installs here when it is imported (``import openreg_lab`` does that).
_renderer: Renderer | None = None


def install_renderer(renderer: Renderer) -> None:
    """Make ``renderer`` draw every ``Trace`` (called by ``openreg_lab.views`` on import)."""
    global _renderer
    _renderer = renderer


def _require_renderer() -> Renderer:
    if _renderer is None:
        raise RuntimeError(
            "no trace views are installed: `import openreg_lab.views` (import openreg_lab does)"
        )
    return _renderer


class Viewable:
    """``Trace``'s views (a base of ``Trace``)."""

    # -- views (Note [Views are plugged in]) -------------------------------
    def show(self) -> Any:
        """The interactive dashboard of this trace (an ipywidgets widget): timeline, op table,
        fallbacks, dispatch flow, copies and casts, memory. Displaying a bare ``Trace`` shows it too."""
        return _require_renderer().dashboard(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return _require_renderer().mimebundle(self)

    def to_html(
        self,
        path: str | os.PathLike[str],
        *,
        title: str | None = None,
        run_info: Mapping[str, str] | None = None,
    ) -> None:
        """Write a self-contained HTML report of this trace to ``path`` (works offline, no server).

        ``run_info`` adds rows to the report's header (e.g. the command line that was traced): a
        mapping, whose keys and values are shown as text (``str()`` of each), as is ``title``.
        """
        if run_info is not None and not isinstance(run_info, Mapping):
            raise TypeError(
                f"to_html(run_info=...) takes a mapping of names to values, e.g. {{'command': 'train.py'}}; "
                f"got {type(run_info).__name__}"
            )
        info = None if run_info is None else {str(k): str(v) for k, v in run_info.items()}
        _require_renderer().write_html(self, os.fspath(path), None if title is None else str(title), info)
