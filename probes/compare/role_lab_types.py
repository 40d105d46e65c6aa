"""The role lab's comparison as data (issue 39, points 4, 5, 7, 8): the cells (:class:`LabCell`), one frozen row type
per table, and :class:`RoleLabComparison`, the Result that holds them (made by :func:`probes.compare.role_lab.role_lab`).

Layers and heads are 0-based in every row (code); :meth:`RoleLabComparison.to_pandas` prints them 1-based (the
fields named in :data:`ONE_BASED`), as every table a person reads does. A step of ``-1`` (:data:`NOT_WITHIN`) means
"not within the steps looked at"; NaN means "not measured" (a model without a language-model head, a test that
needs more seeds than there are).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from probes.results import Result, require_pandas, saveable

__all__ = ["LabCell", "SymmetryRow", "GrowthSeedRow", "GrowthCellRow", "GrowthTestRow", "RoleSeedRow", "IdentityRow",
           "FunctionRow", "DistanceRow", "DistanceSummaryRow", "EnsembleRow", "EnsembleLayerRow", "CapacityRow",
           "RoleCapacityRow", "FormationRow", "FormationTestRow", "PretrainedRoleRow", "PretrainedEffectRow",
           "PretrainedFunctionRow", "RoleLabComparison", "TABLES", "ONE_BASED", "NOT_WITHIN", "CARRIER_THRESHOLD",
           "CARRIER_REASON", "EMPTY", "ALPHA", "EFFECT_MIN", "EFFECT_REASON", "TOP_HEADS", "PREVIOUS", "INDUCTION"]

#: A head carries a role when its score reaches this.
CARRIER_THRESHOLD = 0.5
#: Why :data:`CARRIER_THRESHOLD` is 0.5.
CARRIER_REASON = ("a role score is the head's mean attention on the role's ideal key; at 0.5 the head puts more "
                  "attention there than on every other key together, so it cannot also carry another role at that "
                  "level, while a uniform causal head over 64 tokens puts about 0.03 there")
#: The level every verdict of the comparison is read at (after Holm where a table holds several tests).
ALPHA = 0.05
#: A head "has an effect" (pretrained models) when ablating it alone costs at least this (nats per scored token).
EFFECT_MIN = 0.01
#: Why :data:`EFFECT_MIN` is 0.01 nats.
EFFECT_REASON = ("an ablation that costs under 0.01 nats per scored token changes the perplexity by under 1%; pairs "
                 "of such heads have no work to share or divide")
#: How many of a pretrained model's top induction heads get their single effect shown.
TOP_HEADS = 5
#: The standard role names read for the previous-token and the induction head.
PREVIOUS, INDUCTION = "std:previous_token", "std:induction"
#: The step recorded when something did not happen within the steps looked at.
NOT_WITHIN = -1
#: Row fields holding 0-based layers or heads (ints, tuples of ints, or None): printed 1-based by to_pandas.
ONE_BASED: tuple[str, ...] = ("layer", "head", "carriers", "top", "layers", "heads_with_effect_layers")


@saveable
@dataclass(frozen=True)
class LabCell:
    """One cell of the lab (or one pretrained model), as the comparison groups and selects models.

    Attributes:
        name: the cell (``[train.NAME]``; a pretrained model's own name).
        task: ``induction``, ``roles`` or ``text``.
        layers: layers of each model.
        heads: heads per layer (a literal ensemble: the total over its members).
        members: 1, or ``N`` for a literal ensemble of ``N`` models.
        init: the initialisation's canonical text (``independent``, ``identical``, ``identical+noise:0.01`` ...;
            ``pretrained`` for a pretrained model).
        noise: the noise size of ``identical+noise:S`` (None otherwise).
        attention_dropout: the per-head attention dropout of training.
        seeds: the cell's seeds.
        task_roles: the task's own roles (not the ``std:`` types).
        kind: ``lab`` (trained here) or ``pretrained``.
    """

    name: str
    task: str
    layers: int
    heads: int
    members: int
    init: str
    noise: float | None
    attention_dropout: float
    seeds: tuple[int, ...]
    task_roles: tuple[str, ...]
    kind: str = "lab"


@saveable
@dataclass(frozen=True)
class SymmetryRow:
    """(a) One cell: the largest parameter and attention distance between two heads of any layer, over every seed,
    every checkpoint (``n_checkpoints``) and every early step (``n_steps``: steps ``0..K`` measured in memory; 0 when
    not measured); ``stays_identical`` when both are exactly 0."""

    cell: str
    task: str
    init: str
    attention_dropout: float
    heads: int
    n_seeds: int
    n_checkpoints: int
    n_steps: int
    max_param: float
    max_attention: float
    stays_identical: bool
    starts_identical: bool


@saveable
@dataclass(frozen=True)
class GrowthSeedRow:
    """(a) One noise cell, layer, distance (``param`` or ``attention``) and seed: the peak growth rate of the log
    excess distance (per step), its doubling time (steps), the window it was fitted on (first and last step), the
    fit's R² and the onset step (:mod:`probes.compare.growth`)."""

    cell: str
    noise: float
    layer: int
    distance: str
    seed: int
    rate: float
    doubling: float
    window_start: int
    window_end: int
    r2: float
    onset: int


