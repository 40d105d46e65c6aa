"""Issue 13 reports: importance and pruning figures (every format, >= 150 dpi, model and data in the titles,
nothing clipped) and Markdown whose numbers parse back to the result's (band positions checked by hand)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from probes.errors import ConfigError, InputError
from probes.importance.pruning import OnePerLayer, PruningResult
from probes.importance.scores import ImportanceResult

PIL = pytest.importorskip("PIL.Image")
pytest.importorskip("matplotlib")

MODEL = "tiny-bert-model"
DATA = "ewt-dev-data"
SELECTION = "ewt-train-data"


def _importance(loo: bool = True) -> ImportanceResult:
    """3 layers x 4 heads, distinct values; layer-l2 normalised importance; LOO effects of both signs."""
    rng = np.random.default_rng(7)
    raw = rng.uniform(0.001, 0.02, size=(3, 4))
    importance = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    effect = rng.normal(0.0, 0.05, size=(3, 4))
    nan = np.full((3, 4), np.nan)
    return ImportanceResult(
        layers=(0, 1, 2), heads=(0, 1, 2, 3), objective="representation", data=DATA, importance=importance,
        raw_importance=raw, normalization="layer-l2", loo_effect=effect if loo else nan,
        loo_low=effect - 0.01 if loo else nan, loo_high=effect + 0.02 if loo else nan, ablation="zero",
        base_loss=0.0, rank_correlation=0.4321 if loo else np.nan, rank_low=0.1234 if loo else np.nan,
        rank_high=0.7654 if loo else np.nan, n_sentences=40, n_resamples=200, confidence=0.95)


#: loss per curve (rows) and step (columns), 2 x 4 heads, step 0.25: steps prune 0, 2, 4, 6, 8 heads
_LOSS = {"importance": [1.0, 0.9, 1.04, 1.5, 3.0],  # better at 25%: still removable (one-sided tolerance)
         "random:0": [1.0, 1.2, 1.6, 2.2, 3.0],
         "random:1": [1.0, 1.1, 1.7, 2.5, 3.0],
         "random:2": [1.0, 1.3, 1.5, 2.0, 3.0],
         "specialised-last": [1.0, 1.05, 1.5, 2.6, 3.0]}
#: accuracy (higher is better)
_ACC = {"importance": [0.9, 0.9, 0.88, 0.6, 0.1],
        "random:0": [0.9, 0.7, 0.5, 0.3, 0.1],
        "random:1": [0.9, 0.8, 0.6, 0.2, 0.1],
        "random:2": [0.9, 0.75, 0.55, 0.25, 0.1],
        "specialised-last": [0.9, 0.7, 0.9, 0.1, 0.1]}


def _one_per_layer() -> OnePerLayer:
    return OnePerLayer(layers=(0, 1), heads=(0, 1, 2, 3), kept=np.array([2, 0], dtype=np.int64),
                       metrics=("loss", "accuracy"), values=np.array([[1.25, 0.81], [1.125, 0.875]]),
                       base=np.array([1.0, 0.9]), loss_delta=np.array([0.25, 0.125]),
                       loss_low=np.array([0.2, 0.05]), loss_high=np.array([0.31, 0.2]))


def _pruning(one_per_layer: bool = True) -> PruningResult:
    curves = tuple(_LOSS)
    values = np.stack([np.stack([_LOSS[c], _ACC[c]], axis=-1) for c in curves])  # (C, S, M)
    rng = np.random.default_rng(0)
    order = np.stack([rng.permutation(8) for _ in curves]).astype(np.int64)
    return PruningResult(layers=(0, 1), heads=(0, 1, 2, 3), objective="probe", data=DATA, selection=SELECTION,
                         metrics=("loss", "accuracy"), higher_is_better=(False, True), curves=curves,
                         fractions=np.array([0.0, 0.25, 0.5, 0.75, 1.0]),
                         n_pruned=np.array([0, 2, 4, 6, 8], dtype=np.int64), values=values, order=order, step=0.25,
                         importance="iterative", ablation="zero",
                         one_per_layer=_one_per_layer() if one_per_layer else None)


# ------------------------------------------------------------------------------------------------ figures
def _dpi(path: Path) -> float:
    with PIL.open(path) as image:
        return float(image.info["dpi"][0])


def _edges_blank(path: Path, band: int = 2) -> bool:
    with PIL.open(path) as image:
        pixels = np.asarray(image.convert("L"))
    edges = np.concatenate([pixels[:, :band].ravel(), pixels[:, -band:].ravel(), pixels[:band].ravel(),
                            pixels[-band:].ravel()])
    return bool(edges.min() >= 250)


def _write_all(folder: Path, fmt: str) -> list[Path]:
    from probes.reports.importance.figures import (
        write_importance_heatmaps,
        write_importance_scatter,
        write_one_per_layer,
        write_pruning_curves,
    )

    title = f"{MODEL} on {DATA}"
    pruning = _pruning()
    return [write_importance_heatmaps(_importance(), folder / f"heatmaps.{fmt}", title=title),
            write_importance_scatter(_importance(), folder / f"scatter.{fmt}", title=title),
            write_pruning_curves(pruning, folder / f"curves.{fmt}", title=title),
            write_one_per_layer(pruning.one_per_layer, folder / f"one.{fmt}", title=title)]


def test_png_figures_are_150_dpi_large_and_not_clipped(tmp_path: Path) -> None:
    for path in _write_all(tmp_path, "png"):
        assert path.suffix == ".png" and path.stat().st_size > 5000, path
        assert _dpi(path) >= 149.9, path  # Pillow reads 150 back as 149.9994
        with PIL.open(path) as image:
            assert image.size[0] >= 600 and image.size[1] >= 450, (path, image.size)
        assert _edges_blank(path), path


def test_svg_and_pdf_figures_name_model_data_and_heads_1_based(tmp_path: Path) -> None:
    for path in _write_all(tmp_path / "svg", "svg"):
        text = path.read_text(encoding="utf-8")
        assert text.lstrip().startswith("<?xml") and MODEL in text and DATA in text, path
        assert path.stem == "curves" or "1-based" in text, path  # the curves have no head labels
    for path in _write_all(tmp_path / "pdf", "pdf"):
        assert path.read_bytes().startswith(b"%PDF") and path.stat().st_size > 2000, path


def test_heatmap_cells_carry_their_values_and_the_scatter_its_rho(tmp_path: Path) -> None:
    from probes.reports.importance.figures import write_importance_heatmaps, write_importance_scatter

    result = _importance()
    text = write_importance_heatmaps(result, tmp_path / "h.svg", title=MODEL).read_text(encoding="utf-8")
    cells = re.findall(r">([-0-9.e]+)</text>", text)
    for value in result.importance.ravel():
        assert format(value, ".2f") in cells
    for value in result.loo_effect.ravel():
        assert format(value, ".2g") in cells
    scatter = write_importance_scatter(result, tmp_path / "s.svg", title=MODEL).read_text(encoding="utf-8")
    assert "rho = 0.43 [0.12, 0.77]" in scatter and "200 resamples" in scatter
    best = np.unravel_index(np.argmax(result.importance), (3, 4))
    assert f">{best[0] + 1}-{best[1] + 1}</text>" in scatter  # the most important head is named, 1-based


def test_pruning_figure_names_selection_and_kept_heads(tmp_path: Path) -> None:
    from probes.reports.importance.figures import write_one_per_layer, write_pruning_curves

    pruning = _pruning()
    text = write_pruning_curves(pruning, tmp_path / "c.svg", title=MODEL).read_text(encoding="utf-8")
    assert SELECTION in text and "random orders: min-max band of 3" in text and "specialised-last" in text
    assert "% of heads pruned" in text and "unpruned: 1" in text
    text = write_one_per_layer(pruning.one_per_layer, tmp_path / "o.svg", title=MODEL).read_text(encoding="utf-8")
    assert "kept 1-3" in text and "kept 2-1" in text  # kept = [2, 0] 0-based


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    from probes.reports.importance.figures import write_importance_heatmaps, write_importance_scatter

    with pytest.raises(ConfigError, match=r"\.png.*found 'x\.jpg'"):
        write_importance_heatmaps(_importance(), tmp_path / "x.jpg", title=MODEL)
    with pytest.raises(InputError, match="leave-one-out"):
        write_importance_scatter(_importance(loo=False), tmp_path / "x.png", title=MODEL)
    path = write_importance_heatmaps(_importance(loo=False), tmp_path / "h.svg", title=MODEL)  # LOO panel: not run
    assert "not run" in path.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------ markdown
def _table(markdown: str, heading: str) -> list[dict[str, str]]:
    """The first Markdown table after the line starting with ``heading``, as rows of cells by header."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    header, body = rows[0], rows[2:]
    return [dict(zip(header, row)) for row in body]


