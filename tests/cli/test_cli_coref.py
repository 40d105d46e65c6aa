"""Tests of `probes coref` and `probes bridging` (real MiniLM on a hand-written GUM-style file)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from probes.cli import main
from probes.errors import ConfigError
from probes.heads.naming import INDEXING_NOTE


@pytest.fixture()
def tiny(fixtures_dir: Path) -> Path:
    # 2 documents: Anna ... She (pronoun), a house ... the house (nominal), a cataphor (he ... Carl),
    # a split-antecedent plural (They = Anna + Ben) and a bridging link across sentences (the door <- a house)
    return fixtures_dir / "coref" / "tiny_gum.conllu"


def test_bad_candidate_set_is_one_error_line(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["coref", "--model", "unused", "--treebank", str(tiny), "--candidates", "nouns"])
    err = capsys.readouterr().err
    assert code == 2  # refused while parsing
    assert err.strip() == ("error: Invalid value for --candidates: expected one of all, earlier, mentions, found "
                           "'nouns' (see 'probes coref --help')")


def test_bad_split_antecedents_option(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["coref", "--model", "unused", "--treebank", str(tiny), "--split-antecedents", "all"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: Invalid value for --split-antecedents: expected one of any-part, ignore, found 'all' (see 'probes "
        "coref --help')")


@pytest.mark.parametrize("command", ["coref", "bridging"])
def test_missing_corpus_is_one_error_line(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # the same error as every other command's missing --treebank, before the model ("m") loads
    assert main([command, "--model", "m", "--treebank", "/no/such/file.conllu"]) == 1
    assert capsys.readouterr().err.strip() == "error: /no/such/file.conllu: no such file"


def test_bad_direction_and_stride(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bridging", "--model", "m", "--treebank", str(tiny), "--direction", "up"]) == 2
    assert "--direction: expected one of anaphor_to_antecedent, antecedent_to_anaphor" in capsys.readouterr().err
    assert main(["coref", "--model", "m", "--treebank", str(tiny), "--stride", "0"]) == 2  # refused while parsing
    assert "'--stride': Input should be greater than or equal to 1" in capsys.readouterr().err


@pytest.mark.slow
def test_window_over_the_model_maximum(tiny: Path, minilm_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["coref", "--model", str(minilm_path), "--treebank", str(tiny), "--window", "4096",
                 "--no-progress"]) == 1
    assert "--window: expected at most the model's 512 tokens, found 4096" in capsys.readouterr().err


@pytest.mark.slow
def test_coref_end_to_end(tiny: Path, minilm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "coref"
    code = main(["coref", "--model", str(minilm_path), "--treebank", str(tiny), "--out", str(out),
                 "--no-progress", "--n-resamples", "50", "--select-on", "same"])  # 2 documents: too few to split
    printed = capsys.readouterr().out
    assert code == 0
    assert "Rule-based sieve" in printed and "numbered from 1" in printed
    assert f"Report: {out / 'coref_leaderboard.md'}" in printed
    for name in ("coref_leaderboard.md", "coref_leaderboard.csv", "coref_leaderboard.json", "scores.csv",
                 "run.json", "coref_heatmap.png", "coref_heatmaps.png"):
        assert (out / name).is_file(), name
    run = json.loads((out / "run.json").read_text())
    # evaluated: She (Anna), the house (a house), Carl (the cataphor he), and (default --split-antecedents
    # any-part) the plural They through its parts Anna and Ben
    assert {t: c["evaluated"] for t, c in run["counts"].items()} == {"pronoun": 2, "proper": 1, "nominal": 1}
    assert {t: c["via_split_antecedent"] for t, c in run["counts"].items()} == {"pronoun": 1, "proper": 0,
                                                                                "nominal": 0}
    assert {t: c["no_antecedent"] for t, c in run["counts"].items()} == {"pronoun": 1, "proper": 2, "nominal": 2}
    assert run["options"]["candidates"] == "all" and run["data"]["documents"] == 2
    assert run["options"]["split_antecedents"] == "any-part"
    assert run["definitions"]["split_antecedents"].startswith("any-part:")
    assert len(run["data"]["sha256"]) == 64 and run["versions"]["numpy"]
    rows = json.loads((out / "coref_leaderboard.json").read_text())["rows"]
    base = {r["system"]: r["accuracy"] for r in rows if r["kind"] == "baseline" and r["mention_type"] == "all"}
    # nearest: She->house x, the house->Ben x, Carl->he ok, They->the house x; head match: only the house;
    # sieve: + Carl (They: no plural mention agrees, so nearest, the house: wrong)
    assert base == pytest.approx({"Nearest mention": 1 / 4, "Head-word match": 1 / 4, "Rule-based sieve": 2 / 4})
    assert "of which via split antecedents" in (out / "coref_leaderboard.md").read_text()
    with (out / "scores.csv").open() as fh:
        heads = [r["head"] for r in csv.DictReader(fh)]
    assert len(heads) == 72 and heads[0] == "1-1" and heads[-1] == "6-12"


@pytest.mark.slow
def _held_out(tiny: Path, folder: Path) -> Path:
    """A selection corpus held out from ``tiny``: tiny_gum_halves' third document (with a bridge), alone."""
    halves = (tiny.parent / "tiny_gum_halves.conllu").read_text(encoding="utf-8")
    extra = folder / "tiny_extra.conllu"
    header = next(line for line in halves.splitlines() if line.startswith("# global.Entity"))
    doc = halves[halves.index("# newdoc id = tiny_extra"):].split("\n", 1)
    extra.write_text(f"{doc[0]}\n{header}\n{doc[1]}", encoding="utf-8")
    return extra


