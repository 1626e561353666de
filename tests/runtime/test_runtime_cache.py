import pytest
import torch

from runtime_support import Fault, stamp
from runtime_helpers import check_prefix, serve
from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import HostSlotState as S
from hicache.runtime.cache import STOP, HiCache
from hicache.runtime.config import CacheConfig, PrefetchPolicy
from hicache.runtime.events import Recorder
from hicache.runtime.metrics import export_prometheus

PS = 2


_OPEN: list[HiCache] = []


@pytest.fixture(autouse=True)
def _close_caches():
    yield
    while _OPEN:
        cache = _OPEN.pop()
        if cache.storage is not None:
            cache.storage.fault = Fault.NONE
            cache.storage.gate.set()
        cache.close()


def make(storage=None, **kw):
    base = dict(page_size=PS, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2,
                storage_backup_host_fraction=1.0)
    base.update(kw)
    cache = HiCache(CacheConfig(**base), storage=storage)
    _OPEN.append(cache)
    rec = Recorder()
    cache.bus.subscribe(rec)
    return cache, rec


def test_write_through_backs_up_on_insert_and_events_follow_the_protocol():
    cache, rec = make()
    serve(cache, [1, 2, 3, 4])
    cache.drain()
    assert rec.actions() == [A.RequestMatch, A.DeviceInsert, A.BackupStart, A.RequestFinish,
                             A.BackupFinish]
    node = cache.tree.match(cache.match([1, 2, 3, 4]).key).node
    assert cache.host.all_in(node.host, S.SYNCED)
    nb = cache.host_pool.page_nbytes
    for i, s in enumerate(node.host):
        assert torch.equal(cache.host_pool.read_page(s), stamp(node.key, i, nb, PS))
    assert all(isinstance(e.action, A) for e in rec.events)
    assert [e.seq for e in rec.events] == sorted(e.seq for e in rec.events)


def test_write_through_selective_waits_for_the_second_hit():
    cache, rec = make(write_policy="write_through_selective")
    serve(cache, [1, 2, 3, 4])
    cache.drain()
    assert A.BackupStart not in rec.actions()
    serve(cache, [1, 2, 3, 4])
    cache.drain()
    assert rec.actions().count(A.BackupStart) == 1 and cache.tree.host_pages == 2


def test_write_back_copies_only_when_evicting_and_the_host_copy_loads_back():
    cache, rec = make(write_policy="write_back", device_pages=4, host_pages=8)
    serve(cache, [1, 2, 3, 4])
    assert A.BackupStart not in rec.actions()
    serve(cache, [5, 6, 7, 8, 9, 9])     # needs 3 pages: evicts the first prompt to host
    acts = rec.actions()
    i = acts.index(A.DeviceEvict)
    assert acts[i - 2:i + 1] == [A.BackupStart, A.BackupFinish, A.DeviceEvict]
    req = cache.match([1, 2, 3, 4])
    assert (req.device_hit, sum(x.n for x in cache.tree.path(req.node))) == (0, 2)
    op = cache.load_back(req)
    assert op is not None and req.host_hit == 2
    check_prefix(cache, req)              # restored bytes equal what was written
    cache.finish(req)
    cache.drain()


def test_load_back_completes_layer_by_layer_then_finishes():
    cache, rec = make(layers=3, device_pages=2)
    serve(cache, [1, 2, 3, 4])
    cache.drain()
    cache.evict_device(2)                  # both pages leave device; host copy stays
    req = cache.match([1, 2, 3, 4])
    assert req.device_hit == 0
    op = cache.load_back(req)
    for layer in range(3):
        assert op.wait_layer(layer)
    op.wait()
    check_prefix(cache, req)
    assert cache.host.all_in(op.slots, S.PROTECTED)     # read-locked until the ack is popped
    cache.poll()
    assert cache.host.all_in(op.slots, S.SYNCED)
    acts = [a for a in rec.actions() if a in (A.LoadBackStart, A.LoadBackLayer, A.LoadBackFinish)]
    assert acts == [A.LoadBackStart, A.LoadBackLayer, A.LoadBackLayer, A.LoadBackLayer,
                    A.LoadBackFinish]
    layers = [e.args["layer"] for e in rec.events if e.action is A.LoadBackLayer]
    assert layers == [0, 1, 2]
    assert cache.metrics.host_hit_tokens == 4 and cache.metrics.load_tokens == 4
    cache.finish(req)


