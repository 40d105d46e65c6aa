"""What a GGUF file's metadata says about its model, checked before transformers builds the model from it.

transformers' GGUF loader trusts the metadata: zero attention heads end in a ZeroDivisionError, key/value
heads that do not divide the heads in a reshape error, merges that are not pairs of known tokens in a
TypeError or a panic of the tokenizers library, a vocabulary of another size than the embedding in a
RuntimeError, and widths far beyond what the file's tensors hold in a model of terabytes, allocated before a
weight is read. :func:`check_model` refuses such a file first, in one :class:`GGUFError` naming the file and
the field, what was expected and what was found.

The sizes are bounded by the tensors the file holds (``T`` values in all), so that a tiny file cannot make
the loader build a huge model: ``embedding_length`` squared (one attention projection), ``embedding_length``
times ``feed_forward_length`` (one feed-forward matrix), times the vocabulary (the embedding) and times the
query heads' width all stay within ``T``, and ``block_count`` within the number of tensors. Every real model
holds each of these matrices, so no real file is refused by these bounds.
"""

from __future__ import annotations

from typing import Any

from probes.extraction.gguf_header import GGUFArray, GGUFError, GGUFHeader

__all__ = ["check_model"]

#: The special tokens transformers looks up in the vocabulary by id.
_SPECIAL_IDS = ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id")


def _fail(header: GGUFHeader, field: str, text: str) -> GGUFError:
    return GGUFError(f"{field}: {text}", path=header.path)


def _show(value: object, limit: int = 60) -> str:
    if isinstance(value, GGUFArray):
        return f"an array of {value.count:,} {value.element_type} values"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_counts(header: GGUFHeader, key: str, what: str, *, zeros: bool = False) -> tuple[int, ...] | None:
    """The whole numbers above 0 that ``key`` holds (one, or one per layer); None when the key is absent.

    ``zeros``: an array may hold 0 (a layer without attention, as LFM2's key/value heads say).
    """
    value = header.metadata.get(key)
    if value is None:
        return None
    values = value.values if isinstance(value, GGUFArray) else (value,)
    lowest = 0 if zeros and isinstance(value, GGUFArray) else 1
    if not values or not all(_whole(v) and v >= lowest for v in values):
        raise _fail(header, key, f"expected {what} to be a whole number above 0, found {_show(value)}")
    return tuple(values)


def _counts(header: GGUFHeader, key: str, what: str) -> tuple[int, ...]:
    """:func:`_optional_counts` of a key the model needs."""
    found = _optional_counts(header, key, what)
    if found is None:
        raise _fail(header, key, f"expected {what}, found no such key")
    return found


def check_model(header: GGUFHeader) -> None:
    """Refuse a GGUF file whose model transformers' loader would fail on or blow up building.

    Raises:
        GGUFError: no architecture; no attention heads, key/value heads that do not divide them, no layers, no
            width; sizes beyond what the file's tensors hold; a vocabulary missing or of another size than the
            embedding; special token ids outside it; merges that are not two known tokens.
    """
    arch = header.text("general.architecture")
    if not arch:
        found = header.metadata.get("general.architecture")
        raise _fail(header, "general.architecture", "expected the model's architecture (e.g. 'llama'), found "
                    + (_show(found) if found is not None else "no such key"))
    heads = _check_heads(header, arch)
    tokens = _vocabulary(header)
    _check_sizes(header, arch, heads, tokens)
    _check_special_ids(header, tokens)
    _check_merges(header, tokens)


def _check_heads(header: GGUFHeader, arch: str) -> tuple[int, ...]:
    key = f"{arch}.attention.head_count"
    heads = _counts(header, key, "the number of attention heads")
    kv_key = f"{arch}.attention.head_count_kv"
    kv = _optional_counts(header, kv_key, "the number of key/value heads", zeros=True)
    if kv is None:
        return heads
    pairs = zip(heads * len(kv) if len(heads) == 1 else heads, kv if len(kv) > 1 else kv * len(heads))
    for layer, (h, k) in enumerate(pairs):
        if k and h % k:
            where = f" (layer {layer + 1})" if max(len(heads), len(kv)) > 1 else ""
            raise _fail(header, kv_key, f"expected a number of key/value heads that divides the {h} attention "
                                        f"heads of {key}{where}, found {k}")
    return heads


def _vocabulary(header: GGUFHeader) -> tuple[str, ...]:
    key = "tokenizer.ggml.tokens"
    value = header.metadata.get(key)
    if not isinstance(value, GGUFArray) or value.values is None or not value.values:
        raise _fail(header, key, f"expected the vocabulary (an array of strings), found "
                                 f"{_show(value) if value is not None else 'no such key'}")
    tokens: tuple[str, ...] = value.values
    for name in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
        other = header.metadata.get(name)
        if other is not None and (not isinstance(other, GGUFArray) or other.count != len(tokens)):
            raise _fail(header, name, f"expected one value per token of {key} ({len(tokens):,}), found "
                                      f"{_show(other)}")
    return tokens


