"""Issue 11 item 11: figures at >= 150 dpi, model and data in every title, png / svg / pdf, nothing clipped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

PIL = pytest.importorskip("PIL.Image")


def _dpi(path: Path) -> float:
    with PIL.open(path) as image:
        return float(image.info["dpi"][0])


def _size(path: Path) -> tuple[int, int]:
    with PIL.open(path) as image:
        return image.size


def _edges_blank(path: Path, band: int = 2) -> bool:
    """Whether the outermost ``band`` pixel columns and rows are all background (nothing runs off the image)."""
    with PIL.open(path) as image:
        pixels = np.asarray(image.convert("L"))
    edges = np.concatenate([pixels[:, :band].ravel(), pixels[:, -band:].ravel(), pixels[:band].ravel(),
                            pixels[-band:].ravel()])
    return bool(edges.min() >= 250)


def _board(model: str = "tiny-bert-model", data: str = "ewt-dev-data"):
    from probes.runs.leaderboard import leaderboard_from_pairs
    from tests.runs.test_leaderboard import _pairs

    return leaderboard_from_pairs(_pairs(3, n_sent=20), select_pairs=_pairs(4, n_sent=20), report_name=data,
                                  select_name="ewt-train-data", min_count=1,
                                  record={"command": "probes leaderboard", "model": model})


def test_every_leaderboard_png_is_at_least_150_dpi_and_not_clipped(tmp_path: Path) -> None:
    paths = _board().write(tmp_path)
    pngs = [p for p in paths.values() if p.suffix == ".png"]
    assert len(pngs) >= 3
    for png in pngs:
        assert _dpi(png) >= 149.9, png  # Pillow reads 150 back as 149.9994
        width, height = _size(png)
        if png.name != "overview.png":  # a heatmap: at least 4 x 2 inches at 150 dpi
            assert width >= 600 and height >= 300, (png, width, height)
        assert _edges_blank(png), png


def test_svg_and_pdf_are_written_when_asked_and_titles_name_model_and_data(tmp_path: Path) -> None:
    board = _board()
    svg = board.write(tmp_path / "svg", figure_format="svg")
    names = sorted(str(p.relative_to(tmp_path / "svg")) for p in svg.values() if p.parent.name == "figures")
    assert names and all(n.endswith(".svg") for n in names)
    assert not list((tmp_path / "svg").rglob("*.png"))
    assert "](figures/overview.svg)" in (tmp_path / "svg" / "leaderboard.md").read_text(encoding="utf-8")
    for path in (tmp_path / "svg" / "figures").glob("*.svg"):
        text = path.read_text(encoding="utf-8")
        assert text.lstrip().startswith("<?xml") and "tiny-bert-model" in text and "ewt-dev-data" in text, path
    board.write(tmp_path / "pdf", figure_format="pdf")
    pdfs = list((tmp_path / "pdf" / "figures").glob("*.pdf"))
    assert pdfs and all(p.read_bytes().startswith(b"%PDF") for p in pdfs)


def test_heatmap_writer_titles_fit_a_narrow_figure(tmp_path: Path) -> None:
    from probes.reports.figures import HeatmapWriter

    with HeatmapWriter(2, 4, note="a-rather-long-model-name on a-rather-long-treebank-name; red box: head "
                                  "selected on another-long-treebank-name") as writer:
        path = writer.write(np.random.default_rng(0).random((2, 4)), tmp_path / "h.png",
                            title="nmod:poss (head_to_dep), n=12345: head 2-4 45.6%, best baseline 40.1%, a long title")
    assert _dpi(path) >= 149.9 and _edges_blank(path)


def test_attn_weights_title_is_not_cut_at_the_edges(tmp_path: Path) -> None:
    """Before: the overview's one-line title ran past both edges of a two-panel figure."""
    from probes.reports.probing import attn_weight_figure

    weights = np.random.default_rng(1).normal(size=(2, 6, 12))
    paths = attn_weight_figure(weights, tmp_path, subject="all-MiniLM-L6-v2 on ud:en_ewt:test")
    path = paths["figures/probe_attn_weights.png"]
    assert _dpi(path) >= 149.9 and _edges_blank(path)
    svg = attn_weight_figure(weights, tmp_path, subject="all-MiniLM-L6-v2 on ud:en_ewt:test", fmt="svg")
    text = svg["figures/probe_attn_weights.svg"].read_text(encoding="utf-8")
    assert "all-MiniLM-L6-v2" in text and "ud:en_ewt:test" in text


def test_coreference_figures_name_model_and_corpus(tmp_path: Path) -> None:
    from probes.reports.coreference import write_heatmaps

    panels = {"all": np.random.default_rng(2).random((2, 4)), "pronoun": np.random.default_rng(3).random((2, 4))}
    paths = write_heatmaps(tmp_path, "coref", panels, title="Antecedent selection: tiny-model on gum_dev.conllu",
                           label="accuracy", baseline=0.5, figure_format="svg")
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert path.suffix == ".svg" and "tiny-model" in text and "gum_dev.conllu" in text
    png = write_heatmaps(tmp_path, "coref", panels, title="Antecedent selection: tiny-model on gum_dev.conllu",
                         label="accuracy", baseline=0.5)
    assert all(_dpi(p) >= 149.9 and _edges_blank(p) for p in png)
