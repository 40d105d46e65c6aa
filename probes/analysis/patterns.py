"""Kovaleva et al. (2019) attention patterns: every (sentence, head) token map gets one of five classes.

Kovaleva, Romanov, Rogers and Rumshisky ("Revealing the Dark Secrets of BERT", Fig. 1) saw five
recurring shapes in BERT's maps: *vertical* (attention piles on the [CLS]/[SEP] columns), *diagonal*
(previous or next token), *vertical+diagonal* (both), *block* (attention stays inside contiguous chunks;
for one sentence, squares along the diagonal wider than +-1) and *heterogeneous* (everything else). They
labelled about 400 maps by hand and trained a CNN; here a deterministic rule on a few features of the map
does the job, so it is cheap (vectorised over layers x heads) and reproducible. The rule was calibrated on
one half of maps labelled by eye (``tests/fixtures/patterns/labels.json``) and its agreement with the
other half is :data:`AGREEMENT`.

Features (:func:`map_features`), each the mean over the map's *content rows* (non-special tokens; every
row when there is none) of a row's mass, so each lies in ``[0, 1]`` (rows sum to 1):

* ``cls`` / ``sep``: mass on the start / end special columns; ``special`` = ``cls + sep``;
* ``punct``: mass on the columns of tokens exactly ``"."`` or ``","``;
* ``stripe``: the largest mean column mass over non-special columns (a vertical stripe on one word);
* ``prev`` / ``next`` / ``self``: mass on the previous / next / same content token (the +-1 and main
  diagonals of the content-by-content sub-map: the first word's "previous" is not [CLS], the last
  word's "next" is not [SEP], so a vertical map does not look diagonal); ``diagonal`` = ``prev + next``;
* ``block``: mass inside contiguous chunks, defined exactly as follows. Take the content-by-content
  sub-map ``C`` (``n`` content tokens). Between content tokens ``k`` and ``k + 1`` the *crossing mass* is
  ``sum(C[:k+1, k+1:]) + sum(C[k+1:, :k+1])`` (what flows across the cut, both ways, in rows' worth).
  The content is cut after ``k`` where the crossing mass dips: it is below ``block_cut`` times the
  lower of the highest crossing mass before ``k`` and the highest after ``k`` (a relative dip, so a
  diffuse background that crosses every cut does not hide the chunks). This gives contiguous segments. A row's block mass is its mass on the columns of its own segment when that segment is at
  least ``block_min_width`` tokens wide and at most ``block_max_fraction * n`` (a segment spanning the
  whole sentence is no block); otherwise 0. Clean squares along the diagonal score ~1; a +-1 diagonal
  has no dips (about one row's worth crosses every cut), nor has a broad map (its crossing mass is one
  smooth hump), so each makes one whole-sentence segment and scores 0; maps whose mass sits on the
  specials have little content mass to count.
* ``entropy``: the row's entropy in nats (natural log, zero weights contribute 0); ``entropy_ratio`` =
  ``entropy / ln T``, 1 for a uniform row.

The rule (:func:`classify`, thresholds in :data:`THRESHOLDS`), first match wins; ``vertical mass`` is
``special`` (plus ``punct`` when ``vertical_punct``) and ``diagonal`` is ``prev + next`` (plus
``self`` when ``diagonal_self``):

1. vertical mass >= ``both_vertical`` and ``diagonal`` >= ``both_diagonal``: vertical+diagonal;
2. vertical mass >= ``vertical``: vertical;
3. ``diagonal`` >= ``diagonal``: diagonal;
4. ``block`` >= ``block``: block;
5. else heterogeneous.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.errors import InputError
from probes.extraction.attention import WordAttention, is_punct_token
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["AGREEMENT", "AttentionPatterns", "FEATURES", "PATTERNS", "PATTERN_COLUMNS", "PatternResult",
           "THRESHOLDS", "Thresholds", "classify", "map_features"]

#: The five classes of Kovaleva et al. (2019) Fig. 1, in the order of every pattern axis.
PATTERNS: tuple[str, ...] = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")

#: Table column of each pattern's fraction (``+`` written ``_`` so the names are plain identifiers).
PATTERN_COLUMNS: tuple[str, ...] = tuple("pattern_" + p.replace("+", "_") for p in PATTERNS)

#: Names of the features :func:`map_features` returns (see the module docstring).
FEATURES: tuple[str, ...] = ("cls", "sep", "special", "punct", "stripe", "prev", "next", "self", "diagonal",
                             "block", "entropy", "entropy_ratio")

_EPS = np.float32(1e-30)
_ONE_HOT = np.eye(5, dtype=np.int64)  # (5, 5) row k: pattern k


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of the pattern rule (module docstring); masses are per-row fractions in ``[0, 1]``."""

    vertical: float = 0.4
    diagonal: float = 0.4
    both_vertical: float = 0.3
    both_diagonal: float = 0.15
    block: float = 0.5
    vertical_punct: bool = False
    diagonal_self: bool = False
    block_cut: float = 0.5
    block_min_width: int = 3
    block_max_fraction: float = 0.75


