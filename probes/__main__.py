"""``python -m probes`` runs the command line."""

from probes.cli import run

run()
