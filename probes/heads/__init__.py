"""Model-neutral operations on layers x heads results: naming, selection, intervals, comparisons."""
