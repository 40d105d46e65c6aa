"""`probes match`: two tiny models on the sample corpus end to end, the files, and one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from probes.cli import main


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Three tiny random BERTs (tests/tiny_models.py) of different seeds: A, B and a null model."""
    from tests.tiny_models import build

    root = tmp_path_factory.mktemp("match-models")
    return tuple(build("bert", root / f"seed{seed}", seed=seed) for seed in (0, 1, 2))  # type: ignore[return-value]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_match_writes_a_complete_one_based_matching(two_models, tmp_path: Path, capsys) -> None:
    a, b, _ = two_models
    out = tmp_path / "out"
    assert main(["match", "-m", str(a), "-m", str(b), "--treebank", "sample:dev", "--limit", "12",
                 "--n-resamples", "20", "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "D_match" in printed and "matching.md" in printed
    for name in ("matching.csv", "matching.md", "profile_matching.csv", "figures/matching.png", "run.json",
                 "match/result.json"):
        assert (out / name).is_file(), name
    rows = _rows(out / "matching.csv")
    assert list(rows[0])[:7] == ["layer_a", "head_a", "layer_b", "head_b", "distance", "distance_low", "distance_high"]
    assert {"null_low", "null_high"} <= set(rows[0])
    heads_a = {(int(r["layer_a"]), int(r["head_a"])) for r in rows}
    heads_b = {(int(r["layer_b"]), int(r["head_b"])) for r in rows}
    every = {(layer, head) for layer in (1, 2) for head in (1, 2, 3, 4)}  # 2 layers x 4 heads, 1-based
    assert len(rows) == 8 and heads_a == every and heads_b == every  # one to one, complete
    assert all(0 <= float(r["distance"]) <= 0.7 for r in rows)  # JS per row is at most ln 2
    assert all(float(r["distance_low"]) <= float(r["distance_high"]) for r in rows)
    record = json.loads((out / "run.json").read_text())
    assert record["command"] == "probes match" and record["options"]["within_layers"] is False
    assert "matching.csv" in record["files"] and "figures/matching.png" in record["files"]
    assert (out / "figures" / "matching.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "matching.md").read_text()
    assert "across layers" in markdown and "numbered from 1" in markdown


def test_match_within_layers_against_a_null_model(two_models, tmp_path: Path) -> None:
    a, b, null = two_models
    out = tmp_path / "within"
    assert main(["match", "-m", str(a), "-m", str(b), "--treebank", "sample:dev", "--limit", "12", "--within-layers",
                 "--null-model", str(null), "--n-resamples", "20", "--no-progress", "--out", str(out)]) == 0
    rows = _rows(out / "matching.csv")
    assert all(r["layer_a"] == r["layer_b"] for r in rows)  # within layers
    assert all(r["null_low"] != "" and float(r["null_low"]) <= float(r["null_high"]) for r in rows)
    assert "null model" in (out / "matching.md").read_text()


def test_match_needs_exactly_two_models(two_models, tmp_path: Path, capsys) -> None:
    a, _, _ = two_models
    assert main(["match", "-m", str(a), "--treebank", "sample:dev", "--out", str(tmp_path / "x")]) == 1
    assert "exactly two models" in capsys.readouterr().err
