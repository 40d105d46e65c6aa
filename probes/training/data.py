"""The text a model is trained on: the words of treebanks (or lines of text files), a held-out part, token blocks.

Data specs are named as in every command (``sample:dev``, ``ud:en_ewt:train``, a CoNLL-U / CoNLL-X / ``.spacy``
file, resolved by :func:`probes.corpora.registry.resolve_treebank`); a ``.txt`` file is plain text, one sentence
per non-blank line. A treebank sentence is its words joined by single spaces.

The held-out (dev) part is ``select_on`` when given; otherwise a fixed tenth of the training sentences, those
whose sha256 of ``"probes-train-dev-v1:" + spec + ":" + sentence id`` is smallest in its first 8 bytes' share
(:data:`DEV_FRACTION`), so the split is the same on every machine and never depends on a random seed.

Training and dev text are tokenized sentence by sentence, joined into one stream with the tokenizer's separator
between sentences, and cut into blocks of ``seq_len`` tokens (the tokenizer's own start and end tokens around
each block, for BERT ``[CLS] ... [SEP]``); the last, partial block is dropped. Every data file's sha256 is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.checksum import file_sha256
from probes.errors import ConfigError
from probes.safe_read import read_text

__all__ = ["TextSource", "Corpus", "read_corpus", "read_texts", "token_blocks", "block_layout", "DEV_FRACTION",
           "DEV_RULE", "TEXT_SUFFIXES"]

#: Share of the training sentences held out when no ``select_on`` is given.
DEV_FRACTION = 0.1
#: How the held-out part is chosen without ``select_on`` (recorded in ``training.json``).
DEV_RULE = (f"the {DEV_FRACTION:.0%} of training sentences with the smallest sha256 of "
            "'probes-train-dev-v1:<spec>:<sentence id>' (first 8 bytes), held out from training")
#: File suffixes read as plain text, one sentence per non-blank line.
TEXT_SUFFIXES: tuple[str, ...] = (".txt", ".text")
_DEV_KEY = "probes-train-dev-v1"


@dataclass(frozen=True)
class TextSource:
    """One data file: the spec it was named by, where it is, its sha256 and how many sentences it gave."""

    spec: str
    path: str
    sha256: str
    sentences: int

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for ``training.json`` (:class:`probes.training.record.DataRecord`)."""
        return {"spec": self.spec, "path": self.path, "sha256": self.sha256, "sentences": self.sentences}


@dataclass(frozen=True)
class Corpus:
    """The training and held-out sentences (text), their sources and how the held-out part was chosen."""

    train: tuple[str, ...]
    dev: tuple[str, ...]
    sources: tuple[TextSource, ...]
    dev_rule: str


#: The largest plain-text file read as training data (1 GiB; read whole, so bounded).
MAX_TEXT_FILE_BYTES = 1 << 30


