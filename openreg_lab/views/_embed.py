"""Putting data into a page safely: the one way views embed JSON in ``<script>`` and strings in
plotly's text (Note [Strings reaching a page]).

# Note [Strings reaching a page]
# Marks, op and kernel names, dispatch keys, source paths, dtypes, run info and profile names come
# from users (or from a trace file anyone may send): every one of them must reach a page as inert
# text. Three places interpret what they are given:
#
# * HTML markup and attributes: ``html.escape`` (quotes included), as ``static.py`` does.
# * A ``<script>`` element: the HTML parser ends it at the first ``</script`` (case-insensitive)
#   whatever JavaScript thinks, and ``<!--`` changes how it looks for the end. ``script_json``
#   writes JSON with ``<``, ``>`` and ``&`` as ``\\u003c``-style escapes (JavaScript reads the same
#   string; the HTML parser never sees a tag) and only ASCII, so a lone surrogate or U+2028 cannot
#   break the file's encoding or the script either.
# * The file's encoding: a lone surrogate (a file name's undecodable byte) has no UTF-8 form.
#   Markup (``plain_text``, over the whole page) and plotly's text (``plotly_text``) show it as its
#   escape, the six characters ``\\udcXX`` (``recording.text.visible``); the script's data keeps
#   it (JSON's escape of it), which the browser draws as U+FFFD.
# * plotly's text (hover text, tick and node labels): plotly.js reads a subset of HTML there
#   (``<b>``, ``<br>``, ``<a href>``, ``<span style>``) and decodes entities. ``plotly_text``
#   escapes a string so it shows as itself; templates (``hovertemplate``) carry data only through
#   ``%{customdata}``, never by pasting a string into the template, which would interpret ``%{``.
"""

from __future__ import annotations

import html
import json
from typing import Any

from openreg_lab.recording.text import visible

_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


def script_json(value: Any) -> str:
    """``value`` as JSON text that may sit inside a ``<script>`` element (Note [Strings reaching a
    page]): the same value to JavaScript, no markup to the HTML parser, ASCII only."""
    return json.dumps(value, ensure_ascii=True).translate(_SCRIPT_ESCAPES)


def plotly_text(s: object) -> str:
    """``s`` as plotly text that displays as itself (Note [Strings reaching a page])."""
    # Numeric entities for quotes: plotly.js decodes those, but shows "&quot;" as it is.
    return html.escape(visible(str(s)), quote=False).replace('"', "&#34;").replace("'", "&#39;")


def plain_text(s: str) -> str:
    """``s`` with each lone surrogate (which no UTF-8 file or page can hold) as its escape, the six
    characters ``\\udcXX`` (Note [Strings reaching a page])."""
    return visible(s)
