"""Lazy module attributes: names whose modules are slow to import (torch, spaCy) load on first use."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that imports ``names[name]`` and returns its ``name``.

    The value is cached in the module's globals, so each name is imported once.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
