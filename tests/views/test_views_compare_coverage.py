"""compare(), CoverageView and DispatchExplorer without a browser: their numbers are DataFrame
arithmetic on the traces and coverage tables, their controls recompute."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

import openreg_lab
from openreg_lab import theme
from openreg_lab.dispatch.families import families, lacks
from openreg_lab.recording.comparison import compare_table
from openreg_lab.views.coverage_view import treemap_nodes
from openreg_lab.views.dispatch_explorer import key_grid
from tests.support.views_data import training_trace


@pytest.fixture(scope="module")
def pair():
    return training_trace(autocast=False), training_trace(autocast=True)


def test_compare_numbers_are_dataframe_arithmetic(pair):
    off, on = pair
    view = openreg_lab.views.compare(off, on, labels=("autocast off", "autocast on"))
    assert "openreg-compare" in view._dom_classes
    table = view.table_data.set_index("name")
    sa, sb = off.summary().set_index("name"), on.summary().set_index("name")
    for name in sa.index.union(sb.index):
        ca = int(sa["calls"].get(name, 0))
        cb = int(sb["calls"].get(name, 0))
        assert (table.loc[name, "calls_a"], table.loc[name, "calls_b"]) == (ca, cb), name
        assert table.loc[name, "d_calls"] == cb - ca
        assert table.loc[name, "d_time_ns"] == int(sb["total_ns"].get(name, 0)) - int(
            sa["total_ns"].get(name, 0)
        )
        assert table.loc[name, "d_bytes_copied"] == int(sb["bytes_copied"].get(name, 0)) - int(
            sa["bytes_copied"].get(name, 0)
        )
    casts_on = on.casts().groupby("op").size()
    assert table["casts_b"].sum() == casts_on.sum() and table["casts_a"].sum() == 0
    assert view.totals[1]["casts"] == len(on.casts())
    # Both timelines share one axis: zooming one zooms the other.
    a, b = view.timelines
    assert a.span_ns == b.span_ns
    a.view = [0.0, a.span_ns / 4]
    assert b.view == [0.0, a.span_ns / 4]
    assert set(view.table_data["change"]) <= {
        "",
        "kernel changed",
        "only in autocast on",
        "only in autocast off",
    }
    assert "only in autocast on" in set(view.table_data["change"])  # the casts' own ops
    bundle = view._repr_mimebundle_()
    assert "autocast on" in bundle["text/html"] and bundle["text/plain"].startswith("<openreg compare")


def test_ops_that_fall_back_in_one_only_come_first(pair):
    off, on = pair
    ev = on.events.copy()
    # Pretend aten::mm fell back in b: the row moves to the top with its change named.
    mm = (ev["kind"] == "op") & (ev["name"] == "aten::mm")
    ev.loc[mm, "kernel"] = "fallback"
    t = compare_table(off.events, ev)
    assert t["change"].iloc[0].startswith("falls back only in")
    assert "aten::mm" in set(t.loc[t["change"] == "falls back only in b", "name"])
    with pytest.raises(TypeError, match="compare takes traces"):
        openreg_lab.views.compare(off, 3)
    with pytest.raises(ValueError, match="two strings"):
        openreg_lab.views.compare(off, on, labels=("one",))


def test_coverage_view_groups_searches_recomputes_and_counts_hits(pair):
    _, on = pair
    view = openreg_lab.views.CoverageView(profile="mps", trace=on, versus="cuda")
    assert "openreg-coverage" in view._dom_classes
    cov = openreg_lab.coverage(profile="mps", trace=on)
    assert len(view.data) == len(cov) and view.table.total == len(cov)
    fam = families(cov)
    assert (fam["family"] == fam["name"].str.split(".").str[0]).all()
    assert set(fam["category"]) <= {
        "pointwise",
        "reduction",
        "view",
        "inplace_view",
        "core",
        "data_dependent_output",
        "other",
    }
    assert int(view.data["hits"].sum()) == int(cov["hits"].sum()) > 0
    # The treemap's leaves are the overloads, coloured by resolution.
    leaves = [i for i in view.figure.data[0].ids if i.count("/") == 3]
    assert len(leaves) == min(len(cov), 4000)
    view.search.value = "cumsum"
    assert view.table.total == int(cov["name"].str.contains("cumsum").sum())
    assert all("cumsum" in i for i in view.figure.data[0].ids if i.count("/") == 3)
    missing = lacks(
        families(openreg_lab.coverage(profile="mps")), families(openreg_lab.coverage(profile="cuda"))
    )
    assert f"{len(missing)} overloads are native under cuda but not under mps" in view.lacks_html.value
    view.picker.value = "cuda"
    assert (view.data["resolution"] == "native").sum() == (
        openreg_lab.coverage(profile="cuda")["resolution"] == "native"
    ).sum()
    bundle = view._repr_mimebundle_()
    assert "overloads" in bundle["text/html"] and bundle["text/plain"].startswith(
        "<openreg coverage explorer"
    )


def _overloads(*rows: tuple[str, str, str, str, int, int]) -> pd.DataFrame:
    """A families() table from (name, resolution, kernel, category, hits, time_ns) rows."""
    cols = ["name", "resolution", "kernel", "category", "hits", "time_ns"]
    fam = pd.DataFrame(rows, columns=cols)
    fam["namespace"] = fam["name"].str.split("::").str[0]
    fam["overload"] = fam["name"].str.partition(".")[2]
    fam["family"] = fam["name"].str.split(".", n=1).str[0]
    return fam


def test_treemap_nodes_are_namespaces_groups_families_then_overloads():
    fam = _overloads(
        ("myns::op", "fallback", "fallback", "other", 0, 0),
        ("aten::add.out", "fallback", "fallback", "pointwise", 0, 0),
        ("aten::sum", "native", "native", "reduction", 1, 500),
        ("aten::add.Tensor", "native", "native", "pointwise", 2, 1500),
    )
    nodes = treemap_nodes(fam)
    native, fallback = theme.RESOLUTION_COLORS["native"], theme.RESOLUTION_COLORS["fallback"]
    assert nodes.to_dict("split")["data"] == [
        ["aten", "aten", "", "#f1f3f5", 0.0, "aten: 3 overloads"],
        ["myns", "myns", "", "#f1f3f5", 0.0, "myns: 1 overloads"],
        ["aten/pointwise", "pointwise", "aten", "#e9ecef", 0.0, "pointwise: 2 overloads"],
        ["aten/reduction", "reduction", "aten", "#e9ecef", 0.0, "reduction: 1 overloads"],
        ["myns/other", "other", "myns", "#e9ecef", 0.0, "other: 1 overloads"],
        ["aten/pointwise/aten::add", "add", "aten/pointwise", "#dee2e6", 0.0, "aten::add: 1/2 native"],
        ["aten/reduction/aten::sum", "sum", "aten/reduction", "#dee2e6", 0.0, "aten::sum: 1/1 native"],
        ["myns/other/myns::op", "op", "myns/other", "#dee2e6", 0.0, "myns::op: 0/1 native"],
        # Leaves keep their order within a family, are sized by time in the trace, name their kernel.
        ["aten/pointwise/aten::add/aten::add.out", "out", "aten/pointwise/aten::add", fallback, 0.0,
         "aten::add.out<br>fallback, runs as fallback<br>0 calls, 0 ns"],
        ["aten/pointwise/aten::add/aten::add.Tensor", "Tensor", "aten/pointwise/aten::add", native, 1500.0,
         "aten::add.Tensor<br>native, runs as native<br>2 calls, 1.5 µs"],
        ["aten/reduction/aten::sum/aten::sum", "default", "aten/reduction/aten::sum", native, 500.0,
         "aten::sum<br>native, runs as native<br>1 calls, 500 ns"],
        ["myns/other/myns::op/myns::op", "default", "myns/other/myns::op", fallback, 0.0,
         "myns::op<br>fallback, runs as fallback<br>0 calls, 0 ns"],
    ]  # fmt: skip
    # Without a trace, every overload is one unit.
    untimed = treemap_nodes(fam.assign(hits=0, time_ns=0))
    assert untimed["value"].tolist() == [0.0] * 8 + [1.0] * 4
    # Every parent is a node, and the namespaces are the roots.
    assert set(nodes["parent"]) - set(nodes["id"]) == {""}


def test_dispatch_explorer_grid_path_toggles_and_callables():
    ex = openreg_lab.views.DispatchExplorer("aten::linear")
    assert "openreg-dispatch-explorer" in ex._dom_classes
    e = ex.explanation
    assert e.op == "aten::linear" and [s.key for s in e.steps] == ["AutogradPrivateUse1"]
    assert "openreg-on-path" in ex.grid.value and ex.grid.value.count("openreg-on-path") == 1
    grid = key_grid("aten::linear", ["AutogradPrivateUse1"])
    keys = grid["key"].tolist()
    assert keys.index("AutogradPrivateUse1") < keys.index("PrivateUse1")  # priority order
    assert (
        "AutogradCUDA" not in keys
        and "AutogradCUDA" in key_grid("aten::linear", [], every_backend=True)["key"].tolist()
    )
    ex.autocast.value = True
    assert [s.key for s in ex.explanation.steps] == ["AutocastPrivateUse1", "AutogradPrivateUse1"]
    ex.autocast.value = False
    ex.inference.value = True
    assert [s.key for s in ex.explanation.steps][-1] != "AutogradPrivateUse1"
    ex.inference.value = False
    assert len(ex.flow.data) == 1 and ex.flow.data[0].type == "sankey"
    x = torch.randn(5, device="openreg")
    own = openreg_lab.views.DispatchExplorer(lambda: torch.logcumsumexp(x, 0))
    assert own.explanation.op == "aten::logcumsumexp"
    assert [c.ran for c in own.explanation.calls if c.op == "aten::_logcumsumexp"] == ["fallback"]
    mine = openreg_lab.views.DispatchExplorer("aten::mul.Tensor", x, x)
    assert mine.explanation.op == "aten::mul.Tensor" and mine.explanation.steps[-1].key == "PrivateUse1"
    with pytest.raises(ValueError, match="no operator named"):
        openreg_lab.views.DispatchExplorer("aten::not_an_op")
    # The picker searches schemas as well as names.
    ex.search.value = "Tensor weight, Tensor? bias=None) -> Tensor"
    assert "aten::linear" in ex.picker.options and "aten::mul.Tensor" not in ex.picker.options
    ex.search.value = ""
    assert len(ex.picker.options) == len(ex._schemas) > 3000
