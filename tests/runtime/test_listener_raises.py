"""A listener that raises at an event (a verified-mode monitor's violation) stops the call
that emitted it, and leaves the cache usable: no hang, no slot held for good.

Before, an op whose start event raised was recorded (on its nodes, the request's loads or
prefetch, its reserved slots) but never handed to its worker: whoever waited on it later
(an insert of its prefix, a request's read of its loads, a wait_complete prefetch stop) hung,
and its slots stayed reserved. And `poll` popped every finished ack before applying the
first: when applying one raised, the rest were never applied."""
from __future__ import annotations

import threading

import pytest

from runtime_helpers import check_prefix, compute, serve
from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import HostSlotState as S
from hicache.runtime.cache import HiCache
from hicache.runtime.config import CacheConfig

PS = 2
TOKENS = [1, 2, 3, 4, 5, 6, 7, 8]      # 4 pages
BOUND_S = 20.0                         # a call that has not returned by then hangs


class Boom(RuntimeError):
    pass


class RaiseAt:
    """A listener that raises at the first event `action` (and only there)."""

    def __init__(self, action: A) -> None:
        self.action, self.fired = action, 0

    @classmethod
    def on(cls, cache: HiCache, action: A) -> "RaiseAt":
        """One listening on cache's bus (after the listeners it has)."""
        listener = cls(action)
        cache.bus.subscribe(listener)
        return listener

    def __call__(self, action, fields) -> None:
        if action is self.action and not self.fired:
            self.fired += 1
            raise Boom(action.name)


