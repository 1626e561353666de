"""Trace replay through the real cache."""