def _stored_then_forgotten(mem_storage, **kw):
    """A prompt of 4 pages that lives only in storage."""
    cache, rec = make(storage=mem_storage, storage_batch_pages=1, **kw)
    serve(cache, [1, 2, 3, 4, 5, 6, 7, 8])
    cache.drain()
    assert len(mem_storage.data) == 4
    cache.evict_device(4)
    cache.evict_host(8)
    assert cache.tree.host_pages == 0 and cache.tree.device_pages == 0
    return cache, rec


def test_prefetch_restores_bytes_from_storage(mem_storage):
    cache, rec = _stored_then_forgotten(mem_storage, prefetch_policy="wait_complete")
    req = serve(cache, [1, 2, 3, 4, 5, 6, 7, 8], storage=True)   # checks the bytes
    assert req.storage_hit == 4 and cache.metrics.storage_hit_tokens == 8
    assert cache.metrics.prefetch_hit_tokens == 8
    assert [a for a in rec.actions() if a.name.startswith("Prefetch")] == [A.PrefetchStart,
                                                                         A.PrefetchFinish]


@pytest.mark.parametrize("policy, base_s, blocked, fetched", [
    (PrefetchPolicy.BEST_EFFORT, 1.0, True, 0),      # terminates at once
    (PrefetchPolicy.WAIT_COMPLETE, 1.0, True, 4),    # never stops early
    (PrefetchPolicy.TIMEOUT, 0.0, True, 0),          # deadline 0: terminates
    (PrefetchPolicy.TIMEOUT, 60.0, False, 4),        # finishes well before the deadline
])
def test_prefetch_stop_policies(mem_storage, policy, base_s, blocked, fetched):
    cache, rec = _stored_then_forgotten(mem_storage, prefetch_policy=policy,
                                        prefetch_timeout_base_s=base_s,
                                        prefetch_timeout_per_ki_token_s=0.0)
    req = cache.match([1, 2, 3, 4, 5, 6, 7, 8])
    if blocked:
        mem_storage.fault = Fault.BLOCK   # the worker waits inside its first batch
    assert cache.prefetch(req)
    op = req.prefetch
    if policy is not PrefetchPolicy.WAIT_COMPLETE:
        STOP[policy](cache, op)           # the policy's decision, made while blocked
    mem_storage.fault = Fault.NONE
    mem_storage.gate.set()
    op.wait()                             # the worker has ended: the outcome is fixed
    got = cache.finish_prefetch(req)
    assert got == fetched
    assert cache.metrics.prefetch_unfulfilled_tokens == (op.announced - fetched) * PS
    free, tree, inflight = cache.host_partition()
    assert not inflight and len(free) + len(tree) == 8
    cache.finish(req)


@pytest.mark.parametrize("fault", [Fault.RAISE, Fault.NONE_VALUE])
def test_backend_failures_are_misses_and_the_threads_survive(mem_storage, fault):
    cache, rec = _stored_then_forgotten(mem_storage, prefetch_policy="wait_complete")
    mem_storage.fault = fault
    req = cache.match([1, 2, 3, 4, 5, 6, 7, 8])
    assert cache.prefetch(req)
    assert cache.finish_prefetch(req) == 0
    assert cache.metrics.storage_failures >= 1
    cache.finish(req)
    serve(cache, [9, 9, 8, 8])            # a storage backup that fails
    cache.drain()
    assert cache.metrics.storage_backup_failures >= 1
    mem_storage.fault = Fault.NONE       # the same threads serve the next requests
    req = serve(cache, [1, 2, 3, 4, 5, 6, 7, 8], storage=True)
    assert req.storage_hit == 4
    cache.close()


