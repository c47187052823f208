"""The wall-time accounting's fast path (Note [Accounting a window of a big trace]) gives exactly what
the plain painting of every event gives (tests/support/accounting_reference.py), and the kinds read
once (Note [Kinds read once]) are the kinds of the table. Speed is benchmarks/bench_views.py's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from openreg_lab.recording import accounting, analysis, breakdown, flow, host, host_fold, sampler, steps
from openreg_lab.recording.kinds import Kinds, unique_keys
from openreg_lab.recording.lod import Pyramid
from openreg_lab.recording.verdict import verdict
from tests.support.accounting_reference import account_reference
from tests.support.views_data import tile, tile_span, training_trace


@pytest.fixture(scope="module")
def big():
    """Three copies of a traced training step, sampled evenly on its own stacks (``even_samples``),
    plus the kinds a training step of the example lacks: a compilation, a collective and its wait,
    an op still running."""
    # Sample at the fastest rate, whatever ran before and however busy the process: the budget
    # (Note [The sampler's budget]) lengthened the interval of this short trace to two samples in CI.
    carried, adapt = list(sampler._carried), sampler.Sampler._adapt
    sampler._carried[:] = [sampler.INTERVAL_NS, 0]
    sampler.Sampler._adapt = lambda self, interval, window: (interval, window)  # type: ignore[method-assign]
    try:
        t = training_trace(samples=3)
    finally:
        sampler._carried[:] = carried
        sampler.Sampler._adapt = adapt  # type: ignore[method-assign]
    base, samples = t.events, t.host_samples
    assert samples is not None and len(samples) > 2
    span = tile_span(base)
    ev = tile(base, 3)
    extra = ev.iloc[[0, 1, 2, 3]].copy()
    extra["id"] = np.arange(len(ev), len(ev) + 4)
    extra["parent"] = -1
    extra["kind"] = ["compile", "collective", "collective", "op"]
    extra["name"] = ["compile forward", "wait all_reduce", "all_reduce", "aten::still_running"]
    extra["start_ns"] = [span // 3, span + span // 4, span + span // 2, 2 * span + span // 2]
    extra["dur_ns"] = [span // 5, span // 3, span // 4, -1]
    ev = pd.concat([ev, extra], ignore_index=True).sort_values("start_ns", kind="stable", ignore_index=True)
    threads = t._thread_index()
    return ev, even_samples(samples, ev, threads, t._t0, 3 * span), t._t0, threads, span


def even_samples(
    s: host.Samples, ev: pd.DataFrame, threads: dict[int, int], t0: int, span: int
) -> host.Samples:
    """The step thread's samples every 0.4 ms over ``span`` on the trace's own stack nodes, a third
    of them waiting (off the CPU) and the rest running: every part of the painting is reached
    whatever the machine's load did to the real samples' rate."""
    os_of = {i: os_id for os_id, i in threads.items()}
    tid = os_of[int(ev.loc[ev["kind"] == "step", "thread"].iloc[-1])]
    times = np.arange(0, span, 400_000, dtype=np.int64)
    k = np.arange(len(times))
    ran = np.where(k % 3 == 0, 0, 400_000)  # ns on a CPU in the interval before each sample
    nodes = np.unique(s.node[s.node >= 0])
    return replace(
        s,
        time=times + t0,
        thread=np.full(len(times), tid, dtype=np.int64),
        node=nodes[k % len(nodes)],
        cpu=np.cumsum(ran),
        queue=np.zeros(len(times), dtype=np.int64),
    )


def windows(ev: pd.DataFrame, span: int) -> list[tuple[int, int]]:
    table = steps.table(ev)
    out = [(int(a), int(a + d)) for a, d in zip(table["start_ns"], table["dur_ns"], strict=True)]
    out.append((0, 3 * span))
    rng = np.random.default_rng(0)
    for _ in range(12):  # windows that cut events, samples and the extra kinds anywhere
        a, b = sorted(int(x) for x in rng.integers(0, 3 * span, size=2))
        out.append((a, b + 1))
    return out


def test_the_fast_path_equals_the_plain_painting(big):
    ev, samples, t0, threads, span = big
    kinds = Kinds(ev["kind"])
    parts_seen = set()
    for a, b in windows(ev, span):
        for s in (samples, None):
            want = account_reference(ev, s, t0, threads, a, b, "w", s is not None)
            got = accounting.account(ev, s, t0, threads, a, b, "w", s is not None)
            shared = accounting.account(ev, s, t0, threads, a, b, "w", s is not None, kinds=kinds)
            assert got == want == shared, (a, b)
            assert sum(got.parts.values()) == b - a
            parts_seen |= {p for p, ns in got.parts.items() if ns}
    # The windows reach every part, so each layer of the painting was compared.
    assert parts_seen == set(accounting.PARTS)


def test_the_verdict_accounts_its_steps_as_the_plain_painting(big):
    ev, samples, t0, threads, _ = big
    v = verdict(ev, samples=samples, t0=t0, host_sampling=True, thread_index=threads)
    table = steps.table(ev)
    first = table.iloc[0]
    a = int(first["start_ns"])
    b = a + int(first["dur_ns"])
    want = account_reference(ev, samples, t0, threads, a, b, "step 0", True)
    # The same painting; host Python named in the user's terms (Note [Folding host frames]).
    assert (v.time[0].parts, v.time[0].ops) == (want.parts, want.ops)
    folded = host_fold.fold(samples)
    assert v.time[0] == accounting.account(ev, samples, t0, threads, a, b, "step 0", True, folded=folded)
    assert v.time[0].python and v.time[0].waiting  # the samples named host Python and a wait


def test_kinds_are_the_tables_kinds(big):
    ev = big[0]
    kinds = Kinds(ev["kind"])
    for k in [*ev["kind"].unique(), "no such kind"]:
        assert (kinds.mask(k) == (ev["kind"] == k).to_numpy()).all()
    assert (kinds.mask("op", "copy") == ev["kind"].isin(["op", "copy"]).to_numpy()).all()
    assert kinds.any("compile") and not kinds.any("no such kind")
    assert (steps.table(ev, kinds=kinds) == steps.table(ev)).all().all()
    pd.testing.assert_frame_equal(analysis.fallbacks(ev, kinds=kinds), analysis.fallbacks(ev))
    pd.testing.assert_frame_equal(analysis.summary(ev, kinds=kinds), analysis.summary(ev))
    pd.testing.assert_frame_equal(flow.dispatch_flows(ev, kinds=kinds), flow.dispatch_flows(ev))
    with pytest.raises(ValueError, match=r"table of 3 events, not of this one .*Kinds\(events\['kind'\]\)"):
        breakdown.fallback_costs(ev, kinds=Kinds(ev["kind"].iloc[:3]))


def test_the_string_columns_read_once_are_the_tables(big):
    ev = big[0]
    kinds = Kinds(ev["kind"])
    is_op = kinds.mask("op")
    for col in ("name", "kernel", "dispatch", "device", "source"):
        values = ev[col].to_numpy()
        codes, labels = kinds.strings(ev, col)
        assert kinds.strings(ev, col)[0] is codes  # hashed once, then kept
        got = labels[codes]
        assert ((got == values) | (pd.isna(got) & pd.isna(values))).all(), col
        assert not pd.isna(labels[:-1]).any()  # a missing value is the last label, if any
        for rows in (is_op, np.flatnonzero(~is_op)):
            sub, sub_labels = kinds.strings(ev, col, rows)
            want, want_labels = pd.factorize(values[rows], use_na_sentinel=False)
            assert (sub == want).all(), col
            assert [None if pd.isna(x) else x for x in sub_labels] == [
                None if pd.isna(x) else x for x in want_labels
            ], col
    assert kinds.counts() == ev["kind"].value_counts().to_dict()
    assert list(kinds.counts().values()) == sorted(kinds.counts().values(), reverse=True)
    assert kinds.labels() == list(ev["kind"].unique())
    with pytest.raises(ValueError, match="table of 3 events, not of this one"):
        Kinds(ev["kind"].iloc[:3]).strings(ev, "name")


def test_unique_keys_is_numpys_unique():
    rng = np.random.default_rng(0)
    dense, sparse = rng.integers(0, 300, 5000), rng.integers(0, 10**12, 100)
    for key in (dense, sparse, np.array([7, 7, 0]), np.zeros(0, int)):
        got = unique_keys(key, counts=True)
        want = np.unique(key, return_inverse=True, return_counts=True)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


def _count_hashings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the length of each column pd.factorize hashes, in order."""
    factorize, hashed = pd.factorize, []

    def counting(values, *args, **kwargs):
        hashed.append(len(values))
        return factorize(values, *args, **kwargs)

    monkeypatch.setattr(pd, "factorize", counting)
    return hashed


