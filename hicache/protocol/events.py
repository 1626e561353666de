"""Event listener hook: runtime steps announce themselves by their vocabulary name.

Monitors attach a listener; with none attached the hook is a no-op. The event name is always
a member of one of the enums in `vocabulary.py`, so a trace record, a spec action and a test
rule share it.
"""
from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol


class Listener(Protocol):
    def __call__(self, event: enum.StrEnum, fields: dict[str, Any]) -> None: ...


def _null(event: enum.StrEnum, fields: dict[str, Any]) -> None:
    return None


#: the listener used when nobody attached one
NULL_LISTENER: Listener = _null


@dataclass(slots=True)
class EventRecorder:
    """A listener that keeps every event in order (tests, traces). Thread-safe."""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: enum.StrEnum, fields: dict[str, Any]) -> None:
        with self._lock:
            self.events.append((str(event), dict(fields)))

    def names(self) -> list[str]:
        with self._lock:
            return [name for name, _ in self.events]

    def count(self, event: enum.StrEnum) -> int:
        with self._lock:
            return sum(1 for name, _ in self.events if name == str(event))
