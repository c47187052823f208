"""The views take what the functions they draw take (every profile form, an
operator packet) and refuse bad arguments with those functions' own messages; a mark of any
string is recorded."""

from __future__ import annotations

import pytest
import torch

import openreg_lab
from openreg_lab.dispatch.coverage import coverage
from openreg_lab.dispatch.families import families, lacks
from openreg_lab.recording.text import visible
from openreg_lab.views import CoverageView, DispatchExplorer

ADD_ONLY = ["aten::add.Tensor"]


def _resolution(view: CoverageView, op: str) -> str:
    return str(view.data.set_index("name").at[op, "resolution"])


def _same_coverage(view: CoverageView, profile: object) -> None:
    expected = coverage(profile=profile)  # type: ignore[arg-type]
    cols = ["name", "resolution", "kernel"]
    assert view.data[cols].reset_index(drop=True).equals(expected[cols].reset_index(drop=True))


def test_coverage_view_under_an_active_list_profile(capsys):
    with openreg_lab.use_profile(ADD_ONLY):
        view = CoverageView()
        assert view.picker.value == "custom"
        _same_coverage(view, ADD_ONLY)
    assert _resolution(view, "aten::add.Tensor") == "native"
    assert _resolution(view, "aten::mul.Tensor") != "native"  # hand-written, not in the profile
    assert "under profile custom" in view._repr_mimebundle_()["text/html"]


def test_coverage_view_under_an_active_file_profile(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("ops:\n  - aten::add.Tensor\n")
    with openreg_lab.use_profile(str(path)):
        view = CoverageView()
    assert view.picker.value == "mine.yaml"
    _same_coverage(view, str(path))


def test_coverage_view_takes_a_list_profile_and_versus():
    view = CoverageView(profile=ADD_ONLY, versus="default")
    assert view.picker.value == "custom" and view.versus.value == "default"
    assert _resolution(view, "aten::add.Tensor") == "native"
    n = len(lacks(families(coverage(profile=ADD_ONLY)), families(coverage(profile="default"))))
    assert n > 100  # every hand-written kernel but add.Tensor's
    assert f"<b>{n} overloads are native under default but not under custom</b>" in view.lacks_html.value


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"versus": "bogus"}, ValueError, "unknown profile 'bogus': choose one of minimal, default"),
        ({"profile": "bogus"}, ValueError, "unknown profile 'bogus': choose one of minimal, default"),
        ({"profile": ["aten::no_such_op"]}, ValueError, "aten::no_such_op"),
        ({"profile": 42}, TypeError, "a profile cannot be int"),
        ({"versus": b"mps"}, TypeError, "a profile cannot be bytes"),
    ],
)
def test_bad_profiles_get_the_profiles_own_errors(kwargs, error, message):
    with pytest.raises(error) as e:
        CoverageView(**kwargs)
    assert message in str(e.value)
    with pytest.raises(error) as direct:
        openreg_lab.coverage(profile=next(iter(kwargs.values())))
    assert str(direct.value) == str(e.value)


def test_dispatch_explorer_takes_an_operator_packet():
    view = DispatchExplorer(torch.ops.aten.add)
    assert view.op == "aten::add.Tensor"
    a = torch.ones(2, device="openreg")
    # With inputs, the packet's overload is the one the arguments pick, as in explain().
    with_args = DispatchExplorer(torch.ops.aten.add, a, a)
    assert with_args.explanation.op == openreg_lab.explain(torch.ops.aten.add, a, a).op
    assert DispatchExplorer(torch.ops.aten.relu).op == "aten::relu.default"


@pytest.mark.parametrize("name", ["x \ud800", "\udcff tail", "a\ud83d\ude00b", "nul \x00 inside"])
def test_a_mark_of_any_string_is_recorded(name):
    with openreg_lab.trace() as t:
        openreg_lab.mark(name)
    marks = t.events[t.events["kind"] == "mark"]["name"].tolist()
    assert marks == [name]  # kept as it is (Note [Strings the recorder keeps])
    assert visible(name).encode("utf-8").decode("utf-8") == visible(name)  # a page holds what it shows


def test_a_profile_file_whose_name_is_not_utf8_is_named_with_a_replacement(tmp_path):
    path = tmp_path / "b\udcffd.yaml"  # the bytes b"b\xffd.yaml" on disk
    path.write_text("- aten::add.Tensor\n")
    with openreg_lab.trace() as t, openreg_lab.use_profile(str(path)):
        assert openreg_lab.get_profile() == "b\ufffdd.yaml"
    assert "profile: b\ufffdd.yaml" in t.events["name"].tolist()
