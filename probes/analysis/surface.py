"""Surface statistics of every head (Clark et al. 2019 §3; ``clark_spec.md`` §2.2-2.4).

Per example (one input: a sentence of a treebank) and per head, on the ``(T, T)`` map ``A``
with the specials included as rows and columns (``n`` positions):

* ``to_cls``, ``to_sep``, ``to_punct``: ``sum_i sum_{j in K} A[i, j] / n`` for the key type ``K``
  (start specials; end specials; tokens exactly ``"."`` or ``","``);
* ``to_self``, ``to_next``, ``to_prev``: ``sum_i A[i, i] / n``, ``sum_i A[i, i+1] / n``,
  ``sum_i A[i, i-1] / n`` (the missing neighbour at an edge still counts in ``n``);
* ``entropy``: the mean over all rows of the row entropy in nats of the smoothed map
  ``A' = 0.9999 A + 0.0001 / n``; ``entropy_first``: the entropy of row 0 alone, counted only
  when position 0 is a start special ([CLS], ``<s>``) of an encoder;
* ``sep_to_sep``: rows and columns restricted to the end specials, ``D`` = their number;
  ``other_to_sep``: rows of every other position, columns the end specials, ``D = n - n_sep``.

Each statistic is averaged over examples without weights (every example counts once), and only
over the examples where it is defined: a model without end specials (a decoder) gives empty
(NaN) ``to_sep``, ``sep_to_sep`` and ``other_to_sep``, not zero; one without start specials gives
NaN ``to_cls`` and ``entropy_first``. The uniform reference is the mean over examples of ``ln n``.

Causal maps (``SurfaceStats(causal=True)``, as the atlas asks for a decoder: row ``i`` sees ``i + 1``
positions) are measured on what each row can see: the smoothing spreads ``0.0001`` over the
row's ``i + 1`` visible positions, the uniform reference of the example is ``mean_i ln(i + 1)``, and
``to_next`` and ``entropy_first`` are not defined (a row never sees the next token; row 0 sees only itself,
so its entropy is 0 whatever the head does). ``n_causal`` counts the causal examples.

``level="token"`` (the default, as in Clark et al.) reads ``word_attention.tokens``; an item
without token maps (windowed or truncated inputs, or an extractor run without ``keep_tokens``)
is counted in ``n_without_tokens`` and skipped. ``level="word"`` reads the word maps: leading
specials are start-like, the other specials end-like, punctuation is a word ``"."`` or ``","``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import PUNCT_TOKENS, WordAttention
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["SURFACE_KEYS", "LEVELS", "PUNCT", "FIXED_SCALE", "to_fixed", "SurfaceResult", "SurfaceStats",
           "example_values", "uniform_reference"]

#: The statistics, in the order of :attr:`SurfaceResult.sums`.
SURFACE_KEYS: tuple[str, ...] = ("to_cls", "to_sep", "to_punct", "to_self", "to_next", "to_prev", "entropy",
                                 "entropy_first", "sep_to_sep", "other_to_sep")
#: Levels the statistics can be computed at.
LEVELS: tuple[str, ...] = ("token", "word")
#: Words counted as punctuation at word level; at token level "." and "," with any word-start mark
#: (:func:`probes.extraction.attention.is_punct_token`: RoBERTa's "Ġ." counts as WordPiece's ".").
PUNCT: frozenset[str] = PUNCT_TOKENS
#: Smoothing of the entropy (clark_spec §2.4): ``A' = KEEP * A + (1 - KEEP) / n``.
KEEP = 0.9999
#: Sums of real values are kept as int64 multiples of ``1 / FIXED_SCALE`` (resolution 2.3e-10), so that
#: adding examples in any order, or merging shards, gives bit-identical results (integer addition is
#: associative; float addition is not). Room: 2**31 values of magnitude up to 1 before overflow.
FIXED_SCALE = 2.0**32


def to_fixed(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """``values`` as int64 fixed-point numbers (see :data:`FIXED_SCALE`)."""
    return np.rint(np.asarray(values, dtype=np.float64) * FIXED_SCALE).astype(np.int64)


@dataclass(frozen=True)
class SurfaceResult(Result):
    """Per-head surface statistics, summed over the examples where each is defined.

    Attributes:
        layers, heads: 0-based model layers and heads (axes of the arrays).
        keys: the statistics, in the order of ``sums`` (:data:`SURFACE_KEYS`).
        sums: ``(K, L, H)`` per-example values summed over examples.
        counts: ``(K,)`` number of examples summed in each statistic.
        log_n_sum: sum over examples of ``ln n`` (the uniform-entropy reference).
        n_examples: examples analysed.
        n_without_tokens: items skipped at token level because they came without token maps.
        level: ``"token"`` or ``"word"``.
        n_causal: examples whose maps were causal (a decoder's; see the module docstring).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"sums": "keys layers heads", "counts": "keys"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    keys: tuple[str, ...]
    sums: npt.NDArray[np.float64]
    counts: npt.NDArray[np.int64]
    log_n_sum: float
    n_examples: int
    n_without_tokens: int
    level: str
    n_causal: int = 0

    @property
    def causal(self) -> bool:
        """Whether every example was causal (a decoder's maps)."""
        return self.n_examples > 0 and self.n_causal == self.n_examples

    def mean(self, key: str) -> npt.NDArray[np.float64]:
        """``(L, H)`` unweighted mean over examples of statistic ``key`` (NaN where never defined)."""
        if key not in self.keys:
            raise ConfigError(f"surface statistic: expected one of {', '.join(self.keys)}, found {key!r}")
        k = self.keys.index(key)
        if not self.counts[k]:
            return np.full(self.sums.shape[1:], np.nan)
        return self.sums[k] / self.counts[k]

    @property
    def uniform_entropy(self) -> float:
        """Mean over examples of ``ln n`` (causal maps: ``mean_i ln(i + 1)``): the entropy of uniform attention
        over what each row sees (NaN without examples)."""
        return self.log_n_sum / self.n_examples if self.n_examples else float("nan")

    def to_pandas(self) -> Any:
        """One row per head: ``layer, head`` (1-based), ``head_name`` and a column per statistic."""
        table = long_table(head_axes(self.layers, self.heads), {key: self.mean(key) for key in self.keys})
        table.insert(2, "head_name", head_names(table))
        return table


def uniform_reference(n: int, causal: bool) -> float:
    """Entropy of uniform attention over what each row sees: ``ln n``, or ``mean_i ln(i + 1)`` when causal."""
    return float(np.log(np.arange(1, n + 1)).mean()) if causal else float(np.log(n))


def example_values(weights: npt.NDArray[np.floating[Any]], start: npt.NDArray[np.bool_],
                   end: npt.NDArray[np.bool_], punct: npt.NDArray[np.bool_], causal: bool = False
                   ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The statistics of one example: ``(K, L, H)`` values and ``(K,)`` which are defined.

    Args:
        weights: ``(L, H, n, n)`` maps, specials included, rows attend from.
        start, end, punct: ``(n,)`` masks of start specials, end specials and punctuation.
        causal: the maps are a decoder's (see the module docstring: smoothing over what a row sees;
            ``to_next`` and ``entropy_first`` not defined).
    """
    n = weights.shape[-1]
    n_sep = int(end.sum())
    values = np.empty((len(SURFACE_KEYS),) + weights.shape[:2])  # (K, L, H)
    flat = weights.reshape(weights.shape[:2] + (n * n,))  # (L, H, n*n)
    masses = np.moveaxis(flat @ _cell_masks(start, end, punct, weights.dtype), -1, 0)  # (7, L, H): one product
    values[0:6] = masses[0:6] / n  # to_cls, to_sep, to_punct, to_self, to_next, to_prev
    if causal:  # row i sees i + 1 positions: smooth over those alone
        seen = np.tril(np.ones((n, n), dtype=bool))  # (n, n)
        spread = ((1.0 - KEEP) / np.arange(1, n + 1, dtype=np.float64))[:, None].astype(weights.dtype)  # (n, 1)
        smooth = np.where(seen, weights * weights.dtype.type(KEEP) + spread, 0)  # (L, H, n, n)
        rows = np.einsum("...j,...j->...", smooth, np.log(np.where(seen, smooth, 1)))  # (L, H, n)
    else:
        smooth = weights * np.float32(KEEP) + np.float32((1.0 - KEEP) / n)  # (L, H, n, n)
        rows = np.einsum("...j,...j->...", smooth, np.log(smooth))  # (L, H, n): minus the row entropies
    values[6] = -rows.mean(-1)
    values[7] = -rows[..., 0]
    values[8] = masses[6] / n_sep if n_sep else np.nan
    values[9] = (masses[1] - masses[6]) / (n - n_sep) if 0 < n_sep < n else np.nan
    defined = np.array([start.any(), n_sep > 0, True, True, not causal, True, True,
                        bool(start[0]) and not causal if n else False, n_sep > 0, 0 < n_sep < n])
    return values, defined


def _cell_masks(start: npt.NDArray[np.bool_], end: npt.NDArray[np.bool_], punct: npt.NDArray[np.bool_],
                dtype: Any) -> npt.NDArray[Any]:
    """``(n*n, 7)`` 0/1 weights of the cells ``(i, j)`` (row-major) summed for each mass.

    Columns: key type of ``j`` (start special, end special, punctuation), ``j = i``, ``j = i + 1``,
    ``j = i - 1``, and both ``i`` and ``j`` end specials.
    """
    n = start.shape[0]
    types = np.tile(np.stack([start, end, punct], axis=1), (n, 1))  # (n*n, 3) by column j
    both_sep = (end[:, None] & end[None, :]).reshape(n * n, 1)  # (n*n, 1)
    return np.concatenate([types, _diagonals(n), both_sep], axis=1, dtype=dtype)


@functools.lru_cache(maxsize=256)
def _diagonals(n: int) -> npt.NDArray[np.bool_]:
    """``(n*n, 3)`` the cells ``j = i``, ``j = i + 1`` and ``j = i - 1`` (cached per length)."""
    out = np.stack([np.eye(n, k=k, dtype=bool).reshape(n * n) for k in (0, 1, -1)], axis=1)
    out.setflags(write=False)
    return out


class SurfaceStats(Analysis[SurfaceResult]):
    """Streaming surface statistics per head (see the module docstring); ``causal``: the model is a decoder."""

    items: ClassVar[str] = "any"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    level: str
    causal: bool
    _sums: npt.NDArray[np.int64]
    _counts: npt.NDArray[np.int64]
    _log_n: int
    _n_examples: int
    _n_without_tokens: int
    _n_causal: int

    def __init__(self, level: str = "token", causal: bool = False) -> None:
        super().__init__()
        if level not in LEVELS:
            raise ConfigError(f"surface statistics level: expected one of {', '.join(LEVELS)}, found {level!r}")
        self.add_option("level", level)
        self.add_option("causal", bool(causal))
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_sums", np.zeros((0, 0, 0), dtype=np.int64), "sum")  # (K, L, H) fixed point
        self.add_state("_counts", np.zeros(len(SURFACE_KEYS), dtype=np.int64), "sum")  # (K,)
        self.add_state("_log_n", 0, "sum")  # fixed point
        self.add_state("_n_examples", 0, "sum")
        self.add_state("_n_without_tokens", 0, "sum")
        self.add_state("_n_causal", 0, "sum")

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add one example (skipped and counted when token maps are asked for and missing)."""
        self._check_heads(word_attention)
        if self.level == "token":
            tokens = word_attention.tokens
            if tokens is None:
                self._n_without_tokens += 1
                return
            punct = tokens.punct
            weights, start, end = tokens.weights, tokens.start_special, tokens.end_special
        else:
            weights, start, end, punct = _word_inputs(item, word_attention)
        if weights.shape[-1] == 0:
            return
        causal = self.causal and weights.shape[-1] > 0
        values, defined = example_values(weights, start, end, punct, causal)
        values[~defined] = 0.0
        self._sums += to_fixed(values)
        self._counts += defined
        self._log_n += int(to_fixed(uniform_reference(weights.shape[-1], causal)))
        self._n_examples += 1
        self._n_causal += int(causal)

    def _check_heads(self, word_attention: WordAttention) -> None:
        if self.bind_heads(word_attention):
            self._sums = np.zeros((len(SURFACE_KEYS), len(word_attention.layers), len(word_attention.heads)), dtype=np.int64)

    def compute(self) -> SurfaceResult:
        """The sums so far as a :class:`SurfaceResult`."""
        layers, heads = self._layers or (), self._heads or ()
        shape = (len(SURFACE_KEYS), len(layers), len(heads))
        sums = self._sums / FIXED_SCALE if self._sums.size else np.zeros(shape)
        return SurfaceResult(layers, heads, SURFACE_KEYS, sums, self._counts.copy(), self._log_n / FIXED_SCALE,
                             int(self._n_examples), int(self._n_without_tokens), self.level, int(self._n_causal))


def _word_inputs(item: Any, word_attention: WordAttention) -> tuple[npt.NDArray[Any], ...]:
    """Word-level ``weights, start, end, punct``: leading specials start-like, the others end-like."""
    special = np.asarray(word_attention.is_special, dtype=bool)
    words = word_attention.word_index
    first = int(words[0]) if words.size else special.shape[0]
    start = special & (np.arange(special.shape[0]) < first)
    forms = getattr(item, "words", None)
    if forms is None or len(forms) != words.size:
        found = "no words" if forms is None else f"{len(forms)} words"
        raise AlignmentError(f"word-level surface statistics: attention has {words.size} word positions, "
                             f"the item has {found}")
    punct = np.zeros(special.shape[0], dtype=bool)
    punct[words] = np.fromiter((w in PUNCT for w in forms), dtype=bool, count=words.size)
    return word_attention.weights, start, special & ~start, punct
