"""FaultyStorage: each fault kind does what it says, reproducibly per seed and thread."""
from __future__ import annotations

import threading

import pytest
import torch

from hicache.storage.base import StorageBackend
from hicache.storage.faulty import FaultConfig, FaultyStorage, InjectedFault
from hicache.storage.file_store import FileStorage
from hicache.storage.safe import SafeConfig, SafeStorage

PAGE = torch.arange(48, dtype=torch.uint8)


def keys(n: int, base: int = 0) -> list[str]:
    return [f"{base + i:064x}" for i in range(n)]


def transcript(store: StorageBackend, rounds: int = 40) -> list[object]:
    """Outcomes of a fixed call sequence, exceptions included."""
    out: list[object] = []
    for r in range(rounds):
        ks = keys(3, 10 * r)
        for op in (lambda: store.batch_set(ks, [PAGE] * 3),
                   lambda: store.batch_exists(ks),
                   lambda: store.batch_get(ks)):
            try:
                res = op()
            except InjectedFault:
                res = "raise"
            if isinstance(res, list):
                res = [x if isinstance(x, bool) or x is None else "page" for x in res]
            out.append(res)
    return out


MIXED = dict(p_raise=0.15, p_none=0.15, p_corrupt=0.2, p_drop_write=0.2)


def run_in_thread(fn, name: str):
    box = []
    th = threading.Thread(target=lambda: box.append(fn()), name=name)
    th.start()
    th.join()
    return box[0]


def test_same_seed_same_faults_different_seed_different(tmp_path):
    def make(seed: int, d: str) -> FaultyStorage:
        return FaultyStorage(FileStorage(tmp_path / d), FaultConfig(seed=seed, **MIXED))
    a = run_in_thread(lambda: transcript(make(1, "a")), "worker")
    b = run_in_thread(lambda: transcript(make(1, "b")), "worker")
    c = run_in_thread(lambda: transcript(make(2, "c")), "worker")
    assert a == b
    assert a != c
    assert "raise" in a and None in a                 # the mix really injected faults