def test_bridging_end_to_end(tiny: Path, minilm_path: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bridging"
    assert main(["bridging", "--model", str(minilm_path), "--treebank", str(tiny), "--out", str(out),
                 "--select-on", str(_held_out(tiny, tmp_path)), "--no-progress", "--n-resamples", "50"]) == 0
    capsys.readouterr()
    run = json.loads((out / "run.json").read_text())
    assert run["counts"]["scored"] == {"0": 0, "1": 1, "2": 0, "3-5": 0, "6+": 0}
    rows = json.loads((out / "bridging_leaderboard.json").read_text())["rows"]
    first = rows[0]
    assert first["band"] == "all" and first["scored"] == 1 and first["selected_on"] == "selection split"
    # uniform attention over the 19 words of the window (5 + 6 + 5 + 3) would give 2 / 19 to "a house"
    assert first["chance_mass"] == pytest.approx(2 / 19)
    assert 0.0 <= first["mass"] <= 1.0 and first["accuracy"] in (0.0, 1.0)
    assert (out / "bridging_heatmaps.png").is_file()


@pytest.mark.parametrize(("command", "what"), [("coref", "Entity="), ("bridging", "Bridge=")])
def test_corpus_without_annotation_fails_before_the_model_loads(
    command: str, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = Path(__file__).resolve().parents[1] / "fixtures" / "corpora" / "mwt_empty.conllu"  # a treebank, no coreference
    # "--model unused" would fail to load: the annotation check must come first.
    assert main([command, "--model", "unused", "--treebank", str(plain)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {plain}: expected") and what in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_coreference_and_bridging_from_python(tiny: Path, minilm_path: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The run functions take an extractor, write nothing until asked, and a saved run reports the same files."""
    from probes.extraction.extractor import AttentionExtractor
    from probes.results import equal
    from probes.runs.coreference import BridgingRun, CoreferenceRun, bridging, coreference

    monkeypatch.chdir(tmp_path)
    ex = AttentionExtractor.from_pretrained(minilm_path, device="cpu", on_long="skip", progress=False)
    # default: split by document id; both documents of tiny_gum fall in the report half: none to choose on
    with pytest.raises(ConfigError, match="selection half of the documents holds no window.*--select-on same"):
        coreference(ex, tiny, n_resamples=50, progress=False)
    run = coreference(ex, tiny, select_on="same", n_resamples=50, progress=False)
    assert list(tmp_path.iterdir()) == []
    assert run.selection is None and run.result.units == ("tiny_story", "tiny_note")
    assert run.record.selection.mode == "same" and run.record.options.model == str(minilm_path)
    assert {t: c["evaluated"] for t, c in run.result.counts.items()} == {"pronoun": 2, "proper": 1, "nominal": 1}
    assert "Rule-based sieve" in run.format() and run.format().endswith(INDEXING_NOTE)
    table = run.to_pandas()
    assert len(table[table["kind"] == "baseline"]) == 3 * 4  # three baselines x (all + three mention types)
    loaded = CoreferenceRun.load(run.save(tmp_path / "saved"))
    assert equal(loaded, run) and loaded.format() == run.format()
    first, again = run.write(tmp_path / "a"), loaded.write(tmp_path / "b")
    for name in ("coref_leaderboard.md", "coref_leaderboard.csv", "coref_leaderboard.json", "scores.csv", "run.json"):
        assert first[name].read_bytes() == again[name].read_bytes(), name
    assert json.loads(first["run.json"].read_text())["files"][-1] == "run.json"

    links = bridging(ex, tiny, select_on=_held_out(tiny, tmp_path), n_resamples=50, progress=False)
    assert isinstance(BridgingRun.load(links.save(tmp_path / "bridging")), BridgingRun)
    assert links.tables()[0][0]["selected_on"] == "selection split" and "uniform mass" in links.format()
    assert (tmp_path / "bridging") in set(tmp_path.iterdir()) and not (tmp_path / "bridging_leaderboard.md").exists()


@pytest.mark.slow
def test_default_split_and_same_data_selection(fixtures_dir: Path, minilm_path: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Default: heads chosen on one half of the documents (tiny_extra), reported on the other (tiny_story,
    tiny_note); --select-on same: chosen on the reported data, labelled optimistic, never tested."""
    halves = fixtures_dir / "coref" / "tiny_gum_halves.conllu"
    out = tmp_path / "split"
    assert main(["coref", "--model", str(minilm_path), "--treebank", str(halves), "--out", str(out),
                 "--no-progress", "--n-resamples", "20", "--no-figures"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["selection"]["mode"] == "split" and "sha256" in run["selection"]["rule"]
    assert run["selection"]["selected_on"].endswith("selection half (1 document)")
    assert run["significance"]["method"] == "holm"
    assert "report half (2 documents)" in (out / "coref_leaderboard.md").read_text()
    same = tmp_path / "same"
    assert main(["bridging", "--model", str(minilm_path), "--treebank", str(halves), "--out", str(same),
                 "--select-on", "same", "--no-progress", "--n-resamples", "20", "--no-figures"]) == 0
    printed = capsys.readouterr().out
    run = json.loads((same / "run.json").read_text())
    assert run["selection"]["mode"] == "same" and run["significance"]["n_tests"] == 0
    assert "optimistic" in printed and run["options"]["credit"] == "any" and run["counts"]["scored"]["1"] == 2