def _close(text: str, value: float) -> bool:
    return abs(float(text) - value) <= 5e-4 * max(abs(value), 1e-12)  # 4 significant digits


def test_importance_markdown_numbers_parse_back() -> None:
    from probes.reports.importance.report import importance_markdown

    result = _importance()
    md = importance_markdown(result, model=MODEL, record={})
    assert MODEL in md.splitlines()[0] and DATA in md.splitlines()[0] and "1-based" in md
    assert "40 sentences" in md and "200 resamples" in md and "12 heads (3 layers x 4 heads)" in md
    for heading, key in (("## The 10 most important", result.importance), ("## The 10 largest leave-one-out",
                                                                             result.loo_effect)):
        rows = _table(md, heading)
        ranked = sorted((-key[l, h], l, h) for l in range(3) for h in range(4))[:10]  # hand ranking
        assert [r["head"] for r in rows] == [f"{l + 1}-{h + 1}" for _, l, h in ranked]
        for row, (_, l, h) in zip(rows, ranked):
            assert _close(row["importance"], result.importance[l, h])
            assert _close(row["raw importance"], result.raw_importance[l, h])
            assert _close(row["loo effect"], result.loo_effect[l, h])
            assert _close(row["loo low"], result.loo_low[l, h]) and _close(row["loo high"], result.loo_high[l, h])
    rho = re.search(r"rho = (\S+) \(95% interval (\S+) to (\S+?);", md)
    assert rho is not None
    assert [float(g) for g in rho.groups()] == [0.4321, 0.1234, 0.7654]


