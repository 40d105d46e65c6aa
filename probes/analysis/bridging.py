"""Bridging heads: how much each head links a bridging anaphor to its antecedent (Pandit & Hou 2021).

For every GUM ``Bridge=`` link (``the door`` inferable from ``the house``) whose two
mentions fit in one window, every head gets two scores:

* **argmax accuracy** (Clark et al.'s rule): the anaphor's head word attends most
  (specials dropped, itself excluded, ties left-most) to an antecedent head word. With
  ``credit="any"`` (default) that is the head word of *any* mention of the antecedent
  entity that precedes the anaphor (ends before it starts) inside the window, or of the
  reader's antecedent mention; with ``credit="nearest"`` (the rule before issue 10) only
  the reader's antecedent (:class:`~probes.corpora.types.Bridge`: the nearest mention of
  the antecedent entity starting before the anaphor);
* **attention-mass ratio** (Pandit & Hou): for each word ``i`` of the anaphor span,
  ``sum_{j in antecedent span} A[i, j] / sum_{j non-special} A[i, j]``, averaged over
  the anaphor's words. Unlike Pandit & Hou, spans are found by word offsets, not by
  inline ``$ss ... $es`` markers, so the input text is the document itself.

``direction="antecedent_to_anaphor"`` swaps the roles: the antecedent's rows and the
anaphor's span for the mass; for the argmax, the transpose (which word attends most
*to* the anaphor's head), as in Clark et al.'s reversed direction.

The mass ratio always uses the reader's antecedent span (as Pandit & Hou's one marked span).

Floors and baselines of the argmax accuracy, per link, on the same candidates (every
word of the window but the anaphor head):

* **uniform floor**: the expected accuracy of a head attending uniformly over the
  candidate words (a random pick): credited antecedent heads / candidate words;
* **nearest mention**: the head word of the nearest mention (of any entity) preceding the
  anaphor in the window (the one starting last; of two starting together, the shorter);
* **offsets**: the word at each offset ``-50..-1, 1..50`` from the anaphor head (the
  report chooses the best offset on the selection data).

Links are stratified by the sentence distance between the two mentions, in Pandit &
Hou's bands 0, 1, 2, 3-5, 6+ (their last band stops at 10). A link is scored once, in
the earliest window holding both mentions; links whose mentions are never in one
window are counted as ``not_scorable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.analysis.mentions import COREF_DIRECTIONS, DISTANCE_BANDS, distance_band, word_rows
from probes.corpora.types import Bridge
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention
from probes.extraction.windows import Window
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["BRIDGING_DEFINITIONS", "BridgingScores", "BridgingResult", "CREDITS", "OFFSETS", "MIN_LINKS", "BandGroup", "merge_bands",
           "Bands"]

#: Which antecedent mentions an argmax may hit: any preceding one of the entity, or the reader's nearest one.
CREDITS: tuple[str, ...] = ("any", "nearest")
#: Offsets (words from the anaphor head) of the offset baseline.
OFFSETS: tuple[int, ...] = tuple(range(-50, 0)) + tuple(range(1, 51))
#: Default fewest links a distance band (or a merged run of bands) needs for its own row.
MIN_LINKS = 30
_BAND_LOW, _BAND_HIGH = (0, 1, 2, 3, 6), (0, 1, 2, 5, None)  # sentence distances each band covers

#: One band name, several (summed), or None (every band).
Bands = str | Sequence[str] | None


#: What each number of the run record means (``run.json``'s ``definitions``).
BRIDGING_DEFINITIONS = {
    "argmax": "the anaphor head word's most attended other word (specials dropped, ties left-most) "
              "is the antecedent's head word",
    "mass": "per anaphor word: attention to the antecedent span's words / attention to all words "
            "(special tokens excluded), averaged over the anaphor's words (Pandit & Hou 2021, "
            "by word offsets instead of inline markers)",
    "antecedent": "the Bridge's antecedent mention chosen by the reader (nearest earlier mention of "
                  "the antecedent entity); a link is scored in the earliest window holding both",
    "credit": {"any": "any: the argmax is right on the head word of any mention of the antecedent entity ending "
                      "before the anaphor starts inside the window, or of the reader's antecedent",
               "nearest": "nearest: the argmax is right only on the reader's antecedent's head word"},
    "uniform_floor": "expected argmax accuracy of uniform attention over the candidate words (window words but "
                     "the anaphor head): credited antecedent heads / candidate words",
    "baselines": "nearest mention: head word of the mention (any entity) ending before the anaphor starts and "
                 "starting last; offset k: the word k words from the anaphor head (k in -50..50, chosen on the "
                 "selection data); the stronger of the two on the selection data is the one tested against",
}


def _band_index(bands: Bands) -> Any:
    if bands is None:
        return slice(None)
    names = [bands] if isinstance(bands, str) else list(bands)
    return [DISTANCE_BANDS.index(b) for b in names]


@dataclass(frozen=True)
class BandGroup:
    """A run of adjacent distance bands reported as one row: its label, bands, links and whether enough."""

    label: str
    bands: tuple[str, ...]
    links: int
    enough: bool


def merge_bands(links: Sequence[int], min_links: int = MIN_LINKS) -> list[BandGroup]:
    """Adjacent distance bands merged, left to right, until each run holds ``min_links`` links.

    A last run with too few links joins the one before it; when all links together are too few,
    there is one run, marked ``enough=False`` ("too few"). ``links``: links per band of
    :data:`DISTANCE_BANDS`. Labels give the sentence distances covered: ``"0"``, ``"1-2"``, ``"3+"``.
    """
    if len(links) != len(DISTANCE_BANDS):
        raise ConfigError(f"expected links for the {len(DISTANCE_BANDS)} distance bands, found {len(links)}")
    runs: list[list[int]] = []
    current: list[int] = []
    for k in range(len(links)):
        current.append(k)
        if sum(links[j] for j in current) >= min_links:
            runs.append(current)
            current = []
    if current:
        if runs:
            runs[-1] += current
        else:
            runs.append(current)
    groups = []
    for run in runs:
        low, high = _BAND_LOW[run[0]], _BAND_HIGH[run[-1]]
        label = f"{low}+" if high is None else str(low) if low == high else f"{low}-{high}"
        n = int(sum(links[j] for j in run))
        groups.append(BandGroup(label, tuple(DISTANCE_BANDS[j] for j in run), n, n >= min_links))
    return groups


@dataclass(frozen=True)
class BridgingResult(Result):
    """Per-document sums behind the bridging scores of every head, its floors and baselines.

    Attributes:
        layers, heads: 0-based model layers and heads (the last two axes).
        units: document ids (bootstrap units), axis 0.
        hits: ``(n_units, n_bands, L, H)`` links whose anaphor head attends most to a credited antecedent head.
        mass: ``(n_units, n_bands, L, H)`` summed attention-mass ratios.
        total: ``(n_units, n_bands)`` scored links.
        chance: ``(n_units, n_bands)`` summed mass ratio a uniform head would get (antecedent
            span words / window words): the floor to compare the mass ratio with.
        floor: ``(n_units, n_bands)`` summed expected argmax accuracy of uniform attention over the
            candidate words (credited antecedent heads / candidate words): the argmax floor.
        nearest: ``(n_units, n_bands)`` links the nearest-mention baseline gets right.
        offset_hits: ``(n_units, n_bands, n_offsets)`` links the word at each offset of ``offsets`` gets right.
        offsets: the offsets (words from the anaphor head) of ``offset_hits``.
        counts: ``scored``, ``not_scorable`` (never in one window), ``same_head`` (both mentions
            share their head word: argmax undefined, skipped) per band.
        options: the options the scores were computed with.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"hits": "units B layers heads", "mass": "units B layers heads", "total": "units B",
               "chance": "units B", "floor": "units B", "nearest": "units B", "offset_hits": "units B offsets"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    units: tuple[str, ...]
    hits: npt.NDArray[np.int64]
    mass: npt.NDArray[np.float64]
    total: npt.NDArray[np.int64]
    chance: npt.NDArray[np.float64]
    floor: npt.NDArray[np.float64]
    nearest: npt.NDArray[np.int64]
    offset_hits: npt.NDArray[np.int64]
    offsets: tuple[int, ...]
    counts: dict[str, dict[str, int]]
    options: dict[str, str] = field(default_factory=dict)

    def links(self, band: Bands = None) -> int:
        """Links scored in ``band`` (one name, several, or None: all)."""
        return int(self.total[:, _band_index(band)].sum())

    def chance_mass(self, band: Bands = None) -> float:
        """Mean mass ratio of uniform attention over the window's words (NaN when nothing was scored)."""
        b = _band_index(band)
        n = self.total[:, b].sum()
        return float(self.chance[:, b].sum() / n) if n else float("nan")

    def uniform_floor(self, band: Bands = None) -> float:
        """Expected argmax accuracy of uniform attention over the candidate words (NaN when nothing was scored)."""
        b = _band_index(band)
        n = self.total[:, b].sum()
        return float(self.floor[:, b].sum() / n) if n else float("nan")

    def sums(self, band: Bands = None) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.int64]]:
        """``(hits (n_units, L, H), mass (n_units, L, H), total (n_units,))`` for some bands (None: all)."""
        b = _band_index(band)
        return self.hits[:, b].sum(axis=1), self.mass[:, b].sum(axis=1), self.total[:, b].sum(axis=1)

    def baseline_sums(self, band: Bands = None) -> dict[str, npt.NDArray[Any]]:
        """Per-unit sums of the floors and baselines for some bands: ``nearest (n_units,)``, ``offsets
        (n_units, n_offsets)``, ``floor (n_units,)``, ``chance (n_units,)``."""
        b = _band_index(band)
        return {"nearest": self.nearest[:, b].sum(axis=1), "offsets": self.offset_hits[:, b].sum(axis=1),
                "floor": self.floor[:, b].sum(axis=1), "chance": self.chance[:, b].sum(axis=1)}

    def to_pandas(self) -> Any:
        """One row per distance band and head, summed over documents: ``band, layer, head, head_name,
        hits, mass, total, accuracy, mass_ratio, chance_mass, uniform_floor`` (``layer``/``head`` 1-based)."""
        hits, mass = self.hits.sum(axis=0), self.mass.sum(axis=0)  # (B, L, H)
        total, chance = self.total.sum(axis=0), self.chance.sum(axis=0)  # (B,)
        n = np.where(total > 0, total, np.nan)[:, None, None]
        axes = {"band": DISTANCE_BANDS, **head_axes(self.layers, self.heads)}
        table = long_table(axes, {"hits": hits, "mass": mass, "total": total[:, None, None], "accuracy": hits / n,
                                  "mass_ratio": mass / n, "chance_mass": chance[:, None, None] / n,
                                  "uniform_floor": self.floor.sum(axis=0)[:, None, None] / n})
        table.insert(3, "head_name", head_names(table))
        return table

    def accuracy(self, band: Bands = None) -> npt.NDArray[np.float64]:
        """``(L, H)`` argmax accuracy of every head (NaN when no link was scored)."""
        hits, _, n = self.sums(band)
        return hits.sum(axis=0) / n.sum() if n.sum() else np.full(hits.shape[1:], np.nan)

    def mass_ratio(self, band: Bands = None) -> npt.NDArray[np.float64]:
        """``(L, H)`` mean attention-mass ratio of every head (NaN when no link was scored)."""
        _, mass, n = self.sums(band)
        return mass.sum(axis=0) / n.sum() if n.sum() else np.full(mass.shape[1:], np.nan)

    def offset_accuracy(self, band: Bands = None) -> npt.NDArray[np.float64]:
        """``(n_offsets,)`` accuracy of the word at each offset (NaN when no link was scored)."""
        n = self.total[:, _band_index(band)].sum()
        hits = self.baseline_sums(band)["offsets"].sum(axis=0)
        return hits / n if n else np.full(hits.shape, np.nan)

    def nearest_accuracy(self, band: Bands = None) -> float:
        """Accuracy of the nearest-mention baseline (NaN when no link was scored)."""
        n = self.total[:, _band_index(band)].sum()
        return float(self.baseline_sums(band)["nearest"].sum() / n) if n else float("nan")


