"""Where the lab attaches to the template's ``torch.compile`` registration (Note [The lab's seam in Python]).

Note [The lab's seam in Python]
The Python counterpart of Note [The lab's seam] (``csrc/runtime/Seam.h``). What a vendor copies of
``openreg_lab/device/`` registers a device with Dynamo and Inductor and records nothing: its
Scheduling (``_inductor.OpenRegScheduling``) and Python wrapper (``_inductor.OpenRegWrapperCodegen``)
write kernels and kernel calls, no trace hooks. openreg-lab attaches its recorder here, and only
here, at registration (``_compile.register``):

- :func:`subclass`: the classes given to Inductor are the template's, or the subclasses the lab
  derives from them (``openreg_lab/recording/compiled.py``: each kernel call and graph call
  bracketed by the recorder's hooks, the ops each kernel fused);
- :func:`registered`: what runs each time the device (re)registers with a Dynamo in the process
  (the lab's compile, recompile and graph-break callbacks, which ``torch._dynamo.reset()`` clears).

Beside compilation, the labels a script names for a profiler (NVTX ranges and marks, which
``from_cuda()`` maps: ``_cuda_nvtx.py``) reach :func:`label`; the package's top gives it the lab's
``openreg_lab.mark`` through :func:`on_label` at import, as Nsight attaches to NVTX. Likewise
``torch.cuda.memory``'s history and snapshots under ``from_cuda()`` are the lab's
``openreg_lab.memory`` functions, given through :func:`on_memory`.

The defaults are no-ops: with nothing attached, the template registers its own classes and a
label goes nowhere, as NVTX's calls do with no tool attached. The lab
attaches through :func:`use_lab`, given by the package's top (``openreg_lab/__init__.py``) a loader
run once, at the first registration: the device layer never imports the recording layer
(``tests/layout/test_layers.py`` checks that no other module of ``device/`` names the recorder), and
``import openreg_lab`` stays free of Dynamo, Inductor and the recording layer. A vendor who copies
the template drops this module and the calls of it in ``_compile.py`` and ``_inductor.py``.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

#: The template's classes the lab may derive from: ``"Scheduling"``, ``"PythonWrapperCodegen"``.
SUBCLASSED = ("Scheduling", "PythonWrapperCodegen")

_lock = threading.RLock()
_loader: Callable[[], None] | None = None
_factories: dict[str, Callable[[type], type]] = {}
_made: dict[str, tuple[type, type]] = {}  # name -> (template class, the class given to Inductor)
_on_registered: list[Callable[[], None]] = []
_label: list[Callable[[str], None]] = []  # the lab's label sink, if attached
_memory: list[Callable[[str], Callable[..., Any] | None]] = []  # the lab's memory functions, if attached
_cache_key: list[Callable[[], bytes]] = []  # the lab's part of Inductor's cache key, if attached


def use_lab(loader: Callable[[], None]) -> None:
    """Run ``loader`` (which calls :func:`attach`) once, at the first registration with Dynamo.

    Given by the package's top before it registers the device; a loader given after the first
    registration never runs."""
    global _loader
    _loader = loader


def attach(
    *,
    subclasses: dict[str, Callable[[type], type]] | None = None,
    on_registered: Callable[[], None] | None = None,
    cache_key: Callable[[], bytes] | None = None,
) -> None:
    """Attach the lab: ``subclasses`` maps a name of :data:`SUBCLASSED` to a function deriving the
    class given to Inductor from the template's; ``on_registered`` runs at each registration;
    ``cache_key`` gives what Inductor's cache key must hold of the graph being compiled beside the
    code generators' files (what the lab's subclasses write into the code from the graph).

    Called by the loader of :func:`use_lab`, which runs before the first registration hands Inductor
    its classes: subclasses attached after it would reach Inductor only at a new registration."""
    with _lock:
        for name, factory in (subclasses or {}).items():
            if name not in SUBCLASSED:
                raise ValueError(f"the seam derives only {SUBCLASSED}, not {name!r}")
            _factories[name] = factory
            _made.pop(name, None)
        if on_registered is not None and on_registered not in _on_registered:
            _on_registered.append(on_registered)
        if cache_key is not None:
            _cache_key[:] = [cache_key]


def load() -> None:
    """Run the lab's loader if one was given and has not run (at the first registration)."""
    global _loader
    with _lock:
        loader, _loader = _loader, None
        if loader is not None:
            loader()


def subclass(name: str, template: type) -> type:
    """The class Inductor gets for ``name``: ``template``, or the lab's subclass of it (made once)."""
    with _lock:
        factory = _factories.get(name)
        if factory is None:
            return template
        made = _made.get(name)
        if made is None or made[0] is not template:
            made = (template, factory(template))
            _made[name] = made
        return made[1]


def registered() -> None:
    """Run what the lab runs at each registration with Dynamo (a no-op with nothing attached)."""
    for callback in list(_on_registered):
        callback()


def cache_key() -> bytes:
    """The lab's part of Inductor's cache key for the graph being compiled (empty with nothing
    attached): Note [Inductor's cache knows openreg's code generators] in ``_inductor.py``."""
    with _lock:
        return b"".join(key() for key in _cache_key)


def code_files() -> list[str]:
    """The files of the lab's attached subclass factories: what Inductor's cache is keyed on besides
    the template's own (Note [Inductor's cache knows openreg's code generators] in ``_inductor.py``)."""
    with _lock:
        return sorted({inspect.getfile(factory) for factory in _factories.values()})


def on_label(sink: Callable[[str], None]) -> None:
    """Send every :func:`label` to ``sink`` (the package's top gives ``openreg_lab.mark``)."""
    _label[:] = [sink]


def label(name: str) -> None:
    """A label the script names for a profiler (an NVTX range's start or end, or a mark): the lab's
    sink records it; with nothing attached it goes nowhere."""
    for sink in _label:
        sink(name)


def on_memory(lookup: Callable[[str], Callable[..., Any] | None]) -> None:
    """Look the lab's memory functions up with ``lookup`` (the package's top gives
    ``openreg_lab.memory``'s): ``torch.cuda.memory._snapshot`` and friends under ``from_cuda()``
    (Note [torch.cuda.memory's private names] in ``_cuda_memory.py``)."""
    _memory[:] = [lookup]


def memory_function(name: str) -> Callable[..., Any] | None:
    """The lab's memory function ``name`` (``_snapshot``, ...), or None with nothing attached."""
    for lookup in _memory:
        return lookup(name)
    return None
