"""Every allocation of a trace, paired with its free, explained and given a category.

``build`` reads the recorder's columns (no DataFrame: a million allocations take a second or two)
and returns ``Allocations``, one entry an allocation, the arrays ``memory.Memory`` makes its tables
of. Positions are event ids: an allocation is live after event ``start`` up to, not including,
event ``end`` (``NEVER``: not freed in the trace); one made before the trace has ``start == -1``.

Note [Memory categories]
~~~~~~~~~~~~~~~~~~~~~~~~
Each allocation gets one of PyTorch's categories (``observations.CATEGORIES``), the first rule that
holds deciding:

1. parameter, gradient, optimizer_state, input: the trace observed a tensor of that kind in its
   block while it was live (``observations``; a parameter before a gradient before optimizer state
   before an input). Buffers (batch norm's running statistics) count as parameters: model state.
   An input is taken only for memory made before the trace or by an op autograd did not record (a
   copy, no_grad): what the model computed is told by the rules below, even when the user calls
   the next module with it (``for layer in layers: x = layer(x)``).
2. activation: made outside backward and freed by autograd while a backward node ran (the free
   event's parent chain reaches a ``backward`` event): saved for backward.
3. autograd_detail: made while a backward node ran and not a gradient (the gradients of
   intermediate results), unless freed inside the op that made it (then 4).
4. input, again: made by a host-to-device copy (an op whose own events include an H2D copy)
   outside every module and outside backward.
5. activation, again: made by an op autograd recorded (grad mode on: the op, or one around it, has
   a sequence number), never freed in the trace, in the step it ended in (no ``step`` event after
   it), and either an allocation failed after it, or it was made in a module's forward and no
   backward ran after it: saved for a backward that the trace did not reach or finish, as what
   fills the memory when a forward or backward pass runs out of it. (A step that ended ran its
   backward: what it left live is held by the user's variables, not by autograd.)
6. temporary: freed in the trace.
7. unknown: never freed in the trace and never observed.

After an allocation fails, the program unwinds and frees what it held (its frames, a script's
variables): those frees say nothing of what held the memory. So an allocation live at an
out-of-memory error and freed after it counts as never freed; rule 5 then names what autograd
recorded an activation, the failed op's operands included (they were needed then).

Rules 2, 3 and 5 need backward events and sequence numbers: under ``trace(ops="kernels")`` there
are none, and what autograd saved counts as temporary (or unknown). The memory held when the trace
began is listed too (from the blocks ``observations`` took at its start), so that what is live at
any moment sums to the allocator's ``total``; what no block explains (a trace file from before
those blocks were saved) is one allocation of the unexplained bytes, address -1, category unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from openreg_lab import _C
from openreg_lab.recording import modules
from openreg_lab.recording.events import KINDS, Columns, addresses, forward_links, inherit
from openreg_lab.recording.observations import (
    ACTIVATION,
    AUTOGRAD_DETAIL,
    INPUT,
    TEMPORARY,
    UNKNOWN,
    Observed,
)

OP, BACKWARD, COPY, ALLOC, FREE, STEP, OOM = (
    KINDS.index(k) for k in ("op", "backward", "copy", "alloc", "free", "step", "oom")
)
NEVER = np.iinfo(np.int64).max  #: the end of an allocation never freed in the trace
ROUND = int(_C._memory_round_bytes)  #: openreg's block size: a request rounded up to a multiple
#: Ops that only allocate for the op that calls them: an allocation is that caller's.
PRIMITIVES = ("aten::empty", "aten::new_empty", "aten::_empty", "aten::resize_")


@dataclass
class Allocations:
    """One entry per allocation (arrays of one length), and per device what the trace says."""

    id: np.ndarray  # the alloc event (-1: made before the trace)
    free_id: np.ndarray  # the free event (-1: not freed in the trace)
    start: np.ndarray  # position: id, -1 before the trace
    end: np.ndarray  # position: free_id, NEVER when not freed
    device: np.ndarray
    address: np.ndarray
    bytes: np.ndarray  # the request
    block: np.ndarray  # the block: the request rounded up (Note [Memory events])
    thread: np.ndarray  # -1: made before the trace
    op_id: np.ndarray  # the op that made it (-1: none)
    op: np.ndarray  # string ids (0: none) of op name, module path and user line
    module: np.ndarray
    source: np.ndarray
    category: np.ndarray
    step: np.ndarray  # the training step it was made in (-1: before the trace)
    #: Per device: (memory event ids, the bytes allocated after each, by the allocator's count).
    totals: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: Per device: the bytes allocated when the trace began.
    initial: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # why the tables may not add up
    #: Made by an op autograd recorded (grad mode on): observed inputs do not name these.
    recorded: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __len__(self) -> int:
        return len(self.id)


def _ancestor(parent: np.ndarray, mask: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, its nearest ancestor (not itself) where ``mask`` holds, -1: none."""
    out = np.full(len(rows), -1, dtype=np.int64)
    up = parent[rows].astype(np.int64)
    live = np.flatnonzero(up >= 0)
    while len(live):
        u = up[live]
        hit = mask[u]
        out[live[hit]] = u[hit]
        live = live[~hit]
        up[live] = parent[up[live]]
        live = live[up[live] >= 0]
    return out


