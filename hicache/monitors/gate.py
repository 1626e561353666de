"""Sample mode's gate: the listener a gap-counted sample-mode monitor gives its bus.

Between two samples an event is only bound (the map follows requests through events),
counted and recorded for the violation report; `Gate` does that, and hands every other event
to the monitor (`slow`): the drawn sample (the gap ran out), the map's always-checked and
weighted events (`special`, bound first), whatever a tripped monitor would ignore. `PyGate`
defines what it does; csrc/gate.c's Gate is the same in C, used whenever it builds
(`EXTENSION`): at nearly every event of a sample-mode run it saves the frame a Python
listener costs (on the monitors bench's kv_bytes replay at rate 0, 1.5M instructions of a
replay's 154.7M, ~2.6k on each of its 583 events between samples).

The monitor keeps the gate's counters (`steps`, `gap`, `tripped`) as its own while its
Python runs (`Monitor._gated` copies them in and back): one count, whoever made the step.
"""
from __future__ import annotations

from pathlib import Path

from hicache import buildcache

#: must equal ABI_VERSION in csrc/gate.c (checked on load)
ABI_VERSION = 1


class PyGate:
    """The gate in Python (see the module docstring; csrc/gate.c in C)."""

    __slots__ = ("steps", "gap", "tripped", "bind", "special", "slow", "_history", "_append")

    def __init__(self, bind, special: frozenset, slow, history) -> None:
        if not (callable(bind) and callable(slow)):
            raise TypeError("Gate: bind and slow must be callable")
        if type(special) is not frozenset:
            raise TypeError(f"Gate: special must be a frozenset, not {type(special).__name__}")
        self.bind, self.special, self.slow = bind, special, slow
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
        self._append((self.steps + 1, action, fields))
        self.steps += 1
        self.gap -= 1


#: the C gate (no warning when it cannot be built: the Python one decides the same, and the
#: monitors' map writes, built the same way, warn for the same build)
EXTENSION = buildcache.Extension("gate", "_hicache_gate", Path(__file__).resolve().parent / "csrc" / "gate.c",
                                 ABI_VERSION)
_NATIVE = EXTENSION.module()
Gate: type = _NATIVE.Gate if _NATIVE is not None else PyGate
