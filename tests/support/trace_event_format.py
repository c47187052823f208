"""The Chrome Trace Event format, checked: what Perfetto's and chrome://tracing's JSON importers need
of a file (strict JSON, each event's phase and fields, complete events nested on their thread)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (the Trace Event format is strict JSON)")


def load_strict(path: Path) -> dict[str, Any]:
    """The file's document; raises on NaN or Infinity, a lone surrogate escape, or bytes not ASCII."""
    text = path.read_bytes().decode("ascii")
    doc = json.loads(text, parse_constant=_no_constant)
    _no_lone_surrogates(doc)
    return doc


def _no_lone_surrogates(value: Any) -> None:
    if isinstance(value, str):
        value.encode("utf-8")  # a lone surrogate cannot be encoded: strict readers reject its escape
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_lone_surrogates(k)
            _no_lone_surrogates(v)
    elif isinstance(value, list):
        for v in value:
            _no_lone_surrogates(v)


#: The processes Kineto names with a string (its spans, its iterations, the file's end).
_KINETO_OWN = ("Spans", "Traces", "")


def check(doc: dict[str, Any], *, kineto: bool = False) -> dict[str, int]:
    """Assert that ``doc`` follows the Trace Event format; return the count of events per phase.

    Every event has a phase, an integer pid and tid (metadata events excepted: tid optional);
    complete events ("X") a string name, a number ts and a non-negative dur; instants a scope;
    flow events ("s", "f") an id; metadata events ("M") their ``args.name`` or ``args.labels``, or
    an integer ``args.sort_index`` (``process_sort_index``, ``thread_sort_index``). Complete events of
    one thread nest: each ends no later than the one it starts inside.

    ``kineto``: a file torch.profiler (Kineto) wrote, whose own events the importers take with a
    string pid and tid: its spans' and iterations' processes ("Spans", "Traces") and the global
    instant that ends the file (pid ""). Only those may have them.
    """
    assert isinstance(doc["traceEvents"], list)
    phases: dict[str, int] = defaultdict(int)
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        ph = e["ph"]
        phases[ph] += 1
        assert isinstance(e["name"], str), e
        if kineto and e["pid"] in _KINETO_OWN:
            assert isinstance(e.get("ts", 0), (int, float)), e
            continue
        assert isinstance(e["pid"], int), e
        if ph == "M":
            if e["name"] in ("process_sort_index", "thread_sort_index"):
                assert isinstance(e["args"]["sort_index"], int), e
            else:
                assert isinstance(e["args"].get("name", e["args"].get("labels")), str), e
            continue
        assert isinstance(e["tid"], int) and isinstance(e["ts"], (int, float)), e
        if ph == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif ph == "i":
            assert e["s"] in ("g", "p", "t"), e
        elif ph in ("s", "f"):
            assert isinstance(e["id"], int), e
        else:
            raise AssertionError(f"unexpected phase {ph!r}: {e}")
    for key, spans in tracks.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[float] = []
        for start, end in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"on {key}, {start}..{end} ends after its parent"
            open_ends.append(end)
    return dict(phases)
