"""Library pipelines: each returns a result object and writes files only when asked.

The modules load on first use, so ``probes.runs.match.match_models`` works after a plain ``import probes``.
"""

from probes._lazy import lazy_getattr

__getattr__ = lazy_getattr(__name__, {})
