"""The rows of a cross-model comparison and of the seed-question answers: pure data, no computation.

Every row names its ``model`` (the experiment's name for it, e.g. ``minilm``, ``random-0``) and ``data`` (the
experiment's data name, e.g. ``ewt``). Layers and heads are 0-based here; reports print them 1-based.
Every interval is a 95% percentile bootstrap interval unless its row's ``interval`` says otherwise.
:class:`Comparison` holds them all, saves and loads (``probes.load``) and converts to pandas per table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.lab_types import LabTables
from probes.results import Result, require_pandas, saveable
from probes.run_details import UnitOptions

__all__ = ["Unit", "BestHead", "HeadKinds", "Spread", "Specialisation", "Consistency", "Redundancy", "LayerProfile",
           "Test", "Curve", "Histogram", "Comparison", "TABLES"]


@dataclass(frozen=True)
class Unit:
    """One saved result of an experiment: analysis ``analysis`` (the experiment's name for it, e.g. ``prune-repr``)
    of kind ``kind`` (``leaderboard``, ``baselines``, ``atlas``, ``coreference``, ``bridging``, ``probe``,
    ``importance``, ``prune``) run on model ``model`` and data ``data``; ``result`` is the loaded result object
    (:class:`~probes.runs.leaderboard.Leaderboard`, :class:`~probes.runs.atlas.Atlas`,
    :class:`~probes.runs.importance.Pruning` ...), ``options`` the analysis options it ran with (a mapping is
    taken as :class:`~probes.run_details.UnitOptions`, as ``run.json`` holds it)."""

    analysis: str
    kind: str
    model: str
    data: str
    result: Any
    options: UnitOptions = field(default_factory=UnitOptions)

    def __post_init__(self) -> None:
        if not isinstance(self.options, UnitOptions):
            object.__setattr__(self, "options", UnitOptions.of(self.options, "options"))


@saveable
@dataclass(frozen=True)
class BestHead:
    """One relation's best head in one model (the leaderboard's reported row, heads chosen on ``selected_on``).

    ``depth`` is the relative depth of the layer, ``layer / (n_layers - 1)`` (0 first, 1 last; 0 for one layer),
    so models of different depth share one scale.
    """

    model: str
    data: str
    relation: str
    direction: str
    layer: int
    head: int
    n_layers: int
    depth: float
    count: int
    accuracy: float
    ci_low: float
    ci_high: float
    baseline_accuracy: float
    margin: float
    margin_ci_low: float
    margin_ci_high: float
    p_adjusted: float
    beats_baseline: bool
    selected_on: str
    reported_on: str


@saveable
@dataclass(frozen=True)
class HeadKinds:
    """Per model and data, how many heads are specialised, positional and broad (``rules`` says how each is
    decided; a head can be several kinds). ``specialised`` is -1 where it could not be decided (no held-out
    selection side: ``Comparison.missing["specialisation"]`` says why)."""

    model: str
    data: str
    n_heads: int
    specialised: int
    positional: int
    broad: int
    rules: dict[str, str] = field(default_factory=dict)


@saveable
@dataclass(frozen=True)
class Spread:
    """Q1, do heads differ more than chance: the spread of head-to-head JS distances in one model.

    ``value`` is the statistic named by ``statistic`` (mean Jensen-Shannon divergence per query row over all
    pairs of distinct heads), with its interval over sentences (bootstrap, ``n_resamples`` draws of the
    ``n_items`` sentences). ``sd`` is the standard deviation (population, ``ddof=0``) of the pairwise distances
    (how unequal the pairs are). ``n_clusters`` is the number of Ward clusters with the best silhouette (k in
    2..``max_k``; silhouette on the per-row distances), with that silhouette and its bootstrap interval, which
    uses the first ``n_cluster_resamples`` of the same draws only (each draw builds a tree:
    :data:`probes.compare.spread.CLUSTER_RESAMPLES`). ``structure`` is True only when that silhouette reaches
    :data:`probes.compare.spread.STRUCTURE_SILHOUETTE` (0.25, Kaufman & Rousseeuw 1990); below it the heads
    show no substantial cluster structure and ``n_clusters`` is only the least bad cut.
    """

    model: str
    data: str
    statistic: str
    value: float
    low: float
    high: float
    sd: float
    n_clusters: int
    n_clusters_low: float
    n_clusters_high: float
    silhouette: float
    n_items: int
    n_resamples: int
    max_k: int
    n_cluster_resamples: int = 0
    structure: bool = False


@saveable
@dataclass(frozen=True)
class Specialisation:
    """Q2: how many heads carry a relation, held out and corrected.

    A head is specialised when its best relation (chosen on the selection half, ``selected_on``) beats that
    relation's best baseline on the report data (``reported_on``) under the paired test of
    :mod:`probes.heads.inference`, Holm-corrected over all ``n_tests`` heads of the model (``rule``).
    ``per_relation`` counts the specialised heads by their relation. ``fraction`` = n_specialised / n_heads,
    with a bootstrap interval over report sentences (the same test redone on every draw: ``low``, ``high``).
    """

    model: str
    data: str
    n_heads: int
    n_specialised: int
    fraction: float
    low: float
    high: float
    n_tests: int
    per_relation: dict[str, int]
    selected_on: str
    reported_on: str
    rule: str


@saveable
@dataclass(frozen=True)
class Consistency:
    """Q4: are the same heads chosen on two datasets (two splits, or two corpora)?

    ``first`` and ``second`` name the two sides (``"ewt:dev"``, ``"ewt:test"``, ``"gum:test"`` ...).
    ``same_head`` is the fraction of the ``n_relations`` relations (listed on both sides) whose best head
    is the same on both. ``rho`` is the mean over those relations of Spearman's rank correlation of all heads'
    accuracies between the two sides, with a bootstrap interval over relations (``low``, ``high``). Nested
    relations are left out (:data:`probes.compare.consistency.NESTED_RULE`).

    ``rho_corrected`` is the same mean of each relation's rho corrected for the sides' reliability,
    rho / sqrt(r_first r_second), r a side's Spearman-Brown split-half rho (``reliability_first``,
    ``reliability_second``: means over the relations); each corrected rho above 1 is capped at 1 and counted in
    ``n_capped``; ``n_corrected`` relations had a positive reliability on both sides (NaN without per-sentence
    counts: :data:`probes.compare.consistency.RELIABILITY_RULE`).
    """

    model: str
    first: str
    second: str
    n_relations: int
    same_head: float
    rho: float
    low: float
    high: float
    relations: tuple[str, ...] = ()
    rho_corrected: float = float("nan")
    corrected_low: float = float("nan")
    corrected_high: float = float("nan")
    reliability_first: float = float("nan")
    reliability_second: float = float("nan")
    n_corrected: int = 0
    n_capped: int = 0


@saveable
@dataclass(frozen=True)
class Redundancy:
    """Q3: the fraction of heads removable within ``tolerance`` of one objective's loss, by pruning order, and
    whether specialised and confident heads go last.

    ``removable`` maps each curve (``importance``, ``specialised-last``, ``confident-last``) to its removable
    fraction under ``rule`` (:data:`probes.importance.pruning.TOLERANCE_RULES`; ``range``: a loss increase of at
    most ``tolerance`` x (``ablated_loss`` - ``full_loss``), every step up to the fraction within); ``area`` maps
    them to the normalised area under the curve (:data:`probes.importance.pruning.AREA_RULE`); ``random_low``,
    ``random_median``, ``random_high`` (and ``random_area_*``) are over the ``n_random`` random orders.
    ``rho_margin`` is Spearman's rho between the unpruned model's importance (selection data) and each head's
    specialisation margin, ``rho_confidence`` with its confidence; their intervals are bootstrap intervals over
    heads.
    """

    model: str
    data: str
    objective: str
    tolerance: float
    removable: dict[str, float]
    random_low: float
    random_median: float
    random_high: float
    rho_margin: float
    rho_margin_low: float
    rho_margin_high: float
    rho_confidence: float
    rho_confidence_low: float
    rho_confidence_high: float
    selected_on: str
    reported_on: str
    rule: str = "range"
    full_loss: float = float("nan")
    ablated_loss: float = float("nan")
    area: dict[str, float] = field(default_factory=dict)
    random_area_low: float = float("nan")
    random_area_median: float = float("nan")
    random_area_high: float = float("nan")
    n_random: int = 0


@saveable
@dataclass(frozen=True)
class LayerProfile:
    """Q5: patterns and roles in one layer of one model: the fraction of its heads whose majority Kovaleva
    pattern is each pattern (``patterns``), and the fraction of its heads that are positional, rare-word,
    specialised (as in :class:`Specialisation`) and broad (Clark), with the layer's mean confidence."""

    model: str
    data: str
    layer: int
    n_heads: int
    patterns: dict[str, float]
    positional: float
    rare_word: float
    specialised: float
    broad: float
    confidence: float


