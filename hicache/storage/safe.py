"""SafeStorage: the guard the prefetch and backup threads call storage through.

Whatever the wrapped backend does — raise, return None or a malformed result, or hang past
the timeout — every call returns a well-formed answer in which the failed pages are misses
(not present, not fetched, not stored), and counts what happened. A background thread using
it therefore never dies of a backend error (REFERENCE.md bug 14).

Timeouts: with `timeout_s` set, the backend runs on a worker thread and the caller stops
waiting at the deadline. The abandoned worker may still finish later, so it must never touch
caller memory: under a timeout, `batch_get_into` fetches into the worker's own tensors and the
caller copies them into `dst` only if they arrived in time, and `batch_set_from` stores a
snapshot of the rows taken before the call. (Without a timeout the zero-copy calls go straight
through.) At most `max_abandoned` calls may be left running; beyond that, calls fail at once
as timeouts instead of piling up threads on a hung backend.

Circuit breaker: with `trip_after` set, that many failed data calls in a row (an error, a
malformed answer, a timeout) open the circuit: for `cooldown_s` every data call fails at once
(counted `circuit_open`), then one call is let through; a success closes it, a failure opens it
again. A dead backend (a stopped Mooncake master answers each call after seconds) then costs
a few bounded calls, not seconds per page for the rest of the run, and reads as failures,
never as a cold cache.

Close: `close` refuses every later data call (a counted failure, `last_error` says so), waits
(bounded) for the backend calls still running, those on the caller's thread and the timed-out
ones alike, and only then closes the backend: a client closed under a call still inside it
can crash the process (Mooncake's did).
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hicache.storage.base import CallThread, StorageBackend
from hicache.storage.counters import Count, Counters, merge_stats
from hicache.storage.hostbuf import check_rows, row_nbytes
from hicache.storage.keys import check_keys
from hicache.validate import int_at_least, number_in


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SafeConfig:
    timeout_s: float | None = None   # None: call the backend on the caller's thread
    max_abandoned: int = 4           # timed-out calls allowed to linger on worker threads
    trip_after: int = 0              # failed data calls in a row that open the circuit (0: never)
    cooldown_s: float = 5.0          # how long an open circuit fails calls at once

    def __post_init__(self) -> None:
        if self.timeout_s is not None:
            number_in("timeout_s", self.timeout_s, 0.0, lo_open=True)
        int_at_least("max_abandoned", self.max_abandoned, 1)
        int_at_least("trip_after", self.trip_after, 0)
        number_in("cooldown_s", self.cooldown_s, 0.0, lo_open=True)


class _Timeout(Exception):
    pass


class _Closed(Exception):
    pass


class _Call:
    """One backend call on a daemon worker thread; the caller waits with a deadline."""
    __slots__ = ("done", "result", "error", "abandoned")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False   # set under SafeStorage._lock once the caller gave up


class SafeStorage(StorageBackend):
    """Never raises for backend failures; turns them into counted misses."""

    def __init__(self, inner: StorageBackend, config: SafeConfig = SafeConfig()) -> None:
        self.inner = inner
        self.config = config
        self.counters = Counters()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)   # notified when _running or _abandoned drops
        self._abandoned = 0   # Invariant: timed-out calls whose worker has not finished yet
        self._running = 0     # Invariant: backend calls started, not returned (abandoned ones too)
        self._closed = False  # set by close (under _lock): no backend call starts after it ...
        self._inner_closed = False   # ... except the backend's close, once _running is 0
        self._failures = 0    # failed data calls in a row (the breaker's count)
        self._open_until = 0.0   # monotonic time until which data calls fail at once
        self.last_error: str | None = None

    # -- running one call ----------------------------------------------------------------
    def _run(self, fn: Callable[..., Any], *args: Any, after_close: bool = False) -> Any:
        """fn(*args), on a worker thread with a deadline when a timeout is configured.
        Raises _Closed once close began, unless `after_close` (a call that does not go
        through the backend's connection: stats, close itself)."""
        timed = self.config.timeout_s is not None
        with self._lock:   # the check and the count are one step, so close never misses a call
            if self._closed and not after_close:
                raise _Closed
            if timed and self._abandoned >= self.config.max_abandoned:
                raise _Timeout
            self._running += 1
        if not timed:
            try:
                return fn(*args)
            finally:
                self._finished()
        call = _Call()

        def work() -> None:
            try:
                call.result = fn(*args)
            except BaseException as exc:  # handed to the caller, or dropped if abandoned
                call.error = exc
            finally:
                with self._lock:
                    call.done.set()
                    self._running -= 1
                    if call.abandoned:
                        self._abandoned -= 1
                    self._idle.notify_all()

        try:
            CallThread(work, threading.current_thread().name).start()
        except BaseException:
            self._finished()   # the call never started
            raise
        if not call.done.wait(self.config.timeout_s):
            with self._lock:
                if not call.done.is_set():
                    call.abandoned = True
                    self._abandoned += 1
                    raise _Timeout
        if call.error is not None:
            raise call.error
        return call.result

    def _finished(self) -> None:
        with self._lock:
            self._running -= 1
            self._idle.notify_all()

    def _guard(self, n_pages: int, miss: Any, check: Callable[[Any], Any],
               fn: Callable[..., Any], *args: Any, after_close: bool = False) -> Any:
        """Run, validate with `check` (returns the cleaned result or raises TypeError). A
        data call (n_pages > 0) goes through the circuit breaker; housekeeping (stats, close,
        buffer registration) does not."""
        data = n_pages > 0 and self.config.trip_after > 0
        if data and self.circuit_open():
            self.counters.add(Count.CIRCUIT_OPEN)
            self.counters.add(Count.FAILED_PAGES, n_pages)
            return miss
        try:
            result = self._run(fn, *args, after_close=after_close)
        except _Closed:
            self._fail(Count.CALL_ERROR, n_pages, "refused: the storage is closed")
            return miss
        except _Timeout:
            self._fail(Count.CALL_TIMEOUT, n_pages, "timeout", data)
            return miss
        except Exception as exc:
            self._fail(Count.CALL_ERROR, n_pages, repr(exc), data)
            return miss
        try:
            out = check(result)
        except TypeError as exc:
            self._fail(Count.CALL_NONE, n_pages, str(exc), data)
            return miss
        if data:
            with self._lock:
                self._failures = 0
        return out

    def _fail(self, what: Count, n_pages: int, why: str, data: bool = False) -> None:
        self.counters.add(what)
        self.counters.add(Count.FAILED_PAGES, n_pages)
        self.last_error = why
        if data:
            with self._lock:
                self._failures += 1
                if self._failures >= self.config.trip_after:
                    self._open_until = time.monotonic() + self.config.cooldown_s

    def circuit_open(self) -> bool:
        """Whether data calls fail at once now (the breaker tripped, cool-down not over)."""
        with self._lock:
            return time.monotonic() < self._open_until

    # -- interface -----------------------------------------------------------------------
    def batch_exists(self, keys: Sequence[str]) -> int:
        check_keys(keys)     # caller misuse raises: it is no backend failure (nor trips the breaker)
        n = len(keys)

        def check(r: Any) -> int:
            if type(r) is not int or not 0 <= r <= n:
                raise TypeError(f"batch_exists returned {r!r} for {n} keys")
            return r
        return self._guard(n, 0, check, self.inner.batch_exists, keys)

    def batch_get(self, keys: Sequence[str]) -> list[torch.Tensor | None]:
        check_keys(keys)     # caller misuse raises: it is no backend failure (nor trips the breaker)
        return self._guard(len(keys), [None] * len(keys), _pages_check(len(keys)),
                           self.inner.batch_get, keys)

    def batch_get_sized(self, keys: Sequence[str], nbytes: int) -> list[torch.Tensor | None]:
        check_keys(keys)
        return self._guard(len(keys), [None] * len(keys), _pages_check(len(keys), nbytes),
                           self.inner.batch_get_sized, keys, nbytes)

    def batch_set(self, keys: Sequence[str], values: Sequence[torch.Tensor]) -> list[bool]:
        check_keys(keys)     # caller misuse still raises (as the zero-copy calls do)
        if len(keys) != len(values):
            raise ValueError(f"values: {len(values)} values for {len(keys)} keys")
        return self._guard(len(keys), [False] * len(keys), _flags_check(len(keys), "batch_set"),
                           self.inner.batch_set, keys, values)

    def batch_get_into(self, keys: Sequence[str], dst: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        check_keys(keys)
        check_rows(keys, dst, rows, "dst")   # caller misuse still raises
        miss = [False] * len(keys)
        if self.config.timeout_s is None:
            return self._guard(len(keys), miss, _flags_check(len(keys), "batch_get_into"),
                               self.inner.batch_get_into, keys, dst, rows)
        # The worker fills its own tensors; only this thread writes dst (see module doc).
        # It asks for pages of the row's size, so the backend checks the size before it
        # counts: a page of another size is a miss counted corrupt by the backend, never a
        # hit, as on the path without a timeout (this wrapper counts no page outcomes).
        nbytes = row_nbytes(dst)
        vals = self._guard(len(keys), None, _pages_check(len(keys), nbytes),
                           self.inner.batch_get_sized, keys, nbytes)
        if vals is None:
            return miss
        out = []
        for row, val in zip(rows, vals):
            if val is not None:     # (of the row's size: _pages_check refused any other)
                dst[row].copy_(val.view(dst[row].shape))
            out.append(val is not None)
        return out

    def batch_set_from(self, keys: Sequence[str], src: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        check_keys(keys)
        check_rows(keys, src, rows, "src")
        flags = _flags_check(len(keys), "batch_set_from")
        if self.config.timeout_s is None:
            return self._guard(len(keys), [False] * len(keys), flags,
                               self.inner.batch_set_from, keys, src, rows)
        # Snapshot now: once this call returns, the caller may reuse the rows.
        snapshot = [src[r].reshape(-1).clone() for r in rows]
        return self._guard(len(keys), [False] * len(keys), flags,
                           self.inner.batch_set, keys, snapshot)

    def abandoned(self) -> int:
        """Timed-out calls still running on their worker threads."""
        with self._lock:
            return self._abandoned

    def drain(self, timeout_s: float) -> bool:
        """Wait until no abandoned call is running (e.g. before close); True if none is."""
        with self._idle:
            return self._idle.wait_for(lambda: self._abandoned == 0, timeout_s)

    def register_buffer(self, buf: torch.Tensor) -> None:
        self._guard(0, None, lambda r: None, self.inner.register_buffer, buf)

    def stats(self) -> dict[str, int]:
        # (also after close: the backends' stats are their own counters, no connection)
        inner = self._guard(0, {}, _stats_check, self.inner.stats, after_close=True)
        return merge_stats(inner, self.counters.snapshot())

    def close(self, drain_s: float = 10.0) -> None:
        """Refuse every later call, then close the backend once no call runs in it (waiting
        up to `drain_s` for those in progress and the timed-out ones): a client closed under
        a call still inside it can crash the process (Mooncake's did). If calls are still
        running then, the backend is left open (counted as an error, `last_error` says why):
        a leak until the process ends, never a crash; a later close tries again."""
        with self._lock:
            self._closed = True
            if self._inner_closed:
                return
            drained = self._idle.wait_for(lambda: self._running == 0, drain_s)
            running, abandoned = self._running, self._abandoned
            self._inner_closed = drained
        if not drained:
            self._fail(Count.CALL_ERROR, 0, f"close skipped: {running} call(s) still running in the "
                                            f"backend after {drain_s:g} s ({abandoned} of them timed out)")
            return
        self._guard(0, None, lambda r: None, self.inner.close, after_close=True)


def _pages_check(n: int, nbytes: int | None = None) -> Callable[[Any], list[torch.Tensor | None]]:
    """Check of a batch_get answer (of batch_get_sized's when `nbytes` is given: a page of
    another size breaks its contract, so the whole answer is malformed, never copied)."""
    what = "batch_get" if nbytes is None else "batch_get_sized"

    def check(r: Any) -> list[torch.Tensor | None]:
        if not isinstance(r, list) or len(r) != n:
            raise TypeError(f"{what} returned {type(r).__name__} for {n} keys")
        for v in r:
            if v is None:
                continue
            if not (isinstance(v, torch.Tensor) and v.dtype == torch.uint8
                    and v.dim() == 1 and v.device.type == "cpu"):
                raise TypeError(f"{what} returned a value that is not a 1-D CPU uint8 tensor")
            if nbytes is not None and v.numel() != nbytes:
                raise TypeError(f"{what} returned a page of {v.numel()} bytes for {nbytes}")
        return r
    return check


def _flags_check(n: int, what: str) -> Callable[[Any], list[bool]]:
    def check(r: Any) -> list[bool]:
        if not isinstance(r, list) or len(r) != n or not all(type(f) is bool for f in r):
            raise TypeError(f"{what} returned {r!r:.80} for {n} keys")
        return r
    return check


def _stats_check(r: Any) -> dict[str, int]:
    if not isinstance(r, dict):
        raise TypeError(f"stats returned {type(r).__name__}")
    return r
