"""Progress that tells the truth from the first second (issue 38): :mod:`probes.progress`.

* Where stderr is not a terminal (a log, a pipe, pytest's capture) every bar and stage line is a plain line: no
  carriage return, no escape code; a run says what it loads before its first bar and that it writes after its last.
* Two bars that run at once (``probes match``) label every line they write, so their lines never mix.
* With progress off nothing at all reaches stderr; in a terminal the bars are tqdm's; in a notebook without
  ipywidgets, tqdm's text bars and no "IProgress not found" warning.
* transformers' own bars ("Loading weights") are silenced for each load and its switch is left as it was.

Order and content are checked, never time.
"""

from __future__ import annotations

import io
import sys
import types
import warnings
from pathlib import Path

import pytest

from probes import progress

ESCAPES = ("\r", "\x1b[")


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("progress") / "bert")


@pytest.fixture(scope="module")
def bert_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("progress-b") / "bert", seed=1)


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class _Counting(io.StringIO):
    """A stderr (not a terminal) that counts its writes."""

    writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)


def _plain(err: str) -> list[str]:
    """The lines of ``err``, after checking that none holds a carriage return or an escape code."""
    for code in ESCAPES:
        assert code not in err, f"{code!r} in plain progress output:\n{err}"
    return err.splitlines()


# ------------------------------------------------------------------------------ the module itself
def test_plain_lines_start_step_by_tenths_and_end(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "MIN_GAP_S", 0.0)  # every tenth gets its line (the gap is a rate limit only)
    with progress.bar("extraction", total=20, unit="sent") as shown:
        for _ in range(20):
            shown.update(1)
    lines = _plain(capsys.readouterr().err)
    assert lines[0] == "extraction: 0/20 sentences"
    assert lines[1:-1] == [f"extraction: {n}/20 sentences" for n in range(2, 21, 2)]
    assert lines[-1].startswith("extraction: 20/20 sentences, done in ") and lines[-1].endswith(" s")


