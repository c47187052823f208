"""The events' kinds as small integer codes, read once: masks by kind on a big trace.

Note [Kinds read once]
``events["kind"] == "copy"`` compares every row's string: on a trace of 2M events one such mask
cost 60 ms on the object array and 230 ms through pandas' string column, and the verdict asked for
about twenty (3.8 s of verdict on a 1M-op trace, before). ``Kinds`` hashes the column once into
codes (``pd.factorize``: one pass, about 150 ms on 2M rows), after which each mask is a compare of
integers (1-2 ms). Build one per events table and hand it to whatever reads that table's kinds
(``verdict`` passes its own to ``steps.table``, ``analysis.fallbacks`` and ``accounting.account``);
a ``Kinds`` speaks for the rows of the table it was built from, in their order, and nothing else.

The other string columns are read the same way, once each: ``strings(events, "name")`` hashes a
column into codes on first use and keeps them, so the dashboard's Pyramid (kind, name, kernel), its
op table (name, device, kernel, dispatch) and its dispatch flows (dispatch, kernel) hash each column
of a big trace once between them instead of once each (the dashboard of a 1M-op trace hashed 1.68M
strings nine times before). A subset of rows (``rows=``, the op rows) gets its codes renumbered in
order of first appearance within it, exactly what ``pd.factorize`` of that subset returns, so a
table whose ties break by code order is the same whichever way its codes were read. The timeline
draws the events and then the host slices (``host.with_events``): ``extended`` gives the kinds of
that longer table from the events', hashing only the rows after them, so the dashboard of a trace
with host samples hashes each column of its events once too, not once more for its timeline.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd


class Kinds:
    """Per row of an events table, its kind as a code; ``mask("copy", "cast")`` is the rows of
    those kinds (a name the table never holds matches no row)."""

    #: For ``extended`` kinds: the Kinds of the table's first rows, that table, and its length.
    _head: tuple[Kinds, pd.DataFrame, int] | None = None

    def __init__(self, kind: pd.Series | np.ndarray) -> None:
        values = kind.to_numpy() if isinstance(kind, pd.Series) else np.asarray(kind)
        codes, uniques = pd.factorize(values)
        self.codes = codes.astype(np.int16, copy=False) if len(uniques) < 2**15 else codes
        self._code = {str(u): i for i, u in enumerate(uniques)}
        self._strings: dict[str, tuple[np.ndarray, np.ndarray]] = {}

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
        out._strings = {}
        return out

    def extended(self, events: pd.DataFrame, table: pd.DataFrame) -> Kinds:
        """The kinds of ``table``, a table whose first rows are ``events`` (the table these kinds
        were read from), in order, and then more (``host.with_events``: the host slices after the
        events). Only the rows after ``events`` are hashed, their kinds now and a string column when
        first asked for; its codes and labels are what hashing all of ``table`` gives (Note [Kinds
        read once]), and the codes of ``events``' rows are this Kinds' own, shared with its tables."""
        Kinds.of(events, self)
        n = len(events)
        if len(table) < n:
            raise ValueError(
                f"a table of {len(table):,} rows does not begin with these {n:,} events: extend the "
                "kinds of a table only to one that holds it and then more rows (host.with_events)"
            )
        tail = Kinds(table["kind"].iloc[n:].to_numpy())  # (the tail alone: a column copies whole)
        code = dict(self._code)
        for label in tail._code:
            code.setdefault(label, len(code))
        renumber = np.array([code[label] for label in tail._code], dtype=np.int64)
        out = Kinds.__new__(Kinds)
        codes = np.concatenate([self.codes.astype(np.int64), renumber[tail.codes]])
        out.codes = codes.astype(np.int16, copy=False) if len(code) < 2**15 else codes
        out._code = code
        out._strings = {}
        out._head = (self, events, n)
        return out

    def _extend_strings(self, table: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
        """``column``'s codes and labels over all of an extended table (``extended``): the head's
        from its own Kinds, the rest hashed here and numbered after them, the missing value last."""
        head, events, n = self._head
        codes, labels = head.strings(events, column)
        missing = bool(len(labels)) and bool(pd.isna(labels[-1]))  # labels are never missing but the last
        known = labels[:-1] if missing else labels
        tail_codes, tail_labels = pd.factorize(table[column].iloc[n:].to_numpy())
        index = {label: i for i, label in enumerate(known.tolist())}
        new = [label for label in tail_labels.tolist() if label not in index]
        for label in new:
            index[label] = len(index)
        out = np.empty(len(index) + (1 if missing or (tail_codes < 0).any() else 0), dtype=object)
        out[: len(known)] = known
        out[len(known) : len(index)] = new
        if len(out) > len(index):
            out[-1] = np.nan
        mapped = np.array([index[label] for label in tail_labels.tolist()] + [len(index)], dtype=np.int64)
        head_codes = np.where(codes == len(known), len(index), codes) if missing else codes
        joined = np.concatenate([head_codes.astype(np.int64), mapped[tail_codes]])
        return joined.astype(np.int32, copy=False), out

    def labels(self) -> list[str]:
        """The kinds the table holds, in order of first appearance (a code indexes this list)."""
        return list(self._code)

    def counts(self) -> dict[str, int]:
        """Rows per kind, the most frequent first (ties in order of first appearance)."""
        n = np.bincount(self.codes.astype(np.int64), minlength=len(self._code)) if len(self) else []
        pairs = [(k, int(c)) for k, c in zip(self._code, n, strict=True) if c]
        return dict(sorted(pairs, key=lambda kc: -kc[1]))

    def strings(
        self, events: pd.DataFrame, column: str, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``events[column]`` as integer codes and the labels they index, hashed once per column
        (Note [Kinds read once]): labels in order of first appearance, a missing value (None, NaN)
        a label of its own (NaN, the last). ``rows`` (a mask or indices): the codes of those rows
        only, numbered in order of first appearance among them, and the labels they index: what
        ``pd.factorize(values[rows], use_na_sentinel=False)`` returns."""
        Kinds.of(events, self)  # the table these kinds were read from, or a clear error
        if column not in self._strings and self._head is not None:
            self._strings[column] = self._extend_strings(events, column)
        if column not in self._strings:
            # Missing values as -1, then as a last label: use_na_sentinel=False would first test
            # every row for missing (as long again as the hashing, on strings).
            codes, uniques = pd.factorize(events[column].to_numpy())
            labels = np.asarray(uniques, dtype=object)
            if (codes < 0).any():
                codes = np.where(codes < 0, len(labels), codes)
                labels = np.append(labels, np.array([np.nan], dtype=object))
            self._strings[column] = (codes.astype(np.int32, copy=False), labels)
        codes, uniques = self._strings[column]
        if rows is None:
            return codes, uniques
        sub = codes[rows]
        first = np.full(len(uniques), len(sub), dtype=np.int64)  # each code's first row in ``rows``
        np.minimum.at(first, sub, np.arange(len(sub)))  # (a sort, as np.unique does, costs 20x)
        present = np.flatnonzero(first < len(sub))
        order = present[np.argsort(first[present], kind="stable")]
        renumber = np.zeros(len(uniques), dtype=np.int64)
        renumber[order] = np.arange(len(order))
        return renumber[sub], uniques[order]


def unique_keys(key: np.ndarray, *, counts: bool = False) -> tuple[np.ndarray, ...]:
    """``np.unique(key, return_inverse=True)`` (and ``return_counts`` with ``counts``) of
    non-negative integer keys, such as codes combined: by counting when the keys are dense (no
    sort: a tenth of the time on a million keys), else by ``np.unique``."""
    key = np.asarray(key)
    if len(key) and int(key.min()) >= 0 and int(key.max()) < max(4 * len(key), 1 << 16):
        n = np.bincount(key)
        values = np.flatnonzero(n)
        renumber = np.zeros(len(n), dtype=np.int64)
        renumber[values] = np.arange(len(values))
        out = (values.astype(key.dtype), renumber[key])
        return (*out, n[values]) if counts else out
    return np.unique(key, return_inverse=True, return_counts=counts)
