"""What each command adds to its run record, typed: one frozen dataclass per command, read by attribute.

A :class:`~probes.run_record.RunRecord` holds the fields every command shares; the rest of ``run.json`` is its
:class:`RunDetails`: the fields several commands write (``model``, ``selection``, ``counts`` ...) as attributes,
and one section per command for what only that command writes (``details.leaderboard.halves``,
``details.run.units``, ``details.train.symmetry`` ...). A key that no class here names (a field of a newer or
an older version) is kept, as given, in ``extra``.

The JSON objects inside a record that code reads (``options``, ``timings``, ``selection``, an experiment's units
...) are :class:`Part` values: the keys a class names are typed attributes, every other key is kept in ``extra``,
and the part reads as the mapping it was made from, same keys in the same order, so a record is written back
byte for byte as it was read. Every value is checked against its annotation when the record is made (a field of
the wrong type in ``run.json`` is an :class:`~probes.errors.InputError` naming it), so readers never check again.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, ClassVar, TypeVar

from probes.errors import InputError
from probes.result_checks import value_problems

__all__ = ["Part", "RunOptions", "RunTimings", "Selection", "ExtractorInfo", "BoardSummary", "ExperimentInfo",
           "ReportOptions", "UnitOptions", "ExperimentUnit", "TrainingSummary", "SymmetrySummary",
           "StepSymmetrySummary",
           "LeaderboardDetails", "CoreferenceDetails", "AtlasDetails", "ProbeDetails", "MatchDetails",
           "ImportanceDetails", "TrainDetails", "ExperimentDetails", "RunDetails", "plain", "placed_keys", "shown"]

P = TypeVar("P", bound="Part")

#: The fields of :class:`Part` itself (not keys of the JSON object).
_OWN = ("extra", "order")


# --------------------------------------------------------------------------------------------- parts
@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class Part(Mapping[str, Any]):
    """A JSON object of a run record, typed: the keys a subclass names are its attributes (None when absent),
    every other key is kept as given in ``extra``. It reads as the mapping it was made from (same keys, same
    order), compares equal to it, and :meth:`to_dict` gives it back."""

    #: The keys no field names, as given.
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: The keys given, in order (written in this order, and only these).
    order: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls: type[P], value: Any, where: str = "") -> P:
        """``value`` (a mapping, as ``run.json`` holds it) as this part, every named key checked against its
        annotation; ``where`` names the value in messages (``selection``, ``units[2]``).

        Raises:
            InputError: not a mapping, a named key of the wrong type, or a required key missing.
        """
        if isinstance(value, cls):
            return value
        label = where or cls.__name__
        if not isinstance(value, Mapping):
            raise InputError(f"field {label!r}: expected a mapping, found {shown(value)}")
        given = dict(value)
        named = _named(cls)
        missing = [f"{where}.{name}" if where else name for name in _required(cls) if name not in given]
        if missing:
            raise InputError(f"field {missing[0]!r}: expected a value, found none")
        values = {key: given[key] for key in given if key in named}
        _check(cls, values, f"{where}." if where else "")
        typed = {key: _typed(named[key], item, f"{where}.{key}" if where else key) for key, item in values.items()}
        return cls(**typed, extra={k: v for k, v in given.items() if k not in named}, order=tuple(given))

    def to_dict(self) -> dict[str, Any]:
        """The object as JSON holds it: the given keys in the given order, nested parts as plain mappings."""
        named = _named(type(self))
        return {key: _given(self[key], named.get(key)) for key in self.order}

    def __getitem__(self, key: str) -> Any:
        if key not in self.order:
            raise KeyError(key)
        return getattr(self, key) if key in _named(type(self)) else self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def __repr__(self) -> str:  # shown as the mapping it reads as, so text made from it is what a dict gave
        return repr(self.to_dict())


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: a :class:`Part` as a plain mapping, anything else as it is."""
    return value.to_dict() if isinstance(value, Part) else value


def _given(value: Any, hint: Any) -> Any:
    """The value of a field annotated ``hint`` as it was given: a part as a mapping, parts made from a list (a
    ``tuple[Part, ...]`` field) as a list of mappings."""
    if _items_part(hint) is not None and isinstance(value, tuple):
        return [plain(item) for item in value]
    return plain(value)


_NAMED: dict[type, dict[str, Any]] = {}


