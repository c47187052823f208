"""``explain(op, *args, **kwargs)``: why the dispatcher runs the kernel it runs, step by step.

The explanation is read from the dispatcher's own tables for the call's dispatch key set, then the
call is run once (in-place and ``out=`` calls do mutate their arguments) under ``openreg_lab.trace()``,
which observes the operators a composite decomposes into and the kernel each of them ran.
"""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from openreg_lab.dispatch import profiles as _profiles
from openreg_lab.dispatch.coverage import _classify as _apply_profile
from openreg_lab.dispatch.coverage import _static
from openreg_lab.dispatch.keys import dispatch_table
from openreg_lab.dispatch.native import native_ops, via_cpu_ops

DispatchKey = torch._C.DispatchKey


@dataclass(frozen=True)
class Step:
    """One dispatch key the call passes through."""

    key: str  #: runtime dispatch key, e.g. ``"AutogradPrivateUse1"``
    registered: str  #: kernel, fallthrough, boxed fallback, composite_explicit, composite_implicit, missing
    action: str  #: passes through, redispatches below, decomposes, runs, error
    source: str  #: where the dispatcher says it was registered


@dataclass(frozen=True)
class Call:
    """An operator observed while running the call (``depth`` 0: called by the explained call)."""

    depth: int
    op: str
    resolution: str  #: as in ``coverage()``
    kernel: str  #: as in ``coverage()``
    ran: str = ""  #: what the trace saw run: native, fallback or composite


@dataclass(frozen=True)
class Explanation:
    """The result of ``explain()``: data fields, and a readable ``repr``."""

    op: str  #: ``aten::add.Tensor``
    schema: str
    argument_keys: tuple[str, ...]  #: union of the tensor arguments' dispatch keys
    tls_included: tuple[str, ...]
    tls_excluded: tuple[str, ...]
    keys: tuple[str, ...]  #: the key set dispatched on, highest priority first
    steps: tuple[Step, ...]
    resolution: str  #: how openreg resolves the op (``coverage()``'s column)
    kernel: str  #: what runs for openreg (``coverage()``'s ``kernel`` column)
    profile: str | None
    calls: tuple[Call, ...] = field(default=())  #: observed sub-operators (composites)
    error: str | None = None  #: what the call raised when it was run, if anything
    #: the ``Trace`` of the run: its copies, casts and allocations too
    trace: Any = field(default=None, repr=False, compare=False)
    #: for ``explain(callable, ...)``: the callable's name, and every operator it called itself
    called: str | None = None
    operators: tuple[str, ...] = ()

    def __repr__(self) -> str:
        lines = []
        if self.called is not None:
            lines.append(
                f"explain {self.called}: it called {', '.join(self.operators)}; the first, as recorded:"
            )
        lines += [f"explain {self.op}", f"  schema: {self.schema}"]
        if self.profile is not None:
            lines.append(f"  profile: {self.profile}")
        if self.called is None:
            lines.append(f"  keys from arguments: {', '.join(self.argument_keys) or '(none)'}")
            lines.append(f"  thread-local included: {', '.join(self.tls_included) or '(none)'}")
            lines.append(f"  thread-local excluded: {', '.join(self.tls_excluded) or '(none)'}")
            lines.append(f"  dispatch key set: {', '.join(self.keys)}")
        else:
            lines.append(f"  keys that handled the call (recorded): {' > '.join(self.keys) or '(none)'}")
        lines.append("  path:")
        width = max((len(s.key) for s in self.steps), default=0)
        for s in self.steps:
            lines.append(f"    {s.key:<{width}}  {s.registered:<18}  {s.action}")
        lines.append(f"  openreg: {self.resolution} ({self.kernel})")
        if self.calls:
            lines.append("  decomposes into:")
            for c in self.calls:
                ran = f", ran {c.ran}" if c.ran else ""
                lines.append(f"    {'  ' * c.depth}{c.op}  [{c.resolution}, {c.kernel}{ran}]")
        if self.error is not None:
            lines.append(f"  raised: {self.error}")
        return "\n".join(lines)


