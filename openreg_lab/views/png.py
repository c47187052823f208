"""Opt-in ``image/png`` for the views' charts, drawn by kaleido (which drives a Chrome).

A PNG beside the live widget lets a notebook read well where neither JavaScript nor a kernel runs
(GitHub's renderer, some exporters). It is not free: kaleido 1.x takes about 3 s per image on 2
cores (measured: ``BROWSER_PATH=/usr/bin/chromium`` and a 700x300 bar chart, three runs, 3.1 to 3.6
s), so it is off by default and never on the path of an ordinary display::

    openreg_lab.views.png.enable()     # every view displayed from now on carries an image/png
"""

from __future__ import annotations

import base64
import os
import shutil
from typing import Any

_enabled = False


def enable(on: bool = True) -> None:
    """Turn PNGs on (or off) for every view displayed from now on.

    Raises ``RuntimeError`` naming the fix when kaleido or a Chrome to drive is missing.
    """
    global _enabled
    if on:
        try:
            import kaleido  # noqa: F401
        except ImportError:
            raise RuntimeError(
                "PNG images of the views need kaleido: "
                "pip install 'openreg-lab[png]' (or pip install kaleido)"
            ) from None
        if "BROWSER_PATH" not in os.environ:
            found = shutil.which("chromium") or shutil.which("google-chrome") or shutil.which("chrome")
            if found is None:
                raise RuntimeError(
                    "PNG images of the views need a Chrome for kaleido: install chromium, or set "
                    "BROWSER_PATH to a Chrome executable"
                )
            os.environ["BROWSER_PATH"] = found
    _enabled = on


def enabled() -> bool:
    """Whether the views add an ``image/png`` to their mimebundle."""
    return _enabled


def add_png(bundle: dict[str, Any], figure: Any, width: int = 900, height: int = 420) -> dict[str, Any]:
    """Add ``figure`` (a plotly figure) to ``bundle`` as base64 ``image/png`` when PNGs are enabled."""
    if _enabled and figure is not None:
        png = figure.to_image(format="png", width=width, height=height)
        bundle["image/png"] = base64.b64encode(png).decode()
    return bundle
