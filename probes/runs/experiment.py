"""Scripted experiments: ``probes run experiments/NAME.toml`` as a library call, and ``probes report RUN_DIR``.

:func:`run_experiment` reads an experiment file (:mod:`probes.runs.experiment_spec`), runs every unit (one
analysis on one model and one dataset) through the analysis' own library function, and saves each unit as soon
as it is finished, keyed by the model's weights hash, the data's hashes and the options
(:mod:`probes.runs.experiment_cache`): a second run re-uses every finished unit, an interrupted one resumes at the
first unfinished unit. Then it computes the cross-model :class:`~probes.compare.types.Comparison` (and the
seed-question answers) from the saved results alone and writes ``report.md`` and a self-contained
``report.html``. :func:`report_experiment` does only that last step, from a run folder.

One pass per (model, dataset) serves the leaderboard, its baselines and the atlas: a ``leaderboard`` or
``baselines`` analysis without options of its own takes the board of the ``atlas`` unit of the same model and
data (the atlas runs the leaderboard's analyses in its own pass). Coreference and bridging read documents (their
own pass); probes, importance and pruning run the model themselves (training features, interventions).

Unlike the other pipelines, this one writes as it goes (into ``out``): the saved units are what makes resuming
possible. Nothing outside ``out`` (and the random-init model cache) is written::

    import probes.runs.experiment as ex
    run = ex.run_experiment("experiments/demo-compare.toml")
    print(run.format())
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.errors import ConfigError, InputError
from probes.progress import stage
from probes.reports.writer import write_output
from probes.results import Result
from probes.run_details import ExperimentInfo, ReportOptions
from probes.run_record import RUN_FILE, RunRecord
from probes.runs.experiment_folder import COMMAND, REPORT_COMMAND, UNFINISHED, check_out, mark_started

if TYPE_CHECKING:  # pragma: no cover
    from probes.compare.types import Comparison

__all__ = ["ExperimentRun", "run_experiment", "report_experiment", "COMMAND", "REPORT_COMMAND"]

#: Kinds that, without options of their own, take the board of the same model and data's atlas.
_FROM_ATLAS = ("leaderboard", "baselines")
#: Order in which a (model, data)'s units run: the atlas first, so the leaderboard can take its board.
_ORDER = ("atlas", "leaderboard", "baselines", "coreference", "bridging", "probe", "importance", "prune")


@dataclass(frozen=True)
class ExperimentRun(Result):
    """A finished experiment: the comparison computed from its saved units, and the run record (``run.json``)."""

    comparison: Comparison
    record: RunRecord = field(default_factory=RunRecord)

    def to_pandas(self, table: str = "best_heads") -> Any:
        """One table of the comparison (see :data:`probes.compare.types.TABLES`)."""
        return self.comparison.to_pandas(table)

    @property
    def info(self) -> ExperimentInfo:
        """The experiment's name, title, description, file and run folder (``out``), as ``run.json`` holds them."""
        return self.record.details.run.experiment or ExperimentInfo()

    def format(self) -> str:
        """A short terminal summary: what ran, what was re-used, where the report is."""
        units = self.record.details.run.units or ()
        reused = sum(1 for u in units if u.reused)
        name = self.info.name if "name" in self.info else "?"
        lines = [f"experiment {name}: {len(units)} units ({reused} re-used, {len(units) - reused} computed) on "
                 f"{len(self.record.details.models or {})} models and {len(self.record.data or {})} datasets"]
        for name, why in getattr(self.comparison, "missing", {}).items():
            lines.append(f"  not computed: {name}: {why}")
        return "\n".join(lines)

    def write(self, out_dir: str | Path, *, figure_format: str = "png", run_dir: str | Path | None = None
              ) -> dict[str, Path]:
        """Write ``report.md``, ``report.html``, ``figures/``, ``tables/``, ``comparison/`` and ``run.json``.

        ``run_dir`` is the run folder holding the units (default ``out_dir``): the report links to them only when
        it is written there."""
        from probes.reports.experiment.report import write_experiment

        return write_output(out_dir, COMMAND, partial(write_experiment, run=self, run_dir=run_dir),
                            figure_format=figure_format, own_folder=True)