class BridgingScores(Analysis[BridgingResult]):
    """Streaming argmax accuracy and attention-mass ratio of every head on bridging links, with floors
    and baselines.

    Feed it ``(Window, WordAttention)`` pairs, every window of a document in order.

    Args:
        direction: ``anaphor_to_antecedent`` (default) or ``antecedent_to_anaphor``.
        credit: ``any`` (default: the head of any preceding mention of the antecedent entity in the
            window) or ``nearest`` (only the reader's antecedent mention); see the module doc.
    """

    items: ClassVar[str] = "windows"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    direction: str
    credit: str
    _hits: dict[str, npt.NDArray[np.int64]]
    _mass: dict[str, npt.NDArray[np.float64]]
    _total: dict[str, npt.NDArray[np.int64]]
    _chance: dict[str, npt.NDArray[np.float64]]
    _floor: dict[str, npt.NDArray[np.float64]]
    _nearest: dict[str, npt.NDArray[np.int64]]
    _offsets: dict[str, npt.NDArray[np.int64]]
    _counts: npt.NDArray[np.int64]

    def __init__(self, *, direction: str = "anaphor_to_antecedent", credit: str = "any") -> None:
        for name, value, allowed in (("direction", direction, COREF_DIRECTIONS), ("credit", credit, CREDITS)):
            if value not in allowed:
                raise ConfigError(f"{name}: expected one of {', '.join(allowed)}, found {value!r}")
        super().__init__()
        self.add_option("direction", direction)
        self.add_option("credit", credit)
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_hits", {}, "keyed")  # doc id -> (bands, L, H)
        self.add_state("_mass", {}, "keyed")  # doc id -> (bands, L, H)
        self.add_state("_total", {}, "keyed")  # doc id -> (bands,)
        self.add_state("_chance", {}, "keyed")  # doc id -> (bands,)
        self.add_state("_floor", {}, "keyed")  # doc id -> (bands,)
        self.add_state("_nearest", {}, "keyed")  # doc id -> (bands,)
        self.add_state("_offsets", {}, "keyed")  # doc id -> (bands, n_offsets)
        # rows: scored, not_scorable, same_head; columns: distance bands
        self.add_state("_counts", np.zeros((3, len(DISTANCE_BANDS)), dtype=np.int64), "sum")

    def _unit(self, doc_id: str, shape: tuple[int, ...]) -> None:
        if doc_id not in self._total:
            nb = len(DISTANCE_BANDS)
            self._hits[doc_id] = np.zeros((nb, *shape), dtype=np.int64)
            self._mass[doc_id] = np.zeros((nb, *shape), dtype=np.float64)
            self._total[doc_id] = np.zeros(nb, dtype=np.int64)
            self._chance[doc_id] = np.zeros(nb, dtype=np.float64)
            self._floor[doc_id] = np.zeros(nb, dtype=np.float64)
            self._nearest[doc_id] = np.zeros(nb, dtype=np.int64)
            self._offsets[doc_id] = np.zeros((nb, len(OFFSETS)), dtype=np.int64)

    def rows(self, item: Window) -> list[int] | None:
        """The anaphor words of the links ``item`` owns and holds whole (a superset of those scored): with
        ``anaphor_to_antecedent`` only their rows are read; the other direction reads columns (None)."""
        if self.direction != "anaphor_to_antecedent":
            return None
        words: list[int] = []
        for bridge in item.document.bridges:
            ana, ante = bridge.anaphor, bridge.antecedent
            if item.prev_end < max(ana.end, ante.end) <= item.end and min(ana.start, ante.start) >= item.start:
                words.extend(w - item.start for w in (*ana.words, ana.head))
        return words

    def update(self, item: Window, word_attention: WordAttention) -> None:
        """Score the bridging links ``item`` owns with every head, the floors and the baselines."""
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
            self._score_link(window, word_attention, bridge, band)

    def _credited(self, window: Window, bridge: Bridge) -> set[int]:
        """Window offsets of the antecedent head words a prediction may hit (see ``credit``)."""
        ana = bridge.anaphor
        heads = {bridge.antecedent.head}
        if self.credit == "any":
            heads |= {m.head for m in window.document.mentions if m.entity == bridge.antecedent_entity
                      and m.end <= ana.start and window.holds(m.start, m.end)}
        return {h - window.start for h in heads if h != ana.head}

    def _score_link(self, window: Window, wa: WordAttention, bridge: Bridge, band: int) -> None:
        """Add one link's head scores, mass ratios, floors and baseline hits to its document and band."""
        ana, ante = bridge.anaphor, bridge.antecedent
        weights, pos = wa.weights, wa.word_index  # (L, H, n_pos, n_pos); (n_words,) word positions
        src, dst = (ana, ante) if self.direction == "anaphor_to_antecedent" else (ante, ana)
        rows = np.asarray(src.words, dtype=np.intp) - window.start  # (n_src,)
        cols = np.asarray(dst.words, dtype=np.intp) - window.start  # (n_dst,)
        src_rows = word_rows(wa, rows)  # (L, H, n_src, n_words)
        # Pandit & Hou: mass to the other span over mass to every non-special position, per source word
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.nan_to_num(src_rows[..., cols].sum(axis=-1) / src_rows.sum(axis=-1)).mean(axis=-1)
        i = ana.head - window.start
        if self.direction == "anaphor_to_antecedent":
            scores = word_rows(wa, np.array([i]))[:, :, 0, :]  # (L, H, n): anaphor head's row (a new array)
        else:
            scores = weights[:, :, pos, pos[i]].copy()  # (L, H, n): who attends to the anaphor head
        scores[:, :, i] = -np.inf
        gold = self._credited(window, bridge)
        gold_mask = np.zeros(window.n_words, dtype=bool)
        gold_mask[list(gold)] = True
        doc_id = window.document.doc_id
        self._hits[doc_id][band] += gold_mask[scores.argmax(axis=-1)]  # (L, H)
        self._mass[doc_id][band] += ratio
        self._total[doc_id][band] += 1
        self._chance[doc_id][band] += len(dst.words) / window.n_words
        self._floor[doc_id][band] += len(gold) / max(window.n_words - 1, 1)
        before = [m for m in window.document.mentions if m.end <= ana.start and window.holds(m.start, m.end)]
        if before:
            near = max(before, key=lambda m: (m.start, -m.end))
            self._nearest[doc_id][band] += (near.head - window.start) in gold
        targets = i + np.asarray(OFFSETS)
        inside = (targets >= 0) & (targets < window.n_words)
        self._offsets[doc_id][band] += inside & gold_mask[np.clip(targets, 0, window.n_words - 1)]
        self._counts[0, band] += 1

    def compute(self) -> BridgingResult:
        """The sums seen so far as a :class:`BridgingResult`."""
        units = tuple(self._total)
        shape = (len(self._layers or ()), len(self._heads or ()))
        nb = len(DISTANCE_BANDS)

        def stack(d: dict[str, Any], empty: tuple[int, ...], dtype: Any) -> npt.NDArray[Any]:
            return np.stack([d[u] for u in units]) if units else np.zeros((0, *empty), dtype=dtype)

        names = ("scored", "not_scorable", "same_head")
        return BridgingResult(
            layers=self._layers or (), heads=self._heads or (), units=units,
            hits=stack(self._hits, (nb, *shape), np.int64), mass=stack(self._mass, (nb, *shape), np.float64),
            total=stack(self._total, (nb,), np.int64), chance=stack(self._chance, (nb,), np.float64),
            floor=stack(self._floor, (nb,), np.float64), nearest=stack(self._nearest, (nb,), np.int64),
            offset_hits=stack(self._offsets, (nb, len(OFFSETS)), np.int64), offsets=OFFSETS,
            counts={name: {b: int(self._counts[k, j]) for j, b in enumerate(DISTANCE_BANDS)}
                    for k, name in enumerate(names)},
            options=self.options,
        )
