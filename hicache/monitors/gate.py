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

Deferred binding (`unbound`: the map's `unbound_actions`, the actions its `bind` may map to no
step, as it maps every other one to a step): an event between samples whose action is none of
`special`, `weighted` or `unbound` is only held, counted in the gap at once, and bound,
counted in `steps` and recorded later, in order, by `flush`: before the gate's next event that
is not held (an `unbound` one is bound first, and flushes nothing when it binds to nothing: so
the loader thread's LoadBackLayer never binds the scheduler's held events), when DEFER_CAP are
held, and when the monitor calls it, before it reads its counters, history or map
(`Monitor._flush`). Run at each event, the binder's call and the history record found their
code and data cold, evicted by the runtime's own work since the last event; run in a batch,
warm. Nothing is decided differently while the map keeps its contract: `bind` maps exactly the
`unbound` actions to no step, and changes nothing then (broken: csrc/gate.c's comment says
what follows). A binder's error is raised at the flush, after the rest of the batch is bound.

A pure binder (`pure`, with `unbound`: the map's `pure_bind`, a `bind` that maps an event to
its step and keeps nothing, the map reading what it needs off the runtime when it maps a
state: HostTierMap under Requests.RUNTIME): such an event is neither held nor bound, only
counted (gap and steps) and recorded at once. The same counts and records as binding it
would make, under the same contract, at a store or two and a record an event. A weighted
event (an eviction) is bound only when the draw or the trigger hands it on.

