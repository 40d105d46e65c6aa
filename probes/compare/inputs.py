"""Finding what a comparison needs among an experiment's loaded units (duck-typed: no import of probes.runs).

A leaderboard for (model, data) is the ``leaderboard`` unit's result, else the ``atlas`` unit's ``.board``;
the first unit of a kind wins when there are several.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from probes.compare.types import Unit
from probes.heads.profile import board_profile

__all__ = ["first_result", "board_of", "atlas_of", "model_data_pairs", "profile_of", "depth"]


def first_result(units: Sequence[Unit], kind: str, model: str, data: str) -> Any:
    """The result of the first unit of ``kind`` on ``model`` and ``data``, or None."""
    for unit in units:
        if unit.kind == kind and unit.model == model and unit.data == data:
            return unit.result
    return None


def atlas_of(units: Sequence[Unit], model: str, data: str) -> Any:
    """The atlas of ``model`` on ``data``, or None."""
    return first_result(units, "atlas", model, data)


def board_of(units: Sequence[Unit], model: str, data: str) -> Any:
    """The leaderboard of ``model`` on ``data``: a ``leaderboard`` unit's result, else the atlas's board, else None."""
    board = first_result(units, "leaderboard", model, data)
    if board is None:
        found = atlas_of(units, model, data)
        board = None if found is None else found.board
    return board


def model_data_pairs(units: Sequence[Unit], kinds: Sequence[str] = ("leaderboard", "atlas")) -> list[tuple[str, str]]:
    """Every ``(model, data)`` with a unit of one of ``kinds``, in the order of the units."""
    out: list[tuple[str, str]] = []
    for unit in units:
        if unit.kind in kinds and (unit.model, unit.data) not in out:
            out.append((unit.model, unit.data))
    return out


def profile_of(board: Any, atlas: Any = None) -> Any:
    """Each head's best relation (:class:`~probes.heads.profile.RelationProfile`): the atlas's when there is one,
    else computed from the board (chosen on its selection side, read on its report side); None without relations."""
    if atlas is not None and getattr(atlas, "profile", None) is not None:
        return atlas.profile
    return board_profile(board)


def depth(layer: int, n_layers: int) -> float:
    """Relative depth of a 0-based layer: ``layer / (n_layers - 1)`` (0 with one layer)."""
    return 0.0 if n_layers <= 1 else layer / (n_layers - 1)
