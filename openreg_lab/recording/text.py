"""Strings no UTF-8 file can hold, written as their escapes: ``visible``.

A file name whose bytes are not UTF-8 (a directory ``b"caf\\xe9"``) reaches Python with each
undecodable byte as a lone surrogate (``"caf\\udce9"``, the ``surrogateescape`` error handler). The
recorder and the host sampler keep such strings as they are, and a trace file stores them losslessly
(JSON's ``\\udce9`` escape); what is meant to be read by a person (a page, a terminal, Perfetto's
protobuf) shows each as the six characters ``\\udce9`` instead of failing to encode it.
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def visible(text: str) -> str:
    """``text`` with each lone surrogate as its escape, the six characters ``\\udcXX``: text any
    UTF-8 file, page or terminal holds, showing what was there."""
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
