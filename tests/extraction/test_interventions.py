"""Head interventions (gates, zero / mean / uniform ablation) on the tiny model of every family.

Every check is against something computed another way: the unmodified model, zeroed projection columns,
the projection's bias, each example run alone, central finite differences, hand-accumulated means put in
by a hand hook, and the eager model with its softmax patched to uniform over the unmasked keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.errors import ConfigError, InputError
from probes.extraction import families
from probes.extraction.interventions import ABLATIONS, head_gates, head_means, intervene
from tests.tiny_models import build, tiny_families

IDS = [5, 9, 7, 12, 6, 8, 10, 11]  # ids every tiny vocabulary has
ABLATED = ((0, 1), (1, 0), (1, 3))  # (layer, head) removed in the ablation tests


@pytest.fixture(scope="module", params=tiny_families())
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, Path]:
    from transformers import AutoModel

    folder = build(request.param, tmp_path_factory.mktemp("models"))
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval().double()
    return request.param, model, folder


def _batch(side: str = "right") -> dict[str, torch.Tensor]:
    """Two sentences of 8 and 6 tokens, the second padded on ``side``.

    Two padding tokens, not more: a padding query of ModernBERT's local layers (window 2) then still sees a
    real key (float64 eager ModernBERT gives NaN at a padding query that sees none).
    """
    short = [7, 6, 9, 5, 12, 8]
    pad = [1] * (len(IDS) - len(short))
    second, mask = (short + pad, [1] * 6 + [0] * 2) if side == "right" else (pad + short, [0] * 2 + [1] * 6)
    return {"input_ids": torch.tensor([IDS, second]), "attention_mask": torch.tensor([[1] * 8, mask])}


def _run(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(**batch).last_hidden_state  # (B, T, E)


def _real(x: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The rows of ``x`` ``(B, T, ...)`` at non-padding tokens."""
    return x[batch["attention_mask"].bool()]


def _mask(cells: tuple[tuple[int, int], ...] = ABLATED) -> torch.Tensor:
    mask = torch.zeros(2, 4, dtype=torch.bool)
    for layer, head in cells:
        mask[layer, head] = True
    return mask


@contextmanager
def _hooks(handles: list[Any]) -> Iterator[None]:
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _close(actual: torch.Tensor, expected: torch.Tensor, tol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, expected, atol=tol, rtol=tol)


def test_all_gates_one_is_the_unmodified_model(family: tuple[str, Any, Path]) -> None:
    _, model, _ = family
    batch = _batch()
    with torch.no_grad():
        plain = _run(model, batch)
        for kwargs in ({"gates": torch.ones(2, 4)}, {"gates": torch.ones(2, 2, 4)},
                       {"ablate": torch.zeros(2, 4, dtype=torch.bool), "ablation": "uniform"}):
            with intervene(model, **kwargs):
                _close(_run(model, batch), plain)
        again = _run(model, batch)
    torch.testing.assert_close(again, plain, atol=0, rtol=0)  # hooks removed on exit


