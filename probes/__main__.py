"""``python -m probes`` runs the command line."""

from probes.cli import run

if __name__ == "__main__":  # not when a child process imports this module
    run()
