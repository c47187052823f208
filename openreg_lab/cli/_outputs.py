"""Writing a trace's files (trace, Chrome and Kineto traces, HTML report); printing its terminal summary."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import torch

from openreg_lab.cli import _summary
from openreg_lab.cli._common import say


def run_info(trace: Any, extra: Mapping[str, str]) -> dict[str, str]:
    """The HTML report's header: ``extra`` (what was run) and the environment and trace facts."""
    import openreg_lab

    info = dict(extra)
    info.setdefault("torch", torch.__version__)
    info.setdefault("openreg-lab", openreg_lab.__version__)
    info.setdefault("devices", f"{torch.openreg.device_count()} openreg")
    info.update({k: v for k, v in _summary.trace_facts(trace).items() if k not in info})
    return info


def write(
    trace: Any,
    extra: Mapping[str, str],
    *,
    html: str | None = None,
    trace_path: str | None = None,
    chrome: str | None = None,
    kineto: str | None = None,
    title: str | None = None,
    before: Callable[[str], None] | None = None,
) -> bool:
    """Write the files asked for; print where each went, or one line why not. True if all were written.

    The trace is written first: it holds everything the others are made from. ``before`` is called
    with each output's name (``"trace"``, ``"Chrome trace"``, ``"Kineto trace"``, ``"report"``)
    before it is written. ``kineto``'s directory is made if missing (``run --kineto DIR``).
    """
    ok = True
    jobs = [
        ("trace", trace_path, lambda p: trace.save(p)),
        ("Chrome trace", chrome, lambda p: trace.export_chrome_trace(p)),
        ("Kineto trace", kineto, lambda p: _write_kineto(trace, p)),
        ("report", html, lambda p: trace.to_html(p, title=title, run_info=run_info(trace, extra))),
    ]
    for what, path, job in jobs:
        if path is None:
            continue
        if before is not None:
            before(what)
        try:
            job(path)
        except Exception as e:  # one failed output must not lose the others
            first = str(e).splitlines()[0] if str(e) else ""
            say(f"openreg-lab: could not write the {what} to {path}: {type(e).__name__}: {first}")
            ok = False
            continue
        say(f"openreg-lab: wrote the {what} to {os.path.abspath(path)}")
    return ok


def _write_kineto(trace: Any, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    trace.to_kineto(path)


def print_summary(trace: Any, top: int, stream: TextIO | None = None) -> None:
    """Print the verdict, then the totals and the top fallbacks of ``trace`` (on ``stream``, default
    stderr)."""
    verdict = "\n".join(trace.verdict().lines())
    parts = [verdict, _summary.totals_table(trace), _summary.fallbacks_table(trace, top)]
    say("\n\n".join(parts), stream)  # one write: other ranks' lines stay out of it
