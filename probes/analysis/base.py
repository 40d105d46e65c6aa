"""The analysis contract: declared state, so that reset and merge are written once.

An analysis sees a corpus one item at a time through ``update(item, word_attention)``,
holds only sufficient statistics (counts, sums) so memory stays bounded whatever the
corpus size, turns them into a result with ``compute()``, and can ``merge`` the state of
another analysis of the same kind and options that saw another shard (torchmetrics'
update / compute / merge pattern).

Subclasses of :class:`Analysis` declare, in ``__init__``, their options
(:meth:`Analysis.add_option`: must agree for a merge) and their state
(:meth:`Analysis.add_state`) with a merge rule, one of :data:`MERGE_RULES`:

* ``sum``: ints, floats or numpy arrays, added (an empty array takes the other's shape);
* ``extend``: lists of chunks, concatenated (``self``'s first);
* ``keyed``: ``dict[str, array]``, summed per key (new keys appended in order);
* ``same``: values that must agree (the layers and heads held); None means "not seen yet";
* ``vocab``: a growing name vocabulary (an object with an ``index: dict[str, int]``);
  the union keeps ``self``'s order, and every state declared with ``vocab=<its name>``
  is remapped: ``sum`` arrays along ``axis`` (capacity grown as in :meth:`Analysis._grow`),
  ``extend`` chunks whose values (or column ``axis``) are indices;
* ``buffer``: pending items or caches; reset only (``_flush`` empties buffers before a merge).

``reset()`` restores every declared default; ``merge(other)`` flushes both sides, checks
the options and combines every state by its rule. Nothing else is hand-written.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention

__all__ = ["Accumulator", "Analysis", "MERGE_RULES", "partial_reason", "item_id", "rows_read"]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

MERGE_RULES: tuple[str, ...] = ("sum", "extend", "keyed", "same", "vocab", "buffer")


@runtime_checkable
class Accumulator(Protocol[R_co]):
    """Anything with the analysis contract (structural type; :class:`Analysis` implements it)."""

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add one item (a Sentence, a document window ...) and its word-level attention."""

    def compute(self) -> R_co:
        """The result for everything seen so far."""

    def merge(self, other: Any) -> None:
        """Add the state of ``other`` (same kind, same options, another shard) to this one."""

    def reset(self) -> None:
        """Forget everything seen."""


@dataclass(frozen=True)
class _State:
    """How one declared state is restored and merged."""

    default: Any
    rule: str
    vocab: str | None = None
    axis: int | None = None


