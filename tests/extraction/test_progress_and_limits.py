"""Progress bars that are right from the first second, and the messages of the memory bounds.

* The extractor's bar moves as each forward pass finishes its items, not once a whole buffer (16 batches)
  has run: a bar still at 0 after many seconds, then a first rate over them all, showed hours of ETA.
* The leaderboard's bars are labelled by what they cover (a pass over one data set used for selection and
  report is not "report split"), with each split's total from the start.
* An input over the attention budget but within the model's maximum is named for the budget, with the
  numbers; ``--max-attention-mb 0`` is refused before any work; a forward pass out of memory is one
  probes error naming the inputs, their tokens and the option that bounds the memory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import probes.extraction.extractor as extractor_module
from probes.corpora.types import Sentence
from probes.errors import ConfigError, OutOfMemoryError
from probes.extraction.extractor import AttentionExtractor


def _sentences(n: int, words: int = 4, prefix: str = "s") -> list[Sentence]:
    return [Sentence(f"{prefix}{k}", ("the", "dog") * (words // 2), (0,) + (1,) * (words - 1),
                     ("root",) + ("dep",) * (words - 1)) for k in range(n)]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every progress bar the extractor makes (kept, to inspect labels, totals and counts)."""
    made: list[Any] = []
    real = extractor_module.progress_bar

    def recording(*args: Any, **kwargs: Any) -> Any:
        bar = real(*args, **{**kwargs, "progress": True})
        made.append(bar)
        return bar

    monkeypatch.setattr(extractor_module, "progress_bar", recording)
    return made


def test_the_bar_moves_with_each_forward_pass(tiny_bert: Path, bars: list[Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    extractor = AttentionExtractor.from_pretrained(tiny_bert, batch_size=2, device="cpu", progress=True)
    seen: list[int] = []  # the bar's count as each forward pass starts
    forward = extractor._forward
    monkeypatch.setattr(extractor, "_forward", lambda *a, **k: (seen.append(bars[-1].n), forward(*a, **k))[1])
    got = list(extractor.iter_attention(_sentences(7), desc="report split (x)"))
    assert len(got) == 7 and bars[-1].total == 7 and bars[-1].n == 7 and bars[-1].unit == "sent"
    assert bars[-1].desc == "report split (x)"
    assert seen == [0, 2, 4, 6]  # one buffer of 4 batches: counted batch by batch, not all at the end


def test_leaderboard_bars_say_what_they_cover(tiny_bert: Path, bars: list[Any]) -> None:
    from probes.runs.leaderboard_inputs import FromModel, from_model

    extractor = AttentionExtractor.from_pretrained(tiny_bert, batch_size=4, device="cpu", progress=True)
    report = from_model(FromModel(extractor, _sentences(6))).report_pairs
    assert len(list(report)) == 6  # one pass, selected on a half: not "report split"
    assert [(b.desc, b.total, b.n) for b in bars] == [("report data (selection and report)", 6, 6)]
    bars.clear()
    inputs = from_model(FromModel(extractor, _sentences(5), _sentences(3, prefix="v")))
    report, select = inputs.report_pairs, inputs.select_pairs
    assert select is not None and len(list(select)) == 3 and len(list(report)) == 5
    assert [(b.desc, b.total, b.n) for b in bars] == [("selection split (selection data)", 3, 3),
                                                       ("report split (report data)", 5, 5)]


def test_an_input_over_the_budget_is_named_for_the_budget(tiny_bert: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    extractor = AttentionExtractor.from_pretrained(tiny_bert, batch_size=4, device="cpu", progress=False,
                                                   on_long="window", max_attention_mb=8000 * 8 / 2**20)
    with caplog.at_level(logging.WARNING, logger="probes"):
        got = [s.sent_id for s, _ in extractor.iter_attention(_sentences(1, 40, "b") + _sentences(1, 10, "c"))]
    assert got == ["c0"] and extractor.report.over_budget == ["b0"]
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("b0:")]
    assert line.startswith("b0: 42 tokens (40 words) need 0.1 MB of attention at once, over the extractor's "
                           "0.0 MB (half of --max-attention-mb 0.0610352), not over the model's 64 tokens: skipped")
    assert "windows' combined maps do not fit" in line
    summary = extractor.report.summary()
    assert "over 64 tokens or the attention budget: 1 skipped" in summary
    assert "over the attention budget (0.0610352 MB): b0" in summary


@pytest.mark.parametrize("mb", [0, 0.0, -5.0])
def test_a_zero_or_negative_attention_budget_is_refused_before_any_work(mb: float) -> None:
    from probes.runs.extraction_options import ExtractionOptions
    from probes.runs.leaderboard import leaderboard

    with pytest.raises(ConfigError, match="--max-attention-mb.: expected a positive number of MB, found"):
        leaderboard("no/such/model", "no/such.conllu", extraction=ExtractionOptions(max_attention_mb=mb))


def test_the_cli_refuses_max_attention_mb_0(capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    assert main(["leaderboard", "--model", "no/such/model", "--treebank", "no/such.conllu",
                 "--max-attention-mb", "0"]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected a positive number of MB, found 0.0" in err


def test_a_forward_pass_out_of_memory_names_the_inputs(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extractor = AttentionExtractor.from_pretrained(tiny_bert, batch_size=2, device="cpu", progress=False)

    def exhausted(*args: Any, **kwargs: Any) -> None:
        raise MemoryError("Unable to allocate 6.71 GiB for an array")

    monkeypatch.setattr(extractor, "_forward", exhausted)
    with pytest.raises(OutOfMemoryError) as got:
        list(extractor.iter_attention(_sentences(1, 30, "long") + _sentences(1, 4, "short")))
    assert str(got.value) == ("sentence 'long0', 'short0' (32 tokens, batch of 2): the model ran out of memory "
                              "(MemoryError: Unable to allocate 6.71 GiB for an array); --max-attention-mb is 2048 "
                              "MB: lower it, and such inputs are handled by --on-long, or lower --batch-size / "
                              "--max-batch-tokens")
    assert isinstance(got.value, MemoryError)
