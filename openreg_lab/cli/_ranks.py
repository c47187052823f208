"""``run`` under a launcher of several ranks (``torchrun``): one trace per rank, one summary.

``torchrun`` starts one ``openreg-lab run`` per rank with ``RANK`` and ``WORLD_SIZE`` set; each
writes its files with the rank in the name (``run.trace`` -> ``run.rank1.trace``), and only rank 0
prints the summary. ``openreg-lab report run.rank0.trace run.rank1.trace`` merges them; with
``--html R``, rank 0 merges them into one report ``R`` when the ranks end (Note [One report for a job]).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from openreg_lab.cli._common import say


def launched_rank() -> int | None:
    """This process's rank when a launcher started several (``WORLD_SIZE`` > 1), else None."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ["RANK"])
    except (KeyError, ValueError):
        return None
    return rank if world > 1 else None


def per_rank(path: str | None, rank: int | None) -> str | None:
    """``path`` with the rank before its extension (``run.trace`` -> ``run.rank1.trace``)."""
    if path is None or rank is None:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def kineto_file(directory: str | None, rank: int | None) -> str | None:
    """Where ``run --kineto DIR`` writes a rank's Kineto trace: ``DIR/rankN.json`` (rank 0 outside a
    launcher); Holistic Trace Analysis reads every ``.json`` file of ``DIR``, each rank's from its
    ``distributedInfo``."""
    if directory is None:
        return None
    return os.path.join(directory, f"rank{rank or 0}.json")


# Note [One report for a job]
# Under torchrun, ``run --html R`` writes one report for the job, not one per rank. Each rank saves
# its trace (``--trace`` per rank, else ``R``'s name with ``.rankN.trace``), then a small status file
# beside ``R`` (``R.rankN.status.json``: its run id, exit code and trace), written whole or not at
# all. Rank 0 waits for every rank's status of its own run id (a file of an earlier run has another;
# at most OPENREG_LAB_GATHER_TIMEOUT seconds, default 60), merges the traces it finds and writes ``R``.
# A rank that ended with an error, or wrote nothing in time, is named in the report; the others'
# data is kept. Files, not the job's store: when a rank's script ends, the store may already be gone.
GATHER_TIMEOUT = 60.0


def status_path(html: str, rank: int) -> str:
    """Where rank ``rank`` says it ended (Note [One report for a job])."""
    stem, _ = os.path.splitext(html)
    return f"{stem}.rank{rank}.status.json"


def job_outputs(
    trace: Any,
    info: dict[str, str],
    html: str,
    trace_path: str | None,
    chrome: str | None,
    rank: int,
    code: int,
    kineto: str | None = None,
) -> bool:
    """This rank's files under a launcher with ``--html`` (Note [One report for a job]); rank 0
    also gathers the others' and writes the merged report. True if every file was written."""
    from openreg_lab.cli import _outputs
    from openreg_lab.recording import atomic

    stem, _ = os.path.splitext(html)
    mine = per_rank(trace_path or f"{stem}.trace", rank)
    ok = _outputs.write(
        trace, info, trace_path=mine, chrome=per_rank(chrome, rank), kineto=kineto_file(kineto, rank)
    )
    run_id = trace.job.run_id if trace.job is not None else None
    status = {"run_id": run_id, "rank": rank, "code": code, "trace": os.path.abspath(mine) if ok else None}
    try:
        with atomic.replacing(status_path(html, rank), "w", encoding="utf-8") as f:
            json.dump(status, f)
    except OSError as e:
        say(f"openreg-lab: could not write {status_path(html, rank)}: {e}")
        ok = False
    if rank != 0:
        return ok
    return _merge(trace, info, html, run_id) and ok


def _merge(trace: Any, info: dict[str, str], html: str, run_id: str | None) -> bool:
    """Rank 0: wait for the other ranks' status, merge their traces, write ``html``."""
    import openreg_lab

    world = trace.job.world_size if trace.job is not None and trace.job.world_size else 1
    timeout = float(os.environ.get("OPENREG_LAB_GATHER_TIMEOUT", GATHER_TIMEOUT))
    deadline = time.monotonic() + timeout
    found: dict[int, dict[str, Any]] = {}
    while True:
        for r in range(world):
            if r not in found:
                s = _read_status(status_path(html, r))
                if s is not None and s.get("run_id") == run_id:
                    found[r] = s
        if len(found) == world or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    notes = []
    traces = []
    for r in range(world):
        s = found.get(r)
        if s is None:
            notes.append(f"rank {r} wrote nothing within {timeout:.0f} s: it failed or was killed")
            continue
        if s.get("code"):
            notes.append(f"rank {r} ended with exit code {s['code']}; its trace up to then is kept")
        if not s.get("trace"):
            notes.append(f"rank {r} could not save its trace")
            continue
        try:
            traces.append(openreg_lab.load_trace(s["trace"]))
        except (OSError, ValueError) as e:
            notes.append(f"rank {r}'s trace could not be read: {str(e).splitlines()[0]}")
    try:
        view = openreg_lab.views.ranks(traces, notes=notes)
        view.to_html(html, title=f"openreg-lab: {len(traces)} ranks", run_info=info)
    except (OSError, ValueError) as e:
        say(f"openreg-lab: could not write the merged report to {html}: {e}")
        return False
    say(f"openreg-lab: wrote the report of {len(traces)} ranks to {os.path.abspath(html)}")
    for n in notes:
        say(f"openreg-lab: {n}")
    return True


def _read_status(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
