"""Fake models for the comparison tests: attention planted on the packaged sample corpus, so the answers are known.

A fake model is ``n_layers x n_heads`` heads over the sample sentences (one token per word, ``[CLS]`` and
``[SEP]`` around). A *perfect* head puts all its weight, from every word, on the word's gold head (ROOT words
on ``[CLS]``): it beats every baseline on every relation. Other heads are random (peaked rows): far below the
baselines. Every analysis of the atlas runs for real on these maps (leaderboard, surface, roles, patterns, head
distances with per-sentence pairs).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np

import probes
from probes.corpora import read_treebank
from probes.extraction.attention import TokenAttention, WordAttention

SAMPLE = Path(probes.__file__).resolve().parent / "corpora" / "sample"


@functools.cache
def sentences(split: str = "dev") -> tuple[Any, ...]:
    """The packaged sample sentences of ``split`` (silver spaCy trees)."""
    return tuple(read_treebank(SAMPLE / f"sample-{split}.conllu"))


def maps(sentence: Any, shape: tuple[int, int], perfect: frozenset[int], rng: np.random.Generator) -> np.ndarray:
    """``(L, H, n + 2, n + 2)`` maps over [CLS] words [SEP]: perfect heads (flat index) on the gold head."""
    n = len(sentence.words)
    size = n + 2
    w = rng.random((*shape, size, size)) ** 4  # peaked random rows
    w = w.reshape(-1, size, size)
    target = np.array(sentence.heads)  # 1-based gold head, 0 = ROOT -> [CLS] column 0
    for flat in perfect:
        w[flat] = 1e-6
        w[flat, np.arange(1, n + 1), target] = 1.0
        w[flat, 0, 0] = w[flat, -1, -1] = 1.0
    w /= w.sum(-1, keepdims=True)
    return w.reshape(*shape, size, size).astype(np.float32)


def pairs(sentences_: tuple[Any, ...], shape: tuple[int, int], perfect: frozenset[int], seed: int
          ) -> list[tuple[Any, WordAttention]]:
    """``(sentence, WordAttention with token maps)`` for every sentence."""
    rng = np.random.default_rng(seed)
    out = []
    for s in sentences_:
        w = maps(s, shape, perfect, rng)
        size = w.shape[-1]
        special = np.zeros(size, dtype=bool)
        special[[0, -1]] = True
        word_of = np.where(special, -1, np.arange(size) - 1)
        tokens = TokenAttention(w, ("[CLS]",) + tuple(s.words) + ("[SEP]",), word_of, np.arange(size) == 0,
                                np.arange(size) == size - 1)
        out.append((s, WordAttention(w, special, tuple(range(shape[0])), tuple(range(shape[1])), tokens=tokens)))
    return out


def feed(analysis: Any, items: list[tuple[Any, WordAttention]]) -> Any:
    for item, attention in items:
        analysis.update(item, attention)
    return analysis.compute()


def fake_atlas(shape: tuple[int, int] = (2, 4), perfect: frozenset[int] = frozenset(), seed: int = 0,
               split: str = "dev", js_items: bool = True, js_sentences: int = 40, name: str | None = None) -> Any:
    """An :class:`~probes.runs.atlas.Atlas` of a fake model on the sample ``split``: heads chosen on the second
    half of the sentences (``separate`` mode), reported on the first."""
    from probes.analysis.head_distances import HeadDistances
    from probes.analysis.patterns import AttentionPatterns
    from probes.analysis.roles import HeadRoles, word_frequencies
    from probes.analysis.surface import SurfaceStats
    from probes.heads.profile import best_relations
    from probes.runs.atlas import Atlas
    from probes.runs.leaderboard import leaderboard_from_pairs

    items = pairs(sentences(split), shape, perfect, seed)
    half = len(items) // 2
    name = name or f"sample:{split}"
    board = leaderboard_from_pairs(items[:half], select_pairs=items[half:], report_name=name,
                                   select_name=f"{name} (second half)", min_count=30,
                                   record={"model": "fake", "extractor": {"device": "cpu"}})
    board = dataclasses.replace(board, record=board.record.updated(reported_on=name))
    profile = best_relations(board.report, board.report_baselines, [r.relation for r in board.rows
                                                                   if not r.relation.startswith("ALL")],
                             select=board.select, select_baselines=board.select_baselines)
    distances = feed(HeadDistances(max_items=js_sentences, keep_items=js_items), items)
    n = shape[0] * shape[1]
    return Atlas(board=board, surface=feed(SurfaceStats(), items),
                 roles=feed(HeadRoles(word_frequencies(s for s, _ in items)), items),
                 patterns=feed(AttentionPatterns(), items), distances=distances, profile=profile,
                 layout=np.zeros((n, 2)), clusters=np.ones(n, dtype=np.int64), record={"model": "fake"})
