"""Backend profiles: run openreg with the operator coverage of another backend.

A profile is a set of operators that "the device" implements natively. Everything else that reaches
the device goes through the CPU fallback, with its copies::

    with openreg_lab.use_profile("mps"):   # ops MPS lacks fall back, as they would on a Mac
        model(x)

Built-in profiles:

* ``"minimal"``: only the operators every backend must provide (allocation, views, copies, ...);
* ``"default"``: openreg's hand-written kernels (``native_ops()``), i.e. no change;
* ``"cpu"``, ``"cuda"``, ``"mps"``: the operators with a kernel for that dispatch key in the
  ``native_functions.yaml`` that ships with torch (an op with a ``structured_delegate`` has the
  kernels of its delegate; a ``ufunc_inner_loop`` gives CPU and CUDA kernels, as in torchgen).

A user profile is a list of operator names (``"aten::add.Tensor"``; ``"add.Tensor"`` means ``aten``),
a mapping of such lists (like ``native_ops.yaml``: the keys only group them), or the path of a YAML
or JSON file holding either. Anything else (bytes, a number, a binary file, a file or mapping of
another shape) raises ``TypeError`` or ``ValueError`` naming the problem and these forms.
Every profile includes the ``minimal`` operators, which the fallback itself needs.

Under a profile, an operator the profile has but openreg has no hand-written kernel for runs through
the *generic native path*: its CPU kernel computes directly on device memory, without copies (see
Note [Generic native path] in ``csrc/coverage/GenericNative.h``). How the switch works is Note [Profiles]
in ``csrc/coverage/Profile.h``; it is process-wide, like the fallback policy.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Union

import torch
import yaml

from openreg_lab import _C
from openreg_lab.dispatch import _lookup
from openreg_lab.dispatch.native import fallback_routes, native_ops, native_ops_by_family, via_cpu_ops

BUILTIN_PROFILES = ("minimal", "default", "cpu", "cuda", "mps")
_BACKEND_KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS"}
_UFUNC_KEYS = frozenset({"CPU", "CUDA"})  # torchgen.model.UFUNC_DISPATCH_KEYS

#: A profile: a built-in name, a YAML file path, or operator names.
Profile = Union[str, "os.PathLike[str]", Iterable[str], Mapping[str, Iterable[str]]]


@dataclass(frozen=True)
class _Active:
    name: str
    ops: frozenset[str]
    fallback: frozenset[str]
    composite: frozenset[str]
    generic: frozenset[str]
    covered: frozenset[str]

    def overridden(self) -> frozenset[str]:
        return self.fallback | self.composite | self.generic


_active: _Active | None = None


@cache
def _native_functions() -> list[dict[str, object]]:
    path = resources.files("torchgen").joinpath("packaged/ATen/native/native_functions.yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)  # type: ignore[no-any-return]


def _func_name(entry: dict[str, object]) -> str:
    return str(entry["func"]).split("(", 1)[0].strip()


@cache
def _backend_ops(key: str) -> frozenset[str]:
    """Operators with a kernel for dispatch key ``key`` in torch's ``native_functions.yaml``."""
    entries = _native_functions()
    keys: dict[str, set[str]] = {}
    for entry in entries:
        dispatch = entry.get("dispatch") or {}
        assert isinstance(dispatch, dict)
        own = {k.strip() for ks in dispatch for k in str(ks).split(",")}
        if entry.get("ufunc_inner_loop"):
            own |= _UFUNC_KEYS  # torchgen generates these kernels from the inner loops
        keys[_func_name(entry)] = own
    out = set()
    for entry in entries:
        name = _func_name(entry)
        delegate = entry.get("structured_delegate")
        own = keys[name] | (keys.get(str(delegate), set()) if delegate else set())
        if key in own:
            out.add(f"aten::{name}")
    return frozenset(out)


def _minimal() -> frozenset[str]:
    return frozenset(native_ops_by_family()["minimal"])


def _convolution_hooks() -> frozenset[str]:
    """The convolution hooks: never switched; their kernels ask whether the profile covers them and
    compute through the copy path when it does not (Note [openreg's device DNN library])."""
    return frozenset(native_ops_by_family()["convolution"])


@cache
def _registered() -> frozenset[str]:
    return frozenset(torch._C._dispatch_get_all_op_names())


def _qualify(name: str) -> str:
    name = name.strip()
    return name if "::" in name else f"aten::{name}"


