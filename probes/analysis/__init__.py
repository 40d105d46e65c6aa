"""Analyses: streaming accumulators over ``(item, WordAttention)`` pairs, one per file.

Every analysis subclasses :class:`~probes.analysis.base.Analysis` and is registered here
with one line; :func:`~probes.analysis.driver.stream` runs any set of them in one pass.
"""

from __future__ import annotations

from probes.analysis.attention_to_specials import AttentionToSpecials
from probes.analysis.base import Analysis
from probes.analysis.baselines import OffsetBaseline
from probes.analysis.bridging import BridgingScores
from probes.analysis.coreference import AntecedentAccuracy
from probes.analysis.dependency import HeadAccuracy
from probes.analysis.driver import StreamResult, stream
from probes.analysis.head_distances import HeadDistances
from probes.analysis.patterns import AttentionPatterns
from probes.analysis.roles import HeadRoles
from probes.analysis.sinks import AttentionSinks
from probes.analysis.surface import SurfaceStats

__all__ = ["ANALYSES", "Analysis", "StreamResult", "stream"]

#: Every analysis by name: the name ``stream`` results and run records use.
ANALYSES: dict[str, type[Analysis]] = {
    "dependency": HeadAccuracy,
    "baselines": OffsetBaseline,
    "coreference": AntecedentAccuracy,
    "bridging": BridgingScores,
    "specials": AttentionToSpecials,
    "surface": SurfaceStats,
    "roles": HeadRoles,
    "patterns": AttentionPatterns,
    "distances": HeadDistances,
    "sinks": AttentionSinks,
}
