"""The files of probes importance and probes prune: tables, Markdown, figures and terminal summaries."""