def _check_names(names: Iterable[str], source: str) -> frozenset[str]:
    ops = {_qualify(n) for n in names}
    registered = _registered()
    unknown = sorted(op for op in ops if op not in registered)
    if unknown:
        _registered.cache_clear()  # an operator defined (torch.library) since the last look
        registered = _registered()
        unknown = sorted(op for op in ops if op not in registered)
    if unknown:
        hints = difflib.get_close_matches(unknown[0], registered, n=3)
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise ValueError(
            f"{source}: {len(unknown)} unknown operator(s): {shown}{hint}; "
            "use dispatcher names like 'aten::add.Tensor' (see openreg_lab.coverage()['name'])"
        )
    return frozenset(ops)


def _forms() -> str:
    """The accepted forms of a profile, for error messages."""
    return (
        f"choose one of {', '.join(BUILTIN_PROFILES)}, or pass a list of operator names, a mapping "
        "of such lists (like native_ops.yaml), or the path of a YAML or JSON file holding either"
    )


def _names_in(data: object, source: str, verb: str = "be") -> list[str]:
    """The operator names of a profile given as a list of names or a mapping of such lists."""
    if isinstance(data, Mapping):
        groups = list(data.items())
    elif isinstance(data, (list, tuple, set, frozenset)):
        groups = [(None, data)]
    else:
        raise TypeError(
            f"{source} must {verb} a list of operator names or a mapping of such lists; "
            f"got {type(data).__name__} {data!r:.60}"
        )
    names: list[str] = []
    for key, ops in groups:
        where = source if key is None else f"{source}, entry {key!r},"
        if ops is None:
            continue  # an empty YAML section
        if isinstance(ops, (str, bytes)) or not isinstance(ops, (list, tuple, set, frozenset)):
            raise TypeError(
                f"{where} must {verb} a list of operator names; got {type(ops).__name__} {ops!r:.60}"
            )
        for op in ops:
            if not isinstance(op, str):
                kind = type(op).__name__
                raise TypeError(
                    f"{where}: operator names are strings like 'aten::add.Tensor'; got {kind} {op!r:.60}"
                )
            names.append(op)
    return names


