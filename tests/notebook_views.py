"""What each tutorial notebook shows: the views (by the CSS class of their root widget) that its
executed outputs must contain. Shared by tests/test_notebooks.py (nbclient) and tests/browser.

The notebooks use the views API (``openreg_lab.views``, ``Trace.show``, ``openreg_lab.mark``);
``VIEWS_AVAILABLE`` is false on a checkout without it, where running them is skipped, saying so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

VIEWS: dict[str, tuple[str, ...]] = {
    "01-tour.ipynb": ("openreg-dashboard",),
    "02-dispatch-keys.ipynb": ("openreg-dispatch-explorer",),
    "03-finding-fallbacks.ipynb": ("openreg-dashboard", "openreg-compare"),
    "04-autocast.ipynb": ("openreg-compare", "openreg-dashboard"),
    "05-writing-a-kernel.ipynb": ("openreg-compare", "openreg-coverage"),
    "06-emulating-a-backend.ipynb": ("openreg-compare", "openreg-coverage"),
}
ALL_VIEW_CLASSES = frozenset(c for classes in VIEWS.values() for c in classes)

VIEWS_AVAILABLE = importlib.util.find_spec("openreg_lab.views") is not None
NO_VIEWS = "the notebooks need openreg_lab.views (the views branch), which this checkout does not have"