def test_a_plain_bar_writes_a_few_lines_however_many_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost: 100,000 updates write the start line, ten tenths and the final line, not a line per update."""
    stream = _Counting()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(progress, "MIN_GAP_S", 0.0)
    shown = progress.bar("many", total=100_000)
    for _ in range(100_000):
        shown.update(1)
    shown.close()
    assert stream.writes == 12 and len(stream.getvalue().splitlines()) == 12


def test_a_bar_without_a_total_and_one_stopped_early_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.bar("store", unit="sent") as shown:
        shown.update(7)
    items = progress.iterate(range(10), "evaluate", unit="sent")
    next(items), next(items)
    items.close()  # the consumer stopped at the 2nd of 10 (an item counts once the next one is asked for)
    lines = _plain(capsys.readouterr().err)
    assert lines[0] == "store: 0 sentences" and lines[1].startswith("store: 7 sentences, done in ")
    assert lines[2] == "evaluate: 0/10 sentences" and lines[3].startswith("evaluate: 1/10 sentences, stopped in ")


def test_close_all_ends_open_bars_before_an_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    shown = progress.bar("report split", total=5, unit="sent")
    shown.update(3)
    progress.close_all()
    shown.close()  # closed already: no second final line
    lines = _plain(capsys.readouterr().err)
    assert lines[0] == "report split: 0/5 sentences"
    assert len(lines) == 2 and lines[1].startswith("report split: 3/5 sentences, stopped in ")


def test_progress_off_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    progress.stage("loading model x", progress=False)
    with progress.bar("extraction", total=3, progress=False) as shown:
        shown.update(3)
        shown.set_postfix_str("loss 1.0")
    assert shown.n == 3
    assert list(progress.iterate([1, 2], "evaluate", progress=False)) == [1, 2]
    assert capsys.readouterr().err == ""


def test_other_ranks_of_a_launch_write_nothing(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RANK", "1")
    progress.stage("loading model x")
    with progress.bar("extraction", total=3) as shown:
        shown.update(3)
    assert capsys.readouterr().err == ""


def test_a_terminal_gets_tqdm_bars_and_stage_lines_above_them(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    assert progress.mode() == "terminal"
    with progress.bar("extraction", total=3, unit="sent") as shown:
        progress.stage("loading model x")
        shown.update(3)
    out = stream.getvalue()
    assert "\r" in out and "extraction: 100%" in out and "3/3" in out  # tqdm's bar, redrawn in place
    assert "loading model x\n" in out


def test_a_notebook_without_ipywidgets_gets_text_bars_and_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import tqdm.notebook as notebook
    from tqdm.std import tqdm as text_bar

    kernel = types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: kernel))
    monkeypatch.setattr(notebook, "IProgress", None)  # what tqdm.notebook finds without ipywidgets
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    assert progress.mode() == "notebook"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tqdm.auto would warn "IProgress not found" here
        with progress.bar("extraction", total=2) as shown:
            shown.update(2)
    assert type(shown) is text_bar and "extraction: 100%" in stream.getvalue()
    monkeypatch.setattr(notebook, "IProgress", object)  # ipywidgets installed: the widget bar
    assert progress._tqdm_class() is notebook.tqdm


# ------------------------------------------------------------------------------ the commands
def test_a_leaderboard_in_a_log_is_plain_lines_in_order(bert: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    code = main(["leaderboard", "-m", str(bert), "-t", "sample:dev", "--limit", "12", "--min-count", "2",
                 "--no-figures", "--out", str(tmp_path / "board")])
    lines = _plain(capsys.readouterr().err)
    assert code == 0, lines
    bars = [k for k, line in enumerate(lines) if line.startswith("sample:dev (selection and report): ")]
    loading = lines.index(f"loading model {bert}")
    writing = lines.index(f"writing report to {tmp_path / 'board'}")
    assert lines[0] == "reading treebank sample:dev"  # the first line comes once the options are checked
    assert lines.index("reading treebank sample:dev") < loading < bars[0]  # loading said before extraction
    assert lines[bars[0]] == "sample:dev (selection and report): 0/12 sentences"
    assert lines[bars[-1]].startswith("sample:dev (selection and report): 12/12 sentences, done in ")
    assert bars[-1] < lines.index("scoring: intervals, tests and near ties of every relation") < writing
    assert writing == len(lines) - 1  # nothing after the report is written but the report itself (stdout)
    assert not any("Loading weights" in line for line in lines)  # transformers' own bar, silenced


def test_a_leaderboard_without_progress_writes_nothing_to_stderr(bert: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    code = main(["leaderboard", "-m", str(bert), "-t", "sample:dev", "--limit", "8", "--min-count", "2",
                 "--no-figures", "--no-progress", "--out", str(tmp_path / "board")])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == "" and "Report:" in captured.out


def test_two_match_bars_label_every_line(bert: Path, bert_b: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    code = main(["match", "-m", str(bert), "-m", str(bert_b), "-t", "sample:dev", "--limit", "10",
                 "--n-resamples", "5", "--min-count", "2", "--no-figures", "--out", str(tmp_path / "match")])
    lines = _plain(capsys.readouterr().err)
    assert code == 0, lines
    counted = [line for line in lines if "/10 sentences" in line]
    assert counted and all(line.startswith(("model A: ", "model B: ")) for line in counted)
    assert all(line.count("model ") == 1 for line in counted)  # one bar per line: never two bars mixed
    for label in ("model A", "model B"):
        mine = [line for line in counted if line.startswith(label)]
        assert mine[0] == f"{label}: 0/10 sentences" and ", done in " in mine[-1]
    loads = [lines.index(f"loading model {m}") for m in (bert, bert_b)]
    first_bar = lines.index(counted[0])
    assert max(loads) < first_bar < lines.index(f"writing report to {tmp_path / 'match'}")
    assert lines.index("matching heads: distances, 5 resamples, profiles and roles") > lines.index(counted[-1])


def test_extraction_in_a_terminal_draws_a_bar(bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.corpora.types import Sentence
    from probes.extraction.extractor import AttentionExtractor

    extractor = AttentionExtractor.from_pretrained(bert, device="cpu", progress=True)
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    sentences = [Sentence(f"s{k}", ("the", "dog", "sat"), (2, 0, 2), ("det", "root", "x")) for k in range(3)]
    assert len(list(extractor.iter_attention(sentences, desc="report split (x)"))) == 3
    out = stream.getvalue()
    assert "\r" in out and "report split (x): 100%" in out


@pytest.mark.parametrize("enabled", [True, False])
def test_transformers_bars_are_silenced_per_load_and_restored(bert: Path, enabled: bool,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    from probes.extraction.loading import load_pretrained

    before = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        state = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
        load_pretrained(bert, progress=True)
        load_pretrained(bert, progress=True)  # a second checkpoint: a second line of ours, no bar of theirs
        err = capsys.readouterr().err
        assert _plain(err) == [f"loading model {bert}"] * 2 and "Loading weights" not in err
        assert (hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()) == state
    finally:
        (hf_logging.enable_progress_bar if before[0] else hf_logging.disable_progress_bar)()
        (hub_utils.disable_progress_bars if before[1] else hub_utils.enable_progress_bars)()


def test_the_demo_shows_progress_by_default() -> None:
    """The demo ran 30 s in silence on a terminal: its progress now defaults on, like every other command's."""
    import typer.main

    from probes.cli import app

    demo = typer.main.get_command(app).commands["demo"]  # type: ignore[attr-defined]  # a click Group
    [switch] = [p for p in demo.params if p.name == "progress"]
    assert switch.default is True
