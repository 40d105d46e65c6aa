"""The role lab's figures (probes.reports.role_lab_figures): each written through save_figure, labels 1-based, and
the drawn data equal to values computed here by hand from tiny, hand-made results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.errors import InputError
from probes.importance.function import FunctionTests
from probes.importance.lab_types import LabModelAnalysis
from probes.reports import role_lab_figures as rlf
from probes.training.curves import TrainingCurves
from probes.training.symmetry import HeadSymmetry
from tests.reports.test_readable_reports import _legends_tell_series_apart

MODULE = Path(rlf.__file__)


@pytest.fixture()
def saved(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Path, Any]]]:
    """Every figure the module hands to save_figure (and the path), written for real."""
    real = rlf.save_figure
    seen: list[tuple[Path, Any]] = []

    def keep(fig: Any, path: str | Path, **options: Any) -> Path:
        seen.append((Path(path), fig))
        return real(fig, path, **options)

    monkeypatch.setattr(rlf, "save_figure", keep)
    yield seen


# --- hand-made inputs ----------------------------------------------------------------------------------------


def _curves(seed: int) -> TrainingCurves:
    steps = np.array([0, 64, 128, 256, 512, 1000])
    dev = np.array([4.2, 3.6, 3.5, 3.4, 1.8 - 0.1 * seed, 0.5 + 0.01 * seed])
    return TrainingCurves(steps=steps, tokens_seen=steps * 2048, train_loss=np.r_[np.nan, dev[1:]], dev_loss=dev,
                          unigram_dev_loss=3.6, objective="causal-LM")


def _function(layers: tuple[int, ...] = (0, 1), n_heads: int = 3) -> FunctionTests:
    """Planted damage over 4 tokens; pairs within each layer, the last pair of the last layer left unmeasured."""
    rng = np.random.default_rng(7)
    n_layers, n_tokens = len(layers), 4
    damage = rng.uniform(0.0, 2.0, (n_layers, n_heads, n_tokens))
    pairs = [(k * n_heads + a, k * n_heads + b) for k in range(n_layers) for a in range(n_heads)
             for b in range(a + 1, n_heads)][:-1]
    pair_damage = rng.uniform(0.0, 3.0, (len(pairs), n_tokens))
    return FunctionTests(layers=layers, heads=tuple(range(n_heads)), model="", objective="causal-lm",
                         ablation="mean", seed=0, pair_scope="layer", n_sequences=2, n_tokens=n_tokens,
                         donors=np.full(2, -1, dtype=np.int64), token_loss=np.ones(n_tokens),
                         damage=damage, pairs=np.asarray(pairs, dtype=np.int64), pair_damage=pair_damage)


def _analysis() -> LabModelAnalysis:
    rng = np.random.default_rng(3)
    steps = np.array([0, 100, 1000], dtype=np.int64)
    names = ("previous", "induction", "std:previous_token", "std:induction")
    return LabModelAnalysis(
        name="roles-s1", cell="roles", seed=1, task="roles", members=1, n_layers=2, n_heads=2, params=1000,
        steps=steps, dev_loss=np.array([4.0, 2.0, 1.0]), role_names=names,
        role_scores=rng.uniform(0, 1, (3, len(names), 2, 2)), role_loss=np.full(len(names), np.nan),
        maps=np.zeros((2, 2, 1, 4, 4), dtype=np.float32), function=_function((0, 1), 2), ablation="mean",
        n_sequences=8)


def _symmetry(seed: int, scale: float, n_steps: int = 5) -> HeadSymmetry:
    rng = np.random.default_rng(seed)
    upper = rng.uniform(0.5, 1.5, (n_steps, 2, 3, 3)) * scale * np.exp(np.arange(n_steps))[:, None, None, None]
    distance = np.triu(upper, k=1)
    distance = distance + np.swapaxes(distance, -1, -2)
    return HeadSymmetry(steps=np.arange(n_steps), param_distance=distance, attention_distance=distance,
                        n_sentences=4)


def _cells() -> dict[str, dict[int, HeadSymmetry]]:
    zero = _symmetry(0, 0.0)
    return {"noise 1e-2": {1: _symmetry(1, 1e-2), 2: _symmetry(2, 1e-2)},
            "noise 1e-4": {1: _symmetry(3, 1e-4), 2: _symmetry(4, 1e-4)},
            "identical": {1: zero}}


CARRIERS = {"independent": [[1, 4], [1, 4], [2, 4]], "noise 1e-2": [[1, 3], [0, 4]]}

WRITERS: dict[str, Callable[[Path], Path]] = {
    "loss": lambda p: rlf.loss_curves({1: _curves(1), 2: _curves(2)}, p, title="loss", phase_steps={1: 384}),
    "roles": lambda p: rlf.role_scores_over_steps(_analysis(), ("previous", "std:induction"), p),
    "ablation": lambda p: rlf.ablation_matrix(_function(), p, title="ablations"),
    "distances": lambda p: rlf.step_distances(_cells(), p, layer_names=("layer 1", "layer 2")),
    "carriers": lambda p: rlf.carriers_grid(CARRIERS, p, role="the previous-token role", seeds=(1, 2, 3)),
    "capacity": lambda p: rlf.capacity({1: [3.0, 3.1], 2: [2.0, 2.2, 2.1], 4: [0.5, 0.6]}, p, unigram=3.6),
}


# --- every figure: a file through save_figure -----------------------------------------------------------------


def test_the_module_writes_only_through_save_figure() -> None:
    text = MODULE.read_text(encoding="utf-8")
    assert "savefig(" not in text
    assert "save_figure(" in text


@pytest.mark.parametrize("suffix", ["png", "svg"])
@pytest.mark.parametrize("name", list(WRITERS))
def test_each_figure_is_a_file_written_through_save_figure(name: str, suffix: str, tmp_path: Path,
                                                           saved: list[tuple[Path, Any]]) -> None:
    path = tmp_path / f"{name}.{suffix}"
    assert WRITERS[name](path) == path
    assert [p for p, _ in saved] == [path]
    data = path.read_bytes()
    if suffix == "png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 2000
    else:
        assert b"<svg" in data[:2000] and len(data) > 2000
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing half-written left


def test_every_legend_tells_its_series_apart(tmp_path: Path, saved: list[tuple[Path, Any]]) -> None:
    for name, write in WRITERS.items():
        write(tmp_path / f"{name}.png")
    assert _legends_tell_series_apart([(p.name, fig) for p, fig in saved]) >= 4


# --- what each figure draws -----------------------------------------------------------------------------------


def _texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_loss_curves_draw_each_seed_the_baseline_and_the_phase_change() -> None:
    fig = rlf.loss_curves_figure({1: _curves(1), 2: _curves(2)}, title="held-out loss", phase_steps={2: 384})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    lines = {line.get_label(): line for line in ax.get_lines()}
    one, two = lines["seed 1"], lines["seed 2 (phase change at step 384)"]
    assert np.array_equal(one.get_ydata(), _curves(1).dev_loss)
    assert np.array_equal(one.get_xdata(), [0.5, 64, 128, 256, 512, 1000])  # step 0 drawn, at 0.5
    phase = [line for line in ax.get_lines() if list(line.get_xdata()) == [384.0, 384.0]]
    assert len(phase) == 1 and phase[0].get_color() == two.get_color()
    assert list(lines["unigram baseline (held out)"].get_ydata()) == [3.6, 3.6]
    assert "loss (nats per scored token)" in ax.get_ylabel() and "step 0" in ax.get_xlabel()
    with pytest.raises(InputError, match="seeds \\[9\\]"):
        rlf.loss_curves_figure({1: _curves(1)}, title="t", phase_steps={9: 100})


def test_role_scores_draw_one_line_per_head_named_one_based() -> None:
    analysis = _analysis()
    fig = rlf.role_scores_figure(analysis, ("induction", "std:previous_token"), threshold=0.4)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["role: induction", "role: std:previous_token"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["1-1", "1-2", "2-1", "2-2", "threshold 0.4"]
    for ax, role in zip(panels, (1, 2)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        for layer in range(2):
            for head in range(2):
                assert np.array_equal(lines[f"{layer + 1}-{head + 1}"].get_ydata(),
                                      analysis.role_scores[:, role, layer, head])
        assert list(lines["threshold 0.4"].get_ydata()) == [0.4, 0.4]
        assert ax.get_xscale() == "log"
    with pytest.raises(InputError, match="found nope"):
        rlf.role_scores_figure(analysis, ("previous", "nope"))


def test_ablation_matrix_shows_effects_on_the_diagonal_and_interactions_off_it() -> None:
    function = _function()
    fig = rlf.ablation_matrix_figure(function, title="ablations")
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["layer 1", "layer 2"]
    pair_of = {tuple(p): k for k, p in enumerate(function.pairs.tolist())}
    for layer, ax in enumerate(panels):
        drawn = np.ma.filled(ax.images[0].get_array().astype(float), np.nan)
        expected = np.full((3, 3), np.nan)
        for a in range(3):
            expected[a, a] = function.damage[layer, a].mean()  # single effect, by hand
            for b in range(3):
                key = (layer * 3 + min(a, b), layer * 3 + max(a, b))
                if a != b and key in pair_of:  # joint minus the sum of the singles
                    expected[a, b] = (function.pair_damage[pair_of[key]].mean() - function.damage[layer, a].mean()
                                      - function.damage[layer, b].mean())
        np.testing.assert_allclose(drawn, expected, rtol=0, atol=1e-12)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "3"]
        norm = ax.images[0].norm
        assert norm.vmin == -norm.vmax and norm.vmax == pytest.approx(np.nanmax(np.abs(expected)))
        assert f"{expected[0, 0]:+.2f}" in [t.get_text() for t in ax.texts]
    assert np.isnan(drawn[1, 2]) and np.isnan(drawn[2, 1])  # the last pair was not measured


def test_ablation_matrix_names_the_model_layers_it_holds() -> None:
    fig = rlf.ablation_matrix_figure(_function(layers=(1,), n_heads=9), title="second layer")
    (ax,) = [ax for ax in fig.axes if ax.images]
    assert ax.get_title() == "layer 2"
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(h) for h in range(1, 10)]
    assert not ax.texts  # 9 heads: too many to write every value


def test_step_distances_draw_each_seeds_mean_over_pairs_on_a_log_axis() -> None:
    cells = _cells()
    fig = rlf.step_distances_figure(cells, layer_names=("layer 1 (previous token)", "layer 2"))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["layer 1 (previous token)", "layer 2"]
    assert all(ax.get_yscale() == "log" for ax in panels)
    symmetry = cells["noise 1e-4"][2]
    for layer, ax in enumerate(panels):
        pairs = symmetry.attention_distance[:, layer]
        by_hand = (pairs[:, 0, 1] + pairs[:, 0, 2] + pairs[:, 1, 2]) / 3
        assert any(np.allclose(line.get_ydata(), by_hand, rtol=1e-12) for line in ax.get_lines())
        assert len(ax.get_lines()) == 5  # a line per seed (the all-zero seed's line has nothing to show)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["noise 1e-2 (2 seeds, a line each)", "noise 1e-4 (2 seeds, a line each)",
                      "identical (1 seed): 0 at every step, not drawn"]
    with pytest.raises(InputError, match="expected 2 layer names"):
        rlf.step_distances_figure(cells, layer_names=("only one",))


def test_layer_pair_means_is_the_mean_over_pairs() -> None:
    symmetry = _symmetry(5, 1.0)
    means = rlf.layer_pair_means(symmetry)
    d = symmetry.attention_distance
    np.testing.assert_allclose(means[2, 1], (d[2, 1, 0, 1] + d[2, 1, 0, 2] + d[2, 1, 1, 2]) / 3, rtol=1e-12)


def test_carriers_grid_shows_each_count_per_cell_seed_and_layer() -> None:
    fig = rlf.carriers_grid_figure(CARRIERS, role="the previous-token role", seeds=(1, 2, 3),
                                   heads={"independent": 4, "noise 1e-2": 4})
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["layer 1", "layer 2"]
    first = np.ma.filled(panels[0].images[0].get_array().astype(float), np.nan)
    np.testing.assert_array_equal(first, [[1, 1, 2], [1, 0, np.nan]])  # the second cell has two seeds
    second = np.ma.filled(panels[1].images[0].get_array().astype(float), np.nan)
    np.testing.assert_array_equal(second, [[4, 4, 4], [3, 4, np.nan]])
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["seed 1", "seed 2", "seed 3"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["independent", "noise 1e-2"]
    assert sorted(t.get_text() for t in panels[1].texts) == ["3/4", "4/4", "4/4", "4/4", "4/4"]
    assert any("previous-token role" in text for text in _texts(fig))


def test_capacity_draws_every_seed_and_the_mean_per_head_count() -> None:
    losses = {1: [3.0, 3.1], 2: [2.0, 2.2, 2.1], 8: [0.5, 0.6]}
    fig = rlf.capacity_figure(losses, unigram=3.6)
    ax = fig.axes[0]
    points = ax.collections[0].get_offsets()
    assert sorted(points[:, 1].tolist()) == sorted(v for values in losses.values() for v in values)
    assert np.array_equal(np.round(np.log2(points[:, 0])), [0, 0, 1, 1, 1, 3, 3])  # spread stays by its count
    mean = next(line for line in ax.get_lines() if line.get_label() == "mean over seeds")
    np.testing.assert_allclose(mean.get_ydata(), [3.05, 2.1, 0.55])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "8"]
    with pytest.raises(InputError):
        rlf.capacity_figure({})


def test_pretrained_roles_draw_each_layers_best_head_over_the_depth() -> None:
    analysis = _analysis()
    fig = rlf.pretrained_roles_figure({"tiny": analysis}, list(analysis.role_names[:1]))
    line = fig.axes[0].get_lines()[0]
    role = analysis.role_names[0]
    expected = np.nanmax(analysis.role_scores[-1, 0], axis=1)  # each layer's best head at the last step
    np.testing.assert_allclose(line.get_ydata(), expected)
    np.testing.assert_allclose(line.get_xdata(), np.arange(1, analysis.n_layers + 1) / analysis.n_layers)
    assert fig.axes[0].get_title() == role
    with pytest.raises(InputError, match="no role"):
        rlf.pretrained_roles_figure({"tiny": analysis}, ["no-such-role"])
