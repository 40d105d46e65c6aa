"""The tokenizer of a training run: trained on the training text with ``tokenizers``, or a base model's.

``train:VOCAB`` trains one on the training sentences, deterministically (the same text gives the same
vocabulary): for ``bert`` BERT's uncased normalizer and pre-tokenizer with ``[CLS] ... [SEP]`` around every
input, over a character-level BPE vocabulary (the ``tokenizers`` WordPiece trainer breaks ties in hash order, so
it is not reproducible); for ``gpt2`` and ``llama`` a byte-level BPE tokenizer over all 256 bytes (so no text is ever
unknown) with the prefix space, as GPT-2's own. Anything else names a base model (a folder, ``package:NAME`` or
a hub name) whose tokenizer is used, loaded as every command loads it
(:func:`probes.extraction.loading.load_tokenizer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from probes.errors import ConfigError
from probes.extraction.families import Trainable, trainable_families
from probes.training.config import TrainConfig
from probes.training.record import TokenizerRecord

__all__ = ["build_tokenizer", "train_tokenizer", "describe_tokenizer"]


def _bert_bpe(texts: Sequence[str], vocab: int, family: Trainable) -> Any:
    """BERT's uncased normalizer and pre-tokenizer, ``[CLS] ... [SEP]``, over a character-level BPE vocabulary.

    Not WordPiece: the ``tokenizers`` WordPiece trainer numbers its ``##`` pieces in hash order, so two trainings
    on the same text can keep different pieces; its BPE trainer gives the same vocabulary every time."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    specials = list(family.special_tokens)
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok, {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "mask_token": "[MASK]"}


def _byte_bpe(texts: Sequence[str], vocab: int, family: Trainable) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    end, pad = family.special_tokens
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[end, pad], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer)
    return tok, {"bos_token": end, "eos_token": end, "unk_token": end, "pad_token": pad, "add_prefix_space": True}


def train_tokenizer(texts: Sequence[str], arch: str, vocab: int, max_length: int) -> Any:
    """A fast tokenizer of at most ``vocab`` entries trained on ``texts`` for the architecture ``arch`` (byte-level
    BPE where its row of the families table says ``byte_level``, BERT-style BPE otherwise), as a
    :class:`transformers.PreTrainedTokenizerFast` that saves and loads like any model's."""
    from transformers import PreTrainedTokenizerFast

    family = trainable_families()[arch]
    build = _byte_bpe if family.byte_level else _bert_bpe
    tok, special = build(texts, vocab, family)
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_length, **special)


def build_tokenizer(config: TrainConfig, texts: Sequence[str]) -> Any:
    """The run's tokenizer: trained on ``texts`` (``train:VOCAB``) or the base model's (``config.tokenizer``).

    Raises:
        ConfigError: a base tokenizer that cannot be loaded, or (for ``bert``) one without a mask token.
    """
    vocab = config.train_vocab
    if vocab is not None:
        return train_tokenizer(texts, config.arch, vocab, config.seq_len)
    from probes.extraction.loading import load_tokenizer, resolve_model

    try:
        tokenizer = load_tokenizer(resolve_model(config.tokenizer))
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"--tokenizer: cannot load the tokenizer of {config.tokenizer!r} ({exc})") from None
    if config.masked_lm and tokenizer.mask_token_id is None:
        raise ConfigError(f"--tokenizer: expected a tokenizer with a mask token for --arch bert (masked-LM), "
                          f"found {config.tokenizer!r} without one")
    if tokenizer.pad_token_id is None:  # batches of the extractor are padded; blocks never are
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    tokenizer.model_max_length = config.seq_len
    return tokenizer


def describe_tokenizer(config: TrainConfig, tokenizer: Any) -> TokenizerRecord:
    """What ``training.json`` says about the tokenizer: its source, kind and vocabulary size."""
    kind = ("byte-level BPE" if config.family.byte_level else "BPE, BERT-style (uncased)") \
        if config.train_vocab is not None else type(tokenizer).__name__
    return TokenizerRecord(spec=config.tokenizer, kind=kind, vocab_size=len(tokenizer),
                           trained_on="the training sentences" if config.train_vocab is not None else None)