#: The calibrated thresholds: the mass thresholds were grid-searched for Cohen's kappa on the calibration
#: half of the hand labels only (``benchmarks/calibrate_patterns.py``; see :data:`AGREEMENT`); the
#: ``block_*`` settings, with no block among the labels, were set on synthetic maps.
THRESHOLDS = Thresholds()

#: Agreement of the rule with maps labelled by eye (Cohen's kappa, sklearn ``cohen_kappa_score``), as
#: measured by ``tests/analysis/test_patterns.py`` (the held-out value is checked there). ``kappa_all``
#: includes the calibration half and is optimistic; quote the held-out value.
AGREEMENT: dict[str, Any] = {
    "labels": "tests/fixtures/patterns/labels.json",
    "labeller": "maps of all-MiniLM-L6-v2 on the packaged sample sentences, labelled by eye, blind to the rule",
    "split": "sha256(map id)[0] % 2: half 0 tuned the thresholds, half 1 held out",
    "kappa_heldout": 0.5584,
    "n_heldout": 73,
    "accuracy_heldout": 0.726,
    "kappa_calibration": 0.713,
    "n_calibration": 71,
    "kappa_all": 0.6328,
    "n_all": 144,
    "note": "no map was labelled block, so the block thresholds are set by the synthetic tests only",
}


def _content_rows(start_special: npt.NDArray[np.bool_], end_special: npt.NDArray[np.bool_]) -> npt.NDArray[np.intp]:
    """``(n,)`` positions of the non-special tokens (every position when all are special)."""
    content = np.flatnonzero(~(start_special | end_special))
    return content if content.size else np.arange(start_special.shape[0])


def _take(weights: npt.NDArray[Any], rows: npt.NDArray[np.intp], cols: npt.NDArray[np.intp]) -> npt.NDArray[Any]:
    """``weights[..., rows, cols]`` as a view when both are one contiguous run (the usual case)."""
    def run(idx: npt.NDArray[np.intp]) -> Any:
        return slice(int(idx[0]), int(idx[-1]) + 1) if idx.size and idx[-1] - idx[0] + 1 == idx.size else idx
    r, c = run(rows), run(cols)
    if isinstance(r, slice) or isinstance(c, slice):
        return weights[..., r, :][..., c]
    return weights[..., rows[:, None], cols[None, :]]


def _block(content: npt.NDArray[np.float32], t: Thresholds) -> npt.NDArray[np.float32]:
    """``(...,)`` mean row mass inside contiguous blocks of the content sub-map ``(..., n, n)``.

    One matmul gives ``tail[..., i, m] = sum(C[i, m:])`` (``m = 0..n``); the crossing mass of the cut
    after ``k`` and each row's mass inside its segment ``[a, b]`` (``tail[a] - tail[b + 1]``) follow from it.
    """
    n = content.shape[-1]
    lead = content.shape[:-2]
    if n < 2:
        return np.zeros(lead, dtype=np.float32)
    step, signs, after, position = _block_constants(n)
    tail = content @ step  # (..., n, n+1)
    # crossing mass after k: sum_{i<=k} tail[i, k+1] + sum_{i>k} (row_i - tail[i, k+1])
    cross = np.einsum("...ik,ik->...k", tail[..., 1:n], signs) + tail[..., 0] @ after  # (..., n-1)
    # a cut is a dip: below block_cut times the lower of the highest crossings on its left and right
    left = np.zeros_like(cross)
    left[..., 1:] = np.maximum.accumulate(cross[..., :-1], axis=-1)
    right = np.zeros_like(cross)
    right[..., :-1] = np.maximum.accumulate(cross[..., :0:-1], axis=-1)[..., ::-1]
    starts = np.ones(lead + (n,), dtype=bool)
    starts[..., 1:] = cross < t.block_cut * np.minimum(left, right)
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=-1)  # (..., n) segment start a
    ends = np.ones(lead + (n,), dtype=bool)
    ends[..., :-1] = starts[..., 1:]
    # segment end b: the nearest end at or after each position, found in reversed order
    last = n - 1 - np.maximum.accumulate(np.where(ends[..., ::-1], position, 0), axis=-1)[..., ::-1]
    width = last - first + 1  # (..., n)
    keep = (width >= t.block_min_width) & (width <= t.block_max_fraction * n)
    flat = tail.reshape(-1, n + 1)
    rows = np.arange(flat.shape[0])
    inside = flat[rows, first.reshape(-1)] - flat[rows, last.reshape(-1) + 1]  # (... * n,)
    return (inside.reshape(lead + (n,)) * keep).mean(-1, dtype=np.float32)


