"""The training lab of an experiment file: ``[train]`` and ``[train.CELL]`` tables, the models they add, and the
selectors an analysis' ``models`` list may use.

::

    [train]                      # defaults of every cell: TrainConfig fields (``-`` or ``_``), and
    arch = "gpt2"                # seeds (one training run per seed), symmetry_sentences (held-out sentences the
    layers = 2                   # head symmetry is measured on, 0: none) and checkpoint_models (steps exposed
    heads = 4                    # as models besides the last)
    hidden = 64
    steps = 2000
    seeds = [1, 2, 3]
    treebank = [["${PROBES_DATA:-data}/en_ewt-ud-train.conllu", "ud:en_ewt:train"], "ud:en_gum:train"]
    select_on = ["${PROBES_DATA:-data}/en_ewt-ud-dev.conllu", "ud:en_ewt:dev"]
    [train.identical]            # one cell: its own values over the defaults
    init = "identical"

``treebank`` is one place or a list of places, trained on together; a place is a file or treebank name, or a list
of them, the first that exists winning (as in ``[data.*]``); a flat list of names is one place (``select_on`` is
always one place). ``seed`` comes from ``seeds`` (``data_seed`` stays 0 unless given) and ``max_minutes`` is not
taken (every unit trains to its last step). Each value is checked by the rules below and then by
:class:`~probes.training.config.TrainConfig` itself, so a bad value is a ConfigError at its line.

Each (cell, seed) is one training unit, trained into ``OUT/train/CELL/seed-S/``; it adds the model ``CELL-sS``
(``trained:OUT/train/CELL/seed-S@last``) and ``CELL-sS-stepK`` for each K of ``checkpoint_models`` (K must be a
checkpoint step of the run; a K at or beyond the run's last step is skipped, and the run's record says so).

Selectors in an analysis' ``models`` (:data:`SELECTOR_RULE`): ``train:*`` every lab model (final and checkpoint
ones), ``train:*@last`` every final one, ``train:*@K`` every step-K one, ``train:CELL`` / ``train:CELL@last`` /
``train:CELL@K`` the same for one cell, ``models:*`` every model of ``[models]``; names and selectors may be mixed
(a model selected twice is run once).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.errors import ConfigError
from probes.runs.option_rules import COUNT, MAX_COUNT, SEED, Rule, shown
from probes.training.config import (
    ARCHS,
    CHECKPOINT_RULES,
    MAX_BATCH_SIZE,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    TrainConfig,
)
from probes.training.tasks import MAX_TASK_VOCAB, ROLES, TASKS, TEXT

__all__ = ["TrainUnit", "LabName", "TRAIN_DIR", "TRAIN_KEYS", "SELECTOR_RULE", "check_train", "build_train",
           "lab_names", "lab_models", "select_models", "is_selector", "key_spec"]

#: Where the training units live in a run folder.
TRAIN_DIR = "train"
#: The keys of an analysis' ``models`` list that select models, and what each means.
SELECTOR_RULE = ("train:* (every lab model), train:*@last (every final lab model), train:*@K (every lab model of "
                 "step K), train:CELL, train:CELL@last, train:CELL@K (the same for one cell), models:* (every model "
                 "of [models])")
_SELECTOR = re.compile(r"^train:(?P<cell>[^@]+)(?:@(?P<step>last|\d+))?$")
#: TrainConfig fields a lab table may not set, and why.
_REFUSED = {"seed": "give seeds = [...] (one training run per seed)",
            "max_minutes": "every training unit of an experiment trains to its last step (a stopped run resumes)"}


def _rules() -> dict[str, Rule]:
    number01, heads = Rule("number", 0, 1, below=True), Rule("count", 1, MAX_HEADS)  # probes train's bounds
    return {"arch": Rule("choice", choices=ARCHS), "layers": Rule("count", 1, MAX_LAYERS), "heads": heads,
            "hidden": Rule("count", 1, MAX_HIDDEN), "intermediate": Rule("count", 1, MAX_INTERMEDIATE),
            "kv_heads": heads, "init": Rule("text"), "attention_dropout": number01, "hidden_dropout": number01,
            "data_seed": SEED, "steps": COUNT, "batch_size": Rule("count", 1, MAX_BATCH_SIZE),
            "seq_len": Rule("count", 4, MAX_SEQ_LEN), "learning_rate": Rule("number", 0), "warmup": Rule("count", 0,
            MAX_COUNT), "weight_decay": Rule("number", 0), "tokenizer": Rule("text"),
            "checkpoints": Rule("choice", choices=CHECKPOINT_RULES), "seeds": Rule("counts", 0, 2**32 - 1),
            "symmetry_sentences": Rule("count", 0, MAX_COUNT), "checkpoint_models": Rule("counts", 0, MAX_COUNT),
            "attention_only": Rule("flag"), "head_dim": Rule("count", 1, MAX_HIDDEN), "task": Rule("choice", choices=TASKS),
            "task_vocab": Rule("count", 2, MAX_TASK_VOCAB), "period_min": Rule("count", 1, MAX_TASK_VOCAB),
            "period_max": Rule("count", 1, MAX_TASK_VOCAB), "task_roles": Rule("count", 1, len(ROLES))}


_RULES = _rules()
#: Every key of ``[train]`` and ``[train.CELL]`` (underscored), besides the data places.
TRAIN_KEYS: tuple[str, ...] = (*_RULES, "treebank", "select_on")
#: Keys that are not TrainConfig fields.
_LAB_KEYS = ("seeds", "symmetry_sentences", "checkpoint_models")
_DEFAULTS = {"seeds": [0], "symmetry_sentences": 32, "checkpoint_models": []}
_REQUIRED = ("arch", "layers", "heads")


@dataclass(frozen=True)
class TrainUnit:
    """One training run of the lab: a cell's config with one seed, and the models it adds.

    Attributes:
        cell, seed: the ``[train.CELL]`` table and the seed (``config.seed``).
        config: the run's options.
        symmetry_sentences: held-out sentences the head symmetry is measured on (0: none).
        checkpoint_models: the steps exposed as models besides the last (each a checkpoint step of the run).
        skipped: notes on the ``checkpoint_models`` left out (at or beyond the run's last step).
    """

    cell: str
    seed: int
    config: TrainConfig
    symmetry_sentences: int
    checkpoint_models: tuple[int, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``CELL-sS``: the final model's name."""
        return f"{self.cell}-s{self.seed}"

    @property
    def folder(self) -> str:
        """``train/CELL/seed-S``: the run folder, relative to the experiment's run folder."""
        return f"{TRAIN_DIR}/{self.cell}/seed-{self.seed}"

    def model_name(self, step: int | None) -> str:
        """``CELL-sS`` (step None: the last) or ``CELL-sS-stepK``."""
        return self.name if step is None else f"{self.name}-step{step}"

    def lab_info(self, step: int | None) -> dict[str, Any]:
        """The ``lab`` entry of the model info of the model at ``step`` (None: the last)."""
        c = self.config
        return {"cell": self.cell, "seed": self.seed, "step": step, "last_step": c.steps, "heads": c.heads,
                "layers": c.layers, "init": c.init.text, "attention_dropout": c.attention_dropout}


@dataclass(frozen=True)
class LabName:
    """What a lab model's name stands for: its cell, seed and step (None: the last)."""

    cell: str
    seed: int
    step: int | None


# ----------------------------------------------------------------------------- reading the tables
Fail = Callable[[Sequence[str], str], ConfigError]
Place = Callable[[Sequence[str], Any], str]


def _check_place(fail: Fail, where: Sequence[str], value: Any, *, several: bool) -> None:
    """A place: a non-empty name or a non-empty list of names; ``several``: or a list of places."""
    def one(v: Any) -> bool:
        names = [v] if isinstance(v, str) else v
        return isinstance(names, list) and bool(names) and all(isinstance(n, str) and n for n in names)

    if one(value) or (several and isinstance(value, list) and value and all(one(v) for v in value)):
        return
    what = ("a file or treebank name, a list of them (the first that exists winning), or a list of such places "
            "(trained on together)") if several else "a file or treebank name, or a list of them (the first that " \
                                                     "exists winning)"
    raise fail(where, f"expected {what}, found {shown(value)}")


def _check_values(fail: Fail, where: Sequence[str], table: Mapping[str, Any], what: str) -> None:
    """Refuse an unknown key, or a value that breaks its rule."""
    seen: dict[str, str] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name in _REFUSED:
            raise fail((*where, key), f"not taken here: {_REFUSED[name]}")
        if name not in TRAIN_KEYS:
            raise fail((*where, key), f"unknown {what}; expected one of {', '.join(sorted(TRAIN_KEYS))}")
        if name in seen:
            raise fail((*where, key), f"given twice (as {seen[name]!r} and {key!r})")
        seen[name] = key
        if name in ("treebank", "select_on"):
            _check_place(fail, (*where, key), value, several=name == "treebank")
        elif not _RULES[name].allows(value):
            raise fail((*where, key), f"expected {_RULES[name].expected()}, found {shown(value)}")
    seeds = table.get("seeds")
    if isinstance(seeds, list) and (not seeds or len(set(seeds)) < len(seeds)):
        raise fail((*where, seen["seeds"]), f"expected a non-empty list of distinct seeds, found {shown(seeds)}")


def _split(fail: Fail, table: Mapping[str, Any], names: re.Pattern[str]
           ) -> tuple[dict[str, Any], dict[str, Mapping[str, Any]]]:
    """``(defaults, cells)`` of the ``[train]`` table (cell names must match ``names``)."""
    defaults = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    cells = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if not cells:
        raise fail(("train",), "expected at least one [train.CELL] table (one training cell), found none")
    for cell in cells:
        if not names.match(cell):
            raise fail(("train", cell), f"cell name {cell!r}: expected letters, digits, '-', '_' or '.', starting "
                                        "with a letter or digit (it names folders and models)")
        if cell.replace("-", "_") in TRAIN_KEYS:
            raise fail(("train", cell), f"cell name {cell!r} is a key of [train]; name the cell otherwise")
    return defaults, cells


def _config_error(fail: Fail, exc: ConfigError, cell: str, given: Mapping[str, tuple[str, ...]]) -> ConfigError:
    """TrainConfig's message at the key it names (``--heads: ...`` -> ``train.CELL.heads``)."""
    found = re.match(r"^--(?P<flag>[a-z-]+): ", exc.reason)
    key = found.group("flag").replace("-", "_") if found else None
    reason = exc.reason[found.end():] if found else exc.reason
    reason = re.sub(r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), reason)
    where = given.get(key, ("train", cell)) if key else ("train", cell)
    note = "" if where[:2] == ("train", cell) else f" (in cell {cell})"
    return fail(where, reason + note)


