"""Benchmarks: each module returns a dict whose comparisons carry a `ratio` beside its two figures."""