def test_a_threads_faults_do_not_depend_on_other_threads(tmp_path):
    shared = FaultyStorage(FileStorage(tmp_path / "s"), FaultConfig(seed=5, **MIXED))
    alone = run_in_thread(lambda: transcript(FaultyStorage(
        FileStorage(tmp_path / "alone"), FaultConfig(seed=5, **MIXED))), "prefetch")
    results: dict[str, list[object]] = {}
    start = threading.Barrier(2)

    def prefetch() -> None:
        start.wait()
        results["prefetch"] = transcript(shared)

    # The "backup" thread draws from its own stream; it must not shift "prefetch"'s faults.
    def backup() -> None:
        start.wait()
        for _ in range(50):
            try:
                shared.batch_exists(keys(2, 10_000))
            except InjectedFault:
                pass

    threads = [threading.Thread(target=prefetch, name="prefetch"),
               threading.Thread(target=backup, name="backup")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results["prefetch"] == alone


def test_corruption_is_injected_under_the_checksum(tmp_path):
    inner = FileStorage(tmp_path)
    store = FaultyStorage(inner, FaultConfig(seed=0, p_corrupt=1.0))
    ks = keys(6)
    assert store.batch_set(ks, [PAGE] * 6) == [True] * 6
    assert store.batch_get(ks) == [None] * 6            # never wrong bytes: all misses
    stats = store.stats()
    assert stats["fault_corrupt"] == 6 and stats["get_corrupt"] == 6
    dst = torch.zeros(6, 48, dtype=torch.uint8)
    assert store.batch_set(ks, [PAGE] * 6) == [True] * 6
    assert store.batch_get_into(ks, dst, list(range(6))) == [False] * 6


def test_dropped_writes_claim_success_but_are_absent(tmp_path):
    store = FaultyStorage(FileStorage(tmp_path), FaultConfig(seed=0, p_drop_write=1.0))
    ks = keys(4)
    assert store.batch_set(ks, [PAGE] * 4) == [True] * 4
    src = torch.zeros(4, 48, dtype=torch.uint8)
    assert store.batch_set_from(ks, src, [0, 1, 2, 3]) == [True] * 4
    assert store.batch_exists(ks) == 0
    assert store.stats()["fault_drop"] == 8


def test_raise_none_and_delay(tmp_path):
    ks = keys(2)
    raising = FaultyStorage(FileStorage(tmp_path / "r"), FaultConfig(p_raise=1.0))
    with pytest.raises(InjectedFault):
        raising.batch_get(ks)
    none = FaultyStorage(FileStorage(tmp_path / "n"), FaultConfig(p_none=1.0))
    assert none.batch_exists(ks) is None and none.batch_set(ks, [PAGE] * 2) is None
    slow = FaultyStorage(FileStorage(tmp_path / "d"), FaultConfig(p_delay=1.0, max_delay_s=0.001))
    assert slow.batch_set(ks, [PAGE] * 2) == [True, True]
    assert slow.batch_exists(ks) == 2
    assert slow.stats()["fault_delay"] == 2


def test_raise_and_none_split_one_failure_rate(tmp_path):
    """p_raise + p_none is the failure rate of a call (one draw decides): at 0.5 + 0.5 every
    call fails, about half by raising, half by returning None."""
    store = FaultyStorage(FileStorage(tmp_path), FaultConfig(seed=3, p_raise=0.5, p_none=0.5))
    raised = none = 0
    for _ in range(400):
        try:
            got = store.batch_exists(keys(1))
        except InjectedFault:
            raised += 1
            continue
        assert got is None
        none += 1
    assert raised + none == 400 and 150 < raised < 250
    assert store.stats()["fault_raise"] == raised and store.stats()["fault_none"] == none


@pytest.mark.parametrize("kwargs,field", [
    ({"p_raise": 1.5}, "p_raise"), ({"p_none": -0.1}, "p_none"), ({"p_raise": 0.6, "p_none": 0.6}, "p_raise \\+ p_none"),
    ({"p_delay": 0.5}, "max_delay_s"), ({"max_delay_s": 60.0}, "max_delay_s")])
def test_config_is_validated(kwargs, field):
    with pytest.raises(ValueError, match=field):
        FaultConfig(**kwargs)


def test_corruption_needs_a_tamperable_backend():
    class Plain(StorageBackend):
        def batch_exists(self, keys): return 0
        def batch_get(self, keys): return [None] * len(keys)
        def batch_set(self, keys, values): return [False] * len(keys)

    with pytest.raises(ValueError, match="p_corrupt"):
        FaultyStorage(Plain(), FaultConfig(p_corrupt=0.1))
    FaultyStorage(Plain(), FaultConfig(p_raise=0.1))   # other faults need nothing


@pytest.mark.parametrize("seed", range(4))
def test_faults_hold_their_rate_when_each_call_runs_on_a_new_thread(tmp_path, seed):
    """The fault stream was per thread, seeded by the thread's name; SafeStorage under a
    timeout runs each call on a new worker thread of one name, so every call replayed the
    same first draws: all or none of the calls failed (seed 0: 0/40, seed 2: 40/40 at
    p_raise=0.5). The stream is now the calling thread's, kept across its workers: the same
    faults as when it calls directly."""
    config = FaultConfig(seed=seed, p_raise=0.5)

    def outcomes(safe: SafeConfig) -> list[bool]:
        store = SafeStorage(FaultyStorage(FileStorage(tmp_path / str(safe.timeout_s)), config), safe)
        return [store.batch_set(keys(1, i), [PAGE]) == [True] for i in range(40)]
    direct, on_workers = outcomes(SafeConfig()), outcomes(SafeConfig(timeout_s=30.0))
    assert on_workers == direct
    assert 10 < on_workers.count(False) < 30


def test_sized_reads_get_the_faults_of_reads(tmp_path):
    """batch_get_sized (SafeStorage's read under a timeout) draws and injects the faults of
    batch_get, and the size check stays the backend's: another size is corrupt, not a hit."""
    inner = FileStorage(tmp_path)
    ks = keys(2)
    assert inner.batch_set(ks, [PAGE, PAGE]) == [True, True]
    with pytest.raises(InjectedFault):
        FaultyStorage(inner, FaultConfig(p_raise=1.0)).batch_get_sized(ks, PAGE.numel())
    assert FaultyStorage(inner, FaultConfig(p_none=1.0)).batch_get_sized(ks, PAGE.numel()) is None
    sized = FaultyStorage(inner, FaultConfig())
    before = inner.stats()
    assert sized.batch_get_sized(ks[:1], PAGE.numel() + 1) == [None]
    (got,) = sized.batch_get_sized(ks[1:], PAGE.numel())
    assert torch.equal(got, PAGE)
    assert inner.stats()["get_corrupt"] == before.get("get_corrupt", 0) + 1
    assert inner.stats()["get_hit"] == before.get("get_hit", 0) + 1
    corrupting = FaultyStorage(inner, FaultConfig(p_corrupt=1.0))
    assert corrupting.batch_get_sized(ks, PAGE.numel()) == [None, None]    # never wrong bytes
    assert corrupting.stats()["fault_corrupt"] == 2
