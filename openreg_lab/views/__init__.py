"""The views layer: widgets and static HTML drawn from the recording and dispatch tables.

::

    t.show()                                        # the trace dashboard (a bare `t` displays it too)
    openreg_lab.views.compare(a, b, labels=("default", "mps"))
    openreg_lab.views.CoverageView(profile="mps", trace=t)
    openreg_lab.views.DispatchExplorer("aten::linear")
    openreg_lab.views.ranks(["run.rank0.trace", "run.rank1.trace"])  # a job's ranks (paths or traces)

One module per view (``dashboard``, ``comparison``, ``coverage_view``, ``dispatch_explorer``), the
pieces they share (``timeline`` with its level of detail ``lod``, ``table``, ``charts``,
``details``, the memory view ``memory_view``), the static HTML (``static``) and the report
(``report``). Views take tables; the colours come from ``openreg_lab.theme``. Importing this
package is cheap: ipywidgets and plotly load when a view is first built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openreg_lab.recording.session import install_renderer
from openreg_lab.views._renderer import TraceRenderer

if TYPE_CHECKING:
    from openreg_lab.views.comparison import CompareView, compare
    from openreg_lab.views.coverage_view import CoverageView
    from openreg_lab.views.dashboard import Dashboard
    from openreg_lab.views.dispatch_explorer import DispatchExplorer
    from openreg_lab.views.ranks_view import RanksView, ranks

install_renderer(TraceRenderer())

_LAZY = {
    "Dashboard": "openreg_lab.views.dashboard",
    "compare": "openreg_lab.views.comparison",
    "CompareView": "openreg_lab.views.comparison",
    "CoverageView": "openreg_lab.views.coverage_view",
    "DispatchExplorer": "openreg_lab.views.dispatch_explorer",
    "RanksView": "openreg_lab.views.ranks_view",
    "ranks": "openreg_lab.views.ranks_view",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'openreg_lab.views' has no attribute {name!r}")


__all__ = ["CompareView", "CoverageView", "Dashboard", "DispatchExplorer", "RanksView", "compare", "ranks"]
