"""Head importance and pruning: run a model with heads gated, ablated or made uniform, and score them.

The second stage that runs a model (after ``extraction``, which reads attention): here the model runs
under the interventions of :mod:`probes.extraction.interventions`, and what is measured is how an
objective changes.

* ``batches``: sentences tokenized once into length-sorted batches (:class:`Batch`) with word maps.
* ``objectives``: what a change is measured on (:class:`Objective`): the language-model loss, the
  representation objective, a dependency-relation probe, or any callable.
* ``scores``: Michel et al. 2019's gradient importance and leave-one-out effects (:class:`ImportanceResult`).
* ``ablations``: many ablations in few passes (row blocks of one pass, layers below the ablation replayed),
  what leave-one-out runs on.
* ``pruning``: iterative pruning curves against random and annotation-based orders, and Michel's
  one-head-per-layer experiment (:class:`PruningResult`).

Layers and heads are 0-based here, 1-based (``layer-head``) in every table and figure.
"""
