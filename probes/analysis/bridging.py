"""Bridging heads: how much each head links a bridging anaphor to its antecedent (Pandit & Hou 2021).

For every GUM ``Bridge=`` link (``the door`` inferable from ``the house``) whose two
mentions fit in one window, every head gets two scores:

* **argmax accuracy** (Clark et al.'s rule): the anaphor's head word attends most
  (specials dropped, itself excluded, ties left-most) to the antecedent's head word;
* **attention-mass ratio** (Pandit & Hou): for each word ``i`` of the anaphor span,
  ``sum_{j in antecedent span} A[i, j] / sum_{j non-special} A[i, j]``, averaged over
  the anaphor's words. Unlike Pandit & Hou, spans are found by word offsets, not by
  inline ``$ss ... $es`` markers, so the input text is the document itself.

``direction="antecedent_to_anaphor"`` swaps the roles: the antecedent's rows and the
anaphor's span for the mass; for the argmax, the transpose (which word attends most
*to* the anaphor's head), as in Clark et al.'s reversed direction.

Links are stratified by the sentence distance between the two mentions, in Pandit &
Hou's bands 0, 1, 2, 3-5, 6+ (their last band stops at 10). A link is scored once, in
the earliest window holding both mentions; links whose mentions are never in one
window are counted as ``not_scorable``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.extraction.attention import WordAttention
from probes.analysis.mentions import COREF_DIRECTIONS, DISTANCE_BANDS, distance_band, word_rows
from probes.errors import AlignmentError, ConfigError
from probes.extraction.windows import Window
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["BridgingScores", "BridgingResult"]


@dataclass(frozen=True)
class BridgingResult(Result):
    """Per-document sums behind the bridging scores of every head.

    Attributes:
        layers, heads: 0-based model layers and heads (the last two axes).
        units: document ids (bootstrap units), axis 0.
        hits: ``(n_units, n_bands, L, H)`` links whose anaphor head attends most to the antecedent head.
        mass: ``(n_units, n_bands, L, H)`` summed attention-mass ratios.
        total: ``(n_units, n_bands)`` scored links.
        chance: ``(n_units, n_bands)`` summed mass ratio a uniform head would get (antecedent
            span words / window words): the floor to compare the mass ratio with.
        counts: ``scored``, ``not_scorable`` (never in one window), ``same_head`` (both mentions
            share their head word: argmax undefined, skipped) per band.
        options: the options the scores were computed with.
    """

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    units: tuple[str, ...]
    hits: npt.NDArray[np.int64]
    mass: npt.NDArray[np.float64]
    total: npt.NDArray[np.int64]
    chance: npt.NDArray[np.float64]
    counts: dict[str, dict[str, int]]
    options: dict[str, Any] = field(default_factory=dict)

    def chance_mass(self, band: str | None = None) -> float:
        """Mean mass ratio of uniform attention over the window's words (NaN when nothing was scored)."""
        b = slice(None) if band is None else [DISTANCE_BANDS.index(band)]
        n = self.total[:, b].sum()
        return float(self.chance[:, b].sum() / n) if n else float("nan")

    def sums(self, band: str | None = None) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.int64]]:
        """``(hits (n_units, L, H), mass (n_units, L, H), total (n_units,))`` for one band (None: all)."""
        b = slice(None) if band is None else [DISTANCE_BANDS.index(band)]
        return self.hits[:, b].sum(axis=1), self.mass[:, b].sum(axis=1), self.total[:, b].sum(axis=1)

    def to_pandas(self) -> Any:
        """One row per distance band and head, summed over documents: ``band, layer, head, head_name,
        hits, mass, total, accuracy, mass_ratio, chance_mass`` (``layer``/``head`` 1-based)."""
        hits, mass = self.hits.sum(axis=0), self.mass.sum(axis=0)  # (B, L, H)
        total, chance = self.total.sum(axis=0), self.chance.sum(axis=0)  # (B,)
        n = np.where(total > 0, total, np.nan)[:, None, None]
        axes = {"band": DISTANCE_BANDS, **head_axes(self.layers, self.heads)}
        table = long_table(axes, {"hits": hits, "mass": mass, "total": total[:, None, None], "accuracy": hits / n,
                                  "mass_ratio": mass / n, "chance_mass": chance[:, None, None] / n})
        table.insert(3, "head_name", head_names(table))
        return table

    def accuracy(self, band: str | None = None) -> npt.NDArray[np.float64]:
        """``(L, H)`` argmax accuracy of every head (NaN when no link was scored)."""
        hits, _, n = self.sums(band)
        return hits.sum(axis=0) / n.sum() if n.sum() else np.full(hits.shape[1:], np.nan)

    def mass_ratio(self, band: str | None = None) -> npt.NDArray[np.float64]:
        """``(L, H)`` mean attention-mass ratio of every head (NaN when no link was scored)."""
        _, mass, n = self.sums(band)
        return mass.sum(axis=0) / n.sum() if n.sum() else np.full(mass.shape[1:], np.nan)