def _zeroed_columns(model: Any, cells: tuple[tuple[int, int], ...], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The output with the projection columns that read the heads in ``cells`` set to 0 (by hand)."""
    sites = families.head_sites(model)
    saved = [site.module.weight.detach().clone() for site in sites]
    try:
        with torch.no_grad():
            for layer, head in cells:
                weight, d = sites[layer].module.weight, sites[layer].head_dim
                cols = slice(head * d, (head + 1) * d)
                if type(sites[layer].module).__name__ == "Conv1D":  # GPT-2's Conv1D: (in, out)
                    weight[cols] = 0.0
                else:  # Linear: (out, in)
                    weight[:, cols] = 0.0
            return _run(model, batch)
    finally:
        with torch.no_grad():
            for site, weight in zip(sites, saved):
                site.module.weight.copy_(weight)


def test_zero_ablation_and_zero_gates_equal_zeroed_projection_columns(family: tuple[str, Any, Path]) -> None:
    _, model, _ = family
    batch = _batch()
    expected = _zeroed_columns(model, ABLATED, batch)
    gates = (~_mask()).double()
    with torch.no_grad():
        with intervene(model, ablate=_mask()):
            ablated = _run(model, batch)
        with intervene(model, ablate=_mask().numpy()):
            from_numpy = _run(model, batch)
        with head_gates(model, gates):
            gated = _run(model, batch)
        plain = _run(model, batch)
    _close(ablated, expected)
    _close(from_numpy, expected)
    _close(gated, expected)
    assert (ablated - plain).abs().max() > 1e-4


def test_a_layer_at_zero_leaves_only_the_projection_bias(family: tuple[str, Any, Path]) -> None:
    _, model, _ = family
    batch = _batch()
    for layer in (0, 1):
        site = families.head_sites(model)[layer]
        bias = getattr(site.module, "bias", None)

        def only_bias(module: Any, args: Any, output: torch.Tensor, bias: Any = bias) -> torch.Tensor:
            return torch.zeros_like(output) + (0.0 if bias is None else bias)

        gates = torch.ones(2, 4, dtype=torch.float64)
        gates[layer] = 0.0
        with torch.no_grad():
            with intervene(model, gates=gates):
                gated = _run(model, batch)
            with _hooks([site.module.register_forward_hook(only_bias)]):
                expected = _run(model, batch)
        _close(gated, expected)


def test_per_example_gates_equal_each_example_alone(family: tuple[str, Any, Path]) -> None:
    _, model, _ = family
    batch = _batch()
    gates = torch.rand(2, 2, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        with intervene(model, gates=gates, ablate=_mask(((1, 2),)), ablation="uniform"):
            together = _run(model, batch)
        for row in range(2):
            alone_batch = {key: value[row:row + 1] for key, value in batch.items()}
            with intervene(model, gates=gates[row], ablate=_mask(((1, 2),)), ablation="uniform"):
                alone = _run(model, alone_batch)
            _close(_real(together[row:row + 1], alone_batch), _real(alone, alone_batch))
    assert (together[0] - together[1]).abs().max() > 1e-4  # the two rows' gates really differ


def _rms_norm_in_float64(self: Any, hidden: torch.Tensor) -> torch.Tensor:
    """Llama's RMSNorm without its cast to float32."""
    return self.weight * hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_gate_gradients_equal_finite_differences(family: tuple[str, Any, Path], ablation: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """In float64 throughout, as float32 noise would swamp the finite differences: Llama and ModernBERT with
    SDPA (their eager softmax runs in float32), Llama's RMSNorm cast to float32 undone."""
    from transformers import AutoModel
    from transformers.models.llama import modeling_llama

    name, model, folder = family
    if name in ("llama", "modernbert"):
        model = AutoModel.from_pretrained(folder, attn_implementation="sdpa").eval().double()
    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", _rms_norm_in_float64)
    batch = _batch()
    generator = torch.Generator().manual_seed(2)
    weights = torch.randn(2, len(IDS), families.head_sites(model)[0].module.weight.numel() // (
        families.n_heads(model) * families.head_dim(model)), generator=generator, dtype=torch.float64)
    base = 0.5 + torch.rand(2, 4, generator=generator, dtype=torch.float64)
    ablate = _mask(((0, 3), (1, 1)))

    def loss(gates: torch.Tensor) -> torch.Tensor:
        with intervene(model, gates=gates, ablate=ablate, ablation=ablation):
            return (_real(_run(model, batch) * weights, batch)).sum()

    gates = base.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(gates), gates)
    eps = 1e-5
    numeric = torch.zeros(2, 4, dtype=torch.float64)
    with torch.no_grad():
        for layer in range(2):
            for head in range(4):
                up, down = base.clone(), base.clone()
                up[layer, head] += eps
                down[layer, head] -= eps
                numeric[layer, head] = (loss(up) - loss(down)) / (2 * eps)
    if ablation == "zero":  # ablated then gated: the gate scales a constant 0
        assert grad[0, 3] == 0 and grad[1, 1] == 0
    torch.testing.assert_close(grad, numeric, rtol=1e-4, atol=1e-4 * float(numeric.abs().max()))
    assert numeric.abs().max() > 1e-3


