"""The events' kinds as small integer codes, read once: masks by kind on a big trace.

Note [Kinds read once]
``events["kind"] == "copy"`` compares every row's string: on a trace of 2M events one such mask
cost 60 ms on the object array and 230 ms through pandas' string column, and the verdict asked for
about twenty (3.8 s of verdict on a 1M-op trace, before). ``Kinds`` hashes the column once into
codes (``pd.factorize``: one pass, about 150 ms on 2M rows), after which each mask is a compare of
integers (1-2 ms). Build one per events table and hand it to whatever reads that table's kinds
(``verdict`` passes its own to ``steps.table``, ``analysis.fallbacks`` and ``accounting.account``);
a ``Kinds`` speaks for the rows of the table it was built from, in their order, and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd


class Kinds:
    """Per row of an events table, its kind as a code; ``mask("copy", "cast")`` is the rows of
    those kinds (a name the table never holds matches no row)."""

    def __init__(self, kind: pd.Series | np.ndarray) -> None:
        values = kind.to_numpy() if isinstance(kind, pd.Series) else np.asarray(kind)
        codes, uniques = pd.factorize(values)
        self.codes = codes.astype(np.int16, copy=False) if len(uniques) < 2**15 else codes
        self._code = {str(u): i for i, u in enumerate(uniques)}

    @classmethod
    def of(cls, events: pd.DataFrame, given: Kinds | None = None) -> Kinds:
        """``given`` when a caller read the kinds of ``events`` already, else read them now."""
        if given is None:
            return cls(events["kind"])
        if len(given) != len(events):
            raise ValueError(
                f"these kinds were read from a table of {len(given):,} events, not of this one "
                f"({len(events):,}): build Kinds(events['kind']) from the table they describe"
            )
        return given

    def __len__(self) -> int:
        return len(self.codes)

    def mask(self, *names: str) -> np.ndarray:
        """The rows whose kind is one of ``names``."""
        codes = [self._code[n] for n in names if n in self._code]
        if not codes:
            return np.zeros(len(self.codes), dtype=bool)
        if len(codes) == 1:
            return self.codes == codes[0]
        return np.isin(self.codes, codes)

    def any(self, name: str) -> bool:
        """Whether any row is of kind ``name``."""
        return bool(self.mask(name).any())

    def take(self, rows: np.ndarray | Iterable[int]) -> Kinds:
        """The kinds of these rows only (a window of the table), in that order."""
        out = Kinds.__new__(Kinds)
        out.codes = self.codes[np.asarray(rows)]
        out._code = self._code
        return out