def test_importance_markdown_without_leave_one_out() -> None:
    from probes.reports.importance.report import importance_markdown

    md = importance_markdown(_importance(loo=False), model=MODEL, record={})
    assert "leave-one-out: not run" in md and "largest leave-one-out" not in md and "not computed" in md


def _removable_by_hand(values: list[float], fractions: list[float], higher_is_better: bool,
                       tolerance: float = 0.05) -> float:
    """The docstring of PruningResult.removable, by hand: the largest fraction with it and every step before no
    worse than the base by more than ``tolerance`` x |base| (an edge value qualifies)."""
    base, best = values[0], 0.0
    for value, fraction in zip(values, fractions):
        worse = base - value if higher_is_better else value - base
        if worse > tolerance * abs(base) + 1e-9:
            break
        best = fraction
    return best


def test_band_positions_by_hand() -> None:
    from probes.reports.importance.report import band_positions, band_summary

    pruning = _pruning()
    # loss band per step: low [1, 1.1, 1.5, 2.0, 3], high [1, 1.3, 1.7, 2.5, 3]
    assert list(band_positions(pruning, "importance")) == ["within", "below", "below", "below", "within"]
    assert list(band_positions(pruning, "specialised-last")) == ["within", "below", "within", "above", "within"]
    # accuracy band: low [.9, .7, .5, .2, .1], high [.9, .8, .6, .3, .1]
    assert list(band_positions(pruning, "specialised-last", "accuracy")) == ["within", "within", "above", "below",
                                                                              "within"]
    text = band_summary(pruning, "specialised-last")
    assert "below at 1 of 3 steps (25% pruned)" in text and "within at 1 of 3 steps (50% pruned)" in text
    assert "above at 1 of 3 steps (75% pruned)" in text and "does not stay below" in text
    assert "stays below the random band at every step" in band_summary(pruning, "importance")
    assert "stays above the random band" in band_summary(pruning, "importance", "accuracy")  # higher is better
    with pytest.raises(InputError, match="metric"):
        band_positions(pruning, "importance", "f1")
    values = pruning.values.copy()
    values[0, 2, 0] = np.nan  # importance's loss at 50% pruned not measured
    holed = dataclasses.replace(pruning, values=values)
    assert list(band_positions(holed, "importance")) == ["within", "below", "n/a", "below", "within"]
    assert "below at 2 of 3 steps (25%, 75% pruned)" in band_summary(holed, "importance")
    assert "n/a at 1 of 3 steps (50% pruned)" in band_summary(holed, "importance")
    assert "does not stay below" in band_summary(holed, "importance")


