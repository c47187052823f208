"""``Trace.memory()``: every table agrees exactly with the allocator's own statistics (what was live
at the peak, at each step's start, peak and end, at any moment), the timeline's level of detail
keeps the peak, leaks are named with their line, per-rank peaks, files keep the observations, and a
trace that dropped events says its tables are incomplete."""

from __future__ import annotations

import gc
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import openreg_lab
from openreg_lab.examples.models import mlp
from openreg_lab.recording import _live_many, distributed, memory_ranks
from openreg_lab.recording.memory import live_at


def _line(text: str) -> str:
    """``test_memory_tables.py:N``: the line of this file holding ``text``."""
    with open(__file__) as f:
        return (
            f"test_memory_tables.py:{next(i for i, x in enumerate(f, 1) if text in x and '_line(' not in x)}"
        )


MODEL_LINE = _line("loss = F.nll_loss(model(x), y)")
KEEP_LINE = _line("keep.append(loss.detach() * 1)")


def _block(nbytes: int) -> int:
    return -(-nbytes // 512) * 512


@pytest.fixture
def no_gc():
    """The cyclic collector freeing a tensor between a step's end and the test's reading of the
    allocator would put a free where neither expects it."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def _training(steps: int = 3, keep: list[torch.Tensor] | None = None):
    """A traced AdamW loop over the example MLP, with the allocator's statistics read at each step:
    (trace, allocated at its start, per step (allocated at its end, its peak), the peak overall)."""
    torch.manual_seed(0)
    model = mlp().to("openreg")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.openreg.reset_peak_memory_stats()
    start = torch.openreg.memory_allocated()
    per_step = []
    with openreg_lab.trace(stack=True) as t:
        for _ in range(steps):
            torch.openreg.reset_peak_memory_stats()
            x = torch.randn(32, 64).to("openreg")  # made by H2D copies: inputs
            y = torch.randint(0, 10, (32,)).to("openreg")
            loss = F.nll_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if keep is not None:
                keep.append(loss.detach() * 1)  # a device tensor kept each step: a leak
            per_step.append((torch.openreg.memory_allocated(), torch.openreg.max_memory_allocated()))
            del x, y, loss
    overall = max(p for _, p in per_step)
    return t, start, per_step, overall, model, opt


def test_the_peak_and_every_step_agree_with_the_allocator(no_gc):
    t, start, per_step, overall, _, opt = _training()
    m = t.memory()
    assert m.complete and m.problems == []
    peaks = m.peaks().set_index("device").loc[["openreg:0"]]  # (another device may free a leftover)
    assert int(peaks["peak_bytes"].iloc[0]) == overall
    assert int(peaks["start_bytes"].iloc[0]) == start
    assert int(peaks["end_bytes"].iloc[0]) == torch.openreg.memory_allocated()
    peak = m.peak("openreg:0")
    assert int(peak["block_bytes"].sum()) == overall
    assert peak.attrs["complete"] is True
    by = peak.groupby("category")["block_bytes"].sum()
    assert all(int(peaks[c].iloc[0]) == int(by.get(c, 0)) for c in by.index)
    steps = m.steps().query("device == 'openreg:0'").reset_index(drop=True)
    # The frees after the last optimizer.step() (del x, y, loss) make one more, incomplete, row.
    assert steps["step"].tolist() == [0, 1, 2, 3] and steps["complete"].tolist() == [True] * 3 + [False]
    last = steps.iloc[3]
    assert (last["start_bytes"], last["end_bytes"]) == (per_step[-1][0], torch.openreg.memory_allocated())
    steps = steps.iloc[:3]
    assert steps["start_bytes"].tolist() == [start] + [e for e, _ in per_step[:-1]]
    assert steps["end_bytes"].tolist() == [e for e, _ in per_step]
    assert steps["peak_bytes"].tolist() == [p for _, p in per_step]
    assert (steps["growth_bytes"] == steps["end_bytes"] - steps["start_bytes"]).all()
    # Each step's peak splits into categories that add up to it, and its boundaries are Trace.steps()'.
    cats = steps[list(openreg_lab.recording.observations.CATEGORIES)].sum(axis=1)
    assert cats.tolist() == steps["peak_bytes"].tolist()
    assert steps["start_ns"].tolist() == t.steps()["start_ns"].tolist()[:3]
    # Step 0 made the optimizer state (AdamW: two tensors a parameter); the later steps grew nothing.
    tensors = [v for s in opt.state.values() for v in s.values() if v.device.type == "openreg"]
    state = sum(_block(v.untyped_storage().nbytes()) for v in tensors)
    assert int(steps["optimizer_state"].iloc[1]) == state
    assert steps["growth_bytes"].tolist()[1:] == [0, 0]


def test_what_is_live_at_any_moment_is_the_allocators_count(no_gc):
    t, start, _, overall, _, _ = _training(steps=2)
    m = t.memory()
    alloc = m.allocations()
    ev = t.events
    mem = ev[ev["kind"].isin(("alloc", "free")) & (ev["device"] == "openreg:0")]
    # One row an allocation of the trace, and one per block allocated when it began.
    assert ((alloc["id"] >= 0) & (alloc["device"] == "openreg:0")).sum() == (mem["kind"] == "alloc").sum()
    assert int(alloc.loc[(alloc["id"] < 0) & (alloc["device"] == "openreg:0"), "block_bytes"].sum()) == start
    made = alloc[alloc["id"] >= 0]
    assert made["block_bytes"].tolist() == [_block(b) for b in made["bytes"]]
    for e in mem.sample(n=min(40, len(mem)), random_state=0).itertuples():
        # live_at(t) sees every event up to t: compare after the last event at that time.
        same_time = mem[mem["start_ns"] == e.start_ns]
        live = live_at(t, int(e.start_ns), "openreg:0")
        assert int(live["block_bytes"].sum()) == int(same_time["total"].iloc[-1])
    assert int(m.live(10**15)["block_bytes"].sum()) == torch.openreg.memory_allocated()
    # The timeline: its moments sum to the allocator's count after each event, from the start.
    tl = m.timeline().query("device == 'openreg:0'")
    k = tl["category"].nunique()  # a row per moment and category the device held
    sums = tl["bytes"].to_numpy().reshape(-1, k).sum(axis=1)
    assert sums.tolist() == [start, *mem["total"].tolist()]
    assert tl["t_ns"].to_numpy()[::k].tolist() == [0, *mem["start_ns"].tolist()]
    coarse = m.timeline(buckets=8).query("device == 'openreg:0'")
    coarse_sums = coarse["bytes"].to_numpy().reshape(-1, k).sum(axis=1)
    assert len(coarse_sums) <= 9 and int(coarse_sums.max()) == overall and coarse_sums[0] == start
    # However few moments are kept, each has a row per category the device ever held (a category
    # live only between kept moments was once a missing row, and this reshape failed).
    for buckets in (1, 2, 3):
        few = m.timeline(buckets=buckets).query("device == 'openreg:0'")
        held = tl["category"].astype(str).unique().tolist()
        assert few["category"].astype(str).unique().tolist() == held
        assert len(few) % k == 0 and len(few) // k <= buckets + 1
        assert int(few["bytes"].to_numpy().reshape(-1, k).sum(axis=1).max()) == overall
    with pytest.raises(ValueError, match="takes a positive number of moments"):
        m.timeline(buckets=0)
    with pytest.raises(ValueError, match="no memory event on openreg:1"):
        m.peak("openreg:1")


def test_allocations_name_their_op_module_line_and_category():
    t, *_ = _training(steps=1)
    alloc = t.memory().allocations()
    made = alloc[alloc["id"] >= 0]
    # The first Linear's output: made by addmm (not by the aten::empty inside it) in Sequential.0.
    first = made[made["module"] == "Sequential.0"].iloc[0]
    assert first["op"] == "aten::addmm" and first["category"] == "activation"
    assert first["source"].endswith(MODEL_LINE)
    # Gradients are made in backward: named after the forward op autograd runs backward.
    grads = made[made["category"] == "gradient"]
    assert len(grads) == 6 and set(grads["module"]) == {"Sequential.0", "Sequential.2", "Sequential.4"}
    assert grads["source"].str.endswith(MODEL_LINE).all()
    inputs = made[made["category"] == "input"]
    assert sorted(inputs["bytes"].tolist()) == [32 * 8, 32 * 64 * 4]
    assert (inputs["op"] == "aten::_to_copy").all() and inputs["module"].isna().all()
    assert (made["step"] == 0).all() and (alloc.loc[alloc["id"] < 0, "step"] == -1).all()


def test_a_tensor_kept_each_step_is_a_leak_named_with_its_line():
    kept: list[torch.Tensor] = []
    t, *_ = _training(steps=3, keep=kept)
    leaks = t.memory().leaks()
    assert len(leaks) == 1
    leak = leaks.iloc[0]
    assert leak["source"].endswith(KEEP_LINE) and leak["op"] == "aten::mul.Tensor"
    # Made after each optimizer.step(): in the step after it (the last one after the last step event).
    assert (leak["steps"], leak["first_step"], leak["last_step"], leak["allocations"]) == (3, 1, 3, 3)
    assert int(leak["bytes"]) == 3 * 512
    t2, *_ = _training(steps=3)
    assert t2.memory().leaks().empty


def test_a_trace_that_dropped_events_marks_its_memory_tables_incomplete():
    x = torch.randn(64, device="openreg")
    with pytest.warns(openreg_lab.TraceDroppedEventsWarning):
        with openreg_lab.trace(capacity=30) as t:
            for _ in range(20):
                y = x * 2
                del y
    m = t.memory()
    assert not m.complete and t.dropped > 0
    assert m.problems[0].startswith(f"{t.dropped:,} events were dropped (the trace holds at most 30)")
    for table in (m.allocations(), m.peak(), m.timeline(), m.steps(), m.leaks(), m.sites(), m.peaks()):
        assert table.attrs["complete"] is False and table.attrs["problems"] == m.problems


def test_inputs_passed_by_keyword_and_parameters_seen_before_the_trace():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, *, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    net = Net().to("openreg")
    x = torch.randn(4, 8, device="openreg")  # made before the trace: observed, not inferred
    with torch.no_grad(), openreg_lab.trace(stack=True) as t:  # module hooks see the call
        out = net(x=x)
    alloc = t.memory().allocations()
    before = alloc[alloc["id"] < 0].set_index("address")["category"]
    assert before[x.untyped_storage().data_ptr()] == "input"
    assert all(before[p.untyped_storage().data_ptr()] == "parameter" for p in net.parameters())
    assert alloc.loc[alloc["id"] >= 0, "category"].tolist() == ["unknown"]  # out: held, never freed
    del out
    with torch.no_grad(), openreg_lab.trace() as plain:  # no module hooks: the model is not seen
        out = net(x=x)
    alloc = plain.memory().allocations()
    assert set(alloc.loc[alloc["id"] < 0, "category"]) == {"unknown"}
    del out


def test_files_keep_the_observations_and_older_files_still_add_up(tmp_path, no_gc):
    t, start, _, overall, _, _ = _training(steps=2)
    t.save(tmp_path / "a.trace")
    back = openreg_lab.load_trace(tmp_path / "a.trace")
    for name in ("allocations", "peak", "timeline", "steps", "sites", "leaks", "peaks"):
        pd.testing.assert_frame_equal(getattr(t.memory(), name)(), getattr(back.memory(), name)())
    # A file without them (as from before they were saved): one allocation of the bytes held at the
    # start, and the peak still the allocator's.
    t._observed = None
    t.save(tmp_path / "old.trace")
    old = openreg_lab.load_trace(tmp_path / "old.trace").memory()
    assert old.unobserved and old.complete
    assert int(old.peak()["block_bytes"].sum()) == overall
    unexplained = old.allocations().set_index("address").loc[-1]
    assert (unexplained["id"], unexplained["block_bytes"], unexplained["category"]) == (-1, start, "unknown")


def _rewrite(src, dst, drop: tuple[str, ...] = (), **arrays: np.ndarray) -> None:
    with np.load(src) as data:
        out = {k: data[k] for k in data.files if not k.startswith(drop or ("\0",))}
    out.update(arrays)
    with open(dst, "wb") as f:
        np.savez(f, **out)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("o_category", lambda v: np.full_like(v, 9), "its memory column o_category holds 9, outside 0 to 7"),
        ("b_device", lambda v: np.full_like(v, 16), "its memory column b_device holds 16, outside 0 to 15"),
        ("b_allocated", lambda v: np.full_like(v, 2), "its memory column b_allocated holds 2"),
        ("o_time", lambda v: v[:-1], r"its memory columns o_\* disagree in length"),
        ("o_address", lambda v: v.astype(np.float64), "its memory column o_address holds float64 values"),
    ],
)
def test_damaged_memory_columns_are_refused_naming_the_column(tmp_path, column, value, message):
    t, *_ = _training(steps=1)
    good = tmp_path / "good.trace"
    t.save(good)
    with np.load(good) as data:
        original = data[column]
    _rewrite(good, tmp_path / "bad.trace", **{column: value(original)})
    with pytest.raises(ValueError, match=f"damaged openreg-lab trace: {message}"):
        openreg_lab.load_trace(tmp_path / "bad.trace")


def test_a_memory_header_naming_an_unknown_category_is_refused(tmp_path):
    import json

    t, *_ = _training(steps=1)
    good = tmp_path / "good.trace"
    t.save(good)
    with zipfile.ZipFile(good) as z, z.open("header.npy") as f:
        header = json.loads(bytes(np.load(f)).decode("utf-8", "surrogatepass"))  # Note [Header text]
    header["memory"]["categories"][0] = "<b>weights</b>"
    raw = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    _rewrite(good, tmp_path / "bad.trace", header=raw)
    with pytest.raises(ValueError, match="its header's memory categories name '<b>weights</b>', not one of"):
        openreg_lab.load_trace(tmp_path / "bad.trace")


def test_each_ranks_peak_side_by_side(no_gc):
    traces, peaks = [], []
    for rank in (1, 0):  # recorded out of order: rows follow the rank each trace recorded
        t, _, _, overall, _, _ = _training(steps=1)
        t.job = distributed.Job("run-a", rank, 2)
        traces.append(t)
        peaks.append(overall)
    table = memory_ranks.peaks_by_rank(traces)
    assert table["rank"].tolist() == [0, 1]
    assert table["peak_bytes"].tolist() == [peaks[1], peaks[0]]
    assert table["complete"].all()
    first = min(t._t0 for t in traces)
    assert (
        table["t_ns"].tolist()[1] == int(traces[0].memory().peaks()["t_ns"].iloc[0]) + traces[0]._t0 - first
    )
    live = memory_ranks.peak_by_rank(traces)
    assert live.groupby("rank")["block_bytes"].sum().tolist() == [peaks[1], peaks[0]]
    with pytest.raises(ValueError, match="needs at least one trace"):
        memory_ranks.peaks_by_rank([])


def test_a_version_1_file_says_its_allocations_cannot_be_paired(tmp_path):
    import json

    t, *_ = _training(steps=1)
    t.save(tmp_path / "v2.trace")
    with np.load(tmp_path / "v2.trace") as data:
        kind, dispatch = data["f_kind"], data["f_dispatch"].copy()
        header = json.loads(bytes(data["header"]).decode("utf-8", "surrogatepass"))  # Note [Header text]
    memory = np.isin(kind, [5, 6, 13, 14])  # before version 2 a memory event named no block
    dispatch[memory] = 0
    header["version"] = 1
    del header["memory"]
    _rewrite(
        tmp_path / "v2.trace",
        tmp_path / "v1.trace",
        ("o_", "b_"),  # nor the memory observations
        f_dispatch=dispatch,
        f_reserved=np.zeros_like(dispatch),
        header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
    )
    m = openreg_lab.load_trace(tmp_path / "v1.trace").memory()
    assert not m.complete
    assert m.problems[0].startswith(
        "its allocations and frees name no block (a trace file of format version 1"
    )


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with object cells and None for a missing string (pandas infers string columns by content)."""
    return df.astype(object).where(df.notna(), None).reset_index(drop=True)


def test_live_at_many_moments_and_the_step_ends(no_gc, monkeypatch):
    t, *_ = _training(steps=2)
    m = t.memory()
    moments = sorted(set(m.timeline(buckets=30)["t_ns"].tolist())) + [10**15]
    rows, totals = m.live_many(moments, "openreg:0", top=4)
    assert totals["moment"].tolist() == list(range(len(moments)))
    for i, when in enumerate(moments):
        live = m.live(when, "openreg:0")
        mine = rows[rows["moment"] == i].drop(columns="moment")
        assert _plain(mine).equals(_plain(live.head(4))), when
        assert (int(totals["allocations"].iat[i]), int(totals["bytes"].iat[i])) == (
            len(live),
            int(live["block_bytes"].sum()),
        )
        assert (live["step"] + live["age_steps"] == totals["step"].iat[i]).all()  # the moment's step
    assert int(totals["bytes"].iat[-1]) == torch.openreg.memory_allocated()
    # The moments taken in groups of a few pairs each (a trace with many allocations live at once).
    monkeypatch.setattr(_live_many, "PAIRS", 7)
    shuffled = moments[::-1]
    again, _ = m.live_many(shuffled, "openreg:0", top=4)
    again["moment"] = len(moments) - 1 - again["moment"]
    again = again.sort_values("moment", kind="stable")
    assert _plain(again).equals(_plain(rows))
    assert len(m.live_many([0], 0, top=0)[0]) == 0
    # Each step's end, as steps() says it without its peaks (the memory view's boundaries).
    steps, ends = m.steps(), m.step_ends()
    done = steps[steps["complete"]]
    assert ends["step"].tolist() == done["step"].tolist()
    assert ends["end_ns"].tolist() == done["end_ns"].tolist()
    with pytest.raises(ValueError, match="takes a number of rows"):
        m.live_many([0], 0, top=-1)
    with pytest.raises(ValueError, match="no memory event on openreg:3"):
        m.live_many([0], "openreg:3")


def test_a_trace_that_only_frees_memory_has_a_timeline():
    x = torch.ones(64, device="openreg")
    before = torch.openreg.memory_allocated()
    with openreg_lab.trace() as t:
        del x  # freed in the trace, allocated before it: no allocation of its category in the trace
    tl = t.memory().timeline().query("device == 'openreg:0'")
    k = tl["category"].nunique()
    assert tl["bytes"].to_numpy().reshape(-1, k).sum(axis=1).tolist() == [before, before - 512]
