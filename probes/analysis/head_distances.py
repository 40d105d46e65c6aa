"""Jensen-Shannon distances between every pair of heads (Clark et al. 2019 §6, ``clark_spec.md`` §6).

For heads a and b, D(a, b) = Σ over examples Σ over query rows i of JS(Ã_a[i, :], Ã_b[i, :]), on the
token-level maps (specials included, no pooling to words), with Ã = (1 - s)·A + s/T (Clark: s = 0.001),
natural log and JS(P, Q) = ½KL(P‖M) + ½KL(Q‖M), M = (P + Q)/2. The sum is plain, not an average (as
the released code; scale does not matter for MDS); :meth:`DistanceResult.per_row` gives the mean per
query row. Computed as JS = H(M) - (H(P) + H(Q))/2 (each item in ``dtype``, float32 by default: twice
as fast as float64 and within ~1e-5 relative of it, far below what an MDS layout can show; sums over
items in float64): the row entropies of each head once per item, H(M) for the pairs in chunks of at most :data:`CHUNK_ELEMENTS` numbers, so memory stays
bounded for 1,024 heads. Identical heads give exactly 0 (M = P bit for bit).

Cost: the work is (N(N-1)/2) pairs x T² per item for N heads and T tokens, so the analysis uses
only the first ``max_items`` items that come with token maps (:data:`DEFAULT_JS_SENTENCES`; None: all),
and, when ``ids`` is given, only items whose id is in it (pass ids spread over the corpus so that the
budget is not spent on its first, often atypical, sentences). Items without token maps (``word_attention.tokens is None``:
windowed or truncated inputs, or an extractor run without ``keep_tokens``) are counted in
``n_without_tokens`` and skipped; items with maps beyond the budget or outside ``ids`` in
``n_unused``. Shards are merged by summing: the budget is per shard, so a merge equals one pass
whenever the shards together hold at most ``max_items`` items with maps.

With ``keep_items=True`` the analysis also keeps, for every item it used, that item's pair sums
(``(P,)`` float32, :func:`pair_index` order), its query rows and its id, so that intervals can resample
items (:mod:`probes.compare.spread`); 100 items of 72 heads hold 100 x 2,556 x 4 bytes = 1 MB.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention
from probes.results import Result, require_pandas

__all__ = ["HeadDistances", "DistanceResult", "DEFAULT_JS_SENTENCES", "SMOOTHING", "CHUNK_ELEMENTS",
           "indexed_divergences", "pair_index"]

#: Items (with token maps) used by default. Cost grows as N² T² (N heads, T tokens): 72 heads on EWT dev
#: sentences (all-MiniLM-L6-v2 tokens: mean T = 17) take ~4 ms per sentence in float32; 1,024 heads ~0.5 s,
#: so pass a smaller ``max_items`` for such models. 100 is enough for the layout: on EWT dev, the distances of
#: two disjoint samples of 100 spread sentences have a Spearman correlation of 0.993 (50: 0.992, 200: 0.995,
#: 400: 0.997; all-MiniLM-L6-v2, 72 heads); the cut into clusters is less stable than the distances
#: (adjusted Rand index of the two samples' 8 groups 0.58-0.93 at 100-400 sentences).
DEFAULT_JS_SENTENCES = 100
#: Clark et al.'s smoothing: Ã = (1 - SMOOTHING)·A + SMOOTHING/T.
SMOOTHING = 0.001
#: Float64 numbers in one chunk of pairs: 512 KB buffers stay in cache (measured fastest of 16K-256K).
CHUNK_ELEMENTS = 65_536


def pair_index(n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``(P,)`` first and second head of every pair a < b of ``n`` heads, in row-major upper-triangle order."""
    return np.triu_indices(n, k=1)


