"""Sample mode's gate: the listener a gap-counted sample-mode monitor gives its bus.

Between two samples an event is only bound (the map follows requests through events),
counted and recorded for the violation report; `Gate` does that, and hands every other event
to the monitor: the drawn sample (the gap ran out: `slow`, unbound), the map's always-checked
events (`special`: `slow`, bound). A map's weighted events (`weighted`, drawn each on its own
at a multiple of the rate, the gap untouched) it draws itself, with the monitor's seeded
draw, before asking the map's `trigger` about those of `trigger_on`; one triggered or drawn
goes to the monitor (`weighed`), the others are recorded. `PyGate` defines what it does;
csrc/gate.c's Gate is the same in C, used whenever it builds (`EXTENSION`): at nearly every
event of a sample-mode run it saves the frame a Python listener costs (on the monitors
bench's kv_bytes replay at rate 0, 1.5M instructions of a replay's 154.7M, ~2.6k on each of
its 583 events between samples).

The gate keeps the monitor's counters (`steps`, `gap`, `tripped`): one count, whoever made
the step (`Monitor.steps` reads it; the monitor's Python updates it in place).

The same extension holds strict mode's step (`StrictStep`): runtime.py's
`Monitor._strict_step` in C, the listener of every event of a strict run on an incremental
map, keeping that monitor's counters (`steps`, `checked`, `tripped`) the same way; the Python
step, which defines it, serves where it cannot be built.
"""
from __future__ import annotations

from pathlib import Path

from hicache import buildcache

#: must equal ABI_VERSION in csrc/gate.c (checked on load)
ABI_VERSION = 4


class PyGate:
    """The gate in Python (see the module docstring; csrc/gate.c in C)."""

    __slots__ = ("steps", "gap", "tripped", "bind", "special", "slow", "weighted", "draw", "trigger", "trigger_on",
                 "weighed", "_history", "_append")

    def __init__(self, bind, special: frozenset, slow, history, weighted: dict | None = None, draw=None,
                 trigger=None, trigger_on: frozenset = frozenset(), weighed=None) -> None:
        if not (callable(bind) and callable(slow)):
            raise TypeError("Gate: bind and slow must be callable")
        for name, v in (("special", special), ("trigger_on", trigger_on)):
            if type(v) is not frozenset:
                raise TypeError(f"Gate: {name} must be a frozenset, not {type(v).__name__}")
        if weighted is not None and type(weighted) is not dict:
            raise TypeError(f"Gate: weighted must be a dict, not {type(weighted).__name__}")
        if weighted and not (callable(draw) and callable(weighed)):
            raise TypeError("Gate: weighted events need draw and weighed callables")
        if trigger is not None and not callable(trigger):
            raise TypeError("Gate: trigger must be callable or None")
        self.bind, self.special, self.slow = bind, special, slow
        self.weighted = dict(weighted or {})
        self.draw, self.trigger, self.trigger_on, self.weighed = draw, trigger, trigger_on, weighed
        self.steps = 0
        self.gap = 0
        self.tripped = False
        self.history = history

    @property
    def history(self):
        """The deque unsampled events are recorded in, as (step, action, fields)."""
        return self._history

    @history.setter
    def history(self, value) -> None:
        self._append = value.append
        self._history = value

    def __call__(self, action, fields: dict) -> None:
        if self.tripped:
            return
        if self.gap <= 0:
            self.slow(action, fields, None)
            return
        bound = self.bind(action, fields)
        if bound is None:
            return
        if action in self.special:
            self.slow(action, fields, bound)
            return
        p = self.weighted.get(action)
        if p is not None:
            # (the draw first, whatever the trigger says: the seed's draws are the same
            # whether or not anything triggers)
            drawn = self.draw() < p
            triggered = self.trigger is not None and action in self.trigger_on and bool(self.trigger(action, fields))
            if triggered or drawn:
                self.weighed(action, fields, bound, triggered)
                return
        self._append((self.steps + 1, action, fields))
        self.steps += 1
        if p is None:
            self.gap -= 1       # (the gap counts the events that are not drawn on their own)


#: the C gate (no warning when it cannot be built: the Python one decides the same, and the
#: monitors' map writes, built the same way, warn for the same build)
EXTENSION = buildcache.Extension("gate", "_hicache_gate", Path(__file__).resolve().parent / "csrc" / "gate.c",
                                 ABI_VERSION)
_NATIVE = EXTENSION.module()
Gate: type = _NATIVE.Gate if _NATIVE is not None else PyGate
#: strict mode's step in C (runtime.py's Monitor._strict_step, which defines it and serves
#: where this is None): at every event of a strict run it saves the step's Python frame
StrictStep: type | None = _NATIVE.StrictStep if _NATIVE is not None else None
