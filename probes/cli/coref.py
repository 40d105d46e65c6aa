"""CLI commands (see module owner issue)."""
