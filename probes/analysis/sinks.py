"""Attention sinks: heads that park their attention on one token (Gu et al. 2025, "When Attention Sink Emerges in
Language Models: An Empirical View", ICLR 2025).

Gu et al.'s measure, exactly as their ``compute_attention_sink`` (sail-sg/Attention-Sink,
``eval_sink_open_source.py``) computes it on one input's ``(L, H, T, T)`` maps ``A`` (rows = queries):

* the importance of token ``k`` to head ``(l, h)``: ``alpha = sum_i A[i, k] / (T - k)``, the mean over the query
  rows that can see ``k`` in a decoder (rows ``i >= k``, 0-based). For the first token (``k = 0``) that is the mean
  over every query row, for a decoder and an encoder alike. Here ``causal=False`` (the default) divides by ``T``
  (an encoder's rows all see ``k``) and ``causal=True`` by ``T - k``, Gu et al.'s; the two agree for ``k = 0``;
* a head is a sink of ``k`` when ``alpha > eps`` (:data:`SINK_EPS` = 0.3, their choice);
* the sink rate ``Sink_k^eps`` is the share of the ``L * H`` heads that are sinks, computed on each input and then
  averaged over inputs (their indicator is taken per sample, then averaged over samples, layers and heads), not
  measured once on the mean maps.

:class:`AttentionSinks` streams this over a corpus from the token maps (``word_attention.tokens``; an item without
them is counted in ``n_without_tokens`` and skipped, as the surface statistics do), per layer and head: the mean
attention to the first token, to the start specials ([CLS], ``<s>``, BOS; summed when several) and to the end
specials ([SEP], ``</s>``), each a mean over query rows then over inputs (the start and end means only over the
inputs that have such specials: a decoder's end-special mean is empty, not zero), and the share of inputs in which
the head is a sink of the first token. Its sink rate (:attr:`SinkResult.sink_rate`) is Gu et al.'s ``Sink_1^0.3``
over the corpus. Gu et al. measured inputs of exactly 64 tokens; here each input is as long as it is.

The maps are whatever attention source the run reads (weights, norms, contributions, value zeroing), each
row-normalised, so the same measure applies to any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.analysis.surface import FIXED_SCALE, to_fixed
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.results import Result, head_axes, head_names, long_table, require_pandas

__all__ = ["SINK_EPS", "REFERENCE", "token_share", "sink_heads", "sink_rate", "SinkResult", "AttentionSinks"]

#: Gu et al.'s threshold: a head is a sink of a token when its mean attention to it exceeds this.
SINK_EPS = 0.3
#: Where the definition comes from.
REFERENCE = ("Gu et al. 2025, When Attention Sink Emerges in Language Models (ICLR 2025); sail-sg/Attention-Sink "
             "eval_sink_open_source.py compute_attention_sink")


def _maps(maps: npt.ArrayLike, token: int) -> npt.NDArray[np.float64]:
    """The checked ``(L, H, T, T)`` maps as float64 (ConfigError naming what is wrong)."""
    array = np.asarray(maps, dtype=np.float64)
    if array.ndim != 4 or array.shape[-1] != array.shape[-2]:
        raise ConfigError(f"attention sinks: expected maps of shape (layers, heads, T, T), found shape {array.shape}")
    if not 0 <= token < array.shape[-1]:
        raise ConfigError(f"attention sinks: token must be a position in 0..{array.shape[-1] - 1}, found {token}")
    return array


def token_share(maps: npt.ArrayLike, *, token: int = 0, causal: bool = False) -> npt.NDArray[np.float64]:
    """``(L, H)``: each head's mean attention to ``token`` over the query rows (Gu et al.'s importance score; the
    rows ``i >= token`` when ``causal``, every row otherwise; see the module docstring)."""
    array = _maps(maps, token)
    rows = array.shape[-1] - token if causal else array.shape[-1]
    return array[..., :, token].sum(axis=-1) / rows


def sink_heads(maps: npt.ArrayLike, *, token: int = 0, eps: float = SINK_EPS, causal: bool = False
               ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """``(L, H)`` which heads are sinks of ``token`` (mean attention to it over query rows above ``eps``), and that
    ``(L, H)`` mean attention (:func:`token_share`)."""
    share = token_share(maps, token=token, causal=causal)
    return share > eps, share


def sink_rate(maps: npt.ArrayLike, *, token: int = 0, eps: float = SINK_EPS, causal: bool = False) -> float:
    """The share of the ``L * H`` heads of one input's ``(L, H, T, T)`` maps that are sinks of ``token`` (Gu et al.'s
    ``Sink_k^eps``; NaN without heads)."""
    sinks, _ = sink_heads(maps, token=token, eps=eps, causal=causal)
    return float(sinks.mean()) if sinks.size else float("nan")


@dataclass(frozen=True)
class SinkResult(Result):
    """Attention sinks per head over a corpus (see the module docstring).

    Attributes:
        layers, heads: 0-based model layers and heads (axes of the arrays).
        eps: the sink threshold.
        to_first: ``(L, H)`` mean attention to the first token (mean over query rows, then over inputs).
        to_cls: ``(L, H)`` the same to the start specials, over the ``n_start`` inputs that have one (else NaN).
        to_sep: ``(L, H)`` the same to the end specials, over the ``n_end`` inputs that have one (else NaN).
        sink_share: ``(L, H)`` share of the inputs in which the head's mean attention to the first token exceeds
            ``eps``.
        n_inputs: inputs measured; n_start, n_end: those with start / end specials.
        n_without_tokens: items skipped because they came without token maps.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"to_first": "layers heads", "to_cls": "layers heads", "to_sep": "layers heads",
               "sink_share": "layers heads"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    eps: float
    to_first: npt.NDArray[np.float64]
    to_cls: npt.NDArray[np.float64]
    to_sep: npt.NDArray[np.float64]
    sink_share: npt.NDArray[np.float64]
    n_inputs: int
    n_start: int
    n_end: int
    n_without_tokens: int

    @property
    def sink_rate(self) -> float:
        """Gu et al.'s sink rate of the first token: the share of heads that are sinks, averaged over inputs (NaN
        without inputs)."""
        return float(self.sink_share.mean()) if self.n_inputs and self.sink_share.size else float("nan")

    def per_layer(self) -> Any:
        """One row per layer (1-based ``layer``): the mean over its heads of ``to_first``, ``to_cls``, ``to_sep``
        and ``sink_rate`` (the layer's share of sink heads, averaged over inputs)."""
        pandas = require_pandas()
        with np.errstate(invalid="ignore"):
            means = {"to_first": self.to_first, "to_cls": self.to_cls, "to_sep": self.to_sep,
                     "sink_rate": self.sink_share if self.n_inputs else np.full(self.sink_share.shape, np.nan)}
            columns = {k: v.mean(axis=1) if v.size else np.zeros(len(self.layers)) for k, v in means.items()}
        return pandas.DataFrame({"layer": np.asarray(self.layers, dtype=np.int64) + 1, **columns})

    def to_pandas(self) -> Any:
        """One row per head: ``layer, head`` (1-based), ``head_name``, ``to_first, to_cls, to_sep, sink_share``."""
        table = long_table(head_axes(self.layers, self.heads), {"to_first": self.to_first, "to_cls": self.to_cls,
                                                                "to_sep": self.to_sep, "sink_share": self.sink_share})
        table.insert(2, "head_name", head_names(table))
        return table


