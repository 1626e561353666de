"""SafeStorage: raise / None / malformed / hung backends become counted misses."""
from __future__ import annotations

import threading

import pytest
import torch

from hicache.storage.base import StorageBackend
from hicache.storage.faulty import FaultConfig, FaultyStorage
from hicache.storage.file_store import FileStorage
from hicache.storage.safe import SafeConfig, SafeStorage

PAGE = torch.arange(16, dtype=torch.uint8)
KEYS = [f"{i:064x}" for i in range(3)]


def test_exceptions_become_counted_misses(tmp_path):
    safe = SafeStorage(FaultyStorage(FileStorage(tmp_path), FaultConfig(p_raise=1.0)))
    buf = torch.zeros(3, 16, dtype=torch.uint8)
    assert safe.batch_exists(KEYS) == 0
    assert safe.batch_get(KEYS) == [None] * 3
    assert safe.batch_set(KEYS, [PAGE] * 3) == [False] * 3
    assert safe.batch_get_into(KEYS, buf, [0, 1, 2]) == [False] * 3
    assert safe.batch_set_from(KEYS, buf, [0, 1, 2]) == [False] * 3
    stats = safe.stats()
    assert stats["call_error"] == 5 and stats["fault_raise"] == 5
    assert stats["failed_pages"] == 15
    assert "InjectedFault" in safe.last_error


def test_none_results_become_counted_misses(tmp_path):
    safe = SafeStorage(FaultyStorage(FileStorage(tmp_path), FaultConfig(p_none=1.0)))
    assert safe.batch_exists(KEYS) == 0
    assert safe.batch_get(KEYS) == [None] * 3
    assert safe.batch_set(KEYS, [PAGE] * 3) == [False] * 3
    stats = safe.stats()
    assert stats["call_none"] == 3 and stats["fault_none"] == 3 and stats["failed_pages"] == 9


class Malformed(StorageBackend):
    """Answers of the right call with the wrong shape."""
    def __init__(self, exists, get, flags):
        self.exists, self.get, self.flags = exists, get, flags

    def batch_exists(self, keys): return self.exists
    def batch_get(self, keys): return self.get
    def batch_set(self, keys, values): return self.flags
    def batch_get_into(self, keys, dst, rows): return self.flags
    def batch_set_from(self, keys, src, rows): return self.flags
    def stats(self): return None


@pytest.mark.parametrize("exists,get,flags", [
    (True, [None, None], [True, True]),                             # bool is not a count
    (-1, [torch.zeros(4)] * 3, [1, 1, 1]),                           # float page, int flags
    (4, [torch.zeros((2, 2), dtype=torch.uint8)] * 3, [True] * 2),   # 2-D page, short list
    ("3", "pages", None),
])
def test_malformed_results_become_counted_misses(exists, get, flags):
    safe = SafeStorage(Malformed(exists, get, flags))
    buf = torch.zeros(3, 16, dtype=torch.uint8)
    assert safe.batch_exists(KEYS) == 0
    assert safe.batch_get(KEYS) == [None] * 3
    assert safe.batch_set(KEYS, [PAGE] * 3) == [False] * 3
    assert safe.batch_get_into(KEYS, buf, [0, 1, 2]) == [False] * 3
    assert safe.batch_set_from(KEYS, buf, [0, 1, 2]) == [False] * 3
    assert safe.stats() == {"call_none": 6, "failed_pages": 15}   # stats() itself malformed


def test_caller_misuse_still_raises(tmp_path):
    safe = SafeStorage(FileStorage(tmp_path))
    with pytest.raises(ValueError, match="rows"):
        safe.batch_get_into(KEYS, torch.zeros(2, 16, dtype=torch.uint8), [0, 1, 2])


