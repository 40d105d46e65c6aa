"""Antecedent-selection accuracy of every head, and the paper's baselines (Clark et al. 2019 §4.3).

For each *evaluated* mention (one whose entity has a preceding mention in the same
window), the head word of the mention attends most to some other word; the head
is right if that word is the head word of any antecedent (a preceding mention of the
same entity, see below). Baselines pick a preceding mention: the nearest one, the nearest one with the same
head word, and a four-sieve rule-based system (exact string, head word, agreement,
nearest). Everything is counted per mention type and per sentence distance to the
nearest antecedent, per document (the bootstrap unit).

Definitions (every one is an option or is written in the run record):

* **Mention order.** Mentions are sorted by start, then longer first (outer brackets
  open first); "nearest" below means the one that starts last in this order.
* **Antecedents and candidates (one rule for the heads and every baseline).** A mention
  ``a`` *precedes* ``b`` when it ends before ``b`` starts (``a.end <= b.start``): a
  mention that contains, overlaps or is nested in ``b`` is never its antecedent (in
  "Anna saw [her mother].", "her mother" is not an antecedent of "her"). The antecedents
  of ``b`` are the preceding mentions of its entity; the nearest-mention, head-match and
  rule-based baselines choose only among preceding mentions (of any entity), and so does
  ``candidates="mentions"``. This follows Clark et al.'s "earlier mention" / "closest
  preceding one by position" (clark_spec.md §4, items 3 and 8). A mention nested in
  another mention of its own entity (an apposition inside its noun phrase) with no
  other preceding mention of that entity is therefore ``no_antecedent``.
* **Evaluated.** A mention with at least one antecedent (a preceding mention of its
  entity) inside its window, scored once, in the earliest window holding it
  (:mod:`probes.extraction.windows`). First mentions and cataphors are counted as
  ``no_antecedent``; mentions whose antecedents all lie outside the window are
  ``not_scorable`` (or, with ``antecedents="document"``, evaluated and wrong for
  heads and baselines alike); mentions crossing a window cut are ``cut``.
* **Split antecedents** (GUM ``SplitAnte=``, :class:`~probes.corpora.types.SplitAntecedent`).
  With ``split_antecedents="any-part"`` (default), a mention of a plural entity with
  split antecedents that has no preceding mention of its *own* entity in the window
  takes as antecedents the preceding mentions of its part entities in the window: it is
  evaluated, and counted in ``via_split_antecedent`` (a subset of ``evaluated``). A
  mention with an own antecedent in the window is scored against its own entity only.
  With ``"ignore"``, parts are never antecedents (a first plural is ``no_antecedent``).
* **Prediction.** For head ``(l, h)`` and anaphor head word ``i``: the argmax over
  the candidate words ``j`` of ``A[l, h, i, j]`` (``anaphor_to_antecedent``) or of
  ``A[l, h, j, i]`` (``antecedent_to_anaphor``), special tokens dropped, ``j != i``,
  ties to the left-most word. Candidates: ``all`` words of the window (Clark's rule),
  ``earlier`` words (``j < i``), or the head words of preceding ``mentions``.
* **Mention type** from the UPOS of the head word: PRON, or DET heading a mention
  (a pronominal determiner: *this*, *that*, *all*) -> pronoun; PROPN -> proper;
  anything else -> nominal.
* **Distance**: sentences between the anaphor and its nearest antecedent in the
  window, banded 0, 1, 2, 3-5, 6+.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.analysis.mentions import COREF_DIRECTIONS, DISTANCE_BANDS, distance_band, word_rows
from probes.corpora.types import Document, Mention
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention
from probes.extraction.windows import Window
from probes.results import Result, head_axes, head_names, long_table

__all__ = [
    "COREF_DEFINITIONS",
    "SPLIT_ANTECEDENT_DEFINITIONS",
    "MENTION_TYPES",
    "DISTANCE_BANDS",
    "CANDIDATE_SETS",
    "COREF_DIRECTIONS",
    "ANTECEDENT_SCOPES",
    "SINGLETONS",
    "SPLIT_ANTECEDENTS",
    "BASELINES",
    "AntecedentAccuracy",
    "CorefResult",
    "mention_type",
    "distance_band",
    "mention_order",
    "agreement",
    "word_rows",
]

MENTION_TYPES: tuple[str, ...] = ("pronoun", "proper", "nominal")
CANDIDATE_SETS: tuple[str, ...] = ("all", "earlier", "mentions")
ANTECEDENT_SCOPES: tuple[str, ...] = ("window", "document")
BASELINES: tuple[str, ...] = ("nearest", "head_match", "rule_sieve")
SINGLETONS: tuple[str, ...] = ("keep", "drop")
SPLIT_ANTECEDENTS: tuple[str, ...] = ("any-part", "ignore")
COUNTS: tuple[str, ...] = ("evaluated", "no_antecedent", "not_scorable", "cut", "singleton_dropped",
                           "via_split_antecedent")

# Pronoun lexicon for agreement when UD FEATS are silent: form -> (number, gender, person).
_PRONOUNS: dict[str, tuple[str | None, str | None, str | None]] = {
    **{w: ("Sing", None, "1") for w in ("i", "me", "my", "mine", "myself")},
    **{w: ("Plur", None, "1") for w in ("we", "us", "our", "ours", "ourselves")},
    **{w: (None, None, "2") for w in ("you", "your", "yours", "yourself", "yourselves")},
    **{w: ("Sing", "Masc", "3") for w in ("he", "him", "his", "himself")},
    **{w: ("Sing", "Fem", "3") for w in ("she", "her", "hers", "herself")},
    **{w: ("Sing", "Neut", "3") for w in ("it", "its", "itself")},
    **{w: ("Plur", None, "3") for w in ("they", "them", "their", "theirs", "themselves")},
}


#: What each number of the run record means (``run.json``'s ``definitions``).
COREF_DEFINITIONS = {
    "evaluated": "a mention whose entity has a preceding mention (one ending before it starts) inside the "
                 "window; scored once, in the earliest window holding it",
    "antecedents": "the preceding mentions of the anaphor's entity; a mention containing or overlapping the "
                   "anaphor is never its antecedent",
    "baselines": "nearest mention, head-word match and rule-based sieve choose only among mentions that end "
                 "before the anaphor starts (any entity), nearest = the one starting last",
    "prediction": "argmax over candidate words of the anaphor head's row (specials dropped, self "
                  "excluded, ties left-most); correct if it is the head word of any antecedent",
    "mention_type": "head UPOS PRON or DET -> pronoun, PROPN -> proper, else nominal",
}
SPLIT_ANTECEDENT_DEFINITIONS = {
    "any-part": "any-part: a mention whose entity has no earlier mention of its own in the window but has split "
                "antecedents (GUM SplitAnte=) with earlier mentions there is evaluated, correct if the prediction "
                "(or a baseline's pick) is the head word of an earlier mention of any part entity; counted in "
                "via_split_antecedent",
    "ignore": "ignore: SplitAnte is not used; a plural whose entity has no earlier mention of its own counts "
              "as no_antecedent",
}


def mention_type(upos: str) -> str:
    """``pronoun``, ``proper`` or ``nominal`` from the UPOS of a mention's head word."""
    if upos in ("PRON", "DET"):
        return "pronoun"
    if upos == "PROPN":
        return "proper"
    return "nominal"