def _units(fail: Fail, cell: str, merged: Mapping[str, tuple[tuple[str, ...], Any]], place: Place
           ) -> list[TrainUnit]:
    """The training units of one cell from its merged values ``{key: (where, value)}``."""
    text = merged.get("task", ((), TEXT))[1] == TEXT
    needed = (*_REQUIRED, *(("hidden",) if "head_dim" not in merged else ()), *(("treebank",) if text else ()))
    missing = [k for k in needed if k not in merged]
    if missing:
        raise fail(("train", cell), f"expected {', '.join(missing)} (in [train] or [train.{cell}]), found none")
    values = {k: v for k, (_, v) in merged.items()}
    lab = {k: values.pop(k, _DEFAULTS[k]) for k in _LAB_KEYS}
    if "treebank" in values:  # a task draws its own sequences (TrainConfig refuses a treebank with one)
        treebank = values["treebank"]
        sources = treebank if isinstance(treebank, list) and any(isinstance(v, list) for v in treebank) else [treebank]
        values["treebank"] = tuple(place(merged["treebank"][0], v) for v in sources)
    if "select_on" in values:
        values["select_on"] = place(merged["select_on"][0], values["select_on"])
    given = {k: where for k, (where, _) in merged.items()}
    out = []
    for seed in lab["seeds"]:
        try:
            config = TrainConfig(seed=seed, **values)
        except ConfigError as exc:
            raise _config_error(fail, exc, cell, given) from None
        out.append(_unit(fail, cell, seed, config, lab, given))
    return out


