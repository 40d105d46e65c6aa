"""The rules every option value follows, wherever it is given: on the command line or in an experiment file.

One :class:`Rule` per option (a whole number and its range, a number and its range, true/false, one of some
names, a list ...). The command line takes its bounds from here (:mod:`probes.cli.options`, and a test checks
every command's bounds against :func:`analysis_rules`), and :mod:`probes.runs.experiment_schema` checks an
experiment file's values against the same rules before any work, so a value the command line refuses is
refused in a file too, with the file and the line.

Importing this module imports no torch (the CLI parses its options with it); the names an option may take are
read from the library's own tables when :func:`analysis_rules` is first called.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from probes.reports.names import control_character

__all__ = ["Rule", "MAX_COUNT", "MAX_RESAMPLES", "MAX_BATCH", "MAX_TOKENS", "MAX_SEEDS", "MAX_SEQUENCES",
           "MAX_ATTENTION_MB", "ON_LONG", "COUNT", "LIMIT", "BATCH_SIZE", "MIN_COUNT", "MAX_BATCH_TOKENS",
           "N_RESAMPLES", "SEED", "SEEDS", "TOKENS", "SEQUENCES", "PATH", "analysis_rules", "shown"]

#: The largest count an option takes that caps or counts what is read or run (sentences, steps, epochs ...): far
#: above any real run, and below what the standard library and numpy take as a size (``itertools.islice`` refuses
#: more than ``sys.maxsize``), so a huge value is one clear error instead of an internal one deep in the run.
#: Counts that size an allocation before any data is read have the tighter bounds below.
MAX_COUNT = 1_000_000_000
#: The most bootstrap resamples: each draws a ``(resamples, sentences)`` weight matrix, so 10^5 (a hundred times
#: the default 1000, far past where percentile intervals stop changing) is about 80 MB per 100 sentences.
MAX_RESAMPLES = 100_000
#: The most sentences (inputs, training blocks) in one batch.
MAX_BATCH = 65_536
#: The most tokens of one input, window or forward pass (2^24: above every model's context).
MAX_TOKENS = 1 << 24
#: The most seeds of one run (prune's random orders, a probe's seeds): each is a whole run of its own.
MAX_SEEDS = 1000
#: The most repeated random sequences of the head-type scores (all drawn before the model runs).
MAX_SEQUENCES = 10_000
#: The largest ``--max-attention-mb`` (a petabyte: no bound a machine reaches, but a finite one).
MAX_ATTENTION_MB = 1e9
#: What the extractor does with inputs over the model's maximum (its ``ON_LONG``, repeated here so that no torch
#: import is needed; a test keeps the two equal).
ON_LONG: tuple[str, ...] = ("skip", "truncate", "window")


@dataclass(frozen=True)
class Rule:
    """What one option's value must be.

    Attributes:
        kind: ``count`` (a whole number), ``number`` (a finite real), ``flag`` (true or false), ``text`` (a
            non-empty string), ``string`` (any string), ``path`` (a non-empty string with no NUL or other
            control character), ``choice`` (one of ``choices``), ``texts`` (a list of strings; of ``choices``
            when given), ``counts`` (a list of whole numbers), ``flag-or-choice`` (true, false or one of
            ``choices``).
        least, most: the range of a count or number (of each element of ``counts``); None: unbounded.
        below: ``most`` itself is excluded (``[least, most)``).
        choices: the names a ``choice``, ``texts`` or ``flag-or-choice`` may take (empty: any).
        check: the library's own check of a value that follows the rule (it raises ConfigError), for what a
            rule cannot say (which extra analyses a leaderboard can run ...).
    """

    kind: str
    least: float | None = None
    most: float | None = None
    below: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any], object] | None = None

    def expected(self) -> str:
        """What the rule asks for, as an error message says it (``a whole number from 1 to 1000000000``)."""
        names = ", ".join(self.choices)
        return {"count": f"a whole number{self._range()}", "number": f"a number{self._range()}",
                "flag": "true or false", "text": "a non-empty string", "string": "a string",
                "path": "a non-empty string",
                "choice": f"one of {names}",
                "texts": f"a list of names from {names}" if self.choices else "a list of strings",
                "counts": f"a list of whole numbers{self._range()}",
                "flag-or-choice": f"true, false or one of {names}"}[self.kind]

    def found(self, value: Any) -> str:
        """What an error message says was found instead (``"twenty"``; for a path, its control character)."""
        bad = control_character(value) if self.kind == "path" and isinstance(value, str) else None
        return shown(value) if bad is None else f"{bad} in {shown(value)} (a path holds none)"

    def _range(self) -> str:
        if self.least is None and self.most is None:
            return ""
        if self.most is None:
            return f" >= {_number(self.least)}"
        if self.least is None:
            return f" {'<' if self.below else '<='} {_number(self.most)}"
        if self.kind in ("count", "counts") and not self.below:
            return f" from {_number(self.least)} to {_number(self.most)}"
        return f" in [{_number(self.least)}, {_number(self.most)}{')' if self.below else ']'}"

    def allows(self, value: Any) -> bool:
        """Whether ``value`` follows the rule (bool is never a number here: ``true`` is not 1)."""
        if self.kind == "count":
            return _is_count(value) and self._in_range(value)
        if self.kind == "number":
            return (_is_real(value) and math.isfinite(value)) and self._in_range(value)
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind in ("text", "string"):
            return isinstance(value, str) and (bool(value) or self.kind == "string")
        if self.kind == "path":
            return isinstance(value, str) and bool(value) and control_character(value) is None
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "texts":
            return isinstance(value, list) and all(
                isinstance(v, str) and v and (not self.choices or v in self.choices) for v in value)
        if self.kind == "counts":
            return isinstance(value, list) and all(_is_count(v) and self._in_range(v) for v in value)
        if self.kind == "flag-or-choice":
            return isinstance(value, bool) or (isinstance(value, str) and value in self.choices)
        raise ValueError(f"unknown rule kind {self.kind!r}")

    def _in_range(self, value: float) -> bool:
        if self.least is not None and value < self.least:
            return False
        return self.most is None or (value < self.most if self.below else value <= self.most)


def _is_count(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _number(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else str(value)


def shown(value: Any, *, width: int = 60) -> str:
    """``value`` as TOML writes it (``"twenty"``, ``-5``, ``true``, ``[1, "a"]``), shortened past ``width``."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    elif isinstance(value, list):
        text = "[" + ", ".join(shown(v, width=width) for v in value) + "]"
    elif isinstance(value, Mapping):
        text = "{" + ", ".join(f"{k} = {shown(v, width=width)}" for k, v in value.items()) + "}"
    elif isinstance(value, float) and not math.isfinite(value):
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    else:
        text = str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