@lru_cache(maxsize=256)
def _block_constants(n: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32],
                                       npt.NDArray[np.float32], npt.NDArray[np.intp]]:
    """For ``n`` content tokens: ``step (n, n+1)`` = [j >= m], ``signs (n, n-1)`` = +1 if i <= k else -1,
    ``after (n, n-1)`` = [i > k] and ``position (n,)``."""
    position = np.arange(n)
    step = (position[:, None] >= np.arange(n + 1)[None, :]).astype(np.float32)
    signs = np.where(position[:, None] <= position[None, :n - 1], 1.0, -1.0).astype(np.float32)
    return step, signs, (signs < 0).astype(np.float32), position


def map_features(weights: npt.NDArray[np.floating[Any]], start_special: npt.NDArray[np.bool_],
                 end_special: npt.NDArray[np.bool_], tokens: Sequence[str],
                 thresholds: Thresholds = THRESHOLDS, *, entropy: bool = True,
                 block: bool = True) -> dict[str, npt.NDArray[np.float32]]:
    """The features of every map in ``weights`` (``(..., T, T)``, rows sum to 1); each ``(...,)`` float32.

    ``start_special`` / ``end_special`` / ``tokens`` are ``(T,)`` and shared by every map; the block
    feature uses ``thresholds``' ``block_*`` settings. Definitions in the module docstring. With
    ``entropy=False`` the two entropy features are left out (the rule does not use them; saves time); with
    ``block=False`` the block mass is 0 (the analysis computes it only for maps no earlier rule took).
    """
    weights = np.asarray(weights, dtype=np.float32)
    start = np.asarray(start_special, dtype=bool)
    end = np.asarray(end_special, dtype=bool)
    size = weights.shape[-1] if weights.ndim >= 2 else -1
    if weights.ndim < 2 or weights.shape[-2] != size or start.shape != (size,) or end.shape != (size,) \
            or len(tokens) != size or size < 1:
        raise InputError(f"map_features: expected weights (..., T, T) with (T,) special masks and T tokens, found "
                         f"weights {weights.shape}, masks {start.shape} and {end.shape}, {len(tokens)} tokens")
    rows = _content_rows(start, end)
    share = np.zeros(size, dtype=np.float32)
    share[rows] = 1.0 / rows.size  # (T,) each content row's share of the mean
    column = share @ weights  # (..., T) mean column mass over content rows
    punct = np.fromiter((is_punct_token(tok) for tok in tokens), dtype=bool, count=len(tokens)) & ~(start | end)
    plain = ~(start | end)
    masses = column @ np.stack([start, end, punct], axis=-1).astype(np.float32)  # (..., 3)
    out = {"cls": masses[..., 0], "sep": masses[..., 1], "punct": masses[..., 2],
           "stripe": column[..., plain].max(-1) if plain.any() else np.zeros(weights.shape[:-2], np.float32)}
    out["special"] = out["cls"] + out["sep"]
    content = _take(weights, rows, rows)  # (..., n, n)
    per_row = np.full(rows.size, 1.0 / rows.size, dtype=np.float32)  # (n,)
    out["prev"] = np.diagonal(content, -1, -2, -1) @ per_row[1:]
    out["next"] = np.diagonal(content, 1, -2, -1) @ per_row[:-1]
    out["self"] = np.diagonal(content, 0, -2, -1) @ per_row
    out["diagonal"] = out["prev"] + out["next"]
    out["block"] = _block(content, thresholds) if block else np.zeros(weights.shape[:-2], np.float32)
    if entropy:
        picked = _take(weights, rows, np.arange(size))  # (..., n, T)
        row_entropy = -np.einsum("...ij,...ij->...i", picked, np.log(picked + _EPS)).mean(-1)
        out["entropy"] = row_entropy
        out["entropy_ratio"] = row_entropy / np.float32(np.log(size)) if size > 1 else row_entropy * 0
    return {name: np.asarray(out[name], dtype=np.float32) for name in FEATURES if name in out}


def classify(features: Mapping[str, npt.NDArray[Any]], thresholds: Thresholds = THRESHOLDS) -> npt.NDArray[np.int8]:
    """``(...,)`` index into :data:`PATTERNS` of every map, by the rule of the module docstring."""
    t = thresholds
    vertical = np.asarray(features["special"]) + (np.asarray(features["punct"]) if t.vertical_punct else 0)
    diagonal = np.asarray(features["diagonal"]) + (np.asarray(features["self"]) if t.diagonal_self else 0)
    block = np.asarray(features["block"])
    label = np.full(np.shape(vertical), PATTERNS.index("heterogeneous"), dtype=np.int8)
    # assigned last-rule-first, so the earlier rules of the docstring override the later ones
    label[block >= t.block] = PATTERNS.index("block")
    label[diagonal >= t.diagonal] = PATTERNS.index("diagonal")
    label[vertical >= t.vertical] = PATTERNS.index("vertical")
    label[(vertical >= t.both_vertical) & (diagonal >= t.both_diagonal)] = PATTERNS.index("vertical+diagonal")
    return label