def _did_you_mean(name: str) -> str:
    """Dispatcher operators whose name contains ``name``'s (shortest first), else close spellings."""
    names = torch._C._dispatch_get_all_op_names()
    base = name.partition("::")[2].partition(".")[0]
    hints = sorted((n for n in names if base and base in n.partition("::")[2]), key=len)[:3]
    hints = hints or difflib.get_close_matches(name, names, n=3)
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def _in_dispatcher(overload: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """Return ``overload`` if the dispatcher knows it; raise ValueError otherwise.

    ``torch.ops`` also resolves TorchScript's own operators (``prim::device``, ``prim::dtype``,
    ...), which live in the JIT's operator registry: a call to them never reaches a dispatch key,
    so there is no dispatch path to explain.
    """
    schema = overload._schema
    try:
        torch._C._dispatch_find_schema_or_throw(schema.name, schema.overload_name)
    except RuntimeError:
        raise ValueError(
            f"explain: {overload.name()} is a TorchScript operator, not a dispatcher operator: calls to "
            "it never reach a dispatch key or a backend kernel, so there is no dispatch path to "
            f"explain. Explain a dispatcher operator such as 'aten::add.Tensor'{_did_you_mean(schema.name)}"
        ) from None
    return overload


def _resolve_op(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch._ops.OpOverload:
    if isinstance(op, str):
        name = op if "::" in op else f"aten::{op}"
        ns, _, rest = name.partition("::")
        base, _, overload = rest.partition(".")
        try:
            packet = getattr(getattr(torch.ops, ns), base)
            found = getattr(packet, overload or "default")
        except (AttributeError, RuntimeError):
            raise ValueError(f"explain: no operator named {name!r}{_did_you_mean(name)}") from None
        return _in_dispatcher(found)
    if isinstance(op, torch._ops.OpOverload):
        return _in_dispatcher(op)
    if isinstance(op, torch._ops.OpOverloadPacket):
        errors = []
        for overload in op.overloads():
            candidate = getattr(op, overload)
            try:
                _check_schema(candidate._schema, args, kwargs)
            except RuntimeError as e:
                errors.append(f"  {candidate._schema}: {e}".splitlines()[0])
                continue
            return _in_dispatcher(candidate)
        raise TypeError(
            f"explain: the arguments match no overload of {op._qualified_op_name}:\n" + "\n".join(errors)
        )
    raise TypeError(
        "explain takes an operator: an overload like torch.ops.aten.add.Tensor, a packet like "
        f"torch.ops.aten.add, a name like 'aten::add.Tensor', or a callable; got {type(op).__name__}"
    )


def _check_schema(schema: torch._C.FunctionSchema, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise RuntimeError when the arguments do not match ``schema`` (as the dispatcher checks them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "converting a tensor with requires_grad to a scalar"
        torch._C._check_schema_allow_fake_script_object(schema, *args, **kwargs)


def _key_names(ks: torch._C.DispatchKeySet) -> tuple[str, ...]:
    names = []
    while True:
        k = ks.highestPriorityTypeId()
        if k == DispatchKey.Undefined:
            return tuple(names)
        names.append(_name(k))
        ks = ks & torch._C._dispatch_keyset_full_after(k)


def _name(k: torch._C.DispatchKey) -> str:
    return torch._C._dispatch_key_name(k)  # k.name is "???" for a few keys


def _is_backend(k: torch._C.DispatchKey) -> bool:
    return torch._C._dispatch_is_included_in_alias(k, DispatchKey.CompositeExplicitAutograd)


def _device_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch._C.DispatchKeySet:
    """The backend BackendSelect picks from a ``device=`` argument (cpu when there is none)."""
    device = kwargs.get("device")
    if device is None:
        device = next((a for a in args if isinstance(a, torch.device)), "cpu")
    key = torch._C._dispatch_key_for_device(torch.device(device).type)
    return torch._C.DispatchKeySet(torch._C._dispatch_key_parse(key))


_OPENREG_ACTIONS = {
    "hand_written": "runs openreg's hand-written kernel",
    "generic": "runs the generic native path (the CPU kernel on device memory, no copies)",
    "cpu_fallback": "runs the boxed CPU fallback (copies to the host and back)",
    "via_cpu": "runs openreg's kernel, which computes through the copy path",
    "registered": "runs a kernel registered outside openreg",
    "composite": "runs the composite kernel (the active profile lacks this op)",
}


def _walk(
    name: str,
    ks: torch._C.DispatchKeySet,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    openreg_kernel: str,
) -> list[Step]:
    table = dispatch_table(name)
    steps = []
    while True:
        k = ks.highestPriorityTypeId()
        if k == DispatchKey.Undefined:
            steps.append(Step("(none)", "missing", "error: no key left to run the call", ""))
            return steps
        key = _name(k)
        registered, source = table.get(key, ("missing", ""))
        after = torch._C._dispatch_keyset_full_after(k)
        if registered == "missing":
            steps.append(Step(key, registered, "error: nothing registered", source))
            return steps
        if registered == "fallthrough":
            steps.append(Step(key, registered, "passes through", source))
        elif registered.startswith("composite"):
            steps.append(Step(key, registered, "decomposes into other operators", source))
            return steps
        elif _is_backend(k):
            action = "runs"
            if k == DispatchKey.PrivateUse1:
                action = _OPENREG_ACTIONS.get(openreg_kernel, action)
            steps.append(Step(key, registered, action, source))
            return steps
        else:
            steps.append(Step(key, registered, "runs, then redispatches below", source))
            if k == DispatchKey.BackendSelect:
                ks = ks | _device_key(args, kwargs)
        ks = ks & after


def _observed_calls(name: str, run: Any, ops: frozenset[str] | None) -> tuple[list[Call], str | None, Any]:
    """Run ``run()`` under a trace; return the operators it called below ``name``, its error and
    the trace."""
    t, error = _run_traced(run)
    ev = t.events
    ops_ev = ev[ev["kind"] == "op"]
    if ops_ev.empty:
        return [], error, t
    top = ops_ev[ops_ev["parent"] == -1]
    # The explained op is the first top-level call when it reaches openreg's keys; otherwise
    # (a composite decomposed above them) its sub-operators are the top-level calls.
    root = int(top["id"].iloc[0]) if top["name"].iloc[0] == name else -1
    return _calls_below(ev, ops_ev, root, ops), error, t


def _run_traced(run: Any, record_shapes: bool = False) -> tuple[Any, str | None]:
    """Run ``run()`` under a trace; return the trace and the first line of what it raised, if anything
    (the explanation stands; the failure is part of it)."""
    from openreg_lab.recording.session import Trace

    error = None
    with Trace(record_shapes=record_shapes) as t:
        try:
            run()
        except Exception as e:
            error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return t, error


def _calls_below(ev: Any, ops_ev: Any, root: int, ops: frozenset[str] | None) -> list[Call]:
    """The op events below the event ``root`` (every op when ``root`` is -1), with their depth."""
    parent = dict(zip(ev["id"], ev["parent"], strict=True))
    calls = []
    for row in ops_ev.itertuples(index=False):
        depth, up = 0, int(row.parent)
        while up not in (-1, root):
            depth, up = depth + 1, int(parent[up])
        if int(row.id) == root or (root >= 0 and up != root):
            continue
        resolution, kernel = _classify(row.name, ops)
        calls.append(Call(depth, row.name, resolution, kernel, row.kernel or ""))
    return calls


def _argument_keys(args: Any, kwargs: Any) -> torch._C.DispatchKeySet:
    ks = torch._C.DispatchKeySet(DispatchKey.Undefined)
    for leaf in tree_flatten((args, kwargs))[0]:
        if isinstance(leaf, torch.Tensor):
            ks = ks | torch._C._dispatch_keys(leaf)
    return ks


def _classify(name: str, ops: frozenset[str] | None) -> tuple[str, str]:
    active = _profiles._active
    overridden = active is not None and name in active.overridden()
    static = _static(name, overridden, frozenset(native_ops()), frozenset(via_cpu_ops()))
    return _apply_profile(name, static, ops)


def explain(op: Any, *args: Any, **kwargs: Any) -> Explanation:
    """Explain how the dispatcher runs ``op(*args, **kwargs)`` on openreg, then run it once.

    ``op`` is an overload (``torch.ops.aten.add.Tensor``), a packet (``torch.ops.aten.add``, the
    overload is chosen from the arguments as the dispatcher would) or a name (``"aten::add.Tensor"``).
    It may also be any other callable (``torch.nn.functional.linear``, ``torch.Tensor.add``, a
    lambda): it is run once under a trace, and the explanation is that of the first operator it
    called, with the dispatch path the recorder saw (``Explanation.called`` names the callable and
    ``Explanation.operators`` lists every operator it called).
    The dispatch key set is the union of the tensor arguments' keys plus the thread-local included
    keys, minus the thread-local excluded ones; each key is looked up in the operator's dispatch
    table, highest priority first. Raises ``ValueError`` for an unknown operator or one the
    dispatcher does not know (TorchScript's ``prim::`` operators), with close names, and ``TypeError``
    for arguments that do not match its schema; an exception raised by running the call is kept
    in ``Explanation.error`` instead.
    """
    if callable(op) and not isinstance(op, (str, torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return _explain_callable(op, args, kwargs)
    overload = _resolve_op(op, args, kwargs)
    schema = overload._schema
    try:
        _check_schema(schema, args, kwargs)
    except RuntimeError as e:
        raise TypeError(f"explain: the arguments do not match {schema}: {e}") from None
    name = overload.name()
    argument_keys = _argument_keys(args, kwargs)
    included = torch._C._dispatch_tls_local_include_set()
    excluded = torch._C._dispatch_tls_local_exclude_set()
    ks = (argument_keys | included) - excluded
    ops = _profiles.active_profile_ops()
    resolution, kernel = _classify(name, ops)
    steps = _walk(name, ks, args, kwargs, kernel)
    calls, error, observed = _observed_calls(name, lambda: overload(*args, **kwargs), ops)
    return Explanation(
        op=name,
        schema=str(schema),
        argument_keys=_key_names(argument_keys),
        tls_included=_key_names(included),
        tls_excluded=_key_names(excluded),
        keys=_key_names(ks),
        steps=tuple(steps),
        resolution=resolution,
        kernel=kernel,
        profile=_profiles.get_profile(),
        calls=tuple(calls),
        error=error,
        trace=observed,
    )


def _explain_callable(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Explanation:
    """Run ``fn(*args, **kwargs)`` under a trace and explain the operators it called (see ``explain``)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    module = getattr(fn, "__module__", None)
    called = f"{module}.{name}" if module and module != "builtins" else str(name)
    t, error = _run_traced(lambda: fn(*args, **kwargs), record_shapes=True)
    ev = t.events
    ops_ev = ev[ev["kind"] == "op"]
    top = ops_ev[ops_ev["parent"] == -1]
    if top.empty:
        raise ValueError(
            f"explain: {called} called no operator on openreg"
            + (f" (it raised {error})" if error else "")
            + "; pass openreg tensors, or explain an operator by name, e.g. explain('aten::linear', x, w)"
        )
    first = top.iloc[0]
    op_name = str(first["name"])
    table = dispatch_table(op_name)
    path = [k for k in (first["dispatch"] or "").split(" > ") if k]
    steps = []
    ops = _profiles.active_profile_ops()
    resolution, kernel = _classify(op_name, ops)
    for i, key in enumerate(path):
        registered, source = table.get(key, ("missing", ""))
        last = i == len(path) - 1
        if registered == "fallthrough":
            action = "passes through"
        elif registered.startswith("composite"):
            action = "decomposes into other operators"
        elif last:
            action = _OPENREG_ACTIONS.get(kernel, "runs") if key == "PrivateUse1" else "runs"
        else:
            action = "runs, then redispatches below"
        steps.append(Step(key, registered, action, source))
    calls = _calls_below(ev, ops_ev, int(first["id"]), ops)
    try:
        schema = str(_resolve_op(op_name, (), {})._schema)
    except (ValueError, TypeError):
        schema = ""
    return Explanation(
        op=op_name,
        schema=schema,
        argument_keys=(),
        tls_included=_key_names(torch._C._dispatch_tls_local_include_set()),
        tls_excluded=_key_names(torch._C._dispatch_tls_local_exclude_set()),
        keys=tuple(path),
        steps=tuple(steps),
        resolution=resolution,
        kernel=kernel,
        profile=_profiles.get_profile(),
        calls=tuple(calls),
        error=error,
        trace=t,
        called=called,
        operators=tuple(dict.fromkeys(top["name"].tolist())),
    )
