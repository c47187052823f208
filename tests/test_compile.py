"""torch.compile on openreg (issue 13, item 3): the backends that work, and a clear error for Inductor.

``backend="eager"`` and ``"aot_eager"`` capture the graph (and AOTAutograd its backward) and run it
through openreg's kernels, so their results equal eager CPU's. Inductor, the default backend, has
no code generator for openreg: it raises ``InductorUnsupportedError`` naming the working backends
(``openreg_lab/device/_compile.py``) instead of a bare ``KeyError: 'openreg'``.
"""

from __future__ import annotations

import pytest
import torch

from openreg_lab.device import InductorUnsupportedError
from tests.conftest import run_python


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2)
    )


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_working_backends_match_eager_cpu_forward_and_backward(backend):
    cpu = _model()
    dev = _model().to("openreg")
    x = torch.randn(5, 6)
    compiled = torch.compile(dev, backend=backend)
    out = compiled(x.to("openreg"))
    out.square().sum().backward()
    expected = cpu(x)
    expected.square().sum().backward()
    assert out.device.type == "openreg"
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-6)
    for p_dev, p_cpu in zip(dev.parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-6)


def test_the_default_backend_raises_naming_eager_and_aot_eager():
    compiled = torch.compile(lambda y: y * 2 + 1)
    with pytest.raises(Exception) as caught:
        compiled(torch.arange(4.0, device="openreg"))
    chain = []
    error: BaseException | None = caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(e, InductorUnsupportedError) for e in chain), [type(e) for e in chain]
    message = str(caught.value)
    assert "Inductor, cannot generate code for openreg tensors" in message
    assert "backend='eager' or backend='aot_eager'" in message
    assert "KeyError" not in message


def test_inductor_still_compiles_cpu_code_after_openreg_refused():
    with pytest.raises(Exception):  # noqa: B017
        torch.compile(lambda y: y + 1)(torch.ones(2, device="openreg"))
    torch._dynamo.reset()
    assert torch.compile(lambda y: y * 3)(torch.ones(2)).tolist() == [3.0, 3.0]


def test_importing_openreg_lab_does_not_import_inductor():
    result = run_python("import sys, openreg_lab, torch\nprint('torch._inductor' in sys.modules)")
    assert (result.returncode, result.stdout.strip()) == (0, "False"), result.stderr
