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

    Args:
        matrix: ``(vocab_size, d)`` input embedding matrix.
        tokenizer: the model's Hugging Face tokenizer (a fast one gives ``word_ids``;
            otherwise each word is tokenized alone).
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

    def _token_ids(self, words: Sequence[str]) -> tuple[list[int], list[int]]:
        tok = self.tokenizer
        if getattr(tok, "is_fast", False):
            enc = tok(list(words), is_split_into_words=True, add_special_tokens=False)
            word_ids = enc.word_ids()
            pairs = [(t, w) for t, w in zip(enc["input_ids"], word_ids) if w is not None]
            return [t for t, _ in pairs], [w for _, w in pairs]
        ids: list[int] = []
        owners: list[int] = []
        for i, word in enumerate(words):
            t = tok(word, add_special_tokens=False)["input_ids"]
            ids.extend(t)
            owners.extend([i] * len(t))
        return ids, owners

    def __call__(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        """``(m, d)`` mean of each word's token embeddings (zeros for a word with no token)."""
        ids, owners = self._token_ids(words)
        out = np.zeros((len(words), self.dim), dtype=np.float32)
        if not ids:
            return out
        owner = np.asarray(owners)
        np.add.at(out, owner, self.matrix[np.asarray(ids)])
        counts = np.bincount(owner, minlength=len(words)).astype(np.float32)
        return out / np.maximum(counts, 1.0)[:, None]

    def describe(self) -> dict[str, Any]:
        """Kind, source, size."""
        return {"kind": "model_input_embeddings", "source": self.name, "pooling": "mean over subwords",
                "dim": self.dim}