def mention_order(mentions: Sequence[Mention]) -> list[Mention]:
    """Mentions in document order: by start, then longer first (outer brackets open first)."""
    return sorted(mentions, key=lambda m: (m.start, -m.end, m.head))


def _feats(text: str) -> dict[str, str]:
    if not text or text == "_":
        return {}
    return dict(kv.split("=", 1) for kv in text.split("|") if "=" in kv)


def agreement(form: str, upos: str, feats: str) -> tuple[str | None, str | None, str | None]:
    """``(number, gender, person)`` of a head word from UD FEATS, else a pronoun lexicon; None = unknown.

    Non-pronouns are third person. The features are compared by the rule-based sieve,
    an unknown value agreeing with anything.
    """
    f = _feats(feats)
    lex = _PRONOUNS.get(form.lower(), (None, None, None)) if upos in ("PRON", "DET") else (None, None, "3")
    number = f.get("Number") or lex[0]
    gender = f.get("Gender") or lex[1]
    person = f.get("Person") or lex[2]
    if upos not in ("PRON", "DET") and "Person" not in f:
        person = "3"
    return number, gender, person


def _agree(a: tuple[str | None, ...], b: tuple[str | None, ...]) -> bool:
    return all(x is None or y is None or x == y for x, y in zip(a, b))