class AttentionSinks(Analysis[SinkResult]):
    """Streaming attention sinks per head from token maps (see the module docstring); ``eps``: the threshold."""

    items: ClassVar[str] = "any"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    eps: float
    _first: npt.NDArray[np.int64]
    _start: npt.NDArray[np.int64]
    _end: npt.NDArray[np.int64]
    _sinks: npt.NDArray[np.int64]
    _n_inputs: int
    _n_start: int
    _n_end: int
    _n_without_tokens: int

    def __init__(self, eps: float = SINK_EPS) -> None:
        super().__init__()
        if not 0.0 <= float(eps) < 1.0:
            raise ConfigError(f"attention sinks: eps must lie in [0, 1), found {eps!r}")
        self.add_option("eps", float(eps))
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        for name in ("_first", "_start", "_end", "_sinks"):  # (L, H); fixed-point sums (surface.to_fixed), counts
            self.add_state(name, np.zeros((0, 0), dtype=np.int64), "sum")
        for name in ("_n_inputs", "_n_start", "_n_end", "_n_without_tokens"):
            self.add_state(name, 0, "sum")

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add one input's token maps (skipped and counted when it has none)."""
        if self.bind_heads(word_attention):
            shape = (len(word_attention.layers), len(word_attention.heads))
            self._first, self._start, self._end, self._sinks = (np.zeros(shape, dtype=np.int64) for _ in range(4))
        tokens = word_attention.tokens
        if tokens is None:
            self._n_without_tokens += 1
            return
        weights = np.asarray(tokens.weights, dtype=np.float64)  # (L, H, T, T)
        n = weights.shape[-1]
        if n == 0:
            return
        sinks, first = sink_heads(weights, token=0, eps=self.eps)
        self._first += to_fixed(first)
        self._sinks += sinks
        self._n_inputs += 1
        if tokens.start_special.any():
            self._start += to_fixed(weights[..., tokens.start_special].sum(axis=(-1, -2)) / n)
            self._n_start += 1
        if tokens.end_special.any():
            self._end += to_fixed(weights[..., tokens.end_special].sum(axis=(-1, -2)) / n)
            self._n_end += 1

    def compute(self) -> SinkResult:
        """The means so far as a :class:`SinkResult`."""
        layers, heads = self._layers or (), self._heads or ()
        shape = (len(layers), len(heads))

        def mean(total: npt.NDArray[np.int64], count: int, scale: float = FIXED_SCALE) -> npt.NDArray[np.float64]:
            return total / (scale * count) if count and total.size else np.full(shape, np.nan)

        return SinkResult(layers, heads, self.eps, mean(self._first, self._n_inputs),
                          mean(self._start, self._n_start), mean(self._end, self._n_end),
                          mean(self._sinks, self._n_inputs, 1.0), int(self._n_inputs), int(self._n_start),
                          int(self._n_end), int(self._n_without_tokens))