Letting go (`clock` and `let_go`: sample mode under a budget): a drawn sample the monitor's
budget would let go (the gap's sample of an action neither special, weighted nor unbound, a
drawn weighted event not triggered) is let go by the gate while `clock() < closed_until`, the
time from which the budget affords the next sample, which the monitor keeps
(`Monitor._close_gate`): bound, counted and recorded as an unsampled event, then handed to
`let_go(action, fields, weighted)` (the monitor's count, cause and cheap runtime checks; a
gap's sample answered with the next gap). The monitor's own path for such a sample was five
frames (its dispatch, the bind, the draw of the next gap, the budget's look under its lock,
the record), ~7-10 us each on the monitors bench's kv_bytes replay, where ~42 of the ~46
samples a replay draws are let go. The monitor's `let_go` is itself C where this extension
builds (`LetGo`: `Monitor._gate_let_go`, which defines it, without its frame: the next gap
from the monitor's seeded draw, the count, `sampled` and `cause`, the worker watch's hook;
~10k instructions a let-go in Python, ~0.45M a replay).

The C gate keeps the kind of each action object it has seen (special, weighted with its
probability, unbound, asked of the trigger; up to 16 objects, the rest looked up at each
event): the runtime publishes the same vocabulary members at every event, so an action's kind
is one pointer compare in the gate's own memory instead of up to six set and dict lookups,
each a table and a key string cold at an event between samples (in the monitors bench's
replay, the gate's time a replay 0.72 -> 0.63 ms, an eviction ~0.3-0.5 us less). A kind once
found never changes: the sets are frozensets and `weighted` the gate's own copy, which both
gates show as a read-only view.

The same extension holds strict mode's step (`StrictStep`): runtime.py's
`Monitor._strict_step` in C, the listener of every event of a strict run on an incremental
map, keeping that monitor's counters (`steps`, `checked`, `tripped`) the same way; the Python
step, which defines it, serves where it cannot be built.
"""
from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType

from hicache import buildcache

#: must equal ABI_VERSION in csrc/gate.c (checked on load)
ABI_VERSION = 9
#: events held at most before a flush (DEFER_CAP in csrc/gate.c)
DEFER_CAP = 64


class PyGate:
    """The gate in Python (see the module docstring; csrc/gate.c in C)."""

    __slots__ = ("steps", "gap", "tripped", "bind", "special", "slow", "weighted", "draw", "trigger", "trigger_on",
                 "weighed", "unbound", "pure", "clock", "let_go", "closed_until", "_immediate", "_hold", "_flushing",
                 "_history", "_append")

    def __init__(self, bind, special: frozenset, slow, history, weighted: dict | None = None, draw=None,
                 trigger=None, trigger_on: frozenset = frozenset(), weighed=None,
                 unbound: frozenset | None = None, clock=None, let_go=None, pure: bool = False) -> None:
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
        if unbound is not None and type(unbound) is not frozenset:
            raise TypeError(f"Gate: unbound must be a frozenset or None, not {type(unbound).__name__}")
        if type(pure) is not bool or (pure and unbound is None):
            raise TypeError("Gate: pure must be a bool, and True only with unbound given")
        if (clock is None) != (let_go is None) or (clock is not None and not (callable(clock) and callable(let_go))):
            raise TypeError("Gate: clock and let_go must both be callable, or both None")
        self.bind, self.special, self.slow = bind, special, slow
        self.weighted = MappingProxyType(dict(weighted or {}))     # (a read-only view, as the C gate's)
        self.draw, self.trigger, self.trigger_on, self.weighed = draw, trigger, trigger_on, weighed
        self.steps = 0
        self.gap = 0
        self.tripped = False
        self.history = history
        self.unbound = unbound
        self.pure = pure
        self.clock, self.let_go = clock, let_go
        self.closed_until = -math.inf
        # (never held: the events the monitor or the draw decides, and those bound to nothing)
        self._immediate = None if unbound is None else special | frozenset(self.weighted) | unbound
        self._hold: list = []          # held events, (action, fields), oldest first
        self._flushing = False

    @property
    def held(self) -> int:
        """Events held, to be bound at the next flush."""
        return len(self._hold)

    def flush(self) -> None:
        """Bind, count and record the held events, in order (none while tripped: released)."""
        if self._flushing or not self._hold:
            return
        self._flushing = True
        batch, self._hold = self._hold, []
        error = None
        try:
            for action, fields in batch:
                if self.tripped:
                    break
                try:
                    self._record(action, fields)
                except Exception as e:       # (the first raised once the rest are bound)
                    if error is None:
                        error = e
        finally:
            self._flushing = False
        if error is not None:
            raise error

    def _count(self, action, fields: dict) -> None:
        """(steps + 1, action, fields) recorded, then steps += 1 (csrc/gate.c's gate_append)."""
        self._append((self.steps + 1, action, fields))
        self.steps += 1

    def _record(self, action, fields: dict) -> None:
        """A held event bound, counted and recorded, as `__call__`'s last case does it."""
        if self.bind(action, fields) is None:
            self.gap += 1        # (uncounted after all: see the module docstring)
            return
        self._count(action, fields)

    @property
    def history(self):
        """The deque unsampled events are recorded in, as (step, action, fields)."""
        return self._history

    @history.setter
    def history(self, value) -> None:
        self._append = value.append
        self._history = value

    def _held(self, action, fields: dict) -> bool:
        """Whether the event is held (a full hold flushed first; full still only while
        another flush runs)."""
        if len(self._hold) == DEFER_CAP:
            self.flush()
        if len(self._hold) < DEFER_CAP:
            self._hold.append((action, fields))
            return True
        return False

    def _weigh(self, action, fields: dict, p: float) -> tuple[bool, bool]:
        """(drawn, triggered): the draw first, whatever the trigger says (the seed's draws
        are the same whether or not anything triggers), then the trigger of trigger_on's."""
        drawn = self.draw() < p
        triggered = self.trigger is not None and action in self.trigger_on and bool(self.trigger(action, fields))
        return drawn, triggered

    def _closed(self) -> bool:
        """Whether a drawn sample is let go here: the budget's clock before closed_until."""
        return self.let_go is not None and self.closed_until > -math.inf and self.clock() < self.closed_until

    def _let_go(self, action, fields: dict, weighted: bool) -> None:
        """A drawn sample let go (bound by the caller): recorded and counted, then the
        monitor's let_go, whose answer to a gap's sample is the next gap."""
        self._count(action, fields)
        gap = self.let_go(action, fields, weighted)
        if not weighted:
            self.gap = int(gap)

    def _weighed_out(self, action, fields: dict, bound, triggered: bool) -> None:
        if not triggered and self._closed():
            self._let_go(action, fields, True)
            return
        if bound is None:
            bound = self.bind(action, fields)      # (a pure binder's event, bound now: handed on)
            if bound is None:
                return
        self.weighed(action, fields, bound, triggered)

    def _plain(self, action) -> bool:
        return action not in self.special and action not in self.weighted and \
            (self.unbound is None or action not in self.unbound)

    def __call__(self, action, fields: dict) -> None:
        if self.tripped:
            return
        bound = None
        if self._immediate is not None:
            if self.gap > 0 and action not in self._immediate:
                if self.pure:
                    # (a pure binder maps it to a step and keeps nothing: counted and
                    # recorded, never bound)
                    self._count(action, fields)
                    self.gap -= 1
                    return
                if self._held(action, fields):
                    self.gap -= 1
                    return
            if action in self.unbound:
                # (bound first; bound to nothing, it changed nothing and needs no flush: held
                # events are bound only on the thread that holds them, not the loader's)
                bound = self.bind(action, fields)
                if bound is None:
                    return
                if self.gap <= 0:
                    bound = None     # (the contract broken at a sample: the monitor binds it again)
            self.flush()
            if self.tripped:
                return
        if self.gap <= 0:
            # the gap's sample: let go here while the budget is closed (a plain action: the
            # monitor decides the others), else to the monitor, unbound
            if bound is None and self.let_go is not None and self._plain(action) and self._closed():
                if self.bind(action, fields) is not None:
                    self._let_go(action, fields, False)
                return
            self.slow(action, fields, None)
            return
        # (a pure binder's weighted event: bound only when the draw or the trigger hands it on,
        # `_weighed_out`; it maps to its step, the contract, and binding keeps nothing)
        if bound is None and not (self.pure and action not in self.special and action in self.weighted):
            bound = self.bind(action, fields)
            if bound is None:
                return
        if action in self.special:
            self.slow(action, fields, bound)
            return
        p = self.weighted.get(action)
        if p is not None:
            drawn, triggered = self._weigh(action, fields, p)
            if triggered or drawn:
                self._weighed_out(action, fields, bound, triggered)
                return
        self._count(action, fields)
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
#: a budgeted sample-mode monitor's let-go in C (runtime.py's Monitor._gate_let_go, which
#: defines it and serves where this is None; the C gate calls it, no frame): ~42 of the ~46
#: drawn samples of a kv_bytes replay of the monitors bench are let go at the defaults
LetGo: type | None = _NATIVE.LetGo if _NATIVE is not None else None
