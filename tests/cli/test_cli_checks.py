"""A thin CLI: each check runs once per request, in the library; extraction options travel as one argument.

The checks are counted by wrapping them (the wrappers call the real check, so a bad value still fails).
``check_options`` is counted wherever it can be called from (the run's check, and the extractor's own
construction, which a run loading its model by name no longer reaches): a request checks its extractor options
once, in the run, before any work (tests/test_validate_once.py counts it for every command).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from probes.cli import app
from probes.errors import ConfigError
from probes.runs.extraction_options import DEFAULT_ATTENTION_MB, ExtractionOptions
from tests.cli.test_cli_syntax import tiny_model  # noqa: F401  (the 2-layer, 2-head BERT fixture)

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample"
DEV, TEST = str(SAMPLE / "sample-dev.conllu"), str(SAMPLE / "sample-test.conllu")
GUM_STYLE = Path(__file__).resolve().parents[1] / "fixtures" / "coref" / "tiny_gum.conllu"


def _count(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, calls: Counter[str]) -> None:
    """Replace ``owner.name`` by a wrapper that counts its calls by calling module, then calls it."""
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[sys._getframe(1).f_globals["__name__"]] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


def _count_check_options(monkeypatch: pytest.MonkeyPatch, calls: Counter[str]) -> None:
    """Count ``check_options`` in its own module and where the extractor holds it by name."""
    import probes.extraction.checks as checks_module
    import probes.extraction.extractor as extractor_module

    _count(monkeypatch, checks_module, "check_options", calls)
    monkeypatch.setattr(extractor_module, "check_options", checks_module.check_options)


def _invoke(args: list[str]) -> Any:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_one_leaderboard_request_checks_each_thing_once(tiny_model: Path, tmp_path: Path,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: check_analyses ran 3 times, the sources twice (CLI and library), check_options 3 times."""
    import probes.runs.leaderboard as leaderboard_module

    analyses, sources, options = Counter[str](), Counter[str](), Counter[str]()
    _count(monkeypatch, leaderboard_module, "check_analyses", analyses)
    _count(monkeypatch, leaderboard_module, "_check_sources", sources)
    _count_check_options(monkeypatch, options)
    _invoke(["leaderboard", "--model", str(tiny_model), "--treebank", DEV, "--out", str(tmp_path / "run"),
             "--min-count", "10", "--no-figures", "--no-progress", "--device", "cpu", "--analyses", "specials"])
    assert sum(analyses.values()) == 1 and sum(sources.values()) == 1
    assert options == {"probes.runs.extraction_options": 1}
    import probes.cli.syntax as cli

    assert not hasattr(cli, "_check_sources") and not hasattr(cli, "check_analyses")  # one copy: the library's