def _check_sizes(header: GGUFHeader, arch: str, heads: tuple[int, ...], tokens: tuple[str, ...]) -> None:
    """Layers, width, feed-forward width, vocabulary and head width: each within what the tensors hold."""
    total = sum(t.n_elements for t in header.tensors)
    held = f"the file's {len(header.tensors):,} tensors hold {total:,} values in all"
    layers_key, width_key = f"{arch}.block_count", f"{arch}.embedding_length"
    layers = _single(header, layers_key, "the number of layers")
    if layers > len(header.tensors):
        raise _fail(header, layers_key, f"claims {layers:,} layers, but the file holds {len(header.tensors):,} "
                                        "tensors, fewer than one per layer")
    width = _single(header, width_key, "the model's width")
    claims: list[tuple[str, int, str]] = [(width_key, width * width, f"{width:,} x {width:,} (one projection)")]
    ff_key = f"{arch}.feed_forward_length"
    ff = _optional_counts(header, ff_key, "the feed-forward width")
    if ff is not None:
        claims.append((ff_key, width * max(ff), f"{width:,} x {max(ff):,} (one feed-forward matrix)"))
    vocab = _vocab_size(header, arch, tokens)
    claims.append((f"{arch}.vocab_size" if f"{arch}.vocab_size" in header.metadata else "tokenizer.ggml.tokens",
                   width * vocab, f"{vocab:,} x {width:,} (the embedding)"))
    key_width = _optional_counts(header, f"{arch}.attention.key_length", "the width of a key")
    if key_width is not None:
        claims.append((f"{arch}.attention.key_length", width * max(heads) * max(key_width),
                       f"{width:,} x {max(heads):,} x {max(key_width):,} (the query projection)"))
    for key, need, matrix in claims:
        if need > total:
            raise _fail(header, key, f"implies a matrix of {matrix}: {need:,} values, but {held}")
    _check_embedding(header, vocab)


def _single(header: GGUFHeader, key: str, what: str) -> int:
    """The one whole number above 0 that ``key`` holds (an array is refused)."""
    values = _counts(header, key, what)
    if len(values) != 1 or isinstance(header.metadata[key], GGUFArray):
        raise _fail(header, key, f"expected {what} to be one whole number above 0, found "
                                 f"{_show(header.metadata.get(key))}")
    return values[0]


def _vocab_size(header: GGUFHeader, arch: str, tokens: tuple[str, ...]) -> int:
    """The model's vocabulary as transformers sizes it: ``{arch}.vocab_size``, else the number of tokens."""
    key = f"{arch}.vocab_size"
    if key not in header.metadata:
        return len(tokens)
    size = _single(header, key, "the size of the vocabulary")
    if size < len(tokens):
        raise _fail(header, key, f"expected at least the {len(tokens):,} tokens of tokenizer.ggml.tokens, "
                                 f"found {size:,}")
    return size


def _check_embedding(header: GGUFHeader, vocab: int) -> None:
    """The embedding and output matrices have one row per token of the vocabulary."""
    for tensor in header.tensors:
        if tensor.name in ("token_embd.weight", "output.weight") and len(tensor.dims) == 2 \
                and tensor.dims[1] != vocab:
            raise _fail(header, f"tensor {tensor.name!r}", f"expected {vocab:,} rows, one per token of the "
                                                           f"vocabulary, found {tensor.dims[1]:,}")


def _check_special_ids(header: GGUFHeader, tokens: tuple[str, ...]) -> None:
    for name in _SPECIAL_IDS:
        key = f"tokenizer.ggml.{name}"
        value: Any = header.metadata.get(key)
        if value is not None and not (_whole(value) and 0 <= value < len(tokens)):
            raise _fail(header, key, f"expected a token id from 0 to {len(tokens) - 1:,}, found {_show(value)}")


def _check_merges(header: GGUFHeader, tokens: tuple[str, ...]) -> None:
    """Every merge is two tokens of the vocabulary, one space between them, whose join is a token too (what
    the tokenizers library needs; it panics otherwise)."""
    key = "tokenizer.ggml.merges"
    value = header.metadata.get(key)
    if value is None:
        return
    if not isinstance(value, GGUFArray) or value.values is None:
        raise _fail(header, key, f"expected an array of strings, found {_show(value)}")
    vocabulary = set(tokens)
    for index, merge in enumerate(value.values):
        parts = merge.split(" ")
        if len(parts) != 2 or not all(parts):
            raise _fail(header, f"{key}[{index}]", f"expected two tokens separated by one space, found "
                                                   f"{_show(merge)}")
        for token in (*parts, "".join(parts)):
            if token not in vocabulary:
                raise _fail(header, f"{key}[{index}] ({_show(merge)})",
                            f"expected tokens of tokenizer.ggml.tokens, found {_show(token)}, which is not one")
