"""Tiny trainable models of the three training families, a plain training loop, head slices and a run's record
by hand.

Models: 2 layers, 4 heads, hidden 32 (head size 8), vocabulary 50, sequences of 8 tokens, eager attention
(so ``output_attentions`` returns weights). Llama uses grouped-query attention (2 key/value heads).
:func:`hand_heads` cuts each head's parameters out with index arithmetic written here, independently of
:mod:`probes.training.schemes`.
"""

from __future__ import annotations

from typing import Any

import torch

from probes.training.config import TrainConfig
from probes.training.data import TextSource
from probes.training.record import DataRecord, OptimizerRecord, TokenizerRecord, TrainingRecord

FAMILIES = ("bert", "gpt2", "llama")
VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, SEQ = 50, 32, 2, 4, 2, 8
D = HIDDEN // HEADS
MASK_ID = 4


def tiny_config(family: str, attention_dropout: float = 0.0, hidden_dropout: float = 0.0) -> Any:
    """A transformers config of ``family`` at the tiny size, eager attention, with the dropouts given."""
    from transformers import BertConfig, GPT2Config, LlamaConfig

    if family == "bert":
        return BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                          intermediate_size=64, max_position_embeddings=16, pad_token_id=0,
                          hidden_dropout_prob=hidden_dropout, attention_probs_dropout_prob=attention_dropout,
                          attn_implementation="eager")
    if family == "gpt2":
        return GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=16,
                          bos_token_id=1, eos_token_id=2, attn_pdrop=attention_dropout, resid_pdrop=hidden_dropout,
                          embd_pdrop=hidden_dropout, attn_implementation="eager")
    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=16,
                       bos_token_id=1, eos_token_id=2, attention_dropout=attention_dropout,
                       attn_implementation="eager")


def tiny_model(family: str, seed: int = 0, **dropouts: float) -> Any:
    """``family``'s LM (BertForMaskedLM, GPT2LMHeadModel, LlamaForCausalLM) built under ``torch.manual_seed(seed)``."""
    from transformers import BertForMaskedLM, GPT2LMHeadModel, LlamaForCausalLM

    classes = {"bert": BertForMaskedLM, "gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM}
    torch.manual_seed(seed)
    return classes[family](tiny_config(family, **dropouts))


def batch(family: str, generator: torch.Generator, size: int = 4) -> dict[str, torch.Tensor]:
    """Counting runs from a random start (learnable: each token is the previous one + 1): a masked-LM batch (15%
    masked, loss on those) for bert, a causal-LM batch otherwise."""
    start = torch.randint(0, VOCAB - 5, (size, 1), generator=generator)
    ids = 5 + (start + torch.arange(SEQ)) % (VOCAB - 5)
    if family != "bert":
        return {"input_ids": ids, "labels": ids.clone()}
    masked = torch.rand((size, SEQ), generator=generator) < 0.15
    masked[:, 0] = True  # at least one masked token per row
    return {"input_ids": ids.masked_fill(masked, MASK_ID), "labels": ids.masked_fill(~masked, -100)}


def train_steps(model: Any, family: str, steps: int = 50, seed: int = 0) -> list[float]:
    """``steps`` Adam steps (lr 1e-2) of a plain torch loop in train mode; the losses."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    losses = []
    for _ in range(steps):
        loss = model(**batch(family, generator)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def attention_maps(model: Any, family: str, seed: int = 1) -> list[torch.Tensor]:
    """Per layer ``(B, H, T, T)`` eager attention weights of the model in eval mode on a random batch."""
    model.eval()
    with torch.no_grad():
        ids = batch(family, torch.Generator().manual_seed(seed))["input_ids"]
        return list(model(input_ids=ids, output_attentions=True).attentions)


def _attention(model: Any, family: str, layer: int) -> Any:
    if family == "bert":
        return model.bert.encoder.layer[layer].attention
    if family == "gpt2":
        return model.transformer.h[layer].attn
    return model.model.layers[layer].self_attn


def hand_heads(model: Any, family: str, layer: int) -> list[dict[str, torch.Tensor]]:
    """Per query head, its (weight, bias) slices by hand: ``{"q.w": ..., "q.b": ..., ..., "o.w": ...}`` (views).

    Llama's key/value entries are the key/value head the query head reads (head h -> h // 2).
    """
    att = _attention(model, family, layer)
    heads = []
    for k in range(HEADS):
        rows = slice(k * D, (k + 1) * D)
        if family == "bert":
            s = att.self
            head = {"q.w": s.query.weight[rows, :], "q.b": s.query.bias[rows], "k.w": s.key.weight[rows, :],
                    "k.b": s.key.bias[rows], "v.w": s.value.weight[rows, :], "v.b": s.value.bias[rows],
                    "o.w": att.output.dense.weight[:, rows]}
        elif family == "gpt2":  # c_attn (in, 3*hidden): queries [0, h), keys [h, 2h), values [2h, 3h)
            w, b = att.c_attn.weight, att.c_attn.bias
            cols = [slice(part * HIDDEN + k * D, part * HIDDEN + (k + 1) * D) for part in range(3)]
            head = {"q.w": w[:, cols[0]], "q.b": b[cols[0]], "k.w": w[:, cols[1]], "k.b": b[cols[1]],
                    "v.w": w[:, cols[2]], "v.b": b[cols[2]], "o.w": att.c_proj.weight[rows, :]}
        else:
            g = k // (HEADS // KV_HEADS)
            kv = slice(g * D, (g + 1) * D)
            head = {"q.w": att.q_proj.weight[rows, :], "k.w": att.k_proj.weight[kv, :],
                    "v.w": att.v_proj.weight[kv, :], "o.w": att.o_proj.weight[:, rows]}
        heads.append(head)
    return heads


def copy_head_zero_by_hand(model: Any, family: str) -> None:
    """Make every head of every layer a copy of head 0 (key/value head 0 for llama), by hand, in place."""
    with torch.no_grad():
        for layer in range(LAYERS):
            heads = hand_heads(model, family, layer)
            first = {name: t.clone() for name, t in heads[0].items()}
            for head in heads[1:]:
                for name, t in head.items():
                    t.copy_(first[name])


def max_head_gap(model: Any, family: str) -> float:
    """Largest absolute difference between any head's parameters (by hand) and head 0's, over all layers."""
    gap = 0.0
    for layer in range(LAYERS):
        heads = hand_heads(model, family, layer)
        for head in heads[1:]:
            gap = max(gap, max((t - heads[0][n]).abs().max().item() for n, t in head.items()))
    return gap


def a_record(**config: Any) -> TrainingRecord:
    """A small run's record (``training.json``), made by hand; ``config``: options of its TrainConfig."""
    options = TrainConfig(**{"arch": "bert", "layers": 1, "heads": 2, "hidden": 32, "treebank": ("sample:dev",),
                             "tokenizer": "train:200", **config})
    source = TextSource(spec="sample:dev", path="/data/dev.conllu", sha256="ab" * 32, sentences=82)
    return TrainingRecord(config=options, data=DataRecord((source,), 69, 13, "a tenth", 71, 13),
                          tokenizer=TokenizerRecord("train:200", "BPE, BERT-style (uncased)", 200, "the sentences"),
                          processes=1, unigram_dev_loss=4.5, unigram_rule="unigram", tokens_rule="tokens",
                          optimizer=OptimizerRecord("adamw_torch", "linear", 1.0))
