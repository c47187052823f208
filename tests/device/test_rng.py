"""One generator per device; seeds give the same numbers as on CPU."""

import pytest
import torch


def test_same_seed_same_numbers():
    torch.manual_seed(123)
    a = torch.randn(64, device="openreg").cpu()
    torch.manual_seed(123)
    b = torch.randn(64, device="openreg").cpu()
    assert torch.equal(a, b)
    c = torch.randn(64, device="openreg").cpu()
    assert not torch.equal(a, c)


def test_matches_cpu_for_the_same_seed():
    torch.manual_seed(7)
    cpu = [torch.randn(50), torch.rand(50), torch.randint(0, 10, (50,))]
    torch.manual_seed(7)
    dev = [
        torch.randn(50, device="openreg"),
        torch.rand(50, device="openreg"),
        torch.randint(0, 10, (50,), device="openreg"),
    ]
    for c, d in zip(cpu, dev, strict=True):
        assert torch.equal(c, d.cpu())


def test_openreg_manual_seed_is_per_device():
    torch.openreg.manual_seed_all(5)
    with torch.openreg.device(1):
        torch.openreg.manual_seed(99)
        x1 = torch.randn(8, device="openreg").cpu()
    x0 = torch.randn(8, device="openreg:0").cpu()
    torch.openreg.manual_seed_all(5)
    assert torch.equal(torch.randn(8, device="openreg:0").cpu(), x0)
    torch.openreg.manual_seed(5)
    with torch.openreg.device(1):
        torch.openreg.manual_seed(99)
        assert torch.equal(torch.randn(8, device="openreg").cpu(), x1)
    assert torch.openreg.initial_seed() == 5


def test_rng_state_round_trip():
    torch.openreg.manual_seed(1)
    state = torch.openreg.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.rand(10, device="openreg").cpu()
    torch.openreg.set_rng_state(state)
    assert torch.equal(torch.rand(10, device="openreg").cpu(), a)
    states = torch.openreg.get_rng_state_all()
    assert len(states) == 2
    b = [torch.rand(3, device=f"openreg:{i}").cpu() for i in range(2)]
    torch.openreg.set_rng_state_all(states)
    assert all(torch.equal(torch.rand(3, device=f"openreg:{i}").cpu(), b[i]) for i in range(2))
    with pytest.raises(ValueError, match="expected 2 states"):
        torch.openreg.set_rng_state_all(states[:1])


def test_explicit_generator():
    g = torch.Generator(device="openreg")
    assert g.device == torch.device("openreg", 0)
    g.manual_seed(3)
    a = torch.randn(5, device="openreg", generator=g).cpu()
    g.manual_seed(3)
    b = torch.empty(5, device="openreg").normal_(generator=g).cpu()
    assert torch.equal(a, b)
    with pytest.raises(RuntimeError, match="expected an openreg generator"):
        torch.empty(5, device="openreg").normal_(generator=torch.Generator())


def test_seed_functions():
    torch.openreg.seed()
    s = torch.openreg.initial_seed()
    torch.openreg.seed_all()
    assert (
        torch.openreg.default_generators[0].initial_seed()
        == torch.openreg.default_generators[1].initial_seed()
    )
    assert isinstance(s, int)


def test_in_place_samplers_and_dropout_follow_seed():
    def draw():
        torch.manual_seed(11)
        x = torch.empty(200, device="openreg")
        return [
            x.clone().uniform_(-2, 3).cpu(),
            x.clone().bernoulli_(0.3).cpu(),
            x.clone().exponential_(2.0).cpu(),
            torch.nn.functional.dropout(torch.ones(200, device="openreg"), 0.5).cpu(),
        ]

    first, second = draw(), draw()
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    assert -2 <= first[0].min() and first[0].max() <= 3
    assert set(first[1].unique().tolist()) <= {0.0, 1.0}


def test_fallback_random_ops_use_openreg_generator():
    # multinomial has no openreg kernel: it runs through the CPU fallback, which must
    # still sample with openreg's generator.
    probs = torch.rand(10, device="openreg")
    torch.openreg.manual_seed(4)
    a = torch.multinomial(probs, 5).cpu()
    torch.openreg.manual_seed(4)
    b = torch.multinomial(probs, 5).cpu()
    assert torch.equal(a, b)
