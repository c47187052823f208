"""The list of operators openreg implements natively (``native_ops.yaml``)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml


@cache
def native_ops_by_family() -> dict[str, tuple[str, ...]]:
    """Return ``{family: (op, ...)}`` from ``native_ops.yaml``, in file order."""
    text = resources.files("openreg_lab").joinpath("native_ops.yaml").read_text()
    data = yaml.safe_load(text)
    return {family: tuple(ops or ()) for family, ops in data.items()}


def native_ops() -> list[str]:
    """Return every operator (``aten::name.overload``) with a hand-written openreg kernel, sorted."""
    return sorted({op for ops in native_ops_by_family().values() for op in ops})
