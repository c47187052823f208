"""The timeline opens on what matters (Note [The timeline opens on the steps]): the steps' window
with step 0 apart when it is mostly one-off work, op lanes first, each Python lane folded in the
user's terms, and a "library frames" toggle, in the live widget and the report's embedded model."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pandas as pd
import pytest

from openreg_lab import theme
from openreg_lab.recording import host
from openreg_lab.recording.lod import Pyramid
from openreg_lab.views import static, timeline
from openreg_lab.views.report import library_model, report_html
from openreg_lab.views.timeline import Timeline, opening, rows_of, steps_of
from tests.support.opening_trace import MODULE, SPIN_S, opening_trace


@pytest.fixture(scope="module")
def slow_import(tmp_path_factory):
    return opening_trace(tmp_path_factory.mktemp("opening"))


def _steps(*durations: float) -> list[dict]:
    t, out = 0.0, []
    for k, d in enumerate(durations):
        out.append({"step": k, "t0": t, "t1": t + d, "complete": True})
        t += d
    return out


def test_the_window_is_the_steps_and_a_long_step_0_is_shown_apart():
    assert opening([], 5e9) == {"view": [0.0, 5e9], "apart": None}
    even = _steps(10e6, 9e6, 11e6, 10e6)
    assert opening(even, 50e6) == {"view": [0.0, 40e6], "apart": None}  # no one-off step: all steps
    slow = _steps(400e6, 10e6, 12e6, 10e6)
    o = opening(slow, 450e6)
    assert o["view"] == [400e6, 432e6]  # from step 1 to the last step's end
    assert o["apart"]["step"] == 0 and (o["apart"]["t0"], o["apart"]["t1"]) == (0.0, 400e6)
    assert o["apart"]["text"] == "step 0: 400.0 ms, 40x the median step (one-off work)"
    # At the threshold step 0 is an ordinary step.
    assert opening(_steps(timeline.APART * 10e6, 10e6, 10e6), 1e9)["apart"] is None


def test_step_0_apart_says_what_its_time_went_to(slow_import):
    t = slow_import
    drawn = host.with_events(t.events, t.host_events)
    o = opening(steps_of(t.events), Pyramid(drawn).span, drawn)
    st = t.steps()
    assert o["view"] == [
        float(st["start_ns"].iloc[1]),
        float(st["start_ns"].iloc[-1] + st["dur_ns"].iloc[-1]),
    ]
    text = o["apart"]["text"]
    imports = re.search(r"\(imports ([\d.]+) ms\)$", text)
    assert imports and SPIN_S * 1e3 * 0.8 < float(imports.group(1)) < SPIN_S * 1e3 * 3, text


def test_the_python_lane_is_in_the_users_terms_after_the_op_lanes_and_folded(slow_import):
    t = slow_import
    ev = t.host_events
    assert (ev["function"] == f"import {MODULE}").sum() == 1  # one slice for the whole import
    assert not ev["file"].str.contains("importlib").any()  # no frame of the import system
    assert not ev["function"].isin(["_find_and_load", "import_module", "_call_with_frames_removed"]).any()
    assert (t.host_slices(library=True)["function"] == "import_module").any()  # kept on request
    p = Pyramid(host.with_events(t.events, ev))
    rows = rows_of(p)
    lanes = [r["lane"] for r in rows]
    assert lanes[0] == "thread 0" and p.host_row == lanes.index("python 0")
    assert all(not r.get("host") for r in rows[: p.host_row])
    assert all(r["host"] and r["lane"] == "python 0" for r in rows[p.host_row :])
    per_row = np.diff(p.levels[0].offsets)
    python = list(range(p.host_row, len(rows)))
    branching = next((k for k, r in enumerate(python) if per_row[r] > 1), timeline.HOST_ROWS - 2)
    shown = min(max(branching + 2, timeline.HOST_ROWS), timeline.HOST_ROWS_MAX)
    if len(python) - shown < 2:
        shown = len(python)
    assert [bool(rows[r].get("folded")) for r in python] == [k >= shown for k in range(len(python))]


def test_a_lane_is_folded_only_when_that_hides_two_rows_or_more(slow_import):
    slices = pd.DataFrame(
        {
            "thread": 0, "os_thread": 1, "depth": np.arange(4), "function": [f"f{d}" for d in range(4)],
            "file": "u.py", "line": 1, "start_ns": 0, "dur_ns": 100, "wait_ns": 0, "parent": np.arange(-1, 3),
        }
    )  # fmt: skip
    base = slow_import.events
    rows = rows_of(Pyramid(host.with_events(base, slices)))
    assert not any(r.get("folded") for r in rows)  # 4 rows: folding to 3 would hide one ...
    deeper = pd.concat([slices, slices.iloc[:3].assign(depth=[4, 5, 6], parent=[3, 4, 5])], ignore_index=True)
    deeper["function"] = [f"f{d}" for d in deeper["depth"]]
    rows = rows_of(Pyramid(host.with_events(base, deeper)))
    assert sum(bool(r.get("folded")) for r in rows) == 7 - timeline.HOST_ROWS  # ... 7 rows: 4 hidden


def test_the_live_timeline_opens_on_the_steps_and_its_toggle_draws_library_frames(slow_import):
    t = slow_import
    drawn = host.with_events(t.events, t.host_events)
    calls = []

    def library():
        calls.append(1)
        return host.with_events(t.events, t.host_slices(library=True))

    w = Timeline(drawn, library=library)
    assert w.view == w.opening["view"] and w.opening["apart"]["step"] == 0
    assert w.has_library and not w.library and calls == []  # made only when first asked
    folded_rows = list(w.rows)
    w.library = True
    lib_pyramid = Pyramid(library())
    assert w.rows == rows_of(lib_pyramid) and len(w.rows) > len(folded_rows)
    assert w.rows[: lib_pyramid.host_row] == folded_rows[: lib_pyramid.host_row]  # op rows unchanged
    assert "import_module" not in w.data["strings"]  # the steps' window: the import is in step 0
    w.view = [w.opening["apart"]["t0"], w.opening["apart"]["t1"]]
    assert "import_module" in w.data["strings"]  # the library frame, drawn
    w.library = False
    assert w.rows == folded_rows and len(calls) == 2  # the library pyramid was made once
    assert not Timeline(drawn).has_library


def _model(page: str) -> dict:
    m = re.search(r"const timeline = staticModel\((.*?)\);\n", page, re.S)
    assert m
    return json.loads(m.group(1))


def test_the_reports_model_opens_on_the_steps_with_the_toggles_payload(slow_import):
    t = slow_import
    page = report_html(
        t.events, host=t.host_events, host_library=t.host_slices(library=True), verdict=t.verdict()
    )
    m = _model(page)
    assert m["view"] == m["opening"]["view"] and m["opening"]["apart"]["step"] == 0
    p = Pyramid(host.with_events(t.events, t.host_events))
    assert m["rows"] == rows_of(p) and m["host_row"] == p.host_row
    assert m["has_library"] is True and m["library"] is False
    lib = library_model(t.events, p, t.host_slices(library=True))
    lib_pyramid = Pyramid(host.with_events(t.events, t.host_slices(library=True)))
    assert m["library_rows"] == lib["library_rows"] == rows_of(lib_pyramid)
    # The toggle's payload holds the host rows only (the op rows come from the main levels).
    for level in m["library_levels"]:
        rows = np.frombuffer(base64.b64decode(level["row"]["b64"]), dtype=np.int32)
        assert len(rows) and (rows >= p.host_row).all()
        assert "import_module" in level["strings"] or level["level"] >= 0
    assert any("import_module" in lvl["strings"] for lvl in m["library_levels"])
    assert not any("import_module" in lvl["strings"] for lvl in m["levels"])  # folded by default
    # No host slices: no toggle.
    assert _model(report_html(t.events, verdict=t.verdict()))["has_library"] is False


def test_hostile_host_function_names_stay_inert_in_the_toggles_payload(slow_import):
    t = slow_import
    hostile = "</script><script>alert(1)</script>&<!--"
    lib = t.host_slices(library=True).copy()
    lib.loc[lib.index[0], "function"] = hostile
    page = report_html(t.events, host=t.host_events, host_library=lib, verdict=t.verdict())
    assert hostile not in page and "alert(1)" in page  # present, but only as escaped JSON text
    assert page.count("</script>") == page.count("<script")  # no element closed or opened by data
    assert any(hostile in lvl["strings"] for lvl in _model(page)["library_levels"])


def test_the_merged_reports_rank_table_names_host_time_in_the_users_terms(slow_import):
    from types import SimpleNamespace

    from openreg_lab.recording.ranks_timeline import host_line
    from openreg_lab.views.ranks_report import RANK_COLUMNS, rank_rows

    t = slow_import
    v = t.verdict()
    view = SimpleNamespace(
        ranks=[0], traces=[t], verdict=SimpleNamespace(per_rank=pd.DataFrame({"rank": [0]}))
    )
    line = rank_rows(view)["host_python"].iloc[0]
    assert line == host_line(v) and line.startswith("step 0: `import_module()` at ")
    assert f"imported {MODULE}: " in line  # the user's line and what it imported, not importlib's frames
    assert (
        "_find_and_load" not in line
        and ("host_python", "host Python (your code's terms)", "text") in RANK_COLUMNS
    )


def test_the_exports_draw_the_folded_lane_unless_asked_for_library_frames(slow_import, tmp_path):
    t = slow_import
    names = {}
    for library in (False, True):
        path = tmp_path / f"t{library}.json"
        t.export_chrome_trace(path, library=library) if library else t.export_chrome_trace(path)
        events = json.loads(path.read_text())["traceEvents"]
        lanes = {
            e["tid"] for e in events if e["ph"] == "M" and str(e["args"].get("name", "")).startswith("Python")
        }
        names[library] = sorted(e["name"] for e in events if e.get("tid") in lanes and e["ph"] == "X")
        assert names[library] == sorted(t.host_slices(library=library)["function"])
        (imp,) = [e for e in events if e.get("tid") in lanes and e["name"] == f"import {MODULE}"]
        assert imp["args"]["source"] == ""  # an import frame has no file:line
    assert f"import {MODULE}" in names[False] and "import_module" not in names[False]
    assert f"import {MODULE}" in names[True] and "import_module" in names[True]
    pb = tmp_path / "t.pftrace"
    t.export_chrome_trace(pb)
    assert f"import {MODULE}".encode() in pb.read_bytes() and b"import_module" not in pb.read_bytes()


def test_the_static_timeline_of_a_dashboard_without_a_kernel_opens_the_same_way(slow_import):
    t = slow_import
    p = Pyramid(host.with_events(t.events, t.host_events))
    rows = rows_of(p)
    hidden = sum(bool(r.get("folded")) for r in rows)
    svg = static.timeline_svg(p, events=t.events)
    assert f"height='{18 + 14 * (len(rows) - hidden)}'" in svg.split(">")[0]
    assert hidden >= 2 and f"python 0 (+{hidden} rows)" in svg
    st = t.steps()
    ys = {int(y) for y in re.findall(r"<rect x='[\d.]+' y='(\d+)'", svg)}
    assert max(ys) < 18 + 14 * (len(rows) - hidden)  # no slice drawn on a folded row
    t0 = st["start_ns"].iloc[1]
    assert f">{theme.format_ns(t0)}</text>" in svg  # the window starts at step 1 (step 0 apart)
    whole = static.timeline_svg(p)  # without the events: the whole trace, its Python lane folded
    assert ">0</text>" in whole


def test_the_dashboards_timeline_opens_on_the_steps_with_the_library_toggle(slow_import):
    from openreg_lab.views.dashboard import dashboard

    t = slow_import
    d = dashboard(t)
    w = d.timeline
    assert w.view == w.opening["view"] and w.opening["apart"]["step"] == 0
    assert w.has_library and [r["lane"] for r in w.rows][-1] == "python 0"
    folded = sum(bool(r.get("folded")) for r in w.rows)
    w.library = True
    assert w.rows == rows_of(Pyramid(host.with_events(t.events, t.host_slices(library=True))))
    assert sum(bool(r.get("folded")) for r in w.rows) > folded  # the library's frames, folded too
