"""Naming of heads and directions as people read them.

Code indexes layers and heads from 0; everything a person reads names a head
``layer-head`` from 1, as the papers do (notebook ``(7, 10)`` is paper ``8-11``).
"""

from __future__ import annotations

__all__ = ["DIRECTIONS", "head_name", "INDEXING_NOTE"]

#: Clark et al.'s two modes: the dependent's row (it attends to its head), and the
#: transpose (the head attends to its dependent).
DIRECTIONS: tuple[str, str] = ("dep_to_head", "head_to_dep")

INDEXING_NOTE = "layers and heads are numbered from 1 (layer-head), as in Clark et al. 2019"


def head_name(layer: int, head: int) -> str:
    """``layer-head`` label, 1-based, for a 0-based ``(layer, head)``."""
    return f"{layer + 1}-{head + 1}"
