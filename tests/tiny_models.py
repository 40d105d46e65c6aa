"""Tiny random Hugging Face models and tokenizers, built offline, for tests.

Each builder writes a hub-style folder (``config.json``, weights, ``tokenizer.json``,
``tokenizer_config.json``) with ``save_pretrained`` so that tests exercise the same
``from_pretrained(folder)`` path as real models. Tokenizers are built with the
``tokenizers`` library from a hand-written vocabulary (WordPiece) or trained on a
few sentences (byte-level BPE, SentencePiece-style Unigram), so nothing is downloaded.

Families covered (see :data:`BUILDERS`, keyed like :data:`probes.extraction.families.FAMILIES` by
``config.model_type``; tests run on :func:`tiny_families`, read from that table):

* ``bert``: WordPiece, uncased, ``[CLS] ... [SEP]``, encoder.
* ``roberta``: byte-level BPE with the prefix space, ``<s> ... </s>``, encoder.
* ``gpt2``: byte-level BPE, no special tokens added, causal decoder.
* ``llama``: SentencePiece-style Unigram (``▁`` markers), BOS added, causal decoder with
  grouped-query attention (2 key/value heads for 4 query heads).
* ``electra``, ``deberta-v2`` (relative attention), ``modernbert`` (rotary, alternating
  local/global attention): other encoder architectures, over the ``bert`` WordPiece tokenizer.

Usage::

    from tests.tiny_models import build
    folder = build("llama", tmp_path)          # -> Path
    AttentionExtractor.from_pretrained(folder)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

__all__ = ["BUILDERS", "CORPUS", "build", "tiny_families", "uses_attention_interface", "build_bert",
           "build_roberta", "perturb", "build_gpt2", "build_llama", "build_electra", "build_deberta", "build_modernbert"]

#: Text the BPE and Unigram tokenizers are trained on; test sentences may use other words too.
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A cat sat on the mat, and the dog barked at it.",
    "Researchers study what attention heads do in transformers.",
    "She didn't know whether the unbelievable results were right.",
    "In 2019, Clark et al. looked at BERT's attention maps!",
    "Tokenization splits words into pieces: un-believ-able.",
]

_HIDDEN = 32
_LAYERS = 2
_HEADS = 4
_MAX = 64


def _seed(seed: int) -> None:
    torch.manual_seed(seed)


def _wrap_and_save(tok: object, folder: Path, cls_name: str, **special: str) -> None:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=_MAX, **special)
    fast.save_pretrained(folder)


def build_bert(folder: Path, seed: int = 0) -> Path:
    """WordPiece (uncased) tokenizer + BertModel: 2 layers x 4 heads, max 64 tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    folder = Path(folder)
    pieces = ["the", "quick", "brown", "fox", "jump", "##s", "over", "lazy", "dog", "cat", "sat", "on",
              "mat", "and", "bark", "##ed", "at", "it", "un", "##believ", "##able", "re", "##sult", "a",
              "she", "did", "##n", "'", "t", "know", ".", ",", "!", ":", "-", "in", "20", "##19", "is",
              "att", "##ention", "head", "word", "##s", "x", "y", "z", "##x", "##y", "##z"]
    vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                              + list(dict.fromkeys(pieces)))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    _wrap_and_save(tok, folder, "BertTokenizer", unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                   sep_token="[SEP]", mask_token="[MASK]")
    _seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=_HIDDEN, num_hidden_layers=_LAYERS,
                        num_attention_heads=_HEADS, intermediate_size=64, max_position_embeddings=_MAX,
                        pad_token_id=0)
    BertModel(config).eval().save_pretrained(folder)
    return folder


def _byte_bpe(vocab_size: int = 300) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def build_roberta(folder: Path, seed: int = 0) -> Path:
    """Byte-level BPE (prefix space) + RobertaModel encoder: 2 layers x 4 heads."""
    from tokenizers import processors
    from transformers import RobertaConfig, RobertaModel

    folder = Path(folder)
    tok = _byte_bpe()
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")), add_prefix_space=True)
    _wrap_and_save(tok, folder, "RobertaTokenizer", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                   unk_token="<unk>", cls_token="<s>", sep_token="</s>")
    _seed(seed)
    config = RobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=_HIDDEN, num_hidden_layers=_LAYERS,
                           num_attention_heads=_HEADS, intermediate_size=64, max_position_embeddings=_MAX + 2,
                           pad_token_id=tok.token_to_id("<pad>"), bos_token_id=0, eos_token_id=2)
    RobertaModel(config).eval().save_pretrained(folder)
    return folder