@dataclass(frozen=True)
class DistanceResult(Result):
    """Summed JS divergence between every pair of heads.

    Attributes:
        layers, heads: 0-based model layers and heads held; head index = position in ``layers`` x
            ``len(heads)`` + position in ``heads`` (``layer * H + head`` for a whole model).
        distance: ``(N, N)`` float64, N = L*H, symmetric, zero diagonal: Σ over rows of JS.
        n_rows: query rows (tokens, specials included) summed over.
        n_items: items used.
        n_without_tokens: items skipped because they came without token maps.
        n_unused: items with token maps not used (beyond ``max_items`` or outside ``ids``).
        item_pairs: ``(I, P)`` float32 per used item, its Σ over rows of JS for every pair a < b in
            :func:`pair_index` order (P = N(N-1)/2), or None (kept only with ``keep_items=True``).
        item_rows: ``(I,)`` int64 query rows of each used item, or None.
        item_ids: ids (``sent_id``, else ``doc_id``, else ``""``) of the used items, in the rows' order.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"distance": "layers*heads layers*heads", "item_pairs": "I _", "item_rows": "I"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    distance: npt.NDArray[np.float64]
    n_rows: int
    n_items: int
    n_without_tokens: int = 0
    n_unused: int = 0
    item_pairs: npt.NDArray[np.float32] | None = None
    item_rows: npt.NDArray[np.int64] | None = None
    item_ids: tuple[str, ...] = ()

    def per_row(self) -> npt.NDArray[np.float64]:
        """``(N, N)`` mean JS per query row (NaN without rows)."""
        if not self.n_rows:
            return np.full(self.distance.shape, np.nan)
        return self.distance / self.n_rows

    def head_labels(self) -> list[str]:
        """``layer-head`` names (1-based) of the ``N`` heads, in matrix order."""
        return [f"{layer + 1}-{head + 1}" for layer in self.layers for head in self.heads]

    def to_pandas(self) -> Any:
        """One row per pair a < b: ``head_a``, ``head_b`` (1-based ``layer-head``), ``distance``, ``per_row``."""
        pandas = require_pandas()
        names = np.asarray(self.head_labels(), dtype=object)
        first, second = pair_index(len(names))
        return pandas.DataFrame({"head_a": names[first], "head_b": names[second],
                                 "distance": self.distance[first, second],
                                 "per_row": self.per_row()[first, second]})


class HeadDistances(Analysis[DistanceResult]):
    """Streaming Clark §6 head distances on token maps (see the module docstring).

    Args:
        max_items: use the first ``max_items`` items that come with token maps (None: all).
        ids: when given, use only items whose id (``sent_id``, else ``doc_id``) is in it (still at most
            ``max_items`` of them).
        smoothing: s in Ã = (1 - s)·A + s/T (Clark: 0.001).
        dtype: ``"float32"`` (default) or ``"float64"``: the precision of each item's computation.
        keep_items: also keep each used item's pair sums, rows and id (``DistanceResult.item_pairs`` ...),
            for intervals over items.
    """

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    max_items: int | None
    ids: frozenset[str] | None
    smoothing: float
    dtype: str
    keep_items: bool
    _pairs: npt.NDArray[np.float64]
    _n_rows: int
    _n_items: int
    _n_without_tokens: int
    _n_unused: int
    _item_pairs: list[npt.NDArray[np.float32]]
    _item_rows: list[int]
    _item_ids: list[str]

    def __init__(self, max_items: int | None = DEFAULT_JS_SENTENCES, ids: Iterable[str] | None = None,
                 smoothing: float = SMOOTHING, dtype: str = "float32", keep_items: bool = False) -> None:
        super().__init__()
        if max_items is not None and (not isinstance(max_items, int) or max_items < 1):
            raise ConfigError(f"max_items: expected a positive int or None, found {max_items!r}")
        if not 0 < smoothing < 1:
            raise ConfigError(f"smoothing: expected a number in (0, 1), found {smoothing!r}")
        self.add_option("max_items", max_items)
        self.add_option("ids", None if ids is None else frozenset(str(i) for i in ids))
        self.add_option("smoothing", float(smoothing))
        if dtype not in ("float32", "float64"):
            raise ConfigError(f"dtype: expected 'float32' or 'float64', found {dtype!r}")
        self.add_option("dtype", dtype)
        self.add_option("keep_items", bool(keep_items))
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_pairs", np.zeros(0), "sum")  # (N(N-1)/2,) float64, pair_index order
        self.add_state("_n_rows", 0, "sum")
        self.add_state("_n_items", 0, "sum")
        self.add_state("_n_without_tokens", 0, "sum")
        self.add_state("_n_unused", 0, "sum")
        self.add_state("_item_pairs", [], "extend")  # (P,) float32 per used item, with keep_items
        self.add_state("_item_rows", [], "extend")  # query rows per used item
        self.add_state("_item_ids", [], "extend")  # id per used item

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add the JS divergences of every pair of heads on one item's token maps."""
        tokens = word_attention.tokens
        if tokens is None:
            self._n_without_tokens += 1
            return
        if not self._wanted(item):
            self._n_unused += 1
            return
        n_heads = self._check_heads(word_attention)
        weights = tokens.weights  # (L, H, T, T)
        if weights.shape[:2] != (len(self._layers or ()), len(self._heads or ())):
            raise AlignmentError(f"token maps hold {weights.shape[:2]} layers x heads, expected "
                                 f"{(len(self._layers or ()), len(self._heads or ()))} as the word maps")
        n_tok = weights.shape[-1]
        if n_tok == 0:
            self._keep(item, np.zeros(self._pairs.shape), 0)
            self._n_items += 1
            return
        rows = weights.reshape(n_heads, n_tok, n_tok).astype(self.dtype)  # (N, T, T), a copy
        rows *= rows.dtype.type(1.0 - self.smoothing)
        rows += rows.dtype.type(self.smoothing / n_tok)
        pairs = pair_divergences(rows)  # (P,)
        self._pairs += pairs
        self._keep(item, pairs, n_tok)
        self._n_rows += n_tok
        self._n_items += 1

    def _keep(self, item: Any, pairs: npt.NDArray[np.float64], n_rows: int) -> None:
        """With ``keep_items``: remember one used item's ``(P,)`` pair sums, its rows and its id."""
        if not self.keep_items:
            return
        self._item_pairs.append(np.asarray(pairs, dtype=np.float32))
        self._item_rows.append(int(n_rows))
        key = getattr(item, "sent_id", None) or getattr(item, "doc_id", None)
        self._item_ids.append("" if key is None else str(key))

    def _wanted(self, item: Any) -> bool:
        """Whether this item is used: inside ``ids`` (when given) and within the budget."""
        if self.ids is not None:
            key = getattr(item, "sent_id", None) or getattr(item, "doc_id", None)
            if key is None or str(key) not in self.ids:
                return False
        return self.max_items is None or self._n_items < self.max_items

    def _check_heads(self, word_attention: WordAttention) -> int:
        """Record (first item) or check the layers and heads; the number of heads N = L*H."""
        n = len(word_attention.layers) * len(word_attention.heads)
        if self.bind_heads(word_attention):
            self._pairs = np.zeros(n * (n - 1) // 2)
        return n

    def compute(self) -> DistanceResult:
        """The summed divergences so far as a symmetric :class:`DistanceResult`."""
        layers, heads = self._layers or (), self._heads or ()
        n = len(layers) * len(heads)
        distance = np.zeros((n, n))
        if n > 1 and self._pairs.size:
            first, second = pair_index(n)
            distance[first, second] = self._pairs
            distance[second, first] = self._pairs
        items: dict[str, Any] = {}
        if self.keep_items:
            n_pairs = n * (n - 1) // 2
            items = {"item_pairs": (np.stack(self._item_pairs).astype(np.float32) if self._item_pairs
                                    else np.zeros((0, n_pairs), np.float32)),
                     "item_rows": np.asarray(self._item_rows, dtype=np.int64),
                     "item_ids": tuple(self._item_ids)}
        return DistanceResult(layers, heads, distance, self._n_rows, self._n_items, self._n_without_tokens,
                              self._n_unused, **items)


def pair_divergences(rows: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float64]:
    """``(P,)`` Σ over rows of JS between every pair a < b of ``rows`` ``(N, R, T)`` (smoothed, rows sum to 1)."""
    return indexed_divergences(rows, rows, *pair_index(rows.shape[0]))


def indexed_divergences(rows_a: npt.NDArray[np.floating[Any]], rows_b: npt.NDArray[np.floating[Any]],
                        first: npt.NDArray[np.intp], second: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    """``(P,)`` Σ over rows of JS between ``rows_a[first[k]]`` and ``rows_b[second[k]]`` for each pair ``k``;
    ``rows_a`` ``(N_A, R, T)`` and ``rows_b`` ``(N_B, R, T)`` smoothed, rows summing to 1, of one dtype (they may be
    the same array: heads of one model).

    Σ_i JS_i = Σ_i H(M_i) - (Σ_i H(P_i) + Σ_i H(Q_i))/2: each head's entropy once, H(M) for the pairs in
    chunks of :data:`CHUNK_ELEMENTS` numbers held in reused buffers (cache-sized, no allocation per chunk).
    """
    _, n_rows, width = rows_a.shape
    dtype = rows_a.dtype
    own_a = _neg_entropy(rows_a, np.empty(rows_a.shape[:2], dtype)).sum(axis=-1, dtype=np.float64)  # (N_A,)
    own_b = own_a if rows_b is rows_a else \
        _neg_entropy(rows_b, np.empty(rows_b.shape[:2], dtype)).sum(axis=-1, dtype=np.float64)  # (N_B,)
    out = np.empty(first.shape[0])  # (P,) float64
    step = max(1, CHUNK_ELEMENTS // max(1, n_rows * width))
    mix, logs = np.empty((step, n_rows, width), dtype), np.empty((step, n_rows, width), dtype)  # (step, R, T)
    per_row = np.empty((step, n_rows), dtype)
    for start in range(0, first.shape[0], step):
        a, b = first[start:start + step], second[start:start + step]
        p = a.shape[0]
        m = mix[:p]
        np.take(rows_a, a, axis=0, out=m)
        np.take(rows_b, b, axis=0, out=logs[:p])
        m += logs[:p]
        m *= dtype.type(0.5)
        neg_mix = _neg_entropy(m, per_row[:p], logs[:p]).sum(axis=-1, dtype=np.float64)  # (p,) Σ_i Σ_j m log m
        out[start:start + p] = 0.5 * (own_a[a] + own_b[b]) - neg_mix
    # JS >= 0; nearly identical heads (e.g. near-uniform ones) can come out a rounding error below 0
    return np.maximum(out, 0.0, out=out)


def _neg_entropy(p: npt.NDArray[np.floating[Any]], out: npt.NDArray[np.floating[Any]],
                 work: npt.NDArray[np.floating[Any]] | None = None) -> npt.NDArray[np.floating[Any]]:
    """``out`` ``(..., R)`` = Σ_j p log p over the last axis of ``p`` ``(..., R, T)`` (entries > 0), in nats.

    One code path for heads and mixtures, so that identical heads give exactly 0.
    """
    logs = np.log(p, out=work)
    logs *= p
    return np.sum(logs, axis=-1, out=out)
