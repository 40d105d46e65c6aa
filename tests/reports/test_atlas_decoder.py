"""The atlas of a decoder (issue 26): no NaN anywhere, "not defined for a decoder" instead of a verdict built on
NaN, causal entropy references, and the head types in heads.csv, atlas.md and the HTML cards; on the tiny GPT-2
(no BOS added) and the tiny Llama (BOS added)."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pytest

from probes.analysis.head_types import BIDIRECTIONAL_TYPES, CAUSAL_TYPES
from probes.analysis.surface import SurfaceStats
from probes.reports.atlas.text import findings
from probes.runs.atlas import Atlas, atlas
from tests.tiny_models import build

pytestmark = pytest.mark.xdist_group("atlas")

DECODER_EMPTY = ("to_sep", "sep_to_sep", "other_to_sep", "to_next", "entropy_first")


def _set_bos(folder: Path, bos: bool) -> Path:
    """Make the tokenizer of ``folder`` add BOS ``<s>`` in front of every text, or nothing."""
    from tokenizers import Tokenizer, processors

    path = folder / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    single = "<s> $A" if bos else "$A"
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.save(str(path))
    return folder


#: (family, whether its tokenizer adds BOS): each tiny decoder as built (GPT-2 without, Llama with) and changed.
CASES = [("gpt2", False), ("gpt2", True), ("llama", True), ("llama", False)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{f}-{'bos' if b else 'no-bos'}" for f, b in CASES])
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[bool, Atlas, Path]:
    family, bos = request.param
    root = tmp_path_factory.mktemp(family)
    folder = _set_bos(build(family, root), bos)
    result = atlas(folder, "sample:dev", limit=30, js_sentences=5, clusters=2, grad_sentences=3,
                   head_type_sequences=3)
    out = root / "out"
    result.write(out)
    assert (result.example.start_special[0] if result.example is not None else bos) == bos
    return bos, result, out


def _notes(out: Path) -> dict[str, str]:
    """``{column: reason}`` from the "empty in heads.csv" lines of atlas.md."""
    found = re.findall(r"^- empty in heads\.csv: (\w+): (.+)$", (out / "atlas.md").read_text(), flags=re.M)
    return dict(found)


def test_heads_csv_has_no_nan_and_every_empty_column_is_explained(written: tuple[bool, Atlas, Path]) -> None:
    bos, result, out = written
    with open(out / "heads.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 8
    notes = _notes(out)
    for row in rows:
        for column, cell in row.items():
            assert cell.lower() not in ("nan", "inf", "-inf", "none?"), (column, cell)
            if cell == "":
                assert column in notes, f"{column} is empty and the notes do not say why"
            elif column not in ("layer", "head", "head_name", "pattern", "best_relation", "best_direction",
                                "syntactic_relations", "head_types"):
                value = float(cell) if cell not in ("True", "False") else 0.0
                assert math.isfinite(value), (column, cell)
    for column in DECODER_EMPTY + (() if bos else ("to_cls",)):
        assert all(row[column] == "" for row in rows), column
        assert notes[column].startswith("not defined for a decoder"), (column, notes[column])
    if bos:  # BOS is the start special
        assert all(row["to_cls"] != "" for row in rows) and "to_cls" not in notes


def test_findings_say_not_defined_instead_of_a_verdict_on_nan(written: tuple[bool, Atlas, Path]) -> None:
    bos, result, out = written
    found = {f.topic: f for f in findings(result)}
    for f in found.values():
        assert not re.search(r"\bnan\b", f.here, flags=re.I), (f.topic, f.here)
    assert found["attention to [SEP]"].holds == "n/a" and "not defined for a decoder" in found["attention to [SEP]"].here
    assert "entropy from the first special: not defined for a decoder" in found["broad heads"].here
    assert "next-token heads: not defined for a decoder" in found["positional heads"].here
    specials = found["which layers attend to the specials"]
    assert "end special: not defined for a decoder" in specials.here and specials.holds in ("n/a", "partly")
    assert ("start special: not defined for a decoder without BOS" in specials.here) == (not bos)
    gradients = found["gradients of attention to [SEP]"]
    assert gradients.holds == "n/a"  # no end special (GPT-2), or no LM head (the bare Llama): never a verdict
    for name in ("atlas.md", "atlas.html"):
        text = (out / name).read_text()
        assert not re.search(r"[ >(]nan\b", text), name
        assert "not defined for a decoder" in text
    summary = result.format()
    assert "nan" not in summary.lower().replace("nans", "")


def test_entropy_reference_is_causal(written: tuple[bool, Atlas, Path]) -> None:
    _, result, _ = written
    surface = result.surface
    assert surface.causal and surface.n_causal == surface.n_examples > 0
    # mean over examples of mean_i ln(i + 1) lies below the encoder reference ln n of the same examples
    assert surface.uniform_entropy < 3.5  # sample sentences of about 20-40 tokens: ln n would be about 3.0-3.7
    # a random tiny decoder attends almost uniformly: its entropy is close to the causal reference
    assert np.nanmean(surface.mean("entropy")) == pytest.approx(surface.uniform_entropy, rel=0.1)


def test_head_types_reach_the_table_and_the_cards(written: tuple[bool, Atlas, Path]) -> None:
    bos, result, out = written
    assert len(result.head_types.prefix) == int(bos) and result.head_types.suffix == ()
    table = result.heads_table()
    for name in CAUSAL_TYPES:
        np.testing.assert_array_equal(table[f"{name}_score"].to_numpy(), result.head_types.score(name).ravel())
    assert not {f"{name}_score" for name in BIDIRECTIONAL_TYPES} & set(table.columns)  # not for a decoder
    assert all(set(v.split(", ")) <= set(CAUSAL_TYPES) | {"none"} for v in table["head_types"])
    html = (out / "atlas.html").read_text()
    assert "prev / dup. / induction" in html and "head types" in html
    assert "induction heads:" in (out / "atlas.md").read_text()


def test_causal_surface_statistics_by_hand() -> None:
    from tests.analysis.test_surface import token_pair

    w = [[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]]
    analysis = SurfaceStats(causal=True)
    item, attention = token_pair([w], ("<s>", "a", "b", "c"), [True, False, False, False], [False] * 4)
    analysis.update(item, attention)
    result = analysis.compute()

    def entropy(row: list[float], seen: int) -> float:  # smoothed over the row's visible positions only
        return -sum(p * math.log(p) for p in (0.9999 * a + 0.0001 / seen for a in row[:seen]))

    expected = sum(entropy(r, i + 1) for i, r in enumerate(w)) / 4
    assert result.mean("entropy")[0, 0] == pytest.approx(expected, rel=1e-5)
    assert result.uniform_entropy == pytest.approx((math.log(1) + math.log(2) + math.log(3) + math.log(4)) / 4)
    assert np.isnan(result.mean("to_next")).all() and np.isnan(result.mean("entropy_first")).all()
    assert result.mean("to_cls")[0, 0] == pytest.approx((1 + 0.5 + 0.2 + 0.1) / 4)  # BOS: the start special
    assert result.causal and result.n_causal == 1


def test_cli_head_type_sequences_zero_skips_them(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from probes.cli import app

    out = tmp_path / "cli"
    done = CliRunner().invoke(app, ["atlas", "--model", str(build("gpt2", tmp_path)), "--treebank", "sample:dev",
                                    "--limit", "8", "--js-sentences", "2", "--clusters", "2", "--grad-sentences", "0",
                                    "--head-type-sequences", "0", "--no-figures", "--out", str(out), "--no-progress"])
    assert done.exit_code == 0, done.output
    with open(out / "heads.csv", newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert "previous_token_score" not in header and "head_types" not in header
    assert "head types:" not in (out / "atlas.md").read_text()  # none asked for: no line about them
    assert "- head types" not in done.output and "[n/a]" not in done.output
    assert not (out / "figures").exists() or not any((out / "figures").iterdir())
    bad = CliRunner().invoke(app, ["atlas", "--model", "x", "--treebank", "sample:dev", "--head-type-sequences", "-1"])
    assert bad.exit_code == 2
