"""Options and help texts shared by the commands, so each is written (and reads) the same everywhere.

Each ``*_option`` returns a fresh ``typer.Option`` (use it as a parameter default); ``help``
and ``panel`` can be overridden where a command needs its own wording.

Every option sits in one panel of ``--help`` (:data:`PANELS`, shown in that order: a command's parameters are
declared in it, ``--config`` last); help texts are one short sentence, the detail is on the command's page of the
docs (docs/commands/). :func:`refuse_together` refuses two options that contradict each other while parsing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli._app import GENERAL_PANEL
from probes.corpora.formats import FORMAT_FILES
from probes.reports.writer import FIGURE_FORMATS
from probes.runs import option_rules
from probes.runs.extraction_options import DEFAULT_ATTENTION_MB, ExtractionOptions

__all__ = [
    "FILE_FORMATS", "DATA_HELP", "MODEL_HELP", "DEVICE_HELP", "split_list", "default_out", "apply_config",
    "model_option", "treebank_option", "select_on_option", "batch_size_option", "device_option", "out_option",
    "progress_option", "figures_option", "config_option", "min_count_option", "poss_rule_option",
    "ON_LONG", "FIGURE_FORMATS", "parse_indices", "layers_option", "heads_option", "limit_option",
    "on_long_option", "figure_format_option", "overwrite_option", "one_of", "DTYPES", "MAX_BATCH_TOKENS_HELP",
    "MAX_ATTENTION_MB", "max_batch_tokens_option", "max_attention_mb_option", "dtype_option", "device_map_option",
    "attention_source_option",
    "extraction", "MAX_COUNT", "path_parser", "text_parser", "rule_bounds",
    "n_resamples_option", "path_option", "PANELS", "DATA_PANEL", "MODEL_PANEL", "OUTPUT_PANEL", "ANALYSIS_PANEL",
    "TRAINING_PANEL", "EXTRACTION_PANEL", "GENERAL_PANEL", "refuse_together", "Contradiction", "choice_option", "given",
]

#: The panels of a command's options in ``--help``, in the order shown: the model and the data first, then where
#: the results go, what the command computes (or trains), how the model runs, and ``--config`` / ``--help``. A
#: command without a model calls its first panel "Data". tests/cli/test_cli_help.py checks every command.
MODEL_PANEL = "Model and data"
DATA_PANEL = "Data"
OUTPUT_PANEL = "Output"
ANALYSIS_PANEL = "Analysis"
TRAINING_PANEL = "Training"
EXTRACTION_PANEL = "Extraction (advanced)"
PANELS: tuple[str, ...] = (MODEL_PANEL, DATA_PANEL, OUTPUT_PANEL, ANALYSIS_PANEL, TRAINING_PANEL, EXTRACTION_PANEL,
                           GENERAL_PANEL)

#: ``.conllu / .conllx / .conll / .spacy / *_conll``, from the one formats table.
FILE_FORMATS = " / ".join(name for names in FORMAT_FILES.values() for name in names)
DATA_HELP = f"a {FILE_FORMATS} file, `ud:TREEBANK:SPLIT` or `sample:dev` / `sample:test`"
MODEL_HELP = "A model folder, `package:NAME`, a .gguf file or a hub name (see `probes models`)."
DEVICE_HELP = "cpu, cuda, cuda:1 ... (default: cuda if available)."
#: ``--on-long`` values (the extractor's ``ON_LONG``, from :mod:`probes.runs.option_rules`: no torch import).
ON_LONG = option_rules.ON_LONG
#: The largest count any option takes (:data:`probes.runs.option_rules.MAX_COUNT`): a larger one is one clear
#: usage error instead of an internal error deep in the run.
MAX_COUNT = option_rules.MAX_COUNT
ON_LONG_HELP = "Inputs longer than the model's maximum: skip, truncate or window (each one is named)."
LIMIT_HELP = "Read at most N sentences of each data split (default: all)."
#: ``--dtype`` values (the extractor's ``DTYPES``; kept here so parsing needs no torch import).
DTYPES = ("float32", "float16", "bfloat16")
MAX_BATCH_TOKENS_HELP = "Most padded tokens per forward pass"
#: The extractor's default ``max_attention_mb`` (from :mod:`probes.runs.extraction_options`: no torch import).
MAX_ATTENTION_MB = DEFAULT_ATTENTION_MB


def parse_indices(text: Optional[str], flag: str) -> Optional[list[int]]:
    """``"1,2,5-6"`` (1-based, as every output prints layers and heads) -> ``[0, 1, 4, 5]`` (0-based, as in code).

    Raises:
        ConfigError: a part that is not a number >= 1 or a range ``a-b`` with ``1 <= a <= b``.
    """
    from probes.errors import ConfigError

    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, _, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            first = last = 0
        if first < 1 or last < first:
            raise ConfigError(f"{flag} expects 1-based numbers or ranges like 1,3,5-6; found {part!r}")
        out += range(first - 1, last)
    return sorted(set(out))


def split_list(values: Optional[list[str]]) -> list[str]:
    """``--relations nsubj,obj --relations det`` -> ``[nsubj, obj, det]`` (blanks dropped)."""
    out: list[str] = []
    for value in values or []:
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out


def default_out(model: str, data: str, prefix: str = "") -> Path:
    """``runs/MODEL-DATA``: the last path part of each (``ud:`` specs whole), made file-name safe."""
    def clean(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", s if s.startswith("ud:") else Path(s.rstrip("/")).name)

    return Path("runs") / f"{prefix}{clean(model)}-{clean(data).removesuffix('.conllu')}"


def path_parser(flag: str, what: str = "a path") -> Any:
    """A ``parser=`` for a path option: the value as a Path, or a usage error naming ``flag`` when it holds a NUL
    or another control character (``--out: expected a folder path, found a NUL character``), before any file is
    touched (``os.stat`` raises ValueError on a NUL)."""
    def parse(value: Any) -> Optional[Path]:
        if value is None:
            return None
        return Path(_checked_text(value, flag, what))
    return parse


def text_parser(flag: str, what: str) -> Any:
    """A ``parser=`` for a text option that names a file or a model (``--model``, ``--treebank``): the text, or a
    usage error naming ``flag`` when it holds a NUL or another control character."""
    def parse(value: Any) -> Optional[str]:
        return None if value is None else _checked_text(value, flag, what)
    return parse


def _checked_text(value: Any, flag: str, what: str) -> str:
    """``value`` as text, checked by :func:`probes.reports.names.check_path` (a BadParameter when refused)."""
    from probes.errors import ConfigError
    from probes.reports.names import check_path

    try:
        return check_path(str(value) if isinstance(value, Path) else value, what=what, name=flag)
    except ConfigError as exc:
        raise typer.BadParameter(exc.reason.removeprefix(f"{flag}: ")) from None


def rule_bounds(rule: option_rules.Rule) -> dict[str, Any]:
    """``min`` and ``max`` of a typer option, from the rule an experiment file's value is checked against."""
    return {"min": rule.least, "max": rule.most}