@saveable
@dataclass(frozen=True)
class GrowthCellRow:
    """(a) One noise cell, layer and distance over its seeds: mean peak rate with its range (min, max), the doubling
    time of the mean rate, the smallest R² and the mean onset step."""

    cell: str
    noise: float
    layer: int
    distance: str
    n_seeds: int
    rate: float
    rate_low: float
    rate_high: float
    doubling: float
    r2_min: float
    onset: float


@saveable
@dataclass(frozen=True)
class GrowthTestRow:
    """(a) Does the peak rate depend on the noise size? Cell ``a`` (larger noise) against cell ``b`` in one layer and
    distance: the mean rates, their difference and its p (:func:`probes.compare.growth.rate_difference_test` over
    the seeds), Holm over the table; the mean onsets."""

    cell_a: str
    cell_b: str
    noise_a: float
    noise_b: float
    layer: int
    distance: str
    n_a: int
    n_b: int
    rate_a: float
    rate_b: float
    difference: float
    p: float
    p_holm: float
    onset_a: float
    onset_b: float


@saveable
@dataclass(frozen=True)
class RoleSeedRow:
    """(b) One cell, seed, layer and role at the last step: the heads whose score reaches the threshold
    (``carriers``, best first), the best head (``top``, None without a carrier) and its score, and each carrier's
    single-ablation effect (nats; empty without tests of function)."""

    cell: str
    seed: int
    layer: int
    role: str
    heads: int
    n_carriers: int
    carriers: tuple[int, ...]
    top: int | None
    top_score: float
    effects: tuple[float, ...]


@saveable
@dataclass(frozen=True)
class IdentityRow:
    """(b) Across the seeds of a cell: do a layer's top carriers of a role keep their index? ``kept`` of ``pairs``
    pairs of seeds (seeds with a carrier) share it, against ``chance`` = 1/H: ``p`` by the exact binomial test over
    pairs (:func:`probes.compare.fair_tests.identity_test`, one-sided greater), ``p_exact`` by exact enumeration of
    independent uniform indices per seed (pairs share seeds: the binomial treats them as independent), Holm of
    ``p_exact`` over the table."""

    cell: str
    layer: int
    role: str
    heads: int
    n_seeds: int
    seeds_with_carrier: int
    pairs: int
    kept: int
    chance: float
    p: float
    p_exact: float
    p_holm: float
    verdict: str


@saveable
@dataclass(frozen=True)
class FunctionRow:
    """(c) One cell and layer: single effects per head (mean over seeds), the within-layer pairs' mean interaction
    (joint minus the sum of singles, nats), the relative interaction (per seed, the sum of the layer's pair
    interactions over the sum of their singles; mean over seeds), the mean damage correlation between the layer's
    heads, and two tests over seeds that the mean relative interaction is 0: the one-sample t test (``p_t``, Holm
    over the table: ``p_holm``, the verdict's) and the distribution-free sign-flip permutation test (``p``, whose
    smallest value with n seeds is 2 / 2^n: 0.031 for 6, too coarse to survive Holm over a table)."""

    cell: str
    layer: int
    heads: int
    n_seeds: int
    effects: tuple[float, ...]
    n_pairs: int
    interaction: float
    relative: float
    relative_per_seed: tuple[float, ...]
    correlation: float
    p: float
    n_flips: int
    exact: bool
    p_holm: float
    verdict: str
    p_t: float = float("nan")


