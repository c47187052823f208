"""The coverage table grouped for reading: each overload's family and group (``families``), what one
profile lacks against another (``lacks``), and the tree namespace > group > family > overload with
its counts (``coverage_tree``). ``openreg_lab.views.CoverageView`` draws these tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Tags that name an op's family group (the first one an op has wins), then "other".
CATEGORY_TAGS = ("pointwise", "reduction", "view", "inplace_view", "core", "data_dependent_output")

#: The columns of ``coverage_tree``.
TREE_COLUMNS = (
    "id",
    "label",
    "parent",
    "level",
    "name",
    "value",
    "overloads",
    "native",
    "resolution",
    "kernel",
    "hits",
    "time_ns",
)


def families(cov: pd.DataFrame) -> pd.DataFrame:
    """``coverage()`` with ``family`` (``aten::add``), ``category`` (the first of ``CATEGORY_TAGS``
    the overload is tagged with, else ``other``), and ``hits`` / ``time_ns`` / ``compiled_hits`` (0
    without a trace)."""
    out = cov.copy()
    out["family"] = out["name"].str.split(".", n=1).str[0]
    cats = []
    for tags in out["tags"]:
        tagset = set(tags) if isinstance(tags, (list, tuple)) else set(str(tags).split(","))
        cats.append(next((t for t in CATEGORY_TAGS if t in tagset), "other"))
    out["category"] = cats
    for col in ("hits", "time_ns", "compiled_hits"):
        if col not in out:
            out[col] = 0
        out[col] = out[col].fillna(0).astype(np.int64)
    return out


def lacks(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Overloads native under coverage ``b`` but not under ``a`` (what ``a``'s backend lacks)."""
    nb = set(b.loc[b["resolution"] == "native", "name"])
    rows = a[a["name"].isin(nb) & (a["resolution"] != "native")]
    return rows[["name", "resolution", "kernel"]].reset_index(drop=True)


def coverage_tree(rows: pd.DataFrame) -> pd.DataFrame:
    """The tree of ``rows`` (a ``families()`` table), one row a node (``TREE_COLUMNS``): namespaces,
    then groups, then families, then the overloads as leaves. ``level`` says which (``namespace``,
    ``group``, ``family``, ``overload``); ``id`` is the path (``aten/pointwise/aten::add/aten::add.out``)
    and ``parent`` its parent's id (``""`` for a namespace); ``name`` is the node's own full name (the
    namespace, the group, ``aten::add``, ``aten::add.out``) and ``label`` what a box shows (``add``;
    ``default`` for an overload without a name). ``overloads`` counts the overloads under a node and
    ``native`` the native ones under a family. Leaves carry their ``resolution``, ``kernel``, ``hits``
    and ``time_ns``, and ``value``: the time in the trace when there is one (else one unit each);
    inner nodes have value 0 (their boxes are the sum of their leaves). Built column-wise: the
    explorer redraws all of it on every search and profile change."""
    use_time = bool(rows["time_ns"].sum())
    rows = rows.sort_values(["namespace", "category", "family"], kind="stable")
    t = pd.DataFrame({c: rows[c].astype(str).values for c in ("namespace", "category", "family")})
    t["group_id"] = t["namespace"] + "/" + t["category"]
    t["family_id"] = t["group_id"] + "/" + t["family"]
    native = pd.Series(rows["resolution"].eq("native").values).groupby(t["family_id"]).sum()
    spaces = t.drop_duplicates("namespace")
    groups = t.drop_duplicates("group_id")
    fams = t.drop_duplicates("family_id")

    def level(first: pd.DataFrame, id_col: str, what: str, label: pd.Series, parent: object) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "id": first[id_col],
                "label": label,
                "parent": parent,
                "level": what,
                "name": first[{"namespace": "namespace", "group": "category", "family": "family"}[what]],
                "value": 0.0,
                "overloads": first[id_col].map(t[id_col].value_counts()).astype(np.int64),
                "native": first[id_col].map(native).astype(np.int64) if what == "family" else 0,
                "resolution": "",
                "kernel": "",
                "hits": 0,
                "time_ns": 0.0,
            }
        )

    time_ns = rows["time_ns"].astype(float)
    leaves = pd.DataFrame(
        {
            "id": (t["family_id"] + "/" + rows["name"].astype(str).values).values,
            "label": [str(o) or "default" for o in rows["overload"]],
            "parent": t["family_id"].values,
            "level": "overload",
            "name": rows["name"].astype(str).values,
            "value": time_ns.clip(lower=0.0).values if use_time else 1.0,
            "overloads": 1,
            "native": rows["resolution"].eq("native").astype(np.int64).values,
            "resolution": rows["resolution"].astype(str).values,
            "kernel": rows["kernel"].astype(str).values,
            "hits": rows["hits"].astype(np.int64).values,
            "time_ns": time_ns.values,
        }
    )
    tree = pd.concat(
        [
            level(spaces, "namespace", "namespace", spaces["namespace"], ""),
            level(groups, "group_id", "group", groups["category"], groups["namespace"]),
            level(fams, "family_id", "family", fams["family"].str.split("::").str[-1], fams["group_id"]),
            leaves,
        ],
        ignore_index=True,
    )
    return tree[list(TREE_COLUMNS)]
