"""``match`` analyses of an experiment: pairs of models whose heads are matched
(:func:`probes.runs.match.match_models`).

::

    [analyses.match-seeds]
    kind = "match"
    models = ["train:*@last"]  # the models the pairs are drawn from (default: every model)
    pairs = "seeds"            # every pair of seeds' final models within each training cell (the default),
                               # or explicit pairs [["A", "B"], ...] of model names
    within_layers = true       # match within layers (the default) or across layers
    null = "shuffle"           # the default: B's heads shuffled across layers (within layers only); or a model
    limit = 200                # name: A matched to that model, re-matched in every resample

and ``n_resamples``, ``min_count``, ``batch_size``, ``device``, ``on_long`` as ``probes match`` takes them.

One unit per pair and dataset: its :class:`~probes.compare.types.Unit` has ``model`` A and ``options["other"]``
B (``options["cell"]``: the pair's training cell, or None), and holds the :class:`~probes.runs.match.MatchRun`.
It is saved under ``results/ANALYSIS/A~B/DATA/``; its key holds the options, the weights hash of A, of B and of
the null model, the treebank's sha256 and the package version.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from probes.errors import ConfigError
from probes.runs.option_rules import Rule, analysis_rules, shown

__all__ = ["MATCH_KEYS", "MATCH_DEFAULTS", "SHUFFLE", "match_rules", "check_match", "match_pairs",
           "run_match_units"]

#: Options of a match analysis checked here rather than by a :class:`~probes.runs.option_rules.Rule`.
MATCH_KEYS: tuple[str, ...] = ("pairs", "null")
#: The null of B's heads shuffled across layers.
SHUFFLE = "shuffle"
#: What a match analysis does when its table does not say.
MATCH_DEFAULTS: dict[str, Any] = {"pairs": "seeds", "within_layers": True, "null": SHUFFLE}

Fail = Callable[[Sequence[str], str], ConfigError]


def match_rules() -> dict[str, Rule]:
    """The options of a match analysis that follow a rule (``pairs`` and ``null``: :func:`check_match`)."""
    return dict(analysis_rules("match"))


def match_pairs(pairs: Any, chosen: Sequence[str], lab: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    """``[(A, B, cell or None)]``: ``"seeds"``: every pair of seeds' final models (in file order) within each cell,
    among ``chosen``; else the explicit pairs."""
    if pairs != "seeds":
        return [(a, b, None) for a, b in pairs]
    cells: dict[str, list[str]] = {}
    for name in chosen:
        n = lab.get(name)
        if n is not None and n.step is None:
            cells.setdefault(n.cell, []).append(name)
    return [(a, b, cell) for cell, names in cells.items() for a, b in itertools.combinations(names, 2)]


def check_match(fail: Fail, where: Sequence[str], given: Mapping[str, tuple[str, Any]], chosen: Sequence[str],
                models: Sequence[str], lab: Mapping[str, Any]) -> None:
    """Refuse a match analysis' ``pairs`` or ``null`` that names no model, or a pairing that yields no pair."""
    key, pairs = given.get("pairs", ("pairs", "seeds"))
    if pairs != "seeds":
        ok = isinstance(pairs, list) and pairs and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(m, str) for m in p) and p[0] != p[1] for p in pairs)
        if not ok:
            raise fail((*where, key), f"expected \"seeds\" or a non-empty list of pairs of distinct model names "
                                      f"[[\"A\", \"B\"], ...], found {shown(pairs)}")
        for name in (m for p in pairs for m in p):
            if name not in models:
                raise fail((*where, key), f"unknown model {name!r}; expected one of {', '.join(models)}")
    elif not match_pairs(pairs, chosen, lab):
        raise fail((*where, key), "pairs = \"seeds\": expected two or more seeds' final models of one training cell "
                                  "among the analysis' models, found none (add [train] tables with 2 or more seeds)")
    null_key, null = given.get("null", ("null", SHUFFLE))
    if not isinstance(null, str) or (null != SHUFFLE and null not in models):
        raise fail((*where, null_key), f"expected \"{SHUFFLE}\" or a model name (one of {', '.join(models)}), "
                                       f"found {shown(null)}")
    _, within = given.get("within_layers", ("within_layers", MATCH_DEFAULTS["within_layers"]))
    if null == SHUFFLE and within is False:
        raise fail((*where, null_key), "null = \"shuffle\" (B's heads shuffled across layers) needs within_layers = "
                                       "true; across layers name a null model instead")


