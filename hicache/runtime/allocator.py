"""Page allocators: O(1) free lists (a stack of free page indices).

`PageAllocator` serves device pages. `HostSlots` serves host slots and also carries
each slot's state (HostSlotState) with guarded transitions: an illegal transition
raises `SlotStateError` at once, naming the slots and their states.
"""
from __future__ import annotations

import enum
import operator
import threading

import numpy as np


class PageAllocator:
    """Free list of `capacity` pages: a stack of returned pages, then the never-used tail
    [next, capacity), so construction is O(1) whatever the capacity.
    Invariant: free pages are distinct, in [0, capacity)."""

    #: while device-page monitors watch: their journals, each given the pages of every call
    #: in order, as (released, pages) (hicache.monitors.maps.device_pages drains them)
    journals: tuple = ()

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free: list[int] = []
        self._next = 0
        # pages free: len(_free) + capacity - _next, kept by alloc and release (a plain
        # attribute: the monitors' maps read it at every event of a strict run, where the
        # property it was cost a frame)
        self.free = capacity

    def alloc(self, n: int) -> list[int] | None:
        """n pages, or None (expected shortage) when fewer are free."""
        free = self._free
        if n > self.free:
            return None
        take = min(n, len(free))
        out = free[len(free) - take:]
        del free[len(free) - take:]
        out.reverse()
        if take < n:
            nxt = self._next
            out.extend(range(nxt, nxt + n - take))
            self._next = nxt + n - take
        self.free -= len(out)
        for j in self.journals:
            j.append((False, out))
        return out

    def release(self, pages: list[int]) -> None:
        for j in self.journals:
            j.append((True, list(pages)))
        free = self._free
        n = len(free)
        free.extend(pages)
        self.free += len(free) - n

    def free_set(self) -> set[int]:
        # (one set, the never-used tail added to it: a monitor's check asks at every state)
        out = set(self._free)
        out.update(range(self._next, self.capacity))
        return out


class HostSlotState(enum.IntEnum):
    IDLE = 0        # free, in the free list
    RESERVED = 1    # being written (device->host backup or storage->host prefetch)
    PROTECTED = 2   # being read by a load-back: neither freed nor rewritten
    SYNCED = 3      # holds valid bytes; readable, evictable
    BACKUP = 4      # being read by a storage backup: not freed


S = HostSlotState
#: the legal transitions of one slot (spec/HostTier.tla)
TRANSITIONS: frozenset[tuple[HostSlotState, HostSlotState]] = frozenset({
    (S.IDLE, S.RESERVED),       # BackupStart / PrefetchStart
    (S.RESERVED, S.SYNCED),     # BackupFinish / PrefetchFinish
    (S.RESERVED, S.IDLE),       # failed or aborted write
    (S.SYNCED, S.PROTECTED),    # LoadBackStart
    (S.PROTECTED, S.SYNCED),    # LoadBackFinish
    (S.SYNCED, S.BACKUP),       # StorageBackupStart
    (S.BACKUP, S.SYNCED),       # StorageBackupFinish
    (S.SYNCED, S.IDLE),         # HostEvict
})


class SlotStateError(RuntimeError):
    """A broken internal invariant: a slot was moved along an illegal edge."""


class HostSlots:
    """Host slot allocator and state machine. Thread-safe: transfer threads never call
    it, but the lock keeps the state array and free list consistent for readers."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.state = np.zeros(capacity, dtype=np.int8)   # HostSlotState per slot
        self._pages = PageAllocator(capacity)   # the free list (returned slots, then the tail)
        self._lock = threading.Lock()

    #: the free list's count, read in one C call of the property (no frame of this class's
    #: own): the HostTier monitor's map reads it at every event of a strict run
    free = property(operator.attrgetter("_pages.free"), doc="Slots free (the free list's count).")

    @property
    def used(self) -> int:
        return self.capacity - self._pages.free

    def reserve(self, n: int) -> list[int] | None:
        """n slots IDLE -> RESERVED, or None when fewer are free."""
        with self._lock:
            out = self._pages.alloc(n)
            if not out:
                return out
            idx = np.asarray(out, dtype=np.int64)
            if (self.state[idx] != S.IDLE).any():
                raise SlotStateError(f"free list held non-IDLE slots {self._describe(idx)}")
            self.state[idx] = S.RESERVED
            return out

    def move(self, slots: list[int], src: HostSlotState, dst: HostSlotState) -> None:
        """Guarded transition of every slot in `slots` from `src` to `dst`."""
        if (src, dst) not in TRANSITIONS:
            raise SlotStateError(f"illegal transition {src.name}->{dst.name}")
        if not slots:
            return
        idx = np.asarray(slots, dtype=np.int64)
        with self._lock:
            if (self.state[idx] != src).any():
                raise SlotStateError(f"{src.name}->{dst.name} on slots {self._describe(idx)}")
            self.state[idx] = dst
            if dst is S.IDLE:
                self._pages.release(slots)

    def all_in(self, slots: list[int], st: HostSlotState) -> bool:
        return bool((self.state[np.asarray(slots, dtype=np.int64)] == st).all())

    def free_set(self) -> set[int]:
        with self._lock:
            return self._pages.free_set()

    def _describe(self, idx: np.ndarray) -> str:
        bad = [(int(i), HostSlotState(int(self.state[i])).name) for i in idx[:8]]
        return f"{bad}{' ...' if len(idx) > 8 else ''}"
