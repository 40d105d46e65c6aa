"""What the evidence of a comparison cannot tell, derived from its inputs: how many trained models and of what
size, how many random initialisations, silver or gold annotation, and the hardware the units ran on."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from probes.compare.inputs import atlas_of, board_of, model_data_pairs
from probes.compare.types import Unit
from probes.run_record import RunRecord

__all__ = ["notes", "annotation"]


def annotation(name: str) -> str:
    """``"silver"`` for the packaged sample corpus (spaCy parses), ``"gold"`` for UD registry data and UD release
    files (``*-ud-{train,dev,test}.conllu``), else ``"unknown"`` (a file: its annotation is whatever it says)."""
    if name.startswith("sample:"):
        return "silver"
    if name.startswith("ud:") or re.search(r"-ud-(train|dev|test)\.conllu$", name):
        return "gold"
    return "unknown"


def _sizes(units: Sequence[Unit]) -> dict[str, tuple[int, int]]:
    """``{model: (n_layers, n_heads)}`` from each model's first leaderboard (or atlas board)."""
    out: dict[str, tuple[int, int]] = {}
    for model, data in model_data_pairs(units):
        board = board_of(units, model, data)
        if board is not None and model not in out:
            out[model] = (len(board.report.layers), len(board.report.heads))
    return out


def _devices(units: Sequence[Unit]) -> set[str]:
    """The devices the units' run records name (the extractor's, else the options'), e.g. ``{"cpu"}``."""
    found = set()
    for unit in units:
        for record in (getattr(unit.result, "record", None), getattr(getattr(unit.result, "board", None), "record", None)):
            if not isinstance(record, RunRecord):
                continue
            device = record.extractor.device or record.options.device
            if device:
                found.add(str(device).split(":")[0])
    return found


def _data_note(units: Sequence[Unit]) -> str | None:
    """One sentence on the annotation of the reported data."""
    names = sorted({board_of(units, m, d).reported_on for m, d in model_data_pairs(units)
                    if board_of(units, m, d) is not None})
    if not names:
        return None
    kinds = {name: annotation(name) for name in names}
    silver = [n for n, k in kinds.items() if k == "silver"]
    text = "Annotation: " + ", ".join(f"{n} {k}" for n, k in kinds.items()) + "."
    if silver:
        text += (" Silver trees (spaCy parses of the sample corpus) carry the parser's errors: a head that agrees "
                 "with the parser is not thereby agreeing with linguists.")
    return text


def _uniform_note(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]]) -> str | None:
    """A sentence when the random-init models' heads attend almost uniformly (their mean confidence, the largest
    weight of a row, under half the trained models'): their heads then cannot differ much by construction."""
    confidence: dict[str, list[float]] = {"trained": [], "random-init": []}
    for model, data in model_data_pairs(units, kinds=("atlas",)):
        atlas, kind = atlas_of(units, model, data), models.get(model, {}).get("kind")
        if atlas is not None and kind in confidence:
            confidence[kind].append(float(np.nanmean(atlas.roles.confidence())))
    if not confidence["trained"] or not confidence["random-init"]:
        return None
    trained, random = float(np.mean(confidence["trained"])), float(np.mean(confidence["random-init"]))
    if random >= trained / 2:
        return None
    return (f"The random-init heads attend almost uniformly (mean largest weight of a row {random:.3f}, against "
            f"{trained:.3f} in the trained models): drawn by the architecture's own initialisation (small weights), "
            "untrained heads hardly differ by construction, so the comparison measures what training adds, not how "
            "differently other initialisations (larger weights, other schemes) could make heads behave.")


def notes(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]], *, lab: int = 0) -> tuple[str, ...]:
    """The notes of a comparison (see the module); ``lab``: how many lab models the lab's section holds besides."""
    sizes = _sizes(units)
    trained = [m for m, info in models.items() if info.get("kind") == "trained"]
    random = [m for m, info in models.items() if info.get("kind") == "random-init"]
    described = ", ".join(f"{m} ({sizes[m][0]} layers x {sizes[m][1]} heads)" if m in sizes else m for m in trained)
    out = [f"{len(trained)} trained model{'s' if len(trained) != 1 else ''}" + (f": {described}" if trained else "")
           + ". Whether the answers hold for other architectures, sizes or training objectives is not tested here."]
    if lab:
        out.append(f"The lab's {lab} model{'s' if lab != 1 else ''} (trained here, final and checkpoint ones) enter "
                   "only the lab's section; every other table holds the models above.")
    if random:
        out.append(f"{len(random)} random-init model{'s' if len(random) != 1 else ''} ({', '.join(random)}): the "
                   "untrained reference covers only these initialisations, so its spread over seeds is barely known.")
    else:
        out.append("No random-init model: nothing says how much of each answer an untrained model of the same "
                   "architecture would give.")
    uniform = _uniform_note(units, models)
    if uniform:
        out.append(uniform)
    data = _data_note(units)
    if data:
        out.append(data)
    devices = _devices(units)
    if devices == {"cpu"}:
        largest = max((l_ * h for l_, h in sizes.values()), default=0)
        out.append(f"Every unit ran on CPU only, so the models are small (at most {largest} heads): nothing here "
                   "speaks for large models.")
    return tuple(out)