@saveable
@dataclass(frozen=True)
class DistanceRow:
    """(d) One cell, layer, distance (``js`` or ``rank``) and pair of seeds: D_within and D_cross of the two models'
    heads (all-pairs means), D_cross - D_within and its permutation p over regroupings of the heads
    (:func:`probes.compare.fair_tests.within_cross_test`), the regroupings counted and whether all were
    enumerated."""

    cell: str
    layer: int
    distance: str
    seed_a: int
    seed_b: int
    within: float
    cross: float
    statistic: float
    p: float
    n_permutations: int
    exact: bool


@saveable
@dataclass(frozen=True)
class DistanceSummaryRow:
    """(d) One cell, layer and distance over its pairs of seeds: the share of pairs with p < ALPHA, the median p,
    the mean D_within, D_cross and statistic, and the smallest p one pair's test can give (1 / regroupings)."""

    cell: str
    layer: int
    distance: str
    n_pairs: int
    share_significant: float
    median_p: float
    within: float
    cross: float
    statistic: float
    smallest_p: float


@saveable
@dataclass(frozen=True)
class EnsembleRow:
    """(e) The literal ensemble against one model of as many heads: parameters, final held-out loss (mean over
    seeds) of each, the difference (ensemble minus model) and its two-sample permutation p over seeds."""

    ensemble: str
    reference: str
    members: int
    heads: int
    params_ensemble: int
    params_reference: int
    n_ensemble: int
    n_reference: int
    loss_ensemble: float
    loss_reference: float
    difference: float
    p: float
    n_permutations: int
    exact: bool


@saveable
@dataclass(frozen=True)
class EnsembleLayerRow:
    """(e) One cell (the ensemble or its reference) and layer: the mean carriers per seed of each role and the
    layer's relative interaction with its p (table c)."""

    cell: str
    layer: int
    roles: tuple[str, ...]
    carriers_mean: tuple[float, ...]
    relative: float
    p: float


@saveable
@dataclass(frozen=True)
class CapacityRow:
    """(f) One heads count of a task (independent initialisation, one model, no attention dropout): final held-out
    loss (mean, range over seeds), the mean carriers per seed of each role (all layers), and the two-sample
    permutation test against the next smaller heads count (``compared_with``; "" for the smallest), Holm over the
    table."""

    cell: str
    task: str
    heads: int
    n_seeds: int
    loss: float
    loss_low: float
    loss_high: float
    roles: tuple[str, ...]
    carriers_mean: tuple[float, ...]
    compared_with: str
    difference: float
    p: float
    n_permutations: int
    exact: bool
    p_holm: float


@saveable
@dataclass(frozen=True)
class RoleCapacityRow:
    """(f) The roles task: one cell and role: the loss on the role's positions at the last step (mean, range over
    seeds), how many seeds give it a carrier, the mean carriers per seed and the layers they sit in."""

    cell: str
    heads: int
    n_roles: int
    relation: str
    role: str
    n_seeds: int
    role_loss: float
    role_loss_low: float
    role_loss_high: float
    seeds_with_carrier: int
    carriers_mean: float
    layers: tuple[int, ...]


@saveable
@dataclass(frozen=True)
class FormationRow:
    """(g) One cell and seed: the phase change (the largest drop of held-out loss between consecutive checkpoints:
    from ``step_before`` to ``step``, ``loss_before`` to ``loss_after``), and the first checkpoint step at which each
    role's best score (any head, any layer) reaches the threshold (``role_steps``, :data:`NOT_WITHIN` if never)."""

    cell: str
    seed: int
    step: int
    step_before: int
    loss_before: float
    loss_after: float
    roles: tuple[str, ...]
    role_steps: tuple[int, ...]
    order: str