@dataclass(frozen=True)
class _DocInfo:
    """Per-document facts the scorer needs, computed once per document."""

    order: list[Mention]  # mentions in document order
    types: npt.NDArray[np.intp]  # (n_mentions,) index into MENTION_TYPES
    lower_head: list[str]  # lowercased head word of each mention
    text: list[str]  # lowercased words of each mention, space-joined
    agree: list[tuple[str | None, str | None, str | None]]
    antecedents: list[list[int]]  # per mention: indices (in `order`) of its antecedents in the document
    split: list[list[int]]  # per mention: indices of earlier mentions of its entity's split-antecedent parts


def _doc_info(doc: Document, drop_singletons: bool = False, use_split: bool = False) -> _DocInfo:
    words = doc.words
    upos = [u for s in doc.sentences for u in (s.upos or ("_",) * len(s.words))]
    feats = [f for s in doc.sentences for f in (s.feats or ("_",) * len(s.words))]
    mentions = doc.mentions
    if drop_singletons:
        sizes: dict[str, int] = {}
        for m in mentions:
            sizes[m.entity] = sizes.get(m.entity, 0) + 1
        mentions = tuple(m for m in mentions if sizes[m.entity] > 1)
    order = mention_order(mentions)
    parts = {s.entity: s.parts for s in doc.split_antecedents} if use_split else {}
    by_entity: dict[str, list[int]] = {}
    antecedents: list[list[int]] = []
    split: list[list[int]] = []
    for k, m in enumerate(order):
        earlier = by_entity.setdefault(m.entity, [])
        antecedents.append([a for a in earlier if order[a].end <= m.start])
        split.append(sorted(a for p in parts.get(m.entity, ()) for a in by_entity.get(p, ())
                            if order[a].end <= m.start))
        earlier.append(k)
    return _DocInfo(
        order=order,
        types=np.array([MENTION_TYPES.index(mention_type(upos[m.head])) for m in order], dtype=np.intp),
        lower_head=[words[m.head].lower() for m in order],
        text=[" ".join(words[w] for w in m.words).lower() for m in order],
        agree=[agreement(words[m.head], upos[m.head], feats[m.head]) for m in order],
        antecedents=antecedents,
        split=split,
    )


