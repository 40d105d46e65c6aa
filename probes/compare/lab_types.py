"""The rows of the training lab's tables (models trained from scratch under controlled initialisation): pure data.

Every row names its ``cell`` (the experiment's training table, e.g. ``identical``, ``noise``, ``heads-8``).
Layers and heads are 0-based here; reports print them 1-based. Intervals *over seeds* are the range (min, max)
of the per-seed values, not a confidence interval: with 3 seeds neither a bootstrap nor a t interval is worth
more (``interval`` says which, and ``n_seeds`` how many). Intervals *over sentences* are the match units' 95%
percentile bootstrap intervals. A step of ``-1`` means "not within the steps looked at".
:class:`LabTables` holds them all; it is saved inside :class:`~probes.compare.types.Comparison` (``lab``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from probes.results import Result, require_pandas, saveable

__all__ = ["SymmetryStep", "GrowthRate", "FinalLoss", "SymmetryVerdict", "Division", "Capacity", "RoleFormation",
           "LabTables", "LAB_TABLES", "SEED_INTERVAL", "NOT_WITHIN"]

#: How every interval over seeds is made.
SEED_INTERVAL = "range over seeds (min to max of the per-seed values; not a confidence interval)"
#: The step recorded when something did not happen within the steps looked at.
NOT_WITHIN = -1


@saveable
@dataclass(frozen=True)
class SymmetryStep:
    """(a) One cell, layer and checkpoint step: the mean distance between the distinct heads of the layer
    (mean over pairs, then over seeds) in attention maps and in parameters, each with its range over seeds."""

    cell: str
    layer: int
    step: int
    n_seeds: int
    attention: float
    attention_low: float
    attention_high: float
    param: float
    param_low: float
    param_high: float


@saveable
@dataclass(frozen=True)
class GrowthRate:
    """(a) How fast the heads of one layer come apart (the saddle of identical heads, seed_methods §g): per seed the
    peak local growth rate of the excess distance over step 0 (:func:`probes.compare.growth.peak_growth`: the
    largest least-squares slope of ln(excess) over ``window`` consecutive measurements), ``rate`` the mean over
    seeds with its range, ``doubling`` = ln 2 / rate steps, ``r2`` the smallest R² of the per-seed windows,
    ``windows``: seed -> ``"first..last"`` step of its window (or why none). ``distance``: ``param`` or
    ``attention``; ``source``: ``every step`` (the distances measured at every step 0..K, ``symmetry_steps``),
    ``checkpoints`` (the saved checkpoints, log-spaced: a rate over spans as wide as their spacing) or both."""

    cell: str
    layer: int
    distance: str
    n_seeds: int
    rate: float
    low: float
    high: float
    doubling: float
    r2: float
    windows: dict[str, str] = field(default_factory=dict)
    source: str = ""
    window: int = 0


@saveable
@dataclass(frozen=True)
class FinalLoss:
    """(a, c) One cell's held-out loss at the last checkpoint (nats per token), mean and range over seeds, with
    the unigram baseline (mean over seeds) and what the cell is (heads, initialisation, attention dropout)."""

    cell: str
    n_seeds: int
    heads: int
    layers: int
    init: str
    attention_dropout: float
    last_step: int
    loss: float
    low: float
    high: float
    unigram: float
    objective: str = ""


@saveable
@dataclass(frozen=True)
class SymmetryVerdict:
    """(a) Whether identical heads stay identical, measured: the largest distance between any two heads of any
    layer at any checkpoint of any seed (``max_param``, ``max_attention``); ``stays_identical`` when both are
    exactly 0. ``expected`` is what the reason (``reason``) predicts for this cell."""

    cell: str
    init: str
    attention_dropout: float
    n_seeds: int
    n_checkpoints: int
    max_param: float
    max_attention: float
    stays_identical: bool
    expected: bool
    reason: str


@saveable
@dataclass(frozen=True)
class Division:
    """(b) Ensemble or division of labour in one cell, on the attention distance (mean JS per word row) of its
    match units (pairs of seeds, the same sentences for every distance of a pair). ``verdict`` comes from tests
    (``rule``), never read off intervals; the intervals below are descriptive.

    ``d_within``: mean over the cell's models of the mean distance between distinct heads of a layer, with its
    range over seeds. ``d_cross``: the mean distance between a head of one seed and a head of the other in the same
    layer (all pairs, mean over layers and pairs of seeds): like with like for D_within. Per layer (0-based order):
    ``cross_minus_within`` (mean over pairs of seeds), ``p_cross`` (the permutation test over regroupings of the
    heads, pairs combined by an intersection-union test) and ``layer_verdicts``; ``n_regroupings`` the smallest
    count of regroupings of a test, ``cross_test`` how they were tested, or why not. ``p_match``: D_match against
    the shuffled-layers null on its ``n_null_draws`` draws (largest p over pairs; NaN with ``match_test`` saying why,
    e.g. a match saved without the null's draws). ``identity_kept`` of ``identity_pairs`` matched heads keep their
    number, ``p_identity`` the exact binomial p against ``chance`` = 1 / heads (one-sided greater).
    ``d_match`` / ``d_null``: mean over pairs of the matched distance and of the null's (``null`` says which),
    ``*_low``/``*_high`` the widest of the pairs' 95% intervals over sentences (or permutations, for the shuffle
    null), ``*_seeds_low``/``*_seeds_high`` the range of the pairs' values. ``d_self``: the match units' D_self
    (``d_self_note`` why it is what it is); ``profile_d_match`` / ``profile_d_self``: the same on the profile
    distance (mean over pairs). ``identity_share``: share of matched pairs whose heads have the same numbers, range
    over pairs. A row saved before the tests has no ``layer_verdicts`` (:attr:`tested` is False): its ``verdict``
    came from intervals and is not reported as a verdict.
    """

    cell: str
    heads: int
    n_pairs: int
    n_models: int
    d_within: float
    d_within_low: float
    d_within_high: float
    d_self: float
    d_match: float
    d_match_low: float
    d_match_high: float
    d_match_seeds_low: float
    d_match_seeds_high: float
    d_null: float
    d_null_low: float
    d_null_high: float
    d_null_seeds_low: float
    d_null_seeds_high: float
    identity_share: float
    identity_low: float
    identity_high: float
    chance: float
    verdict: str
    why: str
    null: str = ""
    d_self_note: str = ""
    profile_d_match: float = float("nan")
    profile_d_self: float = float("nan")
    rule: str = ""
    d_cross: float = float("nan")
    cross_minus_within: tuple[float, ...] = ()
    p_cross: tuple[float, ...] = ()
    layer_verdicts: tuple[str, ...] = ()
    n_regroupings: int = 0
    cross_test: str = ""
    p_match: float = float("nan")
    n_null_draws: int = 0
    match_test: str = ""
    identity_kept: int = 0
    identity_pairs: int = 0
    p_identity: float = float("nan")

    @property
    def tested(self) -> bool:
        """Whether the verdict comes from the tests (False for a row saved before them)."""
        return bool(self.layer_verdicts)


@saveable
@dataclass(frozen=True)
class Capacity:
    """(c) One heads count at fixed hidden size (cells with independent initialisation and no attention dropout):
    the held-out loss and the heads carrying a relation (``specialised``, the comparison's held-out corrected
    rule) or a positional role (``positional``: any offset, as the head kinds count them; ``prev_next``: offset
    -1 or +1, previous- or next-token heads), each as mean over seeds with its range; ``n_heads`` = layers x heads."""

    cell: str
    heads: int
    n_heads: int
    n_seeds: int
    loss: float
    loss_low: float
    loss_high: float
    specialised: float
    specialised_low: float
    specialised_high: float
    positional: float
    positional_low: float
    positional_high: float
    prev_next: float
    prev_next_low: float
    prev_next_high: float
    n_atlas: int = 0
    data: str = ""


@saveable
@dataclass(frozen=True)
class RoleFormation:
    """(d) When roles form in one cell and seed: the first checkpoint step at which the heads of some layer come
    apart (``apart_step``, in ``apart_layer``; threshold in ``apart_rule``), the first with a positional head and
    the first with a head carrying a relation (from the atlases of its checkpoint models, ``steps_checked``);
    :data:`NOT_WITHIN` (-1) when it did not happen by ``last_step``."""

    cell: str
    seed: int
    apart_step: int
    apart_layer: int
    positional_step: int
    relation_step: int
    last_step: int
    steps_checked: tuple[int, ...] = ()
    symmetry_steps: tuple[int, ...] = ()
    apart_rule: str = ""


#: The lab's tables, in report order: field name -> title.
LAB_TABLES: dict[str, str] = {
    "final_loss": "Lab: held-out loss at the last step per cell",
    "verdicts": "Lab (a): do identical heads stay identical?",
    "growth": "Lab (a): how fast heads come apart (peak growth rate of the excess distance)",
    "symmetry": "Lab (a): distance between the heads of a layer per step",
    "division": "Lab (b): ensemble or division of labour",
    "capacity": "Lab (c): capacity, 1 to 8 heads at fixed hidden size",
    "formation": "Lab (d): when roles form",
}


@dataclass(frozen=True)
class LabTables(Result):
    """Every lab table (see :mod:`probes.compare.lab`), with the rules they were made by (``rules``: table ->
    text), what could not be computed (``missing``: table -> why) and the intervals' description."""

    symmetry: tuple[SymmetryStep, ...] = ()
    growth: tuple[GrowthRate, ...] = ()
    final_loss: tuple[FinalLoss, ...] = ()
    verdicts: tuple[SymmetryVerdict, ...] = ()
    division: tuple[Division, ...] = ()
    capacity: tuple[Capacity, ...] = ()
    formation: tuple[RoleFormation, ...] = ()
    rules: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    interval: str = SEED_INTERVAL

    def to_pandas(self, table: str = "final_loss") -> Any:
        """One table as a DataFrame (``table`` one of :data:`LAB_TABLES`); layers and heads stay 0-based."""
        pandas = require_pandas()
        if table not in LAB_TABLES:
            from probes.errors import ConfigError

            raise ConfigError(f"table: expected one of {', '.join(LAB_TABLES)}, found {table!r}")
        return pandas.DataFrame([asdict(row) for row in getattr(self, table)])
