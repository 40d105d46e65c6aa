"""The extractor's option checks, run before anything loads so a bad option costs no loading time.

:func:`check_options` checks every constructor option that needs no model; :func:`check_device` turns a
device name into a torch device this machine has; :func:`check_index` checks kept layers or heads against
the model's count once it is known.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from probes.errors import ConfigError
from probes.extraction.align import FROM_POOLS
from probes.extraction.budget import DEFAULT_ATTENTION_MB

__all__ = ["ON_LONG", "DTYPES", "CHECKED_OPTIONS", "check_options", "check_device", "check_index"]

ON_LONG: tuple[str, ...] = ("skip", "truncate", "window")
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16,
                                  "bfloat16": torch.bfloat16}

#: The constructor options :func:`check_options` checks.
CHECKED_OPTIONS: tuple[str, ...] = ("device", "dtype", "batch_size", "from_pool", "max_length", "on_long",
                                    "max_batch_tokens", "max_attention_mb")


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
                  from_pool: str = "mean", max_length: int | None = None, on_long: str = "skip",
                  max_batch_tokens: int | None = None,
                  max_attention_mb: float | None = DEFAULT_ATTENTION_MB) -> torch.device:
    """Check an extractor's options without loading anything; returns the device to use.

    :meth:`AttentionExtractor.from_pretrained` calls it before the model loads, so a bad option
    costs no loading time.

    Raises:
        ConfigError: the first bad option, named.
    """
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, found {dtype!r}")
    if from_pool not in FROM_POOLS:
        raise ConfigError(f"from_pool must be one of {', '.join(FROM_POOLS)}, found {from_pool!r}")
    if on_long not in ON_LONG:
        raise ConfigError(f"on_long must be one of {', '.join(ON_LONG)} (--on-long), found {on_long!r}")
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
    if max_attention_mb is not None and (isinstance(max_attention_mb, bool) or
                                         not isinstance(max_attention_mb, numbers.Real) or
                                         not math.isfinite(max_attention_mb) or max_attention_mb <= 0):
        raise ConfigError(f"max_attention_mb must be a number of MB > 0 (--max-attention-mb): expected a positive "
                          f"number of MB, found {max_attention_mb!r}; it bounds the attention held at once "
                          f"(default {DEFAULT_ATTENTION_MB:g})")
    return check_device(device)


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