def _root_op(parent: np.ndarray, is_op: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, its outermost enclosing op (itself if it is one and none encloses it)."""
    out = np.where(is_op[rows], rows, _ancestor(parent, is_op, rows))
    live = np.flatnonzero(out >= 0)
    while len(live):
        up = _ancestor(parent, is_op, out[live])
        moved = up >= 0
        out[live[moved]] = up[moved]
        live = live[moved]
    return out


def _op_of(f: dict[str, np.ndarray], strings: list[str], rows: np.ndarray) -> np.ndarray:
    """The op that made each allocation of ``rows``: its nearest enclosing op, or that op's caller
    when it is an allocation primitive (``aten::empty`` inside ``aten::addmm``)."""
    is_op = f["kind"] == OP
    op = _ancestor(f["parent"], is_op, rows)
    for _ in range(2):
        has = op >= 0
        names = np.unique(f["name"][op[has]])
        primitive = np.array([strings[i].startswith(PRIMITIVES) for i in names], dtype=bool)
        mask = np.zeros(len(strings) + 1, dtype=bool)
        mask[names[primitive]] = True
        at = np.flatnonzero(has)
        at = at[mask[f["name"][op[at]]]]
        up = _ancestor(f["parent"], is_op, op[at])
        at, up = at[up >= 0], up[up >= 0]
        if not len(at):
            break
        op[at] = up
    return op


def build(c: Columns, observed: Observed | None) -> Allocations:
    """The allocations of the columns ``c``, with what ``observed`` saw (None: nothing observed)."""
    f = c.fields
    n = len(c)
    kind = f["kind"]
    mem = np.flatnonzero((kind == ALLOC) | (kind == FREE))
    m_dev = f["device"][mem].astype(np.int64)
    m_addr = addresses({"kind": kind[mem], "dispatch": f["dispatch"][mem], "reserved": f["reserved"][mem]})
    m_alloc = kind[mem] == ALLOC
    order = np.lexsort((mem, m_addr, m_dev))
    s_dev, s_addr, s_alloc, s_id = m_dev[order], m_addr[order], m_alloc[order], mem[order]
    same = (s_dev[1:] == s_dev[:-1]) & (s_addr[1:] == s_addr[:-1])  # k and k + 1 name one block
    problems: list[str] = []
    if len(mem) and not m_addr.any():
        problems.append(
            "its allocations and frees name no block (a trace file of format version 1, from before "
            "they did): which free ends which allocation is unknown; record the trace again"
        )
    # An alloc ends at the next event on its block: its free, or (events missing) another alloc.
    a_k = np.flatnonzero(s_alloc)
    nxt = a_k + 1
    has_next = nxt < len(s_id)
    has_next[has_next] = same[a_k[has_next]]
    end = np.full(len(a_k), NEVER, dtype=np.int64)
    end[has_next] = s_id[nxt[has_next]]
    refreed = has_next.copy()
    refreed[has_next] = s_alloc[nxt[has_next]]
    if refreed.any():
        problems.append(
            f"{int(refreed.sum())} blocks were allocated again without a free between: events are missing"
        )
    # A free whose block was not allocated in the trace: made before it.
    fr_k = np.flatnonzero(~s_alloc)
    paired = fr_k > 0
    paired[paired] = same[fr_k[paired] - 1] & s_alloc[fr_k[paired] - 1]
    orphan_k = fr_k[~paired]
    pre = _before(f, observed, s_dev, s_addr, s_alloc, s_id, same, orphan_k, problems)
    a_rows = s_id[a_k]
    back = np.argsort(a_rows, kind="stable")  # the allocations in event order
    a_rows, end = a_rows[back], end[back]
    a = _explain(c, a_rows, end)
    alloc_bytes = f["bytes"][a_rows].astype(np.int64)
    out = Allocations(
        id=np.r_[a_rows, np.full(len(pre["bytes"]), -1)],
        free_id=np.r_[np.where(end == NEVER, -1, end), np.where(pre["end"] == NEVER, -1, pre["end"])],
        start=np.r_[a_rows, np.full(len(pre["bytes"]), -1)],
        end=np.r_[end, pre["end"]],
        device=np.r_[f["device"][a_rows].astype(np.int64), pre["device"]],
        address=np.r_[addresses(f)[a_rows] if n else np.zeros(0, np.int64), pre["address"]],
        bytes=np.r_[alloc_bytes, pre["bytes"]],
        block=np.r_[-(-alloc_bytes // ROUND) * ROUND, pre["block"]],
        thread=np.r_[f["thread"][a_rows].astype(np.int64), np.full(len(pre["bytes"]), -1)],
        op_id=np.r_[a["op_id"], np.full(len(pre["bytes"]), -1)],
        op=np.r_[a["op"], np.zeros(len(pre["bytes"]), np.int64)],
        module=np.r_[a["module"], np.zeros(len(pre["bytes"]), np.int64)],
        source=np.r_[a["source"], np.zeros(len(pre["bytes"]), np.int64)],
        category=np.r_[a["category"], _before_categories(f, pre["end"])].astype(np.int8),
        step=np.r_[_steps_of(f, a_rows), np.full(len(pre["bytes"]), -1)],
        problems=problems,
        recorded=np.r_[a["recorded"], np.zeros(len(pre["bytes"]), dtype=bool)],
    )
    observe(out, c, observed)
    _account(out, f, mem)
    return out


def _before_categories(f: dict[str, np.ndarray], end: np.ndarray) -> np.ndarray:
    """Rules 2, 5 and 6 for the allocations made before the trace, freed at ``end``."""
    out = np.full(len(end), UNKNOWN, dtype=np.int64)
    freed = np.flatnonzero(end != NEVER)
    out[freed] = TEMPORARY
    in_bw = _ancestor(f["parent"].astype(np.int64), f["kind"] == BACKWARD, end[freed]) >= 0
    out[freed[in_bw]] = ACTIVATION
    return out


def _before(
    f: dict[str, np.ndarray],
    observed: Observed | None,
    s_dev: np.ndarray,
    s_addr: np.ndarray,
    s_alloc: np.ndarray,
    s_id: np.ndarray,
    same: np.ndarray,
    orphan_k: np.ndarray,
    problems: list[str],
) -> dict[str, np.ndarray]:
    """The allocations made before the trace: the blocks allocated when it opened, each ended by
    the first free of its block, and any other block freed before being allocated in the trace."""
    first = np.r_[True, ~same] if len(s_id) else np.zeros(0, dtype=bool)  # a block's first event
    g_at = np.flatnonzero(first)
    blocks = observed.blocks if observed is not None else {}
    held = blocks.get("allocated", np.zeros(0, np.int64)) != 0
    b_dev = blocks.get("device", np.zeros(0, np.int64))[held]
    b_addr = blocks.get("address", np.zeros(0, np.int64))[held]
    b_size = blocks.get("size", np.zeros(0, np.int64))[held]
    b_req = blocks.get("requested", np.zeros(0, np.int64))[held]
    key = np.zeros(len(g_at), dtype=[("d", "i8"), ("a", "i8")])
    key["d"], key["a"] = s_dev[g_at], s_addr[g_at]
    want = np.zeros(len(b_dev), dtype=key.dtype)
    want["d"], want["a"] = b_dev, b_addr
    at = np.searchsorted(key, want) if len(key) else np.zeros(len(want), dtype=np.int64)
    found = at < len(key)
    found[found] = key[at[found]] == want[found]
    k = np.where(found, g_at[np.minimum(at, max(len(g_at) - 1, 0))] if len(g_at) else 0, -1)
    snap_ns = observed.snapshot_ns if observed is not None else 0
    start_ns = f["start_ns"]
    # The block's first event in the trace: its free (the orphan free), or an alloc made before the
    # blocks were taken (the same allocation twice: keep the event), or an alloc after (events lost).
    dup = found.copy()
    dup[found] = s_alloc[k[found]] & (start_ns[s_id[k[found]]] <= snap_ns)
    keep = ~dup
    b_end = np.full(len(b_dev), NEVER, dtype=np.int64)
    b_end[found] = s_id[k[found]]
    lost = found & keep
    lost[lost] = s_alloc[k[lost]]
    if lost.any():
        problems.append(
            f"{int(lost.sum())} blocks held when the trace began were allocated again without a free"
        )
    consumed = np.zeros(len(s_id), dtype=bool)
    consumed[k[found & keep & ~lost]] = True
    rest = orphan_k[~consumed[orphan_k]]
    r_bytes = f["bytes"][s_id[rest]].astype(np.int64)
    return {
        "device": np.r_[b_dev[keep], s_dev[rest]],
        "address": np.r_[b_addr[keep], s_addr[rest]],
        "bytes": np.r_[b_req[keep], r_bytes],
        "block": np.r_[b_size[keep], -(-r_bytes // ROUND) * ROUND],
        "end": np.r_[b_end[keep], s_id[rest]],
    }


def _explain(c: Columns, rows: np.ndarray, end: np.ndarray) -> dict[str, np.ndarray]:
    """The op, module, user line and category rules 2 to 7 (Note [Memory categories]) of the
    allocation events ``rows`` (in event order), freed at ``end``."""
    f = c.fields
    parent, kind = f["parent"].astype(np.int64), f["kind"]
    is_bw = kind == BACKWARD
    node = _ancestor(parent, is_bw, rows)  # the backward node it was made in
    in_bw = node >= 0
    freed = (end != NEVER) & ~_unwound(f, rows, end)
    free_rows = end[freed]
    freed_in_bw = np.zeros(len(rows), dtype=bool)
    freed_in_bw[freed] = _ancestor(parent, is_bw, free_rows) >= 0
    op = _op_of(f, c.strings, rows)
    free_op = np.full(len(rows), -2, dtype=np.int64)
    free_op[freed] = _ancestor(parent, kind == OP, free_rows)
    forward = forward_links(f)
    fwd = np.where(in_bw, forward[np.maximum(node, 0)], -1)  # the forward op that made the node
    module = np.zeros(len(rows), dtype=np.int64)
    pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # each thread's module spans, cut once
    module[~in_bw] = modules.module_of(f, rows[~in_bw], pieces)
    has_fwd = np.flatnonzero(fwd >= 0)
    module[has_fwd] = modules.module_of(f, fwd[has_fwd], pieces)
    source = inherit(f["source"].astype(np.int64), parent)
    src = np.where(fwd >= 0, source[np.maximum(fwd, 0)], source[rows])
    # Rule 4: an H2D copy inside the same top-level op, outside modules and backward.
    is_op = kind == OP
    copies = np.flatnonzero((kind == COPY) & (f["name"] == _string_id(c.strings, "H2D")))
    h2d_roots = _root_op(parent, is_op, copies)
    roots = _root_op(parent, is_op, rows)
    by_copy = np.isin(roots, h2d_roots[h2d_roots >= 0]) & (roots >= 0) & (module == 0) & ~in_bw
    category = np.full(len(rows), UNKNOWN, dtype=np.int64)
    category[freed] = TEMPORARY
    recorded = _ancestor(parent, (kind == OP) & (f["seq"] >= 0), rows) >= 0
    category[~freed & ~in_bw & recorded & _unreached(f, rows, module != 0)] = ACTIVATION  # rule 5
    category[by_copy] = INPUT
    category[in_bw & ~(freed & (free_op == op))] = AUTOGRAD_DETAIL
    category[freed_in_bw & ~in_bw] = ACTIVATION
    return {
        "op_id": op,
        "op": np.where(op >= 0, f["name"][np.maximum(op, 0)].astype(np.int64), 0),
        "module": module,
        "source": src,
        "category": category,
        "recorded": recorded,
    }


def _unwound(f: dict[str, np.ndarray], rows: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each allocation (made at ``rows``, freed at ``end``), whether it was live at an
    out-of-memory error and freed after it (Note [Memory categories])."""
    ooms = np.flatnonzero(f["kind"] == OOM)
    out = np.zeros(len(rows), dtype=bool)
    if not len(ooms):
        return out
    last = (
        np.searchsorted(ooms, np.minimum(end, len(f["kind"])), side="left") - 1
    )  # the last one before the free
    has = (last >= 0) & (end != NEVER)
    out[has] = rows[has] < ooms[last[has]]
    return out


def _unreached(f: dict[str, np.ndarray], rows: np.ndarray, in_module: np.ndarray) -> np.ndarray:
    """Rule 5's test for each event of ``rows`` (made while autograd recorded): after the last step
    event, with an out-of-memory after it, or in a module with no backward after it (ids are in
    time order)."""
    kind = f["kind"]

    def last(k: int) -> int:
        found = np.flatnonzero(kind == k)
        return int(found[-1]) if len(found) else -1

    return (rows > last(STEP)) & ((in_module & (rows > last(BACKWARD))) | (rows < last(OOM)))


def _string_id(strings: list[str], text: str) -> int:
    """The id of ``text`` in the trace's strings, -1 when absent."""
    try:
        return strings.index(text)
    except ValueError:
        return -1


def _steps_of(f: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The training step each event of ``rows`` ran in (``steps.table``'s numbering; 0 without steps)."""
    is_step = np.flatnonzero(f["kind"] == STEP)
    if not len(is_step):
        return np.zeros(len(rows), dtype=np.int64)
    ends = f["start_ns"][is_step].astype(np.int64)
    numbers = np.r_[f["seq"][is_step].astype(np.int64), int(f["seq"][is_step[-1]]) + 1]
    return numbers[np.searchsorted(ends, f["start_ns"][rows].astype(np.int64), side="left")]


def observe(a: Allocations, c: Columns, observed: Observed | None) -> None:
    """Rule 1 (Note [Memory categories]): each observation names the allocation live at its address
    at its time; the allocation takes the observed category (the first of them in ``CATEGORIES``)."""
    if observed is None or not len(observed) or not len(a):
        return
    start_ns = c.fields["start_ns"]
    pos = np.searchsorted(start_ns, observed.time, side="right") - 1  # the last event before it
    span = len(c) + 2
    uniq = np.unique(a.address)
    rank = np.searchsorted(uniq, a.address)
    key = rank * span + (a.start + 1)
    order = np.argsort(key, kind="stable")
    keys = key[order]
    r = np.searchsorted(uniq, observed.address)
    ok = r < len(uniq)
    ok[ok] = uniq[r[ok]] == observed.address[ok]
    j = np.searchsorted(keys, r * span + (pos + 1), side="right") - 1
    ok &= j >= 0
    cand = order[np.maximum(j, 0)]
    ok &= (rank[cand] == r) & (a.end[cand] > pos) & (a.start[cand] <= pos)
    ok &= ~((observed.category == INPUT) & a.recorded[cand])  # computed: the other rules say
    best = np.full(len(a), 127, dtype=np.int64)
    np.minimum.at(best, cand[ok], observed.category[ok].astype(np.int64))
    seen = best < 127
    a.category[seen] = best[seen]


def _account(a: Allocations, f: dict[str, np.ndarray], mem: np.ndarray) -> None:
    """Per device, the allocator's count after each memory event, and the bytes allocated before the
    trace; the problems when the allocations do not add up to the count."""
    delta = np.zeros(len(f["kind"]), dtype=np.int64)
    started = a.start >= 0
    delta[a.start[started]] += a.block[started]
    ended = a.end != NEVER
    delta[a.end[ended]] -= a.block[ended]
    devices = np.unique(f["device"][mem].astype(np.int64))
    extra = []
    for d in devices.tolist():
        mine = mem[f["device"][mem] == d]
        before = int(a.block[(a.device == d) & ~started].sum())
        total = f["seq"][mine].astype(np.int64)
        running = before + np.cumsum(delta[mine])
        gap = total - running
        if len(gap) and (gap != gap[0]).any():
            a.problems.append(
                f"on openreg:{d} the allocations do not add up to the allocator's count at every "
                "event: events are missing"
            )
        elif len(gap) and gap[0] > 0:  # memory allocated before the trace that no block explains
            extra.append((d, int(gap[0])))
            before += int(gap[0])
        elif len(gap) and gap[0] < 0:
            a.problems.append(f"on openreg:{d} the allocations add up to more than the allocator counted")
        a.totals[d] = (mine, total)
        a.initial[d] = before
    for d, nbytes in extra:
        _append_unexplained(a, d, nbytes)


def _append_unexplained(a: Allocations, device: int, nbytes: int) -> None:
    """One allocation of the ``nbytes`` allocated before the trace that no block explains."""
    for name, value in (
        ("id", -1), ("free_id", -1), ("start", -1), ("end", NEVER), ("device", device), ("address", -1),
        ("bytes", nbytes), ("block", nbytes), ("thread", -1), ("op_id", -1), ("op", 0), ("module", 0),
        ("source", 0), ("category", UNKNOWN), ("step", -1), ("recorded", False),
    ):  # fmt: skip
        old = getattr(a, name)
        setattr(a, name, np.r_[old, np.asarray([value], dtype=old.dtype)])