def test_pruning_markdown_numbers_parse_back() -> None:
    from probes.reports.importance.report import pruning_markdown

    pruning = _pruning()
    md = pruning_markdown(pruning, model=MODEL, record={})
    assert MODEL in md.splitlines()[0] and "1-based" in md and SELECTION in md
    assert "8 heads (2 layers x 4 heads)" in md and "5 steps of 25% of the heads" in md
    fractions = [0.0, 0.25, 0.5, 0.75, 1.0]
    heads = dict(zip(fractions, [0, 2, 4, 6, 8]))
    for row in _table(md, "## Heads removable"):
        for metric, table, higher in (("loss", _LOSS, False), ("accuracy", _ACC, True)):
            value, count = re.fullmatch(r"(\S+) \((\d+) heads\)", row[f"removable ({metric})"]).groups()
            expected = _removable_by_hand(table[row["curve"]], fractions, higher)
            assert float(value) == expected and int(count) == heads[expected], (row, metric)
    removable = {r["curve"]: r["removable (loss)"] for r in _table(md, "## Heads removable")}
    assert list(removable) == list(_LOSS)
    assert removable["importance"] == "0.5 (4 heads)" and removable["specialised-last"] == "0.25 (2 heads)"
    assert "`specialised-last` (loss; below the band is better" in md
    for metric, table in (("loss", _LOSS), ("accuracy", _ACC)):
        rows = _table(md, f"### {metric}")
        randoms = np.array([table[f"random:{s}"] for s in range(3)])
        for s, row in enumerate(rows):
            assert float(row["fraction pruned"]) == fractions[s] and int(row["heads pruned"]) == heads[fractions[s]]
            assert _close(row["random min"], randoms[:, s].min()) and _close(row["random max"], randoms[:, s].max())
            assert _close(row["random median"], float(np.median(randoms[:, s])))
            assert _close(row["importance"], table["importance"][s])
            assert _close(row["specialised-last"], table["specialised-last"][s])
    one = _table(md, "## One head per layer")
    assert [(r["layer"], r["kept head"]) for r in one] == [("1", "1-3"), ("2", "2-1")]
    assert [float(r["loss change"]) for r in one] == [0.25, 0.125]
    assert [(float(r["low"]), float(r["high"])) for r in one] == [(0.2, 0.31), (0.05, 0.2)]
    assert [float(r["accuracy"]) for r in one] == [0.81, 0.875]
    assert "loss 1, accuracy 0.9" in md
    assert "One head per layer" not in pruning_markdown(_pruning(one_per_layer=False), model=MODEL, record={})
