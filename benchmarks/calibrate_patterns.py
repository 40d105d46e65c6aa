"""Tune the Kovaleva pattern thresholds on the CALIBRATION half of the hand labels only (issue 12).

The maps labelled by eye (tests/fixtures/patterns/labels.json, maps.npz) are split by a fixed hash of
the map id (tests/analysis/test_patterns.py ``split_half``): half 0 tunes, half 1 is held out and only
scored by the test. This script never reads half 1's labels. It grid-searches the thresholds of
:class:`probes.analysis.patterns.Thresholds` for the best Cohen's kappa on half 0 (ties: the grid point
closest to the defaults) and prints it; copy the result into ``THRESHOLDS`` by hand.

    python benchmarks/calibrate_patterns.py
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import cohen_kappa_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "analysis"))
from test_patterns import labelled_maps, split_half  # noqa: E402

from probes.analysis.patterns import PATTERNS, THRESHOLDS, classify, map_features  # noqa: E402

GRID = {
    "vertical": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
    "diagonal": [0.2, 0.3, 0.4, 0.5],
    "both_vertical": [0.1, 0.2, 0.3, 0.4],
    "both_diagonal": [0.1, 0.15, 0.2, 0.25, 0.3],
    "vertical_punct": [False, True],
    "diagonal_self": [False, True],
}


def main() -> None:
    ids, truth, maps = labelled_maps()
    tune = [k for k, map_id in enumerate(ids) if split_half(map_id) == 0]
    truth_tune = [truth[k] for k in tune]
    features = [map_features(*maps[k]) for k in tune]
    stacked = {name: np.array([float(f[name]) for f in features]) for name in features[0]}
    base = cohen_kappa_score(truth_tune, [PATTERNS[c] for c in classify(stacked, THRESHOLDS)])
    print(f"calibration half: {len(tune)} maps; kappa with the current THRESHOLDS {base:.3f}")
    best: tuple[float, float, dict] = (-2.0, 0.0, {})
    for values in itertools.product(*GRID.values()):
        change = dict(zip(GRID, values))
        t = dataclasses.replace(THRESHOLDS, **change)
        kappa = cohen_kappa_score(truth_tune, [PATTERNS[c] for c in classify(stacked, t)])
        distance = -sum(abs(float(v) - float(getattr(THRESHOLDS, k))) for k, v in change.items())
        if (kappa, distance) > best[:2]:
            best = (kappa, distance, change)
    print(f"best kappa on the calibration half {best[0]:.3f} with {best[2]}")
    t = dataclasses.replace(THRESHOLDS, **best[2])
    predicted = [PATTERNS[c] for c in classify(stacked, t)]
    for name in PATTERNS:
        row = [sum(1 for a, b in zip(truth_tune, predicted) if a == name and b == other) for other in PATTERNS]
        print(f"{name:>18} {row}")


if __name__ == "__main__":
    main()
