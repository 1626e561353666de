"""Failure injection for tests: a backend wrapper that delays, raises, returns None,
corrupts pages at rest and drops writes, reproducibly per seed.

Determinism: each calling thread draws from its own `random.Random`, seeded from (seed, thread
name), and every call draws a fixed number of values whatever the outcome, so a thread's sequence
of faults depends only on the seed, its name and the calls it made, not on other threads.
The streams are kept by the wrapper, keyed by the name of the thread the call is made for
(`caller_name`), not by the running thread: SafeStorage under a timeout runs each call on a new
worker thread, and a stream per worker restarted at every call (the same draws each time, so
faults were all or nothing). A call takes its draws under a lock, so threads of one name share
one stream without tearing it (deterministic as long as their calls do not overlap).
Corruption is injected under the checksum (the stored bytes are changed through the inner
backend's `tamper`), so it exercises the real defence: verification turns it into a miss.
A dropped write is reported stored but is not: exists/get must then simply miss.
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

import torch

from hicache.storage.base import StorageBackend, caller_name
from hicache.storage.counters import Count, Counters, merge_stats

T = TypeVar("T")
MAX_DELAY_S = 5.0
_never_set = threading.Event()   # waited on with a timeout: emulated latency, not synchronization


class InjectedFault(RuntimeError):
    """The error FaultyStorage raises on purpose."""


@runtime_checkable
class Tamperable(Protocol):
    def tamper(self, key: str, offset: int) -> bool:
        """Change one stored byte of `key` in place; False if the page is absent."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FaultConfig:
    seed: int = 0
    p_raise: float = 0.0        # per call: raise InjectedFault
    p_none: float = 0.0         # per call: return None instead of a result (never both: a call
                                # fails with probability p_raise + p_none, at most 1)
    p_delay: float = 0.0        # per call: wait uniform [0, max_delay_s] first
    max_delay_s: float = 0.0
    p_corrupt: float = 0.0      # per page read: corrupt the stored page before reading it
    p_drop_write: float = 0.0   # per page written: do not store it, report it stored

    def __post_init__(self) -> None:
        for name in ("p_raise", "p_none", "p_delay", "p_corrupt", "p_drop_write"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name}: must lie in [0, 1], got {p}")
        if self.p_raise + self.p_none > 1.0:
            raise ValueError(f"p_raise + p_none: a call fails at most always, got {self.p_raise} + {self.p_none}")
        if not 0.0 <= self.max_delay_s <= MAX_DELAY_S:
            raise ValueError(f"max_delay_s: must lie in [0, {MAX_DELAY_S}], got {self.max_delay_s}")
        if self.p_delay > 0 and self.max_delay_s == 0:
            raise ValueError("max_delay_s: must be positive when p_delay > 0")