class Hung(StorageBackend):
    """Blocks every call until released; records what it was asked to store, and per close
    how many calls were inside it then."""
    def __init__(self):
        self.release = threading.Event()
        self.entered = threading.Event()    # set once a call is inside
        self.calls = 0
        self.inside = 0
        self.closes: list[int] = []
        self.stored: list[torch.Tensor] = []

    def _block(self):
        self.calls += 1
        self.inside += 1
        self.entered.set()
        try:
            assert self.release.wait(30), "test never released the backend"
        finally:
            self.inside -= 1

    def close(self):
        self.closes.append(self.inside)

    def batch_exists(self, keys):
        self._block()
        return len(keys)

    def batch_get(self, keys):
        self._block()
        return [torch.full((16,), 7, dtype=torch.uint8) for _ in keys]

    def batch_set(self, keys, values):
        self._block()
        self.stored += [v.clone() for v in values]
        return [True] * len(keys)

    def batch_get_into(self, keys, dst, rows):
        self._block()
        for r in rows:                       # a late zero-copy write would corrupt reused rows
            dst[r].fill_(0xEE)
        return [True] * len(keys)

    def batch_set_from(self, keys, src, rows):
        self._block()
        self.stored += [src[r].clone() for r in rows]
        return [True] * len(keys)


def test_timeouts_are_misses_and_late_results_never_touch_caller_memory():
    hung = Hung()
    safe = SafeStorage(hung, SafeConfig(timeout_s=0.05, max_abandoned=8))
    dst = torch.zeros(3, 16, dtype=torch.uint8)
    src = torch.full((3, 16), 1, dtype=torch.uint8)
    assert safe.batch_exists(KEYS) == 0
    assert safe.batch_get_into(KEYS, dst, [0, 1, 2]) == [False] * 3
    assert safe.batch_set_from(KEYS, src, [0, 1, 2]) == [False] * 3
    src.fill_(2)                             # the caller reuses its rows after the call
    assert safe.abandoned() == 3
    hung.release.set()
    assert safe.drain(30)
    assert safe.abandoned() == 0
    assert bool((dst == 0).all())            # the late read went to the worker's own tensors
    assert [bool((v == 1).all()) for v in hung.stored] == [True] * 3   # the snapshot was stored
    stats = safe.stats()
    assert stats == {"call_timeout": 3, "failed_pages": 9}
    # Released, the same wrapper answers normally; the timed path still fills dst.
    assert safe.batch_get_into(KEYS, dst, [0, 1, 2]) == [True] * 3
    assert bool((dst == 7).all())


def test_abandoned_calls_are_bounded():
    hung = Hung()
    safe = SafeStorage(hung, SafeConfig(timeout_s=0.02, max_abandoned=1))
    assert safe.batch_exists(KEYS) == 0
    assert safe.batch_exists(KEYS) == 0      # refused at once: one call already hangs
    assert hung.calls == 1
    hung.release.set()
    assert safe.drain(30)
    assert safe.batch_exists(KEYS) == 3
    assert safe.stats()["call_timeout"] == 2


def test_a_background_loop_survives_a_hostile_backend(tmp_path):
    """The prefetch/backup pattern: a thread loops over storage calls and must finish."""
    config = FaultConfig(seed=11, p_raise=0.3, p_none=0.3, p_corrupt=0.2, p_drop_write=0.2)
    safe = SafeStorage(FaultyStorage(FileStorage(tmp_path), config))
    host = torch.zeros(8, 16, dtype=torch.uint8)
    done: list[int] = []

    def loop() -> None:
        for i in range(150):
            ks = [f"{i:060x}{j:04x}" for j in range(4)]
            safe.batch_set(ks, [PAGE] * 4)
            n = safe.batch_exists(ks)
            got = safe.batch_get_into(ks[:n], host, list(range(n)))
            for ok, row in zip(got, range(n)):
                assert not ok or torch.equal(host[row], PAGE)   # a hit is always the right page
        done.append(1)

    th = threading.Thread(target=loop, name="prefetch")
    th.start()
    th.join()
    assert done == [1]
    stats = safe.stats()
    assert stats["call_error"] == stats["fault_raise"] > 0      # each injected fault counted once
    assert stats["call_none"] == stats["fault_none"] > 0


