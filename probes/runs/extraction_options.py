"""How a run's extractor holds the model: dtype, batch and memory bounds, device map, as one argument.

Every run function that loads its extractor by name (leaderboard, coreference, bridging, atlas, probes, match)
takes ``extraction: ExtractionOptions | None`` and checks it once, with its other extractor options, into the
:class:`~probes.extraction.checks.ExtractorSettings` its extractor is built from
(:func:`probes.runs.inputs.check_extraction`); the CLI builds it from ``--dtype``, ``--max-batch-tokens``,
``--max-attention-mb`` and ``--device-map``. Importing this module imports no torch, so the CLI can parse its
options fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probes.extraction.checks import ExtractorSettings

__all__ = ["ExtractionOptions", "DEFAULT_ATTENTION_MB"]

#: The extractor's default ``max_attention_mb`` (:data:`probes.extraction.extractor.DEFAULT_ATTENTION_MB`,
#: repeated here so that no torch import is needed; a test keeps the two equal).
DEFAULT_ATTENTION_MB = 2048.0


@dataclass(frozen=True)
class ExtractionOptions:
    """The options of :class:`~probes.extraction.extractor.AttentionExtractor` that bound how a model runs.

    The defaults are the extractor's, so ``ExtractionOptions()`` loads a model as no options at all do.

    Attributes:
        dtype: the model's dtype: ``float32``, ``float16`` or ``bfloat16`` (attention is pooled in float32).
        max_batch_tokens: most padded tokens (inputs x longest) per forward pass (None: only the batch size).
        max_attention_mb: most attention held at once, in MB of float32 (None: no budget).
        device_map: spread the model over devices (``"auto"``, ``"balanced"``, a JSON object or a mapping of
            module name -> device; needs accelerate); None: the whole model on one device.
        source: the attention source every map of the run holds (``weights``, ``norm``, ``contribution``,
            ``value-zeroing``: :mod:`probes.extraction.sources`); recorded in run.json and in the extractor's
            info, so nothing computed under one source is re-used under another.
    """

    dtype: str = "float32"
    max_batch_tokens: int | None = None
    max_attention_mb: float | None = DEFAULT_ATTENTION_MB
    device_map: str | Mapping[str, Any] | None = None
    source: str = "weights"

    def check(self, **extractor: Any) -> ExtractorSettings:
        """These options checked with the run's other extractor options, before any work; once per run.

        ``extractor``: more options of :func:`probes.extraction.checks.check_options` (``device``,
        ``batch_size``, ``on_long`` ...), checked in the same call (one of these named there too: its value).

        Raises:
            ConfigError: the first bad option, named (one message per bad value: ``check_options``').
        """
        from probes.extraction.checks import check_options

        own = {"dtype": self.dtype, "max_batch_tokens": self.max_batch_tokens,
               "max_attention_mb": self.max_attention_mb, "device_map": self.device_map, "source": self.source}
        return check_options(**{**own, **extractor})