def _named(cls: type) -> dict[str, Any]:
    """The keys a part (or a section) names -> their evaluated annotations (cached)."""
    if cls not in _NAMED:
        hints = typing.get_type_hints(cls)
        _NAMED[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name not in _OWN}
    return _NAMED[cls]


def _required(cls: type) -> list[str]:
    """The keys a part cannot do without (fields without a default)."""
    return [f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def _check(cls: type, values: Mapping[str, Any], prefix: str) -> None:
    """Raise the first problem of ``values`` against the annotations of ``cls`` as an InputError."""
    for problem in value_problems(cls, values, prefix):
        raise InputError(problem)


def _part_in(hint: Any) -> type[Part] | None:
    """The :class:`Part` class ``hint`` names (itself, or one member of a union), else None."""
    if isinstance(hint, type) and issubclass(hint, Part):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next((part for part in map(_part_in, typing.get_args(hint)) if part is not None), None)
    return None


def _items_part(hint: Any) -> type[Part] | None:
    """The :class:`Part` class of the items of ``tuple[Part, ...]`` (alone or in a union), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next((part for part in map(_items_part, typing.get_args(hint)) if part is not None), None)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _part_in(args[0])
    return None


def _typed(hint: Any, value: Any, where: str) -> Any:
    """``value`` (checked against ``hint``) with the parts ``hint`` names made: a mapping as its part, a list as a
    tuple of parts; any other value as given."""
    part, items = _part_in(hint), _items_part(hint)
    if part is not None and isinstance(value, Mapping):
        return part.of(value, where)
    if items is not None and isinstance(value, list | tuple):
        return tuple(items.of(item, f"{where}[{i}]") for i, item in enumerate(value))
    return value


def shown(value: Any, width: int = 60) -> str:
    """``value`` as an error message shows what was found (``17``, ``'units'``, ``[1, 2]``), shortened."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class RunOptions(Part):
    """``options``: every option of the run after defaults were applied; those read after the run are typed."""

    model: str | None = None
    corpus: str | None = None
    select_on: str | None = None
    device: str | None = None
    #: A decoder's leaderboard: relations split by the side of their gold head.
    sided: bool | None = None
    #: How a leaderboard's intervals resampled (``unit``: documents or sentences ...).
    bootstrap: Mapping[str, Any] | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class RunTimings(Part):
    """``timings``: seconds per step of the run (and notes); those read after the run are typed."""

    extraction_s: float | None = None
    scoring_s: float | None = None
    writing_s: float | None = None
    training_s: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class Selection(Part):
    """``selection``: how heads were selected (``mode``: split, separate or same) and on what data."""

    mode: str | None = None
    selected_on: str | None = None
    reported_on: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class ExtractorInfo(Part):
    """``extractor``: what the extractor recorded about itself (model, device, dtype, weights ...)."""

    model: str | None = None
    device: str | None = None
    #: The GGUF file the weights were dequantised from, when they were.
    weights_source: Mapping[str, Any] | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class BoardSummary(Part):
    """``leaderboard`` of ``probes atlas``: its board's selection, significance, inputs and counts."""

    selection: Selection | None = None
    significance: Mapping[str, Any] | None = None
    inputs: Mapping[str, Any] | None = None
    counts: Mapping[str, Any] | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class ExperimentInfo(Part):
    """``experiment``: the experiment a run belongs to (``probes run``: its file, title and folder; a training
    unit's ``probes train``: its name, cell and seed)."""

    name: str | None = None
    title: str | None = None
    description: str | None = None
    file: str | None = None
    copy: str | None = None
    out: str | None = None
    cell: str | None = None
    seed: int | None = None
    #: ``role-lab`` for a role-lab run (:mod:`probes.runs.role_lab`); None for an ordinary experiment.
    kind: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class ReportOptions(Part):
    """``report_options`` of ``probes run``: how the comparison is computed."""

    n_resamples: int | None = None
    tolerance: float | None = None
    seed: int | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class UnitOptions(Part):
    """The options of an experiment's unit: its analysis' options, and for training and match units their own
    (``cell`` and ``seed`` of the training run, its ``config``; the ``other`` model of a match pair)."""

    cell: str | None = None
    seed: int | None = None
    config: Mapping[str, Any] | None = None
    other: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class ExperimentUnit(Part):
    """One entry of ``probes run``'s ``units``: analysis ``analysis`` of kind ``kind`` on ``model`` and ``data``,
    saved in ``path`` (relative to the run folder) under ``key``."""

    analysis: str
    kind: str
    model: str
    data: str
    path: str
    key: str | None = None
    reused: bool | None = None
    seconds: float | None = None
    from_atlas: str | None = None
    run_folder: str | None = None
    how: str | None = None
    #: A training or match unit's own options (others take their analysis' options).
    options: UnitOptions | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class TrainingSummary(Part):
    """``training`` of ``probes train``: how the run ended, its checkpoints and speed."""

    stopped: str | None = None
    resumed_from: int | None = None
    last_step: int | None = None
    tokens_per_second: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class SymmetrySummary(Part):
    """``symmetry`` of ``probes train``: the head-symmetry measurement (``asked``: sentences asked for)."""

    sentences: int | None = None
    asked: int | None = None


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class StepSymmetrySummary(Part):
    """``symmetry_steps`` of ``probes train --symmetry-steps K``: the head distances at every step ``0..K``
    (``asked``: K; ``last_step``: the last step measured; ``folder``: where they are saved; ``skipped``: why none
    were measured)."""

    asked: int | None = None
    last_step: int | None = None
    sentences: int | None = None
    folder: str | None = None
    skipped: str | None = None
    rule: str | None = None


# --------------------------------------------------------------------------------------------- sections
@dataclass(frozen=True, kw_only=True)
class LeaderboardDetails:
    """What ``probes leaderboard`` adds (``probes demo`` and the atlas' board too)."""

    reported_on: str | None = None
    selected_on: str | None = None
    held_out_selection: bool | None = None
    #: Sentences in each half (``select``, ``report``) of a split selection.
    halves: Mapping[str, int] | None = None
    memory: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class CoreferenceDetails:
    """What ``probes coref`` and ``probes bridging`` add."""

    definitions: Mapping[str, Any] | None = None
    selection_data: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class AtlasDetails:
    """What ``probes atlas`` adds."""

    groups: Mapping[str, Any] | None = None
    #: The atlas' board: its selection, significance, inputs and counts.
    leaderboard: BoardSummary | None = None
    coreference: Mapping[str, Any] | None = None
    gradients_note: str | None = None
    head_types: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeDetails:
    """What ``probes probe`` adds."""

    eval_name: str | None = None
    timings_setup: Mapping[str, Any] | None = None
    random_init: Mapping[str, Any] | None = None
    probes: Sequence[str] | None = None
    parsers: Sequence[Mapping[str, Any]] | None = None
    comparisons: Sequence[Mapping[str, Any]] | None = None
    per_head: Mapping[str, Any] | None = None
    label: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class MatchDetails:
    """What ``probes match`` adds."""

    skipped_by_model: Mapping[str, Any] | None = None
    #: How each distance is defined (``attention``, ``profile``).
    distance: Mapping[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class ImportanceDetails:
    """What ``probes importance`` and ``probes prune`` add."""

    weights_sha256: str | None = None
    objective: Mapping[str, Any] | None = None
    orders: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class TrainDetails:
    """What ``probes train`` adds."""

    training: TrainingSummary | None = None
    scheme: Mapping[str, Any] | None = None
    tokenizer: Mapping[str, Any] | None = None
    symmetry: SymmetrySummary | None = None
    symmetry_steps: StepSymmetrySummary | None = None


@dataclass(frozen=True, kw_only=True)
class ExperimentDetails:
    """What ``probes run`` (and ``probes report``) adds; ``experiment`` is also written by the ``probes train`` runs
    of an experiment's training units."""

    experiment: ExperimentInfo | None = None
    analyses: Mapping[str, Mapping[str, Any]] | None = None
    units: tuple[ExperimentUnit, ...] | None = None
    seed_questions: bool | None = None
    report_options: ReportOptions | None = None
    status: str | None = None
    train: Mapping[str, Any] | None = None
    #: A role-lab run's settings: workers, cells, pretrained models, families, permutations and draws.
    role_lab: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RunDetails:
    """Every field of a record but the shared ones of :class:`~probes.run_record.RunRecord`: those several
    commands write, as attributes; those one command writes, in its section; the rest in ``extra``.

    A key belongs to one place only (:data:`SECTIONS` and the shared fields never name the same key), so a record
    is split and put back together without loss.
    """

    #: The model as given (a path or name; coreference and bridging: what the extractor recorded).
    model: str | PurePath | ExtractorInfo | None = None
    #: The model's name as a person reads it (``probes demo``).
    model_name: str | None = None
    model_path: str | PurePath | None = None
    weights_source: Mapping[str, Any] | None = None
    extractor: ExtractorInfo | None = None
    #: The models of a match (``a``, ``b``) or of an experiment, by name.
    models: Mapping[str, Mapping[str, Any]] | None = None
    selection: Selection | None = None
    #: What the selection data share with the report data (:meth:`probes.corpora.overlap.DataOverlap.to_dict`),
    #: measured before any model work when heads are chosen on separate data.
    overlap: Mapping[str, Any] | None = None
    significance: Mapping[str, Any] | None = None
    counts: Mapping[str, Any] | None = None
    extraction_report: Mapping[str, Any] | None = None
    seconds: float | None = None
    indexing: str | None = None
    #: Every file of the run, ``run.json`` last (written by :func:`probes.reports.writer.write_record`).
    files: Sequence[str] | None = None
    #: The folder of the run's main saved result, relative to the run folder (``leaderboard``, ``atlas``,
    #: ``match`` ...): what :func:`probes.load` reads when given the run folder. Written by
    #: :func:`probes.reports.writer.write_output` (the first result its :class:`OutputFolder` saved).
    result: str | None = None

    leaderboard: LeaderboardDetails = field(default_factory=LeaderboardDetails)
    coreference: CoreferenceDetails = field(default_factory=CoreferenceDetails)
    atlas: AtlasDetails = field(default_factory=AtlasDetails)
    probe: ProbeDetails = field(default_factory=ProbeDetails)
    match: MatchDetails = field(default_factory=MatchDetails)
    importance: ImportanceDetails = field(default_factory=ImportanceDetails)
    train: TrainDetails = field(default_factory=TrainDetails)
    run: ExperimentDetails = field(default_factory=ExperimentDetails)
    #: The keys no class names (a newer or older version's), as given.
    extra: Mapping[str, Any] = field(default_factory=dict)

    #: The section of each command, by its attribute.
    SECTIONS: ClassVar[tuple[str, ...]] = ("leaderboard", "coreference", "atlas", "probe", "match", "importance",
                                           "train", "run")

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> RunDetails:
        """The details of a record from its fields but the shared ones, each checked against its annotation.

        Raises:
            InputError: a field of the wrong type (``a run record's field 'selection': expected ...``).
        """
        places = _places()
        shared: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {name: {} for name in cls.SECTIONS}
        extra: dict[str, Any] = {}
        for key, value in given.items():
            target = extra if key not in places else shared if places[key] == SHARED else sections[places[key]]
            target[key] = value
        try:
            made = {name: _section_class(name)(**_fields(_section_class(name), values))
                    for name, values in sections.items()}
            return cls(**_fields(cls, shared), **made, extra=extra)
        except InputError as exc:
            raise InputError(f"a run record's {exc.reason}") from None

    def value(self, key: str) -> Any:
        """The value of the field ``key`` as given (nested parts as plain mappings), for ``run.json``."""
        place = _places().get(key)
        if place is None:
            return self.extra[key]
        owner = self if place == SHARED else getattr(self, place)
        return _given(getattr(owner, key), _named(type(owner))[key])


#: The place of a field several commands write (not a command's section).
SHARED = "shared"


def _section_class(name: str) -> type:
    """The dataclass of the section ``name`` of :class:`RunDetails`."""
    section: type = _named(RunDetails)[name]
    return section


def _fields(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` checked against the annotations of ``cls``, with the parts they name made."""
    _check(cls, values, "")
    named = _named(cls)
    return {key: _typed(named[key], value, key) for key, value in values.items()}


def placed_keys() -> dict[str, list[str]]:
    """Every key a class here names -> the places naming it (:data:`SHARED` or a section): one each, always."""
    places: dict[str, list[str]] = {}
    for name in _named(RunDetails):
        if name not in RunDetails.SECTIONS:
            places.setdefault(name, []).append(SHARED)
    for section in RunDetails.SECTIONS:
        for name in _named(_section_class(section)):
            places.setdefault(name, []).append(section)
    return places


_PLACES: dict[str, str] = {}


def _places() -> dict[str, str]:
    """Every key a class here names -> its place (:data:`SHARED` or a section); a key not here goes to ``extra``."""
    if not _PLACES:
        _PLACES.update({key: where[0] for key, where in placed_keys().items()})
    return _PLACES
