"""The cross-model comparison of an experiment and the answers to the five seed questions, from saved results.

A stage between :mod:`probes.importance` and :mod:`probes.reports`: it reads loaded result objects (duck-typed
leaderboards, atlases, pruning runs; it never imports :mod:`probes.runs`) and returns a
:class:`~probes.compare.types.Comparison` of frozen rows (:mod:`probes.compare.types`), which the experiment
report draws. One module per job:

* :mod:`~probes.compare.best_heads`: every leaderboard row of every model, on relative depth;
* :mod:`~probes.compare.kinds`: specialised, positional and broad heads per model;
* :mod:`~probes.compare.spread` (Q1): the spread of head-to-head JS distances and the number of clusters;
* :mod:`~probes.compare.specialisation` (Q2): held-out, corrected specialised heads;
* :mod:`~probes.compare.redundancy` (Q3): heads removable within a tolerance, and what importance tracks;
* :mod:`~probes.compare.consistency` (Q4): the same heads on two splits and on two corpora;
* :mod:`~probes.compare.layers` (Q5): patterns and roles per layer;
* :mod:`~probes.compare.tests`: the report's family of tests, Holm-corrected together;
* :mod:`~probes.compare.notes`: what the evidence cannot tell;
* :mod:`~probes.compare.comparison`: :func:`compare`, the entry point.

Layers and heads are 0-based in every row (reports print them 1-based); intervals are 95% percentile bootstrap
intervals (:mod:`probes.compare.stats`).
"""

from __future__ import annotations

from probes.compare.comparison import compare
from probes.compare.types import (
                                  TABLES,
                                  BestHead,
                                  Comparison,
                                  Consistency,
                                  Curve,
                                  HeadKinds,
                                  Histogram,
                                  LayerProfile,
                                  Redundancy,
                                  Specialisation,
                                  Spread,
                                  Test,
                                  Unit,
)

__all__ = ["compare", "Unit", "Comparison", "TABLES", "BestHead", "HeadKinds", "Spread", "Specialisation",
           "Consistency", "Redundancy", "LayerProfile", "Test", "Curve", "Histogram"]
