"""One figure-save helper: probes.reports.figures.save_figure is the only place a matplotlib figure is saved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from probes.reports.figures import DPI, _new_figure, save_figure

PACKAGE = Path(__file__).resolve().parents[2] / "probes"
PIL = pytest.importorskip("PIL.Image")


def test_savefig_is_called_in_one_place_in_the_package() -> None:
    calls = [f"{path.relative_to(PACKAGE)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "savefig(" in line]
    assert len(calls) == 1 and calls[0].startswith("reports/figures.py:"), calls


def _figure() -> Figure:
    fig = _new_figure((3.0, 2.0))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_title("a title")
    return fig


def test_tight_crops_and_untight_keeps_the_figure_size(tmp_path: Path) -> None:
    kept = save_figure(_figure(), tmp_path / "kept.png", tight=False)
    cropped = save_figure(_figure(), tmp_path / "cropped.png")
    with PIL.open(kept) as image:
        assert image.size == (3 * DPI, 2 * DPI)
    with PIL.open(cropped) as image:
        assert image.size != (3 * DPI, 2 * DPI)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_svg_has_no_date_and_keeps_text_unless_asked(tmp_path: Path) -> None:
    text = save_figure(_figure(), tmp_path / "text.svg").read_text()
    paths = save_figure(_figure(), tmp_path / "paths.svg", text_as_text=False).read_text()
    assert "<dc:date>" not in text and "<dc:date>" not in paths
    assert re.search(r"<text[^>]*>a title</text>", text)
    assert "<text" not in paths  # drawn as glyph paths