#: Options with the same rule in every command (the CLI's option helpers take their bounds from these).
COUNT = Rule("count", 1, MAX_COUNT)
LIMIT = COUNT
BATCH_SIZE = Rule("count", 1, MAX_BATCH)
MIN_COUNT = COUNT
N_RESAMPLES = Rule("count", 1, MAX_RESAMPLES)
MAX_BATCH_TOKENS = Rule("count", 16, MAX_TOKENS)
#: Tokens of a window or an input (``window``, ``stride``, ``--max-length``).
TOKENS = Rule("count", 1, MAX_TOKENS)
#: A random seed: what numpy and torch both take.
SEED = Rule("count", 0, 2**32 - 1)
#: How many seeds a run takes (a probe's ``seeds``).
SEEDS = Rule("count", 1, MAX_SEEDS)
#: Repeated random sequences of the head-type scores (0: none).
SEQUENCES = Rule("count", 0, MAX_SEQUENCES)
#: A file or folder named in an experiment file (``out``).
PATH = Rule("path")
_TEXT = Rule("text")
_FLAG = Rule("flag")
_TEXTS = Rule("texts")


def _extraction_rules() -> dict[str, Rule]:
    """The options every kind that runs the extractor by name shares (``attention_source``: what the maps hold,
    :data:`probes.extraction.sources.SOURCES`; the experiment hands it to the run function as its
    ``extraction``)."""
    from probes.extraction.sources import SOURCES

    return {"batch_size": BATCH_SIZE, "device": _TEXT, "on_long": Rule("choice", choices=ON_LONG),
            "limit": LIMIT, "attention_source": Rule("choice", choices=SOURCES)}


