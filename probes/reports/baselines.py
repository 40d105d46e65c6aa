"""The table of attention-free baselines per relation (``probes baselines``), made from :class:`BaselineScores`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from probes.analysis.baselines import BaselineScores
from probes.analysis.relations import leading_relations, redundant_pools
from probes.errors import ConfigError
from probes.reports.tables import markdown_table, text_table

__all__ = ["baseline_rows", "format_baselines", "BASELINE_FORMATS"]

#: What ``format_baselines`` writes.
BASELINE_FORMATS: tuple[str, ...] = ("text", "markdown", "json")


def baseline_rows(scores: BaselineScores, *, min_count: int = 100, all_relations: bool = False
                  ) -> list[dict[str, Any]]:
    """One row per relation (``ALL``, ``ALL-nopunct`` first, then by count): best offset and most frequent position.

    Relations with fewer than ``min_count`` words are left out unless ``all_relations``; pooled
    ``base:*`` relations that repeat a label without subtypes are always left out.
    """
    drop = redundant_pools(scores.relations)
    head = leading_relations(scores.relations)
    rest = sorted((r for r in scores.relations if r not in drop and r not in head
                   and (all_relations or scores.total[scores.index(r)] >= min_count)),
                  key=lambda r: (-int(scores.total[scores.index(r)]), r))
    rows = []
    for rel in head + rest:
        k, acc = scores.best_offset(rel)
        p, p_acc = scores.most_frequent_position(rel)
        rows.append({"relation": rel, "count": int(scores.total[scores.index(rel)]), "offset": k, "accuracy": acc,
                     "position": "ROOT" if p == 0 else f"{p:+d}", "position_accuracy": p_acc})
    return rows


def format_baselines(rows: Sequence[dict[str, Any]], fmt: str = "text") -> str:
    """The rows as a terminal table, GitHub Markdown (accuracies in percent) or JSON (fractions)."""
    if fmt not in BASELINE_FORMATS:
        raise ConfigError(f"--format must be text, markdown or json, found {fmt!r}")
    if fmt == "json":
        return json.dumps(list(rows), indent=2) + "\n"
    shown = [{**r, "offset": f"{r['offset']:+d}"} for r in rows]
    columns = ("relation", "count", "offset", "accuracy", "position", "position_accuracy")
    headers = ("relation", "count", "best offset", "acc %", "most frequent position", "acc %")
    table = text_table if fmt == "text" else markdown_table
    return table(shown, columns, headers=headers, percent=("accuracy", "position_accuracy"))