def test_the_breaker_fails_calls_at_once_after_failures_in_a_row(tmp_path, monkeypatch):
    """trip_after failed calls in a row open the circuit: calls then fail at once without
    reaching the backend, until the cool-down is over; one call is then let through and a
    success closes the circuit, a failure opens it again. (The clock is the module's, moved
    by hand: no waiting.)"""
    from hicache.storage import safe as safe_mod
    now = [1000.0]
    monkeypatch.setattr(safe_mod.time, "monotonic", lambda: now[0])
    faulty = FaultyStorage(FileStorage(tmp_path), FaultConfig(p_raise=1.0))
    store = SafeStorage(faulty, SafeConfig(trip_after=3, cooldown_s=10.0))
    for _ in range(3):
        assert store.batch_get(KEYS) == [None] * 3
    assert store.circuit_open()
    for _ in range(5):                        # no call reaches the backend while open
        assert store.batch_exists(KEYS) == 0
    stats = store.stats()
    assert stats["fault_raise"] == 3 and stats["circuit_open"] == 5 and stats["failed_pages"] == 24
    now[0] += 10.0                            # cool-down over: one call goes through, fails
    assert store.batch_exists(KEYS) == 0 and store.stats()["fault_raise"] == 4
    assert store.circuit_open()               # ... and opens the circuit again at once
    now[0] += 10.0
    faulty.config = FaultConfig()             # the backend is back
    assert store.batch_set(KEYS, [PAGE] * 3) == [True] * 3
    assert not store.circuit_open() and store.batch_exists(KEYS) == 3
    assert store.stats()["circuit_open"] == 5   # nothing failed at once since


def test_no_breaker_unless_asked_and_housekeeping_never_trips_it(tmp_path):
    store = SafeStorage(FaultyStorage(FileStorage(tmp_path), FaultConfig(p_raise=1.0)))
    for _ in range(10):
        assert store.batch_exists(KEYS) == 0
    assert not store.circuit_open() and store.stats()["fault_raise"] == 10
    with pytest.raises(ValueError, match="trip_after"):
        SafeConfig(trip_after=-1)
    with pytest.raises(ValueError, match="cooldown_s"):
        SafeConfig(cooldown_s=float("nan"))


def test_caller_misuse_raises_through_the_guard(tmp_path):
    """batch_set turned a length mismatch or a malformed key into a counted failure of the
    backend ([False], call_error) while the zero-copy calls raised: misuse raises in all."""
    store = SafeStorage(FileStorage(tmp_path))
    with pytest.raises(ValueError, match="values: 1 values for 2 keys"):
        store.batch_set(KEYS[:2], [PAGE])
    with pytest.raises(ValueError, match="key"):
        store.batch_set(["a/b"], [PAGE])
    with pytest.raises(ValueError, match="at positions 0 and 1"):
        store.batch_set_from([KEYS[0], KEYS[0]], torch.zeros(2, 16, dtype=torch.uint8), [0, 1])
    assert store.stats().get("call_error", 0) == 0


@pytest.mark.parametrize("timeout_s", [None, 30.0])
def test_close_waits_for_calls_in_progress_and_refuses_later_calls(timeout_s):
    """close waited only for timed-out calls: a call still in progress (on the caller's
    thread, or within its timeout) had the backend closed under it (a Mooncake client then
    crashed the process), and calls made after close still went in. Now close waits for
    every running call, bounded: past the bound the backend is left open, never closed under
    a call; and later calls are refused, as counted failures."""
    hung = Hung()
    safe = SafeStorage(hung, SafeConfig(timeout_s=timeout_s))
    got: list[int] = []
    th = threading.Thread(target=lambda: got.append(safe.batch_exists(KEYS)))
    th.start()
    try:
        assert hung.entered.wait(30)
        safe.close(drain_s=0.05)                 # the call is still inside the backend
        assert hung.closes == []
        assert safe.last_error.startswith("close skipped: 1 call(s) still running")
        assert safe.batch_get(KEYS) == [None] * 3 and safe.batch_exists(KEYS) == 0
        assert safe.last_error == "refused: the storage is closed"
        assert hung.calls == 1                   # the refused calls never reached it
    finally:
        hung.release.set()
        th.join()
    assert got == [3]                            # the call in progress finished normally
    safe.close()                                 # nothing runs now: closes, once
    safe.close()
    assert hung.closes == [0]
    assert safe.stats() == {"call_error": 3, "failed_pages": 6}   # skipped close + 2 refusals


