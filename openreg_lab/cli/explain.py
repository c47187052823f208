"""``openreg-lab explain OP``: why the dispatcher runs the kernel it runs for one openreg call.

Without ``--args``, the call's arguments are made from the operator's schema: each required
tensor is a random ``--shape`` tensor of ``--dtype`` on openreg, other required arguments get
small values (a dim of 1, a scalar of 1.0, ...). The call is run once, as ``openreg_lab.explain``
does.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
from typing import Any

import torch

from openreg_lab.cli._common import Parser, UsageError

EXAMPLES = """\
examples:
  openreg-lab explain aten::linear
  openreg-lab explain add.Tensor --shape 2,3 --dtype bfloat16
  openreg-lab explain aten::mm --args "t(2, 3), t(3, 4)"
  openreg-lab explain aten::addcmul --profile mps --format json

An operator without an overload (aten::add) means its first overload the made-up arguments fit.
--args is a Python expression: the positional arguments, with torch and t(*shape, dtype=None)
(a random openreg tensor) in scope.
"""


def add_parser(sub: Any) -> Parser:
    """Add the ``explain`` command to the subparsers ``sub``."""
    p: Parser = sub.add_parser(
        "explain",
        help="one operator's dispatch path on openreg, step by step (text or JSON)",
        description=__doc__,
        epilog=EXAMPLES,
    )
    p.add_argument("op", help="an operator: aten::add.Tensor, add.Tensor, aten::linear (e.g. aten::linear)")
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default %(default)s)"
    )
    p.add_argument(
        "--shape", default="4,4", help="shape of the made-up tensors (default %(default)s; e.g. --shape 2,3)"
    )
    p.add_argument("--dtype", default="float32", help="dtype of the made-up tensors (default %(default)s)")
    p.add_argument(
        "--args", dest="call_args", metavar="EXPR", help='the arguments, e.g. --args "t(2, 3), t(3, 4)"'
    )
    p.add_argument("--profile", help="explain under this profile (e.g. --profile mps)")
    p.set_defaults(handler=_handle)
    return p


def _handle(args: argparse.Namespace) -> int:
    import openreg_lab
    from openreg_lab.cli._common import check_profile

    check_profile(args.profile)
    shape = _parse_shape(args.shape)
    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"--dtype {args.dtype}: not a torch dtype (e.g. float32, bfloat16, int64)")
    with openreg_lab.use_profile(args.profile):
        e = _explain(args.op, args.call_args, shape, dtype)
    if args.format == "json":
        json.dump(_as_dict(e), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(repr(e))
    return 0


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.replace("x", ",").split(",") if s.strip())
    except ValueError:
        raise UsageError(f"--shape {text}: expected sizes separated by commas, e.g. 4,4") from None
    if any(s < 0 for s in shape):
        raise UsageError(f"--shape {text}: sizes must not be negative")
    return shape


def _explain(op: str, expr: str | None, shape: tuple[int, ...], dtype: torch.dtype) -> Any:
    import openreg_lab

    def t(*size: int, dtype: torch.dtype | None = dtype) -> torch.Tensor:
        if dtype is not None and not dtype.is_floating_point and not dtype.is_complex:
            return torch.randint(0, 3, size or shape, dtype=dtype).to("openreg")
        return torch.randn(size or shape, dtype=dtype).to("openreg")

    if expr is not None:
        try:
            value = eval(expr, {"torch": torch, "t": t})  # the user's own expression, like python -c
        except Exception as e:
            raise UsageError(f"--args {expr!r}: {type(e).__name__}: {e}") from None
        call_args = value if isinstance(value, tuple) else (value,)
        candidates = _candidates(op)
        target = candidates[0] if len(candidates) == 1 else candidates[0].overloadpacket
        try:
            return openreg_lab.explain(target, *call_args)
        except (ValueError, TypeError) as e:
            raise UsageError(" ".join(str(e).split())) from None
    errors = []
    for overload in _candidates(op):
        try:
            call_args, kwargs = _made_up(overload._schema, t)
            return openreg_lab.explain(overload, *call_args, **kwargs)
        except (TypeError, ValueError, RuntimeError) as e:
            errors.append(f"{overload.name()}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    raise UsageError(f"could not make arguments for {op} from its schema ({'; '.join(errors)}); pass --args")


def _candidates(op: str) -> list[Any]:
    """The overloads to try for ``op``: the one named, else ``default`` then the others in order."""
    name = op if "::" in op else f"aten::{op}"
    name = name.removesuffix(".default")
    ns, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    known = torch._C._dispatch_get_all_op_names()
    if name in known:
        return [getattr(getattr(getattr(torch.ops, ns), base), overload or "default")]
    if not overload and any(k.startswith(name + ".") for k in known):
        packet = getattr(getattr(torch.ops, ns), base)
        names = packet.overloads()
        ordered = (["default"] if "default" in names else []) + [n for n in names if n != "default"]
        return [getattr(packet, n) for n in ordered]
    hints = difflib.get_close_matches(name, known, n=3)
    raise UsageError(f"no operator named {op!r}" + (f"; did you mean {', '.join(hints)}?" if hints else ""))


def _made_up(schema: Any, t: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments for ``schema``: values for the required arguments, the defaults for the others."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for a in schema.arguments:
        if a.has_default_value():
            continue
        value = _value(a.name, a.type, t)
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def _value(name: str, typ: Any, t: Any) -> Any:
    kind = typ.kind()
    if kind == "TensorType":
        return t()
    if kind == "OptionalType":
        return None
    if kind == "ListType":
        inner = typ.getElementType().kind()
        if inner == "TensorType" or inner == "OptionalType":
            return [t(), t()]
        if inner in ("IntType", "SymIntType"):
            return [1] if "dim" in name else list(t().shape)
        return [1.0]
    if kind in ("IntType", "SymIntType"):
        return 1
    if kind in ("FloatType", "NumberType"):
        return 1.0
    if kind == "BoolType":
        return False
    if kind == "StringType":
        return "none"
    raise TypeError(f"no made-up value for argument {name} of type {typ}")


def _as_dict(e: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(e):
        if f.name == "trace":
            continue
        value = getattr(e, f.name)
        if isinstance(value, tuple):
            value = [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value]
        out[f.name] = value
    return out
