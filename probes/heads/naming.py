"""Naming of heads and directions as people read them.

Code indexes layers and heads from 0; everything a person reads names a head
``layer-head`` from 1, as the papers do (notebook ``(7, 10)`` is paper ``8-11``).
"""

from __future__ import annotations

from probes.analysis.dependency import DIRECTIONS

__all__ = ["DIRECTIONS", "head_name", "INDEXING_NOTE"]


INDEXING_NOTE = "layers and heads are numbered from 1 (layer-head), as in Clark et al. 2019"


def head_name(layer: int, head: int) -> str:
    """``layer-head`` label, 1-based, for a 0-based ``(layer, head)``."""
    return f"{layer + 1}-{head + 1}"