def _load_file(path: str) -> frozenset[str]:
    source = f"profile file {path!r}"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise ValueError(
            f"{source} is not a text file (it is not UTF-8): a profile file is YAML or JSON "
            "holding a list of operator names or a mapping of such lists"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{source} is not valid YAML or JSON: {e}") from e
    try:
        names = _names_in(data, source, "hold")
    except TypeError as e:
        raise ValueError(str(e)) from None  # the file, not the argument, has the wrong shape
    return _check_names(names, source)


def _resolve(profile: Profile) -> tuple[str, frozenset[str]]:
    """Return ``(name, ops)`` for a profile given in any accepted form."""
    if isinstance(profile, (str, os.PathLike)):
        text = os.fspath(profile)
        if isinstance(text, bytes):
            raise TypeError(f"a profile path must be text, got the bytes path {text!r}")
        if isinstance(profile, str) and text in BUILTIN_PROFILES:
            return text, profile_ops(text)
        if os.path.isfile(text):
            # The name is shown and recorded (a mark): a file name's undecodable bytes become U+FFFD.
            name = re.sub("[\ud800-\udfff]", "\ufffd", os.path.basename(text))
            return name, _load_file(text) | _minimal()
        if os.path.isdir(text):
            raise ValueError(f"profile {text!r} is a directory: {_forms()}")
        hint = ""
        if "::" in text:
            hint = f" (for one operator, pass a list: [{text!r}])"
        elif text.endswith((".yaml", ".yml", ".json")) or os.sep in text:
            hint = " (no such file)"
        raise ValueError(f"unknown profile {text!r}{hint}: {_forms()}")
    if isinstance(profile, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"a profile cannot be {type(profile).__name__} (decode it to a name or a path first): {_forms()}"
        )
    if isinstance(profile, Mapping):
        names = _names_in(profile, "profile")
    else:
        try:
            names = list(profile)
        except TypeError:
            raise TypeError(f"a profile cannot be {type(profile).__name__}: {_forms()}") from None
        names = _names_in(names, "profile")
    return "custom", _check_names(names, "profile") | _minimal()


def resolve_profile(profile: Profile) -> tuple[str, frozenset[str]]:
    """``(name, ops)`` of a profile in any form ``use_profile`` accepts: a built-in name, a file's
    base name or ``"custom"`` for a list or mapping, and its operators. Raises the ``TypeError`` or
    ``ValueError`` ``use_profile`` would."""
    if isinstance(profile, str) and profile in BUILTIN_PROFILES:
        return profile, profile_ops(profile)
    return _resolve(profile)


def profile_ops(profile: Profile) -> frozenset[str]:
    """Return the operators (``aten::add.Tensor``, ...) that ``profile`` runs natively."""
    if isinstance(profile, str) and profile in BUILTIN_PROFILES:
        if profile == "minimal":
            return _minimal()
        if profile == "default":
            return frozenset(native_ops())
        return _backend_ops(_BACKEND_KEYS[profile]) | _minimal()
    return _resolve(profile)[1]


def _runs_on_cpu(op: str) -> bool:
    return _lookup.has_computed_kernel(op, "CPU")  # Note [Operator names torch cannot parse]


def _generic_eligible(op: str) -> bool:
    """Whether the generic native path can run ``op``: it reaches the backend and has a CPU kernel."""
    return not _lookup.has_kernel(op, "CompositeImplicitAutograd") and _runs_on_cpu(op)


def _has_composite(op: str) -> bool:
    """Whether ``op`` has a composite kernel the dispatcher would use for a backend without its own."""
    return any(
        _lookup.has_kernel(op, key)
        for key in (
            "CompositeExplicitAutogradNonFunctional",
            "CompositeExplicitAutograd",
            "CompositeImplicitAutograd",
        )
    )


def _check_composite_route(ops: Iterable[str]) -> None:
    """The composite kernels are reached through PrivateUse3 (Note [Profiles]): it must be unused."""
    key = torch._C.DispatchKey.PrivateUse3
    used = torch._C._dispatch_has_backend_fallback(key) or any(
        _lookup.has_kernel(op, "PrivateUse3") for op in ops
    )
    if used:
        raise RuntimeError(
            "profiles reach composite kernels through the PrivateUse3 dispatch key, "
            "but something in this process registered kernels for it"
        )


def _registered_elsewhere(op: str) -> bool:
    """A PrivateUse1 kernel registered by torch or ``torch.library``, which profiles leave alone."""
    overridden = _active is not None and op in _active.overridden()
    return not overridden and _lookup.has_kernel(op, "PrivateUse1")


def _plan(ops: frozenset[str]) -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
    """Split a profile into the C++ lists (Note [Profiles]): hand-written ops to fall back, hand-written
    ops to send to their composite, ops to run generically, and every op covered natively."""
    hand_written = frozenset(native_ops())
    fixed = _minimal() | frozenset(via_cpu_ops()) | _convolution_hooks()
    lacking = hand_written - fixed - ops
    composite = frozenset(op for op in lacking if _has_composite(op))
    _check_composite_route(composite)
    fallback = frozenset(lacking - composite)
    generic = frozenset(
        op
        for op in ops - hand_written - fixed
        if op in _registered() and _generic_eligible(op) and not _registered_elsewhere(op)
    )
    covered = generic | frozenset(op for op in (ops & hand_written) - fixed if _runs_on_cpu(op))
    # The boxed fallback is their kernel already, and it asks whether the profile covers them.
    covered |= frozenset(op for op in ops & frozenset(fallback_routes()) if _generic_eligible(op))
    covered |= ops & _convolution_hooks()
    return fallback, composite, generic, covered


def set_profile(profile: Profile | None) -> None:
    """Activate ``profile`` for every thread at once (``None`` or ``"default"``: openreg's own kernels).

    Raises ``ValueError`` for an unknown profile name or operator, before changing anything.
    """
    global _active
    if profile is None or (isinstance(profile, str) and profile == "default"):
        _C.clear_profile()
        _active = None
        return
    name, ops = _resolve(profile)
    _activate(_Active(name, ops, *_plan(ops)))


def _activate(active: _Active) -> None:
    global _active
    _C.set_profile(
        active.name,
        sorted(active.fallback),
        sorted(active.composite),
        sorted(active.generic),
        sorted(active.covered),
    )
    _active = active


def get_profile() -> str | None:
    """Return the name of the active profile (a file's base name, ``"custom"`` for a list), or None."""
    return _C.profile_name()  # type: ignore[no-any-return]


def active_profile_ops() -> frozenset[str] | None:
    """Return the operators of the active profile, or None when openreg runs its own kernels."""
    return None if _active is None else _active.ops


@contextmanager
def use_profile(profile: Profile | None) -> Iterator[None]:
    """Context manager: run the block under ``profile``, then restore the previous one exactly."""
    global _active
    previous = _active
    set_profile(profile)
    try:
        yield
    finally:
        if previous is None:
            _C.clear_profile()
            _active = None
        else:
            _activate(previous)
