"""A trace whose step 0 is mostly an import (a user line imports a module that spins at import time)
and whose later steps are short: what the timeline's opening window and folded Python lane are for."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

import openreg_lab

SPIN_S = 0.25
MODULE = "openreg_opening_slow_import"


def _import() -> None:
    importlib.import_module(MODULE)  # a library call (importlib) that imports a slow module


def opening_trace(directory: Path, steps: int = 4) -> openreg_lab.Trace:
    """Step 0 imports ``MODULE`` (SPIN_S of spinning at import time); steps 1.. are tiny ops."""
    (directory / f"{MODULE}.py").write_text(
        "import time\n\n\ndef spin(seconds):\n    end = time.perf_counter() + seconds\n"
        "    while time.perf_counter() < end:\n        pass\n\n\n"
        f"spin({SPIN_S})\n"
    )
    sys.path.insert(0, str(directory))
    x = torch.ones(4, device="openreg")
    try:
        with openreg_lab.trace() as t:
            for i in range(steps):
                if i == 0:
                    _import()
                (x + x).sum()
                openreg_lab.step()
        assert (
            t.host_samples is not None
        )  # read while the module's directory is on sys.path (its name comes from it)
        t.host_slices(), t.host_slices(library=True)
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop(MODULE, None)
    return t