def build_gpt2(folder: Path, seed: int = 0) -> Path:
    """Byte-level BPE without special tokens + GPT2Model decoder: 2 layers x 4 heads."""
    from transformers import GPT2Config, GPT2Model

    folder = Path(folder)
    tok = _byte_bpe()
    _wrap_and_save(tok, folder, "GPT2Tokenizer", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                   unk_token="<unk>")
    _seed(seed)
    config = GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=_HIDDEN, n_layer=_LAYERS, n_head=_HEADS,
                        n_positions=_MAX, bos_token_id=0, eos_token_id=2)
    GPT2Model(config).eval().save_pretrained(folder)
    return folder


def build_llama(folder: Path, seed: int = 0) -> Path:
    """SentencePiece-style Unigram (``▁``) + LlamaModel decoder with grouped-query attention.

    2 layers, 4 query heads sharing 2 key/value heads; BOS ``<s>`` added in front.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaModel

    folder = Path(folder)
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=150, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    _wrap_and_save(tok, folder, "LlamaTokenizer", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                   pad_token="</s>")
    _seed(seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=_HIDDEN, intermediate_size=64,
                         num_hidden_layers=_LAYERS, num_attention_heads=_HEADS, num_key_value_heads=2,
                         max_position_embeddings=_MAX, bos_token_id=tok.token_to_id("<s>"),
                         eos_token_id=tok.token_to_id("</s>"), pad_token_id=tok.token_to_id("</s>"))
    LlamaModel(config).eval().save_pretrained(folder)
    return folder


def _encoder_over_wordpiece(folder: Path, seed: int, config_name: str, model_name: str, **extra: object) -> Path:
    """The ``bert`` WordPiece tokenizer with another encoder architecture (2 layers x 4 heads)."""
    import shutil
    import tempfile

    import transformers

    folder = Path(folder)
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(build_bert(Path(scratch) / "bert", seed), folder, dirs_exist_ok=True)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    _seed(seed)
    config = getattr(transformers, config_name)(
        vocab_size=len(tok), hidden_size=_HIDDEN, num_hidden_layers=_LAYERS, num_attention_heads=_HEADS,
        intermediate_size=64, max_position_embeddings=_MAX, pad_token_id=tok.pad_token_id, **extra)
    getattr(transformers, model_name)(config).eval().save_pretrained(folder)
    return folder


def build_electra(folder: Path, seed: int = 0) -> Path:
    """ElectraModel (embedding size smaller than hidden size) over WordPiece."""
    return _encoder_over_wordpiece(folder, seed, "ElectraConfig", "ElectraModel", embedding_size=16)


def build_deberta(folder: Path, seed: int = 0) -> Path:
    """DebertaV2Model with disentangled relative attention over WordPiece."""
    return _encoder_over_wordpiece(folder, seed, "DebertaV2Config", "DebertaV2Model", relative_attention=True,
                                   position_buckets=16, pos_att_type=["p2c", "c2p"])


def build_modernbert(folder: Path, seed: int = 0) -> Path:
    """ModernBertModel (rotary positions, local and global attention layers) over WordPiece."""
    ids = {"bos_token_id": 2, "eos_token_id": 3, "cls_token_id": 2, "sep_token_id": 3}  # [CLS], [SEP]
    return _encoder_over_wordpiece(folder, seed, "ModernBertConfig", "ModernBertModel",
                                   global_attn_every_n_layers=2, local_attention=4, **ids)


#: ``config.model_type`` -> builder(folder, seed): the one registry of tiny models (a new family adds one line).
BUILDERS: dict[str, Callable[..., Path]] = {
    "bert": build_bert,
    "roberta": build_roberta,
    "gpt2": build_gpt2,
    "llama": build_llama,
    "electra": build_electra,
    "deberta-v2": build_deberta,
    "modernbert": build_modernbert,
}


def tiny_families() -> list[str]:
    """The families of :data:`probes.extraction.families.FAMILIES` that have a tiny model, in table order."""
    from probes.extraction.families import FAMILIES

    return [name for name in FAMILIES if name in BUILDERS]


def perturb(model: object, seed: int, scale: float = 0.2) -> object:
    """Add ``scale`` x standard normal noise (from ``seed``) to every parameter of ``model`` in place, so that biases
    (0 at init) and LayerNorm weights (1 at init) matter in a test; returns the model."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():  # type: ignore[attr-defined]  # a torch module
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    return model


def build(name: str, root: Path, seed: int = 0) -> Path:
    """Build tiny model ``name`` (a key of :data:`BUILDERS`) in ``root/name`` and return the folder."""
    return BUILDERS[name](Path(root) / name, seed)


def uses_attention_interface(folder: Path) -> bool:
    """Whether the model class of ``folder`` runs its attention through transformers' attention interface
    (``_supports_attention_backend``, as transformers states it): the extractor's hooked and rows-only paths
    need it; DeBERTa-v2 does not, and gets the ``output_attentions`` path and full maps."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(folder)
    return bool(getattr(AutoModel._model_mapping[type(config)], "_supports_attention_backend", False))