# ----------------------------------------------------------------------------- inputs of the keys
class _Hashes:
    """Weights and data hashes, each computed once per run."""

    def __init__(self) -> None:
        self.models: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, str]] = {}

    def model(self, spec: Any) -> dict[str, Any]:
        """``{spec, path, weights_sha256, n_layers, n_heads}`` of a model spec (a random-init twin is written here)."""
        if spec.name not in self.models:
            from probes.extraction.gguf import gguf_source
            from probes.extraction.loading import (
                check_model,
                resolve_model,
                weights_sha256,
            )

            path = resolve_model(spec.spec)
            check_model(str(path))  # before AutoConfig reads its config.json: no remote code, regular files only
            folder = path if Path(path).is_dir() else _hub_snapshot(path)
            source = gguf_source(folder)  # weights dequantised from a GGUF file: say so
            self.models[spec.name] = {"spec": spec.spec, "kind": spec.kind, "base": spec.base, "seed": spec.seed,
                                      "path": path, "weights_sha256": None if folder is None else weights_sha256(folder),
                                      **({"weights_source": source} if source else {}), **_shape(path),
                                      **_query_key(path), **({"lab": dict(spec.lab)} if spec.lab else {})}
        return self.models[spec.name]

    def data(self, spec: str) -> dict[str, str]:
        """``{spec, path, sha256}`` of a treebank or corpus (registry names are fetched or found in the cache)."""
        if spec not in self.files:
            from probes.checksum import files_sha256
            from probes.corpora.registry import resolve_treebank

            path = resolve_treebank(spec)
            self.files[spec] = {"spec": spec, "path": str(path), "sha256": files_sha256([path])}
        return self.files[spec]


