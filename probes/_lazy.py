"""Lazy module attributes: names whose modules are slow to import (torch, spaCy) load on first use."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(module: str, names: Mapping[str, str], *, submodules: bool = True) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that imports ``names[name]`` and returns its ``name``.

    A target ``"package.module:attr"`` gives that module's ``attr`` under the name asked for (an alias, such
    as ``probes.match`` for :func:`probes.runs.match.match_models`). With ``submodules`` (the default), a name
    that is not in ``names`` but is a submodule of ``module`` is imported on first use (``probes.runs.match``
    after a plain ``import probes``). The value is cached in the module's globals, so each name is imported once.
    """

    def __getattr__(name: str) -> Any:
        if name in names:
            target, _, attr = names[name].partition(":")
            value = getattr(importlib.import_module(target), attr or name)
        elif submodules and not name.startswith("_") and importlib.util.find_spec(f"{module}.{name}") is not None:
            value = importlib.import_module(f"{module}.{name}")
        else:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
