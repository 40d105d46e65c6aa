"""Validate once at the boundary (issue 37): one request checks its extractor options once and resolves each
model it names once, whatever layers it goes through.

Both functions are counted everywhere they can be reached: the one check
(:func:`probes.extraction.checks.check_options`) and the one resolution
(:func:`probes.extraction.loading.resolve_model`) are replaced, in their own module and in every ``probes`` module
that holds them by name, by wrappers that count the call and then make it (so a bad value still fails). Each
command runs once, through its library call or the CLI, on a tiny random BERT (tests/tiny_models.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import probes
from probes.cli import main
from tests.tiny_models import build

GUM_STYLE = Path(__file__).resolve().parent / "fixtures" / "coref" / "tiny_gum.conllu"


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build("bert", tmp_path_factory.mktemp("validate-once")))


@pytest.fixture(scope="module")
def other_bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build("bert", tmp_path_factory.mktemp("validate-once-b"), seed=1))


class Calls:
    """How many times the option check and the model resolution ran."""

    def __init__(self) -> None:
        self.check = 0
        self.resolve = 0

    def counts(self) -> tuple[int, int]:
        return self.check, self.resolve


def _count_everywhere(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, bump: Callable[[], None]) -> None:
    """Replace ``module.name`` wherever a loaded ``probes`` module holds it by a wrapper that calls ``bump`` first."""
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        bump()
        return real(*args, **kwargs)

    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("probes") and getattr(loaded, name, None) is real:
            monkeypatch.setattr(loaded, name, counted)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    import probes.cli.extract  # noqa: F401  (every module that may hold the functions by name, loaded first)
    import probes.extraction.checks as checks
    import probes.extraction.extractor  # noqa: F401  (as above)
    import probes.extraction.gradients  # noqa: F401  (as above)
    import probes.extraction.loading as loading
    import probes.runs.atlas  # noqa: F401  (as above)
    import probes.runs.coreference  # noqa: F401  (as above)
    import probes.runs.importance  # noqa: F401  (as above)
    import probes.runs.inputs  # noqa: F401  (as above)
    import probes.runs.leaderboard  # noqa: F401  (as above)
    import probes.runs.match  # noqa: F401  (as above)
    import probes.runs.probing  # noqa: F401  (as above)

    counter = Calls()

    def check() -> None:
        counter.check += 1

    def resolve() -> None:
        counter.resolve += 1

    _count_everywhere(monkeypatch, checks, "check_options", check)
    _count_everywhere(monkeypatch, loading, "resolve_model", resolve)
    yield counter


def test_leaderboard_checks_once_and_resolves_once(bert: str, calls: Calls) -> None:
    probes.leaderboard(bert, "sample:dev", limit=20, min_count=1, device="cpu")
    assert calls.counts() == (1, 1)


def test_leaderboard_from_the_cli_checks_once_and_resolves_once(bert: str, calls: Calls, tmp_path: Path) -> None:
    assert main(["leaderboard", "--model", bert, "--treebank", "sample:dev", "--limit", "20", "--min-count", "1",
                 "--device", "cpu", "--no-progress", "--no-figures", "--out", str(tmp_path / "run")]) == 0
    assert calls.counts() == (1, 1)


def test_demo_checks_once_and_resolves_once(bert: str, calls: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.runs.demo as demo

    monkeypatch.setattr(demo, "demo_model_dir", lambda: Path(bert))
    demo.demo(min_count=5)
    assert calls.counts() == (1, 1)


def test_atlas_checks_once_and_resolves_once(bert: str, calls: Calls) -> None:
    """The gradient pass loads the model once more (with its language-model head) from the same resolution."""
    result = probes.atlas(bert, "sample:dev", limit=16, js_sentences=4, clusters=2, grad_sentences=2,
                          head_type_sequences=1, device="cpu")
    assert "no language-model head" in result.gradients_note  # the gradient pass ran (and found no LM head)
    assert calls.counts() == (1, 1)


def test_coreference_and_bridging_check_once_and_resolve_once(bert: str, calls: Calls) -> None:
    probes.coreference(bert, GUM_STYLE, select_on="same", n_resamples=10, device="cpu", progress=False)
    assert calls.counts() == (1, 1)
    probes.bridging(bert, GUM_STYLE, select_on="same", n_resamples=10, device="cpu", progress=False)
    assert calls.counts() == (2, 2)


def test_probe_checks_once_and_resolves_once(bert: str, calls: Calls) -> None:
    """The random-init control's extractors (one per seed) take the run's checked options as they are."""
    run = probes.probe(bert, "sample:dev", "sample:dev", limit=8, kinds=["per-head", "attn+emb"], seeds=2,
                       control=False, device="cpu", progress=False)
    assert "random_init" in run.record.to_dict()  # the control ran
    assert calls.counts() == (1, 1)


def test_match_checks_once_and_resolves_each_model_once(bert: str, other_bert: str, calls: Calls) -> None:
    probes.match(bert, other_bert, "sample:dev", limit=8, n_resamples=10, min_count=1, device="cpu")
    assert calls.counts() == (1, 2)


def test_extract_checks_once_and_resolves_once(bert: str, calls: Calls, tmp_path: Path) -> None:
    assert main(["extract", "--model", bert, "--treebank", "sample:dev", "--limit", "4", "--device", "cpu",
                 "--no-progress", "--store", str(tmp_path / "store")]) == 0
    assert calls.counts() == (1, 1)


def test_importance_checks_once_and_resolves_once(bert: str, calls: Calls) -> None:
    from probes.runs.importance import importance  # probes.importance is the subpackage once it is imported

    importance(bert, "sample:dev", limit=12, loo=False, n_resamples=10, device="cpu")
    assert calls.counts() == (1, 1)


def test_prune_checks_once_and_resolves_once(bert: str, calls: Calls) -> None:
    """Pruning loads the model twice (under interventions, and as an extractor for the orders), resolved once."""
    from probes.runs.importance import prune

    prune(bert, "sample:dev", limit=12, step=0.5, random_seeds=(0,), one_per_layer=False, device="cpu")
    assert calls.counts() == (1, 1)


def test_the_public_constructors_check_once_and_keep_their_errors(bert: str, calls: Calls) -> None:
    """``from_pretrained`` and the constructor are boundaries too: one check each, then the typed path."""
    from probes.errors import ConfigError
    from probes.extraction.extractor import AttentionExtractor

    loaded = AttentionExtractor.from_pretrained(bert, device="cpu", batch_size=3, on_long="window", progress=False)
    assert calls.counts() == (1, 1)
    assert (loaded.batch_size, loaded.on_long, loaded.name_or_path) == (3, "window", bert)
    AttentionExtractor(loaded.model, loaded.tokenizer, device="cpu", progress=False)
    assert calls.counts() == (2, 1)
    with pytest.raises(ConfigError, match="give device or device_map, not both"):
        AttentionExtractor.from_pretrained(bert, device="cpu", device_map="auto")
    with pytest.raises(ConfigError, match="on_long must be one of skip, truncate, window"):
        AttentionExtractor(loaded.model, loaded.tokenizer, device="cpu", on_long="drop")


def test_a_resolved_model_says_what_its_name_named(bert: str) -> None:
    from probes.extraction.loading import ResolvedModel

    folder = ResolvedModel.of(Path(bert))
    assert (folder.spec, folder.path, folder.kind, folder.is_folder) == (bert, bert, "folder", True)
    hub = ResolvedModel.of("someone/some-model")  # resolving a hub name reads nothing
    assert (hub.path, hub.kind, hub.is_folder) == ("someone/some-model", "hub", False)
