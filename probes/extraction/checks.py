"""The extractor's option checks, run before anything loads so a bad option costs no loading time.

:func:`check_options` checks every constructor option that needs no model, once, into an
:class:`ExtractorSettings` (the checked values the extractor is built from and never checks again);
:func:`check_device` turns a device name into a torch device this machine has; :func:`check_index` checks kept
layers or heads against the model's count once it is known.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from probes.errors import ConfigError
from probes.extraction.align import FROM_POOLS
from probes.extraction.budget import DEFAULT_ATTENTION_MB
from probes.extraction.sources import check_source_name

__all__ = ["ON_LONG", "DTYPES", "ExtractorSettings", "check_options", "check_device", "check_index"]

ON_LONG: tuple[str, ...] = ("skip", "truncate", "window")
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16,
                                  "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class ExtractorSettings:
    """An extractor's options once :func:`check_options` has checked them: what the extractor is built from.

    Made once, at the boundary (the extractor's constructor, ``from_pretrained``, a run function), and passed
    down as it is: nothing below checks it again. The attributes are
    :class:`~probes.extraction.extractor.AttentionExtractor`'s arguments (``device`` as the torch device to use;
    ``layers`` and ``heads`` as given: they are checked against the model once it is loaded), ``device_map``,
    checked (a JSON object given as text is a dict here), for loading, and ``source``, the attention source
    (:data:`probes.extraction.sources.SOURCES`; checked against the model's family once it is loaded).
    """

    device: torch.device
    dtype: str = "float32"
    batch_size: int = 32
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    from_pool: str = "mean"
    max_length: int | None = None
    on_long: str = "skip"
    progress: bool = True
    keep_tokens: bool = False
    max_batch_tokens: int | None = None
    max_attention_mb: float | None = DEFAULT_ATTENTION_MB
    selective: bool = True
    device_map: str | Mapping[str, Any] | None = None
    source: str = "weights"


def check_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a torch device (None: CUDA when available, else CPU), if this machine has it.

    Raises:
        ConfigError: not a device name, or a CUDA / MPS device this machine does not have.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"device: expected cpu, cuda, cuda:N or mps, found {device!r}") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device {device!r}: no CUDA GPU is available here (torch {torch.__version__}); "
                              "use device cpu")
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"device {device!r}: only {count} CUDA GPU(s) here (cuda:0..cuda:{count - 1})")
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError(f"device {device!r}: MPS is not available here; use device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device: expected cpu, cuda, cuda:N or mps, found {device!r}")
    return dev


def check_options(*, device: str | torch.device | None = None, dtype: str = "float32", batch_size: int = 32,
                  layers: Sequence[int] | None = None, heads: Sequence[int] | None = None, from_pool: str = "mean",
                  max_length: int | None = None, on_long: str = "skip", progress: bool = True,
                  keep_tokens: bool = False, max_batch_tokens: int | None = None,
                  max_attention_mb: float | None = DEFAULT_ATTENTION_MB, selective: bool = True,
                  device_map: str | Mapping[str, Any] | None = None, source: str = "weights") -> ExtractorSettings:
    """Check an extractor's options without loading anything, once: the checked :class:`ExtractorSettings`.

    The one check of every option (the constructor, :meth:`AttentionExtractor.from_pretrained` and the run
    functions all call it, before the model loads, so a bad option costs no loading time); ``device_map`` is
    checked by :func:`probes.extraction.loading.check_device_map`, and may not come with ``device``.

    Raises:
        ConfigError: the first bad option, named.
    """
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, found {dtype!r}")
    if from_pool not in FROM_POOLS:
        raise ConfigError(f"from_pool must be one of {', '.join(FROM_POOLS)}, found {from_pool!r}")
    if on_long not in ON_LONG:
        raise ConfigError(f"on_long must be one of {', '.join(ON_LONG)} (--on-long), found {on_long!r}")
    check_source_name(source)
    _check_counts(batch_size, max_length, max_batch_tokens)
    _check_budget(max_attention_mb)
    checked = check_device(device)
    return ExtractorSettings(
        device=checked, dtype=dtype, batch_size=int(batch_size), layers=None if layers is None else tuple(layers),
        heads=None if heads is None else tuple(heads), from_pool=from_pool,
        max_length=None if max_length is None else int(max_length), on_long=on_long, progress=bool(progress),
        keep_tokens=bool(keep_tokens), max_batch_tokens=None if max_batch_tokens is None else int(max_batch_tokens),
        max_attention_mb=None if max_attention_mb is None else float(max_attention_mb), selective=bool(selective),
        device_map=_checked_map(device, device_map), source=source)


def _check_counts(batch_size: int, max_length: int | None, max_batch_tokens: int | None) -> None:
    """The whole-number options: ``batch_size`` >= 1, ``max_length`` >= 2, ``max_batch_tokens`` >= 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ConfigError(f"batch_size must be a whole number >= 1, found {batch_size!r}")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral)
                                   or max_length < 2):
        raise ConfigError(f"max_length must be a whole number >= 2 (tokens, specials included), found "
                          f"{max_length!r}")
    if max_batch_tokens is not None and (isinstance(max_batch_tokens, bool) or
                                         not isinstance(max_batch_tokens, numbers.Integral) or max_batch_tokens < 1):
        raise ConfigError(f"max_batch_tokens must be a whole number >= 1 (--max-batch-tokens), found "
                          f"{max_batch_tokens!r}")


def _check_budget(max_attention_mb: float | None) -> None:
    """``max_attention_mb``: None or a finite number of MB > 0."""
    if max_attention_mb is not None and (isinstance(max_attention_mb, bool) or
                                         not isinstance(max_attention_mb, numbers.Real) or
                                         not math.isfinite(max_attention_mb) or max_attention_mb <= 0):
        raise ConfigError(f"max_attention_mb must be a number of MB > 0 (--max-attention-mb): expected a positive "
                          f"number of MB, found {max_attention_mb!r}; it bounds the attention held at once "
                          f"(default {DEFAULT_ATTENTION_MB:g})")


def _checked_map(device: str | torch.device | None, device_map: str | Mapping[str, Any] | None
                 ) -> str | Mapping[str, Any] | None:
    """``device_map`` checked (None stays None); refused with ``device``, since a device map places the model."""
    if device_map is None:
        return None
    if device is not None:
        raise ConfigError(f"give device or device_map, not both (found device {device!r} and "
                          f"device_map {device_map!r}): a device map places the model itself")
    from probes.extraction.loading import check_device_map  # accelerate's maps: only when one is given

    return check_device_map(device_map)


def check_index(name: str, values: Sequence[int] | None, size: int) -> tuple[int, ...]:
    """The 0-based ``layers`` or ``heads`` to keep (None: all ``size``), checked against the model's ``size``.

    Raises:
        ConfigError: an index out of range, a repeated one or none at all (the message also counts from 1).
    """
    if values is None:
        return tuple(range(size))
    out = tuple(int(v) for v in values)
    if not out or any(v < 0 or v >= size for v in out) or len(set(out)) != len(out):
        raise ConfigError(
            f"{name}: expected distinct 0-based indices in 0..{size - 1} (the model has {size}; "
            f"{name} {', '.join(str(v + 1) for v in values)} counted from 1), found {list(values)}")
    return out
