"""Exhaustive breadth-first exploration of a pure protocol model (no torch, no threads).

A model offers `init()`, `successors(state) -> iterable of (label, state)` and
`violations(state) -> list[str]`; the pp_sync and prefix-agreement models share this one search.
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol


class ProtocolModel(Protocol):
    def init(self) -> Any: ...
    def successors(self, state: Any) -> Iterable[tuple[str, Any]]: ...
    def violations(self, state: Any) -> list[str]: ...


def explore(model: ProtocolModel, limit: int = 2_000_000) -> tuple[int, list[str]]:
    """Breadth-first over every reachable state; returns (distinct states, first violations)."""
    start = model.init()
    seen, frontier = {start}, [start]
    while frontier:
        nxt = []
        for st in frontier:
            bad = model.violations(st)
            if bad:
                return len(seen), bad
            for _, succ in model.successors(st):
                if succ not in seen:
                    seen.add(succ)
                    if len(seen) > limit:
                        raise RuntimeError(f"state space larger than {limit}")
                    nxt.append(succ)
        frontier = nxt
    return len(seen), []
