"""Old home of the dependency result types and relation names; kept so old imports still work.

Moved: ``ALL``, ``ALL_NOPUNCT``, ``pooled_name``, ``redundant_pools``, ``merge_relations`` to
:mod:`probes.analysis.relations`; ``UnitCounts`` to :mod:`probes.analysis.unit_counts`;
``HeadScores`` to :mod:`probes.analysis.dependency`; ``BaselineScores`` to
:mod:`probes.analysis.baselines`. Import them from there.
"""

from __future__ import annotations

from probes.analysis.baselines import BaselineScores
from probes.analysis.dependency import HeadScores
from probes.analysis.relations import ALL, ALL_NOPUNCT, merge_relations, pooled_name, redundant_pools
from probes.analysis.unit_counts import UnitCounts

__all__ = ["ALL", "ALL_NOPUNCT", "pooled_name", "UnitCounts", "HeadScores", "BaselineScores", "merge_relations",
           "redundant_pools"]
