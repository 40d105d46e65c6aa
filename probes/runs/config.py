"""Experiment files: a command's options in TOML.

A config file holds the long option names of one command (``treebank``, ``select-on``
or ``select_on`` ...) with TOML values; options given on the command line win over the
file. Relative paths are read from the current directory, exactly as on the command
line. Unknown keys are errors that name the file, the line and the key, so a typo never
silently falls back to a default.

Model names (``package:NAME`` ...) are resolved by :mod:`probes.extraction.loading`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from probes.errors import ConfigError

__all__ = ["load_config", "read_toml", "config_line"]


def config_line(text: str, key: str, section: str | None = None) -> int | None:
    """1-based line where ``key`` is assigned in the config file ``text`` (in its ``[section]`` table when the file
    has one, as :func:`load_config` reads it); None if not found."""
    from probes.runs.toml_lines import KeyLines

    lines = KeyLines(text)
    inside = lines.line(section, key) if section is not None else None
    return inside if inside is not None else lines.line(key)


def read_toml(path: Path, what: str) -> tuple[str, dict[str, Any]]:
    """``(text, table)`` of the TOML file ``path``; ConfigError (naming ``what``, the file and the line) when it
    cannot be read or is not TOML."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} ({exc.strerror or exc})", path=path) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"expected TOML, found a syntax error ({exc})", path=path,
                          line=getattr(exc, "lineno", None)) from None


def load_config(path: str | Path, allowed: Iterable[str], *, section: str | None = None) -> dict[str, Any]:
    """Options from the TOML file ``path``, keyed by parameter name (``select-on`` -> ``select_on``).

    Args:
        path: the TOML file.
        allowed: parameter names the command accepts (underscored).
        section: if the file has a table of this name (e.g. ``[leaderboard]``), read that table;
            otherwise the top level.

    Raises:
        ConfigError: the file is missing or not TOML, or holds a key the command does not know.
    """
    path = Path(path)
    text, data = read_toml(path, "config file")
    if section is not None and isinstance(data.get(section), Mapping):
        data = dict(data[section])
    allowed = set(allowed)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in allowed:
            known = ", ".join(sorted(k.replace("_", "-") for k in allowed))
            raise ConfigError(f"unknown key {key!r}; expected one of: {known}", path=path,
                              line=config_line(text, key, section))
        if name in out:
            raise ConfigError(f"key {key!r} is given twice (with dashes and with underscores)", path=path,
                              line=config_line(text, key, section))
        out[name] = value
    return out
