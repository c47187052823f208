"""A trace file is checked whole on load. Its structure (parents before children,
indices in range), the codes of every enum column and the header's types and ranges: each damage
is the documented ValueError naming the field, before any view can hang on it, and
``openreg-lab report`` prints that one line and exits 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import openreg_lab
from openreg_lab.cli import main
from openreg_lab.recording import files

Damage = Callable[[dict[str, np.ndarray], Any], Any]


@pytest.fixture(scope="module")
def arrays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """The arrays of a saved trace with ops inside ops, a fallback, copies, casts, shapes, a mark."""
    x = torch.randn(6, 6, device="openreg")
    with openreg_lab.trace(record_shapes=True, stack=True) as t:
        openreg_lab.mark("m")
        with torch.autocast("openreg", dtype=torch.bfloat16):
            y = torch.nn.functional.linear(x, x)
        torch.logcumsumexp(y.float(), 0)
    path = tmp_path_factory.mktemp("valid") / "t.trace"
    t.save(path)
    with np.load(path) as data:
        return {k: data[k].copy() for k in data.files}


def _write(arrays: dict[str, np.ndarray], damage: Damage, path: Path) -> Path:
    a = {k: v.copy() for k, v in arrays.items()}
    header = json.loads(bytes(a["header"]).decode("utf-8", "surrogatepass"))  # Note [Header text]
    header = damage(a, header) or header
    a["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **a)
    return path


def _first_child(a: dict[str, np.ndarray]) -> int:
    return int(np.flatnonzero(a["f_parent"] >= 0)[0])


def _cycle(a: dict[str, np.ndarray], h: Any) -> None:
    """Two events, each the other's parent."""
    c = _first_child(a)
    p = int(a["f_parent"][c])
    a["f_parent"][p] = c


def _own_parent(a: dict[str, np.ndarray], h: Any) -> None:
    c = _first_child(a)
    a["f_parent"][c] = c


def _set(col: str, value: int, where: str = "first") -> Damage:
    def damage(a: dict[str, np.ndarray], h: Any) -> None:
        a[col] = a[col].astype(np.int64)
        a[col][0] = value

    return damage


def _header(key: str, value: Any) -> Damage:
    def damage(a: dict[str, np.ndarray], h: Any) -> None:
        h[key] = value

    return damage


