"""Jensen-Shannon distances between the heads of two models read on the same sentences, at word level.

The attention distance of ``seed_methods.md`` §g ("Head distances" (1)): for head a of model A and head b of
model B, the mean over the query rows of the same sentences of JS(Ã_a[i, :], Ã_b[i, :]), where the maps are
the *word-level* maps (:class:`~probes.extraction.attention.WordAttention`), so that models with different
tokenizers compare: special rows and columns are dropped, each word row is renormalised over the words (a row
with no weight on any word becomes uniform) and smoothed as Clark et al. smooth token maps,
Ã = (1 - s)·A + s/n (n words, s = :data:`~probes.analysis.head_distances.SMOOTHING`), natural log. JS is computed
as H(M) - (H(P) + H(Q))/2 with :mod:`probes.analysis.head_distances`' entropy helper, so a head of B that is a
bit-for-bit copy of a head of A is at distance exactly 0.

Besides the summed ``(N_A, N_B)`` divergences (N = layers x heads, head index ``layer * H + head``) the
analysis keeps:

* the sums of each half of the data (:func:`probes.analysis.split.half_of` of the sentence id), so that a
  matching can be checked on two disjoint halves;
* the within-model distances of A and of B on the same word rows (:func:`~probes.analysis.head_distances.
  pair_divergences`), for D_within (distinct heads of one layer);
* with ``keep_items=True`` each item's ``(N_A, N_B)`` sums (float32), rows, id and resampling unit (its
  document id where the corpus has one, else its sentence id), for intervals over sentences or documents.

D_self (the distance of a head to itself between two halves of the sentences) is not defined for this distance:
JS is taken row by row between two heads *on the same rows*, so a head is at distance exactly 0 from itself on
any sample, and a head of another model that computes the same function scores 0 too, whatever the sample size.
What the sample size does to a distance shows in its interval over resampling units instead; the profile distance
(:func:`probes.compare.head_profiles.profile_cost`) has a D_self from two halves.

``other=None`` in :meth:`CrossDistances.update` compares A with itself (the diagonal is then 0).
Items cut by the extractor (``meta["truncated"] > 0``) are counted in ``n_partial`` and skipped: their word maps
miss rows. Cost per item: N_A x N_B x n² (n words), in chunks of at most
:data:`~probes.analysis.head_distances.CHUNK_ELEMENTS` numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis, partial_reason
from probes.analysis.head_distances import SMOOTHING, indexed_divergences, pair_divergences, pair_index
from probes.analysis.split import HALVES, half_of
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention
from probes.results import Result, require_pandas

__all__ = ["CrossDistances", "CrossDistanceResult", "cross_divergences", "word_rows", "unit_of"]


@dataclass(frozen=True)
class CrossDistanceResult(Result):
    """Summed word-level JS divergences between every head of model A and every head of model B.

    Attributes:
        layers_a, heads_a, layers_b, heads_b: 0-based layers and heads of each model (head index = position in
            layers x number of heads + position in heads).
        sums: ``(N_A, N_B)`` float64, Σ over word rows of JS.
        n_rows: word rows summed over; ``n_items``: items used; ``n_partial``: items skipped as cut;
            ``n_unused``: items beyond ``max_items``.
        half_sums: ``(2, N_A, N_B)`` the sums of each half (:data:`probes.analysis.split.HALVES` order);
            ``half_rows``: ``(2,)`` their rows.
        within_a, within_b: ``(P_A,)`` / ``(P_B,)`` Σ over the same rows of JS between the heads a < b of one
            model (:func:`~probes.analysis.head_distances.pair_index` order).
        item_sums: ``(I, N_A, N_B)`` float32 per used item (with ``keep_items``), else None;
            ``item_rows``: ``(I,)`` its rows; ``item_ids``, ``item_units``: its id and resampling unit.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"sums": "layers_a*heads_a layers_b*heads_b", "half_sums": "2 layers_a*heads_a layers_b*heads_b",
               "half_rows": "2", "item_sums": "I layers_a*heads_a layers_b*heads_b", "item_rows": "I"}

    layers_a: tuple[int, ...]
    heads_a: tuple[int, ...]
    layers_b: tuple[int, ...]
    heads_b: tuple[int, ...]
    sums: npt.NDArray[np.float64]
    n_rows: int
    n_items: int
    half_sums: npt.NDArray[np.float64]
    half_rows: npt.NDArray[np.int64]
    within_a: npt.NDArray[np.float64]
    within_b: npt.NDArray[np.float64]
    n_partial: int = 0
    n_unused: int = 0
    item_sums: npt.NDArray[np.float32] | None = None
    item_rows: npt.NDArray[np.int64] | None = None
    item_ids: tuple[str, ...] = ()
    item_units: tuple[str, ...] = ()

    @property
    def shape_a(self) -> tuple[int, int]:
        """``(L_A, H_A)``."""
        return len(self.layers_a), len(self.heads_a)

    @property
    def shape_b(self) -> tuple[int, int]:
        """``(L_B, H_B)``."""
        return len(self.layers_b), len(self.heads_b)

    def per_row(self) -> npt.NDArray[np.float64]:
        """``(N_A, N_B)`` mean JS per word row (NaN without rows)."""
        return _mean(self.sums, self.n_rows)

    def half_per_row(self, half: int) -> npt.NDArray[np.float64]:
        """``(N_A, N_B)`` mean JS per word row on half ``half`` (0: ``select``, 1: ``report``)."""
        return _mean(self.half_sums[half], int(self.half_rows[half]))

    def within(self, model: str) -> npt.NDArray[np.float64]:
        """``(N, N)`` mean JS per word row between the heads of model ``"a"`` or ``"b"`` (symmetric, zero diagonal)."""
        if model not in ("a", "b"):
            raise ConfigError(f"model: expected 'a' or 'b', found {model!r}")
        pairs = self.within_a if model == "a" else self.within_b
        n = int(np.prod(self.shape_a if model == "a" else self.shape_b))
        out = np.zeros((n, n))
        if n > 1 and pairs.size:
            first, second = pair_index(n)
            out[first, second] = out[second, first] = pairs
        return _mean(out, self.n_rows)

    def unit_sums(self, by: str = "unit") -> tuple[tuple[str, ...], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """``(units, (U, N_A, N_B) sums, (U,) rows)``: the kept items summed per resampling unit (``by="unit"``:
        documents where the items have them; ``"item"``: every item on its own), units in order of first
        appearance; ConfigError without kept items."""
        if self.item_sums is None or self.item_rows is None:
            raise ConfigError("these distances kept no per-item sums: run CrossDistances(keep_items=True)")
        if by not in ("unit", "item"):
            raise ConfigError(f"by: expected 'unit' or 'item', found {by!r}")
        keys = self.item_units if by == "unit" else tuple(f"{k}:{i}" for k, i in enumerate(self.item_ids))
        units = tuple(dict.fromkeys(keys))
        index = {u: k for k, u in enumerate(units)}
        which = np.array([index[u] for u in keys], dtype=np.intp)
        sums = np.zeros((len(units),) + self.sums.shape)
        np.add.at(sums, which, self.item_sums.astype(np.float64))
        rows = np.bincount(which, weights=self.item_rows.astype(np.float64), minlength=len(units))
        return units, sums, rows  # type: ignore[return-value]  # numpy stubs: bincount gives intp; float64 with weights

    def head_labels(self, model: str = "a") -> list[str]:
        """``layer-head`` names (1-based) of model ``"a"`` or ``"b"``, in matrix order."""
        layers, heads = (self.layers_a, self.heads_a) if model == "a" else (self.layers_b, self.heads_b)
        return [f"{layer + 1}-{head + 1}" for layer in layers for head in heads]

    def to_pandas(self) -> Any:
        """One row per (head of A, head of B): 1-based ``layer_a, head_a, layer_b, head_b``, ``distance`` (mean
        JS per word row) and ``sum``."""
        pandas = require_pandas()
        la, ha = np.meshgrid(np.asarray(self.layers_a) + 1, np.asarray(self.heads_a) + 1, indexing="ij")
        lb, hb = np.meshgrid(np.asarray(self.layers_b) + 1, np.asarray(self.heads_b) + 1, indexing="ij")
        n_b = lb.size
        return pandas.DataFrame({"layer_a": np.repeat(la.reshape(-1), n_b), "head_a": np.repeat(ha.reshape(-1), n_b),
                                 "layer_b": np.tile(lb.reshape(-1), la.size), "head_b": np.tile(hb.reshape(-1), la.size),
                                 "distance": self.per_row().reshape(-1), "sum": self.sums.reshape(-1)})


def _mean(sums: npt.NDArray[np.float64], rows: int) -> npt.NDArray[np.float64]:
    return sums / rows if rows else np.full(sums.shape, np.nan)


def _first_id(item: Any, names: tuple[str, str]) -> str:
    """The first of ``item``'s attributes ``names`` that is set, as text (``""`` when none is)."""
    for name in names:
        value = getattr(item, name, None)
        if value is not None:
            return str(value)
    return ""


def unit_of(item: Any) -> str:
    """The resampling unit of an item: its document id where it has one, else its sentence id (else ``""``)."""
    return _first_id(item, ("doc_id", "sent_id"))


def word_rows(word_attention: WordAttention, smoothing: float = SMOOTHING,
              dtype: str = "float64") -> npt.NDArray[np.floating[Any]]:
    """``(N, n, n)`` the word rows of every head (N = layers x heads, n words): special rows and columns dropped,
    each row renormalised over the words (uniform where it holds no weight on any word), then smoothed,
    (1 - s)·A + s/n. A new array in ``dtype``."""
    maps = word_attention.words_only()  # (L, H, n, n)
    n = maps.shape[-1]
    rows = np.array(maps, dtype=dtype).reshape(-1, n, n)  # (N, n, n), a copy
    if n == 0:
        return rows
    mass = rows.sum(axis=-1, keepdims=True)  # (N, n, 1)
    empty = ~(mass > 0)
    np.divide(rows, np.where(empty, 1, mass), out=rows)
    if empty.any():
        rows[np.broadcast_to(empty, rows.shape)] = 1.0 / n
    rows *= rows.dtype.type(1.0 - smoothing)
    rows += rows.dtype.type(smoothing / n)
    return rows


def cross_divergences(rows_a: npt.NDArray[np.floating[Any]],
                      rows_b: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float64]:
    """``(N_A, N_B)`` Σ over rows of JS between every row set of ``rows_a`` ``(N_A, R, T)`` and of ``rows_b``
    ``(N_B, R, T)`` (smoothed, rows sum to 1, same dtype).

    Σ_i JS_i = Σ_i H(M_i) - (Σ_i H(P_i) + Σ_i H(Q_i))/2, each head's entropy once, H(M) in chunks of at most
    :data:`~probes.analysis.head_distances.CHUNK_ELEMENTS` numbers; equal rows give exactly 0.
    """
    n_a, n_rows, width = rows_a.shape
    n_b = rows_b.shape[0]
    if rows_b.shape[1:] != (n_rows, width) or rows_b.dtype != rows_a.dtype:
        raise AlignmentError(f"rows of model B are {rows_b.shape[1:]} {rows_b.dtype}, expected {(n_rows, width)} "
                             f"{rows_a.dtype} as model A's")
    first = np.repeat(np.arange(n_a), n_b)  # (N_A*N_B,) row-major
    second = np.tile(np.arange(n_b), n_a)
    return indexed_divergences(rows_a, rows_b, first, second).reshape(n_a, n_b)


class CrossDistances(Analysis[CrossDistanceResult]):
    """Streaming word-level JS distances between the heads of two models (see the module docstring).

    Args:
        max_items: use only the first ``max_items`` items (None: all); later ones are counted in ``n_unused``.
        smoothing: s in Ã = (1 - s)·A + s/n.
        dtype: ``"float32"`` (default, as :class:`~probes.analysis.head_distances.HeadDistances`) or ``"float64"``.
        keep_items: keep each used item's ``(N_A, N_B)`` sums (float32: ``4 N_A N_B`` bytes an item), rows, id and
            unit, for intervals over resampling units.
        within: also sum the within-model distances of A and of B (for D_within).
    """

    items = "any"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    max_items: int | None
    smoothing: float
    dtype: str
    keep_items: bool
    within: bool
    _heads_a: tuple[tuple[int, ...], tuple[int, ...]] | None
    _heads_b: tuple[tuple[int, ...], tuple[int, ...]] | None
    _sums: npt.NDArray[np.float64]
    _half_sums: npt.NDArray[np.float64]
    _half_rows: npt.NDArray[np.int64]
    _within_a: npt.NDArray[np.float64]
    _within_b: npt.NDArray[np.float64]
    _n_rows: int
    _n_items: int
    _n_partial: int
    _n_unused: int
    _item_sums: list[npt.NDArray[np.float32]]
    _item_rows: list[int]
    _item_ids: list[str]
    _item_units: list[str]

    def __init__(self, max_items: int | None = None, smoothing: float = SMOOTHING, dtype: str = "float32",
                 keep_items: bool = False, within: bool = True) -> None:
        super().__init__()
        if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1):
            raise ConfigError(f"max_items: expected a positive int or None, found {max_items!r}")
        if not 0 < smoothing < 1:
            raise ConfigError(f"smoothing: expected a number in (0, 1), found {smoothing!r}")
        if dtype not in ("float32", "float64"):
            raise ConfigError(f"dtype: expected 'float32' or 'float64', found {dtype!r}")
        self.add_option("max_items", max_items)
        self.add_option("smoothing", float(smoothing))
        self.add_option("dtype", dtype)
        self.add_option("keep_items", bool(keep_items))
        self.add_option("within", bool(within))
        self.add_state("_heads_a", None, "same")  # (layers, heads) of A
        self.add_state("_heads_b", None, "same")
        self.add_state("_sums", np.zeros(0), "sum")  # (N_A, N_B)
        self.add_state("_half_sums", np.zeros(0), "sum")  # (2, N_A, N_B)
        self.add_state("_half_rows", np.zeros(2, dtype=np.int64), "sum")
        self.add_state("_within_a", np.zeros(0), "sum")  # (P_A,)
        self.add_state("_within_b", np.zeros(0), "sum")
        self.add_state("_n_rows", 0, "sum")
        self.add_state("_n_items", 0, "sum")
        self.add_state("_n_partial", 0, "sum")
        self.add_state("_n_unused", 0, "sum")
        self.add_state("_item_sums", [], "extend")
        self.add_state("_item_rows", [], "extend")
        self.add_state("_item_ids", [], "extend")
        self.add_state("_item_units", [], "extend")

    def update(self, item: Any, word_attention: WordAttention, other: WordAttention | None = None) -> None:
        """Add one item read by model A (``word_attention``) and model B (``other``; None: A against itself)."""
        if partial_reason(word_attention) or (other is not None and partial_reason(other)):
            self._n_partial += 1
            return
        if self.max_items is not None and self._n_items >= self.max_items:
            self._n_unused += 1
            return
        b_maps = word_attention if other is None else other
        if b_maps.n_words != word_attention.n_words:
            raise AlignmentError(f"item {unit_of(item) or '?'}: model A has {word_attention.n_words} words, model B "
                                 f"{b_maps.n_words}: the two models must read the same sentences")
        self._bind(word_attention, b_maps)
        rows_a = word_rows(word_attention, self.smoothing, self.dtype)  # (N_A, n, n)
        rows_b = rows_a if other is None else word_rows(b_maps, self.smoothing, self.dtype)
        n = rows_a.shape[1]
        sums = cross_divergences(rows_a, rows_b) if n else np.zeros(self._sums.shape)  # (N_A, N_B)
        self._sums += sums
        half = HALVES.index(half_of(_split_id(item)))
        self._half_sums[half] += sums
        self._half_rows[half] += n
        if self.within and n:
            self._within_a += pair_divergences(rows_a)
            self._within_b += pair_divergences(rows_b)
        self._n_rows += n
        self._n_items += 1
        if self.keep_items:
            self._item_sums.append(sums.astype(np.float32))
            self._item_rows.append(n)
            self._item_ids.append(str(getattr(item, "sent_id", None) or unit_of(item)))
            self._item_units.append(unit_of(item))

    def _bind(self, a: WordAttention, b: WordAttention) -> None:
        """Record (first item) or check both models' layers and heads; size the sums."""
        heads_a, heads_b = (tuple(a.layers), tuple(a.heads)), (tuple(b.layers), tuple(b.heads))
        if self._heads_a is None:
            self._heads_a, self._heads_b = heads_a, heads_b
            n_a, n_b = len(heads_a[0]) * len(heads_a[1]), len(heads_b[0]) * len(heads_b[1])
            self._sums, self._half_sums = np.zeros((n_a, n_b)), np.zeros((2, n_a, n_b))
            self._within_a, self._within_b = np.zeros(n_a * (n_a - 1) // 2), np.zeros(n_b * (n_b - 1) // 2)
        elif (heads_a, heads_b) != (self._heads_a, self._heads_b):
            raise AlignmentError(f"attention holds layers x heads {heads_a} and {heads_b}, expected "
                                 f"{self._heads_a} and {self._heads_b} as before")

    def compute(self) -> CrossDistanceResult:
        """The sums so far as a :class:`CrossDistanceResult`."""
        (la, ha), (lb, hb) = self._heads_a or ((), ()), self._heads_b or ((), ())
        n_a, n_b = len(la) * len(ha), len(lb) * len(hb)
        shape = (n_a, n_b)
        sums = self._sums if self._sums.shape == shape else np.zeros(shape)
        half = self._half_sums if self._half_sums.shape == (2,) + shape else np.zeros((2,) + shape)
        items: dict[str, Any] = {}
        if self.keep_items:
            items = {"item_sums": (np.stack(self._item_sums).astype(np.float32) if self._item_sums
                                   else np.zeros((0,) + shape, np.float32)),
                     "item_rows": np.asarray(self._item_rows, dtype=np.int64),
                     "item_ids": tuple(self._item_ids), "item_units": tuple(self._item_units)}
        return CrossDistanceResult(tuple(la), tuple(ha), tuple(lb), tuple(hb), sums.copy(), int(self._n_rows),
                                   int(self._n_items), half.copy(), np.asarray(self._half_rows, dtype=np.int64).copy(),
                                   np.asarray(self._within_a, dtype=np.float64).copy(),
                                   np.asarray(self._within_b, dtype=np.float64).copy(), int(self._n_partial),
                                   int(self._n_unused), **items)


def _split_id(item: Any) -> str:
    """The id an item's half is drawn from: its sentence id, else its document id, else ``""``."""
    return _first_id(item, ("sent_id", "doc_id"))