def test_a_hung_backend_never_blocks_the_scheduler(mem_storage):
    cache, rec = _stored_then_forgotten(mem_storage, prefetch_policy="best_effort")
    mem_storage.fault = Fault.BLOCK       # the backend hangs inside batch_exists
    req = cache.match([1, 2, 3, 4, 5, 6, 7, 8])
    assert cache.prefetch(req)
    assert cache.finish_prefetch(req) == 0     # returns although the worker is stuck
    free, tree, inflight = cache.host_partition()
    assert len(inflight) == 4                  # the worker still owns its slots
    assert cache.host.all_in(sorted(inflight), S.RESERVED)
    cache.finish(req)
    mem_storage.fault = Fault.NONE
    mem_storage.gate.set()                     # the backend answers at last
    cache.drain()
    free, tree, inflight = cache.host_partition()
    assert not inflight and len(free) == 8
    assert cache._prefetch_slots == 0
    serve(cache, [1, 2, 3, 4, 5, 6, 7, 8], storage=True)    # and the thread still serves


def test_abort_releases_in_flight_prefetch_slots(mem_storage):
    cache, rec = _stored_then_forgotten(mem_storage)
    mem_storage.fault = Fault.BLOCK
    req = cache.match([1, 2, 3, 4, 5, 6, 7, 8])
    assert cache.prefetch(req)
    free, tree, inflight = cache.host_partition()
    assert len(inflight) == 4
    cache.abort(req)
    mem_storage.fault = Fault.NONE
    mem_storage.gate.set()
    cache.drain()
    free, tree, inflight = cache.host_partition()
    assert not inflight and len(free) == 8 and cache.host.all_in(sorted(free), S.IDLE)
    assert rec.actions().count(A.RequestAbort) == 1
    cache.tree.check()


def test_prefetch_rate_limit_by_in_flight_share(mem_storage):
    cache, rec = _stored_then_forgotten(mem_storage, prefetch_host_fraction=0.25,
                                        prefetch_policy="wait_complete")
    req = cache.match([1, 2, 3, 4, 5, 6, 7, 8])
    mem_storage.fault = Fault.BLOCK
    assert cache.prefetch(req)                     # 2 of 8 slots: the share allowed
    assert len(req.prefetch.slots) == 2
    other = cache.match([1, 2, 3, 4, 5, 6, 7, 8])
    assert not cache.prefetch(other)               # the share is used up
    assert cache.metrics.prefetch_rate_limited == 1
    mem_storage.fault = Fault.NONE
    mem_storage.gate.set()
    assert cache.finish_prefetch(req) == 2
    cache.finish(req)
    cache.finish(other)


def test_storage_backups_in_flight_are_capped(mem_storage):
    cache, rec = make(storage=mem_storage, storage_backup_host_fraction=0.25)
    mem_storage.fault = Fault.BLOCK
    serve(cache, [1, 2, 3, 4])            # 2 pages: within 0.25 * 8 slots
    for op in list(cache.writer.acks):
        op.wait()
    cache.poll()
    serve(cache, [5, 6, 7, 8])            # the backlog would exceed the share: skipped
    for op in list(cache.writer.acks):
        op.wait()
    cache.poll()
    assert cache.metrics.storage_backup_skipped_tokens == 4
    assert rec.actions().count(A.StorageBackupStart) == 1
    mem_storage.fault = Fault.NONE
    mem_storage.gate.set()
    cache.drain()
    assert len(mem_storage.data) == 2


def test_no_listener_means_no_event_work():
    from hicache.monitors.attach import unmonitored
    with unmonitored():        # (what a cache costs with no monitor, under any verified mode)
        cache = HiCache(CacheConfig(page_size=PS, device_pages=4, host_pages=4))
    with cache:
        assert cache.bus.listeners == []
        serve(cache, [1, 2])
        assert cache.bus.seq == 0          # nothing was built or numbered


def test_metrics_count_tiers_and_export():
    cache, rec = make()
    serve(cache, [1, 2, 3, 4])
    serve(cache, [1, 2, 3, 4, 5, 6])
    m = cache.metrics
    assert (m.requests, m.input_tokens, m.device_hit_tokens) == (2, 10, 4)
    assert m.hit_rate == 4 / 10
    pytest.importorskip("prometheus_client")
    reg = export_prometheus(m)
    assert reg.get_sample_value("hicache_device_hit_tokens") == 4.0
    assert reg.get_sample_value("hicache_hit_rate") == 0.4