def _unit(fail: Fail, cell: str, seed: int, config: TrainConfig, lab: Mapping[str, Any],
          given: Mapping[str, tuple[str, ...]]) -> TrainUnit:
    """One unit, its checkpoint models checked against the run's checkpoint steps."""
    steps = config.checkpoint_steps()
    kept, skipped = [], []
    for k in dict.fromkeys(lab["checkpoint_models"]):
        if k >= config.steps:
            why = ("its last step (that is the model itself)" if k == config.steps
                   else f"beyond its last step {config.steps}")
            skipped.append(f"{cell}-s{seed}-step{k}: not a model, step {k} is {why}")
        elif k not in steps:
            raise fail(given["checkpoint_models"], f"expected checkpoint steps of cell {cell} ({config.checkpoints}: "
                                                   f"{', '.join(map(str, steps))}), found {k}")
        else:
            kept.append(k)
    return TrainUnit(cell, seed, config, lab["symmetry_sentences"], tuple(kept), tuple(skipped))


def build_train(fail: Fail, raw: Mapping[str, Any], place: Place, names: re.Pattern[str]) -> tuple[TrainUnit, ...]:
    """Every training unit of the file's ``[train]`` table (none without one), in file order (cells, then seeds).

    ``fail(where, message)`` makes the ConfigError at a key path; ``place(where, value)`` turns a data place into
    the name trained on (the schema check takes its first name as written; the reader the first that exists);
    ``names``: what a cell name must match (:data:`probes.runs.experiment_schema.NAME`).

    Raises:
        ConfigError: an unknown key, a value of the wrong type or range, a config TrainConfig refuses.
    """
    table = raw.get("train")
    if table is None:
        return ()
    if not isinstance(table, Mapping):
        raise fail(("train",), f"expected a [train] table, found {shown(table)}")
    defaults, cells = _split(fail, table, names)
    _check_values(fail, ("train",), defaults, "key of [train] (or a [train.CELL] table)")
    units: list[TrainUnit] = []
    for cell, entry in cells.items():
        _check_values(fail, ("train", cell), entry, f"key of [train.{cell}]")
        merged: dict[str, tuple[tuple[str, ...], Any]] = {k.replace("-", "_"): (("train", k), v)
                                                          for k, v in defaults.items()}
        merged.update({k.replace("-", "_"): (("train", cell, k), v) for k, v in entry.items()})
        units.extend(_units(fail, cell, merged, place))
    return tuple(units)


