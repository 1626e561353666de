"""Event-sourced refinement maps whose runtime events are sequences of spec steps.

The distributed protocols (PPSync, PrefixAgreement, CPSharding) emit events from several
threads, and one runtime event may be several spec steps (a MIN-reduction reveals what
the other ranks did, a forwarded target stands for the leader's whole round). Such a map
keeps the mapped spec state itself, updated from each event's fields (and, where the
event alone does not say, from the runtime object), and records for every event:

  pre    the mapped state before the event
  trail  [(action, params, state after the step)], one entry per spec step, in order;
         params None marks a re-dimensioning of the abstraction (a constant's capacity
         grew), which is not a spec step and is not checked; a SWITCH entry moves the
         event on to another instance of the spec (its constants, its pre-state)

`SequenceMonitor` checks each recorded step with its generated action check (strict mode:
all of them), then the invariants on the state after the event (and on each instance the
event leaves at a SWITCH). It serializes events
(copy, loader and sync threads emit concurrently) under one lock.
Invariant: `rmap.pre` and `rmap.trail` describe the event `bind` was last called for.
"""
from __future__ import annotations

import threading

from hicache.monitors.runtime import Monitor, Step, VerifyConfig, binding


class SequenceMonitor(Monitor):
    """A Monitor for maps with `pre` and `trail` (see module docstring)."""

    def __init__(self, rmap, cfg: VerifyConfig):
        self._lock = threading.RLock()
        super().__init__(rmap, cfg)

    def __call__(self, action, fields: dict) -> None:
        with self._lock:
            Monitor.__call__(self, action, fields)

    def cache_check(self) -> None:
        with self._lock:
            Monitor.cache_check(self)

    def _check_step(self, name, fields, steps, s, t) -> None:
        self._expand_history(t)
        C = self.constants()
        prev = before = self.rmap.pre
        stepped = False
        for entry in self.rmap.trail:
            act, params, st = entry[0], entry[1], entry[2]
            if act == SWITCH:
                # the event goes on with another instance of the spec (another prefetch):
                # the one it leaves is checked as it stands; the next starts from st
                if stepped:
                    self._invariants(name, fields, C, before, prev)
                C = self._constants_of(entry[3])
                stepped = False
            else:
                if params is not None:
                    f = self.spec.ACTIONS[act][0](C, prev, st, *params)
                    if f is not None:
                        self.fail("action", name, fields, f, prev, st)
                before, stepped = prev, True
            prev = st
        self._invariants(name, fields, C, before, t)

    def _expand_history(self, t) -> None:
        """The event's history entry becomes one entry per spec step, so a trace (and
        `hicache explain`) shows each step the event stands for; an event that moves to
        another instance (SWITCH) or re-dimensions the abstraction stays one entry."""
        trail = self.rmap.trail
        if len(trail) < 2 or not self.history or self.history[-1].state is not t or \
                any(e[0] == SWITCH or e[1] is None for e in trail):
            return
        last = self.history.pop()
        for act, _, st, *_ in trail:
            self.history.append(Step(last.seq, last.action, last.args, st, spec=act))

    def _invariants(self, name, fields, C, s, t) -> None:
        for inv in self._invariants_for(C).values():
            f = inv(C, t)
            if f is not None:
                self.fail("invariant", name, fields, f, s, t)

    def _constants_of(self, raw: dict) -> dict:
        key = tuple(sorted((k, frozenset(v) if isinstance(v, (set, frozenset)) else v) for k, v in raw.items()))
        C = self._cache.get(key)
        if C is None:
            C = self._cache[key] = binding(self.spec, raw)
        return C


#: trail entry (SWITCH, None, pre-state of the next instance, its raw constants): the event
#: continues on another instance of the spec (maps with one instance per prefetch)
SWITCH = "(switch)"


class Tee:
    """A listener that forwards each event to the runtime's own listener, then to monitors
    (a violation raises on the emitting thread after the runtime's listener saw the event)."""

    __slots__ = ("inner", "monitors")

    def __init__(self, inner, monitors=()):
        self.inner = inner
        self.monitors = list(monitors)

    def __call__(self, event, fields) -> None:
        self.inner(event, fields)
        for m in self.monitors:
            m(event, fields)


def capacity(n: int, floor: int = 8) -> int:
    """The smallest power of two >= max(n, floor): constants sized by doubling, so the
    abstraction is re-dimensioned O(log n) times over a run."""
    c = floor
    while c < n:
        c *= 2
    return c