def _hub_snapshot(name: str) -> str | None:
    """The local folder of a hub model already in the Hugging Face cache (its weights are hashed like a folder's);
    None when it is not there (the key then holds the name alone, and the run loads it as any command would)."""
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(name, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, or not a hub name: nothing to hash
        return None


def _query_key(path: str) -> dict[str, Any]:
    """``{"query_key": {...}}`` of a sharpness twin (its ``random_init.json``: the scale s and how it was found, for
    the report's labels); empty for any other model."""
    from probes.safe_read import load_json

    made = Path(path) / "random_init.json"
    try:
        doc = load_json(made, what="a random-init record") if made.is_file() else None
    except InputError:  # not ours, or damaged: no scale to label the twin with
        doc = None
    found = doc.get("query_key") if isinstance(doc, dict) else None
    return {"query_key": found} if isinstance(found, dict) else {}


def _shape(path: str) -> dict[str, int | None]:
    """``n_layers`` and ``n_heads`` from a model's config (None where it does not say)."""
    from probes.extraction.families import n_heads, n_layers

    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
        return {"n_layers": n_layers(config), "n_heads": n_heads(config)}
    except (OSError, ValueError):  # ConfigError is a ValueError: a config that does not say
        return {"n_layers": None, "n_heads": None}


# ----------------------------------------------------------------------------- units
@dataclass(frozen=True)
class _Plan:
    """One unit to run: the analysis spec, its model and data, and the atlas analysis it takes its board from."""

    analysis: Any
    model: Any
    data: Any
    from_atlas: str | None = None

    @property
    def label(self) -> str:
        return f"{self.analysis.name} / {self.model.name} / {self.data.name}"


def _plan(experiment: Any) -> list[_Plan]:
    """Every unit, grouped by model then data, the atlas first in each group."""
    plans = []
    for model in experiment.models:
        for data in experiment.data:
            here = [a for a in experiment.analyses  # match units pair models: probes.runs.experiment_match
                    if a.kind != "match" and model.name in a.models and data.name in a.data]
            here.sort(key=lambda a: _ORDER.index(a.kind))
            atlas = next((a.name for a in here if a.kind == "atlas"), None)
            for analysis in here:
                derived = atlas if analysis.kind in _FROM_ATLAS and not analysis.options else None
                plans.append(_Plan(analysis, model, data, derived))
    return plans


#: Options that count sentences of one split and that ``limit`` does not cap by itself (the probe's).
_SPLIT_COUNTS = ("max_train", "max_eval")


def _options(plan: _Plan, experiment: Any, limit: int | None = None) -> dict[str, Any]:
    """The analysis' options, with the experiment's defaults (atlases keep per-sentence distances for Q1).

    ``limit`` (``probes run --limit N``) caps the sentences (documents) read from each dataset: the unit's
    ``limit`` option becomes the smaller of its own and N (and so does a probe's ``max_train`` / ``max_eval``).
    It is an option like any other, so it enters the unit's key: a limited run never re-uses a full run's units,
    nor the reverse; without ``limit`` the options, and so the keys, are those of the file alone.
    """
    options = dict(plan.analysis.options)
    if plan.analysis.kind == "atlas" and experiment.seed_questions:
        options.setdefault("js_items", True)
    if limit is not None:
        options["limit"] = _capped(options.get("limit"), limit)
        options.update({name: _capped(options[name], limit) for name in _SPLIT_COUNTS if name in options})
    return options


def _capped(given: Any, limit: int) -> Any:
    """The smaller of ``given`` and ``limit`` (``limit`` when nothing is given; a value that is not a count stays
    as given, for the analysis to refuse with its own message)."""
    if given is None:
        return limit
    return min(given, limit) if isinstance(given, int) and not isinstance(given, bool) else given


def _inputs(plan: _Plan, experiment: Any, hashes: _Hashes, atlas_keys: Mapping[tuple[str, str, str], str],
            limit: int | None = None) -> dict[str, Any]:
    """What the unit's key hashes."""
    from probes._version import __version__
    from probes.runs.experiment_lab import key_spec

    model = hashes.model(plan.model)
    inputs: dict[str, Any] = {
        "kind": plan.analysis.kind, "options": _options(plan, experiment, limit),
        "model": {"spec": key_spec(plan.model), "weights_sha256": model["weights_sha256"]},
        "data": {role: hashes.data(spec)["sha256"] for role, spec in plan.data.files(plan.analysis.kind).items()},
        "probes": __version__}
    if plan.from_atlas is not None:
        inputs["from_atlas"] = atlas_keys[(plan.from_atlas, plan.model.name, plan.data.name)]
    return inputs


def _compute(plan: _Plan, model_path: str, options: Mapping[str, Any], progress: bool, done: Mapping[str, Any]
             ) -> Any:
    """Run the unit's library function and return its result (a leaderboard from the atlas' board)."""
    from probes.runs.experiment_spec import analysis_function

    kind, data = plan.analysis.kind, plan.data
    if plan.from_atlas is not None:
        board = done[plan.from_atlas].board
        return board.report_baselines if kind == "baselines" else board
    function = analysis_function(kind)
    options = dict(options)
    if "attention_source" in options:  # an extraction option of the run function, not a keyword of its own
        from probes.runs.extraction_options import ExtractionOptions

        options["extraction"] = ExtractionOptions(source=options.pop("attention_source"))
    if kind == "probe":
        return function(model_path, data.train, data.treebank, select_on=data.select_on, progress=progress,
                        **options)
    if kind in ("coreference", "bridging"):
        select = data.corpus_select_on if data.corpus else data.select_on
        return function(model_path, data.role("corpus"), select_on=select, progress=progress, **options)
    result = function(model_path, data.treebank, select_on=data.select_on, progress=progress, **options)
    return result.report_baselines if kind == "baselines" else result


def _run_units(experiment: Any, store: Any, hashes: _Hashes, progress: bool, limit: int | None = None
               ) -> list[tuple[_Plan, Any]]:
    """Run (or re-use) every unit in plan order (``limit``: see :func:`_options`); ``[(plan, SavedUnit)]``."""
    from probes.progress import bar as progress_bar
    from probes.runs.experiment_cache import unit_key

    plans = _plan(experiment)
    atlas_keys: dict[tuple[str, str, str], str] = {}
    saved: list[tuple[_Plan, Any]] = []
    current: tuple[str, str] | None = None
    group: dict[str, Any] = {}  # the results computed for the current (model, data): only its atlas is needed again
    with progress_bar("units", total=len(plans), unit="unit", progress=progress) as bar:
        for plan in plans:
            bar.set_postfix_str(plan.label)
            inputs = _inputs(plan, experiment, hashes, atlas_keys, limit)
            key = unit_key(inputs)
            if plan.analysis.kind == "atlas":
                atlas_keys[(plan.analysis.name, plan.model.name, plan.data.name)] = key
            unit = store.find(plan.analysis.name, plan.model.name, plan.data.name, key)
            if (plan.model.name, plan.data.name) != current:  # plans are grouped: earlier results are never read again
                current, group = (plan.model.name, plan.data.name), {}
            if unit is None:
                if plan.from_atlas is not None and plan.from_atlas not in group:
                    # the atlas ran just before (plans put it first) and was re-used: read it from its folder
                    atlas = store.folder(plan.from_atlas, plan.model.name, plan.data.name)
                    group[plan.from_atlas] = store.load(store.relative(atlas))
                stage(f"computing {plan.label}", progress)
                t0 = time.perf_counter()
                result = _compute(plan, hashes.model(plan.model)["path"], inputs["options"], progress, group)
                unit = store.save(plan.analysis.name, plan.model.name, plan.data.name, key, inputs, result,
                                  time.perf_counter() - t0, report=experiment.unit_reports and plan.from_atlas is None)
                group[plan.analysis.name] = result
            else:
                stage(f"re-used {plan.label} (key {key[:12]})", progress)
            saved.append((plan, unit))
            bar.update(1)
    return saved


# ----------------------------------------------------------------------------- the pipeline
def run_experiment(path: str | Path, *, out: str | Path | None = None, progress: bool = True,
                   fresh: bool = False, limit: int | None = None) -> ExperimentRun | Any:
    """Run (or resume) the experiment file ``path`` and write its report into ``out`` (default: the file's ``out``).

    A role-lab file (``[experiment] kind = "role-lab"``) goes to :func:`probes.runs.role_lab.run_role_lab`, which
    returns a :class:`~probes.runs.role_lab.RoleLabRun` (None on a ``torchrun`` rank other than 0).

    Args:
        path: the experiment TOML file.
        out: the run folder (default: ``[experiment] out``, else ``runs/<name>``).
        progress: a progress bar over units (and the analyses' own bars) on stderr.
        fresh: recompute every unit even when a saved one has the same key (training units too: ``OUT/train/``
            is removed and every model of ``[train]`` trained again).
        limit: read at most this many sentences (documents) of each dataset in every unit (all when None); it is
            part of each unit's options and key, and of ``run.json``'s ``options``.

    Returns:
        The :class:`ExperimentRun` (already written into ``out``).

    Raises:
        ConfigError: ``limit`` is not a whole number >= 1, or the file or ``out`` is refused.
    """
    from probes.runs.experiment_cache import UnitStore
    from probes.runs.experiment_preflight import preflight
    from probes.runs.experiment_spec import read_experiment
    from probes.runs.inputs import check_run_options
    from probes.runs.record import run_record

    check_run_options(limit=limit)
    if _role_lab_file(path):
        from probes.runs.role_lab import run_role_lab

        if limit is not None:
            raise ConfigError(f"{path}: --limit: expected none for a role-lab file (its units draw their own "
                              f"held-out sequences), found {limit}")
        return run_role_lab(path, out=out, progress=progress, fresh=fresh)
    t0 = time.perf_counter()
    experiment = read_experiment(path)
    preflight(experiment)  # every model, package and dataset here, before anything trains or loads
    run_dir = Path(out if out is not None else experiment.out)
    experiment = experiment.placed(run_dir)  # lab models load from this run folder's train/
    check_out(run_dir, experiment.name)
    from probes.reports.writer import lock_out_dir

    lock_out_dir(run_dir, COMMAND)  # one run per folder, checked writable before any model work
    store = UnitStore(run_dir)
    for folder in ("results", "train") if fresh else ():
        if (run_dir / folder).is_dir():
            shutil.rmtree(run_dir / folder)
    store.clean()
    mark_started(run_dir, experiment.name)
    shutil.copyfile(path, run_dir / "experiment.toml")
    hashes = _Hashes()
    from probes.runs.experiment_match import run_match_units
    from probes.runs.experiment_train import run_training

    trained, lab = run_training(experiment, run_dir, store, hashes, progress)  # before any analysis reads a model
    saved = _run_units(experiment, store, hashes, progress, limit)
    matched = run_match_units(experiment, store, hashes, progress, limit)
    units_s = time.perf_counter() - t0
    record = run_record(
        COMMAND, experiment={"name": experiment.name, "title": experiment.title, "description": experiment.description,
                             "file": str(path), "copy": "experiment.toml", "out": str(run_dir)},
        models={m.name: {k: v for k, v in hashes.model(m).items() if k != "path"} for m in experiment.models},
        data={d.name: {**d.given(), "files": {role: hashes.data(spec) for role, spec in d.given().items()}}
              for d in experiment.data},
        analyses={a.name: {"kind": a.kind, "models": list(a.models), "data": list(a.data), "options": a.options}
                  for a in experiment.analyses},
        units=[*trained, *(_unit_record(plan, unit) for plan, unit in saved), *matched],
        **({"train": lab} if experiment.train else {}), seed_questions=experiment.seed_questions,
        report_options={"n_resamples": experiment.n_resamples, "tolerance": experiment.tolerance,
                        "seed": experiment.seed},
        timings={"units_s": round(units_s, 3), **({"train_s": lab["seconds"]} if experiment.train else {})},
        **({} if limit is None else {"options": {"limit": limit}}))
    stage(f"writing report to {run_dir}", progress)
    return _report(run_dir, record)


def _role_lab_file(path: str | Path) -> bool:
    """Whether ``path`` is a role-lab file (``[experiment] kind = "role-lab"``: :mod:`probes.runs.role_lab`)."""
    from probes.runs.config import read_toml
    from probes.runs.role_lab_spec import is_role_lab

    return is_role_lab(read_toml(Path(path), "experiment file")[1])


def _role_lab_run(run_dir: Path, kind: str) -> bool:
    """Whether ``run_dir``'s run.json names a role-lab run (a record that does not load is left to the experiment
    record's own reader, which names the field at fault)."""
    try:
        info = RunRecord.load(run_dir).details.run.experiment
    except (InputError, OSError):
        return False
    return info is not None and info.kind == kind


def _unit_record(plan: _Plan, unit: Any) -> dict[str, Any]:
    return {"analysis": plan.analysis.name, "kind": plan.analysis.kind, "model": plan.model.name,
            "data": plan.data.name, "key": unit.key, "reused": unit.reused,
            "seconds": unit.entry.get("seconds"), "path": unit.folder, "from_atlas": plan.from_atlas}


def _report(run_dir: Path, record: RunRecord, out: Path | None = None) -> ExperimentRun:
    """Load every unit of ``record``, compute the comparison, write the report (into ``out``, default the run
    folder); the run."""
    from probes.compare import compare
    from probes.compare.types import Unit
    from probes.results import load
    from probes.runs.experiment_record import check_experiment_record, check_unit_result
    from probes.runs.experiment_train import unit_options

    t0 = time.perf_counter()
    source = run_dir / RUN_FILE
    folders = check_experiment_record(record.to_dict(), run_dir, source)  # each unit's folder inside run_dir
    details = record.details.run
    analyses, saved = details.analyses or {}, details.units or ()
    units = [Unit(u.analysis, u.kind, u.model, u.data, check_unit_result(u, load(folder), i, source),
                  unit_options(u, analyses))  # train and match units carry their own options (cell, seed ...)
             for i, (u, folder) in enumerate(zip(saved, folders))]
    keys = ("kind", "spec", "base", "seed", "n_layers", "n_heads", "query_key", "lab")  # query_key: sharpness twins
    models = {name: {k: info.get(k) for k in keys if k not in ("query_key", "lab") or info.get(k) is not None}
              for name, info in (record.details.models or {}).items()}
    report = details.report_options or ReportOptions()
    comparison = compare(units, models, seed_questions=bool(details.seed_questions),
                         n_resamples=1000 if report.n_resamples is None else report.n_resamples,
                         tolerance=0.05 if report.tolerance is None else float(report.tolerance),
                         seed=0 if report.seed is None else report.seed)
    record = record.with_timings(report_s=round(time.perf_counter() - t0, 3))
    run = ExperimentRun(comparison=comparison, record=record)
    run.write(run_dir if out is None else out, run_dir=run_dir)
    return run


def report_experiment(run_dir: str | Path, *, out: str | Path | None = None) -> ExperimentRun | Any:
    """Re-make the report of a finished run folder from its saved units alone (no model, no data), into ``out``
    (default: the run folder itself; elsewhere, a copy that names the unit folders without linking them).

    Raises:
        ConfigError: ``run_dir`` holds no experiment run, or a unit it names is missing.
        InputError: its ``run.json`` is not JSON, or a field is not what the report reads (a unit folder outside
            ``run_dir`` included): the message names ``run.json`` and the field.
    """
    from probes.runs.experiment_record import read_experiment_record

    run_dir = Path(run_dir)
    if not (run_dir / RUN_FILE).exists():
        raise ConfigError(f"{run_dir}: expected a run folder of `probes run` with a run.json, found no run.json")
    from probes.runs.role_lab_spec import KIND

    if _role_lab_run(run_dir, KIND):
        from probes.runs.role_lab import report_role_lab

        return report_role_lab(run_dir, out=out)
    record, folders = read_experiment_record(run_dir)
    if record.command not in (COMMAND, REPORT_COMMAND):
        raise ConfigError(f"{run_dir}: run.json is from {record.command!r}, expected {COMMAND!r}")
    if not record.has("units"):
        raise ConfigError(f"{run_dir}: the run has not finished ({record.details.run.status or UNFINISHED})")
    for unit, folder in zip(record.details.run.units or (), folders):
        if not (folder / "result.json").is_file():
            raise ConfigError(f"{run_dir}: unit {unit.analysis} / {unit.model} / {unit.data} is missing "
                              f"({unit.path}); run the experiment again to recompute it")
    return _report(run_dir, record, None if out is None else Path(out))