def test_duplicate_keys_in_a_read_raise_and_never_trip_the_breaker(tmp_path):
    """batch_get / batch_exists took a key twice in one batch (a caller bug, which batch_set
    refuses) for a backend failure: a counted miss that tripped the breaker, after which
    healthy reads failed too. The caller's bug now raises, and the backend is not blamed."""
    store = SafeStorage(FileStorage(tmp_path), SafeConfig(trip_after=1, cooldown_s=30))
    assert store.batch_set(KEYS[:1], [PAGE]) == [True]
    for call in (store.batch_get, store.batch_exists):
        with pytest.raises(ValueError, match="at positions 0 and 1"):
            call([KEYS[0], KEYS[0]])
    assert not store.circuit_open() and "call_error" not in store.stats()
    assert torch.equal(store.batch_get(KEYS[:1])[0], PAGE)


@pytest.mark.parametrize("timeout_s", [None, 30.0])
def test_a_page_of_another_size_than_the_row_is_counted_corrupt(tmp_path, timeout_s):
    """Under a timeout, batch_get_into reads on a worker into the worker's own tensors, and
    read through batch_get, which knows no row size: a page of another size than the row
    was first dropped uncounted (the stats said a hit), then counted corrupt by the wrapper
    on top of the backend's hit. The worker now asks for pages of the row's size
    (batch_get_sized): corrupt and no hit, in the merged stats and the backend's own."""
    inner = FileStorage(tmp_path)
    store = SafeStorage(inner, SafeConfig(timeout_s=timeout_s))
    assert store.batch_set(KEYS[:1], [torch.ones(32, dtype=torch.uint8)]) == [True]
    dst = torch.zeros(2, 64, dtype=torch.uint8)
    assert store.batch_get_into(KEYS[:1], dst, [0]) == [False]
    assert bool((dst == 0).all())
    assert store.stats() == inner.stats() == {"set_ok": 1, "get_corrupt": 1}


class Oversized(StorageBackend):
    """Answers a sized read with pages of another size (a broken batch_get_sized)."""
    def batch_exists(self, keys): return len(keys)
    def batch_get(self, keys): return [torch.full((32,), 9, dtype=torch.uint8) for _ in keys]
    def batch_get_sized(self, keys, nbytes): return self.batch_get(keys)
    def batch_set(self, keys, values): return [True] * len(keys)


@pytest.mark.parametrize("timeout_s", [None, 30.0])
def test_a_sized_read_answering_another_size_is_a_malformed_result(timeout_s):
    """A page of another size than asked from batch_get_sized breaks the backend's contract:
    the answer is malformed (a counted failure), and none of it reaches the rows."""
    store = SafeStorage(Oversized(), SafeConfig(timeout_s=timeout_s))
    assert store.batch_get_sized(KEYS[:2], 16) == [None, None]
    assert store.last_error == "batch_get_sized returned a page of 32 bytes for 16"
    dst = torch.zeros(2, 16, dtype=torch.uint8)
    if timeout_s is not None:               # (the worker's read; the direct path is the backend's)
        assert store.batch_get_into(KEYS[:2], dst, [0, 1]) == [False, False]
        assert bool((dst == 0).all())
    # the default sized read of a backend filters by size: a miss, not a malformed answer
    assert StorageBackend.batch_get_sized(Oversized(), KEYS[:2], 16) == [None, None]
    assert [v.numel() for v in StorageBackend.batch_get_sized(Oversized(), KEYS[:1], 32)] == [32]
    calls = 2 if timeout_s is not None else 1
    assert store.stats() == {"call_none": calls, "failed_pages": 2 * calls}