@saveable
@dataclass(frozen=True)
class Test:
    """One test of the report: ``question`` (q1..q5), what is compared, the difference with its interval, and
    the p-value raw and Holm-corrected over every test of the report (``n_tests`` in :class:`Comparison`).
    ``twins`` labels the kind of random-init model the trained one is compared with (``"default twins"``,
    ``"sharpness-matched twins (s = 4.46)"``: :func:`probes.compare.tests.twin_label`), so each answer is given
    against each kind separately; ``verdict`` is :func:`probes.compare.tests.test_verdict` (``yes``, ``no``,
    ``inconclusive``)."""

    question: str
    name: str
    method: str
    value: float
    low: float
    high: float
    p_value: float
    p_adjusted: float
    significant: bool
    twins: str = ""
    verdict: str = ""


@saveable
@dataclass(frozen=True)
class Curve:
    """One pruning curve set for the overlaid figure: ``objective``'s loss (``metric``) against the fraction of
    heads pruned, by importance order (``importance``), the random band (``random_low/median/high``) and the
    score orders (``orders``: name -> values); every array ``(S,)`` on ``fractions``."""

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"fractions": "S", "importance": "S", "random_low": "S", "random_median": "S", "random_high": "S"}

    model: str
    data: str
    objective: str
    metric: str
    fractions: npt.NDArray[np.float64]
    importance: npt.NDArray[np.float64]
    random_low: npt.NDArray[np.float64]
    random_median: npt.NDArray[np.float64]
    random_high: npt.NDArray[np.float64]
    orders: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)