@dataclass(frozen=True)
class CorefResult(Result):
    """Counts behind antecedent-selection accuracy, per document, type and distance band.

    Attributes:
        layers, heads: 0-based model layers and heads (axes of ``correct``).
        units: document ids (the bootstrap units), axis 0 of the arrays.
        correct: ``(n_units, n_types, n_bands, n_layers, n_heads)`` correct predictions per head.
        total: ``(n_units, n_types, n_bands)`` evaluated mentions.
        baseline_correct: ``(n_units, n_baselines, n_types, n_bands)`` correct baseline choices.
        counts: ``{type: {evaluated, no_antecedent, not_scorable, cut, singleton_dropped,
            via_split_antecedent}}`` mention counts (``via_split_antecedent`` is part of ``evaluated``).
        options: the options the scores were computed with.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"correct": "units T B layers heads", "total": "units T B", "baseline_correct": "units _ T B"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    units: tuple[str, ...]
    correct: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    baseline_correct: npt.NDArray[np.int64]
    counts: dict[str, dict[str, int]]
    options: dict[str, str] = field(default_factory=dict)

    def _pick(self, mention_type: str | None, band: str | None) -> tuple[Any, Any]:
        t = slice(None) if mention_type is None else [MENTION_TYPES.index(mention_type)]
        b = slice(None) if band is None else [DISTANCE_BANDS.index(band)]
        return t, b

    def head_counts(self, mention_type: str | None = None, band: str | None = None
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(correct (n_units, L, H), total (n_units,))`` for one type / band (None: all)."""
        t, b = self._pick(mention_type, band)
        c = self.correct[:, t][:, :, b].sum(axis=(1, 2))
        n = self.total[:, t][:, :, b].sum(axis=(1, 2))
        return c, n

    def baseline_counts(self, name: str, mention_type: str | None = None, band: str | None = None
                        ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(correct (n_units,), total (n_units,))`` of one baseline for one type / band."""
        t, b = self._pick(mention_type, band)
        c = self.baseline_correct[:, BASELINES.index(name)][:, t][:, :, b].sum(axis=(1, 2))
        n = self.total[:, t][:, :, b].sum(axis=(1, 2))
        return c, n

    def to_pandas(self) -> Any:
        """One row per mention type, distance band and head, summed over documents: ``type, band,
        layer, head, head_name, correct, total, accuracy`` (``layer``/``head`` 1-based)."""
        correct, total = self.correct.sum(axis=0), self.total.sum(axis=0)  # (T, B, L, H), (T, B)
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = correct / np.where(total > 0, total, np.nan)[..., None, None]
        axes = {"type": MENTION_TYPES, "band": DISTANCE_BANDS,
                **head_axes(self.layers, self.heads)}
        table = long_table(axes, {"correct": correct, "total": total[..., None, None], "accuracy": accuracy})
        table.insert(4, "head_name", head_names(table))
        return table

    def accuracy(self, mention_type: str | None = None, band: str | None = None) -> npt.NDArray[np.float64]:
        """``(n_layers, n_heads)`` accuracy of every head (NaN when nothing was evaluated)."""
        c, n = self.head_counts(mention_type, band)
        total = n.sum()
        return c.sum(axis=0) / total if total else np.full(c.shape[1:], np.nan)

    def baseline_accuracy(self, name: str, mention_type: str | None = None, band: str | None = None) -> float:
        """Accuracy of baseline ``name`` (NaN when nothing was evaluated)."""
        c, n = self.baseline_counts(name, mention_type, band)
        return float(c.sum() / n.sum()) if n.sum() else float("nan")


class AntecedentAccuracy(Analysis[CorefResult]):
    """Streaming antecedent-selection accuracy of every head, with the three baselines.

    Feed it ``(Window, WordAttention)`` pairs (the windows of :func:`probes.extraction.windows.document_windows`,
    all windows of a document, in order). State: integer counts per document, type and band.

    Args:
        candidates: ``all`` (default, Clark et al.), ``earlier`` or ``mentions`` (see module doc).
        direction: ``anaphor_to_antecedent`` (the anaphor's row, default) or ``antecedent_to_anaphor``.
        antecedents: ``window`` (default: mentions whose antecedents are all outside the window
            are not scorable) or ``document`` (they count as evaluated and wrong).
        singletons: ``keep`` (default) or ``drop``: forget mentions whose entity is mentioned once in
            the document, as OntoNotes (Clark et al.'s data) never annotates them. Only the baselines
            and ``candidates="mentions"`` change: singletons are never antecedents. A plural mentioned
            once is a singleton too (OntoNotes has no split antecedents either).
        split_antecedents: ``any-part`` (default) or ``ignore``: whether a plural with no earlier
            mention of its own in the window is evaluated against the earlier mentions of its
            split-antecedent parts (``Document.split_antecedents``; see the module doc).
    """

    items: ClassVar[str] = "windows"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    candidates: str
    direction: str
    antecedents: str
    singletons: str
    split_antecedents: str
    _correct: dict[str, npt.NDArray[np.int64]]
    _total: dict[str, npt.NDArray[np.int64]]
    _base: dict[str, npt.NDArray[np.int64]]
    _counts: npt.NDArray[np.int64]
    _cache: tuple[Document, _DocInfo] | None

    def __init__(self, *, candidates: str = "all", direction: str = "anaphor_to_antecedent",
                 antecedents: str = "window", singletons: str = "keep",
                 split_antecedents: str = "any-part") -> None:
        for name, value, allowed in (("candidates", candidates, CANDIDATE_SETS),
                                     ("direction", direction, COREF_DIRECTIONS),
                                     ("antecedents", antecedents, ANTECEDENT_SCOPES),
                                     ("singletons", singletons, SINGLETONS),
                                     ("split_antecedents", split_antecedents, SPLIT_ANTECEDENTS)):
            if value not in allowed:
                raise ConfigError(f"{name}: expected one of {', '.join(allowed)}, found {value!r}")
        super().__init__()
        self.add_option("candidates", candidates)
        self.add_option("direction", direction)
        self.add_option("antecedents", antecedents)
        self.add_option("singletons", singletons)
        self.add_option("split_antecedents", split_antecedents)
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_correct", {}, "keyed")  # doc id -> (types, bands, L, H)
        self.add_state("_total", {}, "keyed")  # doc id -> (types, bands)
        self.add_state("_base", {}, "keyed")  # doc id -> (baselines, types, bands)
        self.add_state("_counts", np.zeros((len(MENTION_TYPES), len(COUNTS)), dtype=np.int64), "sum")
        self.add_state("_cache", None, "buffer")  # (document, its _DocInfo)

    def _info(self, doc: Document) -> _DocInfo:
        if self._cache is None or self._cache[0] is not doc:
            self._cache = (doc, _doc_info(doc, self.singletons == "drop", self.split_antecedents == "any-part"))
            if self.singletons == "drop":  # counted once per document, by the type of the dropped mention
                kept = {(m.start, m.end, m.head, m.entity) for m in self._cache[1].order}
                upos = [u for s in doc.sentences for u in (s.upos or ("_",) * len(s.words))]
                for m in doc.mentions:
                    if (m.start, m.end, m.head, m.entity) not in kept:
                        self._counts[MENTION_TYPES.index(mention_type(upos[m.head])), 4] += 1
        return self._cache[1]

    def _unit(self, doc_id: str, shape: tuple[int, int]) -> None:
        if doc_id not in self._total:
            nt, nb = len(MENTION_TYPES), len(DISTANCE_BANDS)
            self._correct[doc_id] = np.zeros((nt, nb, *shape), dtype=np.int64)
            self._total[doc_id] = np.zeros((nt, nb), dtype=np.int64)
            self._base[doc_id] = np.zeros((len(BASELINES), nt, nb), dtype=np.int64)

    def rows(self, item: Window) -> list[int] | None:
        """The head words of the mentions ``item`` owns and holds whole (a superset of those scored): with
        ``anaphor_to_antecedent`` only their rows are read; the other direction reads columns (None)."""
        if self.direction != "anaphor_to_antecedent":
            return None
        return [m.head - item.start for m in item.document.mentions
                if item.prev_end < m.end <= item.end and m.start >= item.start]

    def update(self, item: Window, word_attention: WordAttention) -> None:
        """Score the mentions ``item`` owns (see :mod:`probes.extraction.windows`) with every head."""
        window = item
        if word_attention.n_words != window.n_words:
            raise AlignmentError(
                f"document {window.doc_id!r} window {window.index}: expected attention over "
                f"{window.n_words} words, found {word_attention.n_words}")
        shape = word_attention.weights.shape[:2]
        if self._layers is None:
            self._layers, self._heads = tuple(word_attention.layers), tuple(word_attention.heads)
        elif (self._layers, self._heads) != (tuple(word_attention.layers), tuple(word_attention.heads)):
            raise ConfigError("every window must hold the same layers and heads")
        doc = window.document
        self._unit(doc.doc_id, shape)
        info = self._info(doc)

        evaluated: list[int] = []  # mention indices (in info.order)
        golds: list[list[int]] = []  # per evaluated mention: its antecedents inside the window (may be empty)
        bands: list[int] = []
        for k, m in enumerate(info.order):
            if not (window.prev_end < m.end <= window.end):
                continue  # this window is not the one responsible for the mention
            t = int(info.types[k])
            if m.start < window.start:
                self._counts[t, 3] += 1  # cut: no window holds it
                continue
            own, parts = info.antecedents[k], info.split[k]  # parts: empty unless split_antecedents="any-part"
            if not own and not parts:
                self._counts[t, 1] += 1
                continue
            held = [a for a in own if window.holds(info.order[a].start, info.order[a].end)]
            via_split = False
            if not held and parts:  # no own antecedent in the window: the parts' earlier mentions stand in
                held = [a for a in parts if window.holds(info.order[a].start, info.order[a].end)]
                via_split = bool(held) or not own
            if not held and self.antecedents == "window":
                self._counts[t, 2] += 1
                continue
            near = max(held or own + parts, key=lambda a: info.order[a].start)
            evaluated.append(k)
            golds.append(held)
            bands.append(int(distance_band(m.sentence - info.order[near].sentence)))
            self._counts[t, 0] += 1
            self._counts[t, 5] += via_split
            if not held:
                self._counts[t, 2] += 1  # evaluated as wrong, still reported as outside the window
        if not evaluated:
            return
        types = info.types[evaluated]
        band_idx = np.asarray(bands, dtype=np.intp)
        np.add.at(self._total[doc.doc_id], (types, band_idx), 1)
        correct = self._score_heads(window, word_attention, info, evaluated, golds)  # (L, H, E)
        flat = correct.reshape(-1, len(evaluated)).T.astype(np.int64)  # (E, L*H)
        acc = self._correct[doc.doc_id].reshape(len(MENTION_TYPES), len(DISTANCE_BANDS), -1)
        np.add.at(acc, (types, band_idx), flat)
        held = self._held(window, info)
        ok = np.array([self._baselines(info, k, held, golds[e]) for e, k in enumerate(evaluated)],
                      dtype=np.int64).reshape(len(evaluated), len(BASELINES))  # (E, baselines)
        for b in range(len(BASELINES)):
            np.add.at(self._base[doc.doc_id][b], (types, band_idx), ok[:, b])

    def _score_heads(self, window: Window, wa: WordAttention, info: _DocInfo, evaluated: list[int],
                     golds: list[list[int]]) -> npt.NDArray[np.bool_]:
        """``(L, H, E)``: does each head's most attended candidate word head an antecedent in ``golds``?"""
        pos = wa.word_index  # (n,) positions of the window's words among all positions
        n = len(pos)
        rows = np.array([info.order[k].head - window.start for k in evaluated], dtype=np.intp)  # (E,)
        if self.direction == "anaphor_to_antecedent":
            scores = word_rows(wa, rows)  # (L, H, E, n)
        else:  # who attends to the anaphor: the anaphor's column, over the words' rows
            scores = np.swapaxes(wa.weights[:, :, pos[:, None], pos[rows][None, :]], 2, 3)  # (L, H, E, n)
        cols = np.arange(n)
        allowed = cols[None, :] != rows[:, None]  # (E, n)
        if self.candidates == "earlier":
            allowed &= cols[None, :] < rows[:, None]
        elif self.candidates == "mentions":
            mask = np.zeros((len(evaluated), n), dtype=bool)
            held = self._held(window, info)
            for e, k in enumerate(evaluated):
                start = info.order[k].start  # preceding mentions only (see the module doc)
                mask[e, [info.order[c].head - window.start for c in held if info.order[c].end <= start]] = True
            allowed &= mask
        gold = np.zeros((len(evaluated), n), dtype=bool)  # (E, n) heads of antecedents in the window
        for e, held in enumerate(golds):
            gold[e, [info.order[a].head - window.start for a in held]] = True
        scores[:, :, ~allowed] = -np.inf  # scores is this call's own copy (L, H, E, n)
        pred = scores.argmax(axis=-1)  # (L, H, E), ties -> left-most
        hit = np.take_along_axis(np.broadcast_to(gold, scores.shape), pred[..., None], axis=-1)[..., 0]
        return hit & allowed.any(axis=1)[None, None, :]

    def _held(self, window: Window, info: _DocInfo) -> list[int]:
        """Indices (in document order) of the mentions lying inside ``window``."""
        return [c for c, m in enumerate(info.order) if window.start <= m.start and m.end <= window.end]

    def _baselines(self, info: _DocInfo, k: int, held: list[int], gold: list[int]) -> tuple[bool, bool, bool]:
        """Does each baseline of :data:`BASELINES` (nearest, head match, rule sieve) pick one of ``gold`` (the
        anaphor's antecedents in the window)?

        ``held``: the mentions in the window. ``gold`` holds mentions of the anaphor's own entity, or,
        for a mention evaluated through split antecedents, mentions of its parts.
        """
        m = info.order[k]
        # preceding mentions only: a mention containing or overlapping the anaphor is never its antecedent
        cands = [c for c in reversed(held[:bisect_left(held, k)]) if info.order[c].end <= m.start]  # nearest first
        nearest = cands[0] if cands else None
        head_match = next((c for c in cands if info.lower_head[c] == info.lower_head[k]), None)
        # rule sieve: exact string, head word, agreement, nearest (the first sieve that picks one)
        sieve = next((c for c in cands if info.text[c] == info.text[k]), None)
        if sieve is None:
            sieve = head_match
        if sieve is None:
            sieve = next((c for c in cands if _agree(info.agree[c], info.agree[k])), None)
        if sieve is None:
            sieve = nearest
        return (nearest is not None and nearest in gold, head_match is not None and head_match in gold,
                sieve is not None and sieve in gold)

    def compute(self) -> CorefResult:
        """The counts seen so far as a :class:`CorefResult`."""
        units = tuple(self._total)
        shape = (len(self._layers or ()), len(self._heads or ()))
        nt, nb = len(MENTION_TYPES), len(DISTANCE_BANDS)

        def stack(d: Mapping[str, npt.NDArray[np.int64]], empty: tuple[int, ...]) -> npt.NDArray[np.int64]:
            return np.stack([d[u] for u in units]) if units else np.zeros((0, *empty), dtype=np.int64)

        return CorefResult(
            layers=self._layers or (), heads=self._heads or (), units=units,
            correct=stack(self._correct, (nt, nb, *shape)), total=stack(self._total, (nt, nb)),
            baseline_correct=stack(self._base, (len(BASELINES), nt, nb)),
            counts={t: {c: int(self._counts[i, j]) for j, c in enumerate(COUNTS)}
                    for i, t in enumerate(MENTION_TYPES)},
            options=self.options,
        )