def _coreference_rules(kind: str) -> dict[str, Rule]:
    from probes.analysis.bridging import CREDITS
    from probes.analysis.coreference import ANTECEDENT_SCOPES, CANDIDATE_SETS, SINGLETONS, SPLIT_ANTECEDENTS
    from probes.analysis.mentions import COREF_DIRECTIONS

    rules = {**_extraction_rules(), "window": TOKENS, "stride": TOKENS, "revision": _TEXT, "n_resamples": N_RESAMPLES,
             "direction": Rule("choice", choices=COREF_DIRECTIONS)}
    if kind == "bridging":
        return {**rules, "credit": Rule("choice", choices=CREDITS), "min_links": COUNT}
    return {**rules, "candidates": Rule("choice", choices=CANDIDATE_SETS),
            "antecedents": Rule("choice", choices=ANTECEDENT_SCOPES), "singletons": Rule("choice", choices=SINGLETONS),
            "split_antecedents": Rule("choice", choices=SPLIT_ANTECEDENTS)}


def _importance_rules(kind: str) -> dict[str, Rule]:
    from probes.extraction.interventions import ABLATIONS
    from probes.importance.objectives import OBJECTIVES
    from probes.runs.importance import ON_LONG as WHOLE
    from probes.runs.importance import SCORE_ORDERS

    rules = {"objective": Rule("choice", choices=OBJECTIVES), "ablation": Rule("choice", choices=ABLATIONS),
             "max_batch_tokens": MAX_BATCH_TOKENS, "on_long": Rule("choice", choices=WHOLE), "device": _TEXT,
             "limit": LIMIT, "select_limit": LIMIT}
    if kind == "importance":
        return {**rules, "loo": _FLAG, "global_rescale": _FLAG, "n_resamples": N_RESAMPLES}
    return {**rules, "step": Rule("number", 0.01, 0.5), "importance": Rule("choice", choices=("iterative", "once")),
            "random_seeds": Rule("counts", 0, MAX_SEEDS), "orders": Rule("texts", choices=tuple(SCORE_ORDERS)),
            "one_per_layer": _FLAG, "leaderboard_at": Rule("number", 0.01, 0.99), "start_loo": _FLAG}


def _probe_rules() -> dict[str, Rule]:
    from probes.probing.controls import CONTROL_KINDS
    from probes.runs.probing import PROBE_KINDS

    return {**_extraction_rules(), "kinds": Rule("texts", choices=(*PROBE_KINDS, "all")), "vectors": PATH,
            "epochs": COUNT, "control": Rule("flag-or-choice", choices=CONTROL_KINDS), "random_init": _FLAG,
            "max_train": COUNT, "max_eval": COUNT, "min_count": MIN_COUNT, "seed": SEED, "seeds": SEEDS}


@functools.cache
def analysis_rules(kind: str) -> Mapping[str, Rule]:
    """Every option an analysis of ``kind`` (an experiment kind: ``leaderboard``, ``atlas`` ...) may set, with its
    rule; the arguments the experiment fills in itself (model, data, progress ...) are not among them.

    Raises:
        KeyError: ``kind`` is not an analysis kind.
    """
    if kind in ("leaderboard", "baselines"):
        from probes.heads.intervals import UNITS
        from probes.runs.leaderboard import check_analyses

        rules = {**_extraction_rules(), "relations": _TEXTS, "min_count": MIN_COUNT, "exclude": _TEXTS,
                 "poss_rule": _FLAG, "preload_figures": _FLAG, "analyses": Rule("texts", check=check_analyses),
                 "interval_unit": Rule("choice", choices=UNITS)}
    elif kind == "atlas":
        rules = {**_extraction_rules(), "js_sentences": Rule("count", 2, MAX_COUNT), "js_items": _FLAG,
                 "clusters": COUNT, "counts": PATH, "word_level": _FLAG, "grad_sentences": Rule("count", 0, MAX_COUNT),
                 "head_type_sequences": SEQUENCES, "example": _TEXT}
    elif kind in ("coreference", "bridging"):
        rules = _coreference_rules(kind)
    elif kind == "probe":
        rules = _probe_rules()
    elif kind in ("importance", "prune"):
        rules = _importance_rules(kind)
    elif kind == "match":  # the pair and the null model come from the experiment's pairs and null
        rules = {**_extraction_rules(), "within_layers": _FLAG, "n_resamples": N_RESAMPLES, "min_count": MIN_COUNT}
    else:
        raise KeyError(kind)
    return dict(sorted(rules.items()))