class Analysis(Generic[R]):
    """Base of every streaming analysis: declared options and state; ``update`` and ``compute`` to write.

    Subclasses call ``super().__init__()`` first, then :meth:`add_option` / :meth:`add_state`.

    Attributes:
        items: what ``update`` takes: ``"sentences"`` (a :class:`~probes.corpora.types.Sentence`),
            ``"windows"`` (a document :class:`~probes.extraction.windows.Window`) or ``"any"``
            (the attention alone is used); pipelines check it before they run.
    """

    items: ClassVar[str] = "any"

    # the layers and heads held, used by bind_heads: subclasses calling it declare them with
    # ``add_state("_layers", None, "same")`` / ``add_state("_heads", None, "same")`` in __init__
    _layers: tuple[int, ...] | None
    _heads: tuple[int, ...] | None

    def __init__(self) -> None:
        self._states: dict[str, _State] = {}
        self._options: dict[str, Any] = {}

    # -- declarations -------------------------------------------------------------------------

    def add_option(self, name: str, value: Any) -> None:
        """Declare an option (set as attribute ``name``); merging requires equal options."""
        setattr(self, name, value)
        self._options[name] = value

    def add_state(self, name: str, default: Any, merge: str, *, vocab: str | None = None,
                  axis: int | None = None) -> None:
        """Declare state attribute ``name``, restored to a copy of ``default`` by :meth:`reset`.

        Args:
            merge: the merge rule, one of :data:`MERGE_RULES`.
            vocab: name of the ``vocab`` state whose indices this state uses (``sum``/``extend``).
            axis: ``sum``: the vocabulary axis of the array (default -1); ``extend``: the column of
                each chunk holding indices (None: the whole chunk holds indices).
        """
        if merge not in MERGE_RULES:
            raise ConfigError(f"state {name!r}: merge rule must be one of {', '.join(MERGE_RULES)}, found {merge!r}")
        if vocab is not None and (vocab not in self._states or self._states[vocab].rule != "vocab"):
            raise ConfigError(f"state {name!r}: declare the vocab state {vocab!r} before the states using it")
        if vocab is not None and merge == "sum" and axis is None:
            axis = -1
        self._states[name] = _State(default, merge, vocab, axis)
        setattr(self, name, copy.deepcopy(default))

    def bind_heads(self, word_attention: WordAttention) -> bool:
        """Record the first item's layers and heads in the ``_layers`` / ``_heads`` states (declared by the
        subclass with the ``same`` rule) and return True, so the caller sizes its arrays; for a later item,
        check it holds the same ones (AlignmentError) and return False."""
        layers, heads = tuple(word_attention.layers), tuple(word_attention.heads)
        if self._layers is None:
            self._layers, self._heads = layers, heads
            return True
        if (layers, heads) != (self._layers, self._heads):
            raise AlignmentError(f"attention holds layers {layers} heads {heads}, expected "
                                 f"{self._layers} and {self._heads} as before")
        return False

    @property
    def options(self) -> dict[str, Any]:
        """The declared options (what must agree for a merge, and what a run record shows)."""
        return dict(self._options)

    # -- the contract ---------------------------------------------------------------------------

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add one item and its word-level attention."""
        raise NotImplementedError

    def compute(self) -> R:
        """The result for everything seen so far."""
        raise NotImplementedError

    def rows(self, item: Any) -> Sequence[int] | None:
        """The 0-based words of ``item`` whose attention rows (from those words) :meth:`update` reads; None:
        every row (the default). An extractor may then compute only those rows (:mod:`probes.extraction.rows`;
        the pair holds them alone and :meth:`WordAttention.word_rows` reads them). Called on the extractor's
        thread: it must not touch the state :meth:`update` changes."""
        return None

    def _flush(self) -> None:
        """Fold pending buffers into the state (a hook; batched analyses override it)."""

    def reset(self) -> None:
        """Forget everything seen: every declared state back to its default."""
        for name, state in self._states.items():
            setattr(self, name, copy.deepcopy(state.default))

    def merge(self, other: Analysis[R]) -> None:
        """Add the state of ``other`` (same kind and options, another shard) to this one."""
        if type(other) is not type(self):
            raise ConfigError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        differ = [k for k in self._options if not _same(self._options[k], other._options.get(k))]
        if differ:
            raise ConfigError(f"cannot merge {type(self).__name__} states with different options: " + ", ".join(
                f"{k}={self._options[k]!r} vs {other._options.get(k)!r}" for k in differ))
        self._flush()
        other._flush()
        for name, state in self._states.items():
            if state.rule == "same":
                self._merge_same(name, getattr(other, name))
        mappings = {name: _union(getattr(self, name).index, getattr(other, name).index)
                    for name, state in self._states.items() if state.rule == "vocab"}
        for vocab in mappings:
            self._grow(vocab, len(getattr(self, vocab).index))
        for name, state in self._states.items():
            mapping = mappings.get(state.vocab) if state.vocab is not None else None
            mine, theirs = getattr(self, name), getattr(other, name)
            if state.rule == "sum":
                setattr(self, name, _add(mine, theirs, mapping, state.axis, name))
            elif state.rule == "extend":
                mine.extend(theirs if mapping is None else [_remap(c, mapping, state.axis) for c in theirs])
            elif state.rule == "keyed":
                for key, value in theirs.items():
                    mine[key] = mine[key] + value if key in mine else copy.deepcopy(value)

    # -- helpers for subclasses ------------------------------------------------------------------

    def _merge_same(self, name: str, theirs: Any) -> None:
        mine = getattr(self, name)
        if mine is None:
            setattr(self, name, theirs)
        elif theirs is not None and mine != theirs:
            raise ConfigError(f"cannot merge {type(self).__name__} states over different "
                              f"{name.strip('_')}: {mine} and {theirs}")

    def _grow(self, vocab: str, n: int) -> None:
        """Make room for ``n`` names of ``vocab`` in every ``sum`` array indexed by it (capacity doubles)."""
        for name, state in self._states.items():
            if state.vocab != vocab or state.rule != "sum":
                continue
            arr = getattr(self, name)
            axis = state.axis % arr.ndim
            have = arr.shape[axis]
            if n > have:
                shape = list(arr.shape)
                shape[axis] = max(n, 2 * have) - have
                setattr(self, name, np.concatenate([arr, np.zeros(shape, dtype=arr.dtype)], axis=axis))


def _same(a: Any, b: Any) -> bool:
    """Option equality that never broadcasts (arrays compared whole; objects by identity or ``==``)."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    try:
        return bool(type(a) is type(b) and a == b)
    except (TypeError, ValueError):
        return False


