"""Experiment files: a command's options in TOML.

A config file holds the long option names of one command (``treebank``, ``select-on``
or ``select_on`` ...) with TOML values; options given on the command line win over the
file. Relative paths are read from the current directory, exactly as on the command
line. Unknown keys are errors that name the file, the line and the key, so a typo never
silently falls back to a default. The file is read by :mod:`probes.safe_read`: a device, a pipe, a huge file, a
file that is not UTF-8 or TOML nested thousands deep is one ConfigError naming the file.

Model names (``package:NAME`` ...) are resolved by :mod:`probes.extraction.loading`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from probes.errors import ConfigError, FormatError, InputError
from probes.reports.names import check_path
from probes.safe_read import loads_toml, read_text

__all__ = ["load_config", "read_toml", "config_line", "MAX_CONFIG_BYTES"]

#: The largest experiment or config file read (1 MiB: the largest shipped one holds a few KB).
MAX_CONFIG_BYTES = 1 << 20


def config_line(text: str, key: str, section: str | None = None) -> int | None:
    """1-based line where ``key`` is assigned in the config file ``text`` (in its ``[section]`` table when the file
    has one, as :func:`load_config` reads it); None if not found."""
    from probes.runs.toml_lines import KeyLines

    lines = KeyLines(text)
    inside = lines.line(section, key) if section is not None else None
    return inside if inside is not None else lines.line(key)


def read_toml(path: Path, what: str) -> tuple[str, dict[str, Any]]:
    """``(text, table)`` of the TOML file ``path`` (an experiment or config file, read by :mod:`probes.safe_read`:
    a regular file of at most :data:`MAX_CONFIG_BYTES`, UTF-8, nested at most ``MAX_DEPTH`` deep); else one
    ConfigError naming ``what``, the file and, where known, the line."""
    check_path(str(path), what="a file path", name=f"the {what}")
    try:
        text = read_text(path, limit=MAX_CONFIG_BYTES, what="a TOML file")
        return text, loads_toml(text, path=path, what="TOML")
    except FormatError as exc:  # not UTF-8, not TOML, nested too deep: the reason says which
        reason = exc.reason.replace("found invalid TOML: ", "found a syntax error: ", 1)
        raise ConfigError(reason, path=path, line=exc.line or _toml_line(reason)) from None
    except InputError as exc:  # missing, a folder, a device or a pipe, too large
        raise ConfigError(f"cannot read the {what}: {exc.reason}", path=path) from None


def _toml_line(reason: str) -> int | None:
    """The line tomllib names in its message (``... (at line 3, column 5)``), if any."""
    match = re.search(r"\(at line (\d+), column \d+\)", reason)
    return int(match.group(1)) if match else None


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
