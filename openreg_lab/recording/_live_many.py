"""What was live at many moments at once (``Memory.live_many``): for each moment, the first ``top``
allocations of a ranked list that were live then, in one pass over (allocation, moment) pairs.

An allocation ``i`` is live at event position ``p`` when ``start[i] <= p < end[i]``. With the
moments' positions sorted, the moments it is live at are one run, ``[lo, hi)`` by binary search,
so the pairs are the runs expanded, and a sort by (moment, rank) puts each moment's allocations in
the list's order: the first ``top`` of each run of a moment are the answer. The pairs are as many
as the allocations live at the moments added up: a few per moment in a loop of small ops, a
model's parameters at every moment in a big model; they are made ``PAIRS`` at a time, the moments
split into groups, so memory stays bounded whatever the trace.
"""

from __future__ import annotations

import itertools

import numpy as np

#: (allocation, moment) pairs made at once at most (five int64 arrays each: about 80 MB).
PAIRS = 2_000_000


def first_live(
    start: np.ndarray, end: np.ndarray, ranked: np.ndarray, positions: np.ndarray, top: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(moment, allocation)``: for each moment (index into ``positions``, event positions), the
    first ``top`` allocations of ``ranked`` (indices into ``start`` and ``end``, in the order to
    list them) live then; by moment, then in ``ranked``'s order."""
    empty = np.zeros(0, dtype=np.int64)
    if top <= 0 or not len(ranked) or not len(positions):
        return empty, empty
    order = np.argsort(positions, kind="stable")
    sorted_pos = positions[order]
    lo = np.searchsorted(sorted_pos, start[ranked], side="left")  # the first moment at or after start
    hi = np.searchsorted(sorted_pos, end[ranked], side="left")  # the first moment at or after its end
    pairs = int(np.maximum(hi - lo, 0).sum())
    groups = max(1, -(-pairs // PAIRS))
    edges = np.linspace(0, len(positions), groups + 1).astype(np.int64)
    moments, chosen = [], []
    for a, b in itertools.pairwise(edges):
        glo, ghi = np.clip(lo, a, b), np.clip(hi, a, b)
        span = ghi - glo
        rank = np.flatnonzero(span > 0)
        span = span[rank]
        n = int(span.sum())
        if not n:
            continue
        which = np.repeat(rank, span)
        offset = np.arange(n) - np.repeat(np.cumsum(span) - span, span)
        moment = order[np.repeat(glo[rank], span) + offset]
        by = np.lexsort((which, moment))
        moment, which = moment[by], which[by]
        run = np.r_[0, np.flatnonzero(np.diff(moment)) + 1]
        first = np.repeat(run, np.diff(np.r_[run, n]))
        keep = np.arange(n) - first < top
        moments.append(moment[keep])
        chosen.append(ranked[which[keep]])
    if not moments:
        return empty, empty
    m, c = np.concatenate(moments), np.concatenate(chosen)
    by = np.argsort(m, kind="stable")  # groups of moments can interleave once sorted back
    return m[by], c[by]
