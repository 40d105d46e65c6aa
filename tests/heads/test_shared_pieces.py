"""Tests of the lead's shared pieces: errors, stats, reporting, figures, CLI wrapper."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probes.errors import AnnotationError, InputError, ProbesError, located
from probes.heads.intervals import bootstrap_ci
from probes.heads.naming import head_name
from probes.reports.tables import markdown_table, text_table, write_csv, write_json


def test_errors_message_starts_with_path_line() -> None:
    err = AnnotationError("expected 1 root, found 2", path="x.conllu", line=7)
    assert str(err) == "x.conllu:7: expected 1 root, found 2"
    assert isinstance(err, ValueError) and isinstance(err, ProbesError)
    assert (err.path, err.line) == ("x.conllu", 7)
    assert located(None, None, "m") == "m" and located("p", None, "m") == "p: m"


def test_heads_head_name_is_one_based() -> None:
    assert head_name(7, 10) == "8-11"  # notebook (7, 10) is paper 8-11


def test_stats_bootstrap_matches_slow_reference() -> None:
    rng = np.random.default_rng(3)
    total = rng.integers(1, 6, size=40)
    correct = rng.binomial(total, 0.6)
    low, high = bootstrap_ci(correct, total, n_resamples=500, random_state=11)
    # Slow reference: draw the same resamples with the same generator and loop.
    ref_rng = np.random.default_rng(11)
    counts = ref_rng.multinomial(40, np.full(40, 1 / 40), size=500)
    accs = []
    for row in counts:
        idx = np.repeat(np.arange(40), row)
        accs.append(correct[idx].sum() / total[idx].sum())
    assert low == pytest.approx(np.quantile(accs, 0.025))
    assert high == pytest.approx(np.quantile(accs, 0.975))
    point = correct.sum() / total.sum()
    assert low < point < high


def test_stats_bootstrap_vector_of_accuracies() -> None:
    correct = np.array([[1, 0], [1, 1], [0, 1], [1, 0]])
    low, high = bootstrap_ci(correct, np.ones(4), n_resamples=200)
    assert low.shape == (2,) and np.all(low <= high)
    all_right = bootstrap_ci(np.ones((5, 1)), np.ones(5))
    assert all_right[0][0] == 1.0 and all_right[1][0] == 1.0


def test_report_writers_roundtrip(tmp_path) -> None:
    rows = [{"relation": "det", "accuracy": 0.5, "layer": 3}, {"relation": "obj", "accuracy": float("nan"), "layer": 1}]
    write_csv(rows, tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines == ["relation,accuracy,layer", "det,0.5,3", "obj,,1"]
    write_json({"a": float("nan"), "b": np.float32(1.5), "c": [np.int64(2)]}, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == {"a": None, "b": 1.5, "c": [2]}
    md = markdown_table(rows, ["relation", "accuracy"], percent=["accuracy"])
    assert "| det | 50.0 |" in md and "| obj | - |" in md
    txt = text_table(rows, ["relation", "layer"])
    assert txt.splitlines()[0].split() == ["relation", "layer"]


def test_figures_write_png(tmp_path) -> None:
    from probes.reports.figures import head_heatmap, overview_figure

    values = np.arange(12, dtype=float).reshape(3, 4) / 12
    p = head_heatmap(values, tmp_path / "h.png", title="t")
    q = overview_figure({"a": values, "b": values[::-1]}, tmp_path / "o.png", suptitle="s")
    for path in (p, q):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_help_and_unknown_command(capsys) -> None:
    from probes.cli import main

    assert main(["--help"]) == 0
    assert "1-based" in capsys.readouterr().out
    assert main(["no-such-command"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_input_error_is_value_error_subclass() -> None:
    with pytest.raises(ValueError, match="^f.txt:2: bad$"):
        raise InputError("bad", path="f.txt", line=2)
