"""Static word vectors for the Attn+Emb and Distances+Emb probes.

Clark et al. 2019 §5.2 used frozen 100-d GloVe vectors, looked up lowercased,
zero for unknown words. `probes` offers the same from any GloVe-format text file
(:class:`GloveVectors`) and, by default, the probed model's own input embeddings
mean-pooled over each word's subword tokens (:class:`ModelInputVectors`), which
needs no download and matches the model's vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from probes.errors import FormatError
from probes.extraction.align import align_words, pool_token_vectors

__all__ = ["StaticVectors", "GloveVectors", "ModelInputVectors"]


@runtime_checkable
class StaticVectors(Protocol):
    """A frozen word -> vector map used as probe input."""

    @property
    def dim(self) -> int:
        """Vector size ``d``."""

    def __call__(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        """``(m, d)`` vectors of the words of one sentence."""

    def describe(self) -> dict[str, Any]:
        """What the vectors are (for run records)."""


@dataclass(frozen=True)
class GloveVectors:
    """Vectors from a GloVe-format text file (``word v1 v2 ... vd`` per line).

    Lookup is lowercased and unknown words get the zero vector, as in Clark et al.

    Attributes:
        vocab: word -> row of ``matrix``.
        matrix: ``(V, d)`` float32.
        path: the file read.
    """

    vocab: dict[str, int]
    matrix: npt.NDArray[np.float32]
    path: str

    @classmethod
    def load(cls, path: str | Path, *, max_words: int | None = None) -> GloveVectors:
        """Read a GloVe text file (a word2vec-style ``count dim`` header line is skipped).

        Raises:
            FormatError: ``path:line:`` when a line has a different size than the first.
        """
        vocab: dict[str, int] = {}
        rows: list[npt.NDArray[np.float32]] = []
        dim = None
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                parts = line.rstrip("\n").rstrip(" ").split(" ")
                if lineno == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                    continue  # word2vec header
                if len(parts) < 2:
                    continue
                try:
                    vec = np.asarray(parts[1:], dtype=np.float32)
                except ValueError as err:
                    raise FormatError(
                        f"expected a word followed by numbers, found {line[:60]!r}", path=path, line=lineno
                    ) from err
                if dim is None:
                    dim = len(vec)
                elif len(vec) != dim:
                    raise FormatError(
                        f"expected {dim} numbers after the word (as on the first line), found {len(vec)}",
                        path=path,
                        line=lineno,
                    )
                word = parts[0].lower()
                if word not in vocab:
                    vocab[word] = len(rows)
                    rows.append(vec)
                if max_words is not None and len(rows) >= max_words:
                    break
        if not rows:
            raise FormatError("expected GloVe-format lines 'word v1 ... vd', found none", path=path)
        return cls(vocab, np.stack(rows), str(path))

    @property
    def dim(self) -> int:
        """Vector size ``d``."""
        return int(self.matrix.shape[1])

    def __call__(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        """``(m, d)``: lowercased lookup, zeros for unknown words."""
        out = np.zeros((len(words), self.dim), dtype=np.float32)
        for i, w in enumerate(words):
            row = self.vocab.get(w.lower())
            if row is not None:
                out[i] = self.matrix[row]
        return out

    def describe(self) -> dict[str, Any]:
        """Kind, file, size."""
        return {"kind": "glove", "path": self.path, "n_words": len(self.vocab), "dim": self.dim}


class ModelInputVectors:
    """The model's input (token) embeddings, mean-pooled over each word's subword tokens.

    Words are aligned to tokens and pooled exactly as the extractor does
    (:func:`probes.extraction.align.align_words`, :func:`~probes.extraction.align.pool_token_vectors`).

    Args:
        matrix: ``(vocab_size, d)`` input embedding matrix.
        tokenizer: the model's fast Hugging Face tokenizer (``word_ids()`` is needed).
        name: what the vectors come from (for run records).
    """

    def __init__(self, matrix: npt.ArrayLike, tokenizer: Any, name: str = "model input embeddings") -> None:
        self.matrix = np.asarray(matrix, dtype=np.float32)
        self.tokenizer = tokenizer
        self.name = name

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any) -> ModelInputVectors:
        """Take ``model.get_input_embeddings()`` of a Hugging Face model."""
        weight = model.get_input_embeddings().weight.detach().float().cpu().numpy()
        name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        return cls(weight, tokenizer, name=f"input embeddings of {name}")

    @property
    def dim(self) -> int:
        """Vector size ``d``."""
        return int(self.matrix.shape[1])

    def __call__(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        """``(m, d)`` mean of each word's token embeddings (the extractor's alignment and row pooling).

        Raises:
            AlignmentError: a word gives no token (the extractor refuses such words too).
        """
        alignment = align_words(self.tokenizer, words, special_tokens=False)
        return pool_token_vectors(self.matrix[alignment.input_ids], alignment)

    def describe(self) -> dict[str, Any]:
        """Kind, source, size."""
        return {"kind": "model_input_embeddings", "source": self.name, "pooling": "mean over subwords",
                "dim": self.dim}