def test_misuse_of_the_request_api_is_refused_with_the_field_named():
    """Bad arguments from a caller: a clear error naming what is wrong, and the cache's
    accounting untouched (each used to pass silently, or fail deep inside with a bare
    int()/assert message)."""
    c, _ = make(device_pages=8, host_pages=16)
    for tokens, msg in (("abcd", "got a str"), (None, "got a NoneType"), ([1.5, 2.0], "integers"),
                        ([True, False], "integers"), ([[1, 2], [3, 4]], "one sequence")):
        with pytest.raises(TypeError, match=f"^tokens: .*{msg}"):
            c.match(tokens)
    req = c.match(list(range(2 * PS)))     # two pages, nothing cached
    free = c.dev_alloc.free
    for pages, msg in (([100, 101], "100 is not a device page of this pool \\(0..7\\)"),
                       ([-1, 2], "-1 is not a device page"), ([1, 1], "a page is listed twice"),
                       ([True, 3], "True is not a device page"), ([1.0, 3], "1.0 is not a device page"),
                       ([1], "expected 2 new pages, got 1")):
        with pytest.raises(ValueError, match=f"^pages: {msg}"):
            c.insert(req, pages)
    assert c.dev_alloc.free == free and list(c.tree.nodes()) == []     # nothing entered the tree
    with pytest.raises(ValueError, match="^n: must be a non-negative int"):
        c.alloc(-1)
    import numpy as np
    c.insert(req, list(np.array(c.alloc(2))))      # numpy's integers are page ids too
    c.finish(req)
    for again in (c.finish, c.abort, lambda r: c.insert(r, [])):
        with pytest.raises(ValueError, match=f"^request {req.rid} has"):
            again(req)
    assert req.node.lock_ref == 0        # the lock was released once, not twice


def test_a_request_waits_on_a_load_another_request_started_into_its_prefix():
    """r1 matched a prefix held on host only; r2 then loaded it back. r1's prefix listed the
    device pages being filled while r1.loads stayed empty: a scheduler following "wait on
    req.loads" read them before their bytes landed."""
    c = HiCache(CacheConfig(page_size=64, device_pages=40, host_pages=40, layers=16, heads=8, head_dim=128,
                            dtype="float32"))
    toks, big = list(range(128)), [7] * 64 * 30
    serve(c, toks)
    serve(c, big)
    c.drain()
    c.evict_device(40)
    c.drain()
    r1 = c.match(toks)                       # host hit only
    r3 = c.match(big)
    c.load_back(r3)                          # keeps the loader busy
    r2 = c.match(toks)
    op = c.load_back(r2)                     # loads r1's prefix too
    assert op is not None
    assert c.load_back(r1) is None and op in r1.loads
    check_prefix(c, r1)
    for r in (r1, r2, r3):
        c.finish(r)
    c.close()


def test_ended_requests_and_a_closed_cache_start_nothing():
    """A prefetch for a finished request locked its host leaf for good; a load after close()
    was queued to a stopped worker and whoever waited on it hung."""
    from runtime_support import MemStorage
    st = MemStorage()
    cfg = CacheConfig(page_size=2, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2)
    c = HiCache(cfg, storage=st)
    serve(c, list(range(8)))
    r = c.match(list(range(8)))
    c.finish(r)
    for call in (c.prefetch, c.finish_prefetch, c.load_back):
        with pytest.raises(ValueError, match=f"request {r.rid} has already finished or been aborted"):
            call(r)
    c.evict_device(4)
    c.close()
    with pytest.raises(RuntimeError, match="cache is closed: match after close"):
        c.match(list(range(8)))
    with pytest.raises(RuntimeError, match="cache is closed: alloc after close"):
        c.alloc(1)
    with pytest.raises(ValueError, match="n: must be a non-negative int"):
        c.evict_host(-1)
    assert all(x.lock_ref == 0 for x in c.tree.nodes())