def _hand_means(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``(L, H, d)`` each head's mean output, one sentence at a time, from the projection's captured input."""
    sites = families.head_sites(model)
    sums = [torch.zeros(s.n_heads * s.head_dim, dtype=torch.float64) for s in sites]
    count = 0
    for row in range(batch["input_ids"].shape[0]):
        keep = batch["attention_mask"][row].bool()
        seen: list[torch.Tensor] = []
        handles = [s.module.register_forward_hook(lambda m, args, out, seen=seen: seen.append(args[0][0].clone()))
                   for s in sites]
        with _hooks(handles), torch.no_grad():
            model(input_ids=batch["input_ids"][row:row + 1, keep])
        for layer, captured in enumerate(seen):  # (T_row, H * d)
            for token in range(captured.shape[0]):
                sums[layer] += captured[token]
        count += int(keep.sum())
    return torch.stack(sums).reshape(len(sites), sites[0].n_heads, sites[0].head_dim) / count


def test_mean_ablation_matches_a_slow_reference(family: tuple[str, Any, Path]) -> None:
    _, model, _ = family
    reference, batch = _batch(), _batch()
    means = _hand_means(model, reference)
    computed = head_means(model, [reference, {"input_ids": reference["input_ids"][:1]}])
    first = _hand_means(model, {key: value[:1] for key, value in reference.items()})
    _close(computed.double(), (means * 14 + first * 8) / 22)  # 14 + 8 tokens, batches pooled by token
    computed = head_means(model, [reference])
    assert computed.dtype == torch.float32
    _close(computed.double(), means, tol=1e-5)
    sites = families.head_sites(model)

    def by_hand(layer: int) -> Callable[..., Any]:
        def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            x = args[0].clone()
            d = sites[layer].head_dim
            for cell_layer, head in ABLATED:
                if cell_layer == layer:
                    x[..., head * d:(head + 1) * d] = means[layer, head]
            return (x, *args[1:])
        return hook

    with torch.no_grad():
        with intervene(model, ablate=_mask(), ablation="mean", means=means):
            ablated = _run(model, batch)
        with _hooks([s.module.register_forward_pre_hook(by_hand(s.layer)) for s in sites]):
            expected = _run(model, batch)
        plain = _run(model, batch)
    _close(_real(ablated, batch), _real(expected, batch))
    assert (ablated - plain).abs().max() > 1e-4


@contextmanager
def _uniform_softmax(model: Any, cells: tuple[tuple[int, int], ...]) -> Iterator[None]:
    """Run ``model`` with the eager softmax of each layer made uniform over the unmasked keys for ``cells``."""
    import torch.nn.functional as F

    original = F.softmax
    output_path = families.FAMILIES[model.config.model_type].head_output or ""
    blocks = [model.get_submodule(site.name[:-len(output_path) - 1]) for site in families.head_sites(model)]

    def patched_for(layer: int) -> Callable[..., torch.Tensor]:
        heads = [head for cell_layer, head in cells if cell_layer == layer]

        def softmax(scores: torch.Tensor, dim: int = -1, dtype: Any = None, **kwargs: Any) -> torch.Tensor:
            probs = original(scores, dim=dim, dtype=dtype, **kwargs)  # (B, H, T, T)
            seen = (scores > torch.finfo(scores.dtype).min / 2).to(probs.dtype)
            uniform = seen / seen.sum(-1, keepdim=True).clamp(min=1)
            probs = probs.clone()
            probs[:, heads] = uniform[:, heads]
            return probs
        return softmax

    def enter(layer: int) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            F.softmax = patched_for(layer)
        return hook

    def leave(module: Any, args: Any, output: Any) -> None:
        F.softmax = original

    handles = [block.register_forward_pre_hook(enter(layer)) for layer, block in enumerate(blocks)]
    handles += [block.register_forward_hook(leave) for block in blocks]
    try:
        with _hooks(handles):
            yield
    finally:
        F.softmax = original


@pytest.mark.parametrize("side", ["right", "left"])
def test_uniform_attention_matches_a_patched_softmax(family: tuple[str, Any, Path], side: str) -> None:
    """Left padding in float32: float64 eager decoders give NaN at a padding query that sees no key.

    Llama in float64 still runs its RMSNorm in float32, hence its looser tolerance.
    """
    from transformers import AutoModel

    name, model, folder = family
    tol = 1e-6 if name == "llama" else 1e-9
    if side == "left":
        model, tol = AutoModel.from_pretrained(folder, attn_implementation="eager").eval(), 1e-5
    batch = _batch(side)
    with torch.no_grad():
        with intervene(model, ablate=_mask(), ablation="uniform"):
            ablated = _run(model, batch)
        with _uniform_softmax(model, ABLATED):
            expected = _run(model, batch)
        plain = _run(model, batch)
    _close(_real(ablated, batch), _real(expected, batch), tol)
    assert (_real(ablated, batch) - _real(plain, batch)).abs().max() > 1e-5  # random heads: a small effect


def test_uniform_attention_is_the_same_under_sdpa(family: tuple[str, Any, Path]) -> None:
    from transformers import AutoModel

    _, eager, folder = family
    sdpa = AutoModel.from_pretrained(folder).eval().double()
    batch = _batch()
    with torch.no_grad():
        with intervene(eager, ablate=_mask(), ablation="uniform", gates=torch.full((2, 4), 0.5)):
            expected = _run(eager, batch)
        with intervene(sdpa, ablate=_mask(), ablation="uniform", gates=torch.full((2, 4), 0.5)):
            found = _run(sdpa, batch)
    _close(_real(found, batch), _real(expected, batch))


def test_value_sites_know_the_family(family: tuple[str, Any, Path]) -> None:
    name, model, folder = family
    sites = families.value_sites(model)
    assert [s.layer for s in sites] == [0, 1]
    assert all(dict(model.named_modules())[s.name] is s.module for s in sites)
    assert [sites[0].kv_head(h) for h in range(4)] == ([0, 0, 1, 1] if name == "llama" else [0, 1, 2, 3])
    assert [(s.before, s.after) for s in sites] == _windows_seen(folder)
    if name == "modernbert":  # local layers of window 2, every other layer from the first (by hand)
        assert [(s.before, s.after) for s in sites] == [(None, None), (2, 2)]


def _windows_seen(folder: Path) -> list[tuple[int | None, int | None]]:
    """Per layer ``(before, after)``: how far back and ahead the model's own attention reaches on one input of
    ``T`` tokens without padding (``None``: all ``T - 1`` tokens, i.e. no limit this input shows).

    A model of its own: ``output_attentions`` leaves transformers' recording hooks on the model it runs."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        maps = model(input_ids=torch.tensor([IDS]), output_attentions=True).attentions  # L x (1, H, T, T)
    seen = []
    for layer in maps:
        i, j = torch.nonzero(layer[0].abs().sum(0) > 0, as_tuple=True)  # (query, key) pairs attended
        before, after = int((i - j).max()), int((j - i).max())
        seen.append(tuple(None if reach == len(IDS) - 1 else reach for reach in (before, after)))
    return seen  # type: ignore[return-value]


def test_shapes_and_options_are_checked(family: tuple[str, Any, Path]) -> None:
    _, model, _ = family
    bad: list[tuple[dict[str, Any], str]] = [
        ({"gates": torch.ones(4, 2)}, r"expected shape \(n_layers, n_heads\) = \(2, 4\).*found \(4, 2\)"),
        ({"gates": torch.ones(2)}, r"found \(2,\)"),
        ({"ablate": torch.ones(4, 2, dtype=torch.bool)}, r"expected a bool mask of shape .*\(2, 4\), found "
                                                         r"torch.bool of shape \(4, 2\)"),
        ({"ablate": np.ones((2, 4))}, "found torch.float64"),
        ({"ablate": _mask(), "ablation": "mean"}, r"expects \(n_layers, n_heads, head_dim\) = .* found None"),
        ({"ablate": _mask(), "ablation": "mean", "means": torch.zeros(2, 4)}, r"found \(2, 4\)"),
        ({"ablation": "random"}, f"expected one of {ABLATIONS!r}".replace("(", r"\(").replace(")", r"\)")),
    ]
    for kwargs, message in bad:
        with pytest.raises(ConfigError, match=message):
            with intervene(model, **kwargs):
                pass
    with pytest.raises(ConfigError, match="expected batch size 2, found 3"):
        with intervene(model, gates=torch.ones(3, 2, 4)), torch.no_grad():
            _run(model, _batch())
    with pytest.raises(InputError, match="expected at least one non-padding token"):
        head_means(model, [])
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())  # all removed