def bounded(fn, *args):
    """fn(*args) on a daemon thread, failing the test if it has not returned in BOUND_S (a
    hang fails the test instead of hanging the suite)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as e:      # noqa: BLE001 - handed to the test thread
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} did not return in {BOUND_S} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.fixture
def caches():
    made = []

    def make(storage=None, **kw):
        base = dict(page_size=PS, device_pages=8, host_pages=16, layers=2, heads=1, head_dim=2,
                    storage_backup_host_fraction=1.0)
        base.update(kw)
        cache = HiCache(CacheConfig(**base), storage=storage)
        made.append(cache)
        return cache
    yield make
    for cache in made:
        if cache.storage is not None:
            cache.storage.gate.set()
        bounded(cache.close)


def in_flight(cache: HiCache) -> set[int]:
    return cache.host_partition()[2]


def test_a_load_whose_start_event_raised_still_loads(caches):
    cache = caches()
    serve(cache, TOKENS)
    cache.drain()
    cache.evict_device(cache.cfg.device_pages)
    raising = RaiseAt.on(cache, A.LoadBackStart)
    req = cache.match(TOKENS)
    with pytest.raises(Boom):
        cache.load_back(req)
    assert raising.fired == 1 and len(req.loads) == 1
    # the request reads what its load brings (it waits on it: before, for good), and a
    # later request of the same prompt is served the bytes
    bounded(check_prefix, cache, req)
    assert len(cache.prefix_pages(req)) == 4
    bounded(cache.finish, req)
    later = bounded(serve, cache, TOKENS)
    assert later.device_hit == 4
    bounded(cache.drain)
    assert not in_flight(cache)


def test_a_backup_whose_start_event_raised_still_backs_up(caches):
    cache = caches()
    raising = RaiseAt.on(cache, A.BackupStart)
    req = cache.match(TOKENS)
    with pytest.raises(Boom):
        compute(cache, req)        # the insert's write-through backup raised at its start
    bounded(cache.drain)
    node = req.node if req.node is not cache.tree.root else None
    cache.finish(req)
    assert raising.fired == 1 and not in_flight(cache)   # before: its slots RESERVED for good
    backed = [x for x in cache.tree.nodes() if x.host is not None]
    assert backed and all(cache.host.all_in(x.host, S.SYNCED) for x in backed)
    assert node is None or node.host is not None


def test_a_storage_backup_whose_start_event_raised_still_stores(caches, mem_storage):
    cache = caches(storage=mem_storage, storage_batch_pages=1)
    raising = RaiseAt.on(cache, A.StorageBackupStart)
    req = cache.match(TOKENS)
    compute(cache, req)
    cache.finish(req)
    with pytest.raises(Boom):
        bounded(cache.drain)      # the backup's finish starts the storage backup
    bounded(cache.drain)
    assert raising.fired == 1 and not in_flight(cache)   # before: its slots in BACKUP for good
    assert len(mem_storage.data) == 4


def test_a_prefetch_whose_start_event_raised_still_fetches(caches, mem_storage):
    cache = caches(storage=mem_storage, storage_batch_pages=1, prefetch_policy="wait_complete")
    serve(cache, TOKENS)
    cache.drain()
    assert len(mem_storage.data) == 4
    cache.evict_device(cache.cfg.device_pages)
    cache.evict_host(cache.cfg.host_pages)
    raising = RaiseAt.on(cache, A.PrefetchStart)
    req = cache.match(TOKENS)
    with pytest.raises(Boom):
        cache.prefetch(req)
    assert raising.fired == 1
    # wait_complete waits for the fetch (before: one never submitted, for good)
    assert bounded(cache.finish_prefetch, req) == 4
    cache.load_back(req, _tier="storage")
    bounded(check_prefix, cache, req)
    assert len(cache.prefix_pages(req)) == 4
    cache.finish(req)
    bounded(cache.drain)
    assert not in_flight(cache)


def test_poll_keeps_the_acks_after_one_whose_apply_raised(caches):
    """Two finished backups; applying the first raises: the second stays queued, and the
    next poll applies it (before, it was popped with the first and never applied)."""
    cache = caches()
    reqs = []
    for tokens in (TOKENS, [9, 10, 11, 12]):
        req = cache.match(tokens)
        assert compute(cache, req)
        cache.finish(req)
        reqs.append(req)
    ops = list(cache.writer.acks)
    assert len(ops) == 2 and all(op.wait(BOUND_S) for op in ops)
    raising = RaiseAt.on(cache, A.BackupFinish)
    with pytest.raises(Boom):
        cache.poll()
    assert raising.fired == 1
    assert list(cache.writer.acks) == ops[1:]
    assert cache.poll() == 1
    assert not cache.writer.acks and not in_flight(cache)
    assert all(x.host is not None and cache.host.all_in(x.host, S.SYNCED) for x in (r.node for r in reqs))


def test_backup_after_close_is_refused(caches):
    cache = caches(write_policy="write_back")
    req = cache.match(TOKENS)
    assert compute(cache, req)
    cache.finish(req)
    node = req.node
    bounded(cache.close)
    with pytest.raises(RuntimeError, match=r"cache is closed: backup after close\(\)"):
        cache.backup(node)
    assert node.host is None and not cache.writer.acks


def test_finish_after_close_on_a_backend_that_never_answers_returns(caches, mem_storage, monkeypatch):
    """close() left the prefetcher behind in a call that never returns; finishing the
    request afterwards applied the wait_complete stop policy, a wait for good. After close
    the prefetch was terminated: the request finishes with what arrived (nothing). And only
    the stuck worker counts as left behind (the idle storage backuper was joined with no time
    left and counted too)."""
    from hicache.runtime import cache as cache_mod
    from runtime_support import Fault
    monkeypatch.setattr(cache_mod, "CLOSE_STORAGE_WAIT_S", 0.2)
    first = caches(storage=mem_storage, storage_batch_pages=1)
    serve(first, TOKENS)
    bounded(first.close)
    cache = caches(storage=mem_storage, storage_batch_pages=1, prefetch_policy="wait_complete")
    mem_storage.fault = Fault.BLOCK
    req = cache.match(TOKENS)
    assert cache.prefetch(req)
    assert mem_storage.blocked.wait(BOUND_S)      # the prefetch thread is inside the backend
    bounded(cache.close)
    assert cache.metrics.close_abandoned == 1
    assert bounded(cache.finish_prefetch, req) == 0
    bounded(cache.finish, req)
    assert req.done


def test_the_bus_lets_go_of_its_lock_when_a_listener_raises():
    """EventBus.publish holds its lock across the listeners' calls: one that raises passes
    its error to the emitter and leaves the lock free, so the next event (from this thread or
    a transfer thread) is delivered, numbered next."""
    from hicache.runtime.events import EventBus, Recorder
    bus, seen = EventBus(), Recorder()
    bus.subscribe(seen)
    bus.subscribe(RaiseAt(A.BackupStart))
    with pytest.raises(Boom):
        bus.publish(A.BackupStart, {"node": 1})
    done = bounded(bus.publish, A.BackupFinish, {"node": 1})
    assert done is None
    assert [(e.action, e.seq) for e in seen.events] == [(A.BackupStart, 1), (A.BackupFinish, 2)]
