"""Run a function of ours right after a given module of another package is imported.

Note [Acting on a module when it is imported]
Some libraries learn about devices only from their own code: PyTorch Lightning fills its accelerator
registry from its own classes when it is imported, and has no entry point for another package's
accelerator (``_lightning.py``). Importing such a library from :mod:`openreg_lab` would cost every
``import torch`` its import time (torch's autoload imports :mod:`openreg_lab`; Note [The package
loads its API on first use]), so openreg-lab waits for the user to import it instead:
:func:`when_imported` puts one finder first on ``sys.meta_path``. Asked for a module it watches, the
finder asks the finders after it for the module's spec and wraps the spec's loader, so the action
runs right after the module's code, in the same import; asked for any other name it answers None
at the cost of one dict lookup. The module keeps its own loader as ``__loader__`` and
``__spec__.loader``.

An action is named as ``"package.module:function"`` and imported only when its module is, so that
watching costs nothing else. It is given the module. An exception in it never fails the user's
import: it becomes one RuntimeWarning naming the module, the action and the cause. A module already
imported when it is watched is acted on at once; one whose code is running (imported further up the
stack: its import cannot be wrapped any more) is said in such a warning, never silently missed.

An action's own module may be the one importing the watched module: Lightning imported by the
import of ``_lightning_pytorch.py``, whose classes derive from Lightning's, before any other import
of Lightning (``pickle`` finding that module's class first, a test importing every module). The
action then finds its module half-made, its function not yet defined, so it waits: an action module
that imports what it watches ends with ``done(__name__)``, which runs the actions waiting for it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_lock = threading.Lock()
#: module name -> the actions still to run when it is imported, as ``"package.module:function"``
_watched: dict[str, list[str]] = {}
_searching = threading.local()  # names this thread is looking up through the other finders
#: action module -> (the watched module, the action) waiting for the action module's ``done()``
_waiting: dict[str, list[tuple[ModuleType, str]]] = {}


def when_imported(module: str, action: str) -> None:
    """Run ``action`` (``"package.module:function"``, called with the module) right after
    ``module`` is imported, or now if it already is (Note [Acting on a module when it is imported]).
    Each (module, action) pair runs once per process."""
    with _lock:
        loaded = sys.modules.get(module)
        if loaded is None:
            actions = _watched.setdefault(module, [])
            if action not in actions:
                actions.append(action)
            if not any(isinstance(f, _Finder) for f in sys.meta_path):
                sys.meta_path.insert(0, _Finder())
            return
    if getattr(getattr(loaded, "__spec__", None), "_initializing", False):
        _warn(module, action, "it was being imported when openreg-lab loaded; import openreg_lab first")
        return
    _act(loaded, [action])


def done(name: str) -> None:
    """Run the actions waiting for their module ``name``, which calls this at its end (the Note)."""
    with _lock:
        waiting = _waiting.pop(name, [])
    for module, action in waiting:
        _call(sys.modules[name], module, action)


def _act(module: ModuleType, actions: list[str]) -> None:
    for action in actions:
        target = action.partition(":")[0]
        half_made = sys.modules.get(target)
        if half_made is not None and getattr(half_made.__spec__, "_initializing", False):
            with _lock:
                _waiting.setdefault(target, []).append((module, action))
            continue
        try:
            owner = importlib.import_module(target)
        except Exception as e:
            _warn(module.__name__, action, f"{type(e).__name__}: {e}")
            continue
        _call(owner, module, action)


def _call(owner: ModuleType, module: ModuleType, action: str) -> None:
    """Call ``action``'s function, found in its module ``owner``, with the watched ``module``."""
    try:
        getattr(owner, action.partition(":")[2])(module)
    except Exception as e:
        _warn(module.__name__, action, f"{type(e).__name__}: {e}")


def _warn(module: str, action: str, cause: str) -> None:
    first = cause.strip().splitlines()[0] if cause.strip() else "no message"
    warnings.warn(
        f"openreg-lab could not adapt {module} to openreg ({action}: {first}); {module} works as it "
        "would without openreg-lab",
        RuntimeWarning,
        stacklevel=3,
    )


class _Finder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: wraps the loader of each watched module, answers None for others."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if fullname not in _watched:
            return None
        searching = _searching.__dict__.setdefault("names", set())
        if fullname in searching:
            return None
        searching.add(fullname)
        try:
            spec = self._others_spec(fullname, path, target)
        finally:
            searching.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenAct(spec.loader, fullname)
        return spec

    def _others_spec(self, fullname: str, path: Any, target: Any) -> ModuleSpec | None:
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec
        return None


class _ThenAct:
    """A module's own loader, then the actions watching it (any other attribute is the loader's)."""

    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        with _lock:
            actions = _watched.pop(self.name, [])
        _act(module, actions)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)
