"""Statistics of probing runs: paired differences over sentences, and summaries over seeds.

* :func:`paired_difference`: the difference of two accuracies measured on the same sentences
  (a probe against its control task, one probe against another), with a **paired** percentile
  bootstrap interval (the same resampled sentences for both, 1000 resamples) and the paired
  ratio-estimator test of :func:`probes.heads.inference.paired_z`. With several seeds the
  per-sentence counts are averaged over seeds first, so the interval is that of the seed mean
  (sentence sampling); the spread over seeds is reported next to it as a standard deviation.
* :func:`mean_sd`: mean and sample standard deviation (``ddof=1``; 0 for one seed).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.heads.inference import p_from_z, paired_z
from probes.heads.intervals import bootstrap_ci

__all__ = ["N_RESAMPLES", "INTERVAL_NOTE", "paired_difference", "mean_sd", "align_units"]

#: Bootstrap resamples of every interval of a probing run.
N_RESAMPLES = 1000
#: One sentence for table notes.
INTERVAL_NOTE = ("95% percentile bootstrap intervals over sentences (1000 resamples; differences paired: "
                 "the same resampled sentences for both sides)")


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, sd)`` of per-seed values (sample sd, ``ddof=1``; 0.0 for a single value, NaN for none)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def paired_difference(
    correct_a: npt.ArrayLike,
    correct_b: npt.ArrayLike,
    total: npt.ArrayLike,
    *,
    n_resamples: int = N_RESAMPLES,
    random_state: int = 0,
) -> dict[str, float]:
    """``acc_a - acc_b`` on the same units, with a paired bootstrap interval and a paired test.

    Args:
        correct_a, correct_b: ``(n_units,)`` (or ``(n_seeds, n_units)``, averaged over seeds) correct
            counts per sentence of the two sides.
        total: ``(n_units,)`` scored words per sentence (the same for both sides).
        n_resamples, random_state: bootstrap draws (:func:`probes.heads.intervals.bootstrap_ci`).

    Returns:
        ``difference``, ``ci_low``, ``ci_high``, ``z``, ``p`` (two-sided, uncorrected) and ``n_units``.
    """
    a, b = (np.asarray(x, dtype=np.float64) for x in (correct_a, correct_b))
    a, b = (x.mean(axis=0) if x.ndim == 2 else x for x in (a, b))
    n = np.asarray(total, dtype=np.float64)
    if not (a.shape == b.shape == n.shape) or a.ndim != 1:
        raise ConfigError(f"paired_difference: expected equal (n_units,) arrays, found {a.shape}, {b.shape}, {n.shape}")
    out = {"difference": float("nan"), "ci_low": float("nan"), "ci_high": float("nan"), "z": float("nan"),
           "p": float("nan"), "n_units": int(n.size)}
    if n.sum() <= 0:
        return out
    out["difference"] = float((a - b).sum() / n.sum())
    low, high = bootstrap_ci(a - b, n, n_resamples=n_resamples, random_state=random_state)  # paired: one ratio
    z = float(paired_z((a - b)[:, None], n)[0])
    out.update(ci_low=float(low), ci_high=float(high), z=z, p=float(p_from_z(z)))
    return out


def align_units(ids_a: Sequence[str], ids_b: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Positions in ``ids_a`` and in ``ids_b`` of the unit ids both hold, in ``ids_a``'s order."""
    where_b = {k: i for i, k in enumerate(ids_b)}
    pairs = [(i, where_b[k]) for i, k in enumerate(ids_a) if k in where_b]
    ia = np.asarray([p[0] for p in pairs], dtype=np.int64)
    ib = np.asarray([p[1] for p in pairs], dtype=np.int64)
    return ia, ib
