"""The rows a rows-only pass computes travel as an argument of that pass (``probes_rows``), not as ambient state.

Before, the rows were set on a ``threading.local`` for the duration of a block: every forward pass on the
thread inside the block computed them, including a pass nobody asked rows of (a second model run from a
hook of the first). Now only the pass given ``probes_rows`` computes rows; any other pass returns no weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from probes.extraction import rows as row_attention
from tests.tiny_models import build


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModel

    folder: Path = build("bert", tmp_path_factory.mktemp("rows_argument"))
    row_attention.register()
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    model.set_attn_implementation(row_attention.IMPLEMENTATION)
    return model


def _weights(model: Any, ids: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor | None, ...]:
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True, **kwargs)
    return tuple(out.attentions)


def test_the_rows_given_to_a_pass_are_the_rows_it_computes(bert: Any) -> None:
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    rows = torch.tensor([[1, 4], [0, 5]])
    weights = _weights(bert, ids, probes_rows=rows)
    assert all(w is not None and tuple(w.shape) == (2, bert.config.num_attention_heads, 2, 6) for w in weights)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))  # probability rows
    assert all(w is None for w in _weights(bert, ids))  # no rows asked for: none computed


def test_a_pass_run_inside_another_gets_no_rows_it_was_not_given(bert: Any) -> None:
    """What the thread-local allowed: a pass run from a hook of a rows-only pass computed that pass' rows."""
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    inner: list[tuple[torch.Tensor | None, ...]] = []
    started: list[bool] = []

    def run_inside(module: Any, args: Any, output: Any) -> None:
        if not started:  # once: the inner pass runs this hook too
            started.append(True)
            inner.append(_weights(bert, ids))

    handle = bert.encoder.layer[0].register_forward_hook(run_inside)
    try:
        outer = _weights(bert, ids, probes_rows=torch.tensor([[2, 3]]))
    finally:
        handle.remove()
    assert all(w is not None and w.shape[2] == 2 for w in outer)
    assert inner and all(w is None for w in inner[0])