CASES: list[tuple[str, Damage, str]] = [
    ("parent-cycle", _cycle, r"event \d+'s parent is \d+, not an earlier event \(parent column"),
    ("own-parent", _own_parent, r"event \d+'s parent is \d+, not an earlier event \(parent column"),
    (
        "device-99",
        _set("f_device", 99),
        r"an event has an unknown device in its device column \(99; known: -2 to 15\)",
    ),
    ("src-code", _set("f_src", -7), r"an event has an unknown device in its src column \(-7"),
    ("dst-code", _set("f_dst", 16), r"an event has an unknown device in its dst column \(16"),
    (
        "from-dtype-100",
        _set("f_from_dtype", 100),
        r"an event has an unknown dtype in its from_dtype column \(100",
    ),
    (
        "to-dtype-negative",
        _set("f_to_dtype", -2),
        r"an event has an unknown dtype in its to_dtype column \(-2",
    ),
    ("kernel-code", _set("f_kernel", 9), r"an event has an unknown kernel in its kernel column \(9"),
    ("kind-code", _set("f_kind", -1), r"an event has an unknown kind in its kind column \(-1"),
    ("header-list", lambda a, h: [h], r"its header is a JSON list, not an object"),
    ("negative-name", _set("f_name", -1), r"its name column points past its string table .*: -1"),
    (
        "float-name",
        lambda a, h: a.__setitem__("f_name", a["f_name"].astype(np.float64) + 0.5),
        r"its name column holds float64 values, not integers",
    ),
    ("dispatch-index", _set("f_dispatch", 10**6), r"its dispatch column points past its string table"),
    ("source-index", _set("f_source", 10**6), r"its source column points past its string table"),
    ("t0-huge", _header("t0", 2**70), r"its header's t0 is 1180591620717411303424, not a monotonic"),
    ("t0-float", _header("t0", 1.5), r"its header's t0 is 1.5, not a monotonic"),
    ("threads-x", _header("threads", {"x": 1}), r"its header's threads has 'x': 1, not a thread index"),
    ("threads-list", _header("threads", [1]), r"its header's threads is \[1\], not an object"),
    ("threads-tid", _header("threads", {"0": "a"}), r"its header's threads has '0': 'a'"),
    ("dropped-negative", _header("dropped", -1), r"its header's dropped is -1, not a count"),
    ("dropped-bool", _header("dropped", True), r"its header's dropped is True, not a count"),
    ("capacity-zero", _header("capacity", 0), r"its header's capacity is 0, not a number of events"),
    ("capacity-huge", _header("capacity", 2**63), r"its header's capacity is 9223372036854775808"),
    ("version-string", _header("version", "1"), r"its header's version is '1', not a positive integer"),
    ("version-null", _header("version", None), r"its header's version is None, not a positive integer"),
    ("stack-string", _header("stack", "yes"), r"its header's stack is 'yes', not true or false"),
    ("ops-list", _header("ops", ["all"]), r"its header's ops is \['all'\], not one of all, kernels"),
    ("job-list", _header("job", ["x"]), r"its header's job is \['x'\], not an object of run_id, rank"),
    (
        "job-run-id-empty",
        _header("job", {"run_id": "", "rank": 0, "world_size": 2}),
        r"its header's job.run_id is '', not a printable string",
    ),
    (
        "job-rank-past-world",
        _header("job", {"run_id": "r", "rank": 2, "world_size": 2}),
        r"its header's job.rank is 2, not a rank from 0 to the world size - 1",
    ),
    (
        "job-world-zero",
        _header("job", {"run_id": "r", "rank": None, "world_size": 0}),
        r"its header's job.world_size is 0, not a number of ranks",
    ),
    (
        "strings-number",
        lambda a, h: h["strings"].append(5),
        r"its string table holds something other than strings",
    ),
    (
        "unknown-thread",
        lambda a, h: a["f_thread"].__setitem__(0, 7),
        r"its thread column names threads its header's threads lacks: \[7\]",
    ),
    ("start-negative", _set("f_start_ns", -5), r"its start_ns column holds -5, below 0"),
    ("dur-below-running", _set("f_dur_ns", -2), r"its dur_ns column holds -2, below -1"),
    ("bytes-negative", _set("f_bytes", -1), r"its bytes column holds -1, below 0"),
    (
        "shapes-ndim",
        lambda a, h: a["pool"].__setitem__(int(a["f_shapes"][a["f_shapes"] >= 0][0]) + 2, 10**6),
        r"the shapes pool is truncated",
    ),
    (
        "shapes-count-huge",
        lambda a, h: a["pool"].__setitem__(int(a["f_shapes"][a["f_shapes"] >= 0][0]), 10**15),
        r"the shapes pool is truncated \(more arguments than it holds\)",
    ),
    (
        "shapes-2d",
        lambda a, h: a.__setitem__("pool", a["pool"].reshape(1, -1)),
        r"its shapes pool holds int64 of 2 dimensions, not integers",
    ),
]


@pytest.mark.parametrize(("damage", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_damage_is_a_value_error_naming_the_field(arrays, tmp_path, damage, message):
    path = _write(arrays, damage, tmp_path / "bad.trace")
    with pytest.raises(ValueError, match=r"is a damaged openreg-lab trace: " + message) as e:
        openreg_lab.load_trace(path)
    assert e.value.args[0].endswith("save the trace again")
    assert "\n" not in e.value.args[0]


def test_a_lone_surrogate_in_the_string_table_is_data_not_damage(arrays, tmp_path):
    # A file name's undecodable byte (surrogateescape) is a string the recorder keeps;
    # it was refused as "not valid Unicode" by every later load.
    path = _write(arrays, lambda a, h: h["strings"].append("caf\udce9 \ud800"), tmp_path / "s.trace")
    assert openreg_lab.load_trace(path).columns.strings[-1] == "caf\udce9 \ud800"


def test_the_undamaged_file_loads_and_its_views_work(arrays, tmp_path):
    t = openreg_lab.load_trace(_write(arrays, lambda a, h: None, tmp_path / "ok.trace"))
    assert len(t.summary()) > 0 and t.events["kind"].eq("mark").sum() == 1
    assert (t.events["parent"] < t.events["id"]).all()


@pytest.mark.parametrize(
    ("damage", "message"),
    [CASES[0][1:], CASES[9][1:], CASES[13][1:], CASES[22][1:]],
    ids=[CASES[i][0] for i in (0, 9, 13, 22)],
)
def test_report_prints_one_line_and_exits_2(arrays, tmp_path, capsys, damage, message):
    path = _write(arrays, damage, tmp_path / "bad.trace")
    code = main(["report", str(path), "--html", str(tmp_path / "r.html")], prog="openreg-lab")
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("openreg-lab report: error: "), err
    assert "damaged openreg-lab trace" in lines[0]
    assert not (tmp_path / "r.html").exists()


def test_the_version_of_a_newer_file_is_still_named(arrays, tmp_path):
    path = _write(arrays, _header("version", files.VERSION + 1), tmp_path / "new.trace")
    with pytest.raises(ValueError, match=rf"format version {files.VERSION + 1}.*upgrade openreg-lab"):
        openreg_lab.load_trace(path)
