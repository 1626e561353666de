"""The spec's own shortest path to a violation (or to a given state), within a budget.

Breadth-first (hicache.tla.checker), so the path found is a shortest one. The budget is
checked from the checker's progress callback (every 1024 expanded states).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from hicache.explain.options import Options
from hicache.tla.cfg import Config
from hicache.tla.checker import Checkable, Checker, build


@dataclass(slots=True)
class SpecSearch:
    target: str                      # what was searched for, in words
    status: str                      # found | none | budget | skipped | error
    length: int | None = None        # states in the spec's shortest path (TLC counts states)
    actions: list[str] = field(default_factory=list)
    distinct: int = 0
    seconds: float = 0.0
    note: str = ""


class _Budget(Exception):
    """Raised from the checker's progress callback to stop a search over budget."""


#: (spec, config, constants, invariant, budget) -> result of a finished invariant search:
#: explaining many traces of one runtime (the bug zoo) searches each spec model once
_SEARCHES: dict[tuple, SpecSearch] = {}


def search_invariant(spec: Path, cfg: Config, violated: str, opts: Options) -> SpecSearch:
    key = (str(Path(spec).resolve()), cfg.file, repr(sorted(cfg.constants.items())), violated,
           opts.max_states, opts.max_seconds)
    hit = _SEARCHES.get(key)
    if hit is None:
        sck = build(spec, dataclasses.replace(cfg, invariants=[violated]))
        hit = search(sck, f"a state violating {violated}", opts)
        if hit.status != "budget":   # a time budget depends on the machine's load
            _SEARCHES[key] = hit
    return dataclasses.replace(hit, actions=list(hit.actions))


def search(ck: Checkable, target: str, opts: Options, want: tuple[str, ...] = ("invariant", "property")) \
        -> SpecSearch:
    """Breadth-first search until a result in `want` (its path is the shortest)."""
    t0 = time.perf_counter()

    def budget(p: dict) -> None:
        if p["distinct"] > opts.max_states or time.perf_counter() - t0 > opts.max_seconds:
            raise _Budget()
    try:
        res = Checker(ck, progress=budget, progress_every=0.0).run()
    except _Budget:
        return SpecSearch(target, "budget", seconds=time.perf_counter() - t0,
                          note=f"stopped at the budget ({opts.max_states} states / {opts.max_seconds:g}s)")
    out = SpecSearch(target, "none", distinct=res.distinct, seconds=res.seconds)
    if res.result in want and res.trace:
        out.status, out.length = "found", len(res.trace)
        out.actions = [st.action.name for st in res.trace[1:]]
    elif res.result == "error":
        out.status, out.note = "error", str(res.error).splitlines()[0]
    elif res.result == "deadlock":
        out.note = "the search stopped at a deadlock before reaching it"
        out.status = "deadlock"
    return out
