"""What each tutorial notebook shows: the views (by the CSS class of their root widget) that its
executed outputs must contain. Shared by tests/notebooks/test_notebooks.py (nbclient) and tests/browser.
"""

from __future__ import annotations

from pathlib import Path

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

VIEWS: dict[str, tuple[str, ...]] = {
    "01-tour.ipynb": ("openreg-dashboard",),
    "02-dispatch-keys.ipynb": ("openreg-dispatch-explorer",),
    "03-finding-fallbacks.ipynb": ("openreg-dashboard", "openreg-compare"),
    "04-autocast.ipynb": ("openreg-compare", "openreg-dashboard"),
    "05-writing-a-kernel.ipynb": ("openreg-compare", "openreg-coverage"),
    "06-emulating-a-backend.ipynb": ("openreg-compare", "openreg-coverage"),
    "07-compile.ipynb": ("openreg-compare", "openreg-dashboard"),
    "08-distributed.ipynb": ("openreg-dashboard",),
    "09-porting-a-hugging-face-model.ipynb": ("openreg-dashboard", "openreg-compare"),
    "10-where-memory-goes.ipynb": ("openreg-dashboard",),
}
ALL_VIEW_CLASSES = frozenset(c for classes in VIEWS.values() for c in classes)