class BridgingScores(Analysis[BridgingResult]):
    """Streaming argmax accuracy and attention-mass ratio of every head on bridging links.

    Feed it ``(Window, WordAttention)`` pairs, every window of a document in order.

    Args:
        direction: ``anaphor_to_antecedent`` (default) or ``antecedent_to_anaphor``.
    """

    items: ClassVar[str] = "windows"

    def __init__(self, *, direction: str = "anaphor_to_antecedent") -> None:
        if direction not in COREF_DIRECTIONS:
            raise ConfigError(f"direction: expected one of {', '.join(COREF_DIRECTIONS)}, found {direction!r}")
        super().__init__()
        self.add_option("direction", direction)
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_hits", {}, "keyed")  # doc id -> (bands, L, H)
        self.add_state("_mass", {}, "keyed")  # doc id -> (bands, L, H)
        self.add_state("_total", {}, "keyed")  # doc id -> (bands,)
        self.add_state("_chance", {}, "keyed")  # doc id -> (bands,)
        # rows: scored, not_scorable, same_head; columns: distance bands
        self.add_state("_counts", np.zeros((3, len(DISTANCE_BANDS)), dtype=np.int64), "sum")

    def _unit(self, doc_id: str, shape: tuple[int, ...]) -> None:
        if doc_id not in self._total:
            nb = len(DISTANCE_BANDS)
            self._hits[doc_id] = np.zeros((nb, *shape), dtype=np.int64)
            self._mass[doc_id] = np.zeros((nb, *shape), dtype=np.float64)
            self._total[doc_id] = np.zeros(nb, dtype=np.int64)
            self._chance[doc_id] = np.zeros(nb, dtype=np.float64)

    def update(self, item: Window, word_attention: WordAttention) -> None:
        """Score the bridging links ``item`` owns with every head."""
        window = item
        if word_attention.n_words != window.n_words:
            raise AlignmentError(
                f"document {window.doc_id!r} window {window.index}: expected attention over "
                f"{window.n_words} words, found {word_attention.n_words}")
        layers, heads = tuple(word_attention.layers), tuple(word_attention.heads)
        if self._layers is None:
            self._layers, self._heads = layers, heads
        elif (self._layers, self._heads) != (layers, heads):
            raise ConfigError("every window must hold the same layers and heads")
        doc = window.document
        self._unit(doc.doc_id, word_attention.weights.shape[:2])
        weights = word_attention.weights  # (L, H, n_pos, n_pos) with special positions
        pos = word_attention.word_index  # (n_words,) positions of the window's words
        for bridge in doc.bridges:
            ana, ante = bridge.anaphor, bridge.antecedent
            start, end = min(ana.start, ante.start), max(ana.end, ante.end)
            if not (window.prev_end < end <= window.end):
                continue
            band = int(distance_band(ana.sentence - ante.sentence))
            if start < window.start:
                self._counts[1, band] += 1
                continue
            if ana.head == ante.head:
                self._counts[2, band] += 1
                continue
            src, dst = (ana, ante) if self.direction == "anaphor_to_antecedent" else (ante, ana)
            rows = np.asarray(src.words, dtype=np.intp) - window.start  # (n_src,)
            cols = np.asarray(dst.words, dtype=np.intp) - window.start  # (n_dst,)
            src_rows = word_rows(weights, pos, rows)  # (L, H, n_src, n_words)
            # Pandit & Hou: mass to the other span over mass to every non-special position, per source word
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.nan_to_num(src_rows[..., cols].sum(axis=-1) / src_rows.sum(axis=-1)).mean(axis=-1)
            i, target = ana.head - window.start, ante.head - window.start
            if self.direction == "anaphor_to_antecedent":
                scores = word_rows(weights, pos, np.array([i]))[:, :, 0, :].copy()  # (L, H, n): anaphor head's row
            else:
                scores = weights[:, :, pos, pos[i]].copy()  # (L, H, n): who attends to the anaphor head
            scores[:, :, i] = -np.inf
            hit = scores.argmax(axis=-1) == target  # (L, H)
            self._hits[doc.doc_id][band] += hit
            self._mass[doc.doc_id][band] += ratio
            self._total[doc.doc_id][band] += 1
            self._chance[doc.doc_id][band] += len(dst.words) / window.n_words
            self._counts[0, band] += 1

    def compute(self) -> BridgingResult:
        """The sums seen so far as a :class:`BridgingResult`."""
        units = tuple(self._total)
        shape = (len(self._layers or ()), len(self._heads or ()))
        nb = len(DISTANCE_BANDS)
        if units:
            hits = np.stack([self._hits[u] for u in units])
            mass = np.stack([self._mass[u] for u in units])
            total = np.stack([self._total[u] for u in units])
            chance = np.stack([self._chance[u] for u in units])
        else:
            hits, mass = np.zeros((0, nb, *shape), np.int64), np.zeros((0, nb, *shape))
            total, chance = np.zeros((0, nb), np.int64), np.zeros((0, nb))
        names = ("scored", "not_scorable", "same_head")
        return BridgingResult(
            layers=self._layers or (), heads=self._heads or (), units=units, hits=hits, mass=mass, total=total,
            chance=chance,
            counts={name: {b: int(self._counts[k, j]) for j, b in enumerate(DISTANCE_BANDS)}
                    for k, name in enumerate(names)},
            options=self.options,
        )
