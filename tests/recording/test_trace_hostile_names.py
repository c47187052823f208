"""What ``save()`` writes, ``load_trace()`` reads. Every string the recorder and
the host sampler keep comes back equal, a file name's undecodable bytes (lone surrogates) and
hostile markup included; the report and the Perfetto export show a lone surrogate as its escape
``\\udcXX``, the Chrome JSON keeps it, and nothing fails to encode."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

import openreg_lab
from tests.support.hostile_data import PAYLOAD

#: As Python names a file under the directory b"caf\xe9" (surrogateescape), with markup after it.
FILE = "caf\udce9/" + PAYLOAD + " nul \x00.py"
FUNCTION = "spin " + PAYLOAD + " \udce9 \x00"
#: openreg_lab.mark keeps every string, a lone surrogate included (Note [Strings the recorder keeps]).
MARKS = {PAYLOAD: PAYLOAD, "nul \x00 inside": "nul \x00 inside", "x" * 100_000: "x" * 100_000}
MARKS["caf\udce9"] = "caf\udce9"
MARKS["\ud800 high"] = "\ud800 high"
# A high surrogate then a low one, as four code points, beside the one character they encode:
# JSON's escapes cannot tell the two apart (Note [Header text]).
MARKS["a\ud83d\ude00b"] = "a\ud83d\ude00b"
MARKS["a\U0001f600b"] = "a\U0001f600b"


def _spin() -> Callable[[torch.Tensor, float], torch.Tensor]:
    """A function whose code names the file ``FILE`` and is called ``FUNCTION``, as a script under a
    directory whose name is not UTF-8 would (and worse): the host sampler records both."""

    def spin(x: torch.Tensor, seconds: float) -> torch.Tensor:
        x = x + 1
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return x

    spin.__code__ = spin.__code__.replace(co_filename=FILE, co_qualname=FUNCTION)
    return spin


@pytest.fixture(scope="module")
def hostile() -> openreg_lab.Trace:
    x = torch.ones(2, device="openreg")
    spin = _spin()
    with openreg_lab.trace(stack=True) as t:
        for name in MARKS:
            openreg_lab.mark(name)
        spin(x, 0.1)
    assert (t.host_events["file"] == FILE).any()  # sampled at least once in 0.1 s
    return t


def _marks(t: openreg_lab.Trace) -> list[Any]:
    return t.events.loc[t.events["kind"] == "mark", "name"].tolist()


def test_every_captured_string_comes_back_from_save_and_load(hostile, tmp_path):
    assert _marks(hostile) == list(MARKS.values())
    path = tmp_path / "hostile.trace"
    hostile.save(path)
    back = openreg_lab.load_trace(path)
    assert _marks(back) == list(MARKS.values())
    assert back.columns.strings == hostile.columns.strings
    assert back.host_samples is not None and back.host_samples.strings == hostile.host_samples.strings
    h = back.host_events
    assert {FILE, FUNCTION} <= set(h["file"]) | set(h["function"])
    assert h[["function", "file", "line"]].equals(hostile.host_events[["function", "file", "line"]])


def test_the_report_shows_a_lone_surrogate_as_its_escape_and_markup_as_text(hostile, tmp_path):
    path = tmp_path / "r.html"
    hostile.to_html(path)
    page = path.read_bytes().decode("utf-8")  # strict: the file is UTF-8
    assert "caf\\udce9/" in page  # the verdict's host Python line names the file, escaped
    assert "\ufffd\ufffd\ufffd" not in page  # not three replacement characters, as before
    assert "<script>alert(1)" not in page and "onerror=alert(2)>" not in page


def test_the_chrome_json_keeps_them_and_perfetto_shows_the_escape(hostile, tmp_path):
    hostile.export_chrome_trace(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))["traceEvents"]
    assert FUNCTION in {e["name"] for e in events if e.get("cat") == "host"}  # lossless
    # As JSON can say them: a surrogate pair's two code points are read as the character they
    # encode (a JavaScript string, what Perfetto and chrome://tracing hold, cannot tell them apart).
    as_json = {json.loads(json.dumps(m)) for m in MARKS.values()}
    assert len(as_json) == len(MARKS) - 1
    assert {e["name"] for e in events if e["ph"] == "i"} == as_json
    hostile.export_chrome_trace(tmp_path / "t.pftrace")
    data = (tmp_path / "t.pftrace").read_bytes()
    assert b"spin " + PAYLOAD.encode() + b" \\udce9 \x00" in data  # UTF-8, the surrogate escaped


def test_the_source_of_an_op_in_a_file_whose_name_is_not_utf8_names_that_file():
    x = torch.ones(2, device="openreg")
    with openreg_lab.trace(stack=True) as t:
        _spin()(x, 0)
    sources = t.events.loc[t.events["name"] == "aten::add.Tensor", "source"].tolist()
    assert sources and all(str(s).startswith("caf\udce9/") for s in sources), sources
