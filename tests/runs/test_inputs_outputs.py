"""Issue 11 items 3, 9, 10: inputs named by id everywhere, output folders never overwritten silently,
run records that say how a run was started, and progress bars labelled by phase with totals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from probes.corpora.types import Sentence
from probes.errors import ConfigError

LONG_ID = "long-600"


def _short(k: int) -> Sentence:
    return Sentence(f"t{k}", ("the", "dog", "barked", "."), (2, 3, 0, 3), ("det", "nsubj", "root", "punct"))


def _long(n: int = 600) -> Sentence:
    """A sentence of ``n`` words, far over the tiny model's 64 tokens."""
    return Sentence(LONG_ID, ("dog",) * n, (0,) + (1,) * (n - 1), ("root",) + ("dep",) * (n - 1))


def _conllu(sentences: list[Sentence], path: Path) -> Path:
    lines = []
    for s in sentences:
        lines.append(f"# sent_id = {s.sent_id}")
        for i, (word, head, rel) in enumerate(zip(s.words, s.heads, s.relations), start=1):
            lines.append(f"{i}\t{word}\t{word}\tX\t_\t_\t{head}\t{rel}\t_\t_")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("tiny") / "bert")


# ---------------------------------------------------------------------------------- item 3: long inputs
def test_long_sentence_is_named_in_console_report_and_run_json(tiny_bert: Path, tmp_path: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    """Before: only a transformers warning mentioned it; run.json said skipped_truncated 0 and n_skipped 1."""
    from probes.cli import main

    report = _conllu([_short(k) for k in range(4)] + [_long()], tmp_path / "report.conllu")
    select = _conllu([_short(10 + k) for k in range(3)], tmp_path / "select.conllu")
    out = tmp_path / "out"
    code = main(["leaderboard", "-m", str(tiny_bert), "--treebank", str(report), "--select-on", str(select),
                 "--out", str(out), "--min-count", "1", "--no-progress", "--no-figures", "--device", "cpu"])
    captured = capfd.readouterr()
    assert code == 0, captured.err
    console = [line for line in captured.out.splitlines() if LONG_ID in line]
    assert console and "4 of 5 sentences analysed" in console[0] and "1 skipped" in console[0]
    assert "Token indices sequence length" not in captured.err  # reported by us, by id, not by transformers
    md = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert LONG_ID in md and "4 of 5 sentences analysed" in md
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    inputs = run["inputs"]["report"]
    assert (inputs["seen"], inputs["analysed"], inputs["skipped"], inputs["truncated"]) == (5, 4, [LONG_ID], [])
    assert run["inputs"]["select"]["seen"] == run["inputs"]["select"]["analysed"] == 3
    assert inputs["seen"] == inputs["analysed"] + inputs["n_skipped"] + inputs["n_truncated"]
    assert run["counts"]["report"]["sentences"] == inputs["analysed"]  # one story in every section
    assert run["extraction_report"]["skipped"] == [LONG_ID] and "skipped_truncated" not in run["counts"]["report"]


@pytest.mark.parametrize("on_long, field, analysed", [("truncate", "truncated", 2), ("window", "windowed", 3)])
def test_truncated_and_windowed_sentences_are_named(tiny_bert: Path, on_long: str, field: str, analysed: int) -> None:
    from probes.extraction.extractor import AttentionExtractor
    from probes.runs.leaderboard import leaderboard

    extractor = AttentionExtractor.from_pretrained(tiny_bert, device="cpu", progress=False, on_long=on_long)
    board = leaderboard(extractor, [_short(0), _long(90), _short(1)], min_count=1, select_on="same")
    inputs = board.record.inputs["report"]
    assert inputs[field] == [LONG_ID] and (inputs["seen"], inputs["analysed"]) == (3, analysed)
    assert LONG_ID in board.notes() and field[:6] in board.notes()


def test_split_selection_on_too_little_data_says_what_to_do(tiny_bert: Path) -> None:
    from probes.extraction.extractor import AttentionExtractor
    from probes.runs.leaderboard import leaderboard

    extractor = AttentionExtractor.from_pretrained(tiny_bert, device="cpu", progress=False)
    one = [_short(0)]  # one sentence: one of the two halves is empty
    with pytest.raises(ConfigError, match="half of the data holds no analysed sentence.*--select-on same"):
        leaderboard(extractor, one, min_count=1)


# ---------------------------------------------------------------------------------- item 9: outputs
def _board(command: str = "probes leaderboard"):
    from probes.runs.leaderboard import leaderboard_from_pairs
    from tests.runs.test_leaderboard import _pairs

    return leaderboard_from_pairs(_pairs(1, n_sent=12), min_count=1, record={"command": command})


def test_write_refuses_a_non_empty_folder_and_names_it_and_the_flag(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("precious", encoding="utf-8")
    with pytest.raises(ConfigError, match="--overwrite") as info:
        _board().write(folder, figures=False)
    assert str(folder) in str(info.value)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]  # nothing written
    paths = _board().write(folder, figures=False, overwrite=True)
    assert (folder / "notes.txt").read_text(encoding="utf-8") == "precious" and paths["run.json"].exists()


def test_write_accepts_missing_empty_and_its_own_previous_output(tmp_path: Path) -> None:
    _board().write(tmp_path / "new" / "deeper", figures=False)
    (tmp_path / "empty").mkdir()
    _board().write(tmp_path / "empty", figures=False)
    out = tmp_path / "again"
    _board().write(out, figures=True)
    assert (out / "figures" / "ALL.png").exists()
    _board().write(out, figures=False)  # a previous output of the same command: replaced, stale figures gone
    assert not (out / "figures" / "ALL.png").exists()
    with pytest.raises(ConfigError, match="probes leaderboard"):  # another command's output is not replaced
        _board("probes demo").write(out, figures=False)


@pytest.mark.parametrize("kind", ["coref", "bridging", "probe"])
def test_every_run_type_refuses_a_non_empty_folder(kind: str, tmp_path: Path) -> None:
    from probes.runs.coreference import BridgingRun, CoreferenceRun
    from probes.runs.probing import ProbeRun

    (tmp_path / "other.txt").write_text("x", encoding="utf-8")
    run = {"coref": lambda: CoreferenceRun(None, None, {"command": "coref"}),  # type: ignore[arg-type]
           "bridging": lambda: BridgingRun(None, None, {"command": "bridging"}),  # type: ignore[arg-type]
           "probe": lambda: ProbeRun((), (), False, record={"command": "probes probe"})}[kind]()
    with pytest.raises(ConfigError, match=r"not empty.*--overwrite"):
        run.write(tmp_path)
    with pytest.raises(ConfigError, match="figure_format"):
        run.write(tmp_path / "new", figure_format="gif")


def test_store_mismatch_names_only_the_options_that_differ() -> None:
    from probes.runs.leaderboard_inputs import check_same_extraction as _check_same_extraction

    a = {"model": "m", "weights_sha256": "abc", "layers": [0, 1], "heads": [0, 1, 2], "from_pool": "mean",
         "dtype": "float32"}
    with pytest.raises(ConfigError) as info:
        _check_same_extraction(a, {**a, "dtype": "float16"})
    message = str(info.value)
    assert "dtype 'float32' vs 'float16'" in message
    assert all(key not in message for key in ("weights_sha256", "layers", "heads", "from_pool", "abc"))
    _check_same_extraction(a, dict(a))  # equal: no error


def test_run_record_says_how_the_run_was_started(tiny_bert: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.runs.leaderboard import leaderboard

    data = _conllu([_short(k) for k in range(3)], tmp_path / "data.conllu")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["probes", "leaderboard", "--treebank", "data.conllu"])
    board = leaderboard(str(tiny_bert), "data.conllu", min_count=1, device="cpu", select_on="same")
    board.write("out", figures=False)
    run = json.loads((tmp_path / "out" / "run.json").read_text(encoding="utf-8"))
    how = run["invocation"]
    assert how["cwd"] == str(tmp_path) and how["argv"] == ["probes", "leaderboard", "--treebank", "data.conllu"]
    assert how["probes_version"] == run["versions"]["probes"] or how["probes_version"]
    assert run["data"]["report"]["path"] == str(data.resolve()) and Path(run["data"]["report"]["path"]).is_absolute()
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists():
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        assert how["git"]["commit"] == head.strip()


def test_no_git_no_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import probes.runs.record as builders

    assert builders.git_commit(tmp_path) is None  # not a checkout

    def missing(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("git")

    monkeypatch.setattr(builders.subprocess, "run", missing)
    assert builders.git_commit() is None
    made = builders.run_record("x")
    assert made.invocation is not None and made.invocation.git is None and made.commit is None


# ---------------------------------------------------------------------------------- item 10: progress
def test_leaderboard_progress_is_labelled_by_split_with_totals(tiny_bert: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    from probes.runs.leaderboard import leaderboard

    leaderboard(str(tiny_bert), [_short(k) for k in range(5)], select_on=[_short(k) for k in range(5, 8)],
                min_count=1, device="cpu", progress=True)
    err = capfd.readouterr().err
    assert "selection split (selection data): 0/3 sentences\n" in err  # a total at once
    assert "selection split (selection data): 3/3 sentences, done" in err
    assert "report split (report data): 0/5 sentences\n" in err and "report split (report data): 5/5 sentences" in err
    assert err.index("selection split") < err.index("report split")


def test_coreference_progress_counts_documents_with_a_total(tiny_bert: Path, fixtures_dir: Path,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    from probes.runs.coreference import coreference

    corpus = fixtures_dir / "coref" / "tiny_gum.conllu"
    n_docs = sum(line.startswith("# newdoc") for line in corpus.read_text(encoding="utf-8").splitlines())
    run = coreference(str(tiny_bert), corpus, window=16, n_resamples=20, device="cpu", progress=True,
                     select_on="same")
    err = capfd.readouterr().err
    assert f"tiny_gum.conllu (documents): 0/{n_docs} documents\n" in err
    assert f"tiny_gum.conllu (documents): {n_docs}/{n_docs} documents, done" in err
    inputs = run.record.inputs["report"]
    assert inputs["unit"] == "windows" and inputs["seen"] == run.record.data["windows"] > n_docs
    assert inputs["seen"] == inputs["analysed"] + inputs["n_skipped"] + inputs["n_truncated"]
    assert "windows analysed" in run.notes()


def test_probe_progress_is_labelled_with_totals(capfd: pytest.CaptureFixture[str]) -> None:
    from probes.runs.probing import run_probes
    from tests.runs.test_leaderboard import _pairs

    train, evaluation = _pairs(1, n_sent=7), _pairs(2, n_sent=6)
    run_probes(train, evaluation, kinds=["attn"], progress=True)
    err = capfd.readouterr().err
    assert "train epoch 1/1: 0/7 sentences\n" in err  # totals (and so an ETA) from the start
    assert "evaluate: 0/6 sentences\n" in err


def test_a_store_names_the_sentences_its_extraction_skipped(tiny_bert: Path, tmp_path: Path) -> None:
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.store import extract_to_store
    from probes.runs.leaderboard import leaderboard

    extractor = AttentionExtractor.from_pretrained(tiny_bert, device="cpu", progress=False)
    extract_to_store(extractor, [_short(0), _long(), _short(1)], tmp_path / "store", progress=False)
    board = leaderboard(store=tmp_path / "store", min_count=1, select_on="same")
    inputs = board.record.inputs["report"]
    assert (inputs["seen"], inputs["analysed"], inputs["skipped"]) == (3, 2, [LONG_ID])
    assert LONG_ID in board.notes()