@saveable
@dataclass(frozen=True)
class Histogram:
    """The distribution of one model's head-to-head distances (per query row JS, all pairs of distinct heads):
    ``counts`` ``(B,)`` on ``edges`` ``(B + 1,)``, the same edges for every model of a comparison."""

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"counts": "B", "edges": "B+1"}

    model: str
    data: str
    edges: npt.NDArray[np.float64]
    counts: npt.NDArray[np.int64]


#: The tables of a comparison, in report order: field name -> title.
TABLES: dict[str, str] = {
    "best_heads": "Best head per relation and model",
    "head_kinds": "Specialised, positional and broad heads per model",
    "spread": "Q1. Head-to-head JS distances and clusters",
    "specialisation": "Q2. Specialised heads (held out, corrected)",
    "redundancy": "Q3. Heads removable within the tolerance",
    "consistency": "Q4. The same heads on two splits and two corpora",
    "layers": "Q5. Patterns and roles per layer",
    "tests": "Tests (Holm-corrected over the report)",
}


@dataclass(frozen=True)
class Comparison(Result):
    """Everything the experiment report shows, computed from saved results alone (see :mod:`probes.compare`).

    ``models`` maps each model name to its kind (``"trained"`` or ``"random-init"``) and spec; ``notes`` holds
    what the evidence cannot tell; ``missing`` names each table or question that could not be computed and why;
    ``lab`` holds the training lab's tables (:mod:`probes.compare.lab`) when the experiment trained models.
    """

    models: dict[str, dict[str, Any]]  # Any: each model's entry as recorded (kind, spec, seed, a nested query_key ...)
    best_heads: tuple[BestHead, ...] = ()
    head_kinds: tuple[HeadKinds, ...] = ()
    spread: tuple[Spread, ...] = ()
    specialisation: tuple[Specialisation, ...] = ()
    redundancy: tuple[Redundancy, ...] = ()
    consistency: tuple[Consistency, ...] = ()
    layers: tuple[LayerProfile, ...] = ()
    tests: tuple[Test, ...] = ()
    curves: tuple[Curve, ...] = ()
    histograms: tuple[Histogram, ...] = ()
    missing: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    lab: LabTables | None = None

    def to_pandas(self, table: str = "best_heads") -> Any:
        """One table as a DataFrame (``table`` one of :data:`TABLES`); layers and heads stay 0-based here."""
        pandas = require_pandas()
        if table not in TABLES:
            from probes.errors import ConfigError

            raise ConfigError(f"table: expected one of {', '.join(TABLES)}, found {table!r}")
        return pandas.DataFrame([asdict(row) for row in getattr(self, table)])