def thread_rng(seed: int, name: str) -> random.Random:
    """The fault stream of thread `name` (stable across processes, unlike hash())."""
    digest = hashlib.sha256(f"{seed}\x00{name}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


class FaultyStorage(StorageBackend):
    """Wraps a backend and injects the faults of `config`; counts what it injected."""

    def __init__(self, inner: StorageBackend, config: FaultConfig) -> None:
        if config.p_corrupt > 0 and not isinstance(inner, Tamperable):
            raise ValueError(f"p_corrupt: {type(inner).__name__} cannot corrupt pages at rest "
                             "(it has no tamper method)")
        self.inner = inner
        self.config = config
        self.counters = Counters()
        self._rng_lock = threading.Lock()
        self._rngs: dict[str, random.Random] = {}   # fault stream per caller name, under _rng_lock

    def _draw(self, draw: Callable[[random.Random], T]) -> T:
        """draw(stream of the calling thread), under the lock: one call's draws are taken
        together, never interleaved with another thread's of the same name."""
        name = caller_name()
        with self._rng_lock:
            rng = self._rngs.get(name)
            if rng is None:
                rng = self._rngs[name] = thread_rng(self.config.seed, name)
            return draw(rng)

    def _call_faults(self) -> bool:
        """Delay and maybe fail: raise, or True if this call must return None. One draw
        decides the outcome (raise below p_raise, None below p_raise + p_none), so a call
        fails with probability p_raise + p_none; draws 3 values whatever happens."""
        c = self.config
        delay, outcome, amount = self._draw(lambda rng: (rng.random(), rng.random(), rng.random()))
        if delay < c.p_delay:
            self.counters.add(Count.FAULT_DELAY)
            _never_set.wait(amount * c.max_delay_s)
        if outcome < c.p_raise:
            self.counters.add(Count.FAULT_RAISE)
            raise InjectedFault("injected storage failure")
        if outcome < c.p_raise + c.p_none:
            self.counters.add(Count.FAULT_NONE)
            return True
        return False

    def _corrupt(self, keys: Sequence[str]) -> None:
        """Per key, maybe corrupt the stored page (two draws per key)."""
        draws = self._draw(lambda rng: [(rng.random(), rng.randrange(1 << 30)) for _ in keys])
        for key, (hit, offset) in zip(keys, draws):
            if hit < self.config.p_corrupt and self.inner.tamper(key, offset):
                self.counters.add(Count.FAULT_CORRUPT)

    def _kept(self, n: int) -> list[bool]:
        """Per page written, whether it is really written (one draw per page)."""
        kept = [x >= self.config.p_drop_write for x in self._draw(lambda rng: [rng.random() for _ in range(n)])]
        self.counters.add(Count.FAULT_DROP, kept.count(False))
        return kept

    # -- interface -----------------------------------------------------------------------
    def batch_exists(self, keys: Sequence[str]) -> int:
        if self._call_faults():
            return None  # type: ignore[return-value]  # the point: a misbehaving backend
        return self.inner.batch_exists(keys)

    def batch_get(self, keys: Sequence[str]) -> list[torch.Tensor | None]:
        if self._call_faults():
            return None  # type: ignore[return-value]
        self._corrupt(keys)
        return self.inner.batch_get(keys)

    def batch_get_sized(self, keys: Sequence[str], nbytes: int) -> list[torch.Tensor | None]:
        if self._call_faults():
            return None  # type: ignore[return-value]
        self._corrupt(keys)
        return self.inner.batch_get_sized(keys, nbytes)

    def batch_get_into(self, keys: Sequence[str], dst: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        if self._call_faults():
            return None  # type: ignore[return-value]
        self._corrupt(keys)
        return self.inner.batch_get_into(keys, dst, rows)

    def batch_set(self, keys: Sequence[str], values: Sequence[torch.Tensor]) -> list[bool]:
        if self._call_faults():
            return None  # type: ignore[return-value]
        kept = self._kept(len(keys))
        picked = [i for i, k in enumerate(kept) if k]
        stored = self.inner.batch_set([keys[i] for i in picked], [values[i] for i in picked])
        return self._merge(kept, picked, stored)

    def batch_set_from(self, keys: Sequence[str], src: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        if self._call_faults():
            return None  # type: ignore[return-value]
        kept = self._kept(len(keys))
        picked = [i for i, k in enumerate(kept) if k]
        stored = self.inner.batch_set_from([keys[i] for i in picked], src, [rows[i] for i in picked])
        return self._merge(kept, picked, stored)

    @staticmethod
    def _merge(kept: list[bool], picked: list[int], stored: list[bool]) -> list[bool]:
        out = [True] * len(kept)   # a dropped write claims success
        for i, ok in zip(picked, stored):
            out[i] = ok
        return out

    def register_buffer(self, buf: torch.Tensor) -> None:
        self.inner.register_buffer(buf)

    def stats(self) -> dict[str, int]:
        return merge_stats(self.inner.stats(), self.counters.snapshot())

    def close(self) -> None:
        self.inner.close()