# ----------------------------------------------------------------------------- running the units
def _options(analysis: Any, limit: int | None) -> dict[str, Any]:
    """The analysis' options with the defaults, ``limit`` capped by ``probes run --limit``."""
    options = {**MATCH_DEFAULTS, **analysis.options}
    if limit is not None:
        given = options.get("limit")
        options["limit"] = limit if not isinstance(given, int) else min(given, limit)
    return options


def _inputs(experiment: Any, hashes: Any, a: str, b: str, data: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a match unit's key hashes: options, both models' (and the null model's) weights, the treebank."""
    from probes._version import __version__
    from probes.runs.experiment_lab import key_spec

    def model(name: str) -> dict[str, Any]:
        info = hashes.model(experiment.model(name))
        return {"spec": key_spec(experiment.model(name)), "weights_sha256": info["weights_sha256"]}

    null = options["null"]
    return {"kind": "match", "options": {k: v for k, v in options.items() if k != "pairs"},
            "model": model(a), "other": model(b), "null": null if null == SHUFFLE else model(null),
            "data": {"treebank": hashes.data(data.treebank)["sha256"]}, "probes": __version__}


def _compute(experiment: Any, hashes: Any, a: str, b: str, data: Any, options: Mapping[str, Any],
             progress: bool) -> Any:
    from probes.runs.match import match_models

    null = options["null"]
    kwargs: dict[str, Any] = {k: options[k] for k in ("limit", "n_resamples", "min_count", "batch_size", "device",
                                                      "on_long") if k in options}
    if "attention_source" in options:
        from probes.runs.extraction_options import ExtractionOptions

        kwargs["extraction"] = ExtractionOptions(source=options["attention_source"])
    return match_models(hashes.model(experiment.model(a))["path"], hashes.model(experiment.model(b))["path"],
                        data.treebank, within_layers=bool(options["within_layers"]),
                        null_model=None if null == SHUFFLE else hashes.model(experiment.model(null))["path"],
                        progress=progress, **kwargs)


def run_match_units(experiment: Any, store: Any, hashes: Any, progress: bool, limit: int | None = None
                    ) -> list[dict[str, Any]]:
    """Run (or re-use) every match unit; their entries of ``run.json``'s ``units``."""
    from probes.progress import stage
    from probes.runs.experiment_cache import unit_key
    from probes.runs.experiment_lab import lab_names

    lab = lab_names(experiment.train)
    out = []
    for analysis in (a for a in experiment.analyses if a.kind == "match"):
        options = _options(analysis, limit)
        for a, b, cell in match_pairs(options["pairs"], analysis.models, lab):
            for data in (experiment.dataset(d) for d in analysis.data):
                inputs = _inputs(experiment, hashes, a, b, data, options)
                key, label = unit_key(inputs), f"{analysis.name} / {a}~{b} / {data.name}"
                unit = store.find(analysis.name, f"{a}~{b}", data.name, key)
                if unit is None:
                    stage(f"computing {label}", progress)
                    t0 = time.perf_counter()
                    result = _compute(experiment, hashes, a, b, data, options, progress)
                    unit = store.save(analysis.name, f"{a}~{b}", data.name, key, inputs, result,
                                      time.perf_counter() - t0, report=experiment.unit_reports)
                else:
                    stage(f"re-used {label} (key {key[:12]})", progress)
                unit_options = {k: v for k, v in options.items() if k != "pairs"}
                out.append({"analysis": analysis.name, "kind": "match", "model": a, "data": data.name,
                            "key": unit.key, "reused": unit.reused, "seconds": unit.entry.get("seconds"),
                            "path": unit.folder, "from_atlas": None,
                            "options": {**unit_options, "other": b, "cell": cell}})
    return out