def test_one_coref_request_checks_the_extractor_options_once(tiny_model: Path, tmp_path: Path,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.runs.anaphora_inputs as anaphora_module

    options, run_options = Counter[str](), Counter[str]()
    _count_check_options(monkeypatch, options)
    _count(monkeypatch, anaphora_module, "check_run_options", run_options)
    _invoke(["coref", "--model", str(tiny_model), "--treebank", str(GUM_STYLE), "--out", str(tmp_path / "coref"),
             "--select-on", "same", "--n-resamples", "20", "--no-figures", "--no-progress", "--device", "cpu"])
    assert options == {"probes.runs.extraction_options": 1}
    assert sum(run_options.values()) == 1


def test_extraction_flags_reach_the_extractor_as_one_argument(tiny_model: Path, tmp_path: Path,  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--dtype, --max-batch-tokens, --max-attention-mb reach the run function as ExtractionOptions, then the model."""
    import probes.runs.leaderboard as leaderboard_module

    seen: dict[str, Any] = {}
    real = leaderboard_module.leaderboard

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(leaderboard_module, "leaderboard", spy)
    out = tmp_path / "run"
    _invoke(["leaderboard", "--model", str(tiny_model), "--treebank", DEV, "--out", str(out), "--min-count", "10",
             "--no-figures", "--no-progress", "--device", "cpu", "--dtype", "bfloat16", "--max-batch-tokens", "256",
             "--max-attention-mb", "5000"])
    assert seen["extraction"] == ExtractionOptions(dtype="bfloat16", max_batch_tokens=256, max_attention_mb=5000.0)
    extractor = json.loads((out / "run.json").read_text())["extractor"]
    assert (extractor["dtype"], extractor["max_batch_tokens"], extractor["max_attention_mb"]) == ("bfloat16", 256, 5000.0)


def test_extraction_options_passed_to_the_library_reach_the_extractor(tiny_model: Path) -> None:  # noqa: F811
    from probes.runs.leaderboard import leaderboard

    board = leaderboard(tiny_model, TEST, select_on="same", min_count=10, device="cpu", limit=10,
                        extraction=ExtractionOptions(dtype="bfloat16", max_batch_tokens=64, max_attention_mb=50.0))
    info = board.record.extractor
    assert (info["dtype"], info["max_batch_tokens"], info["max_attention_mb"]) == ("bfloat16", 64, 50.0)
    plain = leaderboard(tiny_model, TEST, select_on="same", min_count=10, device="cpu", limit=10)
    info = plain.record.extractor  # no options: the extractor's own defaults, as before
    assert (info["dtype"], info["max_batch_tokens"], info["max_attention_mb"]) == ("float32", None, DEFAULT_ATTENTION_MB)


@pytest.mark.parametrize("options, message", [
    (ExtractionOptions(dtype="float8"), "dtype must be one of"),
    (ExtractionOptions(max_batch_tokens=0), "max_batch_tokens must be a whole number >= 1"),
    (ExtractionOptions(max_attention_mb=-1.0), "max_attention_mb must be a number of MB > 0"),
])
def test_bad_extraction_options_fail_before_any_work(options: ExtractionOptions, message: str) -> None:
    from probes.runs.coreference import coreference
    from probes.runs.leaderboard import leaderboard

    # the data do not exist: the option is refused before anything is read or loaded
    with pytest.raises(ConfigError, match=message):
        leaderboard("no/such/model", "no/such.conllu", extraction=options)
    with pytest.raises(ConfigError, match=message):
        coreference("no/such/model", "no/such.conllu", extraction=options)


def test_no_context_variable_carries_options() -> None:
    import probes.runs.inputs as inputs

    assert not hasattr(inputs, "extraction_options") and not hasattr(inputs, "_EXTRACTION")
    assert dataclasses.asdict(ExtractionOptions()) == {"dtype": "float32", "max_batch_tokens": None,
                                               "max_attention_mb": DEFAULT_ATTENTION_MB, "device_map": None,
                                               "source": "weights"}


def test_default_attention_budget_is_the_extractors() -> None:
    from probes.cli import options
    from probes.extraction.extractor import DEFAULT_ATTENTION_MB as EXTRACTOR_DEFAULT

    assert DEFAULT_ATTENTION_MB == EXTRACTOR_DEFAULT == options.MAX_ATTENTION_MB


def test_leaderboard_prints_timings_from_the_result_not_from_run_json(tiny_model: Path, tmp_path: Path,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The printed timings come from ``board.record``: a run.json emptied right after writing changes nothing."""
    from probes.runs.leaderboard import Leaderboard

    real = Leaderboard.write

    def write_then_empty(self: Leaderboard, *args: Any, **kwargs: Any) -> dict[str, Path]:
        paths = real(self, *args, **kwargs)
        paths["run.json"].write_text("{}", encoding="utf-8")
        return paths

    monkeypatch.setattr(Leaderboard, "write", write_then_empty)
    printed = _invoke(["leaderboard", "--model", str(tiny_model), "--treebank", DEV, "--out", str(tmp_path / "run"),
                       "--min-count", "10", "--no-figures", "--no-progress", "--device", "cpu"]).output
    line = next(line for line in printed.splitlines() if line.startswith("Time: extraction "))
    assert " s, scoring " in line and " s, writing " in line and line.endswith(" s.")
    assert "%" not in line and "overhead" not in printed  # plain times, never a ratio to a near-zero time


def test_the_times_read_as_plain_words() -> None:
    from types import SimpleNamespace

    from probes.cli.syntax import _timings

    record = SimpleNamespace(extraction_s=0.0004, scoring_s=12.4, writing_s=None)
    assert _timings(record, 150.2, "reading the store") == ("Time: reading the store under 0.1 s, scoring 12 s, "
                                                             "writing 2 min 30 s.")
