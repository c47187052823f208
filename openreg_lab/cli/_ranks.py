"""``run`` under a launcher of several ranks (``torchrun``): one trace per rank, one summary.

``torchrun`` starts one ``openreg-lab run`` per rank with ``RANK`` and ``WORLD_SIZE`` set; each
writes its files with the rank in the name (``run.trace`` -> ``run.rank1.trace``), and only rank 0
prints the summary. ``openreg-lab report run.rank0.trace run.rank1.trace`` merges them.
"""

from __future__ import annotations

import os


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
