"""``probes atlas``: what every head attends to, how heads group, their patterns and roles.

A thin command over :func:`probes.runs.atlas.atlas`: parse the options, run, write the atlas to
``--out`` (default ``runs/atlas-MODEL-DATA``), print its findings beside Clark et al.'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import app

_HELP = """The head atlas (Clark et al. 2019 §3 and §6, Kovaleva et al. 2019, Voita et al. 2019).

One pass of the model over --treebank, keeping token maps, gives every head's surface statistics
(attention to the specials, to "." and ",", to the current / next / previous token, entropy),
Voita's roles (confidence, positional, rare-word; syntactic = the head wins a relation of the
leaderboard of the same pass under its corrected held-out test), Kovaleva's patterns (every
sentence-head map classified) and the Jensen-Shannon distances between heads on --js-sentences
sentences (MDS layout and clusters). With a masked-LM or causal-LM head, the gradient of the loss
by key type (Clark §3.2); with --corpus, each head's coreference accuracy. Head types (previous-token,
duplicate-token, induction; for encoders also next-token and the bidirectional duplicate and induction) are
scored as TransformerLens' head detector does, on --head-type-sequences repeated random token sequences.
For a decoder, measures that need an end special or later tokens say "not defined for a decoder".

Writes heads.csv (one row per head), atlas.md, atlas.html (self-contained, works offline),
head_view.html (one sentence, every head), figures/, leaderboard/ and run.json to --out.
Layers and heads are 1-based (layer-head) in every output.
"""


@app.command("atlas", help=_HELP)
def atlas_cli(
    config: Optional[Path] = options.config_option(),
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(...),
    corpus: Optional[str] = typer.Option(
        None, "--corpus", parser=options.text_parser("--corpus", "a corpus file or name"), help="A coreference corpus (GUM/CorefUD CoNLL-U with Entity=, or ud:en_gum:SPLIT): adds "
        "each head's antecedent-selection accuracy."),
    select_on: Optional[str] = options.select_on_option(),
    js_sentences: Optional[int] = typer.Option(
        None, "--js-sentences", min=2, max=options.MAX_COUNT, metavar="N",
        help="Sentences for the head distances (default 100, spread over the treebank by a fixed hash); the cost "
             "grows with N x heads^2."),
    clusters: Optional[int] = typer.Option(None, "--clusters", min=1, max=options.MAX_COUNT, metavar="K",
                                           help="Head groups cut from the clustering (default 8)."),
    counts: Optional[Path] = options.path_option(
        None, "--counts", what="a file path", metavar="FILE", help="Word counts for rare-word heads, one `word<TAB>count` per line "
        "(default: counts of --treebank)."),
    word_level: bool = typer.Option(False, "--word-level", help="Also compute the surface statistics on word maps."),
    grad_sentences: int = typer.Option(
        200, "--grad-sentences", min=0, max=options.MAX_COUNT, metavar="N",
        help="Sentences of the gradient-importance pass (needs a language-model head; 0 skips it)."),
    head_type_sequences: int = typer.Option(
        20, "--head-type-sequences", **options.rule_bounds(options.option_rules.SEQUENCES), metavar="N",
        help="Repeated random token sequences (20 tokens, twice) for the head-type scores (previous-token, "
             "duplicate-token, induction; 0 skips them)."),
    example: Optional[str] = typer.Option(None, "--example", metavar="SENT_ID",
                                          help="Sentence shown in the figures and head view (default: the first "
                                               "of 12-20 words)."),
    batch_size: int = options.batch_size_option(),
    device: Optional[str] = options.device_option(),
    on_long: str = options.on_long_option(),
    dtype: str = options.dtype_option(),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: Optional[str] = options.device_map_option(),
    limit: Optional[int] = options.limit_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/atlas-MODEL-DATA`)."),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
) -> None:
    from probes.reports.writer import check_out_dir
    from probes.runs.atlas import atlas

    out_dir = out or options.default_out(model, treebank, prefix="atlas-")
    check_out_dir(out_dir, "probes atlas", overwrite=overwrite)  # before the model runs
    result = atlas(model, treebank, corpus=corpus, select_on=select_on, js_sentences=js_sentences,
                   clusters=clusters, counts=counts, word_level=word_level, grad_sentences=grad_sentences,
                   head_type_sequences=head_type_sequences, example=example, batch_size=batch_size, device=device,
                   on_long=on_long, limit=limit,
                   progress=progress, record={"options": {"config": str(config) if config else None}},
                   extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map))
    paths = result.write(out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)
    typer.echo(result.format(), nl=False)
    typer.echo(f"Report: {paths['atlas.md']} and {paths['atlas.html']}  (all files in {Path(out_dir)})")
