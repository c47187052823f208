"""coverage(): one row per registered operator overload, classified from the live dispatcher."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

import openreg_lab
from openreg_lab.dispatch.coverage import COLUMNS, KERNELS, RESOLUTIONS

# What the dispatcher's computed table says for PrivateUse1, by the tag it prints.
_TAG_TO_RESOLUTION = {
    "kernel": "native",
    "default backend kernel": "composite_explicit",
    "math kernel": "composite_implicit",
    "backend fallback": "fallback",
}


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return openreg_lab.coverage().set_index("name")


def _dispatcher_resolution(name: str) -> str:
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith("PrivateUse1: "):
            return _TAG_TO_RESOLUTION[line.rsplit("[", 1)[1].rstrip("]")]
    raise AssertionError(f"no PrivateUse1 entry for {name}")


def test_one_row_per_registered_overload():
    df = openreg_lab.coverage()
    assert tuple(df.columns) == COLUMNS
    assert sorted(df["name"]) == sorted(torch._C._dispatch_get_all_op_names())
    assert df["name"].is_unique
    assert set(df["resolution"]) <= set(RESOLUTIONS)
    assert set(df["kernel"]) <= set(KERNELS)
    row = df.set_index("name").loc["aten::add.Tensor"]
    assert (row["namespace"], row["overload"]) == ("aten", "Tensor")


@pytest.mark.parametrize(
    ("name", "resolution", "kernel"),
    [
        ("aten::add.Tensor", "native", "hand_written"),
        ("aten::mm", "native", "hand_written"),
        ("aten::convolution_overrideable", "native", "hand_written"),
        ("aten::linear", "composite_implicit", "composite"),
        ("aten::atan2", "composite_explicit", "composite"),  # structured: calls atan2.out
        ("aten::atan2.out", "fallback", "cpu_fallback"),  # no openreg kernel, no composite
        ("quantized::add_relu_out", "missing", "none"),  # QuantizedCPU only: the CPU cannot run it
    ],
)
def test_known_ops(table: pd.DataFrame, name: str, resolution: str, kernel: str):
    assert (table.loc[name, "resolution"], table.loc[name, "kernel"]) == (resolution, kernel)


def test_every_op_agrees_with_the_dispatch_table(table: pd.DataFrame):
    disagree = {}
    for name, resolution in table["resolution"].items():
        expected = _dispatcher_resolution(name)
        if expected == "fallback" and resolution == "missing":
            # The fallback would run it, on a CPU that has no kernel for it.
            assert not torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CPU")
            continue
        if expected != resolution:
            disagree[name] = (resolution, expected)
    assert disagree == {}


def test_hand_written_kernels_are_exactly_native_ops(table: pd.DataFrame):
    assert set(table.index[table["kernel"] == "hand_written"]) == set(openreg_lab.native_ops())
    assert set(table.index[table["kernel"] == "via_cpu"]) == set(openreg_lab.via_cpu_ops())


def test_autograd_autocast_and_tags(table: pd.DataFrame):
    assert table.loc["aten::add.Tensor", "has_autograd_kernel"]
    assert not table.loc["aten::__and__.Tensor", "has_autograd_kernel"]  # composite implicit only
    assert set(table.index[table["has_autocast_rule"]]) == set(openreg_lab.autocast_rules())
    assert {"core", "pointwise"} <= set(table.loc["aten::add.Tensor", "tags"])
    assert "inplace_view" in table.loc["aten::t_", "tags"]


def test_runtime_registrations_show_up():
    ns = f"openreg_cov_{uuid.uuid4().hex[:8]}"
    lib = torch.library.Library(ns, "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        row = openreg_lab.coverage().set_index("name").loc[f"{ns}::twice"]
        assert (row["namespace"], row["resolution"], row["kernel"]) == (ns, "fallback", "cpu_fallback")
        lib.impl("twice", lambda x: x + x, "PrivateUse1")
        row = openreg_lab.coverage().set_index("name").loc[f"{ns}::twice"]
        assert (row["resolution"], row["kernel"]) == ("native", "registered")
    finally:
        lib._destroy()


def test_minimal_profile_classification():
    df = openreg_lab.coverage(profile="minimal").set_index("name")
    # Without its kernel, add.Tensor is the structured composite that calls add.out.
    assert df.loc["aten::add.Tensor", "resolution"] == "composite_explicit"
    assert df.loc["aten::add.out", "resolution"] == "fallback"
    assert df.loc["aten::empty.memory_format", "kernel"] == "hand_written"
    native = set(df.index[df["resolution"] == "native"])
    assert set(openreg_lab.profile_ops("minimal")) <= native


def test_cpu_profile_runs_cpu_kernels_natively():
    df = openreg_lab.coverage(profile="cpu").set_index("name")
    assert (df.loc["aten::atan2", "resolution"], df.loc["aten::atan2", "kernel"]) == ("native", "generic")
    assert df.loc["aten::add.Tensor", "kernel"] == "hand_written"
    assert df.loc["aten::linear", "resolution"] == "composite_implicit"  # decomposed above the backend


# Operators MPS has no kernel for in torch's native_functions.yaml (CUDA has them).
LACKING_MPS = ["aten::linalg_eig", "aten::geqrf", "aten::mode", "aten::take"]


def test_mps_profile_marks_ops_without_mps_kernels_as_fallback():
    mps = openreg_lab.coverage(profile="mps").set_index("name")
    cuda = openreg_lab.coverage(profile="cuda").set_index("name")
    for name in LACKING_MPS:
        assert mps.loc[name, "resolution"] == "fallback", name
        assert cuda.loc[name, "resolution"] == "native", name
    assert mps.loc["aten::mm", "resolution"] == "native"


def test_live_coverage_follows_the_active_profile():
    with openreg_lab.use_profile("mps"):
        live = openreg_lab.coverage()
    pd.testing.assert_frame_equal(live, openreg_lab.coverage(profile="mps"))
    pd.testing.assert_frame_equal(openreg_lab.coverage(profile="default"), openreg_lab.coverage())


def _trace(events: pd.DataFrame) -> SimpleNamespace:
    return SimpleNamespace(events=events)


def test_join_with_a_trace():
    events = pd.DataFrame(
        {
            "kind": ["op", "op", "copy", "op", "op"],
            "name": ["aten::add.Tensor", "aten::add.Tensor", "aten::_copy_from", "aten::atan2.out", "x"],
            "kernel": ["native", "native", "", "fallback", "native"],
            "dur_ns": [100, 50, 7, 900, 1],
        }
    )
    df = openreg_lab.coverage(trace=_trace(events)).set_index("name")
    assert df.loc["aten::add.Tensor", ["hits", "time_ns", "traced_kernels"]].tolist() == [2, 150, "native"]
    assert df.loc["aten::atan2.out", ["hits", "time_ns", "traced_kernels"]].tolist() == [1, 900, "fallback"]
    assert df.loc["aten::_copy_from", ["hits", "time_ns"]].tolist() == [0, 0]  # not an op event
    assert df["hits"].sum() == 3
    ranked = df.sort_values("time_ns", ascending=False)
    assert ranked.index[0] == "aten::atan2.out"


def test_bad_traces():
    with pytest.raises(TypeError, match="events"):
        openreg_lab.coverage(trace=object())
    with pytest.raises(ValueError, match="dur_ns"):
        openreg_lab.coverage(trace=_trace(pd.DataFrame({"kind": [], "name": [], "kernel": []})))


def test_bad_profile():
    with pytest.raises(ValueError, match="unknown profile 'tpu'"):
        openreg_lab.coverage(profile="tpu")


def test_a_namespace_torch_accepts_but_cannot_parse_works_in_coverage_and_reports(tmp_path):
    """``my-lib::twice`` made coverage() and to_html() raise ``expected eof but found
    '-'`` for the whole process (Note [Operator names torch cannot parse]). The same op in a namespace
    torch parses is classified the same way, under the default profile and another."""
    from openreg_lab.dispatch import _lookup

    suffix = uuid.uuid4().hex[:8]
    libs = {ns: torch.library.Library(ns, "DEF") for ns in (f"my-lib-{suffix}", f"mylib_{suffix}")}
    try:
        for lib in libs.values():
            lib.define("twice(Tensor x) -> Tensor")
            lib.impl("twice", lambda x: x * 2, "CPU")
        dashed, plain = (f"{ns}::twice" for ns in libs)
        assert not _lookup.parseable(dashed) and _lookup.parseable(plain)
        for profile in (None, "cpu"):
            df = openreg_lab.coverage(profile).set_index("name")
            cols = ["resolution", "kernel", "has_autograd_kernel", "has_autocast_rule", "tags"]
            assert df.loc[dashed, cols].tolist() == df.loc[plain, cols].tolist(), profile
            if profile is None:
                assert df.loc[dashed, ["namespace", "resolution", "kernel"]].tolist() == [
                    f"my-lib-{suffix}",
                    "fallback",
                    "cpu_fallback",
                ]
        with openreg_lab.trace() as t:
            out = getattr(torch.ops, f"my-lib-{suffix}").twice(torch.ones(3, device="openreg"))
        assert out.cpu().tolist() == [2.0, 2.0, 2.0]
        t.to_html(tmp_path / "r.html")
        assert dashed in (tmp_path / "r.html").read_text()
    finally:
        for lib in libs.values():
            lib._destroy()


def test_the_answer_for_unparseable_names_is_torchs_answer_for_parseable_ones():
    from openreg_lab.dispatch import _lookup

    keys = (
        "PrivateUse1",
        "CPU",
        "CompositeImplicitAutograd",
        "CompositeExplicitAutograd",
        "AutogradPrivateUse1",
    )
    ops = sorted(torch._C._dispatch_get_all_op_names())[::25]
    for key in keys:
        lists = set(torch._C._dispatch_get_registrations_for_dispatch_key(key))
        assert [op in lists for op in ops] == [_lookup.has_kernel(op, key) for op in ops], key
