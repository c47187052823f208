"""The C++ extension ``openreg_lab._C``: found, checked, then loaded (the first thing the package does).

Note [The extension is checked before it is loaded]
The dynamic loader maps a shared object's segments straight from its file. If the file is shorter
than its headers say (a copy cut short, a full disk, an interrupted install), the loader maps pages
past the end of the file, and the first touch of one kills the process with SIGBUS: no exception,
no message. Under torch's autoload that is every ``import torch`` of the environment (Note [Autoload
never breaks import torch] in ``_openreg_lab_autoload.py``). So :func:`load` first reads the file's
ELF header and program headers (a few hundred bytes: 17 us on the development machine) and refuses,
with an ``ImportError`` naming the file and what is wrong, a file that is not an ELF shared object
for this interpreter (magic, class, byte order, machine, type) or whose program headers, loadable
segments or section header table lie past its end. The section header table is the last part a
linker writes, so any truncation is caught. A missing extension is named as missing (``from
openreg_lab import _C`` would call it "a circular import").

The check is structural and needs nothing from the build: a stamp of the size or a hash written by
``setup.py`` would be a second file to keep beside the extension (a copied build, a wheel) that
refuses a good extension when it goes stale, and a hash costs reading the whole 6 MB file at every
``import torch`` (5 ms for SHA-1 or SHA-256 from the page cache). What this does not catch is a
file of the right length whose bytes were changed: not what an interrupted write leaves.

Note [One extension name, two builds]
The device's functions (``csrc/python/device``) are bound into ``openreg_lab._C`` by either of two
builds: the lab's (``setup.py``: everything in ``csrc/``, the lab's functions and its table of hooks
added, Note [The lab's seam] in ``csrc/runtime/Seam.h``) or the template's alone
(``scripts/template_setup.py``, what a vendor who copies the template builds; ``make template-check``).
Both are the same module to ``openreg_lab.device``, which imports ``_C`` and calls only the device's
functions, so it needs no second import path and no test of which build it got: without the lab, the
lab's functions are simply absent, and the hooks stay null. One name also keeps one extension per
process: the two builds register the same PrivateUse1 kernels, and a process that loaded both would
register them twice.

After the load, ``_C._init()`` validates the ``OPENREG_*`` variables before anything reads the
device count (Note [The device count is fixed at its first valid reading] in
``csrc/runtime/Device.cpp``): after a failed import (torch's autoload on a bad
``OPENREG_DEVICE_COUNT``), a fixed value is honoured by the next ``import openreg_lab``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import struct
import sys
import types

_NAME = "openreg_lab._C"
_BUILD = "build it in place (python setup.py build_ext --inplace) or reinstall openreg-lab"

#: ELF's e_machine values for the machines PyTorch ships wheels for (the rest are named by number).
_MACHINES = {3: "x86", 62: "x86-64", 40: "ARM", 183: "AArch64", 21: "PowerPC64", 22: "S390", 243: "RISC-V"}
_PT_LOAD = 1
_ET_DYN = 3


def _machine_name(machine: int) -> str:
    return _MACHINES.get(machine, f"machine {machine}")


def _own_elf_ident() -> tuple[bytes, int] | None:
    """This process's ELF class and byte order (``e_ident[4:6]``) and machine, or None if unknown."""
    try:
        with open("/proc/self/exe", "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "<" if head[5] == 1 else ">"
    return head[4:6], struct.unpack_from(order + "H", head, 18)[0]


def problem(path: str) -> str | None:
    """What makes the shared object at ``path`` unsafe to load into this process, or None.

    Checks its ELF header against this interpreter's and that its program headers, loadable
    segments and section header table lie inside the file (Note [The extension is checked before it
    is loaded]).
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(64)
            if head[:4] != b"\x7fELF":
                return f"it is not an ELF shared object ({size} bytes, starting {head[:4]!r})"
            if len(head) < 6 or head[4] not in (1, 2) or head[5] not in (1, 2):
                return f"its ELF header is invalid (class and byte order {head[4:6]!r})"
            wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
            if len(head) < (64 if wide else 52):
                return f"its {size} bytes end inside its ELF header: the file is truncated"
            fields = "HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"
            (e_type, machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _) = (
                struct.unpack_from(order + fields, head, 16)
            )
            own = _own_elf_ident()
            if own is not None and (head[4:6], machine) != own:
                bits = {1: 32, 2: 64}
                return (
                    f"it was built for {bits[head[4]]}-bit {_machine_name(machine)}, and this Python is "
                    f"{bits[own[0][0]]}-bit {_machine_name(own[1])}"
                    + (", of the other byte order" if own[0][1] != head[5] else "")
                )
            if e_type != _ET_DYN:
                return f"it is not a shared object (ELF type {e_type})"
            entry = 56 if wide else 32
            if phentsize != entry or phnum == 0:
                return f"its program header table is invalid ({phnum} entries of {phentsize} bytes)"
            if phoff + phnum * entry > size:
                return (
                    f"its {size} bytes end before its program headers, which end at byte "
                    f"{phoff + phnum * entry}: the file is truncated"
                )
            f.seek(phoff)
            table = f.read(phnum * entry)
            header = order + ("IIQQQQQQ" if wide else "IIIIIIII")
            for i in range(phnum):
                values = struct.unpack_from(header, table, i * entry)
                p_type, offset, filesz = (
                    (values[0], values[2], values[5]) if wide else (values[0], values[1], values[4])
                )
                if p_type == _PT_LOAD and offset + filesz > size:
                    return (
                        f"its {size} bytes end before its loadable segment {i}, which ends at byte "
                        f"{offset + filesz}: the file is truncated"
                    )
            if shoff and shoff + max(shnum, 1) * shentsize > size:
                return (
                    f"its {size} bytes end before its section header table, which ends at byte "
                    f"{shoff + max(shnum, 1) * shentsize}: the file is truncated"
                )
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    return None


def _missing() -> ImportError:
    """The error for an extension the import system does not find in the package's directory."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    wanted = "_C" + importlib.machinery.EXTENSION_SUFFIXES[0]
    try:
        others = sorted(n for n in os.listdir(package_dir) if n.startswith("_C.") and n != wanted)
    except OSError:
        others = []
    found = f" (only {', '.join(others)}: built for another Python)" if others else ""
    return ImportError(
        f"openreg-lab's C++ extension is missing: {package_dir} has no {wanted}{found}; {_BUILD}",
        name=_NAME,
    )


def load() -> types.ModuleType:
    """Import ``openreg_lab._C`` once it has been checked, and validate the ``OPENREG_*`` variables;
    raise ``ImportError`` naming a missing or damaged extension."""
    module = sys.modules.get(_NAME)
    if module is None:  # not loaded by an earlier, failed import of the package
        spec = importlib.util.find_spec(_NAME)
        if spec is None or spec.origin is None:
            raise _missing()
        if isinstance(spec.loader, importlib.machinery.ExtensionFileLoader) and sys.platform == "linux":
            wrong = problem(spec.origin)
            if wrong is not None:
                raise ImportError(
                    f"openreg-lab's C++ extension {spec.origin} is damaged: {wrong}. It was not loaded "
                    f"(loading it could kill the process); {_BUILD}",
                    name=_NAME,
                    path=spec.origin,
                )
        try:
            module = importlib.import_module(_NAME)
        except ImportError as e:
            raise ImportError(
                f"openreg-lab's C++ extension {spec.origin} does not load: {e} (built against another "
                f"torch? {_BUILD})",
                name=_NAME,
                path=spec.origin,
            ) from e
    module._init()  # Note [The device count is fixed at its first valid reading]
    return module


#: The extension, loaded when the package's top imports this module, before anything else of ours.
C = load()