def check_train(fail: Fail, raw: Mapping[str, Any], names: re.Pattern[str]) -> dict[str, LabName]:
    """Check the ``[train]`` table (see :func:`build_train`); the names of the models it adds."""
    def first(where: Sequence[str], value: Any) -> str:
        return value if isinstance(value, str) else value[0]

    return lab_names(build_train(fail, raw, first, names))


# ----------------------------------------------------------------------------- models and selectors
def lab_names(units: Sequence[TrainUnit]) -> dict[str, LabName]:
    """Every model the units add: ``CELL-sS`` then its ``CELL-sS-stepK``, in unit order."""
    out: dict[str, LabName] = {}
    for unit in units:
        for step in (None, *unit.checkpoint_models):
            out[unit.model_name(step)] = LabName(unit.cell, unit.seed, step)
    return out


def lab_models(units: Sequence[TrainUnit], run_dir: str | Path) -> list[tuple[str, str, dict[str, Any]]]:
    """``(name, spec, lab info)`` of every lab model, loading from ``run_dir`` (``trained:RUN/train/CELL/seed-S@K``),
    for :class:`~probes.runs.experiment_spec.ModelSpec`."""
    out = []
    for unit in units:
        for step in (None, *unit.checkpoint_models):
            spec = f"trained:{Path(run_dir) / unit.folder}@{'last' if step is None else step}"
            out.append((unit.model_name(step), spec, unit.lab_info(step)))
    return out


def key_spec(model: Any) -> str:
    """How a unit's key names its model: a lab model by ``lab:NAME`` (its weights hash pins the weights, so a run
    folder moved elsewhere keeps its keys), any other by its spec."""
    return f"lab:{model.name}" if getattr(model, "lab", None) else model.spec


def _select(selector: str, plain: Sequence[str], lab: Mapping[str, LabName]) -> list[str]:
    """The models one selector names (ConfigError naming the selector when it is malformed or matches none)."""
    if selector == "models:*":
        if not plain:
            raise ConfigError(f"model selector {selector!r}: matches no model ([models] names none)")
        return list(plain)
    match = _SELECTOR.match(selector)
    if match is None:
        raise ConfigError(f"model selector {selector!r}: expected one of {SELECTOR_RULE}")
    cell, step = match.group("cell"), match.group("step")
    cells = list(dict.fromkeys(n.cell for n in lab.values()))
    if cell != "*" and cell not in cells:
        raise ConfigError(f"model selector {selector!r}: no training cell {cell!r}; expected one of "
                          f"{', '.join(cells) or 'none (add [train.CELL] tables)'}")
    wanted = None if step in (None, "last") else int(step)
    found = [name for name, n in lab.items() if (cell == "*" or n.cell == cell)
             and (step is None or n.step == wanted)]
    if not found:
        which = "no cell's" if cell == "*" else f"cell {cell}'s"
        raise ConfigError(f"model selector {selector!r}: matches no model ({which} checkpoint_models hold no step "
                          f"{step})")
    return found


def is_selector(name: str) -> bool:
    """Whether an entry of an analysis' ``models`` is a selector rather than a model name."""
    return name.startswith(("train:", "models:"))


def select_models(names: Sequence[str], plain: Sequence[str], lab: Mapping[str, LabName]) -> list[str]:
    """The model names an analysis' ``models`` list gives: names as they are, selectors expanded, each once.

    Raises:
        ConfigError: a malformed selector, or one that matches no model (no file or line: the caller adds them).
    """
    out: list[str] = []
    for name in names:
        out.extend(_select(name, plain, lab) if is_selector(name) else [name])
    return list(dict.fromkeys(out))