def test_the_dashboards_tables_hash_each_string_column_once(big, monkeypatch):
    """The timeline's pyramid, the op table, the dispatch flows, the fallbacks and the verdict read
    one Kinds (as Dashboard does): the kinds and the four string columns they group by are hashed
    once each, ten hashings of big columns before (Note [Kinds read once])."""
    ev = big[0]
    factorize = pd.factorize
    hashed = _count_hashings(monkeypatch)
    kinds = Kinds(ev["kind"])
    want_ops = analysis.summary(ev, kinds=kinds)
    Pyramid(ev, kinds=kinds)
    flow.dispatch_flows(ev, kinds=kinds)
    fb = breakdown.fallback_costs(ev, kinds=kinds)
    verdict(ev, kinds=kinds, fallbacks=fb)
    big_ones = [n for n in hashed if n > len(ev) // 2]
    assert big_ones == [len(ev)] * 5  # kind, name, device, kernel, dispatch
    monkeypatch.setattr(pd, "factorize", factorize)
    pd.testing.assert_frame_equal(want_ops, analysis.summary(ev))
    assert verdict(ev, kinds=kinds, fallbacks=fb) == verdict(ev)


def test_kinds_extended_to_the_host_slices_are_the_drawn_tables(big, monkeypatch):
    """The timeline draws the events and then the host slices (host.with_events): the kinds of that
    table extended from the events' hash only the host rows, and are the kinds and string codes
    of the whole table (Note [Kinds read once]): the pyramid drawn from them is the same."""
    ev, samples, t0, threads, _ = big
    drawn = host.with_events(ev, host.slices(host_fold.fold(samples).samples, t0, threads))
    assert len(drawn) > len(ev) and (drawn["kind"].to_numpy()[len(ev) :] == "host").all()
    factorize = pd.factorize
    hashed = _count_hashings(monkeypatch)
    kinds = Kinds(ev["kind"])
    ext = kinds.extended(ev, drawn)
    got = Pyramid(drawn, kinds=ext)
    analysis.summary(ev, kinds=kinds)
    flow.dispatch_flows(ev, kinds=kinds)
    assert [n for n in hashed if n > len(ev) // 2] == [len(ev)] * 5  # kind, name, kernel, device, dispatch
    monkeypatch.setattr(pd, "factorize", factorize)
    whole = Kinds(drawn["kind"])
    assert np.array_equal(ext.codes, whole.codes) and ext.labels() == whole.labels()
    for col in ("name", "kernel", "dispatch", "device", "source"):
        assert_same_strings(ext.strings(drawn, col), whole.strings(drawn, col), col)
    want = Pyramid(drawn)
    assert [(r.lane, r.depth) for r in got.rows] == [(r.lane, r.depth) for r in want.rows]
    assert np.array_equal(got.color, want.color) and len(got.levels) == len(want.levels)
    for a, b in zip(got.levels, want.levels, strict=True):
        assert all(
            np.array_equal(getattr(a, f), getattr(b, f)) for f in ("start", "dur", "row", "event", "count")
        )
    # A missing value in the events only, in the new rows only, or both; new labels; no new rows.
    head = pd.DataFrame({"kind": ["op", "op", "copy"], "name": ["a", None, "b"]})
    for names, tail in (
        (["a", None, "b"], ["c", "a"]),
        (["a", "b", "a"], [None, "c"]),
        (["a", "b", "a"], []),
    ):
        head["name"] = names
        table = pd.concat(
            [head, pd.DataFrame({"kind": ["host"] * len(tail), "name": tail})], ignore_index=True
        )
        table["name"] = table["name"].astype(object)
        k = Kinds(head["kind"])
        k.strings(head, "name")
        assert_same_strings(
            k.extended(head, table).strings(table, "name"), Kinds(table["kind"]).strings(table, "name"), tail
        )
    with pytest.raises(ValueError, match="does not begin with these 3 events"):
        k.extended(head, head.iloc[:2])


def assert_same_strings(
    got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray], what: object
) -> None:
    assert np.array_equal(got[0], want[0]), what
    assert [None if pd.isna(x) else x for x in got[1]] == [None if pd.isna(x) else x for x in want[1]], what
    assert pd.isna(got[1][-1]) == pd.isna(want[1][-1]) if len(want[1]) else not len(got[1]), what
