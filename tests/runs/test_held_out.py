"""Held out means held out: selection data that overlap the report data are refused before any model work, and
run.json records the overlap measured when they are held out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import probes.extraction.loading as loading
from probes.errors import ConfigError

pytest.importorskip("torch")



@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any model load fails the test: the refusal must come before it."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded before the overlap was refused")

    monkeypatch.setattr(loading, "load_resolved", refuse)


def _sample(split: str) -> Path:
    from probes.corpora.registry import resolve_treebank

    return Path(resolve_treebank(f"sample:{split}"))


def _subset(source: Path, target: Path, n: int) -> Path:
    """The first ``n`` sentences of a CoNLL-U file (blocks separated by blank lines), as another file."""
    blocks = source.read_text(encoding="utf-8").strip().split("\n\n")
    target.write_text("\n\n".join(blocks[:n]) + "\n\n", encoding="utf-8")
    return target


def test_the_same_file_on_both_sides_is_refused_before_the_model_loads(tiny_bert, tmp_path, capsys, no_model):
    from probes.cli import main

    test = _sample("test")
    copy = tmp_path / "renamed.conllu"
    copy.write_bytes(test.read_bytes())  # the same data under another name
    for select in (test, copy):
        code = main(["leaderboard", "--model", str(tiny_bert), "-t", str(test), "--select-on", str(select),
                     "--out", str(tmp_path / "out"), "--no-progress", "--device", "cpu"])
        err = capsys.readouterr().err
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert "not held out" in err and "same" in err and "--select-on same" in err
    assert not (tmp_path / "out" / "run.json").exists()


def test_a_subset_of_the_report_data_is_refused(tiny_bert, tmp_path, no_model):
    from probes.runs.leaderboard import leaderboard

    test = _sample("test")
    with pytest.raises(ConfigError, match="not held out") as info:
        leaderboard(str(tiny_bert), str(test), select_on=str(_subset(test, tmp_path / "part.conllu", 10)),
                    device="cpu")
    assert "10 of the 10 selection sentences" in str(info.value) or "sentence ids" in str(info.value)


def test_held_out_data_run_and_record_the_overlap(tiny_bert, tmp_path):
    from probes.runs.leaderboard import leaderboard

    board = leaderboard(str(tiny_bert), "sample:test", select_on="sample:dev", device="cpu", limit=12,
                        min_count=1)
    overlap = board.record.details.overlap
    assert overlap is not None and overlap["overlapping"] is False
    assert overlap["select_sentences"] == 12 and overlap["report_sentences"] == 12
    board.write(tmp_path / "out", figures=False)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["overlap"]["shared_sentence_ids"] == 0


def test_stores_of_the_same_data_are_refused(tiny_bert, tmp_path):
    from probes.cli import main
    from probes.runs.leaderboard import leaderboard

    for name in ("a", "b"):
        assert main(["extract", "--model", str(tiny_bert), "--treebank", "sample:dev", "--store",
                     str(tmp_path / name), "--no-progress", "--device", "cpu", "--limit", "8"]) == 0
    with pytest.raises(ConfigError, match=r"--select-store b \(sample-dev.conllu\) is not held out") as info:
        leaderboard(store=tmp_path / "a", select_store=tmp_path / "b")
    assert "same 8 sentences" in str(info.value)


def test_coreference_on_the_same_corpus_is_refused_before_the_model_loads(tiny_bert, fixtures_dir, no_model):
    from probes.runs.coreference import coreference

    corpus = fixtures_dir / "coref" / "tiny_gum.conllu"
    with pytest.raises(ConfigError, match="tiny_gum.conllu is not held out") as info:
        coreference(str(tiny_bert), corpus, select_on=corpus, window=16, device="cpu")
    assert "documents are on both sides" in str(info.value) or "same" in str(info.value)


def test_a_probe_selecting_on_its_evaluation_data_is_refused_before_the_model_loads(tiny_bert, tmp_path, no_model):
    from probes.runs.probing import probe

    test = _sample("test")
    with pytest.raises(ConfigError, match="not held out"):
        probe(str(tiny_bert), "sample:dev", str(test), select_on=str(_subset(test, tmp_path / "p.conllu", 5)),
              kinds=["per-head"], device="cpu")