def apply_config(ctx: typer.Context, value: Optional[Path]) -> Optional[Path]:
    """``--config FILE``: read it first (eager) and use it as the defaults of the other options."""
    if value is None or ctx.resilient_parsing:
        return value
    from probes.runs.config import load_config

    params = {p.name: p for p in ctx.command.params if p.name not in ("config", "help")}
    values = load_config(value, params, section=ctx.info_name)
    for name, item in values.items():  # lists in TOML, comma-separated text on the command line
        _check_config_value(ctx, params[name], value, item)
        if getattr(params[name], "multiple", False) and isinstance(item, str):
            values[name] = [item]
        elif not getattr(params[name], "multiple", False) and isinstance(item, list):
            values[name] = ",".join(map(str, item))
        _check_config_value(ctx, params[name], value, item, converted=values[name])
    ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


#: What a config file's value must be, by the option's Python type (TOML gives typed values).
_CONFIG_KINDS: dict[Any, tuple[str, tuple[type, ...]]] = {
    int: ("a whole number", (int,)), float: ("a number", (int, float)), bool: ("true or false", (bool,)),
    str: ("a string", (str,)), Path: ("a string (a path)", (str,))}


def _config_expected(param: Any, item: Any) -> str | None:
    """What ``item`` (a config file's TOML value) should have been for ``param``; None when its type fits.

    A flag takes only true/false and nothing else takes them (``batch-size = true`` is not 1); a text option
    also takes a list of strings (joined by commas, as on the command line)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if getattr(param, "is_flag", False):
        annotation = bool
    if getattr(param, "multiple", False) or annotation is str:
        ok = isinstance(item, str) or (isinstance(item, list) and all(isinstance(v, str) for v in item))
        return None if ok else "a string or a list of strings"
    if annotation not in _CONFIG_KINDS:
        return None  # left to the option's own conversion
    expected, kinds = _CONFIG_KINDS[annotation]
    ok = isinstance(item, kinds) and (annotation is bool or not isinstance(item, bool))
    return None if ok else expected


def _range_message(param: Any) -> str | None:
    """``expected a whole number from 1 to ...`` for a bounded numeric option (the rule's own words); else None."""
    from probes.runs.option_rules import Rule

    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if annotation not in (int, float) or (low is None and high is None):
        return None
    return f"expected {Rule('count' if annotation is int else 'number', low, high).expected()}"


def _check_config_value(ctx: typer.Context, param: Any, path: Path, item: Any, *, converted: Any = None) -> None:
    """Refuse a config file's value for ``param`` with the file and the line: first its TOML type, then (given
    the ``converted`` value) the option's own conversion, range and choices, as on the command line.

    Raises:
        ConfigError: ``FILE:LINE: KEY: expected ..., found ...`` (or the option's own message).
    """
    from probes.errors import ConfigError
    from probes.runs.config import config_line, read_toml
    from probes.runs.option_rules import shown

    flag = param.opts[0] if getattr(param, "opts", None) else f"--{param.name}"
    if converted is None:
        expected = _config_expected(param, item)
        if expected is None:
            return
        message = f"expected {expected} ({flag}), found {shown(item)}"
    else:
        try:
            param.process_value(ctx, converted)
            return
        except typer.BadParameter as exc:
            message = _range_message(param) or exc.message
            message += f" ({flag})" if "found" in message else f" ({flag}), found {shown(item)}"
    key = flag.lstrip("-")
    text, _ = read_toml(path, "config file")
    line = config_line(text, key, ctx.info_name) or config_line(text, param.name, ctx.info_name)
    raise ConfigError(f"{key}: {message}", path=path, line=line)


def config_option() -> Any:
    """``--config/-c FILE``: options from a TOML file (command line wins); in the last panel, beside ``--help``."""
    return typer.Option(None, "--config", "-c", is_eager=True, callback=apply_config, metavar="FILE",
                        parser=path_parser("--config", "a file path"), rich_help_panel=GENERAL_PANEL,
                        help="TOML file of options (keys: long option names); the command line wins.")


def model_option(default: Any = None, *, help: str = MODEL_HELP, panel: str = MODEL_PANEL) -> Any:
    """``--model/-m``: a model folder, ``package:NAME`` or hub name."""
    return typer.Option(default, "--model", "-m", help=help, rich_help_panel=panel, metavar="MODEL",
                        parser=text_parser("--model", "a model folder or name"))


def treebank_option(default: Any = None, *, help: str = f"Data to report on: {DATA_HELP}.",
                    panel: str = MODEL_PANEL) -> Any:
    """``--treebank/-t``: a treebank file or registry spec."""
    return typer.Option(default, "--treebank", "-t", help=help, rich_help_panel=panel, metavar="DATA",
                        parser=text_parser("--treebank", "a treebank file or name"))


def select_on_option(default: Any = None, *, help: str | None = None, panel: str = MODEL_PANEL) -> Any:
    """``--select-on``: the data heads are chosen on."""
    return typer.Option(default, "--select-on", rich_help_panel=panel, metavar="DATA|same",
                        parser=text_parser("--select-on", "a treebank file or name"), help=help or (
        "Choose heads on this data (held out), report on --treebank. Default: one half of --treebank; "
        "'same': the same data (optimistic)."))


def batch_size_option(default: int = 32, *, help: str = "Sentences per forward pass.",
                      panel: str = EXTRACTION_PANEL) -> Any:
    """``--batch-size``: items per forward pass."""
    rule = option_rules.BATCH_SIZE
    return typer.Option(default, "--batch-size", **rule_bounds(rule), metavar="N", help=help, rich_help_panel=panel)


def device_option(*, help: str = DEVICE_HELP, panel: str = MODEL_PANEL) -> Any:
    """``--device``: where the model runs."""
    return typer.Option(None, "--device", help=help, rich_help_panel=panel, metavar="DEVICE",
                        parser=text_parser("--device", "a device name"))


def out_option(default: Any = None, *, help: str = "Output folder (default `runs/MODEL-DATA`).") -> Any:
    """``--out/-o``: the output folder."""
    return path_option(default, "--out", "-o", what="a folder path", metavar="FOLDER", help=help,
                       rich_help_panel=OUTPUT_PANEL)


def path_option(default: Any, flag: str, *short: str, what: str = "a path", metavar: str = "PATH",
                **kwargs: Any) -> Any:
    """A path option (``--store``, ``--counts`` ...): its value refused while parsing when it holds a NUL or
    another control character (:func:`path_parser`)."""
    return typer.Option(default, flag, *short, metavar=metavar, parser=path_parser(flag, what), **kwargs)


def n_resamples_option(default: int = 1000, *, help: str = "Bootstrap resamples for the intervals.",
                       metavar: str = "N") -> Any:
    """``--n-resamples N``: bootstrap resamples (:data:`probes.runs.option_rules.N_RESAMPLES`: 1 to 100000)."""
    return typer.Option(default, "--n-resamples", **rule_bounds(option_rules.N_RESAMPLES), metavar=metavar,
                        help=help, rich_help_panel=ANALYSIS_PANEL)


def progress_option(default: bool = True, *, help: str = "Show progress bars on stderr.") -> Any:
    """``--progress/--no-progress``."""
    return typer.Option(default, "--progress/--no-progress", help=help, rich_help_panel=OUTPUT_PANEL, metavar="")


def figures_option(default: bool = True) -> Any:
    """``--figures/--no-figures``."""
    return typer.Option(default, "--figures/--no-figures", help="Write the figures.", rich_help_panel=OUTPUT_PANEL,
                        metavar="")


def min_count_option(default: int = 100) -> Any:
    """``--min-count``: least words for a relation to be listed."""
    rule = option_rules.MIN_COUNT
    return typer.Option(default, "--min-count", **rule_bounds(rule), metavar="N", rich_help_panel=ANALYSIS_PANEL,
                        help="Least words for a relation to be listed.")


def poss_rule_option() -> Any:
    """``--poss-rule/--no-poss-rule``: Clark et al.'s possessive rule."""
    return typer.Option(True, "--poss-rule/--no-poss-rule", rich_help_panel=ANALYSIS_PANEL, metavar="",
                        help="Score nmod:poss through the following 's (Clark et al.).")


def one_of(flag: str, choices: tuple[str, ...]) -> Any:
    """A callback that rejects a value outside ``choices`` while parsing (before any work)."""
    def check(value: Optional[str]) -> Optional[str]:
        if value is not None and value not in choices:
            raise typer.BadParameter(f"expected one of {', '.join(choices)}, found {value!r}", param_hint=flag)
        return value
    return check


def choice_option(default: str, flag: str, choices: tuple[str, ...], *, help: str, panel: str = ANALYSIS_PANEL,
                  metavar: str | None = None) -> Any:
    """An option taking one of ``choices`` (shown as its metavar unless ``metavar`` is given: then ``help`` names
    them), refused while parsing otherwise."""
    return typer.Option(default, flag, metavar=metavar or "|".join(choices), callback=one_of(flag, choices),
                        help=help, rich_help_panel=panel)


def limit_option(*, help: str = LIMIT_HELP, panel: str = MODEL_PANEL) -> Any:
    """``--limit N``: read at most N sentences (documents) of each data split."""
    rule = option_rules.LIMIT
    return typer.Option(None, "--limit", **rule_bounds(rule), metavar="N", help=help, rich_help_panel=panel)


def on_long_option(*, help: str = ON_LONG_HELP, panel: str = EXTRACTION_PANEL) -> Any:
    """``--on-long skip|truncate|window``: what the extractor does with inputs over the model's maximum."""
    return typer.Option("skip", "--on-long", metavar="skip|truncate|window", callback=one_of("--on-long", ON_LONG),
                        help=help, rich_help_panel=panel)


def figure_format_option() -> Any:
    """``--figure-format png|svg|pdf``: file format of the figures."""
    return typer.Option("png", "--figure-format", metavar="png|svg|pdf", rich_help_panel=OUTPUT_PANEL,
                        callback=one_of("--figure-format", FIGURE_FORMATS), help="File format of the figures.")


def overwrite_option() -> Any:
    """``--overwrite``: write into a non-empty output folder that is not a previous output of this command."""
    return typer.Option(False, "--overwrite", rich_help_panel=OUTPUT_PANEL, metavar="",
                        help="Write into --out even when it holds other files.")


def layers_option(panel: str = OUTPUT_PANEL) -> Any:
    """``--layers 1,5-6``: layers to keep, 1-based."""
    return typer.Option(None, "--layers", metavar="1,5-6", rich_help_panel=panel,
                        help="Layers to keep, 1-based (default all).")


def heads_option(panel: str = OUTPUT_PANEL) -> Any:
    """``--heads 1-4``: heads to keep, 1-based."""
    return typer.Option(None, "--heads", metavar="1-4", rich_help_panel=panel,
                        help="Heads to keep, 1-based (default all).")


def max_batch_tokens_option(default: Optional[int] = None, *, help: str | None = None,
                            panel: str = EXTRACTION_PANEL) -> Any:
    """``--max-batch-tokens N``: padded tokens per forward pass (importance, prune and every extracting command)."""
    tail = " (default: no bound)." if default is None else "."
    rule = option_rules.MAX_BATCH_TOKENS
    return typer.Option(default, "--max-batch-tokens", **rule_bounds(rule), metavar="N",
                        rich_help_panel=panel, help=help or f"{MAX_BATCH_TOKENS_HELP}{tail}")


def max_attention_mb_option(*, panel: str = EXTRACTION_PANEL) -> Any:
    """``--max-attention-mb MB``: the most attention the extractor and its queue hold at once."""
    return typer.Option(MAX_ATTENTION_MB, "--max-attention-mb", min=0.0, max=option_rules.MAX_ATTENTION_MB,
                        metavar="MB", rich_help_panel=panel,
                        help="Most attention held in memory at once, in MB (0 is refused).")


def dtype_option(*, panel: str = EXTRACTION_PANEL) -> Any:
    """``--dtype float32|float16|bfloat16``: the model's dtype (pooling is always float32)."""
    return typer.Option("float32", "--dtype", metavar="float32|float16|bfloat16", rich_help_panel=panel,
                        callback=one_of("--dtype", DTYPES), help="Model dtype (attention is pooled in float32).")


def attention_source_option(*, panel: str = EXTRACTION_PANEL) -> Any:
    """``--attention-source weights|norm|contribution|value-zeroing``: what the attention maps hold."""
    from probes.extraction.sources import SOURCES  # no torch import at module level there

    return typer.Option("weights", "--attention-source", metavar="|".join(SOURCES), rich_help_panel=panel,
                        callback=one_of("--attention-source", SOURCES),
                        help="What each head's map holds: weights, norm (what it moves), contribution (with the "
                             "LayerNorm) or value-zeroing (slow).")


def device_map_option(*, panel: str = EXTRACTION_PANEL) -> Any:
    """``--device-map auto``: spread a large model over devices (accelerate)."""
    return typer.Option(None, "--device-map", metavar="MAP", rich_help_panel=panel,
                        help="Spread a large model over devices: auto, balanced, sequential or JSON (needs "
                             "accelerate; leave --device out).")


class Contradiction(typer.BadParameter):
    """Two options that contradict each other: a usage error (exit 2) whose message is the line itself."""

    def format_message(self) -> str:
        return self.message


def refuse_together(ctx: typer.Context, *pairs: tuple[str, str]) -> None:
    """Refuse, as a usage error (exit 2) before any work, each pair of options given together that contradict
    each other: ``pairs`` of parameter names; an option counts as given when its value came from the command line or
    the ``--config`` file (a flag: when it is on).

    Raises:
        Contradiction: ``--store and --model cannot be used together``, naming the options by their long names.
    """
    chosen = {name for pair in pairs for name in pair if given(ctx, name)}
    for first, second in pairs:
        if first in chosen and second in chosen:
            raise Contradiction(f"{_flag(ctx, first)} and {_flag(ctx, second)} cannot be used together", ctx=ctx)


def given(ctx: typer.Context, name: str) -> bool:
    """Whether parameter ``name`` was set by the user: on the command line or in the ``--config`` file (a flag:
    to true; an optional value: to something)."""
    source = ctx.get_parameter_source(name)
    if getattr(source, "name", None) not in ("COMMANDLINE", "DEFAULT_MAP"):
        return False
    value = ctx.params.get(name)
    return value is not False and value is not None and value != [] and value != ()


def _flag(ctx: typer.Context, name: str) -> str:
    """The option of parameter ``name`` as the user writes it (its long name)."""
    param = next(p for p in ctx.command.params if p.name == name)
    return max(param.opts, key=len)


def extraction(dtype: str, max_batch_tokens: Optional[int], max_attention_mb: float,
               device_map: Optional[str], source: str = "weights") -> ExtractionOptions:
    """A command's ``--dtype``, ``--max-batch-tokens``, ``--max-attention-mb`` (``0`` is refused there),
    ``--device-map`` and ``--attention-source``, as the one ``extraction`` argument of its run function (checked
    there, once)."""
    return ExtractionOptions(dtype=dtype, max_batch_tokens=max_batch_tokens,
                             max_attention_mb=max_attention_mb, device_map=device_map, source=source)
