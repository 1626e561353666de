"""Protocol events: one typed record per protocol step, named by the spec's action.

Emitting with no listener costs one attribute test (`if bus.listeners:` at the call
site), so the runtime emits everywhere and monitors attach later without code changes.
Listeners have the shape of `hicache.protocol.events.Listener`, `fn(action, fields)`,
the hook every layer shares. They run synchronously on the emitting thread, in
registration order, serialized by the bus; a listener must not call back into the cache.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hicache import buildcache
from hicache.protocol.events import Listener
from hicache.protocol.vocabulary import HostTier


@dataclasses.dataclass(slots=True, frozen=True)
class Event:
    """One protocol step: `action` is the spec action, `args` its parameters."""
    action: HostTier
    args: dict[str, Any]
    seq: int


class PyBusCore:
    """The bus's dispatch: its listeners (a list, replaced on change, never mutated), the
    sequence number and the lock that serializes events from the scheduler and transfer
    threads. This class defines it; csrc/eventbus.c's BusCore is the same in C, the base of
    EventBus whenever it builds (`EXTENSION`): a verified run publishes every protocol event,
    and here each costs a Python frame around the lock, counter and calls."""

    __slots__ = ("listeners", "_seq", "_lock")

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self._seq = 0
        self._lock = threading.Lock()  # events come from the scheduler and transfer threads

    @property
    def seq(self) -> int:
        """The last event's number (0: none yet)."""
        return self._seq

    def publish(self, action: HostTier, args: dict[str, Any]) -> None:
        """`emit` with the fields as a dict the bus takes over (adds `seq` to it): the
        runtime's own call sites build the dict once (`_emit(**args)`) instead of packing
        it again for `emit`, half of what an event costs a sample-mode canary."""
        listeners = self.listeners
        if not listeners:
            return
        # (acquire/release, not `with`: the same hold, released when a listener raises, at
        # half the cost a call: 110 against 250 ns here, paid at every event a monitor sees)
        lock = self._lock
        lock.acquire()
        try:
            self._seq += 1
            args["seq"] = self._seq
            for fn in listeners:
                fn(action, args)
        finally:
            lock.release()


#: must equal ABI_VERSION in csrc/eventbus.c (checked on load)
ABI_VERSION = 1
#: the C dispatch (no warning when it cannot be built: the Python one serves the same events,
#: and the monitors, the only listeners whose cost matters, warn for the same build)
EXTENSION = buildcache.Extension("eventbus", "_hicache_eventbus",
                                 Path(__file__).resolve().parent / "csrc" / "eventbus.c", ABI_VERSION)
_NATIVE = EXTENSION.module()
BusCore: type = _NATIVE.BusCore if _NATIVE is not None else PyBusCore


class EventBus(BusCore):
    """Fan-out of protocol events. Invariant: `seq` strictly increases per bus."""

    __slots__ = ()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Attach a listener; returns a function that detaches it."""
        self.listeners = [*self.listeners, listener]  # copy-on-write: emit never locks the list

        def detach() -> None:
            self.listeners = [x for x in self.listeners if x is not listener]
        return detach

    def emit(self, action: HostTier, **args: Any) -> None:
        """Record one step. Callers guard with `if bus.listeners:` on hot paths."""
        self.publish(action, args)


class Recorder:
    """A listener that keeps every event (tests, traces)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, action: HostTier, fields: dict[str, Any]) -> None:
        self.events.append(Event(action, dict(fields), fields["seq"]))

    def actions(self) -> list[HostTier]:
        return [e.action for e in self.events]
