"""Training steps: optimizer steps and openreg_lab.step() end them, Trace.steps() gives one row a
step, trace(steps=...) records only the chosen ones and says what it skipped."""

from __future__ import annotations

import re

import pytest
import torch

import openreg_lab
from openreg_lab.recording import steps as steps_mod


def _train(model, opt, x, n):
    for _ in range(n):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).openreg()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 8, device="openreg")
    return model, opt, x


def test_optimizer_steps_end_steps_without_changes_to_the_script(setup):
    model, opt, x = setup
    with openreg_lab.trace() as t:
        _train(model, opt, x, 3)
    ev = t.events
    marks = ev[ev["kind"] == "step"]
    assert marks["seq"].tolist() == [0, 1, 2]
    table = t.steps()
    assert list(table.columns) == steps_mod.STEP_COLUMNS
    assert table["step"].tolist() == [0, 1, 2]
    assert table["complete"].tolist() == [True, True, True]
    # Each op falls in exactly one step, and steps tile the trace from its start.
    assert int(table["ops"].sum()) == int((ev["kind"] == "op").sum())
    assert table["start_ns"].iloc[0] == 0
    ends = (table["start_ns"] + table["dur_ns"]).tolist()
    assert table["start_ns"].tolist()[1:] == ends[:-1] and ends == marks["start_ns"].tolist()
    # The same loop three times: the same op calls each step.
    assert len(set(table["ops"])) == 1
    assert table["peak_bytes"].min() > 0


def test_steps_are_instants_in_the_chrome_trace(setup, tmp_path):
    import json

    model, opt, x = setup
    with openreg_lab.trace() as t:
        _train(model, opt, x, 2)
    t.export_chrome_trace(tmp_path / "s.json")
    events = json.loads((tmp_path / "s.json").read_text())["traceEvents"]
    ends = [e for e in events if e["name"].startswith("end of step")]
    assert [(e["name"], e["ph"]) for e in ends] == [("end of step 0", "i"), ("end of step 1", "i")]


def test_step_by_hand_and_work_after_the_last_step(setup):
    _, _, x = setup
    with openreg_lab.trace() as t:
        for i in range(2):
            x + x
            if i == 0:
                torch.logcumsumexp(x, 0)  # falls back: 1 fallback, 2 copies
            openreg_lab.step()
        x * 2  # after the last step: an incomplete row
    table = t.steps()
    assert table["step"].tolist() == [0, 1, 2]
    assert table["complete"].tolist() == [True, True, False]
    assert table["fallbacks"].tolist() == [1, 0, 0]
    assert table["copies"].tolist() == [2, 0, 0]
    assert table["bytes_copied"].tolist() == [2 * 2 * 8 * 4, 0, 0]
    s = steps_mod.steady_state(table)
    assert s is not None and s["first"]["step"] == 0 and s["steady"] == 1
    assert s["median_ns"] == int(table["dur_ns"].iloc[1])


def test_a_trace_without_steps_has_an_empty_step_table():
    x = torch.ones(3, device="openreg")
    with openreg_lab.trace() as t:
        x + x
    assert t.steps().empty and list(t.steps().columns) == steps_mod.STEP_COLUMNS
    assert t.skipped is None


def test_trace_steps_records_only_the_chosen_steps(setup, tmp_path):
    model, opt, x = setup
    with openreg_lab.trace(steps="2:3") as t:
        _train(model, opt, x, 6)
    table = t.steps()
    assert table["step"].tolist() == [2, 3] and table["complete"].all()
    assert t.skipped.startswith(
        "recorded steps 2 to 3 of the 6 the block ran; not recorded: steps 0 to 1 before ("
    )
    assert "and steps 4 to 5 after (" in t.skipped
    # Inside the chosen steps, the same events as a full trace of the same loop records.
    with openreg_lab.trace() as full:
        _train(model, opt, x, 6)
    ft = full.steps()
    assert ft.loc[ft["step"].isin([2, 3]), "ops"].tolist() == table["ops"].tolist()
    assert ft.loc[ft["step"].isin([2, 3]), "bytes_copied"].tolist() == table["bytes_copied"].tolist()
    # The file keeps the step numbers and what was skipped.
    t.save(tmp_path / "s.trace")
    back = openreg_lab.load_trace(tmp_path / "s.trace")
    assert back.steps()["step"].tolist() == [2, 3] and back.skipped == t.skipped


def test_trace_steps_from_zero_and_a_block_that_ends_early(setup):
    model, opt, x = setup
    with openreg_lab.trace(steps=range(0, 2)) as t:
        _train(model, opt, x, 1)
    assert t.steps()["step"].tolist() == [0]
    assert t.skipped == (
        "recorded step 0 of the 1 the block ran; the block ended during step 1, before the chosen steps "
        "did; not recorded: nothing"
    )
    with openreg_lab.trace(steps="1") as one:
        _train(model, opt, x, 3)
    assert one.steps()["step"].tolist() == [1]
    assert re.fullmatch(
        r"recorded step 1 of the 3 the block ran; not recorded: step 0 before \([\d.,]+ ms\), and step 2 "
        r"after \([\d.,]+ ms\)",
        one.skipped,
    )
    with pytest.warns(UserWarning, match=r"recorded nothing: the block ended after 1 steps, before step 4"):
        with openreg_lab.trace(steps="4:5") as t2:
            _train(model, opt, x, 1)
    assert len(t2) == 0 and t2.steps().empty and t2.summary().empty


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("5-8", ValueError),
        ("8:5", ValueError),
        (range(0, 10, 2), ValueError),
        ("-1", ValueError),
        (5, TypeError),
    ],
)
def test_bad_steps_are_refused_naming_the_forms(bad, error):
    with pytest.raises(error, match=r"steps='5:8' \(steps 5 to 8, both included\)"):
        openreg_lab.trace(steps=bad)
