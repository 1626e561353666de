"""Thread-safe event counters shared by the storage backends and wrappers."""
from __future__ import annotations

import enum
import threading


class Count(enum.StrEnum):
    """What a backend or wrapper counts; each counter is a number of pages unless noted."""
    GET_HIT = "get_hit"              # page returned, checksum verified
    GET_MISS = "get_miss"            # page absent
    GET_CORRUPT = "get_corrupt"      # page present but failed verification: served as a miss
    SET_OK = "set_ok"
    SET_FAIL = "set_fail"
    EXISTS_CALLS = "exists_calls"    # batch_exists calls
    # SafeStorage: failures of the wrapped backend turned into misses
    CALL_ERROR = "call_error"        # calls that raised
    CALL_NONE = "call_none"          # calls that returned None or a malformed result
    CALL_TIMEOUT = "call_timeout"    # calls abandoned after the timeout
    CIRCUIT_OPEN = "circuit_open"    # calls failed at once: the backend failed trip_after times in a row
    FAILED_PAGES = "failed_pages"    # pages answered as a miss / not stored because of the above
    # FaultyStorage: faults injected
    FAULT_RAISE = "fault_raise"
    FAULT_NONE = "fault_none"
    FAULT_DELAY = "fault_delay"
    FAULT_CORRUPT = "fault_corrupt"  # pages tampered with at rest before a get
    FAULT_DROP = "fault_drop"        # writes dropped silently (reported stored, not stored)


class Counters:
    """A bag of counters; `add` may be called from any thread."""
    __slots__ = ("_lock", "_values")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[Count, int] = dict.fromkeys(Count, 0)

    def add(self, what: Count, n: int = 1) -> None:
        if n:
            with self._lock:
                self._values[what] += n

    def __getitem__(self, what: Count) -> int:
        with self._lock:
            return self._values[what]

    def snapshot(self) -> dict[str, int]:
        """Non-zero counters by name."""
        with self._lock:
            return {k.value: v for k, v in self._values.items() if v}


def merge_stats(*parts: dict[str, int]) -> dict[str, int]:
    """Counters of a wrapper and what it wraps, summed by name."""
    out: dict[str, int] = {}
    for part in parts:
        for name, n in part.items():
            out[name] = out.get(name, 0) + n
    return out