def test_uniform_attention_through_a_model_with_a_head(family: tuple[str, Any, Path]) -> None:
    """The mask is read on the base model: the same result via ``...ForMaskedLM`` / ``...ForCausalLM``,
    with the mask passed by keyword or by position."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    name, _, folder = family
    if name not in ("bert", "gpt2", "llama"):
        pytest.skip("one encoder and the two decoders suffice")
    loader = AutoModelForMaskedLM if name == "bert" else AutoModelForCausalLM
    model = loader.from_pretrained(folder, attn_implementation="eager").eval().double()
    batch = _batch()
    with torch.no_grad(), intervene(model, ablate=_mask(), ablation="uniform"):
        expected = _run(model.base_model, batch)
        by_keyword = model(**batch, output_hidden_states=True).hidden_states[-1]
        if name == "bert":  # BertForMaskedLM.forward(input_ids, attention_mask, ...)
            by_position = model(batch["input_ids"], batch["attention_mask"], output_hidden_states=True)
            _close(_real(by_position.hidden_states[-1], batch), _real(expected, batch), 1e-9)
    _close(_real(by_keyword, batch), _real(expected, batch), 1e-6 if name == "llama" else 1e-9)


def test_uniform_attention_with_a_sliding_window_decoder() -> None:
    """Mistral (llama-style, window 3 on every layer: keys ``i - 3 < j <= i``) against the patched softmax."""
    from transformers import MistralConfig, MistralModel

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=20, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=3, pad_token_id=1,
                           attn_implementation="eager")
    model = MistralModel(config).eval().double()
    assert [(s.before, s.after, s.kv_head(3)) for s in families.value_sites(model)] == [(2, 0, 1)] * 2
    batch = _batch()
    with torch.no_grad():
        with intervene(model, ablate=_mask(), ablation="uniform"):
            ablated = _run(model, batch)
        with _uniform_softmax(model, ABLATED):
            expected = _run(model, batch)
        plain = _run(model, batch)
    _close(_real(ablated, batch), _real(expected, batch))  # its RMSNorm runs in float32
    assert (_real(ablated, batch) - _real(plain, batch)).abs().max() > 1e-5
