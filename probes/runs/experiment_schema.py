"""The one schema of experiment files, checked before any work: every table, key, type, range and name.

:func:`check_experiment` walks the file's tables and refuses the first value that breaks the schema with a
:class:`~probes.errors.ConfigError` of the form ``FILE:LINE: TABLE.KEY: expected WHAT, found VALUE``
(``experiments/x.toml:12: analyses.syntax.min_count: expected a whole number from 1 to 1000000000, found
"twenty"``). The rules of an analysis' options are those of the command line
(:func:`probes.runs.option_rules.analysis_rules`), so a value ``probes leaderboard`` refuses is refused here
too; unknown tables and keys are errors (a typo never falls back to a default); an analysis must name at least
one model and one dataset, each of them defined in the file and each dataset holding what the kind runs on.
``[train]`` tables (:mod:`probes.runs.experiment_lab`) add models, which an analysis' ``models`` may name one by
one or by a selector (``train:*@last`` ...); ``match`` analyses (:mod:`probes.runs.experiment_match`) take pairs
of models.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.errors import ConfigError
from probes.runs.option_rules import N_RESAMPLES, PATH, SEED, Rule, analysis_rules, shown
from probes.runs.toml_lines import KeyLines

__all__ = ["KINDS", "TABLES", "EXPERIMENT_RULES", "DATA_KEYS", "NAME", "check_experiment", "Locator"]

#: Analysis kinds -> (library function "module:name", the data role the kind runs on).
KINDS: dict[str, tuple[str, str]] = {
    "leaderboard": ("probes.runs.leaderboard:leaderboard", "treebank"),
    "baselines": ("probes.runs.leaderboard:leaderboard", "treebank"),
    "atlas": ("probes.runs.atlas:atlas", "treebank"),
    "coreference": ("probes.runs.coreference:coreference", "corpus"),
    "bridging": ("probes.runs.coreference:bridging", "corpus"),
    "probe": ("probes.runs.probing:probe", "train"),
    "importance": ("probes.runs.importance:importance", "treebank"),
    "prune": ("probes.runs.importance:prune", "treebank"),
    "match": ("probes.runs.match:match_models", "treebank"),
}
#: The tables of an experiment file.
TABLES = ("experiment", "models", "data", "train", "analyses")
#: The keys of ``[experiment]``: the run's name, texts and folder, and the cross-model report's options.
EXPERIMENT_RULES: dict[str, Rule] = {
    "name": Rule("text"), "title": Rule("text"), "description": Rule("string"), "out": PATH,
    "seed_questions": Rule("flag"), "n_resamples": N_RESAMPLES, "tolerance": Rule("number", 0, 1, below=True),
    "seed": SEED, "unit_reports": Rule("flag")}
#: The keys of a ``[data.NAME]`` table.
DATA_KEYS = ("treebank", "select_on", "corpus", "corpus_select_on", "train")
#: Names of models, data, analyses and experiments (they name folders).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NAME_RULE = ("letters, digits, '-', '_' or '.', starting with a letter or digit (it names folders)")
#: Keys of an analysis table that are not options of its function.
_ANALYSIS_KEYS = ("kind", "models", "data")


class Locator:
    """Errors at a key of one file: ``FILE:LINE: where: message``."""

    def __init__(self, path: str | Path, text: str) -> None:
        self.path = Path(path)
        self.lines = KeyLines(text)

    def fail(self, where: Sequence[str], message: str) -> ConfigError:
        """A ConfigError at the line of the key path ``where`` (named in the message when given)."""
        prefix = f"{'.'.join(where)}: " if where else ""
        return ConfigError(prefix + message, path=self.path, line=self.lines.line(*where) if where else None)

    def expect(self, where: Sequence[str], rule: Rule, value: Any) -> None:
        """Refuse ``value`` unless it follows ``rule`` (and the rule's own library check)."""
        if not rule.allows(value):
            raise self.fail(where, f"expected {rule.expected()}, found {rule.found(value)}")
        if rule.check is not None:
            try:
                rule.check(value)
            except ConfigError as exc:
                reason = exc.reason.removeprefix(f"{where[-1].replace('-', '_')}: ") if where else exc.reason
                raise self.fail(where, reason) from None

    def keys(self, where: Sequence[str], table: Mapping[str, Any], allowed: Sequence[str], what: str) -> None:
        """Refuse a key not in ``allowed`` (``-`` read as ``_``), or one given both with ``-`` and with ``_``."""
        seen: dict[str, str] = {}
        for key in table:
            name = key.replace("-", "_")
            if name not in allowed:
                raise self.fail((*where, key), f"unknown {what}; expected one of {', '.join(sorted(allowed))}")
            if name in seen:
                raise self.fail((*where, key), f"given twice (as {seen[name]!r} and {key!r})")
            seen[name] = key

    def table(self, raw: Mapping[str, Any], name: str, *, required: bool) -> Mapping[str, Any]:
        """The table ``[name]``; refused when it is not a table, or missing or empty when ``required``."""
        value = raw.get(name, {})
        if not isinstance(value, Mapping):
            raise self.fail((name,), f"expected a [{name}] table, found {shown(value)}")
        if required and not value:
            raise self.fail((), f"expected a [{name}] table with at least one entry, found none")
        return value

    def name(self, where: Sequence[str], name: str, what: str) -> None:
        if not NAME.match(name):
            raise self.fail(where, f"{what} name {name!r}: expected {_NAME_RULE}")


def _underscored(table: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """``{key with _: (key as written, value)}``."""
    return {k.replace("-", "_"): (k, v) for k, v in table.items()}


def _check_head(loc: Locator, raw: Mapping[str, Any]) -> None:
    head = loc.table(raw, "experiment", required=False)
    loc.keys(("experiment",), head, tuple(EXPERIMENT_RULES), "key")
    for name, (key, value) in _underscored(head).items():
        loc.expect(("experiment", key), EXPERIMENT_RULES[name], value)
        if name == "name":
            loc.name(("experiment", key), value, "experiment")


def _check_models(loc: Locator, raw: Mapping[str, Any], *, required: bool = True) -> None:
    for name, spec in loc.table(raw, "models", required=required).items():
        loc.name(("models", name), name, "model")
        if not isinstance(spec, str) or not spec:
            raise loc.fail(("models", name), "expected a model name (a folder, package:NAME, a hub name or "
                                             f"random-init:BASE@SEED), found {shown(spec)}")


def _check_data(loc: Locator, raw: Mapping[str, Any]) -> None:
    for name, entry in loc.table(raw, "data", required=True).items():
        where = ("data", name)
        loc.name(where, name, "data")
        if not isinstance(entry, Mapping):
            raise loc.fail(where, f"expected a table [data.{name}] with keys {', '.join(DATA_KEYS)}, "
                                  f"found {shown(entry)}")
        loc.keys(where, entry, DATA_KEYS, "key")
        for key, value in entry.items():
            places = [value] if isinstance(value, str) else value
            if not isinstance(places, list) or not places or not all(isinstance(v, str) and v for v in places):
                raise loc.fail((*where, key), "expected a file or treebank name, or a non-empty list of them (the "
                                              f"first that exists winning), found {shown(value)}")
        given = _underscored(entry)
        if "treebank" not in given and "corpus" not in given:
            raise loc.fail(where, "expected a treebank or a corpus, found "
                                  f"{', '.join(entry) if entry else 'no keys'}")


def _names(loc: Locator, where: Sequence[str], value: Any, known: Sequence[str], what: str,
           lab: Mapping[str, Any] | None = None) -> list[str]:
    """The names an analysis' ``models`` / ``data`` key gives: one name or a non-empty list of distinct ones,
    each defined in the file (models: selectors expanded, :func:`probes.runs.experiment_lab.select_models`)."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(v, str) for v in names):
        raise loc.fail(where, f"expected a {what} name or a non-empty list of them, found {shown(value)}")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise loc.fail(where, f"{what} {twice!r} is named twice")
    if lab is not None:
        from probes.runs.experiment_lab import select_models

        try:
            names = select_models(names, [k for k in known if k not in lab], lab)
        except ConfigError as exc:
            raise loc.fail(where, exc.reason) from None
    for name in names:
        if name not in known:
            raise loc.fail(where, f"unknown {what} {name!r}; expected one of {', '.join(known)}")
    return names


def _check_analysis(loc: Locator, name: str, entry: Any, models: Sequence[str], data: Mapping[str, Any],
                    lab: Mapping[str, Any]) -> None:
    where = ("analyses", name)
    loc.name(where, name, "analysis")
    if name == "train":
        raise loc.fail(where, "analysis name 'train' is taken by the training units (results/train/); name it "
                              "otherwise")
    if not isinstance(entry, Mapping):
        raise loc.fail(where, f"expected a table [analyses.{name}], found {shown(entry)}")
    given = _underscored(entry)
    key, kind = given.get("kind", (None, name))
    if not isinstance(kind, str) or kind not in KINDS:
        raise loc.fail((*where, key or "kind"), f"expected a kind, one of {', '.join(KINDS)}, found {shown(kind)}")
    from probes.runs.experiment_match import MATCH_KEYS, check_match, match_rules

    rules = match_rules() if kind == "match" else analysis_rules(kind)
    loc.keys(where, entry, (*_ANALYSIS_KEYS, *rules, *(MATCH_KEYS if kind == "match" else ())), f"option for {kind}")
    chosen = list(models)
    if "models" in given:
        chosen = _names(loc, (*where, given["models"][0]), given["models"][1], models, "model", lab)
    if kind == "match":
        check_match(loc.fail, where, given, chosen, models, lab)
    role = KINDS[kind][1]
    fitting = [d for d, table in data.items() if _serves(table, role)]
    if "data" in given:
        for d in _names(loc, (*where, given["data"][0]), given["data"][1], list(data), "data"):
            if d not in fitting:
                raise loc.fail((*where, given["data"][0]), f"data {d!r} has no {role} (a {kind} runs on one)")
    elif not fitting:
        raise loc.fail(where, f"no data to run on: a {kind} needs a dataset with a {role}, and "
                              f"{', '.join(data)} {'has' if len(data) == 1 else 'have'} none")
    for option, (key, value) in given.items():
        if option not in _ANALYSIS_KEYS and option in rules:
            loc.expect((*where, key), rules[option], value)


def _serves(table: Mapping[str, Any], role: str) -> bool:
    """Whether a data table holds what a kind runs on (a treebank serves as a coreference corpus)."""
    keys = {k.replace("-", "_") for k in table}
    return bool(keys & {"corpus", "treebank"}) if role == "corpus" else role in keys


def check_experiment(path: str | Path, text: str, raw: Mapping[str, Any]) -> None:
    """Check the experiment file ``path`` (its ``text`` and the tables tomllib read from it) against the schema.

    Raises:
        ConfigError: the first value, key, table or name that breaks it, at its line.
    """
    loc = Locator(path, text)
    unknown = [k for k in raw if k not in TABLES]
    if unknown:
        raise loc.fail((unknown[0],), f"unknown table; expected {', '.join(TABLES)}")
    _check_head(loc, raw)
    from probes.runs.experiment_lab import check_train

    lab = check_train(loc.fail, raw, NAME)  # the models [train] adds: [models] may then be empty
    _check_models(loc, raw, required=not lab)
    _check_data(loc, raw)
    models = list(loc.table(raw, "models", required=not lab))
    for name in lab:
        if name in models:
            raise loc.fail(("models", name), f"model name {name!r} is taken by a training unit of [train]")
    models += list(lab)
    data = dict(loc.table(raw, "data", required=True))
    for name, entry in loc.table(raw, "analyses", required=True).items():
        _check_analysis(loc, name, entry, models, data, lab)
