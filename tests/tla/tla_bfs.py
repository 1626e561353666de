"""A plain-Python reference BFS with TLC's counting rules, independent of hicache.tla.

The tests describe each state machine twice: once in TLA+ (tests/tla/models) and once here as
Python functions; the counts the checker reports must equal the counts this search derives.

  distinct   states added to the seen set (keyed by `key`: identity, a VIEW, or a symmetry
             canonical form);
  generated  initial states + every successor of every explored state, duplicates included,
             successors outside `constraint` / `action_constraint` included;
  depth      number of BFS levels, initial states at level 1.
`successors(s)` must return one entry per way the TLA+ action can fire (one per \\E witness),
in any order; counts do not depend on the order, violation depths neither.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable


@dataclass
class Outcome:
    distinct: int
    generated: int
    depth: int
    levels: dict = field(default_factory=dict)       # key -> level
    states: list = field(default_factory=list)       # explored representatives, BFS order
    first_bad_level: int | None = None               # invariant violated first at this level
    first_deadlock_level: int | None = None          # min level of a state without successors
    first_bad_step_level: int | None = None          # action property: length of the shortest bad behavior


def bfs(init: Iterable[Hashable],
        successors: Callable[[Hashable], list],
        *,
        constraint: Callable[[Hashable], bool] = lambda s: True,
        action_constraint: Callable[[Hashable, Hashable], bool] = lambda s, t: True,
        key: Callable[[Hashable], Hashable] = lambda s: s,
        invariant: Callable[[Hashable], bool] = lambda s: True,
        action_ok: Callable[[Hashable, Hashable], bool] = lambda s, t: True) -> Outcome:
    """Exhaustive search (it does not stop at violations: it records the first level of each)."""
    out = Outcome(0, 0, 0)
    frontier = []
    for s in init:
        out.generated += 1
        if not constraint(s):
            continue
        k = key(s)
        if k in out.levels:
            continue
        out.levels[k] = 1
        frontier.append(s)
    level = 1
    while frontier:
        nxt = []
        for s in frontier:
            out.states.append(s)
            if not invariant(s) and out.first_bad_level is None:
                out.first_bad_level = level
            succ = list(successors(s))
            if not succ and out.first_deadlock_level is None:
                out.first_deadlock_level = level
            for t in succ:
                out.generated += 1
                if not action_ok(s, t) and out.first_bad_step_level is None:
                    out.first_bad_step_level = level + 1
                if not action_constraint(s, t) or not constraint(t):
                    continue
                k = key(t)
                if k in out.levels:
                    continue
                out.levels[k] = level + 1
                nxt.append(t)
        if nxt:
            level += 1
        frontier = nxt
    out.distinct = len(out.levels)
    out.depth = level if out.levels else 0
    return out