def _union(mine: dict[str, int], theirs: dict[str, int]) -> npt.NDArray[np.int64]:
    """Add ``theirs``' names to ``mine`` (in order); the index map of ``theirs`` into the union."""
    for key in theirs:
        mine.setdefault(key, len(mine))
    return np.array([mine[key] for key in theirs], dtype=np.int64)


def _add(mine: Any, theirs: Any, mapping: npt.NDArray[np.int64] | None, axis: int | None, name: str) -> Any:
    """``mine + theirs`` for a ``sum`` state; along ``axis`` through ``mapping`` when vocab-indexed."""
    if not isinstance(mine, np.ndarray):
        return mine + theirs
    if mapping is None:
        if mine.shape != theirs.shape and mine.size == 0:
            return theirs.copy()
        if mine.shape != theirs.shape and theirs.size == 0:
            return mine
        if mine.shape != theirs.shape:
            raise ConfigError(f"cannot merge state {name!r} of shape {mine.shape} with shape {theirs.shape}")
        return mine + theirs
    ax = (-1 if axis is None else axis) % mine.ndim  # a vocab-indexed sum's axis (add_state: -1 by default)
    rest_mine = mine.shape[:ax] + mine.shape[ax + 1:]
    rest_theirs = theirs.shape[:ax] + theirs.shape[ax + 1:]
    if rest_mine != rest_theirs:
        if mine.size and theirs.size:
            raise ConfigError(f"cannot merge state {name!r} of shape {mine.shape} with shape {theirs.shape}")
        if not theirs.size:
            return mine
        shape = list(theirs.shape)
        shape[ax] = mine.shape[ax]
        mine = np.zeros(shape, dtype=mine.dtype)
    used = np.take(theirs, np.arange(len(mapping)), axis=ax)  # their capacity may exceed their names
    index: list[Any] = [slice(None)] * mine.ndim
    index[ax] = mapping
    np.add.at(mine, tuple(index), used)
    return mine


def _remap(chunk: npt.NDArray[Any], mapping: npt.NDArray[np.int64], column: int | None) -> npt.NDArray[Any]:
    """``chunk`` with its vocabulary indices (all values, or column ``column``) renumbered by ``mapping``."""
    if column is None:
        return mapping[chunk].astype(chunk.dtype)
    out = chunk.copy()
    out[:, column] = mapping[chunk[:, column]]
    return out


def item_id(item: Any, index: int) -> str:
    """A person-readable id of ``item``: its ``sent_id``; ``doc_id#window`` for a window; else ``#index``."""
    sent_id = getattr(item, "sent_id", None)
    if sent_id is not None:
        return str(sent_id)
    doc_id = getattr(item, "doc_id", None)
    if doc_id is not None:
        window = getattr(item, "index", None)
        return f"{doc_id}#{window}" if isinstance(window, int) else str(doc_id)
    value = getattr(item, "id", None)
    return str(value) if value is not None else f"#{index}"


def partial_reason(word_attention: WordAttention) -> str | None:
    """Why ``word_attention`` covers only part of its item (``truncated``), or None if every word has a row.

    Truncation: ``meta["truncated"] > 0`` words were cut. A sentence the extractor ran in
    windows (``--on-long window``) is whole: every word has its row, taken from the window
    in which it is most central (its columns outside that window are 0), so it is analysed;
    the extractor's report names it.
    """
    if word_attention.meta.get("truncated"):
        return "truncated"
    return None


def rows_read(analyses: Iterable[Any], item: Any) -> list[int] | None:
    """The words of ``item`` whose attention rows any of ``analyses`` reads (their :meth:`Analysis.rows`,
    sorted, without repeats); None when one of them reads every row or declares nothing."""
    words: set[int] = set()
    for analysis in analyses:
        asked = analysis.rows(item) if hasattr(analysis, "rows") else None
        if asked is None:
            return None
        words.update(int(w) for w in asked)
    return sorted(words)
