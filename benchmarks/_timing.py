"""Side-by-side timing: medians of interleaved runs, so machine noise hits both sides alike."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence


def _timed(fn: Callable[[], object], number: int, clock: Callable[[], float]) -> float:
    """The ``clock`` seconds ``number`` calls of ``fn`` take."""
    start = clock()
    for _ in range(number):
        fn()
    return clock() - start


def _warm_up(fns: Sequence[Callable[[], object]]) -> None:
    """Three calls of each (allocator caches, lazy init) before anything is timed."""
    for fn in fns:
        _timed(fn, 3, time.perf_counter)


def _calibrate(
    fn: Callable[[], object], target_s: float, clock: Callable[[], float] = time.perf_counter
) -> int:
    number = 1
    while True:
        if _timed(fn, number, clock) >= target_s or number >= 1 << 20:
            return number
        number *= 2


def compare(
    fns: Sequence[Callable[[], object]],
    rounds: int = 15,
    target_s: float = 0.02,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Return the median seconds per call of each function, measured in interleaved rounds.

    ``clock``: wall time by default; ``time.process_time`` counts the CPU time of every thread of the
    process (a sampling thread's included), steadier than wall time on a machine others share."""
    _warm_up(fns)
    numbers = [_calibrate(fn, target_s, clock) for fn in fns]
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            samples[i].append(_timed(fn, numbers[i], clock) / numbers[i])
    return [statistics.median(s) for s in samples]


def paired_ratios(
    fns: Sequence[Callable[[], object]],
    rounds: int = 101,
    target_s: float = 0.05,
    clock: Callable[[], float] = time.process_time,
) -> list[float]:
    """Per function after the first, the median over ``rounds`` of its time over the first's in the
    same round (each round runs every function once, in an order shuffled per round). A ratio of
    neighbours cancels the machine's slow drift (another tenant, frequency) that moves two separate
    medians apart, so a few per cent read steadier than with ``compare``; the shuffle keeps what one
    function leaves behind (torch.profiler's threads, a cold cache) from always landing on the same
    next one (a fixed order put the untraced step after the profiler and read the sampler at 0.85x).
    One number of calls for all, the first's."""
    _warm_up(fns)
    number = _calibrate(fns[0], target_s, clock)
    ratios: list[list[float]] = [[] for _ in fns[1:]]
    order = list(range(len(fns)))
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        times = [0.0] * len(fns)
        for i in order:
            times[i] = _timed(fns[i], number, clock)
        for i, t in enumerate(times[1:]):
            ratios[i].append(t / times[0])
    return [statistics.median(r) for r in ratios]


def fmt_time(seconds: float) -> str:
    """Format a duration with a unit that keeps three significant digits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a plain aligned table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
