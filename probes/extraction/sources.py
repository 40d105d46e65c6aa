"""Attention sources: what a head's map measures, from its weights alone to what it moves.

Every analysis reads one row-normalised ``(B, H, T, T)`` map per layer; the source says what the map holds:

* ``weights``: the attention weights alpha_ij (Clark et al. 2019; the default).
* ``norm``: alpha_ij ||f_h(x_j)||, with f_h(x) = W_O^h (W_V^h x + b_V^h) the head's transformed value (Kobayashi et
  al. 2020): how much of token j the head moves to i, not how much it looks at j. The value bias b_V is folded into f
  (as Kobayashi et al. do); the output bias b_O is left out: it is added once, not per token.
* ``contribution``: the attention block's contribution of token j to token i through head h with the block's
  LayerNorm (Kobayashi et al. 2021): ||T_i(alpha_ij f_h(x_j))||, T_i the post-attention LayerNorm linearised at i
  (gamma * (v - mean v) / s_i; the 1/s_i is common to a row and cancels in the row-normalised map). Exact per
  head: these terms plus the residual and the biases sum to the block's output
  (:mod:`probes.extraction.decomposition`). Where it is not per head: the residual (token i's own vector through
  the skip connection) cannot be split among heads, so per-head maps leave it out; the layer-level map of
  :func:`probes.attention_maps` holds it, scored as ALTI scores a layer (Ferrando et al. 2022: max(0, ||y_i||_1 -
  ||y_i - z_ij||_1) of each token's term z_ij against the output y_i). ALTI's L1 score per head would cost
  T^2 x D per head and layer (about 19x the weights' extraction on all-MiniLM-L6-v2), the norm of the same term
  T x d^2. In pre-LN families (GPT-2, Llama, ModernBERT) the attention output joins the residual stream with no
  norm after it, so there the per-head contribution is the ``norm`` map; they differ in the layer-level map.
* ``value-zeroing``: 1 - cos between the layer's output at i with and without head h's value of token j (Mohebbi et
  al. 2023, per head; :mod:`probes.extraction.value_zeroing`): the whole layer is run again for every head and
  token, so its cost grows with T^2 per layer.

Each source's map is row-normalised (rows sum to 1; a row whose total is 0 stays 0) so every analysis runs on it
unchanged; the raw row totals are kept where asked (:func:`probes.attention_maps`). A family whose block does not
decompose (no value projection or output projection known to :mod:`probes.extraction.families`) is refused with one
line naming the reason (:func:`check_source`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from probes.errors import ConfigError
from probes.extraction import families

__all__ = ["SOURCES", "DEFAULT_SOURCE", "SOURCE_HELP", "check_source_name", "check_source", "SourceHooks",
           "row_normalise", "head_outputs"]

#: The attention sources, in the order the docs and ``--attention-source`` list them.
SOURCES: tuple[str, ...] = ("weights", "norm", "contribution", "value-zeroing")
DEFAULT_SOURCE = "weights"
#: One line per source, for help texts and reports.
SOURCE_HELP: dict[str, str] = {
    "weights": "attention weights alpha_ij (Clark et al. 2019)",
    "norm": "alpha_ij ||W_O^h (W_V^h x_j + b_V^h)||, row-normalised (Kobayashi et al. 2020)",
    "contribution": "||LN_i(alpha_ij f_h(x_j))||: token j's term in the block's output through the head, with "
                    "the block's LayerNorm, row-normalised (Kobayashi et al. 2021)",
    "value-zeroing": "1 - cos of the layer's output with and without head h's value of token j, row-normalised "
                     "(Mohebbi et al. 2023)",
}


def check_source_name(source: str) -> str:
    """``source`` if it names an attention source (the boundary's one check of the name).

    Raises:
        ConfigError: any other value, named with the choices.
    """
    if source not in SOURCES:
        raise ConfigError(f"attention source: expected one of {', '.join(SOURCES)}, found {source!r}")
    return source


def check_source(model: Any, source: str) -> None:
    """Refuse ``source`` for a model whose family's block does not decompose for it (one line with the reason).

    ``weights`` runs on every model; the other sources need the family's value projection, output projection and
    layers (:data:`probes.extraction.families.FAMILIES`).

    Raises:
        ConfigError: the model's family lacks what the source needs.
    """
    if source == "weights":
        return
    family = families.family_of(model)
    model_type = getattr(families.text_config(model), "model_type", None)
    if family is None or not (family.values and family.head_output and family.layers):
        known = sorted(name for name, f in families.FAMILIES.items() if f.values and f.head_output and f.layers)
        raise ConfigError(f"attention source {source!r}: {model_type!r} models are not supported (expected a "
                          f"model type in {known}): the source needs each head's values and its slice of the output "
                          "projection, which probes.extraction.families does not know for this family")


def row_normalise(raw: Any) -> tuple[Any, Any]:
    """``(maps, totals)``: ``raw`` ``(..., T, T)`` with each row divided by its total, and the totals ``(..., T)``
    (a row whose total is 0 stays 0)."""
    import torch

    totals = raw.sum(dim=-1)  # (..., T)
    safe = torch.where(totals > 0, totals, torch.ones_like(totals))
    return raw / safe.unsqueeze(-1), totals


def _gram(output_weights: Any, gamma: Any | None) -> Any:
    """``(H, d, d)``: M_h M_h^T with M_h = W_O^h (the ``norm``) or W_O^h centred and scaled by gamma (the
    ``contribution``: v M_h = gamma * (f - mean f)), so that ||v M_h||^2 = v G_h v^T costs d^2 per token and head,
    not d x D."""
    weights = _centred(output_weights, gamma)  # (H, d, D): the map from a head's values to its (centred) output
    return weights @ weights.transpose(1, 2)


def _output_weights(site: families.HeadSite) -> Any:
    """``(H, d, D)``: each head's slice of the output projection, as x_head @ W gives its output (float32)."""
    weight = site.module.weight.detach().float()
    if type(site.module).__name__ == "Conv1D":  # GPT-2: (in, out)
        by_head = weight
    else:  # Linear: (out, in)
        by_head = weight.t()
    return by_head.reshape(site.n_heads, site.head_dim, by_head.shape[-1])


def head_outputs(values: Any, output_weights: Any) -> Any:
    """``(B, H, T, D)``: f_h(x_j) = W_O^h v^h_j for every head and token, from the values ``(B, T, H, d)`` (bias
    b_V included, as the value projection made them) and the output slices ``(H, d, D)``."""
    import torch

    return torch.einsum("bthd,hdo->bhto", values.float(), output_weights.to(values.device))


def _centred(vectors: Any, gamma: Any | None) -> Any:
    """T_i without its 1/s_i (which cancels in a row-normalised map): gamma * (v - mean v); ``vectors`` as given
    when ``gamma`` is None (pre-LN: no norm after the attention block)."""
    if gamma is None:
        return vectors
    return (vectors - vectors.mean(dim=-1, keepdim=True)) * gamma


class SourceHooks:
    """Hooks that turn a layer's attention weights into the ``norm`` or ``contribution`` maps as the model runs.

    Used as a context manager around forward passes: a forward hook on each kept layer's value projection keeps
    that layer's values ``(B, T, H, d)`` (GQA: per query head, its group's); :meth:`transform` then maps the
    layer's weights ``(B, H, T, T)`` (every head) to the source's row-normalised maps and their raw row totals.
    Value zeroing needs the whole layer run again and is :mod:`probes.extraction.value_zeroing`'s.

    Args:
        model: the model (eager attention); its family must decompose (:func:`check_source`).
        source: ``norm`` or ``contribution``.
        layers: the 0-based layers whose maps are wanted.
    """

    def __init__(self, model: Any, source: str, layers: Sequence[int]) -> None:
        if source not in ("norm", "contribution"):
            raise ValueError(f"SourceHooks: expected norm or contribution, found {source!r}")
        check_source(model, source)
        self.source = source
        wanted = set(layers)
        self._values_at = {site.layer: site for site in families.value_sites(model) if site.layer in wanted}
        self._outputs = {site.layer: _output_weights(site) for site in families.head_sites(model)
                         if site.layer in wanted}
        self._gamma: dict[int, Any] = {}
        family = families.family_of(model)
        if source == "contribution" and family is not None and family.attention_norm:
            base = getattr(model, "base_model", model)
            blocks = base.get_submodule(family.layers or "")
            for layer in wanted:
                norm = blocks[layer].get_submodule(family.attention_norm)
                self._gamma[layer] = norm.weight.detach().float()
        self._grams = {layer: _gram(weights, self._gamma.get(layer)) for layer, weights in self._outputs.items()}
        self.values: dict[int, Any] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> SourceHooks:
        for layer, site in self._values_at.items():
            self._handles.append(site.module.register_forward_hook(self._keep(layer, site)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.values.clear()

    def _keep(self, layer: int, site: families.ValueSite) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            out = output[0] if isinstance(output, (tuple, list)) else output
            self.values[layer] = site.values(out)  # (B, T, H, d)
        return hook

    def _kept(self, layer: int) -> Any:
        """``(B, T, H, d)``: the layer's values from this pass."""
        values = self.values.get(layer)
        if values is None:
            raise RuntimeError(f"layer {layer}: no values were kept in this pass (its value projection ran no "
                               "hook)")
        return values

    def vectors(self, layer: int) -> Any:
        """``(B, H, T, D)``: what each head moves from each token in ``layer`` (``contribution``: through the
        linearised LayerNorm, without its 1/s_i); needs the layer's values from this pass."""
        vectors = head_outputs(self._kept(layer), self._outputs[layer])
        gamma = self._gamma.get(layer)
        return _centred(vectors, None if gamma is None else gamma.to(vectors.device))

    def sizes(self, layer: int) -> Any:
        """``(B, H, T)``: the size of what each head moves from each token in ``layer``: ||f_h(x_j)|| (``norm``) or
        ||gamma * (f_h(x_j) - mean)|| (``contribution``), from the layer's values of this pass."""
        import torch

        values = self._kept(layer).float()  # (B, T, H, d)
        gram = self._grams[layer].to(values.device)  # (H, d, d)
        squared = torch.einsum("bthd,hde,bthe->bht", values, gram, values)
        return squared.clamp_min(0).sqrt()  # (B, H, T)

    def raw(self, layer: int, weights: Any) -> Any:
        """``(B, H, T, T)`` float32: the source's unnormalised map of ``layer`` from its weights (every head):
        alpha_ij times the size of what head h moves from token j."""
        return weights.float() * self.sizes(layer)[:, :, None, :]

    def layer_raw(self, layer: int, weights: Any, residual: Any) -> Any:
        """``(B, T, T)``: ALTI's layer-level scores of ``layer``: the vectors sum_h alpha^h_ij v^h_j, plus token i's
        own ``residual`` ``(B, T, D)`` (the block's input, through the same linearised norm) at j = i, scored
        against their sum as :func:`alti` scores one head's."""
        import torch

        vectors = self.vectors(layer)  # (B, H, T, D)
        gamma = self._gamma.get(layer)
        own = _centred(residual.float(), None if gamma is None else gamma.to(vectors.device))  # (B, T, D)
        mixed = torch.einsum("bhij,bhjo->bijo", weights.float(), vectors)  # (B, T, T, D)
        index = torch.arange(mixed.shape[1], device=mixed.device)
        mixed[:, index, index] += own
        outputs = mixed.sum(dim=2)  # (B, T, D)
        distance = (outputs[:, :, None, :] - mixed).abs().sum(dim=-1)  # (B, T, T)
        return (outputs.abs().sum(dim=-1)[:, :, None] - distance).clamp_min(0)

    def transform(self, layer: int, weights: Any) -> tuple[Any, Any]:
        """``(maps (B, H, T, T), totals (B, H, T))``: the source's row-normalised maps of ``layer`` and their raw
        row totals, from the layer's weights ``(B, H, T, T)`` (every head, as the model computed them)."""
        return row_normalise(self.raw(layer, weights))
