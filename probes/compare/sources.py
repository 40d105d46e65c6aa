"""The test of the findings under attention sources (issue 40, item 5): weights against norms, paired.

Three comparisons, each a pure computation on what the runs collected (:mod:`probes.runs.sources` runs the model):

* **Shares** (Kobayashi et al. 2020, Figure 3, token level): per layer, the share of attention on ``[CLS]`` (the
  specials before the first word), on ``[SEP]`` (the other specials), on both, and on "." and ","
  (:attr:`~probes.extraction.attention.TokenAttention.punct`), averaged over heads and over every query row, the
  specials' rows included (as Kobayashi et al. average). A decoder has no ``[SEP]`` and its first token is BOS or
  the first word: its ``first`` category is the first token's share (the attention sink), in place of ``[CLS]``.
  :class:`TokenShares` sums each sentence's rows; :func:`compare_shares` pairs the sources sentence by sentence
  and takes the document (or, without document ids, the sentence) as the independent unit: the mean share per
  source (every token row weighted alike), the difference (source minus ``weights``) with a paired bootstrap 95%
  interval over units, and a two-sided sign-flip permutation test of the difference over units (flipping a unit's
  sign swaps its two sources; every pattern when there are at most ``EXACT_LIMIT``, else ``n_permutations`` random
  ones with p = (1 + count) / (1 + draws)), Holm-adjusted over every test of the table.
  The verdict (:meth:`ShareComparison.verdict`): "yes" when the share is lower under the source in every layer with
  Holm-adjusted p < 0.05, "partly" in some layers, "no" in none.
* **Boards** (:func:`compare_boards`): each source's dependency leaderboard made its own held-out selection; per
  relation, each board's best head, its accuracy and its own beats-baseline verdict, and whether the head keeps
  its place (same layer-head) under the other source or moves.
* **Coreference** (:func:`coref_pick`): the best head (chosen on held-out documents) and its accuracy per source.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.compare.fair_tests import EXACT_LIMIT
from probes.errors import ConfigError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.heads.inference import holm
from probes.heads.intervals import percentile_interval, resample_counts, resampling_units
from probes.heads.naming import head_name
from probes.heads.selection import LeaderboardRow
from probes.results import Result, saveable

__all__ = ["ENCODER_CATEGORIES", "DECODER_CATEGORIES", "CATEGORY_LABELS", "HEADLINE", "VERDICTS", "category_masks",
           "token_shares", "TokenShares", "ShareSums", "ShareComparison", "compare_shares", "sign_flip_sums",
           "SourcePick", "RelationPlaces", "BoardComparison", "compare_boards", "CorefPick", "coref_pick",
           "SIGN_FLIP_RULE", "ALPHA"]

#: The share categories of an encoder and of a decoder (no end special; the first token in place of [CLS]).
ENCODER_CATEGORIES: tuple[str, ...] = ("cls", "sep", "cls+sep", "punct")
DECODER_CATEGORIES: tuple[str, ...] = ("first", "punct")
#: How each category is named where a person reads it.
CATEGORY_LABELS: dict[str, str] = {"cls": "[CLS]", "sep": "[SEP]", "cls+sep": "[CLS]+[SEP]",
                                   "first": "first token (sink)", "punct": '"." and ","'}
#: The category a model's verdict on Kobayashi's claim is read from: [CLS]+[SEP], or a decoder's first token.
HEADLINE: dict[bool, str] = {False: "cls+sep", True: "first"}
#: The verdicts, from the tests: lower in every layer, in some, in none.
VERDICTS: tuple[str, ...] = ("yes", "partly", "no")
#: Significance level after Holm's correction.
ALPHA = 0.05
#: How the paired test computes its p (a table's footer cites it).
SIGN_FLIP_RULE = ("two-sided sign-flip permutation test of the paired difference over units (a flip swaps a unit's "
                  f"two sources; every sign pattern when there are at most {EXACT_LIMIT}, else Monte Carlo with "
                  "p = (1 + count) / (1 + draws)), Holm-adjusted over every test of the table")
_CHUNK = 2048  # sign patterns per matrix product


def category_masks(tokens: TokenAttention, causal: bool) -> dict[str, npt.NDArray[np.bool_]]:
    """``(T,)`` masks of the key tokens of each share category (:data:`ENCODER_CATEGORIES` or, for a decoder,
    :data:`DECODER_CATEGORIES`); "." and "," never count twice (a decoder's first token is its own category)."""
    if causal:
        first = np.zeros(tokens.n_tokens, dtype=bool)
        first[:1] = True
        return {"first": first, "punct": tokens.punct & ~first}
    return {"cls": tokens.start_special.copy(), "sep": tokens.end_special.copy(), "cls+sep": tokens.is_special,
            "punct": tokens.punct}


def token_shares(tokens: TokenAttention, causal: bool) -> tuple[npt.NDArray[np.float64], int]:
    """``(sums (L, C), rows)``: for each layer and category, the share of each query row's attention on the
    category's tokens, averaged over heads and summed over the ``rows`` query rows (every token, specials
    included); a category's mean share over many inputs is the sum of their sums over the sum of their rows."""
    maps = np.asarray(tokens.weights, dtype=np.float64)  # (L, H, T, T)
    masks = category_masks(tokens, causal)
    sums = np.stack([maps[..., mask].sum(axis=-1).mean(axis=1).sum(axis=-1) for mask in masks.values()], axis=-1)
    return sums, tokens.n_tokens  # (L, C)


@saveable
@dataclass(frozen=True)
class ShareSums:
    """Each sentence's summed shares under one source (:func:`token_shares`), in the order the sentences came.

    Attributes:
        categories: the share categories (axis 2 of ``sums``).
        causal: whether the model is a decoder.
        item_ids, doc_ids: each sentence's id and document id (None: none).
        sums: ``(N, L, C)`` float64 summed head-mean shares of each sentence's token rows.
        rows: ``(N,)`` int64 token rows of each sentence.
        n_without_tokens: sentences seen without token maps (run in windows or truncated): left out.
    """

    _shapes = {"sums": "item_ids _ categories", "rows": "item_ids"}

    categories: tuple[str, ...]
    causal: bool
    item_ids: tuple[str, ...]
    doc_ids: tuple[str | None, ...]
    sums: npt.NDArray[np.float64]
    rows: npt.NDArray[np.int64]
    n_without_tokens: int = 0


class TokenShares(Analysis[ShareSums]):
    """Streaming token-level shares per sentence (see the module): needs the extractor's token maps
    (``keep_tokens=True``); a sentence without them (windowed or truncated) is counted and left out."""

    items = "sentences"
    causal: bool  # declared by add_option in __init__
    _ids: list[str]
    _docs: list[str | None]
    _sums: list[npt.NDArray[np.float64]]
    _rows: list[int]
    _without: int

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.add_option("causal", bool(causal))
        self.add_state("_ids", [], "extend")
        self.add_state("_docs", [], "extend")
        self.add_state("_sums", [], "extend")
        self.add_state("_rows", [], "extend")
        self.add_state("_without", 0, "sum")

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add one sentence's summed shares (none without token maps)."""
        if word_attention.tokens is None:
            self._without += 1
            return
        sums, rows = token_shares(word_attention.tokens, self.causal)
        self._ids.append(str(getattr(item, "sent_id", None) or f"#{len(self._ids) + self._without}"))
        self._docs.append(getattr(item, "doc_id", None))
        self._sums.append(sums)
        self._rows.append(rows)

    def compute(self) -> ShareSums:
        """The sentences so far as :class:`ShareSums`."""
        categories = DECODER_CATEGORIES if self.causal else ENCODER_CATEGORIES
        sums = np.stack(self._sums) if self._sums else np.zeros((0, 0, len(categories)))
        return ShareSums(categories, self.causal, tuple(self._ids), tuple(self._docs), sums.astype(np.float64),
                         np.asarray(self._rows, dtype=np.int64), int(self._without))


def sign_flip_sums(differences: npt.ArrayLike, *, n_permutations: int = 10_000, seed: int = 0
                   ) -> tuple[npt.NDArray[np.float64], int, bool]:
    """``(p (K,), draws, exact)``: two-sided sign-flip p-values of ``sum_u d_uk = 0`` for each of the ``K`` columns
    of the per-unit differences ``(U, K)``, one set of sign patterns shared by every column (every pattern when
    ``2^U <= EXACT_LIMIT``, else ``n_permutations`` random ones, ``p = (1 + count) / (1 + draws)``). A column that
    is 0 in every unit has p = 1; NaN with fewer than 2 units."""
    d = np.asarray(differences, dtype=np.float64)
    n_units, k = d.shape
    if n_units < 2:
        return np.full(k, np.nan), 0, False
    observed = np.abs(d.sum(axis=0))  # (K,)
    slack = 1e-9 * np.abs(d).sum(axis=0)  # rounding of the same sum in another order
    exact = 2 ** n_units <= EXACT_LIMIT
    rng = np.random.default_rng(seed)
    total = 2 ** n_units if exact else n_permutations
    count = np.zeros(k, dtype=np.int64)
    for start in range(0, total, _CHUNK):
        size = min(_CHUNK, total - start)
        if exact:
            codes = np.arange(start, start + size)[:, None] >> np.arange(n_units)[None, :]
            signs = 1.0 - 2.0 * (codes & 1)  # (size, U)
        else:
            signs = rng.choice((1.0, -1.0), size=(size, n_units))
        count += (np.abs(signs @ d) >= observed - slack).sum(axis=0)
    p = count / total if exact else (1 + count) / (1 + total)
    return np.asarray(p, dtype=np.float64), int(total), exact


@dataclass(frozen=True)
class ShareComparison(Result):
    """Per layer and category, the mean share of attention under each source and its paired test against
    ``weights`` (see the module).

    Attributes:
        sources: the sources, ``weights`` first (axis 0 of the arrays).
        categories: the share categories (axis 2).
        causal: whether the model is a decoder (its ``first`` category replaces ``[CLS]``).
        mean, low, high: ``(S, L, C)`` mean share (every token row weighted alike) and its bootstrap 95% interval.
        diff, diff_low, diff_high: ``(S, L, C)`` source minus ``weights`` and its paired 95% interval (0 and NaN
            for ``weights`` itself).
        p, p_holm: ``(S, L, C)`` sign-flip p and Holm-adjusted p over every test of the table (NaN: no test).
        n_tests: the tests Holm corrected over; n_permutations: sign patterns drawn (all when ``exact``).
        unit, n_units, rule: the independent unit (``documents`` or ``sentences``), how many, and why.
        n_sentences, n_rows: sentences paired and token rows averaged over.
        n_resamples, seed: the bootstrap's draws and the seed of every draw.
    """

    _shapes = {"mean": "sources L categories", "low": "sources L categories",
               "high": "sources L categories", "diff": "sources L categories",
               "diff_low": "sources L categories", "diff_high": "sources L categories",
               "p": "sources L categories", "p_holm": "sources L categories"}

    sources: tuple[str, ...]
    categories: tuple[str, ...]
    causal: bool
    mean: npt.NDArray[np.float64]
    low: npt.NDArray[np.float64]
    high: npt.NDArray[np.float64]
    diff: npt.NDArray[np.float64]
    diff_low: npt.NDArray[np.float64]
    diff_high: npt.NDArray[np.float64]
    p: npt.NDArray[np.float64]
    p_holm: npt.NDArray[np.float64]
    n_tests: int
    n_permutations: int
    exact: bool
    unit: str
    n_units: int
    rule: str
    n_sentences: int
    n_rows: int
    n_resamples: int
    seed: int

    @property
    def n_layers(self) -> int:
        """Layers compared."""
        return int(self.mean.shape[1])

    @property
    def headline(self) -> str:
        """The category of Kobayashi's claim for this model: ``cls+sep``, or ``first`` for a decoder."""
        return HEADLINE[self.causal]

    def lower(self, source: str, category: str) -> npt.NDArray[np.bool_]:
        """``(L,)`` the layers where the share is lower under ``source`` than by weights, Holm-adjusted p < 0.05."""
        s, c = self.sources.index(source), self.categories.index(category)
        return np.asarray((self.diff[s, :, c] < 0) & (self.p_holm[s, :, c] < ALPHA), dtype=bool)

    def verdict(self, source: str = "norm", category: str | None = None) -> str:
        """``yes`` (lower under ``source`` in every layer, from the tests), ``partly`` (in some) or ``no`` (in none),
        for ``category`` (default: :attr:`headline`)."""
        lower = self.lower(source, category or self.headline)
        return "yes" if lower.all() else "partly" if lower.any() else "no"

    def to_pandas(self) -> Any:
        """One row per source, layer (1-based) and category: mean, interval, difference, its interval, p, Holm p."""
        from probes.results import require_pandas

        rows = []
        for (s, source), layer, (c, category) in itertools.product(enumerate(self.sources), range(self.n_layers),
                                                                   enumerate(self.categories)):
            at = (s, layer, c)
            rows.append({"source": source, "layer": layer + 1, "category": category,
                         "label": CATEGORY_LABELS[category], "mean": self.mean[at], "ci_low": self.low[at],
                         "ci_high": self.high[at], "diff_vs_weights": self.diff[at], "diff_ci_low": self.diff_low[at],
                         "diff_ci_high": self.diff_high[at], "p": self.p[at], "p_holm": self.p_holm[at]})
        return require_pandas().DataFrame(rows)


def _paired(shares: Mapping[str, ShareSums], baseline: str) -> tuple[list[str], list[int], dict[str, list[int]]]:
    """The sources (baseline first), the baseline's rows kept and each source's matching rows: the sentences every
    source holds, by id, in the baseline's order."""
    if baseline not in shares or len(shares) < 2:
        raise ConfigError(f"compare_shares: expected {baseline!r} and at least one other source, found "
                          f"{sorted(shares)}")
    names = [baseline, *[s for s in shares if s != baseline]]
    first = shares[baseline]
    for name in names[1:]:
        if shares[name].categories != first.categories or shares[name].sums.shape[1:] != first.sums.shape[1:]:
            raise ConfigError(f"compare_shares: {name!r} holds other layers or categories than {baseline!r}")
    where = {name: {item: k for k, item in enumerate(shares[name].item_ids)} for name in names}
    kept = [k for k, item in enumerate(first.item_ids) if all(item in where[n] for n in names)]
    if not kept:
        raise ConfigError("compare_shares: no sentence holds token maps under every source")
    rows = {name: [where[name][first.item_ids[k]] for k in kept] for name in names}
    for name in names[1:]:
        if not np.array_equal(shares[name].rows[rows[name]], first.rows[kept]):
            raise ConfigError(f"compare_shares: {name!r} ran other tokens than {baseline!r} on the same sentences")
    return names, kept, rows


def compare_shares(shares: Mapping[str, ShareSums], *, baseline: str = "weights", unit: str = "auto",
                   n_resamples: int = 1000, n_permutations: int = 10_000, seed: int = 0) -> ShareComparison:
    """Each source's shares against ``baseline``'s, paired sentence by sentence (see the module).

    Args:
        shares: each source's :class:`ShareSums` on the same sentences (those not under every source are left out).
        unit: the independent unit (:func:`probes.heads.intervals.resampling_units`: ``auto`` takes documents
            where every sentence has a document id and there are at least 10).
        n_resamples, n_permutations, seed: bootstrap draws, sign patterns (when not exact) and their seed.
    """
    names, kept, rows = _paired(shares, baseline)
    first = shares[baseline]
    units = resampling_units(list(np.asarray(first.doc_ids, dtype=object)[kept]), len(kept), unit=unit)
    summed = np.stack([units.sum(shares[n].sums[rows[n]]) for n in names])  # (S, U, L, C)
    n_rows = units.sum(first.rows[kept].astype(np.float64))  # (U,)
    n_sources, n_units = summed.shape[:2]
    flat = summed.reshape(n_sources, n_units, -1)  # (S, U, K)
    mean = flat.sum(axis=1) / n_rows.sum()  # (S, K)
    counts = resample_counts(n_units, n_resamples, seed)  # (B, U)
    draws = np.einsum("bu,suk->sbk", counts, flat) / (counts @ n_rows)[None, :, None]  # (S, B, K)
    low, high = zip(*(percentile_interval(draws[s]) for s in range(n_sources)))
    diff_draws = draws - draws[:1]
    d_low, d_high = zip(*(percentile_interval(diff_draws[s]) for s in range(n_sources)))
    p = np.full_like(mean, np.nan)
    n_draws, exact = 0, False
    for s in range(1, n_sources):
        p[s], n_draws, exact = sign_flip_sums(flat[s] - flat[0], n_permutations=n_permutations, seed=seed)
    p_holm = holm(p.reshape(-1)).reshape(p.shape)
    shape = (n_sources, *first.sums.shape[1:])

    def grid(values: Any) -> npt.NDArray[np.float64]:
        return np.asarray(values, dtype=np.float64).reshape(shape)

    diff_low, diff_high = grid(d_low), grid(d_high)
    diff_low[0] = diff_high[0] = np.nan
    return ShareComparison(tuple(names), first.categories, first.causal, grid(mean), grid(low), grid(high),
                           grid(mean - mean[:1]), diff_low, diff_high, grid(p), grid(p_holm),
                           int(np.isfinite(p).sum()), n_draws, exact, units.unit, units.n_units, units.rule, len(kept),
                           int(n_rows.sum()), n_resamples, seed)


@saveable
@dataclass(frozen=True)
class SourcePick:
    """One board's best head for a relation (``layer``, ``head`` 0-based) and its own tests.

    Attributes:
        source: the attention source of the board.
        layer, head, direction: the head its own held-out selection chose.
        accuracy, ci_low, ci_high: its accuracy on the report data and 95% interval.
        baseline_accuracy: the board's best baseline on the report data.
        beats_baseline: that board's verdict (Holm-adjusted p < 0.05 and margin > 0, over its own table).
        p_adjusted: that board's Holm-adjusted p (NaN: not tested).
    """

    source: str
    layer: int
    head: int
    direction: str
    accuracy: float
    ci_low: float
    ci_high: float
    baseline_accuracy: float
    beats_baseline: bool
    p_adjusted: float

    @property
    def name(self) -> str:
        """``layer-head``, 1-based."""
        return head_name(self.layer, self.head)


@saveable
@dataclass(frozen=True)
class RelationPlaces:
    """A relation's best head on each source's board (``picks``, in the boards' order; a board that does not list
    the relation has none)."""

    relation: str
    count: int
    picks: tuple[SourcePick, ...]

    def pick(self, source: str) -> SourcePick | None:
        """``source``'s pick, if its board lists the relation."""
        return next((p for p in self.picks if p.source == source), None)

    def place(self, source: str, baseline: str = "weights") -> str:
        """Under ``source`` against ``baseline``: ``kept`` (same layer-head and direction), ``kept, other
        direction``, ``moved``, or ``-`` (a board does not list the relation)."""
        mine, theirs = self.pick(source), self.pick(baseline)
        if mine is None or theirs is None:
            return "-"
        if (mine.layer, mine.head) != (theirs.layer, theirs.head):
            return "moved"
        return "kept" if mine.direction == theirs.direction else "kept, other direction"


@saveable
@dataclass(frozen=True)
class BoardComparison:
    """Each source's dependency leaderboard, relation by relation (see the module).

    Attributes:
        sources: the boards' sources, ``weights`` first.
        relations: per relation listed on any board, each board's pick.
        reported_on, selected_on, mode: where heads were reported and chosen (``separate``, ``split``, ``same``),
            as every board did: each made its own selection there.
        n_tests: per source, the tests its own Holm correction was over.
    """

    sources: tuple[str, ...]
    relations: tuple[RelationPlaces, ...]
    reported_on: str
    selected_on: str
    mode: str
    n_tests: tuple[int, ...]

    def counts(self, source: str, baseline: str = "weights") -> dict[str, int]:
        """How many relations keep their head under ``source``, move, beat their baseline there."""
        places = [r.place(source, baseline) for r in self.relations]
        beat = sum(1 for r in self.relations if (p := r.pick(source)) is not None and p.beats_baseline)
        return {"kept": places.count("kept"), "kept, other direction": places.count("kept, other direction"),
                "moved": places.count("moved"), "beats_baseline": beat, "relations": len(self.relations)}


def _pick(source: str, row: LeaderboardRow) -> SourcePick:
    best = row.baseline_accuracy if row.best_baseline == "offset" else row.position_accuracy
    return SourcePick(source, row.layer, row.head, row.direction, row.accuracy, row.ci_low, row.ci_high, best,
                      bool(row.beats_baseline), row.p_adjusted)


def compare_boards(rows: Mapping[str, Sequence[LeaderboardRow]], *, reported_on: str, selected_on: str, mode: str,
                   baseline: str = "weights") -> BoardComparison:
    """Each source's board rows, relation by relation, in the ``baseline`` board's order (relations only another
    board lists after them)."""
    if baseline not in rows:
        raise ConfigError(f"compare_boards: expected a {baseline!r} board, found {sorted(rows)}")
    names = [baseline, *[s for s in rows if s != baseline]]
    order = list(dict.fromkeys(r.relation for name in names for r in rows[name]))
    by_source = {name: {r.relation: r for r in rows[name]} for name in names}
    places = []
    for relation in order:
        picks = tuple(_pick(name, by_source[name][relation]) for name in names if relation in by_source[name])
        count = next(by_source[name][relation].count for name in names if relation in by_source[name])
        places.append(RelationPlaces(relation, count, picks))
    tests = tuple(sum(1 for r in rows[name] if np.isfinite(r.p_value)) for name in names)
    return BoardComparison(tuple(names), tuple(places), reported_on, selected_on, mode, tests)


@saveable
@dataclass(frozen=True)
class CorefPick:
    """A coreference run's best head on all mentions (chosen on held-out documents) under one source.

    Attributes:
        source: the attention source.
        layer, head: the head, 0-based (-1 when none was chosen).
        accuracy, ci_low, ci_high: its antecedent accuracy on the reported documents and 95% interval.
        baseline, baseline_accuracy: the best baseline it was tested against, and its accuracy.
        p_holm, significant: that run's Holm-adjusted p and verdict (over its own table).
        mentions: the mentions scored.
    """

    source: str
    layer: int
    head: int
    accuracy: float
    ci_low: float
    ci_high: float
    baseline: str
    baseline_accuracy: float
    p_holm: float
    significant: bool
    mentions: int

    @property
    def name(self) -> str:
        """``layer-head``, 1-based (``-`` when none)."""
        return "-" if self.layer < 0 else head_name(self.layer, self.head)


def coref_pick(source: str, rows: Sequence[Mapping[str, Any]]) -> CorefPick:
    """``source``'s pick from a coreference run's table rows (:meth:`CoreferenceRun.tables`): the head row of the
    best head on all mentions (``kind`` ``head``, ``mention_type`` ``all``, the first such row)."""
    row = next((r for r in rows if r.get("kind") == "head" and r.get("mention_type") == "all" and r.get("head")),
               None)
    nan = float("nan")
    if row is None:
        return CorefPick(source, -1, -1, nan, nan, nan, "", nan, nan, False, 0)
    layer, head = (int(x) - 1 for x in str(row["head"]).split("-"))
    return CorefPick(source, layer, head, float(row["accuracy"]), float(row["ci_low"]), float(row["ci_high"]),
                     str(row.get("baseline", "")), float(row.get("baseline_accuracy", nan)),
                     float(row.get("p_holm", nan)), bool(row.get("significant", False)), int(row.get("n", 0)))
