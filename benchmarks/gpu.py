"""Benchmark for an accelerator: sentences per second of word-level attention against a bare forward pass.

For two random-init configs, a BERT-base-sized encoder and a Llama-style decoder, on the same synthetic
sentences, in one run:

(a) ``probes``: :class:`probes.extraction.extractor.AttentionExtractor` from words to word-level maps on the
    CPU (tokenization, batching, attention capture, pooling on the device, copy back);
(b) ``bare eager``: the same model on exactly the batches (a) ran (recorded by a forward pre-hook), eager
    attention, no attention weights asked for: what capture and pooling cost on top of the same kernels;
(c) ``bare sdpa``: the same batches with PyTorch's fused scaled-dot-product attention (no weights at all):
    the fastest forward pass the model has, what a user without ``probes`` would run.

The rounds alternate (a), (b), (c) ``--repeat`` times and the fastest of each counts; on a CPU rounds are
timed by this process' CPU time (``--clock cpu``, best with ``--threads 1``), which other jobs on a shared
machine disturb far less than wall time. Prints sentences/s,
the ratios a/b and a/c (time), peak accelerator memory of each (CUDA), and one line of JSON.

Configs: ``bert-base`` (12 layers, 12 heads, hidden 768) and ``llama-1b`` (16 layers, 32 query / 8
key-value heads, hidden 2048, like Llama-3.2-1B); with ``--small`` (the default without CUDA)
``bert-small`` (6 x 12, hidden 384, MiniLM's shape) and ``llama-small`` (4 layers, 16 / 4 heads, hidden
512). Sentences are synthetic: lengths drawn like UD English EWT's (log-normal, median 13 words, clipped
to 1..120), words of 1-3 syllables over a WordPiece vocabulary of syllables (about 1.4 tokens a word), so
nothing is downloaded; both models use that tokenizer. Example, on a GPU (about 2-3 minutes)::

    python benchmarks/gpu.py --device cuda --dtype bfloat16 --sentences 4000

and on a CPU::

    python benchmarks/gpu.py --small --device cpu --threads 1 --sentences 200
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runs from a plain checkout (no pip install)

#: Model shapes: (family, layers, query heads, key-value heads, hidden, intermediate).
CONFIGS: dict[str, tuple[str, int, int, int, int, int]] = {
    "bert-base": ("bert", 12, 12, 12, 768, 3072),
    "llama-1b": ("llama", 16, 32, 8, 2048, 8192),
    "bert-small": ("bert", 6, 12, 12, 384, 1536),
    "llama-small": ("llama", 4, 16, 4, 512, 1408),
}
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


#: The clock the rounds are timed with (set by ``--clock``): wall time, or this process' CPU time, which a
#: busy shared CPU disturbs far less (with one thread it is the wall time of an idle machine).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_CLOCK = {"now": time.perf_counter}


def clock() -> float:
    """Seconds on the clock chosen by ``--clock``."""
    return _CLOCK["now"]()


def syllables() -> list[str]:
    """The 90 consonant-vowel syllables of the synthetic language (and 'a' ... 'u')."""
    return [c + v for c in _CONSONANTS for v in _VOWELS] + list(_VOWELS)


def synthetic_sentences(n: int, seed: int = 0) -> list[list[str]]:
    """``n`` sentences of EWT-like lengths (log-normal, median 13 words, 1..120) of 1-3 syllable words."""
    rng = np.random.default_rng(seed)
    parts = syllables()
    lengths = np.clip(np.round(rng.lognormal(np.log(13), 0.65, size=n)), 1, 120).astype(int)
    sentences = []
    for length in lengths:
        n_syllables = rng.choice([1, 2, 3], size=length, p=[0.7, 0.2, 0.1])
        sentences.append(["".join(rng.choice(parts, size=k)) for k in n_syllables])
    return sentences


def build_tokenizer(folder: Path) -> Any:
    """A WordPiece tokenizer over the syllables (``[CLS] ... [SEP]``), saved in ``folder`` and loaded back."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    pieces = syllables()
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *pieces,
                                         *(f"##{p}" for p in pieces)])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=512, pad_token="[PAD]",
                                   unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(folder)
    return PreTrainedTokenizerFast.from_pretrained(folder)


def build_model(name: str, vocab_size: int, device: torch.device, dtype: torch.dtype) -> Any:
    """A random-init model of config ``name``, built directly on ``device`` in ``dtype`` (eager attention)."""
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

    family, layers, heads, kv_heads, hidden, inner = CONFIGS[name]
    if family == "bert":
        config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=heads, intermediate_size=inner, max_position_embeddings=512,
                            attn_implementation="eager")
        cls = BertModel
    else:
        config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=inner,
                             max_position_embeddings=2048, attn_implementation="eager")
        cls = LlamaModel
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(config).to(dtype)
    return model.eval()


def record_batches(model: Any) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], Callable[[], None]]:
    """Record every forward pass's ``(input_ids, attention_mask)`` (on the CPU); returns them and a remover."""
    batches: list[tuple[torch.Tensor, torch.Tensor]] = []

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        mask = kwargs["attention_mask"] if "attention_mask" in kwargs else args[1]
        batches.append((ids.cpu(), mask.cpu()))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    return batches, handle.remove


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_seconds(model: Any, batches: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device,
                 attention: str) -> float:
    """Seconds of the forward passes over ``batches`` with ``attention`` (eager / sdpa), no weights returned."""
    model.set_attn_implementation(attention)
    kwargs = {"use_cache": False} if model.config.model_type == "llama" else {}
    on_device = [(x.to(device), m.to(device)) for x, m in batches]
    sync(device)
    start = clock()
    with torch.inference_mode():
        for x, mask in on_device:
            out = model(input_ids=x, attention_mask=mask, **kwargs)
            del out
    sync(device)
    seconds = clock() - start
    model.set_attn_implementation("eager")
    return seconds


