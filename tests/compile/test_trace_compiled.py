"""What a trace records of compiled code (Note [Compiled code in the trace] in csrc/trace/Compiled.h).

One small function is compiled once for the module: a matmul (Inductor's extern ``mm``), a fused
pointwise kernel, a sort (Inductor's fallback, and openreg's CPU fallback), and a second kernel.
Its generated code is read back (``run_and_get_code``) to know exactly which kernels a call runs.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator

import pandas as pd
import pytest
import torch
from torch._inductor.utils import run_and_get_code

import openreg_lab
import openreg_lab.memory
from openreg_lab import theme
from openreg_lab.recording import lookup
from openreg_lab.recording.comparison import compare_table
from openreg_lab.recording.lod import COLOR_KEYS, PALETTE, Pyramid
from openreg_lab.views.coverage_view import CoverageView
from openreg_lab.views.details import details_html


def _f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = (x @ w).relu() * 2
    values, _ = torch.sort(y, dim=-1)
    return values + 1


@pytest.fixture(scope="module")
def compiled() -> Iterator[tuple[object, str, tuple[torch.Tensor, torch.Tensor]]]:
    torch._dynamo.reset()
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    args = (x.to("openreg"), w.to("openreg"))
    fn = torch.compile(_f)
    out, codes = run_and_get_code(fn, *args)
    torch.testing.assert_close(out.cpu(), _f(x, w), rtol=1e-5, atol=1e-5)
    yield fn, codes[0], args
    torch._dynamo.reset()


def _trace(fn, args, **kwargs) -> pd.DataFrame:
    with openreg_lab.trace(**kwargs) as t:
        fn(*args)
    return t.events


def _kernels_called(code: str) -> list[str]:
    """The generated kernels ``call`` runs, in order (each bracketed by _openreg_begin/_end)."""
    return re.findall(r"^\s+(cpp_fused_\w+)\(", code, flags=re.MULTILINE)


@pytest.mark.parametrize("ops", ["all", "kernels"])
def test_each_kernel_call_is_a_compiled_event_inside_the_graph_call(compiled, ops):
    fn, code, args = compiled
    ev = _trace(fn, args, ops=ops)
    regions = ev[(ev.kind == "compiled") & ev.fused.isna()]
    assert regions.name.tolist() == ["graph 0/0 inference"]
    region = int(regions.id.iloc[0])
    kernels = ev[(ev.kind == "compiled") & ev.fused.notna()]
    assert kernels.name.tolist() == _kernels_called(code) == ["cpp_fused_mul_relu_0", "cpp_fused_add_1"]
    assert kernels.fused.tolist() == ["aten::mul.Tensor, aten::relu", "aten::add.Tensor"]
    assert (kernels.parent == region).all() and (kernels.graph == "graph 0/0 inference").all()
    assert (kernels.dur_ns > 0).all() and (kernels.device == "openreg:0").all()
    assert len(code.split("_openreg_begin(")) - 1 == 2  # the wrapper brackets exactly these calls


@pytest.mark.parametrize("ops", ["all", "kernels"])
def test_ops_compiled_code_still_dispatches_are_recorded_under_the_graph_call(compiled, ops):
    fn, _, args = compiled
    ev = _trace(fn, args, ops=ops)
    region = int(ev[(ev.kind == "compiled") & ev.fused.isna()].id.iloc[0])
    mm = ev[ev.name == "aten::mm.out"]
    assert mm.kernel.tolist() == ["native"] and mm.parent.tolist() == [region]
    sort = ev[(ev.kind == "op") & (ev.name == "aten::sort.values_stable")]
    assert sort.kernel.tolist() == ["fallback"]
    ancestors = set()
    parent = int(sort.parent.iloc[0])
    while parent >= 0:
        ancestors.add(parent)
        parent = int(ev.parent.iloc[parent])
    assert region in ancestors
    fallback = ev[(ev.kind == "fallback") & (ev.parent == int(sort.id.iloc[0]))]
    copies = ev[(ev.kind == "copy") & (ev.parent == int(fallback.id.iloc[0]))]
    # the sorted input to the CPU; values (float32) and indices (int64) back: 4 x 8 each
    assert copies.name.tolist() == ["D2H", "H2D", "H2D"]
    assert copies.bytes.tolist() == [128, 128, 256]


def test_allocations_of_compiled_code_belong_to_its_graph_and_name_their_nodes_line(compiled):
    fn, code, args = compiled
    lines = inspect.getsource(_f).splitlines()
    matmul = _f.__code__.co_firstlineno + next(i for i, text in enumerate(lines) if "(x @ w)" in text)
    # the mm's output is the one buffer the code allocates (the sort allocates its own, the add
    # reuses the sort's): its allocation names its node's line
    assert code.count("; _openreg_node(0, 0)") == 1
    openreg_lab.memory._record_memory_history()
    try:
        ev = _trace(fn, args)
        snap = openreg_lab.memory._snapshot()
    finally:
        openreg_lab.memory._record_memory_history(enabled=None)
    region = int(ev[(ev.kind == "compiled") & ev.fused.isna()].id.iloc[0])
    allocs = ev[ev.kind == "alloc"]
    assert len(allocs) >= 3  # the mm's output, the sort's values and indices (and its host copies)
    for parent in allocs.parent:  # every allocation of the call is inside the graph's region
        while parent not in (-1, region):
            parent = int(ev.parent.iloc[parent])
        assert parent == region
    assert allocs.source.dropna().tolist() == [f"{__file__}:{matmul}"]
    ours = {int(a) for a in allocs.address}
    entries = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] in ours]
    named = [
        (e["frames"][0]["line"], e["frames"][1]["name"]) for e in entries if e["frames"][0]["name"] == "_f"
    ]
    assert named == [(matmul, "call")]  # the node's line, then the generated code's call


def test_the_same_code_compiled_from_other_lines_names_its_own_lines(tmp_path):
    # Inductor's caches key on the graph's code: the lines the wrapper writes in are in the key too.
    sources = []
    for pad in (0, 3):
        name = str(tmp_path / f"g{pad}.py")
        scope: dict[str, object] = {}
        exec(compile("\n" * pad + "def g(x, w):\n    return (x @ w) + 1\n", name, "exec"), scope)
        fn = torch.compile(scope["g"])
        args = (torch.randn(4, 8, device="openreg"), torch.randn(8, 8, device="openreg"))
        fn(*args)
        ev = _trace(fn, args)
        sources.append(sorted(ev.loc[ev.kind == "alloc", "source"].dropna()))
    assert sources == [[f"{tmp_path}/g0.py:2"], [f"{tmp_path}/g3.py:5"]]


def test_compare_eager_with_compiled_shows_what_fused_what_still_dispatches_and_falls_back(compiled):
    fn, _, args = compiled
    with openreg_lab.trace() as eager:
        _f(*args)
    table = compare_table(eager.events, _trace(fn, args)).set_index("name")
    for op in ("aten::mul.Tensor", "aten::relu", "aten::add.Tensor"):  # vanished into kernels
        row = table.loc[op]
        assert (row.change, row.calls_a, row.calls_b, row.fused_a, row.fused_b) == ("fused in b", 1, 0, 0, 1)
    still = table.loc["aten::mm.out"]  # Inductor's extern kernel reaches openreg's native mm
    assert (still.change, still.calls_b, still.kernel_b) == ("only in b", 1, "native")
    falls = table.loc["aten::sort.values_stable"]
    assert (falls.kernel_a, falls.kernel_b, falls.calls_b) == ("fallback", "fallback", 1)


def test_coverage_counts_the_calls_compiled_code_makes(compiled):
    fn, _, args = compiled
    with openreg_lab.trace() as t:
        fn(*args)
        _f(*args)  # the same ops eagerly: hits, but not compiled hits
    cov = openreg_lab.coverage(trace=t).set_index("name")
    assert cov.loc["aten::mm.out", ["hits", "compiled_hits"]].tolist() == [1, 1]
    assert cov.loc["aten::sort.values_stable", ["hits", "compiled_hits"]].tolist() == [2, 1]
    assert cov.loc["aten::relu", ["hits", "compiled_hits"]].tolist() == [1, 0]
    view = CoverageView(trace=t)  # the coverage explorer shows the column
    assert view.data.set_index("name").loc["aten::mm.out", "compiled_hits"] == 1
    assert "calls from compiled code" in view._repr_mimebundle_()["text/html"]


def test_views_draw_compiled_code_in_its_own_colour_and_list_the_fused_ops(compiled, tmp_path):
    fn, _, args = compiled
    with openreg_lab.trace() as t:
        fn(*args)
    ev = t.events
    kernel = int(ev[ev.name == "cpp_fused_mul_relu_0"].id.iloc[0])
    html = details_html(lookup.details(ev, kernel))
    assert "<b>fused ops</b>" in html and ">aten::mul.Tensor</span>" in html and ">aten::relu</span>" in html
    assert theme.COMPILED_COLOR in html
    pyramid = Pyramid(ev)
    compiled_code = COLOR_KEYS.index("compiled")
    drawn = pyramid.levels[0]
    colours = {int(e): int(pyramid.color[e]) for e in drawn.event}
    ids = ev[ev.kind == "compiled"].id.tolist()
    assert [colours[i] for i in ids] == [compiled_code] * 3  # the graph's call and its two kernels
    assert PALETTE[compiled_code] == theme.COMPILED_COLOR
    t.export_chrome_trace(tmp_path / "c.json")
    chrome = json.loads((tmp_path / "c.json").read_text())["traceEvents"]
    mine = [e for e in chrome if e.get("cat") == "compiled"]
    assert [(e["name"], e["cname"]) for e in mine] == [
        ("graph 0/0 inference", "cq_build_passed"),
        ("cpp_fused_mul_relu_0", "cq_build_passed"),
        ("cpp_fused_add_1", "cq_build_passed"),
    ]
    assert mine[1]["args"]["fused"] == "aten::mul.Tensor, aten::relu"


# These two reset Dynamo: they come last, after the tests of the module's compiled function.
def test_a_compile_a_recompile_and_a_graph_break_are_compile_events_with_their_reasons():
    torch._dynamo.reset()
    g = torch.compile(lambda a: a.cos() * 2)

    def broken(a: torch.Tensor) -> torch.Tensor:
        a = a + 1
        torch._dynamo.graph_break()
        return a * 2

    with openreg_lab.trace() as t:
        g(torch.randn(3).to("openreg"))
        g(torch.randn(5).to("openreg"))  # another size: Dynamo recompiles, dynamic this time
        g(torch.randn(7).to("openreg"))  # no recompile
        torch.compile(broken)(torch.randn(3).to("openreg"))
    ev = t.events
    compile_events = ev[ev.kind == "compile"]
    assert compile_events.name.tolist() == [
        "compile 0/0",
        "recompile 0/1",
        "compile 1/0",
        "graph break",
        "compile 2/0",
    ]
    reasons = dict(zip(compile_events.name, compile_events.reason, strict=True))
    assert reasons["recompile 0/1"] == "0/0: tensor 'a' size mismatch at index 0. expected 3, actual 5"
    recompile = int(compile_events[compile_events.name == "recompile 0/1"].id.iloc[0])
    shown = details_html(lookup.details(ev, recompile))  # the details panel, escaped
    assert "<b>reason</b> <code>0/0: tensor &#x27;a&#x27; size mismatch at index 0." in shown
    assert reasons["graph break"].startswith("Call to `torch._dynamo.graph_break()`")
    assert pd.isna(reasons["compile 0/0"])
    spans = compile_events[compile_events.name != "graph break"]
    assert (spans.dur_ns > 0).all()
    instant = compile_events[compile_events.name == "graph break"]
    assert instant.dur_ns.tolist() == [0]
    # each graph's calls are their own compiled events, after the compilation that made them
    calls = ev[(ev.kind == "compiled") & ev.fused.isna()]
    assert calls.name.tolist() == [
        "graph 0/0 inference",
        "graph 0/1 inference",
        "graph 0/1 inference",
        "graph 1/0 inference",
        "graph 2/0 inference",
    ]
    torch._dynamo.reset()


def test_the_warn_policy_inside_compiled_code_is_a_python_warning_as_in_eager_mode(capfd):
    """Note [Warnings from compiled code]: it was a C++ warning on stderr."""
    import warnings

    torch._dynamo.reset()
    fn = torch.compile(lambda a: a.logcumsumexp(0) + 1)  # logcumsumexp falls back, inside the compiled graph
    x = torch.arange(4.0).to("openreg")
    with openreg_lab.fallback_policy("warn"), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(x)
    torch.testing.assert_close(out.cpu(), torch.arange(4.0).logcumsumexp(0) + 1)
    ours = [w for w in seen if "has no openreg kernel" in str(w.message)]
    assert len(ours) == 1 and ours[0].category is UserWarning
    assert str(ours[0].message).startswith("aten::_logcumsumexp has no openreg kernel: it ran on the CPU")
    assert "has no openreg kernel" not in capfd.readouterr().err
    with openreg_lab.fallback_policy("warn"), warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning made an error is raised from the call
        with pytest.raises(UserWarning, match=r"aten::_logcumsumexp has no openreg kernel"):
            fn(x)
    torch._dynamo.reset()


def test_a_dynamo_reset_inside_a_trace_keeps_compile_events_and_unique_region_names():
    """Note [A Dynamo reset inside a trace]: the reset cleared openreg's compile
    callbacks (nothing recorded after it) and restarted the ids (two regions "graph 0/0 inference").
    After the second reset only eager code compiles: the bytecode hook notices it."""
    torch._dynamo.reset()
    x = torch.randn(8).to("openreg")

    def broken(a: torch.Tensor) -> torch.Tensor:
        a = a + 1
        torch._dynamo.graph_break()
        return a * 2

    with openreg_lab.trace() as t:
        torch.compile(lambda a: a.sin() + 1)(x)
        torch._dynamo.reset()
        g = torch.compile(lambda a: a.cos() * 2)
        g(x)
        g(torch.randn(9).to("openreg"))  # another size: a recompile
        torch._dynamo.reset()
        torch.compile(broken, backend="eager")(x)
    ev = t.events
    compiles = ev[ev.kind == "compile"]
    assert sorted(compiles.name) == sorted(
        [
            "compile 0/0",
            "compile 0/0 (after reset 1)",
            "recompile 0/1 (after reset 1)",
            "compile 0/0 (after reset 2)",
            "graph break",
            "compile 1/0 (after reset 2)",
        ]
    )
    reasons = dict(zip(compiles.name, compiles.reason, strict=True))
    assert reasons["recompile 0/1 (after reset 1)"].startswith("0/0: tensor 'a' size mismatch at index 0.")
    assert reasons["graph break"].startswith("Call to `torch._dynamo.graph_break()`")
    spans = compiles[compiles.name != "graph break"]
    assert (spans.dur_ns > 0).all()
    calls = ev[(ev.kind == "compiled") & ev.fused.isna()]
    assert calls.name.tolist() == [
        "graph 0/0 inference",
        "graph 0/0 inference (after reset 1)",
        "graph 0/1 inference (after reset 1)",
    ]
    kernels = ev[(ev.kind == "compiled") & ev.fused.notna()]
    assert kernels.graph.tolist() == calls.name.tolist()  # each kernel under its own graph
    torch._dynamo.reset()
    with openreg_lab.trace() as t:  # a reset with no trace open: Dynamo's own names again
        torch.compile(lambda a: a.tan())(x)
    names = t.events[t.events.kind.isin(["compile", "compiled"]) & t.events.fused.isna()].name.tolist()
    assert names == ["compile 0/0", "graph 0/0 inference"]
    torch._dynamo.reset()


def test_the_ops_compilation_runs_on_the_device_are_children_of_its_compile_event():
    torch._dynamo.reset()
    x = torch.randn(4, 4).to("openreg")
    with openreg_lab.trace() as t:
        torch.compile(lambda a: a.sin() + 1)(x)
    ev = t.events
    compile_id = int(ev[ev.kind == "compile"].id.iloc[0])
    during = ev[
        (ev.start_ns > ev.start_ns[compile_id])
        & (ev.start_ns < ev.start_ns[compile_id] + ev.dur_ns[compile_id])
    ]
    top = during[during.parent < compile_id]
    assert top.empty, top[["id", "parent", "kind", "name"]]
    torch._dynamo.reset()


def test_a_graph_break_quoting_a_lone_surrogate_is_recorded_as_it_is(monkeypatch):
    """Dynamo's reason quotes the user's string; a lone surrogate in it (a file name's undecodable
    byte) made the recorder's intern raise inside Dynamo's callback, failing the user's compiled
    call under a trace. It is recorded as it is (Note [Strings the recorder keeps])."""
    from torch._logging._internal import trace_log

    # PyTorch's structured log encodes each payload strictly (torch/_logging/_internal.py) when its
    # logger has handlers: under pytest's log capture (or TORCH_TRACE) the same graph break fails
    # there, traced or not. Without handlers, as in a plain run, only openreg's callback is tested.
    monkeypatch.setattr(trace_log, "handlers", [])
    torch._dynamo.reset()

    def broken(a: torch.Tensor) -> torch.Tensor:
        a = a + 1
        torch._dynamo.graph_break(msg="caf\udce9 <b>")
        return a * 2

    x = torch.ones(3).to("openreg")
    with openreg_lab.trace() as t:
        y = torch.compile(broken, backend="eager")(x)
    assert torch.equal(y.cpu(), torch.full((3,), 4.0))
    ev = t.events
    reasons = ev.loc[(ev.kind == "compile") & (ev.name == "graph break"), "reason"].tolist()
    assert len(reasons) == 1 and "Message: caf\udce9 <b>" in reasons[0]
    torch._dynamo.reset()


def test_the_kineto_export_makes_each_generated_kernel_call_a_device_kernel(compiled, tmp_path):
    fn, code, args = compiled
    with openreg_lab.trace() as t:
        fn(*args)
    t.to_kineto(tmp_path / "k.json")
    events = json.loads((tmp_path / "k.json").read_text())["traceEvents"]
    kernels = [e["name"] for e in events if e.get("cat") == "kernel"]
    generated = [k for k in kernels if k.startswith("cpp_fused_")]
    assert generated == _kernels_called(code)  # each call, in order, on the device's stream
    assert "aten::mm.out" in kernels  # an extern kernel the compiled code still dispatches
