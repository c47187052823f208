"""compare(), CoverageView and DispatchExplorer without a browser: their numbers are DataFrame
arithmetic on the traces and coverage tables, their controls recompute."""

from __future__ import annotations

import pytest
import torch
from views_data import training_trace

import openreg_lab
from openreg_lab.views.comparison import compare_table
from openreg_lab.views.coverage_view import families, lacks
from openreg_lab.views.dispatch_explorer import key_grid


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
    own = openreg_lab.views.DispatchExplorer(lambda: torch.cumsum(x, 0))
    assert own.explanation.op == "aten::cumsum"
    assert [c.ran for c in own.explanation.calls if c.op == "aten::cumsum.out"] == ["fallback"]
    mine = openreg_lab.views.DispatchExplorer("aten::mul.Tensor", x, x)
    assert mine.explanation.op == "aten::mul.Tensor" and mine.explanation.steps[-1].key == "PrivateUse1"
    with pytest.raises(ValueError, match="no operator named"):
        openreg_lab.views.DispatchExplorer("aten::not_an_op")
    # The picker searches schemas as well as names.
    ex.search.value = "Tensor weight, Tensor? bias=None) -> Tensor"
    assert "aten::linear" in ex.picker.options and "aten::mul.Tensor" not in ex.picker.options
    ex.search.value = ""
    assert len(ex.picker.options) == len(ex._schemas) > 3000