@saveable
@dataclass(frozen=True)
class FormationTestRow:
    """(g) One cell: does the previous-token head form before the induction head? Seeds where it does, where the
    induction head does, ties (the same checkpoint) and seeds where either never forms; the exact two-sided sign
    test over the untied seeds (``p``), Holm over the table; the median phase-change step."""

    cell: str
    n_seeds: int
    previous_first: int
    induction_first: int
    ties: int
    never: int
    p: float
    p_holm: float
    phase_step: float


@saveable
@dataclass(frozen=True)
class PretrainedRoleRow:
    """(h) One pretrained model and role on the induction probe: the carriers' names (``layer-head``, 1-based, best
    first), their count of all heads, and the layers they sit in."""

    model: str
    role: str
    n_heads: int
    n_carriers: int
    carrier_names: tuple[str, ...]
    layers: tuple[int, ...]
    top_score: float


@saveable
@dataclass(frozen=True)
class PretrainedEffectRow:
    """(h) One of a pretrained model's top induction heads: its induction score and single-ablation effect."""

    model: str
    layer: int
    head: int
    name: str
    score: float
    effect: float


@saveable
@dataclass(frozen=True)
class PretrainedFunctionRow:
    """(h) Redundancy or division among a pretrained model's heads with effect: per layer with at least one pair of
    such heads, the relative interaction of those pairs; the sign-flip permutation test over these layers (the
    units are layers, not seeds: one model)."""

    model: str
    n_heads_with_effect: int
    heads_with_effect_layers: tuple[int, ...]
    relative_per_layer: tuple[float, ...]
    relative: float
    p: float
    n_flips: int
    exact: bool
    verdict: str


#: The comparison's tables, in report order: field name -> title.
TABLES: dict[str, str] = {
    "symmetry": "(a) Do identical heads stay identical?",
    "growth_seeds": "(a) How fast heads come apart under noise, per seed",
    "growth": "(a) How fast heads come apart under noise, per cell",
    "growth_tests": "(a) Does the rate depend on the noise size?",
    "roles": "(b) Role carriers per seed",
    "identity": "(b) Do carriers keep their index across seeds?",
    "function": "(c) Tests of function: redundancy or division of labour",
    "distances": "(d) D_within against D_cross, per pair of seeds",
    "distance_summary": "(d) D_within against D_cross, over the pairs of seeds",
    "ensemble": "(e) The literal ensemble against one model",
    "ensemble_layers": "(e) Carriers and interactions of the ensemble and the model",
    "capacity": "(f) Capacity: heads count, loss and carriers",
    "role_capacity": "(f) Fewer, as many or more heads than roles",
    "formation": "(g) When roles form, per seed",
    "formation_tests": "(g) Does the previous-token head come first?",
    "pretrained_roles": "(h) Pretrained models: role carriers",
    "pretrained_effects": "(h) Pretrained models: top induction heads' effects",
    "pretrained_function": "(h) Pretrained models: redundancy or division over layers",
}


