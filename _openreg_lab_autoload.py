"""torch's autoload of openreg-lab: the target of the ``torch.backends`` entry point (``pyproject.toml``).

Where openreg-lab is installed, ``import torch`` calls :func:`load` at its end (PyTorch's device
backend autoload; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` switches it off), so that ``torch.ones(2,
device="openreg")`` works with no ``import openreg_lab``. Loading registers the device only (Note
[The package loads its API on first use] in ``openreg_lab/__init__.py``), and never Dynamo,
Inductor or more of ``torch.distributed`` than ``import torch`` itself loads.

Note [Autoload never breaks import torch]
torch turns an exception from a backend's entry point into a failed ``import torch``, which would
stop every torch program in the environment, including those that never use openreg. So this
module lives outside the package (importing it cannot fail the way ``import openreg_lab`` can),
and :func:`load` turns a failure into a warning naming the cause and the switch. A failure no
``except`` can catch is prevented before it happens: the package checks its C++ extension before
loading it, since a truncated one would kill the process with SIGBUS (Note [The extension is
checked before it is loaded] in ``openreg_lab/_extension.py``). After a warning, fixing the cause
and ``import openreg_lab`` registers the device in the same process, a corrected
``OPENREG_DEVICE_COUNT`` included (Note [The device count is fixed at its first valid reading] in
``csrc/runtime/Device.cpp``).
"""

from __future__ import annotations

import time
import warnings

#: How long the last :func:`load` took, in seconds (read by ``benchmarks/bench_autoload.py``).
seconds: float | None = None


def load() -> None:
    """Import :mod:`openreg_lab` (registers ``openreg``); on failure, warn instead of raising."""
    global seconds
    start = time.perf_counter()
    try:
        import openreg_lab  # noqa: F401
    except Exception as e:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else "no message"
        warnings.warn(
            f"openreg-lab could not register the openreg device on `import torch` "
            f"({type(e).__name__}: {cause}); torch works without it. Fix the cause, or set "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0 to skip loading device backends on `import torch`",
            RuntimeWarning,
            stacklevel=2,
        )
    finally:
        seconds = time.perf_counter() - start
