"""A tiny metadata-only cache with a monitor attached, and the request steps the directed
monitor tests drive it with (legal runs and directed faults)."""
from __future__ import annotations

import threading

from hicache.monitors.attach import monitor_cache, unmonitored
from hicache.monitors.runtime import VerifyConfig
from hicache.monitors.workload import MemStore
from hicache.runtime.cache import HiCache
from hicache.runtime.config import CacheConfig


def tiny_cache(tmp_path, verify: dict, storage=None, **kw) -> tuple[HiCache, object]:
    """A one-token-page, metadata-only write-through cache and its monitor (VerifyConfig
    fields `verify`, traces under tmp_path); `kw` overrides CacheConfig fields. The cache is
    made unmonitored: the monitor of `verify` alone watches it, whatever mode the test run's
    verified mode attaches (a sample-mode run's monitor would otherwise see a test's fault
    first, and name it by its own checks)."""
    base = dict(page_size=1, device_pages=4, host_pages=8, layers=2, heads=1, head_dim=2, metadata_only=True,
                write_policy="write_through", storage_backup_host_fraction=1.0)
    base.update(kw)
    with unmonitored():
        cache = HiCache(CacheConfig(**base), storage=storage)
    mon = monitor_cache(cache, VerifyConfig(violation_dir=str(tmp_path), **verify))
    return cache, mon


def serve(c: HiCache, toks: list[int]):
    r = c.match(toks)
    c.load_back(r)
    for op in r.loads:
        op.wait()
    have = len(c.prefix_pages(r))
    n = len(r.key) // c.tree.pb
    if n > have:
        c.insert(r, c.alloc(n - have))
    c.finish(r)
    c.drain()
    return r


def to_storage_only(c: HiCache, toks: list[int]) -> None:
    """toks cached in storage only (backed up to host and storage, then dropped from both)."""
    serve(c, toks)
    c.evict_device(c.cfg.device_pages)
    c.evict_host(c.cfg.host_pages)


class SlowStore(MemStore):
    """batch_get blocks until `gate` is set (a backend call still running)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.inside = threading.Event(), threading.Event()

    def batch_get(self, keys):
        self.inside.set()
        assert self.gate.wait(10), "the test never released the backend"
        return super().batch_get(keys)