def peak_mb(device: torch.device, run: Callable[[], float]) -> tuple[float, float]:
    """``run()``'s result and the peak accelerator memory it reached above what was held before (MB; CUDA)."""
    if device.type != "cuda":
        return run(), float("nan")
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    seconds = run()
    return seconds, (torch.cuda.max_memory_allocated(device) - base) / 2**20


def bench(name: str, tokenizer: Any, sentences: list[list[str]], args: argparse.Namespace) -> dict[str, Any]:
    """Time (a) probes, (b) bare eager and (c) bare SDPA for config ``name``; returns the figures."""
    from probes.extraction.extractor import AttentionExtractor

    device = torch.device(args.device)
    model = build_model(name, len(tokenizer), device, getattr(torch, args.dtype))
    extractor = AttentionExtractor(model, tokenizer, device=device, dtype=args.dtype, batch_size=args.batch_size,
                                   progress=False)
    for _ in extractor.iter_words(sentences[:16], words=lambda w: w):  # warm-up: kernels, allocator
        pass
    batches, remove = record_batches(model)

    def probes_run() -> float:
        start = clock()
        for _ in extractor.iter_words(sentences, words=lambda w: w):
            pass
        sync(device)
        return clock() - start

    times: dict[str, list[float]] = {"probes": [], "eager": [], "sdpa": []}
    peaks: dict[str, float] = {}
    for round_ in range(args.repeat):
        seconds, peaks["probes"] = peak_mb(device, probes_run)
        times["probes"].append(seconds)
        if round_ == 0:
            remove()  # the batches of one pass, replayed by (b) and (c)
        for attention in ("eager", "sdpa"):
            seconds, peaks[attention] = peak_mb(device, lambda attention=attention: bare_seconds(model, batches, device, attention))
            times[attention].append(seconds)
    best = {k: min(v) for k, v in times.items()}
    n_tokens = int(sum(int(m.sum()) for _, m in batches))
    return {"config": name, "layers": extractor.n_layers, "heads": extractor.n_heads, "sentences": len(sentences),
            "tokens": n_tokens, "batches": len(batches), **{f"{k}_s": round(v, 3) for k, v in best.items()},
            **{f"{k}_sent_per_s": round(len(sentences) / v, 1) for k, v in best.items()},
            "probes_over_eager": round(best["probes"] / best["eager"], 3),
            "probes_over_sdpa": round(best["probes"] / best["sdpa"], 3),
            **{f"{k}_peak_mb": None if np.isnan(v) else round(v, 1) for k, v in peaks.items()},
            "rounds_s": {k: [round(t, 3) for t in v] for k, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", default="cuda" if cuda else "cpu", help="cpu, cuda, cuda:N (default: cuda if any)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--sentences", type=int, default=None, help="synthetic sentences (default 4000; --small 200)")
    parser.add_argument("--small", action="store_true", default=not cuda,
                        help="CPU-sized configs bert-small and llama-small (the default without CUDA)")
    parser.add_argument("--full", dest="small", action="store_false", help="bert-base and llama-1b even on a CPU")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of (a), (b), (c); the fastest counts")
    parser.add_argument("--clock", choices=list(CLOCKS), default=None,
                        help="time rounds by wall time or by this process' CPU time (default: wall on CUDA, cpu "
                             "on a CPU, where other jobs' load would dominate wall time; use it with --threads 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--configs", default=None, help="comma-separated config names (default: the two sized ones)")
    args = parser.parse_args(argv)
    names = args.configs.split(",") if args.configs else (["bert-small", "llama-small"] if args.small
                                                           else ["bert-base", "llama-1b"])
    if args.threads:
        torch.set_num_threads(args.threads)
    args.clock = args.clock or ("cpu" if args.device == "cpu" else "wall")
    _CLOCK["now"] = CLOCKS[args.clock]
    sentences = synthetic_sentences(args.sentences or (200 if args.small else 4000))
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = build_tokenizer(Path(folder))
    print(f"device {args.device} ({torch.cuda.get_device_name(args.device) if 'cuda' in args.device else 'cpu'}), "
          f"dtype {args.dtype}, torch {torch.__version__}, threads {torch.get_num_threads()}, {args.clock} clock; "
          f"{len(sentences)} synthetic sentences, {sum(map(len, sentences))} words")
    rows = [bench(name, tokenizer, sentences, args) for name in names]
    print(f"{'config':12s} {'L x H':>7s} {'tokens':>7s} {'probes/s':>9s} {'eager/s':>9s} {'sdpa/s':>9s} "
          f"{'a/b':>6s} {'a/c':>6s} {'peak MB a / b / c':>20s}")
    for r in rows:
        peaks = " / ".join("-" if r[f"{k}_peak_mb"] is None else f"{r[f'{k}_peak_mb']:.0f}"
                           for k in ("probes", "eager", "sdpa"))
        print(f"{r['config']:12s} {r['layers']:>3d} x {r['heads']:<3d} {r['tokens']:>7d} {r['probes_sent_per_s']:>9.1f} "
              f"{r['eager_sent_per_s']:>9.1f} {r['sdpa_sent_per_s']:>9.1f} {r['probes_over_eager']:>6.2f} "
              f"{r['probes_over_sdpa']:>6.2f} {peaks:>20s}")
    print("a/b, a/c: probes time over the bare eager / SDPA forward pass on the same batches (lower is better)")
    print(json.dumps({"device": args.device, "dtype": args.dtype, "clock": args.clock,
                      "threads": torch.get_num_threads(), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