def _one_based(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its :data:`ONE_BASED` fields counted from 1."""
    out = dict(row)
    for name in ONE_BASED:
        value = out.get(name)
        if isinstance(value, tuple):
            out[name] = tuple(v + 1 for v in value)
        elif isinstance(value, int) and not isinstance(value, bool):
            out[name] = value + 1
    return out


#: Per table: why it can be empty (what the comparison needs for it).
EMPTY: dict[str, str] = {
    "symmetry": "no training unit with head distances (checkpoints or every step)",
    "growth_seeds": "no noise cell with head distances at every step",
    "growth": "no noise cell with head distances at every step",
    "growth_tests": "no two noise cells alike but for the noise size, with head distances at every step",
    "roles": "no lab model measured",
    "identity": "no lab cell with at least 2 heads",
    "function": "no lab model with tests of function",
    "distances": "no lab cell with two seeds whose maps have one shape and at least 2 heads",
    "distance_summary": "no lab cell with two seeds whose maps have one shape and at least 2 heads",
    "ensemble": "no literal ensemble with a one-model cell of as many heads (independent initialisation)",
    "ensemble_layers": "no literal ensemble with a one-model cell of as many heads (independent initialisation)",
    "capacity": "no one-model cell with independent initialisation and no attention dropout",
    "role_capacity": "no cell of the roles task",
    "formation": "no lab model measured",
    "formation_tests": "no lab model measured",
    "pretrained_roles": "no pretrained model probed",
    "pretrained_effects": "no pretrained model with tests of function",
    "pretrained_function": "no pretrained model with tests of function",
}


@dataclass(frozen=True)
class RoleLabComparison(Result):
    """The role lab's tables (:data:`TABLES`), the cells they were made from, and per table how it was made
    (``rules``) and where heads were selected, how intervals were made and how many tests it holds
    (``table_notes``); ``answers``: the five short answers read off the tables
    (:func:`probes.compare.role_lab_answers.answers`, filled by :func:`probes.compare.role_lab.role_lab`)."""

    cells: tuple[LabCell, ...] = ()
    symmetry: tuple[SymmetryRow, ...] = ()
    growth_seeds: tuple[GrowthSeedRow, ...] = ()
    growth: tuple[GrowthCellRow, ...] = ()
    growth_tests: tuple[GrowthTestRow, ...] = ()
    roles: tuple[RoleSeedRow, ...] = ()
    identity: tuple[IdentityRow, ...] = ()
    function: tuple[FunctionRow, ...] = ()
    distances: tuple[DistanceRow, ...] = ()
    distance_summary: tuple[DistanceSummaryRow, ...] = ()
    ensemble: tuple[EnsembleRow, ...] = ()
    ensemble_layers: tuple[EnsembleLayerRow, ...] = ()
    capacity: tuple[CapacityRow, ...] = ()
    role_capacity: tuple[RoleCapacityRow, ...] = ()
    formation: tuple[FormationRow, ...] = ()
    formation_tests: tuple[FormationTestRow, ...] = ()
    pretrained_roles: tuple[PretrainedRoleRow, ...] = ()
    pretrained_effects: tuple[PretrainedEffectRow, ...] = ()
    pretrained_function: tuple[PretrainedFunctionRow, ...] = ()
    rules: dict[str, str] = field(default_factory=dict)
    table_notes: dict[str, str] = field(default_factory=dict)
    answers: tuple[str, ...] = ()
    n_permutations: int = 10_000
    seed: int = 0
    threshold: float = CARRIER_THRESHOLD

    def titles(self) -> dict[str, str]:
        """Every table's title, in report order (:data:`TABLES`)."""
        return dict(TABLES)

    def notes(self, table: str) -> tuple[str, ...]:
        """What a table's reader needs: where heads were selected, intervals and tests (``table_notes``), then how
        it was made (``rules``)."""
        _known(table)
        return tuple(text for text in (self.table_notes.get(table, ""), self.rules.get(table, "")) if text)

    def why_empty(self, table: str) -> str:
        """Why ``table`` has no rows (what it needs), for a report's empty table."""
        _known(table)
        return f"no rows: {EMPTY[table]}"

    def cell(self, name: str) -> LabCell:
        """The cell called ``name``; KeyError naming the cells there are."""
        for cell in self.cells:
            if cell.name == name:
                return cell
        raise KeyError(f"cell {name!r}: expected one of {', '.join(c.name for c in self.cells)}")

    def to_pandas(self, table: str = "function") -> Any:
        """One table (``table`` one of :data:`TABLES`) as a DataFrame, layers and heads counted from 1."""
        pandas = require_pandas()
        _known(table)
        rows = getattr(self, table)
        if not rows:
            return pandas.DataFrame()
        return pandas.DataFrame([_one_based(asdict(row)) for row in rows])

    def _summary(self) -> str:
        counts = ", ".join(f"{name} {len(getattr(self, name))}" for name in TABLES if getattr(self, name))
        return f"role lab comparison of {len(self.cells)} cells: {counts or 'no rows'}"


def _known(table: str) -> None:
    """ConfigError unless ``table`` is one of :data:`TABLES`."""
    if table not in TABLES:
        from probes.errors import ConfigError

        raise ConfigError(f"table: expected one of {', '.join(TABLES)}, found {table!r}")
