"""Start-up agreement on configuration: every rank must run with the same settings.

Each rank contributes a flat {field: value} dict (gathered by the adapter); the first
mismatch is reported naming the field and the ranks that disagree. Pure.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence


def find_mismatch(configs: Sequence[Mapping[str, object]]) -> str | None:
    """None if all ranks agree; else a message naming the field, values and ranks."""
    if not configs:
        return None
    fields = sorted(set().union(*(c.keys() for c in configs)))
    for name in fields:
        values = [c.get(name, "<missing>") for c in configs]
        if len(set(map(repr, values))) > 1:
            by_value: dict[str, list[int]] = {}
            for rank, v in enumerate(values):
                by_value.setdefault(repr(v), []).append(rank)
            detail = "; ".join(f"{v} on ranks {ranks}" for v, ranks in by_value.items())
            return f"configuration mismatch in field {name!r}: {detail}"
    return None
