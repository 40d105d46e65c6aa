"""Analyses: streaming accumulators over ``(item, WordAttention)`` pairs, one per file."""
