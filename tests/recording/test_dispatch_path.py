"""The recorder reads an operator's dispatch table through the dispatcher's structured API
(csrc/trace/DispatchPath.cpp, Note [Classifying a table entry]); here it must agree, key by key,
with the table the dispatcher itself prints (`dumpComputedTable`), for every registered operator,
with and without a coverage profile swapping openreg's kernels.
"""

from __future__ import annotations

import pytest
import torch

import openreg_lab
from openreg_lab import _C

# dumpComputedTable's bracketed kinds, as the recorder groups them. A "nested kernel"
# (CompositeImplicitAutogradNestedTensor) is a decomposition like a math kernel; any other kind
# ("kernel", "autograd kernel", "ambiguous autogradother") is a kernel that runs.
_KINDS = {
    "math kernel": "math kernel",
    "nested kernel": "math kernel",
    "default backend kernel": "default backend kernel",
    "backend fallback": "backend fallback",
}


def printed_table(name: str) -> dict[str, str]:
    """The dispatcher's own text, one key per line: 'Key: [fallthrough ]registered at ... [kind]'."""
    table = {}
    for line in torch._C._dispatch_dump_table(name).splitlines():
        key, _, rest = line.partition(": ")
        if not rest or key == "Undefined":
            continue
        kind = rest[rest.rindex("[") + 1 : -1]
        table[key] = "fallthrough" if rest.startswith("fallthrough ") else _KINDS.get(kind, "kernel")
    return table


def structured_table(name: str) -> dict[str, str]:
    op, _, overload = name.partition(".")
    lines = _C._dispatch_table_kinds(op, overload).splitlines()
    return dict(line.split(": ", 1) for line in lines)


def _mismatches() -> list[str]:
    bad = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        printed, structured = printed_table(name), structured_table(name)
        if printed != structured:
            keys = sorted(
                k for k in printed.keys() | structured.keys() if printed.get(k) != structured.get(k)
            )
            bad.append(
                f"{name}: " + ", ".join(f"{k} {printed.get(k)} != {structured.get(k)}" for k in keys[:4])
            )
    return bad


def test_every_operator_table_reads_the_same_as_the_dispatcher_prints_it():
    names = torch._C._dispatch_get_all_op_names()
    assert len(names) > 2000
    assert _mismatches() == []


@pytest.mark.parametrize("profile", ["mps", "cuda", "minimal"])
def test_tables_agree_under_a_profile(profile):
    with openreg_lab.use_profile(profile):
        assert _mismatches() == []


def test_the_kinds_the_recorder_relies_on():
    add = structured_table("aten::add.Tensor")
    assert add["PrivateUse1"] == "kernel"  # csrc/aten/native/Binary.cpp
    assert add["AutogradPrivateUse1"] == "kernel"  # the autograd kernel
    assert add["AutocastPrivateUse1"] == "fallthrough"  # a fallthrough backend fallback
    assert add["ADInplaceOrView"] == "fallthrough"
    median = structured_table("aten::median")
    assert median["PrivateUse1"] == "backend fallback"  # openreg's CPU fallback
    linear = structured_table("aten::linear")
    assert linear["PrivateUse1"] == "math kernel"  # CompositeImplicitAutograd
    assert linear["AutogradPrivateUse1"] == "math kernel"


def test_an_unknown_operator_has_no_table():
    assert _C._dispatch_table_kinds("aten::no_such_op") == ""
