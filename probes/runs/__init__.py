"""Library pipelines: each returns a result object and writes files only when asked."""