@dataclass(frozen=True)
class PatternResult(Result):
    """How often each head draws each Kovaleva pattern.

    Attributes:
        layers, heads: 0-based model layers and heads (axes of ``counts``).
        counts: ``(L, H, 5)`` maps of each head classified as each of :data:`PATTERNS`.
        n_maps: maps classified per head (sentences with token maps).
        n_without_tokens: items skipped because they came without token maps.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"counts": f"layers heads {len(PATTERNS)}"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    counts: npt.NDArray[np.int64]
    n_maps: int
    n_without_tokens: int

    def fractions(self) -> npt.NDArray[np.float64]:
        """``(L, H, 5)`` share of each head's maps in each pattern (NaN without maps)."""
        total = self.counts.sum(-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, self.counts / np.maximum(total, 1), np.nan)

    def per_layer(self) -> npt.NDArray[np.float64]:
        """``(L, 5)`` distribution of the patterns over every map of each layer (Kovaleva Fig. 2)."""
        counts = self.counts.sum(1)
        total = counts.sum(-1, keepdims=True)
        return np.where(total > 0, counts / np.maximum(total, 1), np.nan)

    def majority(self) -> npt.NDArray[np.str_]:
        """``(L, H)`` each head's most frequent pattern (the earlier in :data:`PATTERNS` on ties; "" without maps)."""
        names = np.asarray(PATTERNS)[self.counts.argmax(-1)] if self.counts.size else np.zeros((0, 0), str)
        return np.where(self.counts.sum(-1) > 0, names, "")

    def to_pandas(self) -> Any:
        """One row per head: ``layer, head`` (1-based), ``head_name``, the fraction columns
        :data:`PATTERN_COLUMNS`, ``pattern`` (majority) and ``n_maps``."""
        fractions = self.fractions()
        values: dict[str, Any] = {col: fractions[..., k] for k, col in enumerate(PATTERN_COLUMNS)}
        values["pattern"] = self.majority()
        values["n_maps"] = self.counts.sum(-1)
        table = long_table(head_axes(self.layers, self.heads), values)
        table.insert(2, "head_name", head_names(table))
        return table


class AttentionPatterns(Analysis[PatternResult]):
    """Classify every (item, head) token map into :data:`PATTERNS` and count them per head.

    Token level: items whose ``word_attention.tokens`` is None are counted in ``n_without_tokens`` and
    skipped.
    """

    items: ClassVar[str] = "any"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    thresholds: Thresholds
    _counts: npt.NDArray[np.int64]
    _n_maps: int
    _n_without_tokens: int

    def __init__(self, thresholds: Thresholds = THRESHOLDS) -> None:
        super().__init__()
        self.add_option("thresholds", thresholds)
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_counts", np.zeros((0, 0, len(PATTERNS)), dtype=np.int64), "sum")  # (L, H, 5)
        self.add_state("_n_maps", 0, "sum")
        self.add_state("_n_without_tokens", 0, "sum")

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Classify the token maps of one item (or count it as without tokens)."""
        tokens = word_attention.tokens
        if tokens is None:
            self._n_without_tokens += 1
            return
        if self.bind_heads(word_attention):
            self._counts = np.zeros((len(word_attention.layers), len(word_attention.heads), len(PATTERNS)), dtype=np.int64)
        features = map_features(tokens.weights, tokens.start_special, tokens.end_special, tokens.tokens,
                                self.thresholds, entropy=False, block=False)
        label = classify(features, self.thresholds)  # (L, H), with no block mass yet
        # block is the last rule: only maps no earlier rule took can be block; the rest keep their class
        open_ = label == PATTERNS.index("heterogeneous")  # (L, H)
        if open_.any():
            rows = _content_rows(tokens.start_special, tokens.end_special)
            block = np.zeros(label.shape, dtype=np.float32)
            block[open_] = _block(_take(tokens.weights[open_], rows, rows), self.thresholds)
            label = classify({**features, "block": block}, self.thresholds)
        self._counts += _ONE_HOT[label]  # (L, H, 5)
        self._n_maps += 1

    def compute(self) -> PatternResult:
        """The counts so far as a :class:`PatternResult`."""
        return PatternResult(self._layers or (), self._heads or (), self._counts.copy(), self._n_maps,
                             self._n_without_tokens)


def thresholds_record(thresholds: Thresholds = THRESHOLDS) -> dict[str, Any]:
    """The thresholds as a plain dict (for a run record)."""
    return asdict(thresholds)
