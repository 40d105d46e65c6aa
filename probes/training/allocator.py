"""The C allocator's settings for a training process: keep each step's large blocks in the heap.

A training step allocates and frees the same large tensors (logits, activations, gradients) every time. glibc
serves a block above its *mmap threshold* by mapping fresh pages, which the kernel zeroes on first touch, and
adjusts that threshold as blocks are freed, so two processes running the same loop can settle on different
thresholds: measured here, the same kernels ran 5-10% slower in the ``Trainer``'s process than in a bare loop's
(``benchmarks/train.py``). :func:`keep_freed_memory` fixes the threshold high, so freed blocks are reused from
the heap. The benchmark applies it to both sides.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD"]

#: Blocks up to this size come from the heap (and stay there when freed) once :func:`keep_freed_memory` ran.
MMAP_THRESHOLD = 1 << 30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory(threshold: int = MMAP_THRESHOLD) -> str:
    """Set glibc's mmap and trim thresholds to ``threshold`` bytes for the rest of the process; what was done.

    Returns a line for the run record: the setting, or why nothing was changed (not Linux, not glibc).
    The cost: memory freed after training is kept by the process rather than given back to the system.
    """
    if not sys.platform.startswith("linux"):
        return f"unchanged ({sys.platform} has no glibc mallopt)"
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "unchanged (no glibc: another C library)"
    if mallopt(_M_MMAP_THRESHOLD, threshold) != 1 or mallopt(_M_TRIM_THRESHOLD, threshold) != 1:
        return f"unchanged (glibc refused an mmap threshold of {threshold} bytes)"
    return f"glibc mmap and trim thresholds fixed at {threshold} bytes (large blocks reused from the heap)"
