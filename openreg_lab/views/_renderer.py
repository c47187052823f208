"""How a ``Trace`` draws itself: installed into the recording layer by ``openreg_lab.views``
(Note [Views are plugged in] in ``recording/session.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class TraceRenderer:
    """Draws a trace's tables as the dashboard, its mimebundle and the HTML report."""

    def dashboard(self, trace: Any) -> Any:
        """The live dashboard widget."""
        from openreg_lab.views.dashboard import dashboard

        return dashboard(trace)

    def mimebundle(self, trace: Any) -> dict[str, Any]:
        """The dashboard's widget view, its static ``text/html`` and a one-line ``text/plain``."""
        return self.dashboard(trace)._repr_mimebundle_()

    def write_html(
        self, trace: Any, path: str, title: str | None, run_info: Mapping[str, str] | None
    ) -> None:
        """The self-contained HTML report (``Trace.to_html``)."""
        from openreg_lab.dispatch.coverage import coverage
        from openreg_lab.views.report import write_report

        write_report(
            trace.events,
            path,
            title=title,
            run_info=run_info,
            dropped=trace.dropped,
            capacity=trace.capacity,
            op_events=trace.ops,
            coverage=coverage(trace=trace),
            verdict=trace.verdict(),
            host=trace.host_events,
            host_library=trace.host_slices(library=True),
            memory=trace.memory(),
        )
