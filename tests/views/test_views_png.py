"""Opt-in PNGs: off by default (no seconds added to a display), on with kaleido and a Chrome."""

from __future__ import annotations

import base64
import sys

import pytest
import torch

import openreg_lab
from openreg_lab.views import png


@pytest.fixture
def small_trace():
    x = torch.randn(64, device="openreg")
    with openreg_lab.trace() as t:
        torch.logcumsumexp(x, 0)
        x * 2
    return t


def test_pngs_are_off_by_default(small_trace):
    assert not png.enabled()
    assert "image/png" not in small_trace._repr_mimebundle_()


def test_enabling_without_kaleido_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "kaleido", None)
    with pytest.raises(RuntimeError, match=r"pip install 'openreg-lab\[png\]'"):
        png.enable()
    assert not png.enabled()


def test_enabled_pngs_are_real_images_of_the_chart(small_trace, monkeypatch):
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    png.enable()
    try:
        bundle = small_trace._repr_mimebundle_()
    finally:
        png.enable(False)
    data = base64.b64decode(bundle["image/png"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert "text/html" in bundle and "application/vnd.jupyter.widget-view+json" in bundle