def test_close_with_a_prefetch_on_a_backend_that_never_answers_returns():
    """close() joined the prefetch thread, stuck in the backend, forever. It now ends the
    live prefetch as an abort does and waits for storage at most CLOSE_STORAGE_WAIT_S."""
    import time

    from hicache.runtime import cache as cache_mod
    from runtime_support import MemStorage
    st = MemStorage()
    cfg = CacheConfig(page_size=2, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2,
                      storage_backup_host_fraction=1.0)
    with HiCache(cfg, storage=st) as first:
        serve(first, list(range(8)))
    c = HiCache(CacheConfig(page_size=2, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2,
                            prefetch_policy="wait_complete"), storage=st)
    st.fault = Fault.BLOCK
    r = c.match(list(range(8)))
    assert c.prefetch(r)
    assert st.blocked.wait(30)              # the prefetch thread is inside the backend now
    t0 = time.monotonic()
    try:
        c.close()
        took = time.monotonic() - t0
    finally:
        st.gate.set()                       # let the stuck call go (it returns into nothing)
    assert took < cache_mod.CLOSE_STORAGE_WAIT_S + 5
    assert c.metrics.close_abandoned >= 1       # the prefetcher (and the storage backuper, if it was in a call)


def test_a_metadata_only_cache_stores_under_no_real_pages_key(mem_storage):
    """A metadata-only cache writes a one-byte marker per page. Under the real page's key (its
    namespace was the real engine's), a store shared with a real engine kept the marker: the
    real engine's write of the page was skipped as already there, and every later fetch of it
    failed its size check, for good. The marker's namespace is its own now."""
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    marker, _ = make(storage=mem_storage, storage_batch_pages=1, metadata_only=True)
    req = marker.match(tokens)
    marker.insert(req, marker.alloc(4))      # (no bytes to write: metadata only)
    marker.finish(req)
    marker.drain()
    marked = set(mem_storage.data)
    assert len(marked) == 4
    real, _ = make(storage=mem_storage, storage_batch_pages=1)
    serve(real, tokens)
    real.drain()
    assert set(mem_storage.data) - marked and len(mem_storage.data) == 8
    # a fresh real engine is served the real bytes from storage (serve checks them)
    fresh, _ = make(storage=mem_storage, storage_batch_pages=1, prefetch_policy="wait_complete")
    req = serve(fresh, tokens, storage=True)
    assert req.storage_hit == 4 and fresh.metrics.storage_failures == 0


def test_a_stored_page_of_another_size_is_a_counted_corrupt_miss_never_a_hit(tmp_path):
    """The prefetch reads with the pool's page size (`batch_get_sized`): a stored page of
    another size (another pool's layout under the same key) is counted corrupt by the
    backend itself, never a hit, and the fetch stops there with a storage failure."""
    from hicache.storage.file_store import FileStorage

    class Keyed(FileStorage):
        def __init__(self, root):
            super().__init__(root)
            self.keys = []

        def batch_set(self, keys, values):
            self.keys.extend(keys)
            return super().batch_set(keys, values)

    store = Keyed(str(tmp_path))
    cache = HiCache(CacheConfig(page_size=PS, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2,
                                storage_backup_host_fraction=1.0, storage_batch_pages=1,
                                prefetch_policy="wait_complete"), storage=store)
    try:
        serve(cache, [1, 2, 3, 4, 5, 6, 7, 8])
        cache.drain()
        assert len(store.keys) == 4
        cache.evict_device(4)
        cache.evict_host(8)
        # the third page is replaced by one of twice the size
        third = store.keys[2]
        nbytes = cache.host_pool.page_nbytes
        store.path_of(third).unlink()             # (a stored key is never rewritten)
        assert store.batch_set([third], [torch.zeros(2 * nbytes, dtype=torch.uint8)]) == [True]
        before = dict(store.stats())
        req = cache.match([1, 2, 3, 4, 5, 6, 7, 8])
        assert cache.prefetch(req)
        got = cache.finish_prefetch(req)
        after = store.stats()
        assert got == 2                           # the pages before the bad one
        assert after.get("get_corrupt", 0) - before.get("get_corrupt", 0) == 1
        assert after.get("get_hit", 0) - before.get("get_hit", 0) == 2
        assert cache.metrics.storage_failures >= 1
        cache.finish(req)
    finally:
        cache.close()