def _read_text_file(path: Path) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of every non-blank line of a UTF-8 text file (id ``NAME:LINE``): a regular file of at most
    :data:`MAX_TEXT_FILE_BYTES` (a device, a pipe or a larger file is one InputError)."""
    lines = read_text(path, limit=MAX_TEXT_FILE_BYTES, what="a UTF-8 text file to train on").splitlines()
    for number, line in enumerate(lines, 1):
        text = " ".join(line.split())
        if text:
            yield f"{path.name}:{number}", text


def read_texts(spec: str) -> tuple[TextSource, list[tuple[str, str]]]:
    """``(source, [(sentence id, text), ...])`` of one data spec (a treebank spec or a ``.txt`` file).

    Raises:
        InputError / FormatError: no such file, a malformed treebank; ConfigError: no sentences.
    """
    from probes.corpora import read_treebank
    from probes.corpora.registry import resolve_treebank

    path = Path(resolve_treebank(spec))
    if path.suffix.lower() in TEXT_SUFFIXES:
        items = list(_read_text_file(path))
    else:
        items = [(s.sent_id, " ".join(s.words)) for s in read_treebank(path) if s.words]
    if not items:
        raise ConfigError(f"{path}: expected sentences to train on (data {spec!r}), found none")
    return TextSource(spec=str(spec), path=str(path), sha256=file_sha256(path), sentences=len(items)), items


def _held_out(spec: str, sent_id: str) -> bool:
    digest = hashlib.sha256(f"{_DEV_KEY}:{spec}:{sent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < DEV_FRACTION * 2**64


def read_corpus(treebank: Sequence[str], select_on: str | None = None) -> Corpus:
    """The training sentences of ``treebank`` (every spec, in order) and the held-out ones.

    With ``select_on``, every sentence of ``treebank`` trains and ``select_on`` is held out (it must be another
    file: a ConfigError when it is one of ``treebank``); without, :data:`DEV_RULE` picks the held-out tenth.
    """
    sources: list[TextSource] = []
    train: list[str] = []
    dev: list[str] = []
    for spec in treebank:
        source, items = read_texts(spec)
        sources.append(source)
        for sent_id, text in items:
            (dev if select_on is None and _held_out(spec, sent_id) else train).append(text)
    rule = DEV_RULE
    if select_on is not None:
        source, items = read_texts(select_on)
        clash = [s.spec for s in sources if Path(s.path).resolve() == Path(source.path).resolve()]
        if clash:
            raise ConfigError(f"--select-on: expected held-out data apart from --treebank, found {select_on!r}, "
                              f"the same file as --treebank {clash[0]!r}")
        sources.append(source)
        dev = [text for _, text in items]
        rule = f"every sentence of --select-on {select_on!r} (none of it trained on)"
    if not train or not dev:
        which = "training" if not train else "held-out"
        raise ConfigError(f"--treebank {list(treebank)!r}: expected {which} sentences, found none "
                          f"({len(train)} training, {len(dev)} held out)")
    return Corpus(train=tuple(train), dev=tuple(dev), sources=tuple(sources), dev_rule=rule)


def block_layout(tokenizer: Any, masked_lm: bool) -> tuple[list[int], list[int], list[int]]:
    """``(prefix, separator, suffix)`` token ids of a block: BERT ``[CLS]``, ``[SEP]``, ``[SEP]``; a causal LM
    none, its end-of-text token, none (a tokenizer without such tokens: empty lists)."""
    def ids(*tokens: Any) -> list[int]:
        return [t for t in tokens if isinstance(t, int)]

    if masked_lm:
        return ids(tokenizer.cls_token_id), ids(tokenizer.sep_token_id), ids(tokenizer.sep_token_id)
    return [], ids(tokenizer.eos_token_id), []


def token_blocks(texts: Sequence[str], tokenizer: Any, seq_len: int, *, masked_lm: bool) -> npt.NDArray[np.int64]:
    """``(N, seq_len)`` token ids: ``texts`` tokenized (no special tokens), joined with the separator, cut into
    blocks with the prefix and suffix of :func:`block_layout` around each; the partial last block dropped."""
    prefix, separator, suffix = block_layout(tokenizer, masked_lm)
    width = seq_len - len(prefix) - len(suffix)
    if width < 1:
        raise ConfigError(f"--seq-len: expected more than {len(prefix) + len(suffix)} tokens, found {seq_len}")
    stream: list[int] = []
    for ids in _encode(tokenizer, texts):
        stream += ids + separator
    n = len(stream) // width
    body = np.asarray(stream[: n * width], dtype=np.int64).reshape(n, width)
    ends = [np.tile(np.asarray(ids, dtype=np.int64), (n, 1)) for ids in (prefix, suffix)]
    return np.concatenate([ends[0], body, ends[1]], axis=1)


def _encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text without special tokens (the fast tokenizer's backend: no length warning, since
    texts longer than a block are cut into blocks here)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [e.ids for e in backend.encode_batch(list(texts), add_special_tokens=False)]
    return list(tokenizer(list(texts), add_special_tokens=False)["input_ids"])
