"""The number of evaluated mentions on GUM dev, against an independent count written here."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from probes.analysis.coreference import AntecedentAccuracy
from probes.extraction.attention import WordAttention
from probes.extraction.windows import document_windows

pytestmark = pytest.mark.slow

BRACKET = re.compile(r"\((\d+)[^()]*(\)?)|(\d+)\)")  # "(id-fields" [")"]  or  "id)"


def independent_mentions(path: Path) -> list[list[tuple[str, int, int, int]]]:
    """Per document: (entity, start, end, head) read straight from the Entity= brackets, no probes code.

    The head is the span word whose head lies outside the span, the one nearest the root (leftmost on ties).
    """
    docs: list[list[tuple[str, int, int, int]]] = []
    heads: list[int] = []  # document-level head offset of each word, -1 for root
    stacks: dict[str, list[int]] = {}
    spans: list[tuple[str, int, int]] = []
    base = 0

    def flush() -> None:
        if not heads:
            return
        depth = []
        for w in range(len(heads)):
            d, h = 0, heads[w]
            while h != -1:
                d, h = d + 1, heads[h]
            depth.append(d)
        out = []
        for ent, s, e in spans:
            outside = [w for w in range(s, e) if not (s <= heads[w] < e)]
            out.append((ent, s, e, min(outside, key=lambda w: (depth[w], w))))
        docs.append(out)

    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("# newdoc"):
                flush()
                heads, stacks, spans, base = [], {}, [], 0
                continue
            if not line:
                base = len(heads)
                continue
            if line.startswith("#"):
                continue
            cols = line.split("\t")
            if "-" in cols[0] or "." in cols[0]:
                continue
            k = len(heads)
            heads.append(-1 if cols[6] == "0" else base + int(cols[6]) - 1)
            ent = next((f[7:] for f in cols[9].split("|") if f.startswith("Entity=")), "")
            # brackets in order: "(7-...(3-...)" opens 7, opens and closes 3; "7)6)" closes 7 then 6
            for opened, single, closed in BRACKET.findall(ent):
                if opened and single:
                    spans.append((opened, k, k + 1))
                elif opened:
                    stacks.setdefault(opened, []).append(k)
                else:
                    spans.append((closed, stacks[closed].pop(), k + 1))
    flush()
    return docs


def independent_split_antecedents(path: Path) -> list[dict[str, set[str]]]:
    """Per document: anaphor entity -> its split-antecedent entities, from ``SplitAnte=ante<ana`` with a regex."""
    docs: list[dict[str, set[str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc"):
            docs.append({})
        for value in re.findall(r"SplitAnte=([^|\t]*)", line):
            for ante, ana in re.findall(r"([^,<]+)<([^,<]+)", value):
                docs[-1].setdefault(ana, set()).add(ante)
    return docs


def evaluated_independently(mentions: list[tuple[str, int, int, int]], windows: Sequence[tuple[int, int]],
                            parts: dict[str, set[str]]) -> tuple[int, int]:
    """``(evaluated, via split)``: mentions with a preceding mention (one ending before they start) of their
    entity inside the first window holding them, or else (split antecedents, ``any-part``) of one of their
    entity's parts."""
    order = sorted(mentions, key=lambda m: (m[1], -m[2], m[3]))
    n = via = 0
    for k, (ent, s, e, _head) in enumerate(order):
        home = next((w for w in windows if w[0] <= s and e <= w[1]), None)
        if home is None:
            continue
        inside = [a for a in order[:k] if a[2] <= s and home[0] <= a[1] and a[2] <= home[1]]
        if any(a[0] == ent for a in inside):
            n += 1
        elif any(a[0] in parts.get(ent, ()) for a in inside):
            n += 1
            via += 1
    return n, via


def uniform(n: int) -> WordAttention:
    return WordAttention(np.full((1, 1, n, n), 1.0 / n, dtype=np.float32), np.zeros(n, bool), (0,), (0,))


@pytest.fixture(scope="module")
def gum_dev(gum: Path):
    from probes.corpora import read_documents

    path = gum / "en_gum-ud-dev.conllu"
    return path, list(read_documents(path)), independent_mentions(path), independent_split_antecedents(path)


def test_whole_document_windows_evaluate_every_mention_with_an_antecedent(gum_dev) -> None:
    path, docs, indep, splits = gum_dev
    assert len(docs) == len(indep) == len(splits) == 30
    assert sum(map(len, indep)) == sum(len(d.mentions) for d in docs)
    for option in ("any-part", "ignore"):
        acc = AntecedentAccuracy(split_antecedents=option)
        expected = [0, 0]
        for doc, mentions, parts in zip(docs, indep, splits):
            (w,) = document_windows(doc, lambda words: len(words) + 2, 10**6)
            acc.update(w, uniform(w.n_words))
            n, via = evaluated_independently(mentions, [(0, doc.n_words)], parts if option == "any-part" else {})
            expected = [expected[0] + n, expected[1] + via]
        res = acc.compute()
        evaluated = sum(c["evaluated"] for c in res.counts.values())
        assert [evaluated, sum(c["via_split_antecedent"] for c in res.counts.values())] == expected
        assert evaluated == int(res.total.sum())
        assert evaluated + sum(c["no_antecedent"] for c in res.counts.values()) == sum(map(len, indep))


def test_default_minilm_windows_match_the_independent_count(gum_dev, minilm_path: Path) -> None:
    from transformers import AutoTokenizer

    path, docs, indep, splits = gum_dev
    tok = AutoTokenizer.from_pretrained(str(minilm_path))

    def count(words: Sequence[str]) -> int:
        return len(tok(list(words), is_split_into_words=True)["input_ids"])

    acc = AntecedentAccuracy()  # default: split_antecedents="any-part"
    expected, via = 0, 0
    for doc, mentions, parts in zip(docs, indep, splits):
        windows = document_windows(doc, count, 512)
        for w in windows:
            acc.update(w, uniform(w.n_words))
        n, v = evaluated_independently(mentions, [(w.start, w.end) for w in windows], parts)
        expected, via = expected + n, via + v
    res = acc.compute()
    assert sum(c["evaluated"] for c in res.counts.values()) == expected
    assert sum(c["via_split_antecedent"] for c in res.counts.values()) == via
    # all-MiniLM-L6-v2 (512 tokens, stride 255): the README's "evaluated" count, of which via split antecedents
    # (3837 before issue 10, when a mention enclosing the anaphor could be its antecedent)
    assert (expected, via) == (3807, 17)
