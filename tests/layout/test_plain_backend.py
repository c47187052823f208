"""csrc/distributed is a plain c10d backend a vendor reads in one sitting; the lab's checked
collectives (csrc/checked/, Note [Checked collectives]) wrap it from outside."""

from __future__ import annotations

import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2] / "csrc"
LAB_TERMS = re.compile(r"agree|decoy|watchdog|ahead", re.IGNORECASE)


def _sources(folder: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((CSRC / folder).glob("*")) if p.suffix in (".h", ".cpp")}


def test_the_backend_names_no_recorder_and_no_agreement() -> None:
    texts = _sources("distributed")
    assert {"Backend.cpp", "Backend.h", "Work.cpp", "Work.h"} <= texts.keys()
    for name, text in texts.items():
        assert not re.search(r'#\s*include\s+"(trace|checked)/', text), f"{name} includes the lab"
        assert "trace::" not in text and "checked::" not in text, f"{name} names the lab"
    backend = texts["Backend.cpp"]
    assert len(backend.splitlines()) <= 320
    assert LAB_TERMS.findall(backend) == []


def test_the_checked_collectives_wrap_any_backend() -> None:
    header = _sources("checked")["CheckedBackend.h"]
    assert "c10::intrusive_ptr<c10d::Backend> inner" in header  # any c10d::Backend, not ogloo's class
    assert "distributed::Backend" not in header
