"""Voita et al. (2019) head roles: confidence, positional and rare-word heads (``seed_methods.md`` §b).

* **Confidence** (token level): the mean over every non-special row of all examples (pooled over
  tokens, as Voita's "average over all tokens of a dev set") of the row's largest weight, the end
  special(s) excluded from the max (Voita excludes EOS).
* **Positional** (token level): per head, a histogram of the relative offset ``argmax_j - i`` of
  each non-special row ``i`` (end specials excluded from the argmax; ties go to the left-most
  column); offsets beyond ``max_offset`` are counted in the rows only. A head is positional at
  offset ``o != 0`` when at least ``share`` (Voita: 90%) of its rows have their argmax at ``o``.
* **Rare word** (word level, ``word_attention`` words only, specials dropped): the rarest word
  of a sentence is the word whose lower-cased form has the lowest corpus count in
  ``frequencies`` (a form missing from it counts 0), ties to the left-most; the two rarest are the
  first two words in that order. Only sentences whose rarest word is outside the ``top_common``
  most frequent forms (equal counts ranked by the form) are counted. For every word row ``i`` the
  argmax over the *other* words (the row's own word excluded, ties to the left-most) is a hit when
  it is the rarest word (or one of the two rarest); the chance rate is what a uniformly random
  choice among the other words would reach, exactly: ``|R \\ {i}| / (m - 1)`` for the target set
  ``R`` and ``m`` words (summed over a sentence's rows: 1 for the rarest, 2 for the two rarest).
  For a decoder (recognised by its maps: the first word puts no weight on any later word, in
  every head) the candidates of row ``i`` are the earlier words only, the chance is
  ``|R ∩ {0..i-1}| / i``, and the first word's row (no candidate) is not counted. Rates and
  chance rates are pooled over the same rows. Without ``frequencies`` the rare-word rates are
  empty (NaN).

Offsets and positions are 0-based token positions; the histogram counts are integers and the real
sums fixed-point (:data:`~probes.analysis.surface.FIXED_SCALE`), so merging shards is exact.

Token-level measures skip (and count in ``n_without_tokens``) an item that came without token maps.
The syntactic role is not here: it comes from the leaderboard.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.analysis.surface import FIXED_SCALE, to_fixed
from probes.errors import AlignmentError, ConfigError, InputError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["DEFAULT_MAX_OFFSET", "DEFAULT_TOP_COMMON", "POSITIONAL_SHARE", "HeadRoles", "RolesResult",
           "read_counts", "word_frequencies"]

#: Voita et al.: a rare-word sentence has its rarest token outside the 500 most frequent.
DEFAULT_TOP_COMMON = 500
#: Offsets ``-k..k`` kept in the positional histogram (Voita's positional heads use -1 or +1).
DEFAULT_MAX_OFFSET = 4
#: Voita et al.: a positional head has its argmax at one offset for at least 90% of tokens.
POSITIONAL_SHARE = 0.9


@dataclass(frozen=True)
class RolesResult(Result):
    """Sufficient statistics of the head roles (see the module docstring).

    Attributes:
        layers, heads: 0-based model layers and heads.
        confidence_sum: ``(L, H)`` sum over non-special rows of the max weight (end specials excluded).
        offset_counts: ``(L, H, 2 * max_offset + 1)`` argmax offsets ``-max_offset..max_offset``.
        n_rows: non-special token rows summed (confidence and positional denominators).
        max_offset: the histogram's largest absolute offset.
        rare_hits, rare2_hits: ``(L, H)`` word rows whose argmax is the rarest / one of the two rarest.
        rare_chance_sum, rare2_chance_sum: the exact chance of a hit summed over the same rows.
        rare_rows: word rows of the rare-word sentences.
        n_rare_sentences: sentences whose rarest word is outside the ``top_common`` most frequent.
        n_examples: items seen; n_without_tokens: items without token maps (skipped at token level).
        top_common: size of the common-word list; has_frequencies: whether frequencies were given.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"confidence_sum": "layers heads", "offset_counts": "layers heads 2*max_offset+1",
               "rare_hits": "layers heads", "rare2_hits": "layers heads"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    confidence_sum: npt.NDArray[np.float64]
    offset_counts: npt.NDArray[np.int64]
    n_rows: int
    max_offset: int
    rare_hits: npt.NDArray[np.int64]
    rare2_hits: npt.NDArray[np.int64]
    rare_chance_sum: float
    rare2_chance_sum: float
    rare_rows: int
    n_rare_sentences: int
    n_examples: int
    n_without_tokens: int
    top_common: int
    has_frequencies: bool

    @property
    def shape(self) -> tuple[int, int]:
        """``(L, H)``."""
        return len(self.layers), len(self.heads)

    def _ratio(self, total: Any, rows: int) -> npt.NDArray[np.float64]:
        if not rows:
            return np.full(self.shape, np.nan)
        return np.broadcast_to(np.asarray(total, dtype=np.float64) / rows, self.shape).copy()

    def confidence(self) -> npt.NDArray[np.float64]:
        """``(L, H)`` Voita confidence: mean max weight per non-special token (NaN without tokens)."""
        return self._ratio(self.confidence_sum, self.n_rows)

    def offsets(self) -> npt.NDArray[np.int64]:
        """``(2 * max_offset + 1,)`` the offsets of the histogram's bins."""
        return np.arange(-self.max_offset, self.max_offset + 1)

    def _best_offset(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(L, H)`` most frequent non-zero offset (the more negative on ties) and its share of the rows."""
        counts = self.offset_counts.copy()  # (L, H, W)
        counts[..., self.max_offset] = -1  # offset 0 (self) is no positional role
        best = counts.argmax(-1)  # (L, H) bin
        share = self._ratio(np.take_along_axis(self.offset_counts, best[..., None], -1)[..., 0], self.n_rows)
        return self.offsets()[best], share

    def positional_share(self) -> npt.NDArray[np.float64]:
        """``(L, H)`` share of the rows whose argmax is at the head's most frequent non-zero offset."""
        return self._best_offset()[1]

    def positional(self, share: float = POSITIONAL_SHARE) -> npt.NDArray[np.int64]:
        """``(L, H)`` the offset a positional head attends to (``share`` of its rows or more), 0 for none."""
        offset, got = self._best_offset()
        return np.where(np.nan_to_num(got, nan=-1.0) >= share, offset, 0).astype(np.int64)

    def rare_rate(self) -> npt.NDArray[np.float64]:
        """``(L, H)`` rate at which the argmax is the sentence's rarest word (rare-word sentences)."""
        return self._ratio(self.rare_hits, self.rare_rows)

    def rare2_rate(self) -> npt.NDArray[np.float64]:
        """``(L, H)`` rate at which the argmax is one of the two rarest words."""
        return self._ratio(self.rare2_hits, self.rare_rows)

    def rare_chance(self) -> npt.NDArray[np.float64]:
        """``(L, H)`` (the same for every head) chance rate of :meth:`rare_rate`."""
        return self._ratio(self.rare_chance_sum, self.rare_rows)

    def rare2_chance(self) -> npt.NDArray[np.float64]:
        """``(L, H)`` chance rate of :meth:`rare2_rate`."""
        return self._ratio(self.rare2_chance_sum, self.rare_rows)

    def to_pandas(self) -> Any:
        """One row per head (1-based ``layer``, ``head``, ``head_name``) with every role measure."""
        values = {"confidence": self.confidence(), "positional": self.positional(),
                  "positional_share": self.positional_share(), "rare_rate": self.rare_rate(),
                  "rare2_rate": self.rare2_rate(), "rare_chance": self.rare_chance(),
                  "rare2_chance": self.rare2_chance()}
        table = long_table(head_axes(self.layers, self.heads), values)
        table.insert(2, "head_name", head_names(table))
        return table


def word_frequencies(sentences: Iterable[Any]) -> dict[str, int]:
    """Counts of the lower-cased word forms of ``sentences`` (anything with ``.words``)."""
    counts: Counter[str] = Counter()
    for sentence in sentences:
        counts.update(w.lower() for w in sentence.words)
    return dict(counts)


def read_counts(path: str | PathLike[str]) -> dict[str, int]:
    """Read a counts file: one ``word<TAB>count`` per line (blank lines skipped; forms lower-cased, summed).

    Raises:
        InputError: ``path:line`` of a line that is not a word, a tab and a non-negative integer.
    """
    counts: dict[str, int] = {}
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the counts file: {exc}", path=file) from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0] or not parts[1].strip().isdigit():
            raise InputError(f"expected 'word<TAB>count' with a non-negative integer count, found {line!r}",
                             path=file, line=number)
        key = parts[0].lower()
        counts[key] = counts.get(key, 0) + int(parts[1])
    return counts


def _first_argmax(cols: npt.NDArray[np.floating[Any]]) -> tuple[npt.NDArray[np.intp], npt.NDArray[Any]]:
    """Argmax (the first on ties) and max over axis 0 of ``cols`` ``(C, ...)``: ``(...)`` each.

    Same as ``argmax`` over a last axis, but reductions over a leading axis run across contiguous
    memory, about 5 times faster than numpy's per-row loops for the short rows of attention maps.
    """
    c, shape = cols.shape[0], cols.shape[1:]
    flat = cols.reshape(c, -1)  # (C, N): 2-D keeps numpy on its fast contiguous loops
    top = flat.max(axis=0)  # (N,)
    rank = np.arange(c, 0, -1, dtype=np.uint8 if c < 256 else np.int64)[:, None]  # (C, 1)
    first = ((flat == top) * rank).max(axis=0)  # (N,) c - index of the first column reaching the max
    return (c - first.astype(np.intp)).reshape(shape), top.reshape(shape)


def _index(positions: npt.NDArray[np.intp]) -> slice | npt.NDArray[np.intp]:
    """``positions`` (sorted) as a slice when they are contiguous (indexing gives a view, no copy)."""
    if positions.size and positions[-1] - positions[0] == positions.size - 1:
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return positions


def _digest(frequencies: Mapping[str, int] | None) -> str | None:
    """A short fingerprint of ``frequencies`` (merging needs equal ones)."""
    if frequencies is None:
        return None
    h = hashlib.sha256()
    for word in sorted(frequencies):
        h.update(f"{word}\t{frequencies[word]}\n".encode())
    return h.hexdigest()[:16]


class HeadRoles(Analysis[RolesResult]):
    """Streaming statistics of Voita's confidence, positional and rare-word roles (module docstring)."""

    items: ClassVar[str] = "any"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    top_common: int
    max_offset: int
    _frequencies_digest: str | None
    _conf: npt.NDArray[np.int64]
    _offsets: npt.NDArray[np.int64]
    _n_rows: int
    _rare: npt.NDArray[np.int64]
    _chance: npt.NDArray[np.int64]
    _rare_rows: int
    _rare_sentences: int
    _n_examples: int
    _n_without_tokens: int

    def __init__(self, frequencies: Mapping[str, int] | None = None, top_common: int = DEFAULT_TOP_COMMON,
                 max_offset: int = DEFAULT_MAX_OFFSET) -> None:
        super().__init__()
        if top_common < 0 or max_offset < 1:
            raise ConfigError(f"roles: expected top_common >= 0 and max_offset >= 1, found {top_common} "
                              f"and {max_offset}")
        self.add_option("top_common", int(top_common))
        self.add_option("max_offset", int(max_offset))
        self._freq = None if frequencies is None else {k.lower(): int(v) for k, v in frequencies.items()}
        ranked = sorted(self._freq.items(), key=lambda kv: (-kv[1], kv[0])) if self._freq else []
        self._common = frozenset(word for word, _ in ranked[:top_common])
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        # a fingerprint, not an option: options stay the constructor's small arguments (run records show them)
        self.add_state("_frequencies_digest", _digest(frequencies), "same")
        self.add_state("_conf", np.zeros((0, 0), dtype=np.int64), "sum")  # (L, H) fixed point (exact merges)
        self.add_state("_offsets", np.zeros((0, 0, 0), dtype=np.int64), "sum")  # (L, H, W)
        self.add_state("_n_rows", 0, "sum")
        self.add_state("_rare", np.zeros((0, 0, 0), dtype=np.int64), "sum")  # (2, L, H) hits: rarest, two rarest
        self.add_state("_chance", np.zeros(2, dtype=np.int64), "sum")  # (2,) chance sums, fixed point
        self.add_state("_rare_rows", 0, "sum")
        self.add_state("_rare_sentences", 0, "sum")
        self.add_state("_n_examples", 0, "sum")
        self.add_state("_n_without_tokens", 0, "sum")

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add one item: token-level confidence and offsets, word-level rare-word hits."""
        self._check_heads(word_attention)
        self._n_examples += 1
        if word_attention.tokens is None:
            self._n_without_tokens += 1
        else:
            self._add_tokens(word_attention.tokens)
        if self._freq is not None:
            self._add_rare(item, word_attention, self._freq)

    def _check_heads(self, word_attention: WordAttention) -> None:
        if self.bind_heads(word_attention):
            shape = (len(word_attention.layers), len(word_attention.heads))
            self._conf = np.zeros(shape, dtype=np.int64)
            self._offsets = np.zeros(shape + (2 * self.max_offset + 1,), dtype=np.int64)
            self._rare = np.zeros((2,) + shape, dtype=np.int64)

    def _add_tokens(self, tokens: TokenAttention) -> None:
        """Confidence and argmax offsets of the non-special token rows (end specials never chosen)."""
        rows = np.flatnonzero(~tokens.is_special)  # (R,)
        if not rows.size or tokens.end_special.all():
            return
        cols = np.moveaxis(tokens.weights[:, :, _index(rows)], -1, 0).copy()  # (T, L, H, R): columns first
        cols[tokens.end_special] = -np.inf  # end specials are never the max
        best, top = _first_argmax(cols)  # (L, H, R) column and weight
        self._conf += to_fixed(top.sum(-1, dtype=np.float64))
        offset = best - rows  # (L, H, R)
        width = 2 * self.max_offset + 1
        bins = np.where(np.abs(offset) <= self.max_offset, offset + self.max_offset, width)  # width = overflow
        n_heads = best.shape[0] * best.shape[1]
        flat = (np.arange(n_heads).reshape(best.shape[:2] + (1,)) * (width + 1) + bins).ravel()
        counts = np.bincount(flat, minlength=n_heads * (width + 1)).reshape(best.shape[:2] + (width + 1,))
        self._offsets += counts[..., :width]
        self._n_rows += int(rows.size)

    def _add_rare(self, item: Any, word_attention: WordAttention, freq: Mapping[str, int]) -> None:
        """Rare-word hits and chances of one sentence whose rarest word is not a common one."""
        forms = getattr(item, "words", None)
        m = word_attention.n_words
        if forms is None or m < 2:
            return
        if len(forms) != m:
            raise AlignmentError(f"rare-word role: attention has {m} word positions, the item has {len(forms)} words")
        lowered = [w.lower() for w in forms]
        order = sorted(range(m), key=lambda k: (freq.get(lowered[k], 0), k))
        if lowered[order[0]] in self._common:
            return
        rarest, second = order[0], order[1]
        words = _index(word_attention.word_index)
        maps = word_attention.weights[:, :, words, words] if isinstance(words, slice) else word_attention.words_only()
        causal = not maps[:, :, 0, 1:].any()  # a decoder: the first word sees no later word in any head
        cand = np.tri(m, k=-1, dtype=bool) if causal else ~np.eye(m, dtype=bool)  # (rows, cols) candidates
        counted = cand.any(1)  # (m,) rows with a candidate (not a decoder's first word)
        cols = np.ascontiguousarray(np.moveaxis(maps, -1, 0), dtype=np.float32)  # (m cols, L, H, m rows): a copy
        never, row = np.nonzero(~cand.T)
        cols[never, :, :, row] = -np.inf  # the row's own word (a decoder: any later word) is never chosen
        best = _first_argmax(cols)[0]  # (L, H, m) word, left-most on ties
        hit1 = (best == rarest) & counted
        self._rare[0] += hit1.sum(-1)
        self._rare[1] += (hit1 | ((best == second) & counted)).sum(-1)
        # the exact chance of each counted row: the share of its candidates that are targets
        share = cand[counted][:, [rarest, second]] / cand[counted].sum(1, keepdims=True)  # (rows, 2)
        self._chance += to_fixed([share[:, 0].sum(), share.sum()])
        self._rare_rows += int(counted.sum())
        self._rare_sentences += 1

    def compute(self) -> RolesResult:
        """The statistics so far as a :class:`RolesResult`."""
        shape = (len(self._layers or ()), len(self._heads or ()))
        conf = self._conf / FIXED_SCALE if self._conf.size else np.zeros(shape)
        offsets = (self._offsets.copy() if self._offsets.size
                   else np.zeros(shape + (2 * self.max_offset + 1,), dtype=np.int64))
        rare = self._rare.copy() if self._rare.size else np.zeros((2,) + shape, dtype=np.int64)
        chance = self._chance / FIXED_SCALE  # (2,)
        return RolesResult(self._layers or (), self._heads or (), conf, offsets, int(self._n_rows),
                           self.max_offset, rare[0], rare[1], float(chance[0]), float(chance[1]),
                           int(self._rare_rows), int(self._rare_sentences), int(self._n_examples),
                           int(self._n_without_tokens), self.top_common, self._freq is not None)
