"""The head atlas for people: its table, figures, findings, Markdown and self-contained HTML."""
